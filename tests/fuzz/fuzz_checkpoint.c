// tests/fuzz/fuzz_checkpoint.c: the checkpoint reader (checkpoint.h). A valid checkpoint of the tiny model
// is made once; each input then replaces one of its files and the reader runs as the resume would:
// ckpt_read_latest, ckpt_meta_read, ckpt_meta_check_model, ckpt_read_state.
//   byte 0, bits 0-1: what the rest of the input is: 0 meta.bin, 1 shard_00000.bin, 2 latest,
//                     3 edits to the valid meta.bin (below)
//           bit 2:     recompute the file's checksums first, so mutations reach the checks behind them
//   byte 1:           the reading engine: world 1..3 (resharding) and stage 0..3
// Edits (mode 3) are 9-byte records: a word index and an int64 value. Index < the meta's word count
// sets that word, 255 appends the value, 254 drops the last word; with bit 2 of byte 0 the layout
// size word is then made to match the file, and the checksum is always recomputed. So the fuzzer
// reaches every range and layout check with a few well-formed changes.
#include "fuzz_common.h"

static char g_good[512];          // the valid checkpoint
static uint8_t *g_meta, *g_shard; // its files
static size_t g_meta_size, g_shard_size;

static uint8_t *slurp(const char *path, size_t *size) {
    FILE *f = fopen(path, "rb");
    if (!f) { perror(path); abort(); }
    long long n = file_size(f);
    uint8_t *buf = malloc((size_t)n + 1);
    if (!read_at(f, 0, buf, (size_t)n)) abort();
    fclose(f);
    *size = (size_t)n;
    return buf;
}

int LLVMFuzzerInitialize(int *argc, char ***argv) {
    (void)argc; (void)argv;
    snprintf(g_good, sizeof g_good, "%s/good", fuzz_scratch_dir());
    fuzz_make_checkpoint(g_good);
    char path[600];
    snprintf(path, sizeof path, "%s/ckpt_00000003_g1/meta.bin", g_good);
    g_meta = slurp(path, &g_meta_size);
    snprintf(path, sizeof path, "%s/ckpt_00000003_g1/shard_00000.bin", g_good);
    g_shard = slurp(path, &g_shard_size);
    return 0;
}

// Makes a mutated file's checksums right again (meta: the last word; shard: the header's last word).
static void fix_checksums(int which, uint8_t *buf, size_t size) {
    if (size < 16 || size % 8 != 0 || which == 2) return;
    if (which == 0) {
        uint64_t h = ckpt_hash(CKPT_HASH_INIT, buf, size - 8);
        memcpy(buf + size - 8, &h, 8);
        return;
    }
    if (size < 8 * S_FIXED_WORDS) return;
    int64_t nunits;
    memcpy(&nunits, buf + 8 * S_NUNITS, 8);
    if (nunits < 1 || nunits > CKPT_MAX_UNITS) return;
    size_t hwords = S_FIXED_WORDS + 3 * (size_t)nunits + 1;
    if (8 * hwords > size) return;
    uint64_t h = ckpt_hash(CKPT_HASH_INIT, buf, (hwords - 1) * 8);
    memcpy(buf + (hwords - 1) * 8, &h, 8);
}

// Mode 3: the valid meta.bin's words (checksum dropped), edited by the records, checksum appended.
static uint8_t *edited_meta(const uint8_t *rec, size_t n, int fix_layout, size_t *out_size) {
    size_t words = g_meta_size / 8 - 1, cap = words + n / 9 + 1;
    int64_t *w = calloc(cap + 1, sizeof(int64_t));
    memcpy(w, g_meta, words * 8);
    for (size_t i = 0; i + 9 <= n; i += 9) {
        int64_t value;
        memcpy(&value, rec + i + 1, 8);
        if (rec[i] < words) w[rec[i]] = value;
        else if (rec[i] == 255) w[words++] = value;
        else if (rec[i] == 254 && words > 0) words--;
    }
    if (fix_layout && words > M_FIXED_WORDS) w[M_LAYOUT_WORDS] = (int64_t)(words - M_FIXED_WORDS);
    uint64_t h = ckpt_hash(CKPT_HASH_INIT, w, words * 8);
    memcpy(w + words, &h, 8);
    *out_size = (words + 1) * 8;
    return (uint8_t *)w;
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
    if (size < 2) return 0;
    int which = data[0] & 3, fix = data[0] & 4, world = 1 + data[1] % 3, stage = (data[1] / 3) % 4;
    uint8_t *file;
    if (which == 3) {   // edits to meta.bin: from here on it is the meta case
        file = edited_meta(data + 2, size - 2, fix, &size);
        size += 2;
        which = 0;
    } else {
        file = malloc(size);
        memcpy(file, data + 2, size - 2);
        if (fix) fix_checksums(which, file, size - 2);
    }
    // a fresh output directory: the good files, one of them replaced by the input
    char dir[512], ckpt[600];
    snprintf(dir, sizeof dir, "%s/run", fuzz_scratch_dir());
    snprintf(ckpt, sizeof ckpt, "%s/ckpt_00000003_g1", dir);
    mkdir(dir, 0755);
    mkdir(ckpt, 0755);
    char path[700];
    snprintf(path, sizeof path, "%s/latest", dir);
    if (which == 2) fuzz_write_file(path, file, size - 2);
    else fuzz_write_file(path, (const uint8_t *)"ckpt_00000003_g1\n", 17);
    snprintf(path, sizeof path, "%s/meta.bin", ckpt);
    fuzz_write_file(path, which == 0 ? file : g_meta, which == 0 ? size - 2 : g_meta_size);
    snprintf(path, sizeof path, "%s/shard_00000.bin", ckpt);
    fuzz_write_file(path, which == 1 ? file : g_shard, which == 1 ? size - 2 : g_shard_size);
    free(file);

    // the resume, step by step (ckpt_load_latest would exit on the first error)
    GPT2Config cfg = fuzz_tiny_config();
    Zero3Backend be;
    Zero3 z;
    fuzz_engine(&z, &be, &cfg, world - 1, world, stage);
    char name[CKPT_NAME_MAX], err[1024], cdir[800];
    CkptMeta m;
    if (ckpt_read_latest(dir, name, err, sizeof err) == 0) {
        snprintf(cdir, sizeof cdir, "%s/%s", dir, name);
        snprintf(path, sizeof path, "%s/meta.bin", cdir);
        if (ckpt_meta_read(path, &m, err, sizeof err) == 0) {
            if (ckpt_meta_check_model(&m, &cfg, &z, cdir, err, sizeof err) == 0) ckpt_read_state(cdir, &m, &cfg, &z, err, sizeof err);
            ckpt_meta_free(&m);
        }
    } else if (which != 2) abort();   // the good `latest` must read
    zero3_free(&z);
    return 0;
}
