// test_engine_layout.c: unit tests of the engine's layout and its sharded AdamW, with no transport.
// Each rank of an N-rank world is simulated in turn by an engine whose backend says "I am rank r of
// N"; no collective is called on the paths under test.
//
//  1. shard layout: for awkward shapes (C=72, NH=3; C=40) and N = 1..7, the units tile exactly: tensor
//     offsets aligned and disjoint, P a multiple of N*align, the owned slices of all ranks partition
//     every unit, and the pieces of all ranks cover every element of the model file exactly once.
//  2. weight decay across shard boundaries: running AdamW on every rank's shard, the elements that got
//     weight decay are exactly the elements of the six matrices, wherever a shard cut through one.
//  3. theory: stage-3 model state is 16 bytes/param / N in fp32 and the accounted comm ratios are 3:2.
//  4. weight decay through the real CPU backend, tensor by tensor: with zero gradients AdamW moves
//     nothing but the decay, so after one step every element of the contract's six matrices (named
//     here, not taken from gpt2.h's table) is exactly p*(1 - lr*wd) and every other element is p.
//
// build: gcc -O2 -fopenmp -I. tests/unit/test_engine_layout.c zero3.c observe/zero3_observe.c -lm
#include "../../host/common.h"
#include "../../host/gpt2.h"
#include "../../observe/zero3_observe.h"
#include "../../cpu/backend_cpu.h"

static int failures = 0;
#define CHECK(cond, ...) do { if (!(cond)) { failures++; fprintf(stderr, "FAIL: " __VA_ARGS__); fprintf(stderr, "\n"); } } while (0)

static void *t_alloc(void *ctx, size_t bytes) { return xcalloc(1, bytes); }
static void t_free(void *ctx, void *p) { free(p); }
static void t_zero(void *ctx, void *p, size_t bytes) { memset(p, 0, bytes); }

// AdamW that records which elements it touched with which decay, by their file index
static unsigned char *g_decayed;     // per file element: 1 + decay flag when updated
static Zero3 *g_z;
static void t_adamw(void *ctx, const Zero3AdamSegment *segs, int nsegs, Zero3DType gt, Zero3DType pt, float lr,
                    float b1, float b2, float eps, float scale, int t) {
    // master holds each element's file index + 1 (set by the test), so we can tell which it is
    for (int s = 0; s < nsegs; s++)
        for (size_t i = 0; i < segs[s].n; i++) {
            long idx = (long)segs[s].master[i] - 1;
            if (idx < 0) { failures++; fprintf(stderr, "FAIL: AdamW touched padding\n"); continue; }
            if (g_decayed[idx]) { failures++; fprintf(stderr, "FAIL: element %ld updated twice\n", idx); }
            g_decayed[idx] = 1 + (segs[s].weight_decay > 0.0f);
        }
}

typedef struct { float *dst; size_t base; unsigned char *seen; int dup; } MarkArg;
static void mark_piece(const GPT2Piece *p, void *varg) {
    MarkArg *a = varg;
    for (size_t i = 0; i < p->count; i++) {
        if (a->seen) { if (a->seen[p->file_elem + i]++) a->dup++; }
        if (a->dst) a->dst[p->unit_pos - a->base + i] = (float)(p->file_elem + i + 1);
    }
}

static void make_engine(Zero3 *z, Zero3Backend *be, const GPT2Config *c, int stage, int rank, int world, int align) {
    memset(be, 0, sizeof(*be));
    be->rank = rank; be->world = world;
    be->alloc = t_alloc; be->free = t_free; be->zero = t_zero; be->adamw = t_adamw;
    Zero3Config zc = {.stage = stage, .prefetch_depth = 1, .align = align, .param_type = ZERO3_F32, .grad_type = ZERO3_F32,
                      .reshard_after_forward = 1, .observer = &ZERO3_OBSERVER};
    zero3_init(z, be, &zc);
    gpt2_register_units(c, z);
    zero3_allocate(z);
}

static void test_layout(const GPT2Config *c, int world, int align) {
    size_t nparams = gpt2_num_parameters(c);
    unsigned char *seen = xcalloc(nparams, 1);
    int dup = 0;
    for (int r = 0; r < world; r++) {
        Zero3 z; Zero3Backend be;
        make_engine(&z, &be, c, 3, r, world, align);
        CHECK(z.totals.numel == nparams, "numel %zu != %zu", z.totals.numel, nparams);
        for (int u = 0; u < z.nunits; u++) {
            Zero3Unit *U = &z.units[u];
            CHECK(U->padded % ((size_t)world * align) == 0, "unit %s: P=%zu not a multiple of N*align", U->name, U->padded);
            CHECK(U->shard * world == U->padded, "unit %s: S*N != P", U->name);
            size_t end = 0;
            for (int i = 0; i < U->ntensors; i++) {
                CHECK(U->tensors[i].offset % align == 0, "unit %s tensor %d not aligned", U->name, i);
                CHECK(U->tensors[i].offset >= end, "unit %s tensor %d overlaps", U->name, i);
                end = U->tensors[i].offset + U->tensors[i].numel;
            }
            CHECK(end <= U->padded, "unit %s: tensors run past P", U->name);
            MarkArg a = {NULL, 0, seen, 0};
            gpt2_for_each_piece(c, &z, u, zero3_owned_begin(&z, u), U->shard, mark_piece, &a);
            dup += a.dup;
        }
        zero3_free(&z);
    }
    size_t missing = 0;
    for (size_t i = 0; i < nparams; i++) missing += (seen[i] == 0);
    CHECK(dup == 0 && missing == 0, "L=%d C=%d N=%d: %d elements owned twice, %zu by nobody", c->num_layers, c->channels, world, dup, missing);
    free(seen);
}

// The contract (docs/DESIGN.md section 3): decay on wte, wpe, qkvw, attprojw, fcw, fcprojw only.
static int contract_decay(int kind) {
    const char *matrices[] = {"wte", "wpe", "qkvw", "attprojw", "fcw", "fcprojw"};
    for (int i = 0; i < 6; i++) if (!strcmp(GPT2_KIND_NAMES[kind], matrices[i])) return 1;
    return 0;
}

static void test_decay(const GPT2Config *c, int world, int stage) {
    size_t nparams = gpt2_num_parameters(c);
    g_decayed = xcalloc(nparams, 1);
    for (int r = 0; r < world; r++) {
        Zero3 z; Zero3Backend be;
        make_engine(&z, &be, c, stage, r, world, 64);
        g_z = &z;
        // label the master copy of each owned element with its file index (stage 0 updates the whole
        // unit on every rank, so only rank 0's update is recorded there)
        if (stage == 0 && r > 0) { zero3_free(&z); continue; }
        for (int u = 0; u < z.nunits; u++) {
            size_t begin = stage == 0 ? 0 : zero3_owned_begin(&z, u);
            size_t count = stage == 0 ? z.units[u].padded : z.units[u].shard;
            float *dst = stage == 0 ? zero3_owned_master(&z, u) - zero3_owned_begin(&z, u) : zero3_owned_master(&z, u);
            MarkArg a = {dst, begin, NULL, 0};
            gpt2_for_each_piece(c, &z, u, begin, count, mark_piece, &a);
        }
        z.observe.stats.comm_bytes = 0;
        zero3_optimizer_step(&z, 1e-3f, 0.9f, 0.95f, 1e-8f, 0.1f, 1.0f, 1);
        zero3_free(&z);
    }
    size_t wrong = 0, untouched = 0;
    for (int k = 0; k < GPT2_NUM_KINDS; k++) {
        size_t begin = gpt2_file_offset(c, k, 0);
        size_t end = k + 1 < GPT2_NUM_KINDS ? gpt2_file_offset(c, k + 1, 0) : nparams;
        for (size_t i = begin; i < end; i++) {
            if (!g_decayed[i]) untouched++;
            else if ((g_decayed[i] == 2) != contract_decay(k)) wrong++;
        }
    }
    CHECK(wrong == 0 && untouched == 0, "stage %d N=%d: %zu elements with the wrong decay, %zu never updated", stage, world, wrong, untouched);
    free(g_decayed);
}

// 4. One AdamW step of the real CPU backend (1 rank) on params all 1 with zero gradients.
typedef struct { const float *master; size_t base; size_t bad; float lr_wd; } DecayArg;
static void check_decayed_piece(const GPT2Piece *p, void *varg) {
    DecayArg *a = varg;
    float want = contract_decay(p->kind) ? 1.0f * (1.0f - a->lr_wd) : 1.0f;
    for (size_t i = 0; i < p->count; i++)
        if (a->master[p->unit_pos - a->base + i] != want) {
            if (!a->bad) fprintf(stderr, "FAIL: %s layer %d element %zu: %.9g after the step, want %.9g\n",
                                 GPT2_KIND_NAMES[p->kind], p->layer, i, a->master[p->unit_pos - a->base + i], want);
            a->bad++;
        }
}
static void test_decay_cpu_backend(const GPT2Config *c, int stage) {
    Zero3Backend be;
    int argc = 0;
    char **argv = NULL;
    backend_cpu_init(&be, &argc, &argv);
    Zero3 z;
    Zero3Config zc = {.stage = stage, .prefetch_depth = 1, .align = 64, .param_type = ZERO3_F32, .grad_type = ZERO3_F32,
                      .reshard_after_forward = 1, .observer = &ZERO3_OBSERVER};
    zero3_init(&z, &be, &zc);
    gpt2_register_units(c, &z);
    zero3_allocate(&z);
    for (int u = 0; u < z.nunits; u++) {
        float *m = zero3_owned_master(&z, u);
        for (size_t i = 0; i < z.units[u].shard; i++) m[i] = 1.0f;
    }
    zero3_publish_params(&z);
    zero3_step_begin(&z);   // zero gradients
    const float lr = 0.5f, wd = 0.25f;
    zero3_optimizer_step(&z, lr, 0.9f, 0.95f, 1e-8f, wd, 1.0f, 1);
    size_t bad = 0;
    for (int u = 0; u < z.nunits; u++) {
        DecayArg a = {zero3_owned_master(&z, u), zero3_owned_begin(&z, u), 0, lr * wd};
        gpt2_for_each_piece(c, &z, u, zero3_owned_begin(&z, u), z.units[u].shard, check_decayed_piece, &a);
        bad += a.bad;
    }
    CHECK(bad == 0, "stage %d: %zu elements decayed against the contract (CPU backend AdamW)", stage, bad);
    zero3_free(&z);
    backend_cpu_finish(&be);
}

int main(void) {
    GPT2Config shapes[] = {
        {64, 50257, 50304, 3, 3, 72, 0},   // the reference's tiny shape
        {37, 1000, 1024, 2, 5, 40, 0},     // nothing a multiple of anything
        {16, 7, 128, 1, 1, 3, 0},          // smaller than one alignment unit
    };
    int aligns[] = {64, 1, 7};
    for (size_t s = 0; s < sizeof shapes / sizeof shapes[0]; s++)
        for (int world = 1; world <= 7; world++)
            for (size_t a = 0; a < sizeof aligns / sizeof aligns[0]; a++) test_layout(&shapes[s], world, aligns[a]);
    printf("layout: %d failures\n", failures);
    for (int stage = 0; stage <= 3; stage++) test_decay_cpu_backend(&shapes[1], stage);
    printf("decay through the CPU backend's AdamW, tensor by tensor: %d failures\n", failures);
    for (size_t s = 0; s < sizeof shapes / sizeof shapes[0]; s++)
        for (int world = 1; world <= 5; world++)
            for (int stage = 0; stage <= 3; stage++) {
                if (stage == 1 || stage == 2) continue;   // they need the all-gather after the update
                test_decay(&shapes[s], world, stage);
            }
    printf("decay masks: %d failures\n", failures);
    // theory: 16 bytes/param/N at stage 3 in fp32; comm ratios 1.5 (stage 3) and 1.0 (stages 1-2)
    double psi = 1e6;
    for (int n = 1; n <= 8; n++) {
        CHECK(fabs(zero3_theory_state_bytes(3, psi, n, ZERO3_F32, ZERO3_F32) - 16.0 * psi / n) < 1e-6, "stage 3 memory N=%d", n);
        CHECK(fabs(zero3_theory_state_bytes(0, psi, n, ZERO3_F32, ZERO3_F32) - 16.0 * psi) < 1e-6, "stage 0 memory");
    }
    double c0 = zero3_theory_comm_bytes(0, psi, 4, ZERO3_F32, ZERO3_F32);
    CHECK(fabs(zero3_theory_comm_bytes(3, psi, 4, ZERO3_F32, ZERO3_F32) / c0 - 1.5) < 1e-12, "theory comm ratio 3:2");
    CHECK(fabs(zero3_theory_comm_bytes(1, psi, 4, ZERO3_F32, ZERO3_F32) / c0 - 1.0) < 1e-12, "theory comm ratio stage 1");
    printf("test_engine_layout: %s (%d failures)\n", failures ? "FAIL" : "ok", failures);
    return failures ? 1 : 0;
}
