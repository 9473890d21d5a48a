/*
GPT-2 tokenizer for decoding: token id -> its bytes. Header-only, C and C++ (nvcc) alike.

Reads llm.c's tokenizer file, written by data/tinyshakespeare.py:
    header: 256 uint32: [0] magic 20240328, [1] version 2, [2] vocab size V, [3] EOT token id
    then for each token id 0..V-1: one uint8 length L (1..255) and L raw bytes
A token's bytes are not always whole characters: GPT-2 works on UTF-8 bytes, so one character
can be split over two tokens. Decoding a sequence is concatenating the bytes of its tokens.

Every check failure returns an error code and a one-line message; the caller decides how to die.

    Tokenizer tok;
    char err[256];
    if (tokenizer_init(&tok, "data/tinyshakespeare/gpt2_tokenizer.bin", err, sizeof err) != 0) {
        fprintf(stderr, "%s\n", err); exit(1);
    }
    size_t len; const char *s = tokenizer_decode(&tok, 464, &len);   // "The", len 3
    tokenizer_free(&tok);
*/
#ifndef TOKENIZER_H
#define TOKENIZER_H

#include <stdarg.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <errno.h>
#include <sys/stat.h>
#include "readfile.h"

#define TOKENIZER_MAGIC 20240328
#define TOKENIZER_VERSION 2
#define TOKENIZER_HEADER_BYTES (256 * sizeof(uint32_t))
// GPT-2 has 50,257 tokens; anything beyond a few million is a corrupt header, not a vocabulary.
#define TOKENIZER_MAX_VOCAB (1u << 22)

typedef struct {
    uint32_t vocab_size;   // V
    uint32_t eot_token;    // <|endoftext|>, 50256 for GPT-2
    char *bytes;           // every token's bytes, each followed by a NUL (so it prints as a string)
    uint32_t *offsets;     // (V+1,) token i is bytes[offsets[i]] .. bytes[offsets[i+1]-2], then NUL
} Tokenizer;

static inline void tokenizer_free(Tokenizer *t) {
    free(t->bytes);
    free(t->offsets);
    memset(t, 0, sizeof(*t));
}

// The header: magic, version, vocabulary size and EOT token into t. 0, or -1 with a message.
static inline int tokenizer_read_header(Tokenizer *t, const char *path, const unsigned char *file, size_t size,
                                        char *err, size_t errlen) {
    uint32_t header[256];
    if (size < TOKENIZER_HEADER_BYTES)
        return read_fail(err, errlen, "%s: %zu bytes, shorter than the %zu-byte header",
                         path, size, (size_t)TOKENIZER_HEADER_BYTES);
    memcpy(header, file, TOKENIZER_HEADER_BYTES);  // the file is little-endian, as is the host
    if (header[0] != TOKENIZER_MAGIC)
        return read_fail(err, errlen, "%s: bad magic %u (want %u): not a tokenizer file",
                         path, header[0], TOKENIZER_MAGIC);
    if (header[1] != TOKENIZER_VERSION)
        return read_fail(err, errlen, "%s: version %u, want %u (regenerate with data/tinyshakespeare.py)",
                         path, header[1], TOKENIZER_VERSION);
    t->vocab_size = header[2];
    t->eot_token = header[3];
    if (t->vocab_size == 0 || t->vocab_size > TOKENIZER_MAX_VOCAB)
        return read_fail(err, errlen, "%s: vocab size %u outside 1..%u", path, t->vocab_size,
                         TOKENIZER_MAX_VOCAB);
    if (t->eot_token >= t->vocab_size)
        return read_fail(err, errlen, "%s: EOT token %u is not below the vocab size %u",
                         path, t->eot_token, t->vocab_size);
    return 0;
}

// The (length, bytes) records after the header, walked once to check each fits, then copied out
// NUL-terminated. Each record costs 1 + L file bytes and L + 1 table bytes, so the table is
// body-sized. 0, or -1 with a message.
static inline int tokenizer_read_tokens(Tokenizer *t, const char *path, const unsigned char *body, size_t body_size,
                                        char *err, size_t errlen) {
    t->offsets = (uint32_t *)malloc(((size_t)t->vocab_size + 1) * sizeof(uint32_t));
    t->bytes = (char *)malloc(body_size > 0 ? body_size : 1);
    if (t->offsets == NULL || t->bytes == NULL)
        return read_fail(err, errlen, "%s: out of memory for %u tokens", path, t->vocab_size);
    size_t pos = 0;  // read position in body; also the write position in t->bytes
    for (uint32_t id = 0; id < t->vocab_size; id++) {
        if (pos >= body_size)
            return read_fail(err, errlen, "%s: file ends at token %u of %u (truncated)",
                             path, id, t->vocab_size);
        size_t len = body[pos];
        if (len == 0) return read_fail(err, errlen, "%s: token %u has length 0", path, id);
        if (pos + 1 + len > body_size)
            return read_fail(err, errlen, "%s: token %u (%zu bytes) runs past the end of the file (truncated)",
                             path, id, len);
        t->offsets[id] = (uint32_t)pos;
        memcpy(t->bytes + pos, body + pos + 1, len);
        t->bytes[pos + len] = '\0';
        pos += 1 + len;
    }
    t->offsets[t->vocab_size] = (uint32_t)pos;
    if (pos != body_size)
        return read_fail(err, errlen, "%s: %zu bytes of trailing garbage after the last token",
                         path, body_size - pos);
    return 0;
}

// Loads and validates the tokenizer file. Returns 0 on success; on failure returns -1, writes a
// one-line message naming the file into err, and leaves t zeroed (tokenizer_free is still safe).
static inline int tokenizer_init(Tokenizer *t, const char *path, char *err, size_t errlen) {
    memset(t, 0, sizeof(*t));
    unsigned char *file = NULL;
    size_t size = 0;
    if (read_whole_file(path, "tokenizer file", &file, &size, err, errlen) != 0) { return -1; }
    int rc = tokenizer_read_header(t, path, file, size, err, errlen);
    if (rc == 0)
        rc = tokenizer_read_tokens(t, path, file + TOKENIZER_HEADER_BYTES, size - TOKENIZER_HEADER_BYTES, err, errlen);
    free(file);
    if (rc != 0) { tokenizer_free(t); }
    return rc;
}

// Returns the bytes of token id (NUL-terminated, but may also contain NULs: use *len), and sets
// *len (when given) to their count. Returns NULL, *len 0, for an id outside the vocabulary.
static inline const char *tokenizer_decode(const Tokenizer *t, uint32_t id, size_t *len) {
    if (id >= t->vocab_size) {
        if (len != NULL) { *len = 0; }
        return NULL;
    }
    size_t start = t->offsets[id];
    if (len != NULL) { *len = t->offsets[id + 1] - start - 1; }
    return t->bytes + start;
}

// Writes token id to f for a human to read: like llm.c's safe_printf, a token that is a single
// non-printing byte (a control character other than newline and tab) is dropped so it cannot
// garble the terminal. Bytes of multi-byte characters are written as they are.
static inline void tokenizer_print(const Tokenizer *t, uint32_t id, FILE *f) {
    size_t len;
    const char *s = tokenizer_decode(t, id, &len);
    if (s == NULL) { return; }
    if (len == 1) {
        unsigned char c = (unsigned char)s[0];
        int printable = (c >= 32 && c != 127) || c == '\n' || c == '\t';
        if (!printable) { return; }
    }
    fwrite(s, 1, len, f);
}

#endif // TOKENIZER_H
