// host/model.h: GPT-2's forward and backward passes over the engine's units, written once for both
// trainers (model.c: the ZeRO lifecycle of every unit), and the per-unit compute each trainer
// supplies with its own kernels and memory (train_gpt2_zero3.c on the CPU, train_gpt2_zero3.cu on
// the GPU). A trainer implements the model_* functions below and nothing of ZeRO.
#pragma once
#include "gpt2.h"

#ifdef __cplusplus
extern "C" {
#endif

// ------------------------------------------------------------------------------------------------
// Implemented by each trainer. Model is its own: activations (B,T,...), scratch, device state.
// Every view points into the engine's memory: w = gathered params, dw = the unit's gradient buffer
// (accumulate into it: +=). Shapes: C channels, B*T positions, Vp padded vocabulary.
typedef struct Model Model;
// recompute (GPT2Recompute): keep only each block's output per layer (the next block's input) and
// share one set of the other activations among the layers; the passes recompute a block's forward
// before its backward.
Model *model_create(const GPT2Config *cfg, int B, int T, int recompute);
size_t model_activation_bytes(const GPT2Config *cfg, int B, int T, int recompute);   // what create allocates
void model_free(Model *m);
// The (B,T) host token ids of the next forward; targets NULL: no loss (sampling). training = 1
// keeps what the backward needs.
void model_set_batch(Model *m, const int *inputs, const int *targets, int training);
void model_embed_forward(Model *m, const GPT2EmbedParams *w);           // encoded = wte[inputs] + wpe
void model_block_forward(Model *m, int l, const GPT2BlockParams *w);    // residual of block l
void model_final_norm_forward(Model *m, const GPT2HeadParams *w);       // lnf = layernorm(residual)
void model_lm_head_forward(Model *m, const GPT2EmbedParams *w);         // logits = lnf wte^T (+ losses)
double model_mean_loss(Model *m);                                       // mean over B*T (needs targets)
void model_loss_accumulate(Model *m);       // adds model_mean_loss to a running sum without waiting for it
double model_loss_take(Model *m);           // that sum (one read-back), reset to 0
void model_lm_head_backward(Model *m, const GPT2EmbedParams *w, const GPT2EmbedParams *dw, float dloss);
void model_final_norm_backward(Model *m, const GPT2HeadParams *w, const GPT2HeadParams *dw);
void model_block_backward(Model *m, int l, const GPT2BlockParams *w, const GPT2BlockParams *dw);
void model_embed_backward(Model *m, const GPT2EmbedParams *dw);         // wte, wpe from the inputs
void model_probs(Model *m, int b, int t, float *probs);                 // softmax row (V) after a forward
// The device, for the startup report and the step line.
void model_describe(char *buf, size_t n);                // device line for the startup report
double model_flops_fraction(double flops_per_s);         // MFU (0..1), or <0 when not applicable
void model_step_begin(int step);                         // around every optimizer step (GPU: NVTX)
void model_step_end(void);
void model_step_note(char *buf, size_t n);               // appended to rank 0's step line

// ------------------------------------------------------------------------------------------------
// Written once (model.c): the passes, each unit between the engine's phase verbs.
// Activation recompute (-rc): none; each block's forward again inside its backward's gather (no
// extra bytes); or the naive way, with a gather of its own before the backward's (the pitfall the
// notes warn about: one more all-gather per block).
typedef enum { GPT2_RECOMPUTE_NONE = 0, GPT2_RECOMPUTE_IN_GATHER = 1, GPT2_RECOMPUTE_OWN_GATHER = 2 } GPT2Recompute;

typedef struct {
    GPT2Config cfg;
    Zero3 *z;
    Model *m;
    void *emb_held;   // the embedding unit's params, gathered for the LM head, held until its backward
    int recompute;    // GPT2Recompute
} GPT2;

// Returns the mean loss over this rank's B*T tokens (0 when targets is NULL). training = 1 holds
// the tied embedding for gpt2_backward. training = GPT2_TRAIN_DEFER_LOSS: the same, but the loss is
// not waited for: it returns 0 and adds the loss to a sum gpt2_take_loss reads (once per step, so
// the host never waits for a forward).
#define GPT2_TRAIN_DEFER_LOSS 2
float gpt2_forward(GPT2 *g, const int *inputs, const int *targets, int training);
double gpt2_take_loss(GPT2 *g);
// After gpt2_forward(..., training = 1). dloss = d(step loss)/d(each token's loss).
void gpt2_backward(GPT2 *g, float dloss);


#ifdef __cplusplus
}
#endif
