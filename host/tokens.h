/*
Reader for llm.c's token files (data/tinyshakespeare.py writes them). Header-only, C and C++.

    header: 256 int32: [0] magic 20240520, [1] version 1, [2] ntok
    then ntok uint16 token ids, little-endian; file size is exactly 1024 + 2*ntok bytes

tokens_open loads the whole file (tinyshakespeare is 0.6 MB; a data set too big for memory
would want mmap instead) after checking the header against the file size, so a truncated or
padded file is caught before training reads garbage. tokens_check_below then checks every id
against the model's vocabulary, so an embedding lookup can never index past wte.

    TokenFile train;
    char err[256];
    if (tokens_open(&train, "data/tinyshakespeare/tiny_shakespeare_train.bin", err, sizeof err) != 0 ||
        tokens_check_below(&train, 50257, err, sizeof err) != 0) {
        fprintf(stderr, "%s\n", err); exit(1);
    }
    ... train.tokens[0 .. train.ntok-1] ...
    tokens_close(&train);
*/
#ifndef TOKENS_H
#define TOKENS_H

#include <stdarg.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <errno.h>
#include <sys/stat.h>
#include "readfile.h"

#define TOKENS_MAGIC 20240520
#define TOKENS_VERSION 1
#define TOKENS_HEADER_BYTES (256 * sizeof(int32_t))

typedef struct {
    char path[512];     // for error messages further on (the data loader names the file)
    uint16_t *tokens;   // (ntok,)
    size_t ntok;
} TokenFile;

static inline void tokens_close(TokenFile *tf) {
    free(tf->tokens);
    memset(tf, 0, sizeof(*tf));
}

// Opens, validates and loads a token file. Returns 0 on success; on failure returns -1, writes a
// one-line message naming the file into err, and leaves tf zeroed (tokens_close is still safe).
static inline int tokens_open(TokenFile *tf, const char *path, char *err, size_t errlen) {
    memset(tf, 0, sizeof(*tf));
    snprintf(tf->path, sizeof(tf->path), "%s", path);
    char why[128];
    FILE *f = open_regular_file(path, why, sizeof why);   // never blocks (a FIFO is refused)
    if (f == NULL) {
        return read_fail(err, errlen, "%s: cannot open token file (%s)", path, why);
    }
    struct stat st;
    if (fstat(fileno(f), &st) != 0) {
        fclose(f);
        return read_fail(err, errlen, "%s: cannot open token file (%s)", path, strerror(errno));
    }
    size_t size = (size_t)st.st_size;
    if (size < TOKENS_HEADER_BYTES) {
        fclose(f);
        return read_fail(err, errlen, "%s: %zu bytes, shorter than the %zu-byte header",
                            path, size, (size_t)TOKENS_HEADER_BYTES);
    }
    int32_t header[256];
    if (fread(header, sizeof(int32_t), 256, f) != 256) {
        fclose(f);
        return read_fail(err, errlen, "%s: cannot read the header", path);
    }
    int rc = 0;
    if (header[0] != TOKENS_MAGIC) {
        // llm.c's 20240801 files hold uint32 tokens (LLaMA 3); this project is GPT-2 only
        rc = read_fail(err, errlen, "%s: bad magic %d (want %d): not a GPT-2 token file",
                          path, header[0], TOKENS_MAGIC);
    } else if (header[1] != TOKENS_VERSION) {
        rc = read_fail(err, errlen, "%s: version %d, want %d", path, header[1], TOKENS_VERSION);
    } else if (header[2] <= 0) {
        rc = read_fail(err, errlen, "%s: header says %d tokens, need at least 1", path, header[2]);
    } else if (size != TOKENS_HEADER_BYTES + 2 * (size_t)header[2]) {
        rc = read_fail(err, errlen, "%s: %zu bytes, but the header's %d tokens need %zu (truncated or padded)",
                          path, size, header[2], TOKENS_HEADER_BYTES + 2 * (size_t)header[2]);
    }
    if (rc != 0) {
        fclose(f);
        return rc;
    }
    tf->ntok = (size_t)header[2];
    tf->tokens = (uint16_t *)malloc(tf->ntok * sizeof(uint16_t));
    if (tf->tokens == NULL) {
        fclose(f);
        tokens_close(tf);
        return read_fail(err, errlen, "%s: out of memory for %d tokens", path, header[2]);
    }
    size_t got = fread(tf->tokens, sizeof(uint16_t), tf->ntok, f);
    fclose(f);
    if (got != tf->ntok) {
        size_t want = tf->ntok;
        tokens_close(tf);
        return read_fail(err, errlen, "%s: read %zu of %zu tokens", path, got, want);
    }
    return 0;
}

// Checks that every token id is below limit (the model's vocab size V). Returns 0, or -1 with a
// message giving the first offending position and id.
static inline int tokens_check_below(const TokenFile *tf, uint32_t limit, char *err, size_t errlen) {
    for (size_t i = 0; i < tf->ntok; i++) {
        if (tf->tokens[i] >= limit) {
            return read_fail(err, errlen, "%s: token %zu is id %u, not below the vocab size %u",
                                tf->path, i, (unsigned)tf->tokens[i], limit);
        }
    }
    return 0;
}

#endif // TOKENS_H
