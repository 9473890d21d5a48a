// host/passes.c: GPT-2's forward and backward over ZeRO units: the lifecycle of every unit, written
// once. Each unit's compute sits between two phase verbs of the engine (zero3.h): pre_forward
// gathers it (and prefetches the next), post_forward releases it; pre_backward gathers it again and
// opens its gradient buffer, post_backward reduce-scatters the gradients and releases. The compute
// itself is the GPT2Compute table the passes were handed (passes.h), called with typed views of the
// unit.
#include "passes.h"

float gpt2_pass_forward(GPT2Passes *p, const int *inputs, const int *targets, int training) {
    const GPT2Config *c = &p->cfg;
    Zero3 *z = p->z;
    const Zero3DType pt = z->cfg.param_type;
    const int u_emb = gpt2_unit_emb(c), u_head = gpt2_unit_head(c);
    p->compute->set_batch(p->state, inputs, targets, training);

    GPT2EmbedParams emb = gpt2_embed_view(z, c, zero3_pre_forward(z, u_emb), pt);
    p->compute->embed_forward(p->state, &emb);
    zero3_post_forward(z, u_emb);

    // the blocks, unit by unit: a unit (one block, K blocks with -wrap K, or with -wrap half a
    // block's attention and MLP units together) is gathered before its first block and released
    // after its last
    const int K = gpt2_blocks_per_unit(c), nu = gpt2_units_per_block(c);
    void *blk[2] = {NULL, NULL};
    for (int l = 0; l < c->num_layers; l++) {
        const int u = gpt2_unit_block(c, l);
        if (l % K == 0)
            for (int j = 0; j < nu; j++) blk[j] = zero3_pre_forward(z, u + j);
        GPT2BlockParams w = gpt2_block_view(z, c, l, blk[0], blk[nu - 1], pt);
        p->compute->block_forward(p->state, l, &w);
        if (l % K == K - 1)
            for (int j = 0; j < nu; j++) zero3_post_forward(z, u + j);
    }

    GPT2HeadParams head = gpt2_head_view(z, c, zero3_pre_forward(z, u_head), pt);
    p->compute->final_norm_forward(p->state, &head);
    zero3_post_forward(z, u_head);

    // The LM head is tied to wte: the embedding unit is gathered a second time. In training it is
    // held (no post_forward) until the LM head's backward has used it.
    p->emb_held = zero3_pre_forward(z, u_emb);
    emb = gpt2_embed_view(z, c, p->emb_held, pt);
    p->compute->lm_head_forward(p->state, &emb);
    if (!training) {
        zero3_post_forward(z, u_emb);
        p->emb_held = NULL;
    }
    if (targets && training == GPT2_TRAIN_DEFER_LOSS) {
        p->compute->loss_accumulate(p->state);
        return 0.0f;
    }
    return targets ? (float)p->compute->mean_loss(p->state) : 0.0f;
}

double gpt2_pass_take_loss(GPT2Passes *p) { return p->compute->loss_take(p->state); }

// Units are visited in reverse; each block's gradients go to the engine as soon as they are
// complete, so their reduce-scatter overlaps the backward of the block below.
void gpt2_pass_backward(GPT2Passes *p, float dloss) {
    const GPT2Config *c = &p->cfg;
    Zero3 *z = p->z;
    const Zero3DType pt = z->cfg.param_type, gt = z->cfg.grad_type;
    const int u_emb = gpt2_unit_emb(c), u_head = gpt2_unit_head(c);
    if (!p->emb_held) fatal_local("gpt2_pass_backward without a training forward");

    // LM head: the held embedding's params, and the unit's gradient buffer, which stays open until
    // the encoder backward has added its part; then the whole unit is reduced once.
    GPT2EmbedParams emb = gpt2_embed_view(z, c, p->emb_held, pt);
    GPT2EmbedParams demb = gpt2_embed_view(z, c, zero3_grads(z, u_emb), gt);
    p->compute->lm_head_backward(p->state, &emb, &demb, dloss);
    zero3_release(z, u_emb);   // ends the LM head's pre_forward: the encoder needs no param values
    p->emb_held = NULL;

    Zero3UnitBuffers hb = zero3_pre_backward(z, u_head);
    GPT2HeadParams head = gpt2_head_view(z, c, hb.params, pt), dhead = gpt2_head_view(z, c, hb.grads, gt);
    p->compute->final_norm_backward(p->state, &head, &dhead);
    zero3_post_backward(z, u_head);

    // blocks, last to first, unit by unit as in the forward (the MLP unit before the attention unit)
    const int K = gpt2_blocks_per_unit(c), nu = gpt2_units_per_block(c);
    Zero3UnitBuffers blk[2];
    for (int l = c->num_layers - 1; l >= 0; l--) {
        const int u = gpt2_unit_block(c, l);
        if (p->recompute == GPT2_RECOMPUTE_OWN_GATHER) {   // the pitfall: a gather just to recompute
            GPT2BlockParams w = gpt2_block_view(z, c, l, zero3_pre_forward(z, u), NULL, pt);
            p->compute->block_forward(p->state, l, &w);
            zero3_post_forward(z, u);
        }
        if (l % K == K - 1)
            for (int j = nu - 1; j >= 0; j--) blk[j] = zero3_pre_backward(z, u + j);
        GPT2BlockParams w = gpt2_block_view(z, c, l, blk[0].params, blk[nu - 1].params, pt);
        GPT2BlockParams dw = gpt2_block_view(z, c, l, blk[0].grads, blk[nu - 1].grads, gt);
        // the block's activations again, from its kept input, with the params this gather brought
        if (p->recompute == GPT2_RECOMPUTE_IN_GATHER) p->compute->block_forward(p->state, l, &w);
        p->compute->block_backward(p->state, l, &w, &dw);
        if (l % K == 0)
            for (int j = nu - 1; j >= 0; j--) zero3_post_backward(z, u + j);
    }

    p->compute->embed_backward(p->state, &demb);
    zero3_reduce_grads(z, u_emb);
}

// ------------------------------------------------------------------------------------------------
// The gathers the passes make, recorded: the passes above run once over a compute that does nothing
// and an engine whose backend moves nothing, and an observer counts the gathers the engine issues.

// the counts, reached from the observer through the backend's ctx
typedef struct { int *fwd, *bwd; } GatherTally;

static void tally_collective(Zero3 *z, int unit, Zero3Collective kind, size_t bytes) {
    (void)bytes;
    GatherTally *t = (GatherTally *)z->be->ctx;
    if (kind == ZERO3_COLL_FWD_GATHER) t->fwd[unit]++;
    if (kind == ZERO3_COLL_BWD_GATHER) t->bwd[unit]++;
}
static void tally_none(Zero3 *z) { (void)z; }
static void tally_compute_begin(Zero3 *z, Zero3EventType type, int unit) { (void)z; (void)type; (void)unit; }
static void tally_wait_begin(Zero3 *z, int unit, Zero3Collective kind) { (void)z; (void)unit; (void)kind; }
static void tally_bytes(Zero3 *z, size_t bytes) { (void)z; (void)bytes; }
static const Zero3Observer GATHER_TALLY = {
    .init = tally_none, .free = tally_none, .step_begin = tally_none, .step_end = tally_none,
    .compute_begin = tally_compute_begin, .compute_end = tally_none, .collective = tally_collective,
    .wait_begin = tally_wait_begin, .wait_end = tally_none, .norm_begin = tally_none, .norm_end = tally_none,
    .transient_acquired = tally_bytes, .transient_released = tally_bytes,
};

// A backend of host memory whose collectives move nothing and are complete when started.
static void *still_alloc(void *ctx, size_t bytes) { (void)ctx; return xcalloc(1, bytes); }
static void still_free(void *ctx, void *p) { (void)ctx; free(p); }
static void still_zero(void *ctx, void *p, size_t bytes) { (void)ctx; memset(p, 0, bytes); }
static void *still_gather(void *ctx, const void *shard, void *full, size_t n, Zero3DType t) {
    (void)ctx; (void)shard; (void)full; (void)n; (void)t; return NULL;
}
static void *still_reduce_scatter(void *ctx, const void *full, void *shard, size_t n, Zero3DType t) {
    (void)ctx; (void)full; (void)shard; (void)n; (void)t; return NULL;
}
static void still_wait(void *ctx, void *handle) { (void)ctx; (void)handle; }

// the compute that does nothing: a training micro-step of the passes calls these
static void idle_batch(GPT2ComputeState *s, const int *inputs, const int *targets, int training) {
    (void)s; (void)inputs; (void)targets; (void)training;
}
static void idle_embed(GPT2ComputeState *s, const GPT2EmbedParams *w) { (void)s; (void)w; }
static void idle_block(GPT2ComputeState *s, int l, const GPT2BlockParams *w) { (void)s; (void)l; (void)w; }
static void idle_head(GPT2ComputeState *s, const GPT2HeadParams *w) { (void)s; (void)w; }
static void idle_lm_head_backward(GPT2ComputeState *s, const GPT2EmbedParams *w, const GPT2EmbedParams *dw, float d) {
    (void)s; (void)w; (void)dw; (void)d;
}
static void idle_head_backward(GPT2ComputeState *s, const GPT2HeadParams *w, const GPT2HeadParams *dw) {
    (void)s; (void)w; (void)dw;
}
static void idle_block_backward(GPT2ComputeState *s, int l, const GPT2BlockParams *w, const GPT2BlockParams *dw) {
    (void)s; (void)l; (void)w; (void)dw;
}
static const GPT2Compute IDLE_COMPUTE = {
    .set_batch = idle_batch, .embed_forward = idle_embed, .block_forward = idle_block,
    .final_norm_forward = idle_head, .lm_head_forward = idle_embed, .lm_head_backward = idle_lm_head_backward,
    .final_norm_backward = idle_head_backward, .block_backward = idle_block_backward, .embed_backward = idle_embed,
};

void gpt2_gathers_per_pass(const GPT2Config *c, int keep, int naive_recompute, int *fwd, int *bwd) {
    const int nunits = gpt2_num_units(c);
    memset(fwd, 0, (size_t)nunits * sizeof(int));
    memset(bwd, 0, (size_t)nunits * sizeof(int));
    GatherTally tally = {fwd, bwd};
    Zero3Backend be = {.ctx = &tally, .rank = 0, .world = 2, .alloc = still_alloc, .free = still_free,
                       .zero = still_zero, .all_gather_start = still_gather,
                       .reduce_scatter_start = still_reduce_scatter, .wait = still_wait};
    // the same blocks and units with one element a row: the gathers depend on the units alone
    GPT2Config shape = *c;
    shape.max_seq_len = shape.vocab_size = shape.padded_vocab_size = shape.channels = shape.num_heads = 1;
    Zero3Config zc = {.stage = 3, .align = 1, .param_type = ZERO3_F32, .grad_type = ZERO3_F32,
                      .reshard_after_forward = !keep, .observer = &GATHER_TALLY};
    Zero3 z;
    zero3_init(&z, &be, &zc);
    gpt2_register_units(&shape, &z);
    zero3_allocate(&z);
    GPT2Passes passes = {shape, &z, &IDLE_COMPUTE, NULL, NULL,
                         naive_recompute ? GPT2_RECOMPUTE_OWN_GATHER : GPT2_RECOMPUTE_NONE};
    zero3_step_begin(&z);
    zero3_micro_begin(&z, 0, 1, ZERO3_PASS_TRAIN);
    gpt2_pass_forward(&passes, NULL, NULL, 1);
    gpt2_pass_backward(&passes, 1.0f);
    zero3_finish_reductions(&z);
    zero3_free(&z);
}
