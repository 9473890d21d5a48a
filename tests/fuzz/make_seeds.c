// tests/fuzz/make_seeds.c: writes a small valid input for every harness into DIR/<harness>/ (the seed
// corpus tests/test_fuzz.sh starts from): a tiny model file (fp32 and bf16), token files, a
// tokenizer, an activation dump, and checkpoint files with their selector bytes.
//   usage: make_seeds DIR
#include "fuzz_common.h"
#include "../dump.h"
#include "../../host/tokenizer.h"
#include "../../host/tokens.h"

static void put(const char *dir, const char *name, const void *data, size_t size) {
    char path[1024];
    snprintf(path, sizeof path, "%s/%s", dir, name);
    if (fuzz_write_file(path, data, size) != 0) { perror(path); exit(1); }
}
static void subdir(char *out, size_t n, const char *root, const char *name) {
    snprintf(out, n, "%s/%s", root, name);
    mkdir(out, 0755);
}

static void seed_models(const char *root) {
    char dir[900];
    subdir(dir, sizeof dir, root, "model");
    GPT2Config c = fuzz_tiny_config();
    size_t n = gpt2_num_parameters(&c);
    for (int version = 3; version <= 5; version += 2) {
        size_t elem = version == 3 ? 4 : 2, size = 1024 + n * elem;
        unsigned char *buf = calloc(1, size);
        gpt2_write_header((int32_t *)buf, &c, version);
        for (size_t i = 0; i < n; i++) {
            float v = 0.02f * normal_at(1, i);
            if (version == 3) memcpy(buf + 1024 + 4 * i, &v, 4);
            else { uint16_t b = f32_to_bf16(v); memcpy(buf + 1024 + 2 * i, &b, 2); }
        }
        put(dir, version == 3 ? "tiny_fp32.bin" : "tiny_bf16.bin", buf, size);
        free(buf);
    }
}

static void seed_tokens(const char *root) {
    char dir[900];
    subdir(dir, sizeof dir, root, "tokens");
    int32_t h[256 + 64] = {0};
    h[0] = TOKENS_MAGIC; h[1] = TOKENS_VERSION; h[2] = 128;
    uint16_t *tok = (uint16_t *)(h + 256);
    for (int i = 0; i < 128; i++) tok[i] = (uint16_t)(i * 397 % 50257);
    put(dir, "tokens128.bin", h, sizeof h);
    h[2] = 3;
    put(dir, "tokens3.bin", h, 1024 + 6);
}

static void seed_tokenizer(const char *root) {
    char dir[900];
    subdir(dir, sizeof dir, root, "tokenizer");
    unsigned char buf[1024 + 64 * 4];
    uint32_t h[256] = {0};
    h[0] = TOKENIZER_MAGIC; h[1] = TOKENIZER_VERSION; h[2] = 64; h[3] = 63;
    memcpy(buf, h, 1024);
    size_t pos = 1024;
    for (int id = 0; id < 64; id++) {
        int len = 1 + id % 3;
        buf[pos++] = (unsigned char)len;
        for (int k = 0; k < len; k++) buf[pos++] = (unsigned char)('a' + (id + k) % 26);
    }
    put(dir, "tok64.bin", buf, pos);
}

static void seed_dump(const char *root) {
    char dir[900];
    subdir(dir, sizeof dir, root, "dump");
    unsigned char buf[1024 + 2 * DUMP_RECORD_HEADER_BYTES + 4 * 8 + 4 * 2] = {0};
    int32_t h[256] = {0};
    h[0] = DUMP_MAGIC; h[1] = DUMP_VERSION;
    int fields[13] = {2, 4, 1, 8, 2, 64, 128, 8, 1, 2, 0, 1337, 64};   // B T L C NH V Vp maxT nsteps records warmup seed bits
    for (int k = 0; k < 13; k++) h[2 + k] = fields[k];
    float hyper[7] = {3e-4f, 1.0f, 0.0f, 1.0f, 0.9f, 0.95f, 1e-8f};
    memcpy(h + 16, hyper, sizeof hyper);
    memcpy(buf, h, 1024);
    size_t pos = 1024;
    // record "logits": float32 (2,4); record "targets": int32 (2,)
    const char *names[2] = {"logits", "targets"};
    int dtypes[2] = {DUMP_FLOAT32, DUMP_INT32}, ndims[2] = {2, 1}, dims[2][4] = {{2, 4, 0, 0}, {2, 0, 0, 0}};
    for (int r = 0; r < 2; r++) {
        snprintf((char *)buf + pos, DUMP_NAME_BYTES, "%s", names[r]);
        int32_t meta[6] = {dtypes[r], ndims[r], dims[r][0], dims[r][1], dims[r][2], dims[r][3]};
        memcpy(buf + pos + DUMP_NAME_BYTES, meta, sizeof meta);
        pos += DUMP_RECORD_HEADER_BYTES;
        int numel = r == 0 ? 8 : 2;
        for (int i = 0; i < numel; i++) {
            if (r == 0) { float v = 0.5f * i; memcpy(buf + pos, &v, 4); }
            else { int32_t v = i; memcpy(buf + pos, &v, 4); }
            pos += 4;
        }
    }
    put(dir, "tiny.dump", buf, pos);
}

static void seed_checkpoint(const char *root) {
    char dir[900], good[1000], path[1200];
    subdir(dir, sizeof dir, root, "checkpoint");
    snprintf(good, sizeof good, "%s/zero3_seed_ckpt_%d", fuzz_scratch_dir(), (int)getpid());
    fuzz_make_checkpoint(good);
    const char *files[3] = {"ckpt_00000003_g1/meta.bin", "ckpt_00000003_g1/shard_00000.bin", "latest"};
    for (int which = 0; which < 3; which++) {
        snprintf(path, sizeof path, "%s/%s", good, files[which]);
        FILE *f = fopen(path, "rb");
        if (!f) { perror(path); exit(1); }
        long long n = file_size(f);
        unsigned char *buf = malloc((size_t)n + 2);
        if (!read_at(f, 0, buf + 2, (size_t)n)) exit(1);
        fclose(f);
        for (int variant = 0; variant < 2; variant++) {   // read back on 1 rank at stage 3 / 2 ranks at stage 1
            buf[0] = (unsigned char)which;
            buf[1] = variant == 0 ? 9 : 4;
            char name[64];
            snprintf(name, sizeof name, "file%d_engine%d", which, variant);
            put(dir, name, buf, (size_t)n + 2);
        }
        free(buf);
    }
    // mode 3 seeds: no edit, and one edit setting the step (word 3) to 5
    unsigned char edits[2 + 9] = {3 | 4, 9, 3, 5, 0, 0, 0, 0, 0, 0, 0};
    put(dir, "edits_none", edits, 2);
    put(dir, "edits_step", edits, sizeof edits);
    // a block unit claiming 17 tensors (one more than a unit may hold), with the words to fill them:
    // the layout check must refuse it before the tensor arrays overflow. The block unit's tensor
    // count is word 32 (layout start) + 2 + 2*2 (the embedding unit) + 1 = 39.
    unsigned char too_many[2 + 9 * 13] = {3 | 4, 9, 39, 17};
    for (int i = 1; i < 13; i++) too_many[2 + 9 * i] = 255;
    put(dir, "edits_17_tensors", too_many, sizeof too_many);
}

int main(int argc, char **argv) {
    if (argc != 2) { fprintf(stderr, "usage: %s DIR\n", argv[0]); return 1; }
    mkdir(argv[1], 0755);
    seed_models(argv[1]);
    seed_tokens(argv[1]);
    seed_tokenizer(argv[1]);
    seed_dump(argv[1]);
    seed_checkpoint(argv[1]);
    return 0;
}
