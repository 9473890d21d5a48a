// host/checkpoint.c: sharded checkpoints: meta.bin and shard_<r>.bin writers and validating
// readers, resharding on load, `latest` and the keep-two policy (see checkpoint.h).
#include "checkpoint.h"
#include "fileio.h"
#include "readfile.h"
#include <dirent.h>
#include <fcntl.h>
#include <signal.h>
#include <sys/stat.h>
#include <unistd.h>

// Copies between the engine's memory (device memory on the GPU) and host staging buffers.
static void be_to_host(const Zero3 *z, void *dst, const void *src, size_t bytes) { z->be->copy_to_host(z->be->ctx, dst, src, bytes); }
static void be_to_device(const Zero3 *z, void *dst, const void *src, size_t bytes) { z->be->copy_to_device(z->be->ctx, dst, src, bytes); }

void ckpt_meta_free(CkptMeta *m) {
    free(m->units);
    m->units = NULL;
}

// FNV-1a over 32-bit words: any single changed word changes the result (each step is a bijection).
uint64_t ckpt_hash(uint64_t h, const void *data, size_t bytes) {
    const unsigned char *p = (const unsigned char *)data;
    for (size_t i = 0; i + 4 <= bytes; i += 4) {
        uint32_t w;
        memcpy(&w, p + i, 4);
        h = (h ^ w) * 0x100000001b3ull;
    }
    return h;
}

static int64_t double_bits(double x) { int64_t b; memcpy(&b, &x, 8); return b; }
static double bits_double(int64_t b) { double x; memcpy(&x, &b, 8); return x; }

static int write_words(FILE *f, const int64_t *w, size_t n) { return fwrite(w, 8, n, f) == n; }

// ------------------------------------------------------------------------------------------------
// The meta file

// The layout of the engine's units, as meta.bin stores it.
static void ckpt_layout_from_engine(const Zero3 *z, CkptMeta *m) {
    m->nunits = z->nunits;
    m->units = (CkptUnit *)xcalloc((size_t)z->nunits, sizeof(CkptUnit));
    for (int u = 0; u < z->nunits; u++) {
        const Zero3Unit *U = &z->units[u];
        m->units[u].padded = (long long)U->padded;
        m->units[u].ntensors = U->ntensors;
        for (int i = 0; i < U->ntensors; i++) {
            m->units[u].offset[i] = (long long)U->tensors[i].offset;
            m->units[u].numel[i] = (long long)U->tensors[i].numel;
        }
    }
}

// Where meta.bin keeps each flag the table of flags records (cli.c, .recorded): the file format's
// own placement. A recorded flag with no word here is a format without room for it (fatal).
static const struct { const char *flag; int word; } META_FLAG_WORDS[] = {
    {"-b", M_B}, {"-t", M_T}, {"-d", M_TOKENS_PER_STEP}, {"-x", M_TOTAL_STEPS}, {"-u", M_WARMUP}, {"-l", M_LR},
    {"-q", M_FINAL_FRAC}, {"-c", M_WEIGHT_DECAY}, {"-gc", M_GRAD_CLIP}, {"-z", M_STAGE}, {"-S", M_SEED},
    {"-p", M_PRECISION}};

static int meta_flag_word(const Flag *f) {
    for (size_t i = 0; i < sizeof META_FLAG_WORDS / sizeof META_FLAG_WORDS[0]; i++)
        if (!strcmp(META_FLAG_WORDS[i].flag, f->name)) return META_FLAG_WORDS[i].word;
    fatal_local("checkpoint: flag %s is recorded (cli.c) but meta.bin has no word for it (checkpoint.c)", f->name);
}

// A recorded flag as its word: integers as they are, reals as their double's bits.
static int64_t meta_flag_value(const Flag *f, const TrainArgs *a) {
    return args_flag_is_real(f) ? double_bits(args_flag_real(f, a)) : (int64_t)args_flag_int(f, a);
}
static void meta_flag_take(const Flag *f, TrainArgs *a, int64_t word) {
    if (args_flag_is_real(f)) args_flag_set_real(f, a, bits_double(word));
    else args_flag_set_int(f, a, word);
}

static size_t ckpt_layout_words(const CkptMeta *m) {
    size_t n = 0;
    for (int u = 0; u < m->nunits; u++) n += 2 + 2 * (size_t)m->units[u].ntensors;
    return n;
}

static int ckpt_meta_write(OutputFiles *files, const char *path, const CkptMeta *m, char *err, size_t errlen) {
    size_t layout = ckpt_layout_words(m), total = M_FIXED_WORDS + layout + 1;
    int64_t *w = (int64_t *)xcalloc(total, sizeof(int64_t));
    const GPT2Config *c = &m->cfg;
    w[M_MAGIC] = CKPT_META_MAGIC; w[M_VERSION] = CKPT_VERSION; w[M_HEADER_WORDS] = M_FIXED_WORDS;
    w[M_RANKS] = m->ranks;
    w[M_STEP] = m->step; w[M_WORLD] = m->world; w[M_ALIGN] = m->align;
    w[M_MAXT] = c->max_seq_len; w[M_V] = c->vocab_size; w[M_VP] = c->padded_vocab_size;
    w[M_L] = c->num_layers; w[M_NH] = c->num_heads; w[M_C] = c->channels;
    w[M_A] = m->A;
    w[M_DATA_WINDOW] = m->data_window; w[M_SAMPLE_RNG] = (int64_t)m->sample_rng;
    w[M_GENERATION] = m->generation;
    for (int i = 0; i < ARGS_NFLAGS; i++)
        if (ARGS_FLAGS[i].recorded) w[meta_flag_word(&ARGS_FLAGS[i])] = meta_flag_value(&ARGS_FLAGS[i], &m->run);
    w[M_NUNITS] = m->nunits; w[M_LAYOUT_WORDS] = (int64_t)layout;
    size_t k = M_FIXED_WORDS;
    for (int u = 0; u < m->nunits; u++) {
        w[k++] = m->units[u].padded;
        w[k++] = m->units[u].ntensors;
        for (int i = 0; i < m->units[u].ntensors; i++) { w[k++] = m->units[u].offset[i]; w[k++] = m->units[u].numel[i]; }
    }
    w[k] = (int64_t)ckpt_hash(CKPT_HASH_INIT, w, k * 8);
    char tmp[4200];
    FILE *f = output_begin(files, path, tmp, sizeof tmp, err, errlen);
    int rc = -1;
    if (f && !write_words(f, w, total)) {
        set_err(err, errlen, "%s: write failed (%s)", tmp, strerror(errno));
        output_abandon(files, f, tmp);
    } else if (f) rc = commit_file(files, f, tmp, path, err, errlen);
    free(w);
    return rc;
}

// Checks one unit's stored layout: tensors in order, inside the unit, not overlapping, and the
// unit divides into `world` equal shards.
static const char *ckpt_unit_problem(const CkptUnit *U, int world) {
    if (U->ntensors < 1 || U->ntensors > ZERO3_MAX_TENSORS) return "a unit's tensor count is out of range";
    if (U->padded < 1 || U->padded > (1ll << 40)) return "a unit's size is out of range";
    if (U->padded % world != 0) return "a unit's size is not a multiple of N";
    long long end = 0;
    for (int i = 0; i < U->ntensors; i++) {
        if (U->offset[i] < end || U->numel[i] < 1 || U->numel[i] > U->padded ||
            U->offset[i] > U->padded - U->numel[i])
            return "tensors overlap or lie outside their unit";
        end = U->offset[i] + U->numel[i];
    }
    return NULL;
}

// meta.bin's words (*words, allocated once the header is sane): the header's fixed checks, the
// size it implies, the checksum. NULL, or what is wrong.
static const char *meta_read_words(FILE *f, int64_t **words) {
    long long size = file_size(f);
    int64_t h[M_FIXED_WORDS];
    const char *problem = NULL;
    if (size < (long long)sizeof(h) || !read_at(f, 0, h, sizeof(h))) problem = "too short for its header";
    else if (h[M_MAGIC] != CKPT_META_MAGIC) problem = "bad magic (not a checkpoint meta.bin)";
    else if (h[M_VERSION] != CKPT_VERSION) problem = "unsupported version";
    else if (h[M_HEADER_WORDS] != M_FIXED_WORDS) problem = "bad header size";
    else if (h[M_NUNITS] < 1 || h[M_NUNITS] > CKPT_MAX_UNITS) problem = "unit count out of range";
    else if (h[M_LAYOUT_WORDS] < 2 * h[M_NUNITS] || h[M_LAYOUT_WORDS] > (2 + 2 * ZERO3_MAX_TENSORS) * h[M_NUNITS])
        problem = "layout size out of range";
    else if (size != 8 * (M_FIXED_WORDS + h[M_LAYOUT_WORDS] + 1)) problem = "file size does not match its header (truncated?)";
    if (problem) return problem;
    size_t total = (size_t)(size / 8);
    int64_t *w = *words = (int64_t *)xmalloc((size_t)size);
    if (!read_at(f, 0, w, (size_t)size)) return "read failed";
    if ((uint64_t)w[total - 1] != ckpt_hash(CKPT_HASH_INIT, w, (total - 1) * 8)) return "checksum mismatch (corrupt)";
    return NULL;
}

// The run's fields from the words into m, each checked against its range and the others.
static const char *meta_take_fields(const int64_t *w, CkptMeta *m) {
    const char *problem = NULL;
    m->ranks = w[M_RANKS] ? (int)w[M_RANKS] : (int)w[M_WORLD];
    m->step = (int)w[M_STEP]; m->world = (int)w[M_WORLD]; m->align = (int)w[M_ALIGN];
    GPT2Config *c = &m->cfg;
    c->max_seq_len = (int)w[M_MAXT]; c->vocab_size = (int)w[M_V]; c->padded_vocab_size = (int)w[M_VP];
    c->num_layers = (int)w[M_L]; c->num_heads = (int)w[M_NH]; c->channels = (int)w[M_C];
    m->A = (int)w[M_A];
    m->data_window = w[M_DATA_WINDOW];
    m->sample_rng = (uint64_t)w[M_SAMPLE_RNG]; m->generation = w[M_GENERATION];
    for (int i = 0; i < ARGS_NFLAGS; i++)
        if (ARGS_FLAGS[i].recorded) meta_flag_take(&ARGS_FLAGS[i], &m->run, w[meta_flag_word(&ARGS_FLAGS[i])]);
    m->nunits = (int)w[M_NUNITS];
    const int64_t big = 1ll << 40;
    if (w[M_STEP] < 0 || w[M_STEP] > 100000000) problem = "step out of range";
    else if (w[M_WORLD] < 1 || w[M_WORLD] > CKPT_MAX_WORLD) problem = "N out of range";
    else if (w[M_STAGE] < 0 || w[M_STAGE] > 3) problem = "stage out of range";
    else if (w[M_ALIGN] < 1 || w[M_ALIGN] > (1 << 20)) problem = "alignment out of range";
    else if (w[M_MAXT] != c->max_seq_len || w[M_V] != c->vocab_size || w[M_VP] != c->padded_vocab_size ||
             w[M_L] != c->num_layers || w[M_NH] != c->num_heads || w[M_C] != c->channels ||
             gpt2_config_problem(c))
        problem = "model config out of range";
    else if (m->nunits < 3) problem = "fewer units than embedding, a block and head";
    else if (w[M_B] < 1 || w[M_B] > (1 << 20) || w[M_T] < 1 || w[M_T] > (1 << 20) || w[M_A] < 1 ||
             w[M_A] > 1000000 || w[M_TOKENS_PER_STEP] < 1 || w[M_TOKENS_PER_STEP] > big ||
             w[M_DATA_WINDOW] < 0 || w[M_DATA_WINDOW] > big || w[M_GENERATION] < 1 || w[M_GENERATION] > big ||
             w[M_TOTAL_STEPS] < 0 || w[M_TOTAL_STEPS] > 100000000 || w[M_WARMUP] < 0 || w[M_WARMUP] > 100000000)
        problem = "run fields out of range";
    // the batch and the data position follow from the rest (the data order of the contract):
    // checked, so a wrong value cannot pass unnoticed
    else if (m->ranks < m->world || m->ranks > CKPT_MAX_WORLD || m->ranks % m->world != 0)
        problem = "ranks are not a multiple of the shard world";
    else if ((double)m->ranks * w[M_A] * w[M_B] * w[M_T] != (double)w[M_TOKENS_PER_STEP])
        problem = "tokens per step is not N*A*B*T";
    else if ((double)w[M_STEP] * w[M_A] * m->ranks != (double)w[M_DATA_WINDOW])
        problem = "data position is not step*A*N (the next training window)";
    return problem;
}

// The unit layout (m->units allocated) and the -wrap granularity it implies.
static const char *meta_take_layout(const int64_t *w, CkptMeta *m) {
    const char *problem = NULL;
    m->units = (CkptUnit *)xcalloc((size_t)m->nunits, sizeof(CkptUnit));
    size_t k = M_FIXED_WORDS, end = M_FIXED_WORDS + (size_t)w[M_LAYOUT_WORDS];
    for (int u = 0; u < m->nunits && !problem; u++) {
        CkptUnit *U = &m->units[u];
        if (k + 2 > end) { problem = "layout runs past its size"; break; }
        U->padded = w[k++];
        long long nt = w[k++];
        if (nt < 1 || nt > ZERO3_MAX_TENSORS || k + 2 * (size_t)nt > end) { problem = "bad tensor count in the layout"; break; }
        U->ntensors = (int)nt;
        for (int i = 0; i < U->ntensors; i++) { U->offset[i] = w[k++]; U->numel[i] = w[k++]; }
        problem = ckpt_unit_problem(U, m->world);
    }
    if (!problem && k != end) problem = "layout size does not match its units";
    // the granularity it was written with (-wrap), read back from the layout
    if (!problem && (m->cfg.wrap = gpt2_wrap_of_layout(m->cfg.num_layers, m->nunits, m->units[1].ntensors)) == -1)
        problem = "the unit layout is not one of GPT-2's granularities";
    for (int u = 0; u < m->nunits && !problem; u++)
        if (m->units[u].ntensors != gpt2_unit_ntensors(&m->cfg, u)) problem = "a unit's tensor count does not match its granularity";
    return problem;
}

// Reads and validates meta.bin on its own terms (magic, version, size, checksum, ranges, layout).
// 0 on success (m->units allocated), or -1 with a message.
int ckpt_meta_read(const char *path, CkptMeta *m, char *err, size_t errlen) {
    memset(m, 0, sizeof(*m));
    char why[128];
    FILE *f = open_regular_file(path, why, sizeof why);
    if (!f) { set_err(err, errlen, "checkpoint file %s: cannot open (%s)", path, why); return -1; }
    int64_t *w = NULL;
    const char *problem = meta_read_words(f, &w);
    fclose(f);
    if (!problem) problem = meta_take_fields(w, m);
    if (!problem) problem = meta_take_layout(w, m);
    free(w);
    if (problem) {
        set_err(err, errlen, "checkpoint file %s: %s", path, problem);
        ckpt_meta_free(m);
        return -1;
    }
    return 0;
}

// Can this model (already laid out in z) take the checkpoint's state? Only the shape matters:
// N, stage and alignment may differ (resharding). 0, or -1 with a message.
int ckpt_meta_check_model(const CkptMeta *m, const GPT2Config *c, const Zero3 *z, const char *path,
                                 char *err, size_t errlen) {
    const GPT2Config *s = &m->cfg;
    if (s->max_seq_len != c->max_seq_len || s->vocab_size != c->vocab_size || s->padded_vocab_size != c->padded_vocab_size ||
        s->num_layers != c->num_layers || s->num_heads != c->num_heads || s->channels != c->channels) {
        set_err(err, errlen, "checkpoint %s holds a model L=%d C=%d NH=%d V=%d maxT=%d, but -e gives L=%d C=%d NH=%d V=%d "
                 "maxT=%d: resume with the same model shape", path, s->num_layers, s->channels, s->num_heads,
                 s->vocab_size, s->max_seq_len, c->num_layers, c->channels, c->num_heads, c->vocab_size, c->max_seq_len);
        return -1;
    }
    // tensor by tensor, wherever each sits in either layout (the granularity may differ)
    for (int u = 0; u < z->nunits; u++)
        for (int i = 0; i < z->units[u].ntensors; i++) {
            int kind, layer, uo, io;
            gpt2_unit_tensor(c, u, i, &kind, &layer);
            gpt2_tensor_unit(&m->cfg, kind, layer, &uo, &io);
            if (m->units[uo].numel[io] != (long long)z->units[u].tensors[i].numel) {
                set_err(err, errlen, "checkpoint %s: tensor %s of unit %s has %lld elements, the model's has %zu", path,
                         z->units[u].tensors[i].name, z->units[u].name, m->units[uo].numel[io], z->units[u].tensors[i].numel);
                return -1;
            }
        }
    return 0;
}

// ------------------------------------------------------------------------------------------------
// Shard files

// Where this rank's copy of array a of unit u starts (fp32, in the engine's memory), and the range
// of unit coordinates its optimizer state covers there: the owned slice, or the whole unit where the
// optimizer is FULL (DDP, a persistent unit: full master weights and moments on every rank).
static float *ckpt_engine_array(Zero3 *z, int u, int a, size_t *begin, size_t *count) {
    float *owned = a == CKPT_MASTER ? zero3_owned_master(z, u) : a == CKPT_M ? zero3_owned_m(z, u) : zero3_owned_v(z, u);
    size_t owned_begin = zero3_owned_begin(z, u);
    zero3_optimizer_range(z, u, begin, count);
    return owned - (owned_begin - *begin);
}

static void shard_path(char *buf, size_t n, const char *ckpt_dir, int rank) {
    fmt_path(buf, n, "%s/shard_%05d.bin", ckpt_dir, rank);
}

// Writes this rank's shard file: the owned slice of master, m, v of every unit, checksummed.
static int ckpt_shard_write(OutputFiles *files, const char *ckpt_dir, const CkptMeta *m, Zero3 *z, char *err, size_t errlen) {
    char path[4096], tmp[4200];
    shard_path(path, sizeof path, ckpt_dir, z->rank);
    size_t hwords = S_FIXED_WORDS + 3 * (size_t)z->nunits + 1;
    int64_t *h = (int64_t *)xcalloc(hwords, sizeof(int64_t));
    h[S_MAGIC] = CKPT_SHARD_MAGIC; h[S_VERSION] = CKPT_VERSION; h[S_HEADER_WORDS] = (int64_t)hwords;
    h[S_RANK] = z->rank; h[S_WORLD] = z->world; h[S_STEP] = m->step; h[S_GENERATION] = m->generation;
    h[S_NUNITS] = z->nunits; h[S_TOTAL_SHARD] = (int64_t)z->totals.shard;
    float *stage_buf = (float *)xmalloc(CKPT_CHUNK * sizeof(float));
    FILE *f = output_begin(files, path, tmp, sizeof tmp, err, errlen);
    int ok = f != NULL && write_words(f, h, hwords);   // checksums filled in below, header rewritten
    for (int u = 0; u < z->nunits && ok; u++) {
        size_t S = z->units[u].shard;
        for (int a = 0; a < CKPT_NARRAYS && ok; a++) {
            size_t begin, count;
            const float *array = ckpt_engine_array(z, u, a, &begin, &count);   // sets begin: a statement of its own
            const float *src = array + (zero3_owned_begin(z, u) - begin);
            uint64_t hash = CKPT_HASH_INIT;
            for (size_t done = 0; done < S && ok; done += CKPT_CHUNK) {
                size_t n = S - done < CKPT_CHUNK ? S - done : CKPT_CHUNK;
                be_to_host(z, stage_buf, src + done, n * sizeof(float));
                hash = ckpt_hash(hash, stage_buf, n * sizeof(float));
                ok = fwrite(stage_buf, sizeof(float), n, f) == n;
            }
            h[S_FIXED_WORDS + 3 * u + a] = (int64_t)hash;
        }
    }
    if (ok) {
        h[hwords - 1] = (int64_t)ckpt_hash(CKPT_HASH_INIT, h, (hwords - 1) * 8);
        ok = fseek(f, 0, SEEK_SET) == 0 && write_words(f, h, hwords);
    }
    free(h);
    free(stage_buf);
    if (!f) return -1;
    if (!ok) { set_err(err, errlen, "%s: write failed (%s)", tmp, strerror(errno)); output_abandon(files, f, tmp); return -1; }
    return commit_file(files, f, tmp, path, err, errlen);
}

// A piece of a tensor that this rank needs: `count` elements at old unit coordinate `old_pos`
// that go to new unit coordinate `new_pos`.
typedef struct { size_t old_pos, new_pos, count; int tensor; } CkptPiece;

// The pieces of unit u that the new range [begin, begin+count) needs, in old coordinates.
static int ckpt_unit_pieces(const GPT2Config *c, const CkptMeta *m, const Zero3 *z, int u, int uo, size_t begin,
                            size_t count, CkptPiece *out) {
    const Zero3Unit *U = &z->units[u];
    const CkptUnit *old = &m->units[uo];
    int n = 0;
    for (int i = 0; i < U->ntensors; i++) {
        const Zero3Tensor *T = &U->tensors[i];
        int kind, layer, tu, ti;   // the tensor, and where the checkpoint's layout has it
        gpt2_unit_tensor(c, u, i, &kind, &layer);
        gpt2_tensor_unit(&m->cfg, kind, layer, &tu, &ti);
        if (tu != uo) continue;
        size_t lo = T->offset > begin ? T->offset : begin;
        size_t hi = T->offset + T->numel < begin + count ? T->offset + T->numel : begin + count;
        if (lo >= hi) continue;
        out[n].old_pos = (size_t)old->offset[ti] + (lo - T->offset);
        out[n].new_pos = lo;
        out[n].count = hi - lo;
        out[n].tensor = i;
        n++;
    }
    return n;
}

// The old ranks whose slices [q*S_old, (q+1)*S_old) hold any of the pieces: q_lo..q_hi. Returns 0
// when there are no pieces (the range holds only padding).
static int ckpt_pieces_ranks(const CkptPiece *p, int np, size_t S_old, int *q_lo, int *q_hi) {
    if (np == 0) return 0;
    size_t lo = p[0].old_pos, hi = p[0].old_pos + p[0].count;
    for (int i = 1; i < np; i++) {
        if (p[i].old_pos < lo) lo = p[i].old_pos;
        if (p[i].old_pos + p[i].count > hi) hi = p[i].old_pos + p[i].count;
    }
    *q_lo = (int)(lo / S_old);
    *q_hi = (int)((hi - 1) / S_old);
    return 1;
}

// Reads and checks old rank q's shard header. Returns the open file, or NULL with a message.
static FILE *ckpt_shard_open(const char *ckpt_dir, const CkptMeta *m, int q, size_t total_shard, long long *data_at,
                             uint64_t *hashes, char *err, size_t errlen) {
    char path[4096];
    shard_path(path, sizeof path, ckpt_dir, q);
    char why[128];
    FILE *f = open_regular_file(path, why, sizeof why);
    if (!f) { set_err(err, errlen, "checkpoint file %s: cannot open (%s)", path, why); return NULL; }
    size_t hwords = S_FIXED_WORDS + 3 * (size_t)m->nunits + 1;
    int64_t *h = (int64_t *)xcalloc(hwords, sizeof(int64_t));
    long long size = file_size(f);
    long long expect = 8 * (long long)hwords + 12 * (long long)total_shard;
    const char *problem = NULL;
    if (size < 8 * (long long)hwords || !read_at(f, 0, h, hwords * 8)) problem = "too short for its header";
    else if (h[S_MAGIC] != CKPT_SHARD_MAGIC) problem = "bad magic (not a checkpoint shard)";
    else if (h[S_VERSION] != CKPT_VERSION) problem = "unsupported version";
    else if (h[S_HEADER_WORDS] != (int64_t)hwords || h[S_NUNITS] != m->nunits) problem = "unit count differs from meta.bin";
    else if ((uint64_t)h[hwords - 1] != ckpt_hash(CKPT_HASH_INIT, h, (hwords - 1) * 8)) problem = "header checksum mismatch (corrupt)";
    else if (h[S_RANK] != q || h[S_WORLD] != m->world) problem = "rank or N differs from its name and meta.bin";
    else if (h[S_STEP] != m->step || h[S_GENERATION] != m->generation) problem = "belongs to a different checkpoint than meta.bin";
    else if (h[S_TOTAL_SHARD] != (int64_t)total_shard) problem = "shard size differs from meta.bin's layout";
    else if (size != expect) problem = "file size does not match its header (truncated?)";
    if (problem) {
        set_err(err, errlen, "checkpoint file %s: %s", path, problem);
        free(h);
        fclose(f);
        return NULL;
    }
    for (int i = 0; i < 3 * m->nunits; i++) hashes[i] = (uint64_t)h[S_FIXED_WORDS + i];
    *data_at = 8 * (long long)hwords;
    free(h);
    return f;
}

// Streams array a of unit u from old rank q's file (S_old elements at file offset `at`), checks its
// checksum, and copies the parts that fall inside the pieces into the engine at dst (which holds
// new unit coordinates from dst_begin on). Every value copied must be finite: -3 (and *bad, the
// piece's tensor, *bad_value) when one is not, -2 on a checksum mismatch, -1 on a failed read.
static int ckpt_stream_array(const Zero3 *z, FILE *f, long long at, size_t S_old, size_t old_lo, uint64_t want, const CkptPiece *p,
                             int np, float *dst, size_t dst_begin, float *buf, int *bad, float *bad_value) {
    *bad = -1;
    uint64_t hash = CKPT_HASH_INIT;
    if (fseeko(f, (off_t)at, SEEK_SET) != 0) return -1;
    for (size_t done = 0; done < S_old; done += CKPT_CHUNK) {
        size_t n = S_old - done < CKPT_CHUNK ? S_old - done : CKPT_CHUNK;
        if (fread(buf, sizeof(float), n, f) != n) return -1;
        hash = ckpt_hash(hash, buf, n * sizeof(float));
        size_t lo = old_lo + done, hi = lo + n;   // old unit coordinates in buf
        for (int i = 0; i < np; i++) {
            size_t a = p[i].old_pos > lo ? p[i].old_pos : lo;
            size_t b = p[i].old_pos + p[i].count < hi ? p[i].old_pos + p[i].count : hi;
            if (a >= b) continue;
            size_t new_pos = p[i].new_pos + (a - p[i].old_pos);
            for (size_t k = a - lo; k < b - lo && *bad < 0; k++)
                if (!isfinite(buf[k])) { *bad = p[i].tensor; *bad_value = buf[k]; }
            be_to_device(z, dst + (new_pos - dst_begin), buf + (a - lo), (b - a) * sizeof(float));
        }
    }
    return hash != want ? -2 : *bad >= 0 ? -3 : 0;
}

// Fills this rank's master, m and v (the ranges its stage keeps) from the checkpoint in ckpt_dir,
// written on m->world ranks with m's layout. Padding is zeroed. 0, or -1 with a message.
// What ckpt_read_state carries from unit to unit: the checkpoint, the destination, the old
// shards' layout and checksums, the one shard file open at a time, a staging buffer.
typedef struct {
    const char *ckpt_dir;
    const CkptMeta *m;          // the checkpoint's layout (old N)
    const GPT2Config *c;        // this run's model (its -wrap may differ)
    Zero3 *z;                   // this run's engine (new N)
    size_t *old_offset;         // [nunits+1]: unit u's block in every old file starts at 12 * old_offset[u]
    uint64_t *hashes;           // [3 * nunits] the checksums of the old arrays, from the open shard's header
    float *buf;                 // CKPT_CHUNK floats
    CkptPiece pieces[ZERO3_MAX_TENSORS];
    FILE *f;                    // old rank open_q's shard file, or NULL
    int open_q;
    long long data_at;          // where its data starts
    char *err;
    size_t errlen;
} CkptReader;

// The destination zeroed first: padding is not in any piece.
static void ckpt_zero_state(Zero3 *z) {
    for (int u = 0; u < z->nunits; u++)
        for (int a = 0; a < CKPT_NARRAYS; a++) {
            size_t begin, count;
            float *dst = ckpt_engine_array(z, u, a, &begin, &count);
            z->be->zero(z->be->ctx, dst, count * sizeof(float));
        }
}

// The checkpoint's units that hold unit u's tensors (the same unit unless -wrap changed), into
// sources; returns how many.
static int ckpt_source_units(const CkptReader *R, int u, int sources[ZERO3_MAX_TENSORS]) {
    int nsources = 0;
    for (int i = 0; i < R->z->units[u].ntensors; i++) {
        int kind, layer, uo, io, seen = 0;
        gpt2_unit_tensor(R->c, u, i, &kind, &layer);
        gpt2_tensor_unit(&R->m->cfg, kind, layer, &uo, &io);
        for (int j = 0; j < nsources; j++) seen |= sources[j] == uo;
        if (!seen) sources[nsources++] = uo;
    }
    return nsources;
}

// Old rank q's shard file, opened unless it is the one open already. 0, or -1 with a message.
static int ckpt_reader_open(CkptReader *R, int q) {
    if (q == R->open_q) return 0;
    if (R->f) fclose(R->f);
    R->open_q = q;
    R->f = ckpt_shard_open(R->ckpt_dir, R->m, q, R->old_offset[R->m->nunits], &R->data_at, R->hashes, R->err, R->errlen);
    return R->f ? 0 : -1;
}

// The three arrays (master, m, v) of old unit uo in old rank q's file: the np pieces of them that
// fall in this rank's slice of unit u. 0, or -1 with a message naming the file.
static int ckpt_read_arrays(CkptReader *R, int u, int uo, int q, size_t S_old, int np) {
    Zero3 *z = R->z;
    for (int a = 0; a < CKPT_NARRAYS; a++) {
        size_t begin, count;
        float *dst = ckpt_engine_array(z, u, a, &begin, &count);
        long long at = R->data_at + 4 * (long long)(3 * R->old_offset[uo] + (size_t)a * S_old);
        int bad;
        float bad_value = 0.0f;
        int r = ckpt_stream_array(z, R->f, at, S_old, (size_t)q * S_old, R->hashes[3 * uo + a], R->pieces, np, dst, begin,
                                  R->buf, &bad, &bad_value);
        if (r == 0) continue;
        char path[4096];
        shard_path(path, sizeof path, R->ckpt_dir, q);
        if (r == -3)
            set_err(R->err, R->errlen, "checkpoint file %s: %s of tensor %s in unit %s holds %g: the state must be finite",
                    path, CKPT_ARRAY_NAMES[a], z->units[u].tensors[bad].name, z->units[u].name, bad_value);
        else
            set_err(R->err, R->errlen, "checkpoint file %s: %s of unit %s: %s", path, CKPT_ARRAY_NAMES[a],
                    z->units[u].name, r == -1 ? "read failed" : "checksum mismatch (corrupt)");
        return -1;
    }
    return 0;
}

// Unit u of this run from old unit uo: from each old rank whose slice overlaps what this rank keeps.
static int ckpt_read_unit(CkptReader *R, int u, int uo) {
    size_t S_old = (size_t)(R->m->units[uo].padded / R->m->world), begin, count;
    ckpt_engine_array(R->z, u, CKPT_MASTER, &begin, &count);
    int np = ckpt_unit_pieces(R->c, R->m, R->z, u, uo, begin, count, R->pieces), q_lo, q_hi;
    if (!ckpt_pieces_ranks(R->pieces, np, S_old, &q_lo, &q_hi)) return 0;
    for (int q = q_lo; q <= q_hi; q++)
        if (ckpt_reader_open(R, q) || ckpt_read_arrays(R, u, uo, q, S_old, np)) return -1;
    return 0;
}

int ckpt_read_state(const char *ckpt_dir, const CkptMeta *m, const GPT2Config *c, Zero3 *z, char *err, size_t errlen) {
    CkptReader R = {ckpt_dir, m, c, z, NULL, NULL, NULL, {{0}}, NULL, -1, 0, err, errlen};
    // old shard offsets: unit u's block in every old file starts at 12 * (sum of earlier S_old)
    R.old_offset = (size_t *)xcalloc((size_t)m->nunits + 1, sizeof(size_t));
    for (int u = 0; u < m->nunits; u++) R.old_offset[u + 1] = R.old_offset[u] + (size_t)(m->units[u].padded / m->world);
    R.hashes = (uint64_t *)xcalloc(3 * (size_t)m->nunits, sizeof(uint64_t));
    R.buf = (float *)xmalloc(CKPT_CHUNK * sizeof(float));
    ckpt_zero_state(z);
    // unit by unit, each from the old ranks whose slices overlap what this rank keeps now (the same
    // rank's file alone when N is unchanged); one shard file is open at a time
    int rc = 0;
    for (int u = 0; u < z->nunits && rc == 0; u++) {
        int sources[ZERO3_MAX_TENSORS], nsources = ckpt_source_units(&R, u, sources);
        for (int si = 0; si < nsources && rc == 0; si++) rc = ckpt_read_unit(&R, u, sources[si]);
    }
    if (R.f) fclose(R.f);
    free(R.old_offset);
    free(R.hashes);
    free(R.buf);
    return rc;
}

// ------------------------------------------------------------------------------------------------
// The checkpoint directory: naming, `latest`, keeping the last two.


// Parses a run of decimal digits at *p (at most 12) into *out and advances *p. 0 on success.
static int ckpt_parse_digits(const char **p, long long *out) {
    long long v = 0;
    int n = 0;
    while (**p >= '0' && **p <= '9' && n < 12) { v = v * 10 + (**p - '0'); (*p)++; n++; }
    *out = v;
    return (n == 0 || (**p >= '0' && **p <= '9')) ? -1 : 0;
}

// A checkpoint directory's name: ckpt_<step, at least 8 digits>_g<generation>, e.g. ckpt_00000010_g3.
// Never a path. 0 on success.
static int ckpt_parse_name(const char *name, int *step, long long *gen) {
    long long s;
    const char *p = name;
    if (strncmp(p, "ckpt_", 5) != 0) return -1;
    p += 5;
    if (ckpt_parse_digits(&p, &s) != 0 || s > 100000000 || strncmp(p, "_g", 2) != 0) return -1;
    p += 2;
    if (ckpt_parse_digits(&p, gen) != 0 || *gen < 1 || *p != '\0') return -1;
    *step = (int)s;
    return 0;
}

// Reads OUT/latest into name. 0 on success, 1 when there is no such file, -1 (message) when it is bad.
int ckpt_read_latest(const char *out_dir, char *name, char *err, size_t errlen) {
    char path[4096];
    fmt_path(path, sizeof path, "%s/latest", out_dir);
    char why[128];
    FILE *f = open_regular_file(path, why, sizeof why);   // a FIFO named latest is refused, not waited on
    if (!f) {
        if (errno == ENOENT) return 1;
        set_err(err, errlen, "%s: cannot open (%s)", path, why);
        return -1;
    }
    char line[CKPT_NAME_MAX + 2] = {0};
    size_t n = fread(line, 1, sizeof(line) - 1, f);
    fclose(f);
    if (n > 0 && line[n - 1] == '\n') line[--n] = '\0';
    int step;
    long long gen;
    if (n == 0 || strlen(line) != n || ckpt_parse_name(line, &step, &gen) != 0) {
        set_err(err, errlen, "%s: does not name a checkpoint directory (expected one line like ckpt_00000010_g1)", path);
        return -1;
    }
    fmt_path(name, CKPT_NAME_MAX, "%s", line);
    return 0;
}

// Deletes a checkpoint directory: the files in it, then the directory.
static void ckpt_remove_dir(const char *dir) {
    DIR *d = opendir(dir);
    if (!d) return;
    struct dirent *e;
    char path[4200];
    while ((e = readdir(d)) != NULL) {
        if (!strcmp(e->d_name, ".") || !strcmp(e->d_name, "..")) continue;
        fmt_path(path, sizeof path, "%s/%s", dir, e->d_name);
        remove(path);
    }
    closedir(d);
    rmdir(dir);
}

// Keeps the newest two checkpoints (`keep_a`, `keep_b`) and deletes every other ckpt_* directory,
// including half-written ones a crash left behind.
static void ckpt_prune(const char *out_dir, const char *keep_a, const char *keep_b) {
    DIR *d = opendir(out_dir);
    if (!d) return;
    char names[256][CKPT_NAME_MAX];
    int n = 0;
    struct dirent *e;
    while ((e = readdir(d)) != NULL && n < 256) {
        int step;
        long long gen;
        if (ckpt_parse_name(e->d_name, &step, &gen) != 0) continue;
        if (!strcmp(e->d_name, keep_a) || !strcmp(e->d_name, keep_b)) continue;
        fmt_path(names[n++], CKPT_NAME_MAX, "%s", e->d_name);
    }
    closedir(d);
    char path[4200];
    for (int i = 0; i < n; i++) {
        fmt_path(path, sizeof path, "%s/%s", out_dir, names[i]);
        ckpt_remove_dir(path);
    }
}

// The highest generation among OUT's ckpt_* directories (0 when none). A new checkpoint takes a
// generation above it, so its name never meets a directory this run did not write: an unreadable
// `latest`, or a run started over with -f 1, must not make the new checkpoint delete an old one.
static long long ckpt_max_generation(const char *out_dir) {
    long long max_gen = 0;
    DIR *d = opendir(out_dir);
    if (!d) return 0;
    struct dirent *e;
    while ((e = readdir(d)) != NULL) {
        int step;
        long long gen;
        if (ckpt_parse_name(e->d_name, &step, &gen) == 0 && gen > max_gen) max_gen = gen;
    }
    closedir(d);
    return max_gen;
}

// Saves the training state as checkpoint `m->step`. Every rank calls it (collective). The meta
// fields other than generation and layout are filled by the caller. Writes `name` (the new
// directory's name). Dies on every rank if any rank fails; `latest` then still names the old one.
void ckpt_save(OutputFiles *files, const char *out_dir, CkptMeta *m, Zero3 *z, char *name) {
    const Zero3Backend *be = z->be;
    char err[1024] = "", prev[CKPT_NAME_MAX] = "", dir[4200];
    // 1. rank 0 picks the generation (one more than latest's) and prepares the directory
    double gen = 0.0;
    if (be->rank == 0) {
        int step;
        long long prev_gen = 0;
        if (ckpt_read_latest(out_dir, prev, err, sizeof err) == 0) ckpt_parse_name(prev, &step, &prev_gen);
        else prev[0] = '\0';
        err[0] = '\0';   // an unreadable `latest` is replaced by this checkpoint
        long long max_gen = ckpt_max_generation(out_dir);
        gen = (double)((prev_gen > max_gen ? prev_gen : max_gen) + 1);
    }
    m->generation = (long long)be->all_reduce_scalar(be->ctx, gen);
    fmt_path(name, CKPT_NAME_MAX, "ckpt_%08d_g%lld", m->step, m->generation);
    fmt_path(dir, sizeof dir, "%s/%s", out_dir, name);
    if (be->rank == 0) {
        ckpt_remove_dir(dir);   // left by a crash before its `latest` was written
        if (mkdir(dir, 0755) != 0) set_err(err, sizeof err, "checkpoint: cannot create directory %s (%s)", dir, strerror(errno));
    }
    agree_or_exit(be, err);
    // 2. every rank writes its shard, rank 0 the meta file
    ckpt_layout_from_engine(z, m);
    // under HSDP the replica groups hold the same shards: the first group writes them
    if ((z->replica != 0 || ckpt_shard_write(files, dir, m, z, err, sizeof err) == 0) && be->rank == 0) {
        char path[4300];
        fmt_path(path, sizeof path, "%s/meta.bin", dir);
        ckpt_meta_write(files, path, m, err, sizeof err);
    }
    ckpt_meta_free(m);
    // a failure on any rank: the half-written directory goes (each rank already removed its temp file)
    if (be->all_reduce_scalar(be->ctx, err[0] ? 1.0 : 0.0) > 0.0) {
        if (be->rank == 0) ckpt_remove_dir(dir);
        agree_or_exit(be, err);
    }
    // ---- test hook (tests/test_faults.sh): ZERO3_INJECT_CKPT_CRASH=s kills rank 0 with SIGKILL when
    // checkpoint s is on disk but `latest` does not name it yet: the worst moment to crash.
    const char *crash = getenv("ZERO3_INJECT_CKPT_CRASH");
    if (crash && be->rank == 0 && atoi(crash) == m->step) raise(SIGKILL);
    // 3. every file is complete and durable: rank 0 points `latest` at the new directory
    if (be->rank == 0) {
        char path[4200], tmp[4300];
        fmt_path(path, sizeof path, "%s/latest", out_dir);
        fsync_dir(dir);
        FILE *f = NULL;
        if (dir_moved(files))   // the folder was moved away meanwhile: the one at this path is not ours to touch
            set_err(err, sizeof err, "checkpoint: %s is no longer the folder this run started in (moved or replaced while "
                    "the run went on): this run writes nothing more there; its checkpoints are where the folder went", out_dir);
        else if ((f = output_begin(files, path, tmp, sizeof tmp, err, sizeof err)) != NULL) {
            fprintf(f, "%s\n", name);
            if (commit_file(files, f, tmp, path, err, sizeof err) == 0) ckpt_prune(out_dir, name, prev);
        }
        if (err[0] && !dir_moved(files)) ckpt_remove_dir(dir);   // complete, but `latest` could not name it
    }
    agree_or_exit(be, err);
}

// After a resharding read several ranks have read one old shard file: a fault in it is said once, by
// the lowest of the ranks that found it (found by halving the ranks: log2 N sums, only on a failure);
// ranks whose messages differ (other files) each keep their own line.
static void ckpt_one_line_per_fault(const Zero3Backend *be, char *err) {
    const int failed = err[0] != '\0';
    if (be->all_reduce_scalar(be->ctx, failed ? 1.0 : 0.0) == 0.0) return;
    int lo = 0, hi = be->world;   // the lowest failed rank is in [lo, hi)
    while (hi - lo > 1) {
        const int mid = lo + (hi - lo) / 2;
        if (be->all_reduce_scalar(be->ctx, (failed && be->rank < mid) ? 1.0 : 0.0) > 0.0) hi = mid;
        else lo = mid;
    }
    const double mine = failed ? (double)(uint32_t)ckpt_hash(CKPT_HASH_INIT, err, strlen(err)) : 0.0;   // exact in a double
    const double lowest = be->all_reduce_scalar(be->ctx, be->rank == lo ? mine : 0.0);
    if (failed && be->rank != lo && mine == lowest) err[0] = '\0';
}

// Loads the checkpoint `latest` names into this rank's engine state (before zero3_publish_params).
// m receives the run fields (its units are freed). Dies on every rank on any problem.
void ckpt_load_latest(const char *out_dir, const GPT2Config *cfg, Zero3 *z, CkptMeta *m, char *name) {
    const Zero3Backend *be = z->be;
    char err[1024] = "", dir[4200];
    int rc = ckpt_read_latest(out_dir, name, err, sizeof err);
    if (rc == 1) set_err(err, sizeof err, "flag -y: no checkpoint to resume from: %s/latest does not exist", out_dir);
    agree_or_exit(be, err);
    fmt_path(dir, sizeof dir, "%s/%s", out_dir, name);
    char path[4300];
    fmt_path(path, sizeof path, "%s/meta.bin", dir);
    if (ckpt_meta_read(path, m, err, sizeof err) == 0 && ckpt_meta_check_model(m, cfg, z, dir, err, sizeof err) == 0)
        ckpt_read_state(dir, m, cfg, z, err, sizeof err);
    ckpt_meta_free(m);
    ckpt_one_line_per_fault(be, err);
    agree_or_exit(be, err);
}


// ------------------------------------------------------------------------------------------------
// Resuming with other flags

void ckpt_warn_changes(const CkptMeta *m, const TrainArgs *a) {
    for (int i = 0; i < ARGS_NFLAGS; i++) {
        const Flag *f = &ARGS_FLAGS[i];
        if (!f->recorded || !f->on_resume) continue;
        int same = args_flag_is_real(f) ? args_flag_real(f, &m->run) == args_flag_real(f, a)
                                        : args_flag_int(f, &m->run) == args_flag_int(f, a);
        if (same) continue;
        char was[64], now[64];   // as the user types them: -p bf16, never -p 1
        args_flag_text(f, &m->run, was, sizeof was);
        args_flag_text(f, a, now, sizeof now);
        fprintf(stderr, "warning: the checkpoint was written with %s %s, this run has %s %s: %s\n", f->name, was, f->name, now,
                f->on_resume);
    }
}
