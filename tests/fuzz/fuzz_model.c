// tests/fuzz/fuzz_model.c: the llm.c model-file reader (gpt2.h): gpt2_read_header, and for a header that
// passes, gpt2_load_owned as one rank of 1..3 (each rank reads only its own slices).
#include "fuzz_common.h"

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
    const char *path = fuzz_temp_file("model.bin", data, size);
    FILE *f = fopen(path, "rb");
    if (!f) abort();
    GPT2Config cfg;
    int elem_bytes;
    char err[512];
    if (gpt2_read_header(f, path, &cfg, &elem_bytes, err, sizeof err) == 0) {
        int world = 1 + (int)(size % 3), rank = world - 1;   // vary the slicing with the input
        Zero3Backend be;
        Zero3 z;
        fuzz_engine(&z, &be, &cfg, rank, world, 3);
        if (gpt2_load_owned(&cfg, &z, f, path, elem_bytes) != 0) abort();   // the header promised the bytes
        zero3_free(&z);
    }
    fclose(f);
    return 0;
}
