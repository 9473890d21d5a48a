// host/gpt2.c: GPT-2's parameter layout in the engine, its typed views, and the llm.c model file
// (header, random init and loading of each rank's own slices). See gpt2.h.
#include "gpt2.h"

// ------------------------------------------------------------------------------------------------
// Views

// Tensor i of unit u in the unit memory at base, whose elements are of type t.
static UnitTensor tensor_at(const Zero3 *z, int u, void *base, int i, Zero3DType t) {
    return (char *)base + z->units[u].tensors[i].offset * zero3_dtype_size(t);
}

GPT2EmbedParams gpt2_embed_view(const Zero3 *z, const GPT2Config *c, void *base, Zero3DType t) {
    int u = gpt2_unit_emb(c);
    GPT2EmbedParams v;
    v.wte = tensor_at(z, u, base, EMB_WTE, t);
    v.wpe = tensor_at(z, u, base, EMB_WPE, t);
    return v;
}

GPT2BlockParams gpt2_block_view(const Zero3 *z, const GPT2Config *c, int l, void *base, void *mlp_base, Zero3DType t) {
    const int u = gpt2_unit_block(c, l), half = gpt2_units_per_block(c) == 2;
    const int first = half ? 0 : gpt2_block_in_unit(c, l) * BLK_NUM;   // block l's first tensor in its unit
    const int mlp_unit = half ? u + 1 : u, mlp_first = half ? -BLK_LN2W : first;
    void *mb = half ? mlp_base : base;
    GPT2BlockParams v;
    v.ln1w = tensor_at(z, u, base, first + BLK_LN1W, t);
    v.ln1b = tensor_at(z, u, base, first + BLK_LN1B, t);
    v.qkvw = tensor_at(z, u, base, first + BLK_QKVW, t);
    v.qkvb = tensor_at(z, u, base, first + BLK_QKVB, t);
    v.attprojw = tensor_at(z, u, base, first + BLK_ATTPROJW, t);
    v.attprojb = tensor_at(z, u, base, first + BLK_ATTPROJB, t);
    v.ln2w = tensor_at(z, mlp_unit, mb, mlp_first + BLK_LN2W, t);
    v.ln2b = tensor_at(z, mlp_unit, mb, mlp_first + BLK_LN2B, t);
    v.fcw = tensor_at(z, mlp_unit, mb, mlp_first + BLK_FCW, t);
    v.fcb = tensor_at(z, mlp_unit, mb, mlp_first + BLK_FCB, t);
    v.fcprojw = tensor_at(z, mlp_unit, mb, mlp_first + BLK_FCPROJW, t);
    v.fcprojb = tensor_at(z, mlp_unit, mb, mlp_first + BLK_FCPROJB, t);
    return v;
}

GPT2HeadParams gpt2_head_view(const Zero3 *z, const GPT2Config *c, void *base, Zero3DType t) {
    int u = gpt2_unit_head(c);
    GPT2HeadParams v;
    v.lnfw = tensor_at(z, u, base, HEAD_LNFW, t);
    v.lnfb = tensor_at(z, u, base, HEAD_LNFB, t);
    return v;
}

// ------------------------------------------------------------------------------------------------
// Shapes and the file layout

// Elements of one layer's slice of a tensor kind (the whole tensor for the non-layer kinds).
// Elements of one layer's slice of a tensor kind (the whole tensor for the non-layer kinds).
size_t gpt2_kind_numel(const GPT2Config *c, int kind) {
    size_t C = c->channels;
    switch (kind) {
    case W_WTE: return (size_t)c->padded_vocab_size * C;
    case W_WPE: return (size_t)c->max_seq_len * C;
    case W_QKVW: return 3 * C * C;
    case W_QKVB: return 3 * C;
    case W_ATTPROJW: return C * C;
    case W_FCW: return 4 * C * C;
    case W_FCB: return 4 * C;
    case W_FCPROJW: return 4 * C * C;
    default: return C;   // layernorm weights and biases, attprojb, fcprojb
    }
}
int gpt2_kind_is_per_layer(int kind) { return kind >= W_LN1W && kind <= W_FCPROJB; }

// Offset (in elements, after the header) of layer `layer` of tensor `kind` in the model file.
size_t gpt2_file_offset(const GPT2Config *c, int kind, int layer) {
    size_t off = 0;
    for (int k = 0; k < kind; k++)
        off += gpt2_kind_numel(c, k) * (gpt2_kind_is_per_layer(k) ? (size_t)c->num_layers : 1);
    return off + (size_t)layer * gpt2_kind_numel(c, kind);
}
size_t gpt2_num_parameters(const GPT2Config *c) { return gpt2_file_offset(c, GPT2_NUM_KINDS, 0); }

// Which kind and layer tensor i of unit u holds.
void gpt2_unit_tensor(const GPT2Config *c, int u, int i, int *kind, int *layer) {
    if (u == 0) { *kind = W_WTE + i; *layer = 0; }
    else if (u == gpt2_unit_head(c)) { *kind = W_LNFW + i; *layer = 0; }
    else if (gpt2_units_per_block(c) == 2) { *kind = W_LN1W + ((u - 1) % 2) * 6 + i; *layer = (u - 1) / 2; }
    else { *kind = W_LN1W + i % BLK_NUM; *layer = (u - 1) * gpt2_blocks_per_unit(c) + i / BLK_NUM; }
}

// Describes the units to the engine. Tensor offsets inside a unit are aligned to `align` elements.
void gpt2_tensor_unit(const GPT2Config *c, int kind, int layer, int *u, int *i) {
    if (kind <= W_WPE) { *u = gpt2_unit_emb(c); *i = kind - W_WTE; return; }
    if (kind >= W_LNFW) { *u = gpt2_unit_head(c); *i = kind - W_LNFW; return; }
    const int k = kind - W_LN1W;   // 0..11 inside a block
    if (gpt2_units_per_block(c) == 2) { *u = gpt2_unit_block(c, layer) + k / 6; *i = k % 6; return; }
    *u = gpt2_unit_block(c, layer);
    *i = gpt2_block_in_unit(c, layer) * BLK_NUM + k;
}

int gpt2_wrap_of_layout(int L, int nunits, int block_tensors) {
    const int nb = nunits - 2;
    if (nb == 2 * L && block_tensors == BLK_NUM / 2) return GPT2_WRAP_HALF;
    if (nb >= 1 && L % nb == 0 && block_tensors == BLK_NUM * (L / nb) && L / nb <= GPT2_WRAP_MAX)
        return L / nb;
    return -1;
}

int gpt2_unit_ntensors(const GPT2Config *c, int u) {
    if (u == gpt2_unit_emb(c) || u == gpt2_unit_head(c)) return 2;
    return gpt2_units_per_block(c) == 2 ? BLK_NUM / 2 : BLK_NUM * gpt2_blocks_per_unit(c);
}

void gpt2_register_units(const GPT2Config *c, Zero3 *z) {
    const int nunits = gpt2_num_units(c);
    for (int u = 0; u < nunits; u++) {
        const int n = gpt2_unit_ntensors(c, u);
        const char *names[ZERO3_MAX_TENSORS];
        size_t numels[ZERO3_MAX_TENSORS];
        int decay[ZERO3_MAX_TENSORS];
        char unit_name[32];
        int first_layer = 0;
        for (int i = 0; i < n; i++) {
            int kind, layer;
            gpt2_unit_tensor(c, u, i, &kind, &layer);
            if (i == 0) first_layer = layer;
            names[i] = GPT2_KIND_NAMES[kind];
            numels[i] = gpt2_kind_numel(c, kind);
            decay[i] = GPT2_KIND_DECAY[kind];
        }
        const int K = gpt2_blocks_per_unit(c);
        if (u == gpt2_unit_emb(c)) snprintf(unit_name, sizeof unit_name, "embedding");
        else if (u == gpt2_unit_head(c)) snprintf(unit_name, sizeof unit_name, "head");
        else if (gpt2_units_per_block(c) == 2) snprintf(unit_name, sizeof unit_name, "block%d.%s", first_layer, (u - 1) % 2 ? "mlp" : "attn");
        else if (K > 1) snprintf(unit_name, sizeof unit_name, "blocks%d-%d", first_layer, first_layer + K - 1);
        else snprintf(unit_name, sizeof unit_name, "block%d", first_layer);
        zero3_add_unit(z, unit_name, n, names, numels, decay);
    }
}


// Calls fn for every piece of the slice [begin, begin+count) of unit u (padding is skipped).
void gpt2_for_each_piece(const GPT2Config *c, const Zero3 *z, int u, size_t begin, size_t count,
                                void (*fn)(const GPT2Piece *, void *), void *arg) {
    const Zero3Unit *U = &z->units[u];
    for (int i = 0; i < U->ntensors; i++) {
        const Zero3Tensor *T = &U->tensors[i];
        size_t lo = T->offset > begin ? T->offset : begin;
        size_t hi = T->offset + T->numel < begin + count ? T->offset + T->numel : begin + count;
        if (lo >= hi) continue;
        GPT2Piece p;
        p.unit = u;
        gpt2_unit_tensor(c, u, i, &p.kind, &p.layer);
        p.unit_pos = lo;
        p.file_elem = gpt2_file_offset(c, p.kind, p.layer) + (lo - T->offset);
        p.count = hi - lo;
        fn(&p, arg);
    }
}

// ------------------------------------------------------------------------------------------------
// The model file header: 256 int32 (magic 20240326, version 3 = fp32 / 5 = bf16, maxT, V, L, NH, C, Vp).

// Checks a config for sane bounds; returns NULL or what is wrong.
const char *gpt2_config_problem(const GPT2Config *c) {
    if (c->max_seq_len < 1 || c->max_seq_len > (1 << 20)) return "maxT out of range 1..1048576";
    if (c->vocab_size < 1 || c->vocab_size > 65536) return "vocab size out of range 1..65536 (tokens are uint16)";
    if (c->padded_vocab_size < c->vocab_size || c->padded_vocab_size > c->vocab_size + 4096)
        return "padded vocab size must be >= V and at most V + 4096";
    if (c->num_layers < 1 || c->num_layers > 1024) return "num_layers out of range 1..1024";
    if (c->channels < 1 || c->channels > 65536) return "channels out of range 1..65536";
    if (c->num_heads < 1 || c->num_heads > c->channels || c->channels % c->num_heads != 0)
        return "num_heads must divide channels";
    return NULL;
}

// Reads and validates the header of an llm.c model file. On success returns 0 and sets *cfg,
// *elem_bytes (4 or 2). On failure returns -1 with a message in err.
int gpt2_read_header(FILE *f, const char *path, GPT2Config *cfg, int *elem_bytes, char *err, size_t errlen) {
    int32_t h[256];
    long long size = file_size(f);
    if (size < (long long)sizeof(h) || !read_at(f, 0, h, sizeof(h))) {
        snprintf(err, errlen, "model file %s: too short for the 1024-byte header", path);
        return -1;
    }
    if (h[0] != GPT2_MODEL_MAGIC) {
        snprintf(err, errlen, "model file %s: bad magic %d (expected %d: an llm.c model file)", path, h[0], GPT2_MODEL_MAGIC);
        return -1;
    }
    if (h[1] != 3 && h[1] != 5) {
        snprintf(err, errlen, "model file %s: unsupported version %d (3 = fp32, 5 = bf16)", path, h[1]);
        return -1;
    }
    cfg->max_seq_len = h[2]; cfg->vocab_size = h[3]; cfg->num_layers = h[4];
    cfg->num_heads = h[5]; cfg->channels = h[6]; cfg->padded_vocab_size = h[7];
    const char *problem = gpt2_config_problem(cfg);
    if (problem) {
        snprintf(err, errlen, "model file %s: %s (maxT %d V %d Vp %d L %d NH %d C %d)", path, problem,
                 h[2], h[3], h[7], h[4], h[5], h[6]);
        return -1;
    }
    *elem_bytes = (h[1] == 3) ? 4 : 2;
    double expect = 1024.0 + (double)gpt2_num_parameters(cfg) * *elem_bytes;
    if ((double)size != expect) {
        snprintf(err, errlen, "model file %s: size %lld bytes, but the header implies %.0f", path, size, expect);
        return -1;
    }
    return 0;
}

void gpt2_write_header(int32_t h[256], const GPT2Config *c, int version) {
    memset(h, 0, 256 * sizeof(int32_t));
    h[0] = GPT2_MODEL_MAGIC; h[1] = version; h[2] = c->max_seq_len; h[3] = c->vocab_size;
    h[4] = c->num_layers; h[5] = c->num_heads; h[6] = c->channels; h[7] = c->padded_vocab_size;
}

// GPT-2 configs by depth (llm.c's "dN" descriptors), or a custom small one "dLcChHtT"
// (e.g. d2c64h2t64 = 2 layers, 64 channels, 2 heads, maxT 64). Returns 0 on success.
int gpt2_config_from_descriptor(const char *s, GPT2Config *c) {
    int L = 0, C = 0, NH = 0, T = 1024, n = 0;
    if (sscanf(s, "d%d%n", &L, &n) != 1) return -1;
    const char *rest = s + n;
    if (*rest == '\0') {
        switch (L) {
        case 6: C = 384; NH = 6; break;
        case 12: C = 768; NH = 12; break;
        case 24: C = 1024; NH = 16; break;
        case 36: C = 1280; NH = 20; break;
        case 48: C = 1600; NH = 25; break;
        default: C = 64 * L; NH = L; break;
        }
    } else {
        char tail;
        if (sscanf(rest, "c%dh%dt%d%c", &C, &NH, &T, &tail) != 3) return -1;
    }
    c->num_layers = L; c->channels = C; c->num_heads = NH; c->max_seq_len = T;
    c->vocab_size = 50257; c->padded_vocab_size = 50304;
    return gpt2_config_problem(c) ? -1 : 0;
}

// ------------------------------------------------------------------------------------------------
// Filling this rank's master slices: from a seed, or from a model file (each rank reads only the
// bytes of its own slices).

static float gpt2_init_std(const GPT2Config *c, int kind) {
    switch (kind) {
    case W_WTE: case W_WPE: case W_QKVW: case W_FCW: return 0.02f;
    // residual projections: scaled by 1/sqrt(2L) so the residual stream's variance stays bounded
    case W_ATTPROJW: case W_FCPROJW: return 0.02f / sqrtf(2.0f * c->num_layers);
    default: return 0.0f;
    }
}

typedef struct { const GPT2Config *cfg; float *dst; size_t base; uint64_t seed; } InitArg;
static void init_piece(const GPT2Piece *p, void *varg) {
    InitArg *a = (InitArg *)varg;
    float *out = a->dst + (p->unit_pos - a->base);
    float std = gpt2_init_std(a->cfg, p->kind);
    int is_ln_weight = (p->kind == W_LN1W || p->kind == W_LN2W || p->kind == W_LNFW);
    size_t wte_real = (size_t)a->cfg->vocab_size * a->cfg->channels;
    // each value a function of its place alone: any split over the threads gives the same bits
    #pragma omp parallel for schedule(static) if (p->count > (1u << 16))
    for (size_t i = 0; i < p->count; i++) {
        size_t e = p->file_elem + i;   // the value depends only on the element's place in the file
        if (is_ln_weight) out[i] = 1.0f;
        else if (std == 0.0f) out[i] = 0.0f;
        else if (p->kind == W_WTE && e >= wte_real) out[i] = 0.0f;   // padded vocab rows stay zero
        else out[i] = std * normal_at(a->seed, e);
    }
}

// Each unit's owned slice is filled in a host buffer (padding stays zero) and then copied to the
// engine's master shard, which may be device memory.
void gpt2_init_random(const GPT2Config *c, Zero3 *z, uint64_t seed) {
    for (int u = 0; u < z->nunits; u++) {
        const size_t S = z->units[u].shard, begin = zero3_owned_begin(z, u);
        float *host = (float *)xcalloc(S, sizeof(float));
        InitArg a = {c, host, begin, seed};
        gpt2_for_each_piece(c, z, u, begin, S, init_piece, &a);
        z->be->copy_to_device(z->be->ctx, zero3_owned_master(z, u), host, S * sizeof(float));
        free(host);
    }
}

typedef struct { FILE *f; const char *path; int elem_bytes; float *dst; size_t base; int failed; } LoadArg;
static void load_piece(const GPT2Piece *p, void *varg) {
    LoadArg *a = (LoadArg *)varg;
    if (a->failed) return;
    float *out = a->dst + (p->unit_pos - a->base);
    long long off = 1024 + (long long)p->file_elem * a->elem_bytes;
    if (a->elem_bytes == 4) {
        if (!read_at(a->f, off, out, p->count * 4)) a->failed = 1;
        return;
    }
    uint16_t buf[4096];
    for (size_t done = 0; done < p->count && !a->failed; done += 4096) {
        size_t n = p->count - done < 4096 ? p->count - done : 4096;
        if (!read_at(a->f, off + (long long)done * 2, buf, n * 2)) { a->failed = 1; break; }
        for (size_t i = 0; i < n; i++) out[done + i] = bf16_to_f32(buf[i]);
    }
}

// Fills every unit's owned master slice from an open model file already validated by
// gpt2_read_header. Returns 0, or -1 when a read fails. Staged through host memory like
// gpt2_init_random.
int gpt2_load_owned(const GPT2Config *c, Zero3 *z, FILE *f, const char *path, int elem_bytes) {
    for (int u = 0; u < z->nunits; u++) {
        const size_t S = z->units[u].shard, begin = zero3_owned_begin(z, u);
        float *host = (float *)xcalloc(S, sizeof(float));
        LoadArg a = {f, path, elem_bytes, host, begin, 0};
        gpt2_for_each_piece(c, z, u, begin, S, load_piece, &a);
        if (!a.failed) z->be->copy_to_device(z->be->ctx, zero3_owned_master(z, u), host, S * sizeof(float));
        free(host);
        if (a.failed) return -1;
    }
    return 0;
}

typedef struct { const GPT2Config *cfg; const float *host; size_t base; int bad; int kind, layer; size_t elem; float value; } FiniteArg;
static void finite_piece(const GPT2Piece *p, void *varg) {
    FiniteArg *a = (FiniteArg *)varg;
    if (a->bad) return;
    const float *v = a->host + (p->unit_pos - a->base);
    for (size_t i = 0; i < p->count; i++)
        if (!isfinite(v[i])) {
            a->bad = 1;
            a->kind = p->kind;
            a->layer = p->layer;
            a->elem = p->file_elem + i - gpt2_file_offset(a->cfg, p->kind, p->layer);
            a->value = v[i];
            return;
        }
}

int gpt2_check_finite_owned(const GPT2Config *c, const Zero3 *z, const char *path, char *err, size_t errlen) {
    for (int u = 0; u < z->nunits; u++) {
        const size_t S = z->units[u].shard, begin = zero3_owned_begin(z, u);
        float *host = (float *)xmalloc(S * sizeof(float));
        z->be->copy_to_host(z->be->ctx, host, zero3_owned_master((Zero3 *)z, u), S * sizeof(float));
        FiniteArg a = {c, host, begin, 0, 0, 0, 0, 0.0f};
        gpt2_for_each_piece(c, z, u, begin, S, finite_piece, &a);
        free(host);
        if (a.bad) {
            char layer[32] = "";
            if (gpt2_kind_is_per_layer(a.kind)) snprintf(layer, sizeof layer, " of layer %d", a.layer);
            set_err(err, errlen, "%s: tensor %s%s holds %g at element %zu: the weights must be finite", path,
                    GPT2_KIND_NAMES[a.kind], layer, a.value, a.elem);
            return -1;
        }
    }
    return 0;
}
