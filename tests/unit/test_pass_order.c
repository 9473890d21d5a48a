// tests/unit/test_pass_order.c: the passes (host/passes.c) on their own: the order of gathers,
// releases and reductions around every call of the compute, without a model's math.
//
// A fake compute table records each call it gets, with what the engine holds at that moment: the
// units whose params are gathered (or on their way) and the units whose gradient buffer is open.
// The recording backend (recording_backend.h) adds every all-gather and reduce-scatter the engine
// starts. One training step of a 3-block GPT-2 at stage 3, rank 0 of 2, prefetch depth 0, must
// give exactly the trace written out by hand below; and the gathers in it must be the engine's own
// recorded schedule. Moving any phase verb in the passes (a post_forward, a pre_backward, a
// post_backward or the embedding's reduction) changes a line of it.
//
// Then the gathers per unit the theory reads (gpt2_gathers_per_pass, recorded from the passes)
// against counts worked out by hand from the passes' text, for a 4-block model: the default, -ra 0,
// -rc 2, -wrap 2 with -rc 2 (a unit of two blocks: the second block's recompute finds the unit held
// by the backward's gather, so one extra gather a unit, not one a block) and -wrap half.
#include "recording_backend.h"
#include "../../observe/zero3_observe.h"
#include <stdarg.h>

static const char *EXPECTED[] = {
    // forward: each unit gathered, computed with, released before the next is gathered
    "gather embedding",
    "embed_forward        | params embedding | grads -",
    "gather block0",
    "block_forward 0      | params block0 | grads -",
    "gather block1",
    "block_forward 1      | params block1 | grads -",
    "gather block2",
    "block_forward 2      | params block2 | grads -",
    "gather head",
    "final_norm_forward   | params head | grads -",
    "gather embedding",   // the tied LM head: gathered again, and held into the backward
    "lm_head_forward      | params embedding | grads -",
    // backward: the held embedding first; then each unit gathered again with an open gradient
    // buffer, and reduced right after its backward; the embedding's gradients stay open until
    // the encoder has added its part, and are reduced last
    "lm_head_backward     | params embedding | grads embedding",
    "gather head",
    "final_norm_backward  | params head | grads embedding head",
    "reduce head",
    "gather block2",
    "block_backward 2     | params block2 | grads embedding block2",
    "reduce block2",
    "gather block1",
    "block_backward 1     | params block1 | grads embedding block1",
    "reduce block1",
    "gather block0",
    "block_backward 0     | params block0 | grads embedding block0",
    "reduce block0",
    "embed_backward       | params - | grads embedding",
    "reduce embedding",
};
enum { EXPECTED_LEN = sizeof EXPECTED / sizeof EXPECTED[0] };

// ---- the trace
static Zero3 *g_z;
static char g_trace[128][128];
static int g_len;

static void record(const char *fmt, ...) {
    if (g_len >= 128) return;
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(g_trace[g_len++], sizeof g_trace[0], fmt, ap);
    va_end(ap);
}

// the unit whose gathered params (gathered = 1) or gradient buffer is `full`
static const char *unit_of(const void *full, int gathered) {
    for (int u = 0; u < g_z->nunits; u++)
        if ((gathered ? g_z->units[u].params_gathered : g_z->units[u].grads_buffer) == full) return g_z->units[u].name;
    return "?";
}
static void at_gather(const void *full) { record("gather %s", unit_of(full, 1)); }
static void at_reduce(const void *full) { record("reduce %s", unit_of(full, 0)); }

// a compute call, with the units the engine holds gathered and accumulating right now
static void at_compute(const char *call) {
    char params[64] = "", grads[64] = "";
    for (int u = 0; u < g_z->nunits; u++) {
        const Zero3Unit *U = &g_z->units[u];
        if (U->param_state == ZERO3_PARAMS_GATHERING || U->param_state == ZERO3_PARAMS_GATHERED || U->param_state == ZERO3_PARAMS_KEPT)
            snprintf(params + strlen(params), sizeof params - strlen(params), "%s%s", params[0] ? " " : "", U->name);
        if (U->grad_state == ZERO3_GRADS_ACCUMULATING)
            snprintf(grads + strlen(grads), sizeof grads - strlen(grads), "%s%s", grads[0] ? " " : "", U->name);
    }
    record("%-20s | params %s | grads %s", call, params[0] ? params : "-", grads[0] ? grads : "-");
}

// ---- the fake compute: records, computes nothing
struct GPT2ComputeState { int unused; };
static GPT2ComputeState g_state;
static void set_batch(GPT2ComputeState *s, const int *inputs, const int *targets, int training) {}
static void embed_forward(GPT2ComputeState *s, const GPT2EmbedParams *w) { at_compute("embed_forward"); }
static void block_forward(GPT2ComputeState *s, int l, const GPT2BlockParams *w) {
    char call[32];
    snprintf(call, sizeof call, "block_forward %d", l);
    at_compute(call);
}
static void final_norm_forward(GPT2ComputeState *s, const GPT2HeadParams *w) { at_compute("final_norm_forward"); }
static void lm_head_forward(GPT2ComputeState *s, const GPT2EmbedParams *w) { at_compute("lm_head_forward"); }
static void loss_accumulate(GPT2ComputeState *s) {}
static void lm_head_backward(GPT2ComputeState *s, const GPT2EmbedParams *w, const GPT2EmbedParams *dw, float dloss) {
    at_compute("lm_head_backward");
}
static void final_norm_backward(GPT2ComputeState *s, const GPT2HeadParams *w, const GPT2HeadParams *dw) {
    at_compute("final_norm_backward");
}
static void block_backward(GPT2ComputeState *s, int l, const GPT2BlockParams *w, const GPT2BlockParams *dw) {
    char call[32];
    snprintf(call, sizeof call, "block_backward %d", l);
    at_compute(call);
}
static void embed_backward(GPT2ComputeState *s, const GPT2EmbedParams *dw) { at_compute("embed_backward"); }
// a training micro-step as trainer_step runs it calls nothing else
static const GPT2Compute RECORDING_COMPUTE = {
    .set_batch = set_batch, .embed_forward = embed_forward, .block_forward = block_forward,
    .final_norm_forward = final_norm_forward, .lm_head_forward = lm_head_forward, .loss_accumulate = loss_accumulate,
    .lm_head_backward = lm_head_backward, .final_norm_backward = final_norm_backward,
    .block_backward = block_backward, .embed_backward = embed_backward,
};

// "fwd/bwd" per unit, emb first, as written out by hand
typedef struct { const char *name; int wrap, keep, naive; const char *want; } GatherCase;
static const GatherCase GATHER_CASES[] = {
    {"default", 0, 0, 0, "2/0 1/1 1/1 1/1 1/1 1/1"},
    {"-ra 0", 0, 1, 0, "1/0 1/0 1/0 1/0 1/0 1/0"},
    {"-rc 2", 0, 0, 1, "2/0 2/1 2/1 2/1 2/1 1/1"},
    {"-ra 0 -rc 2", 0, 1, 1, "1/0 1/0 1/0 1/0 1/0 1/0"},
    {"-wrap 2 -rc 2", 2, 0, 1, "2/0 2/1 2/1 1/1"},
    {"-wrap half", GPT2_WRAP_HALF, 0, 0, "2/0 1/1 1/1 1/1 1/1 1/1 1/1 1/1 1/1 1/1"},
};

static void check_gather_counts(void) {
    for (size_t k = 0; k < sizeof GATHER_CASES / sizeof GATHER_CASES[0]; k++) {
        const GatherCase *g = &GATHER_CASES[k];
        GPT2Config c = {8, 64, 64, 4, 2, 16, g->wrap};
        int fwd[16], bwd[16];
        gpt2_gathers_per_pass(&c, g->keep, g->naive, fwd, bwd);
        char got[128] = "";
        for (int u = 0; u < gpt2_num_units(&c); u++)
            snprintf(got + strlen(got), sizeof got - strlen(got), "%s%d/%d", u ? " " : "", fwd[u], bwd[u]);
        CHECK(!strcmp(got, g->want), "gathers per unit, %s: recorded %s, by hand %s", g->name, got, g->want);
        printf("  gathers per unit (fwd/bwd), %-14s %s\n", g->name, got);
    }
}

int main(void) {
    GPT2Config c = {8, 64, 64, 3, 2, 16, 0};   // maxT V Vp L NH C, one unit per block
    Zero3Backend be = recording_backend();
    Zero3 z;
    Zero3Config zc = {.stage = 3, .prefetch_depth = 0, .align = 16, .param_type = ZERO3_F32, .grad_type = ZERO3_F32,
                      .reshard_after_forward = 1, .observer = &ZERO3_OBSERVER};
    zero3_init(&z, &be, &zc);
    gpt2_register_units(&c, &z);
    zero3_allocate(&z);
    g_z = &z;
    on_gather = at_gather;
    on_reduce = at_reduce;
    GPT2Passes passes = {c, &z, &RECORDING_COMPUTE, &g_state, NULL, GPT2_RECOMPUTE_NONE};
    int tokens[1] = {0};
    // two steps: the first records the engine's schedule, the second follows it (with depth 0 both
    // gather on demand, so both give the same trace)
    for (int step = 0; step < 2; step++) {
        g_len = 0;
        zero3_step_begin(&z);
        zero3_micro_begin(&z, 0, 1, ZERO3_PASS_TRAIN);
        gpt2_pass_forward(&passes, tokens, tokens, GPT2_TRAIN_DEFER_LOSS);
        gpt2_pass_backward(&passes, 1.0f);
        int first_bad = -1;
        for (int i = 0; i < (g_len > EXPECTED_LEN ? g_len : EXPECTED_LEN) && first_bad < 0; i++)
            if (i >= g_len || i >= EXPECTED_LEN || strcmp(g_trace[i], EXPECTED[i])) first_bad = i;
        CHECK(first_bad < 0, "step %d, event %d of the trace:\n  got      %s\n  expected %s", step, first_bad,
              first_bad < g_len ? g_trace[first_bad] : "(end of the trace)",
              first_bad < EXPECTED_LEN ? EXPECTED[first_bad] : "(end of the trace)");
        zero3_grad_norm(&z);
        zero3_optimizer_step(&z, 0.0f, 0.9f, 0.95f, 1e-8f, 0.0f, 1.0f, step + 1);
        zero3_check_released(&z);
        // the gathers of the trace are the engine's recorded schedule (complete once the step is), in order
        const Zero3PassOrder *s = &z.schedule.pass_order[ZERO3_PASS_TRAIN];
        int k = 0, same = s->mode == ZERO3_SCHEDULE_RECORDED;
        for (int i = 0; i < g_len && same; i++) {
            if (strncmp(g_trace[i], "gather ", 7)) continue;
            same = k < s->len && !strcmp(g_trace[i] + 7, z.units[s->order[k]].name);
            k++;
        }
        CHECK(same && k == s->len, "step %d: the trace's gathers are not the engine's recorded schedule (%d of %d)",
              step, k, s->len);
    }
    check_gather_counts();
    if (failures) {
        fprintf(stderr, "the whole trace of the last step:\n");
        for (int i = 0; i < g_len; i++) fprintf(stderr, "  %s\n", g_trace[i]);
    }
    printf("test_pass_order: %d events (%d gathers in the recorded schedule) %s (%d failures)\n", g_len,
           z.schedule.pass_order[ZERO3_PASS_TRAIN].len, failures ? "FAIL" : "ok", failures);
    zero3_free(&z);
    return failures ? 1 : 0;
}
