/*
Decodes llm.c token files back to text through tokenizer.h and tokens.h, for the round-trip test
in tests/test_tokenizer.sh: decode(val) + decode(train), with the EOT markers removed, must be
the original text, byte for byte.

    gcc -O2 -Wall -Wextra -o build/test_tokenizer_decode tests/unit/test_tokenizer_decode.c
    build/test_tokenizer_decode TOKENIZER.bin [TOKENS.bin ...] > decoded.txt

Validates the tokenizer file and each token file (header, size, every id below the vocab size),
then writes the decoded bytes of all token files, in order, to stdout and a count of tokens and
EOT markers to stderr. Any invalid file: its one-line message on stderr, exit 1. With no token
files it only validates the tokenizer.
*/
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include "../../host/tokenizer.h"
#include "../../host/tokens.h"

// Writes the bytes of every non-EOT token of tf to out. Returns how many EOT markers it skipped.
static size_t decode_without_eot(const Tokenizer *tok, const TokenFile *tf, FILE *out) {
    size_t eot_count = 0;
    for (size_t i = 0; i < tf->ntok; i++) {
        if (tf->tokens[i] == tok->eot_token) { eot_count++; continue; }
        size_t len;
        const char *bytes = tokenizer_decode(tok, tf->tokens[i], &len);
        fwrite(bytes, 1, len, out);
    }
    return eot_count;
}

int main(int argc, char **argv) {
    if (argc < 2) {
        fprintf(stderr, "usage: %s TOKENIZER.bin [TOKENS.bin ...] > decoded.txt\n", argv[0]);
        return 2;
    }
    char err[512];
    Tokenizer tok;
    if (tokenizer_init(&tok, argv[1], err, sizeof err) != 0) {
        fprintf(stderr, "%s\n", err);
        return 1;
    }
    for (int a = 2; a < argc; a++) {
        TokenFile tf;
        if (tokens_open(&tf, argv[a], err, sizeof err) != 0 ||
            tokens_check_below(&tf, tok.vocab_size, err, sizeof err) != 0) {
            fprintf(stderr, "%s\n", err);
            tokens_close(&tf);
            tokenizer_free(&tok);
            return 1;
        }
        size_t eot_count = decode_without_eot(&tok, &tf, stdout);
        fprintf(stderr, "%s: %zu tokens, %zu EOT markers\n", argv[a], tf.ntok, eot_count);
        tokens_close(&tf);
    }
    if (fflush(stdout) != 0) {
        fprintf(stderr, "stdout: write failed\n");
        tokenizer_free(&tok);
        return 1;
    }
    tokenizer_free(&tok);
    return 0;
}
