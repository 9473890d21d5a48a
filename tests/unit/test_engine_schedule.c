// tests/unit/test_engine_schedule.c: the prefetch schedule and the peak memory of ZeRO-3, through
// the real passes (host/passes.c) and the real engine, with a compute table that computes nothing.
//
// Prefetching the wrong unit changes neither the losses nor the bytes sent, only the overlap and
// the memory, so the loss tests cannot see it. Here a recording backend (host memory, collectives
// that only copy) runs GPT-2's training passes at stage 3 on rank 0 of 2, for prefetch depths 0..3:
//  1. the schedule the engine recorded in the first pass is GPT-2's gather order, written out here
//     independently: embedding, blocks 0..L-1, head, embedding (tied LM head), then head and blocks
//     L-1..0 for the backward;
//  2. from the second pass on, while any unit computes, the next `depth` units of that order are
//     already gathered or on their way (each gather after the first finds its unit in flight), and
//     no other unit is held: at most 1 + depth gathered units (the held embedding aside);
//  3. the engine's transient peak equals the peak of a model of the live buffers written here: at
//     every compute, the current unit's params, the next `depth` units' params, the held embedding,
//     and in the backward the embedding's gradient buffer, the current unit's, and the previous
//     unit's (its reduce-scatter still in flight);
//  4. the buffer pool's reserve (the report's `buffer pool` line) is what the backend was really
//     asked for: its buffers and bytes equal the allocations the backend counted after the layout
//     was allocated; the third step allocates nothing (the first step records the schedule without
//     prefetch, the second adds the prefetched units' buffers, from then on every request fits a
//     kept buffer); and it is never below the peak the model says is live.
// Both ways of prefetching in the backward (-bp, zero3.h's Zero3BackwardPrefetch): under pre the
// rule above holds everywhere; under post a unit gathered for the backward computes with only the
// next depth - 1 on their way (its post_backward starts the depth-th), so one gathered unit fewer
// is live, and the peak is one block's params lower for depth >= 1 (checked against pre's).
#include "recording_backend.h"
#include "../../observe/zero3_observe.h"

// ---- GPT-2's gather order for one training pass, written out independently of the engine
static int g_order[64], g_order_len, g_first_bwd_gather;   // g_first_bwd_gather: the head's backward gather
static void expected_order(const GPT2Config *c) {
    int n = 0, L = c->num_layers;
    g_order[n++] = gpt2_unit_emb(c);
    for (int l = 0; l < L; l++) g_order[n++] = gpt2_unit_block(c, l);
    g_order[n++] = gpt2_unit_head(c);
    g_order[n++] = gpt2_unit_emb(c);   // the tied LM head
    g_first_bwd_gather = n;
    g_order[n++] = gpt2_unit_head(c);  // backward: the embedding stays held, so no gather for it
    for (int l = L - 1; l >= 0; l--) g_order[n++] = gpt2_unit_block(c, l);
    g_order_len = n;
}

// ---- the backend's own count of what it allocated, beside the pool's bookkeeping
static int g_allocs;
static size_t g_alloc_bytes;
static void *counting_alloc(void *ctx, size_t bytes) {
    g_allocs++;
    g_alloc_bytes += bytes;
    return xcalloc(1, bytes);
}

// ---- the live-buffer model and the checks, run at every call of the compute
static Zero3 *g_z;
static int g_depth, g_post, g_checking, g_pos;     // g_pos: position in g_order of the unit computing now
static int g_backward, g_emb_held, g_prev_grads;   // g_prev_grads: unit whose reduction is in flight
static size_t g_model_peak;
static size_t g_block_bytes;   // one block unit's params (run sets it)

static size_t unit_bytes(int u) { return g_z->units[u].padded * sizeof(float); }

static void at_compute(int pos, int backward) {
    g_pos = pos;
    if (!g_checking) return;
    const GPT2Config *c = NULL;
    (void)c;
    int emb = 0, current = g_order[pos];
    // 2. the next `depth` units are gathered or in flight, and nothing else is held
    int expected_live[64] = {0};
    expected_live[current] = 1;
    if (g_emb_held) expected_live[emb] = 1;
    // -bp post: a unit gathered for the backward has one gather fewer ahead while it computes
    const int ahead = g_post && pos >= g_first_bwd_gather && g_depth > 0 ? g_depth - 1 : g_depth;
    for (int k = 1; k <= ahead && pos + k < g_order_len; k++) expected_live[g_order[pos + k]] = 1;
    for (int u = 0; u < g_z->nunits; u++) {
        Zero3ParamState s = g_z->units[u].param_state;
        int live = (s == ZERO3_PARAMS_GATHERING || s == ZERO3_PARAMS_GATHERED || s == ZERO3_PARAMS_KEPT);
        CHECK(live == expected_live[u], "depth %d %s, order position %d (unit %s computing): unit %s is %s, expected %s",
              g_depth, g_post ? "post" : "pre", pos, g_z->units[current].name, g_z->units[u].name, live ? "gathered or in flight" : "sharded",
              expected_live[u] ? "gathered or in flight" : "sharded");
    }
    // 3. the live bytes of the model at this moment
    size_t bytes = 0;
    for (int u = 0; u < g_z->nunits; u++) if (expected_live[u]) bytes += unit_bytes(u);
    if (backward) {
        bytes += unit_bytes(emb);                                         // the embedding's grads, whole backward
        if (current != emb) bytes += unit_bytes(current);                 // this unit's grads
        if (g_prev_grads >= 0 && g_prev_grads != emb) bytes += unit_bytes(g_prev_grads);   // still reducing
    }
    if (bytes > g_model_peak) g_model_peak = bytes;
}

// ---- the compute: each call checks, nothing is computed
struct GPT2ComputeState { int L; };
static GPT2ComputeState *create(const GPT2Config *cfg, int B, int T, int recompute, void *device) {
    GPT2ComputeState *m = xcalloc(1, sizeof(GPT2ComputeState));
    m->L = cfg->num_layers;
    return m;
}
static void destroy(GPT2ComputeState *m) { free(m); }
static void set_batch(GPT2ComputeState *m, const int *inputs, const int *targets, int training) { g_backward = 0; g_prev_grads = -1; }
static void embed_forward(GPT2ComputeState *m, const GPT2EmbedParams *w) { at_compute(0, 0); }
static void block_forward(GPT2ComputeState *m, int l, const GPT2BlockParams *w) { at_compute(1 + l, 0); }
static void final_norm_forward(GPT2ComputeState *m, const GPT2HeadParams *w) { at_compute(1 + m->L, 0); }
static void lm_head_forward(GPT2ComputeState *m, const GPT2EmbedParams *w) { g_emb_held = 1; at_compute(2 + m->L, 0); }
static void lm_head_backward(GPT2ComputeState *m, const GPT2EmbedParams *w, const GPT2EmbedParams *dw, float dloss) {
    at_compute(2 + m->L, 1);   // still the embedding's gather: the next gathers are the head's and the blocks'
    g_emb_held = 0;
}
static void final_norm_backward(GPT2ComputeState *m, const GPT2HeadParams *w, const GPT2HeadParams *dw) {
    at_compute(3 + m->L, 1);
    g_prev_grads = g_order[3 + m->L];
}
static void block_backward(GPT2ComputeState *m, int l, const GPT2BlockParams *w, const GPT2BlockParams *dw) {
    int pos = 4 + m->L + (m->L - 1 - l);
    at_compute(pos, 1);
    g_prev_grads = g_order[pos];
}
static void embed_backward(GPT2ComputeState *m, const GPT2EmbedParams *dw) {}
static double mean_loss(GPT2ComputeState *m) { return 0.0; }
// the passes call nothing else in a training step
static const GPT2Compute CHECKING_COMPUTE = {
    .create = create, .destroy = destroy, .set_batch = set_batch,
    .embed_forward = embed_forward, .block_forward = block_forward, .final_norm_forward = final_norm_forward,
    .lm_head_forward = lm_head_forward, .mean_loss = mean_loss, .lm_head_backward = lm_head_backward,
    .final_norm_backward = final_norm_backward, .block_backward = block_backward, .embed_backward = embed_backward,
};

// Runs three steps at `depth` under `bp`; returns the last step's transient peak.
static size_t run(int depth, Zero3BackwardPrefetch bp) {
    GPT2Config c = {8, 64, 64, 4, 2, 16, 0};   // maxT V Vp L NH C, one unit per block
    Zero3Backend be = recording_backend();
    be.alloc = counting_alloc;
    Zero3 z;
    Zero3Config zc = {.stage = 3, .prefetch_depth = depth, .backward_prefetch = bp, .align = 16, .param_type = ZERO3_F32, .grad_type = ZERO3_F32,
                      .reshard_after_forward = 1, .observer = &ZERO3_OBSERVER};
    zero3_init(&z, &be, &zc);
    gpt2_register_units(&c, &z);
    zero3_allocate(&z);
    g_z = &z;
    g_depth = depth;
    g_allocs = 0;
    g_alloc_bytes = 0;   // from here on, every allocation is the pool's
    g_post = bp == ZERO3_BACKWARD_POST;
    expected_order(&c);
    GPT2Passes g = {c, &z, &CHECKING_COMPUTE, create(&c, 1, 1, 0, NULL), NULL, 0};
    int tokens[1] = {0};
    int allocs_before_last = 0;
    for (int step = 0; step < 3; step++) {
        g_checking = step > 0;   // the first pass records the schedule, without prefetch
        if (step == 2) allocs_before_last = g_allocs;
        g_model_peak = 0;
        zero3_step_begin(&z);
        zero3_micro_begin(&z, 0, 1, ZERO3_PASS_TRAIN);
        gpt2_pass_forward(&g, tokens, tokens, 1);
        gpt2_pass_backward(&g, 1.0f);
        zero3_grad_norm(&z);
        zero3_optimizer_step(&z, 0.0f, 0.9f, 0.95f, 1e-8f, 0.0f, 1.0f, step + 1);
        zero3_check_released(&z);
        if (step == 0) {   // 1. the recording is GPT-2's order
            const Zero3PassOrder *s = &z.schedule.pass_order[ZERO3_PASS_TRAIN];
            int same = s->mode == ZERO3_SCHEDULE_RECORDED && s->len == g_order_len;
            for (int i = 0; same && i < g_order_len; i++) same = s->order[i] == g_order[i];
            CHECK(same, "depth %d: the recorded schedule is not GPT-2's gather order", depth);
        } else {
            CHECK(z.observe.stats.transient_peak == g_model_peak, "depth %d step %d: transient peak %zu bytes, the model says %zu",
                  depth, step, z.observe.stats.transient_peak, g_model_peak);
        }
    }
    // 4. the pool against the backend's count
    CHECK(z.pool.count == g_allocs && z.pool.bytes == g_alloc_bytes,
          "depth %d: the pool says %d buffers of %zu bytes, the backend allocated %d of %zu", depth, z.pool.count,
          z.pool.bytes, g_allocs, g_alloc_bytes);
    CHECK(g_allocs == allocs_before_last, "depth %d: the third step allocated %d more buffers", depth, g_allocs - allocs_before_last);
    CHECK(z.pool.bytes >= g_model_peak, "depth %d: the pool reserves %zu bytes, below the %zu the model says are live", depth,
          z.pool.bytes, g_model_peak);
    printf("  depth %d %-4s: schedule of %d gathers recorded; peak transient %zu bytes = %.2f units of a block (model: %zu); "
           "pool %d buffers, %zu bytes\n", depth, g_post ? "post" : "pre", g_order_len, z.observe.stats.transient_peak,
           (double)z.observe.stats.transient_peak / unit_bytes(1), g_model_peak, z.pool.count, z.pool.bytes);
    const size_t peak = z.observe.stats.transient_peak;
    g_block_bytes = unit_bytes(gpt2_unit_block(&c, 0));
    destroy(g.state);
    zero3_free(&z);
    return peak;
}

int main(void) {
    for (int depth = 0; depth <= 3; depth++) {
        size_t pre = run(depth, ZERO3_BACKWARD_PRE), post = run(depth, ZERO3_BACKWARD_POST);
        // post never holds more; where the backward holds the peak (depths 1, 2 here; at 3 it is the end of
        // the forward, the same under both) it holds one gathered block fewer; at depth 0 nothing moves
        CHECK(post <= pre, "depth %d: post's peak %zu bytes is above pre's %zu", depth, post, pre);
        if (depth <= 2)
            CHECK(pre - post == (depth > 0 ? g_block_bytes : 0), "depth %d: pre's peak %zu - post's %zu bytes is not %s",
                  depth, pre, post, depth > 0 ? "one block's params" : "0 (nothing prefetched)");
    }
    printf("test_engine_schedule: %s (%d failures)\n", failures ? "FAIL" : "ok", failures);
    return failures ? 1 : 0;
}
