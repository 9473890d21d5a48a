// tests/fuzz/fuzz_dump.c: the PyTorch activation-dump reader (dump.h): dump_open, then every record's
// data read in full (so ASan sees any record that points past the buffer).
#include "fuzz_common.h"
#include "../dump.h"

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
    const char *path = fuzz_temp_file("ref.dump", data, size);
    char err[512];
    Dump d;
    if (dump_open(&d, path, err, sizeof err) == 0) {
        double sum = 0.0;
        for (int k = 0; k < d.num_records; k++) {
            const DumpRecord *r = &d.records[k];
            for (size_t i = 0; i < r->numel; i++) sum += r->f ? (double)r->f[i] : (double)r->i[i];
            if (dump_find(&d, r->name) == NULL) abort();
        }
        (void)sum;
        dump_free(&d);
    }
    return 0;
}
