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
