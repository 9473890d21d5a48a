// dataloader.h: the deterministic data order of the contract (docs/DESIGN.md section 3), over an llm.c
// token file read and validated by tokens.h.
//
// A file of ntok tokens holds W = (ntok - 1) / (B*T) windows. Window w starts at token (w mod W)*B*T;
// its inputs are the B*T tokens from there, its targets the B*T tokens one further. The trainer picks
// w: rank r at step s, micro-step k reads w = (s*A + k)*N + r, so N ranks with A micro-steps see
// exactly the tokens one rank would see with N*A micro-steps.
#pragma once
#include "tokens.h"

typedef struct {
    TokenFile file;
    size_t ntok;
    int B, T;
    long long nwindows;   // W
} DataLoader;

// Opens and validates a token file for windows of B*T tokens with ids below V. 0 or -1 + err.
static int loader_open(DataLoader *ld, const char *path, int B, int T, int V, char *err, size_t errlen) {
    memset(ld, 0, sizeof(*ld));
    if (tokens_open(&ld->file, path, err, errlen) != 0) return -1;
    if (tokens_check_below(&ld->file, V, err, errlen) != 0) { tokens_close(&ld->file); return -1; }
    ld->ntok = ld->file.ntok;
    ld->B = B;
    ld->T = T;
    size_t window = (size_t)B * (size_t)T;
    if (ld->ntok < window + 1) {
        snprintf(err, errlen, "token file %s: %zu tokens, fewer than B*T+1 = %zu for one batch", path, ld->ntok, window + 1);
        tokens_close(&ld->file);
        return -1;
    }
    ld->nwindows = (long long)((ld->ntok - 1) / window);
    return 0;
}

// inputs, targets: (B,T) of window w.
static void loader_window(const DataLoader *ld, long long w, int *inputs, int *targets) {
    size_t window = (size_t)ld->B * ld->T;
    size_t start = (size_t)(w % ld->nwindows) * window;
    const uint16_t *tok = ld->file.tokens + start;
    for (size_t i = 0; i < window; i++) {
        inputs[i] = tok[i];
        targets[i] = tok[i + 1];
    }
}

static void loader_close(DataLoader *ld) { tokens_close(&ld->file); }
