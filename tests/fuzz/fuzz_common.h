// tests/fuzz/fuzz_common.h: what the libFuzzer harnesses share: the fuzzer's bytes as a file on disk
// (every reader under test takes a path), a one-process engine backend, and the tiny GPT-2 shape
// the seeds and the checkpoint harness use.
#pragma once
#include "../../host/checkpoint.h"
#include "../../host/gpt2.h"
#include "../../observe/zero3_observe.h"
#include <stdint.h>
#include <sys/stat.h>
#include <unistd.h>

// A per-process scratch directory under $FUZZ_SCRATCH (tests/test_fuzz.sh sets it and removes it
// afterwards), else /dev/shm when it exists (the fuzzer rewrites its files thousands of times a
// second), else /tmp.
static const char *fuzz_scratch_dir(void) {
    static char dir[512];
    if (!dir[0]) {
        struct stat st;
        const char *base = getenv("FUZZ_SCRATCH");
        if (!base) base = (stat("/dev/shm", &st) == 0 && S_ISDIR(st.st_mode)) ? "/dev/shm" : "/tmp";
        snprintf(dir, sizeof dir, "%s/zero3_fuzz_%d", base, (int)getpid());
        mkdir(dir, 0700);
    }
    return dir;
}

static int fuzz_write_file(const char *path, const uint8_t *data, size_t size) {
    FILE *f = fopen(path, "wb");
    if (!f) return -1;
    int ok = fwrite(data, 1, size, f) == size;
    return (fclose(f) == 0 && ok) ? 0 : -1;
}

// Writes data to the scratch file `name` and returns its path.
static const char *fuzz_temp_file(const char *name, const uint8_t *data, size_t size) {
    static char path[512];
    snprintf(path, sizeof path, "%s/%s", fuzz_scratch_dir(), name);
    if (fuzz_write_file(path, data, size) != 0) { perror(path); abort(); }
    return path;
}

// A backend for one process that pretends to be rank `rank` of `world`: memory is host memory and
// the only collective the readers call, all_reduce_scalar, returns its input.
static void *fuzz_alloc(void *ctx, size_t bytes) { (void)ctx; void *p = calloc(1, bytes ? bytes : 1); if (!p) abort(); return p; }
static void fuzz_free(void *ctx, void *p) { (void)ctx; free(p); }
static void fuzz_zero(void *ctx, void *p, size_t bytes) { (void)ctx; memset(p, 0, bytes); }
static double fuzz_all_reduce_scalar(void *ctx, double x) { (void)ctx; return x; }
static void fuzz_copy(void *ctx, void *dst, const void *src, size_t bytes) { (void)ctx; memcpy(dst, src, bytes); }
static void fuzz_backend(Zero3Backend *be, int rank, int world) {
    memset(be, 0, sizeof(*be));
    be->rank = rank;
    be->world = world;
    be->alloc = fuzz_alloc;
    be->free = fuzz_free;
    be->zero = fuzz_zero;
    be->all_reduce_scalar = fuzz_all_reduce_scalar;
    be->copy_to_host = fuzz_copy;
    be->copy_to_device = fuzz_copy;
}

// Lays out cfg in z for rank `rank` of `world` at `stage` (no collectives are needed for that).
static void fuzz_engine(Zero3 *z, Zero3Backend *be, const GPT2Config *cfg, int rank, int world, int stage) {
    fuzz_backend(be, rank, world);
    Zero3Config zc = {.stage = stage, .prefetch_depth = 1, .align = 16, .param_type = ZERO3_F32, .grad_type = ZERO3_F32,
                      .reshard_after_forward = 1, .observer = &ZERO3_OBSERVER};
    zero3_init(z, be, &zc);
    gpt2_register_units(cfg, z);
    zero3_allocate(z);
}

// The tiny GPT-2 the seeds are made for: L=1 C=8 NH=2 V=64 (Vp 128) maxT=8, 1,976 parameters.
static GPT2Config fuzz_tiny_config(void) {
    GPT2Config c = {8, 64, 128, 1, 2, 8, 0};
    return c;
}

// Fills an engine's owned master/m/v slices with recognisable values (a checkpoint to read back).
static void fuzz_fill_state(Zero3 *z, const GPT2Config *cfg) {
    gpt2_init_random(cfg, z, 7);
    for (int u = 0; u < z->nunits; u++) {
        float *m = zero3_owned_m(z, u), *v = zero3_owned_v(z, u);
        for (size_t i = 0; i < z->units[u].shard; i++) { m[i] = 0.001f * (float)(i % 97); v[i] = 1e-6f * (float)(i % 89); }
    }
}

// Writes a valid checkpoint of the tiny model, saved on one rank at stage 3, into out_dir
// (out_dir/latest, out_dir/ckpt_00000003_g1/{meta.bin,shard_00000.bin}).
static void fuzz_make_checkpoint(const char *out_dir) {
    GPT2Config cfg = fuzz_tiny_config();
    Zero3Backend be;
    Zero3 z;
    fuzz_engine(&z, &be, &cfg, 0, 1, 3);
    fuzz_fill_state(&z, &cfg);
    CkptMeta m;
    memset(&m, 0, sizeof m);
    m.step = 3; m.world = 1; m.run.stage = 3; m.align = 16; m.cfg = cfg;
    m.run.B = 2; m.run.T = 4; m.A = 1; m.run.tokens_per_step = 8; m.data_window = 3;
    m.sample_rng = 12345; m.run.seed = 1337; m.run.steps = 10; m.run.lr = 3e-4f; m.run.final_frac = 1.0f; m.run.grad_clip = 1.0f;
    char name[CKPT_NAME_MAX];
    mkdir(out_dir, 0755);
    OutputFiles *files = output_files_new();
    ckpt_save(files, out_dir, &m, &z, name);
    output_files_free(files);
    zero3_free(&z);
}
