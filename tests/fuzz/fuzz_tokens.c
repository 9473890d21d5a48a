// tests/fuzz/fuzz_tokens.c: the token-file reader (tokens.h) and the data loader over it (dataloader.h):
// tokens_open, tokens_check_below, loader_open (and loader_spread when the file is shorter than a
// batch), and a few windows read.
#include "fuzz_common.h"
#include "../../host/dataloader.h"

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
    const char *path = fuzz_temp_file("tokens.bin", data, size);
    char err[512];
    DataLoader ld;
    int B = 1 + (int)(size % 3), T = 1 + (int)(size % 5);
    int rc = loader_open(&ld, path, B, T, 50257, err, sizeof err);
    if (rc == LOADER_SHORT) rc = loader_spread(&ld, err, sizeof err);
    if (rc == 0) {
        int *inputs = malloc(sizeof(int) * B * T), *targets = malloc(sizeof(int) * B * T);
        for (long long w = 0; w < 4; w++) {
            loader_window(&ld, w * 7919, inputs, targets);
            for (int i = 0; i < B * T; i++) if (inputs[i] >= 50257 || targets[i] >= 50257) abort();
        }
        free(inputs);
        free(targets);
        loader_close(&ld);
    }
    return 0;
}
