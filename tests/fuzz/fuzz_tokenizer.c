// tests/fuzz/fuzz_tokenizer.c: the tokenizer-file reader (tokenizer.h): tokenizer_init, then decode every
// id (and one past the end, which must come back NULL).
#include "fuzz_common.h"
#include "../../host/tokenizer.h"

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
    const char *path = fuzz_temp_file("tokenizer.bin", data, size);
    char err[512];
    Tokenizer t;
    if (tokenizer_init(&t, path, err, sizeof err) == 0) {
        size_t total = 0, len;
        for (uint32_t id = 0; id < t.vocab_size; id++) {
            const char *s = tokenizer_decode(&t, id, &len);
            if (!s || len == 0) abort();
            for (size_t i = 0; i < len; i++) total += (unsigned char)s[i];
        }
        if (tokenizer_decode(&t, t.vocab_size, &len) != NULL) abort();
        (void)total;
        tokenizer_free(&t);
    }
    return 0;
}
