// test_stop_path.c: a step given up after k of A micro-steps (zero3_step_abandon), checked directly,
// with no signal and no timing: the test itself decides when the step stops.
//
// The backend is a double whose collectives are *deferred*: a start only records what it will do (and
// copies what the peers contribute at that moment); the data moves when its handle is waited on, as
// with a real transport, where a reduction still in flight keeps writing into its destination. A
// reduction that the abandon leaves in flight therefore lands later, on top of the next step's
// zeroed gradients, exactly where a real one would.
//
// For every stage 0-3 (and HSDP groups of 2, hpZ node groups of 2), A = 3 micro-steps, and every
// k = 1..A (k = A: the signal after the last micro-step, before the norm):
//   run B  steps 1, 2, 3, each whole;
//   run A  step 2 given up after k micro-steps (step 1 whole before it), then steps 2 and 3 whole;
//          and step 1 given up (a stop in the step that records the prefetch schedule), then 1-3.
// Right after the abandon, no collective handle is pending in the double, the engine lists no
// reduction in flight, no unit holds a gather handle, a gathered buffer or an open gradient buffer,
// and every pool buffer is back. Then run A's reduced gradient shard, its norm and its master
// shard after each later step must equal run B's bit for bit, and the schedule must be recorded:
// the abandoned step left nothing behind.
//
// The "model": two units (100 and 1000 parameters); a micro-step's gradient of element i is
// 0.01 * param + a datum that depends on (step, micro-step, unit, i), so it depends on the params the
// abandoned step must not have changed and on the data it must not have added.
#include "recording_backend.h"

enum { A_MICRO = 3, NSTEPS = 3, NUNITS = 2, MAXOPS = 64 };
static const size_t UNIT_NUMEL[NUNITS] = {100, 1000};

// ---- the deferred double: rank 0 of `world`; the peers' contributions are copies taken at start --
typedef enum { OP_GATHER, OP_REDUCE_SCATTER, OP_ALL_REDUCE } OpKind;
typedef struct { int live; OpKind kind; float *dst; const float *src; size_t n; int ranks; float *peer; } Op;
static Op ops[MAXOPS];
static int group_size, node_size, world_size;
static int pending(void) { int c = 0; for (int i = 0; i < MAXOPS; i++) c += ops[i].live; return c; }
static void *op_start(OpKind kind, float *dst, const float *src, size_t n, int ranks) {
    for (int i = 0; i < MAXOPS; i++) {
        if (ops[i].live) continue;
        ops[i] = (Op){1, kind, dst, src, n, ranks, xcalloc(n, sizeof(float))};
        memcpy(ops[i].peer, src, n * sizeof(float));   // what this rank sends now (the peers: a copy of it)
        return (void *)(intptr_t)(i + 1);
    }
    fprintf(stderr, "test_stop_path: more than %d collectives in flight\n", MAXOPS);
    exit(1);
}
// The data moves now. A gather: this rank's shard (as it was at the start) and each peer j's, which
// the double makes (1 + j/8) times it; a sum: what the destination holds now plus the peers' part.
static void d_wait(void *ctx, void *h) {
    int i = (int)(intptr_t)h - 1;
    if (i < 0 || i >= MAXOPS || !ops[i].live) { CHECK(0, "wait on a handle %d not in flight", i + 1); return; }
    Op *o = &ops[i];
    if (o->kind == OP_GATHER)
        for (int j = 0; j < o->ranks; j++)
            for (size_t e = 0; e < o->n; e++) o->dst[j * o->n + e] = o->peer[e] * (1.0f + j / 8.0f);
    else
        for (size_t e = 0; e < o->n; e++) o->dst[e] = o->src[e] + o->peer[e] * (float)(o->ranks - 1);
    free(o->peer);
    o->live = 0;
}
static void *d_all_gather(void *ctx, const void *shard, void *full, size_t n, Zero3DType t) {
    return op_start(OP_GATHER, full, shard, n, group_size);
}
static void *d_node_gather(void *ctx, const void *shard, void *full, size_t n, Zero3DType t) {
    return op_start(OP_GATHER, full, shard, n, node_size);
}
static void *d_reduce_scatter(void *ctx, const void *full, void *shard, size_t n, Zero3DType t) {
    return op_start(OP_REDUCE_SCATTER, shard, full, n, group_size);   // rank 0: its slice is full[0, n)
}
static void *d_all_reduce(void *ctx, void *buf, size_t n, Zero3DType t) { return op_start(OP_ALL_REDUCE, buf, buf, n, group_size); }
static void *d_replica(void *ctx, void *buf, size_t n, Zero3DType t) {
    return op_start(OP_ALL_REDUCE, buf, buf, n, world_size / group_size);
}
static void d_make_groups(void *ctx, int g) { group_size = g; }
static void d_make_node_groups(void *ctx, int g) { node_size = g; }
static int d_in_flight(void *ctx) { return pending(); }
static double sumsq;
static void d_sumsq_add(void *ctx, const void *x, size_t n, Zero3DType t) {
    for (size_t i = 0; i < n; i++) sumsq += (double)((const float *)x)[i] * ((const float *)x)[i];
}
static double d_sumsq_total(void *ctx) { double s = sumsq; sumsq = 0; return s; }
static void d_add(void *ctx, void *dst, const void *src, size_t n, Zero3DType t) {
    for (size_t i = 0; i < n; i++) ((float *)dst)[i] += ((const float *)src)[i];
}
static void d_copy(void *ctx, void *dst, const void *src, size_t bytes) { memmove(dst, src, bytes); }
// plain AdamW (fp32: the params are the master), enough for the update to depend on every gradient
static void d_adamw(void *ctx, const Zero3AdamSegment *segs, int nsegs, Zero3DType gt, Zero3DType pt, float lr,
                    float b1, float b2, float eps, float scale, int t) {
    for (int s = 0; s < nsegs; s++)
        for (size_t i = 0; i < segs[s].n; i++) {
            float g = ((const float *)segs[s].grad)[i] * scale;
            segs[s].m[i] = b1 * segs[s].m[i] + (1 - b1) * g;
            segs[s].v[i] = b2 * segs[s].v[i] + (1 - b2) * g * g;
            segs[s].master[i] -= lr * (segs[s].m[i] / (1 - powf(b1, t))) / (sqrtf(segs[s].v[i] / (1 - powf(b2, t))) + eps);
        }
}

typedef struct { const char *name; int stage, world, group, hp; } Variant;

static void make(Zero3 *z, Zero3Backend *be, Variant v) {
    *be = recording_backend();
    be->rank = 0; be->world = v.world;
    world_size = group_size = v.world; node_size = 0;
    be->all_gather_start = d_all_gather; be->reduce_scatter_start = d_reduce_scatter;
    be->all_reduce_start = d_all_reduce; be->wait = d_wait; be->replica_all_reduce_start = d_replica;
    be->make_groups = d_make_groups; be->make_node_groups = d_make_node_groups; be->node_all_gather_start = d_node_gather;
    be->collectives_in_flight = d_in_flight; be->sum_squares_add = d_sumsq_add; be->sum_squares_total = d_sumsq_total;
    be->add = d_add; be->copy = d_copy; be->adamw = d_adamw;
    Zero3Config cfg = {.stage = v.stage, .prefetch_depth = 1, .align = 1, .param_type = ZERO3_F32, .grad_type = ZERO3_F32,
                       .reshard_after_forward = 1, .shard_group = v.group, .hp_group = v.hp};
    zero3_init(z, be, &cfg);
    const char *names[NUNITS][1] = {{"small"}, {"big"}};
    int decay[] = {1};
    for (int u = 0; u < NUNITS; u++) zero3_add_unit(z, names[u][0], 1, names[u], &UNIT_NUMEL[u], decay);
    zero3_allocate(z);
    for (int u = 0; u < NUNITS; u++) {
        float *m = zero3_owned_master(z, u);
        for (size_t i = 0; i < z->units[u].shard; i++) m[i] = 0.02f * (float)((i * 7 + u * 3) % 11) - 0.1f;
    }
    zero3_publish_params(z);
}

static float datum(int step, int k, int u, size_t i) { return 1e-3f * (float)((step * 31 + k * 7 + u * 3 + (int)i) % 17 - 8); }

static void micro_step(Zero3 *z, int step, int k) {
    zero3_micro_begin(z, k, A_MICRO, ZERO3_PASS_TRAIN);
    for (int u = 0; u < NUNITS; u++) { zero3_pre_forward(z, u); zero3_post_forward(z, u); }
    for (int u = NUNITS - 1; u >= 0; u--) {
        Zero3UnitBuffers b = zero3_pre_backward(z, u);
        const float *p = b.params;
        float *g = b.grads;
        for (size_t i = 0; i < UNIT_NUMEL[u]; i++) g[i] += 0.01f * p[i] + datum(step, k, u, i);
        zero3_post_backward(z, u);
    }
}

// What a whole step leaves: the norm, the reduced gradient shard and the master shard after the update.
typedef struct { double norm; float grads[NUNITS][1000], master[NUNITS][1000]; } Snapshot;

static void whole_step(Zero3 *z, int step, Snapshot *out) {
    zero3_step_begin(z);
    for (int k = 0; k < A_MICRO; k++) micro_step(z, step, k);
    out->norm = zero3_grad_norm(z);
    for (int u = 0; u < NUNITS; u++) memcpy(out->grads[u], zero3_owned_grads(z, u), z->units[u].shard * sizeof(float));
    zero3_optimizer_step(z, 1e-2f, 0.9f, 0.95f, 1e-8f, 0.1f, 1.0f, step);
    for (int u = 0; u < NUNITS; u++) memcpy(out->master[u], zero3_owned_master(z, u), z->units[u].shard * sizeof(float));
}

// right after the abandon: nothing in flight, nothing held, every pool buffer back
static int at_rest_after_abandon(const Zero3 *z, const char *name, int k) {
    int ok = 1;
    if (pending() || z->inflight.count) {
        CHECK(0, "%s, abandoned after %d of %d: %d collectives pending in the backend, %d reductions listed in flight",
              name, k, A_MICRO, pending(), z->inflight.count);
        ok = 0;
    }
    for (int u = 0; u < z->nunits; u++) {
        const Zero3Unit *U = &z->units[u];
        if (U->gather_handle || U->grad_state != ZERO3_GRADS_IDLE || U->grads_buffer || U->holders) {
            CHECK(0, "%s, abandoned after %d of %d: unit %s keeps a gather handle, a gradient buffer or a holder", name, k,
                  A_MICRO, U->name);
            ok = 0;
        }
    }
    for (int i = 0; i < z->pool.count; i++)
        if (z->pool.entry[i].used) { CHECK(0, "%s, abandoned after %d of %d: a pool buffer not returned", name, k, A_MICRO); ok = 0; break; }
    return ok;
}

static int same(const Zero3 *z, const Snapshot *a, const Snapshot *b) {
    if (memcmp(&a->norm, &b->norm, sizeof a->norm)) return 0;
    for (int u = 0; u < NUNITS; u++) {
        size_t bytes = z->units[u].shard * sizeof(float);
        if (memcmp(a->grads[u], b->grads[u], bytes) || memcmp(a->master[u], b->master[u], bytes)) return 0;
    }
    return 1;
}

// Run A for one abandoned step (`stop`: 1, the step that records the schedule, or 2) after k
// micro-steps; its whole steps compared with run B's (ref).
static void check_abandon(Variant v, const Snapshot *ref, int stop, int k) {
    static Snapshot got[NSTEPS + 1];
    Zero3 z; Zero3Backend be;
    make(&z, &be, v);
    for (int s = 1; s < stop; s++) whole_step(&z, s, &got[s]);
    zero3_step_begin(&z);
    for (int j = 0; j < k; j++) micro_step(&z, stop, j);
    zero3_step_abandon(&z);
    int rest = at_rest_after_abandon(&z, v.name, k);
    for (int s = stop; s <= NSTEPS; s++) whole_step(&z, s, &got[s]);
    for (int s = stop; s <= NSTEPS; s++)
        CHECK(same(&z, &got[s], &ref[s]),
              "%s, step %d abandoned after %d of %d: step %d's gradients, norm or params differ from the run that never "
              "gave a step up (norm %.17g, not %.17g)", v.name, stop, k, A_MICRO, s, got[s].norm, ref[s].norm);
    CHECK(z.schedule.pass_order[ZERO3_PASS_TRAIN].mode == ZERO3_SCHEDULE_RECORDED,
          "%s, step %d abandoned after %d of %d: the schedule is not recorded after the next whole steps", v.name, stop, k, A_MICRO);
    if (rest) zero3_check_step_end(&z);   // the engine's own invariant agrees (it dies otherwise)
    zero3_free(&z);
}

static void check_variant(Variant v) {
    static Snapshot ref[NSTEPS + 1];
    Zero3 z; Zero3Backend be;
    make(&z, &be, v);
    for (int s = 1; s <= NSTEPS; s++) whole_step(&z, s, &ref[s]);
    zero3_free(&z);
    for (int stop = 1; stop <= 2; stop++)
        for (int k = 1; k <= A_MICRO; k++) check_abandon(v, ref, stop, k);
    printf("  %-24s step 1 or 2 given up after k = 1..%d of %d micro-steps: nothing in flight, the next steps bitwise "
           "those of a run that never stopped\n", v.name, A_MICRO, A_MICRO);
}

int main(void) {
    printf("the stop path (zero3_step_abandon), a deferred-collective double, rank 0 of N:\n");
    const Variant variants[] = {
        {"stage 0, N=2", 0, 2, 0, 0}, {"stage 1, N=2", 1, 2, 0, 0}, {"stage 2, N=2", 2, 2, 0, 0},
        {"stage 3, N=2", 3, 2, 0, 0}, {"stage 2, N=4, -hs 2", 2, 4, 2, 0}, {"stage 3, N=4, -hs 2", 3, 4, 2, 0},
        {"stage 3, N=4, -hp 2", 3, 4, 0, 2},
    };
    for (size_t i = 0; i < sizeof variants / sizeof variants[0]; i++) check_variant(variants[i]);
    if (failures) { fprintf(stderr, "test_stop_path: %d failures\n", failures); return 1; }
    printf("test_stop_path: all passed\n");
    return 0;
}
