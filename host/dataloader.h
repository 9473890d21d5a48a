// dataloader.h: the deterministic data order of the contract (docs/DESIGN.md section 3), over an llm.c
// token file read and validated by tokens.h.
//
// A file of ntok tokens holds W = (ntok - 1) / (B*T) windows. Window w starts at token (w mod W)*B*T;
// its inputs are the B*T tokens from there, its targets the B*T tokens one further. The trainer picks
// w: rank r at step s, micro-step k reads w = (s*A + k)*N + r, so N ranks with A micro-steps see
// exactly the tokens one rank would see with N*A micro-steps.
//
// A split shorter than one batch (T+1 <= ntok < B*T+1; a validation split may be, loader_spread)
// is one window whose B rows of T tokens are spread evenly over the file: row b starts at token
// b*(ntok-1-T)/(B-1), so the first row starts at 0, the last ends at the file's last token, every
// target is read at least once and B*T - (ntok-1) of them twice.
#pragma once
#include "tokens.h"

typedef struct {
    TokenFile file;
    size_t ntok;
    int B, T;
    long long nwindows;   // W (1 when spread)
    int spread;           // 1: shorter than one batch, the rows spread over the file (loader_spread)
} DataLoader;

static void loader_close(DataLoader *ld) { tokens_close(&ld->file); }

// loader_open's result when the file is sound but shorter than one batch (B*T+1 tokens)
#define LOADER_SHORT (-2)

// Opens and validates a token file for windows of B*T tokens with ids below V. 0; -1 + err when the
// file cannot be read, is malformed or holds an id >= V; LOADER_SHORT + err when it holds fewer than
// B*T+1 tokens (the loader stays open: loader_spread may still serve it).
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
        return LOADER_SHORT;
    }
    ld->nwindows = (long long)((ld->ntok - 1) / window);
    return 0;
}

// After loader_open returned LOADER_SHORT: serve the file as one window of B rows spread over it
// (the header). 0, or -1 + err when it cannot hold even one row (T+1 tokens; the loader is closed).
static int loader_spread(DataLoader *ld, char *err, size_t errlen) {
    if (ld->ntok < (size_t)ld->T + 1) {
        snprintf(err, errlen, "token file %s: %zu tokens, fewer than T+1 = %d for one sequence", ld->file.path,
                 ld->ntok, ld->T + 1);
        loader_close(ld);
        return -1;
    }
    ld->spread = 1;
    ld->nwindows = 1;
    return 0;
}

// The first token of row b of window w.
static size_t loader_row_start(const DataLoader *ld, long long w, int b) {
    if (ld->spread) return ld->B > 1 ? (size_t)b * (ld->ntok - 1 - ld->T) / (size_t)(ld->B - 1) : 0;
    return (size_t)(w % ld->nwindows) * ld->B * ld->T + (size_t)b * ld->T;
}

// inputs, targets: (B,T) of window w.
static void loader_window(const DataLoader *ld, long long w, int *inputs, int *targets) {
    const int T = ld->T;
    for (int b = 0; b < ld->B; b++) {
        const uint16_t *tok = ld->file.tokens + loader_row_start(ld, w, b);
        for (int t = 0; t < T; t++) {
            inputs[(size_t)b * T + t] = tok[t];
            targets[(size_t)b * T + t] = tok[t + 1];
        }
    }
}

