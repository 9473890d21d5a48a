// host/model.c: GPT-2's forward and backward over ZeRO units: the lifecycle of every unit, written
// once. Each unit's compute sits between two phase verbs of the engine (zero3.h): pre_forward
// gathers it (and prefetches the next), post_forward releases it; pre_backward gathers it again and
// opens its gradient buffer, post_backward reduce-scatters the gradients and releases. The compute
// itself is the trainer's (model_* in model.h), handed typed views of the unit.
#include "model.h"

float gpt2_forward(GPT2 *g, const int *inputs, const int *targets, int training) {
    const GPT2Config *c = &g->cfg;
    Zero3 *z = g->z;
    const Zero3DType pt = z->cfg.param_type;
    const int u_emb = gpt2_unit_emb(c), u_head = gpt2_unit_head(c);
    model_set_batch(g->m, inputs, targets, training);

    GPT2EmbedParams emb = gpt2_embed_view(z, c, zero3_pre_forward(z, u_emb), pt);
    model_embed_forward(g->m, &emb);
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
        model_block_forward(g->m, l, &w);
        if (l % K == K - 1)
            for (int j = 0; j < nu; j++) zero3_post_forward(z, u + j);
    }

    GPT2HeadParams head = gpt2_head_view(z, c, zero3_pre_forward(z, u_head), pt);
    model_final_norm_forward(g->m, &head);
    zero3_post_forward(z, u_head);

    // The LM head is tied to wte: the embedding unit is gathered a second time. In training it is
    // held (no post_forward) until the LM head's backward has used it.
    g->emb_held = zero3_pre_forward(z, u_emb);
    emb = gpt2_embed_view(z, c, g->emb_held, pt);
    model_lm_head_forward(g->m, &emb);
    if (!training) {
        zero3_post_forward(z, u_emb);
        g->emb_held = NULL;
    }
    if (targets && training == GPT2_TRAIN_DEFER_LOSS) {
        model_loss_accumulate(g->m);
        return 0.0f;
    }
    return targets ? (float)model_mean_loss(g->m) : 0.0f;
}

double gpt2_take_loss(GPT2 *g) { return model_loss_take(g->m); }

// Units are visited in reverse; each block's gradients go to the engine as soon as they are
// complete, so their reduce-scatter overlaps the backward of the block below.
void gpt2_backward(GPT2 *g, float dloss) {
    const GPT2Config *c = &g->cfg;
    Zero3 *z = g->z;
    const Zero3DType pt = z->cfg.param_type, gt = z->cfg.grad_type;
    const int u_emb = gpt2_unit_emb(c), u_head = gpt2_unit_head(c);
    if (!g->emb_held) fatal_local("gpt2_backward without a training forward");

    // LM head: the held embedding's params, and the unit's gradient buffer, which stays open until
    // the encoder backward has added its part; then the whole unit is reduced once.
    GPT2EmbedParams emb = gpt2_embed_view(z, c, g->emb_held, pt);
    GPT2EmbedParams demb = gpt2_embed_view(z, c, zero3_grads(z, u_emb), gt);
    model_lm_head_backward(g->m, &emb, &demb, dloss);
    zero3_release(z, u_emb);   // ends the LM head's pre_forward: the encoder needs no param values
    g->emb_held = NULL;

    Zero3UnitBuffers hb = zero3_pre_backward(z, u_head);
    GPT2HeadParams head = gpt2_head_view(z, c, hb.params, pt), dhead = gpt2_head_view(z, c, hb.grads, gt);
    model_final_norm_backward(g->m, &head, &dhead);
    zero3_post_backward(z, u_head);

    // blocks, last to first, unit by unit as in the forward (the MLP unit before the attention unit)
    const int K = gpt2_blocks_per_unit(c), nu = gpt2_units_per_block(c);
    Zero3UnitBuffers blk[2];
    for (int l = c->num_layers - 1; l >= 0; l--) {
        const int u = gpt2_unit_block(c, l);
        if (g->recompute == GPT2_RECOMPUTE_OWN_GATHER) {   // the pitfall: a gather just to recompute
            GPT2BlockParams w = gpt2_block_view(z, c, l, zero3_pre_forward(z, u), NULL, pt);
            model_block_forward(g->m, l, &w);
            zero3_post_forward(z, u);
        }
        if (l % K == K - 1)
            for (int j = nu - 1; j >= 0; j--) blk[j] = zero3_pre_backward(z, u + j);
        GPT2BlockParams w = gpt2_block_view(z, c, l, blk[0].params, blk[nu - 1].params, pt);
        GPT2BlockParams dw = gpt2_block_view(z, c, l, blk[0].grads, blk[nu - 1].grads, gt);
        // the block's activations again, from its kept input, with the params this gather brought
        if (g->recompute == GPT2_RECOMPUTE_IN_GATHER) model_block_forward(g->m, l, &w);
        model_block_backward(g->m, l, &w, &dw);
        if (l % K == 0)
            for (int j = nu - 1; j >= 0; j--) zero3_post_backward(z, u + j);
    }

    model_embed_backward(g->m, &demb);
    zero3_reduce_grads(z, u_emb);
}
