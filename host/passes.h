// host/passes.h: GPT-2's forward and backward passes over the engine's units, and the seam between
// them and the math.
//
//   the passes (passes.c, written once)      run each unit's ZeRO lifecycle: gather it, hand its
//                                             params to the compute, release it; gather it again,
//                                             open its gradient buffer, reduce, release
//   the compute (a GPT2Compute table)         the per-unit math on one device's kernels and memory:
//                                             cpu/gpt2_cpu.c, gpu/gpt2_gpu.cuh
//
// The compute knows nothing of ZeRO: it gets typed views of gathered units (w.qkvw, ...) and adds
// into gradient buffers it is handed. The passes know nothing of kernels: they reach the math only
// through the table a trainer's main hands in (TrainBuild, host/train.h), the way the engine reaches
// a device through its Zero3Backend. A test can hand in a table of its own
// (tests/unit/test_engine_schedule.c records every call to check the passes' order of gathers,
// releases and reductions).
#pragma once
#include "gpt2.h"

#ifdef __cplusplus
extern "C" {
#endif

// ------------------------------------------------------------------------------------------------
// The compute. GPT2ComputeState is the compute's own: activations (B,T,...), scratch, device
// state. Every view points into the engine's memory: w = gathered params, dw = the unit's gradient
// buffer (accumulate into it: +=). Shapes: C channels, B*T positions, Vp padded vocabulary.
typedef struct GPT2ComputeState GPT2ComputeState;

// The activations a test compares against a reference (tests/test_checks.h): per layer, then two
// of the whole model.
typedef enum {
    GPT2_ACT_LN1, GPT2_ACT_QKV, GPT2_ACT_ATTY, GPT2_ACT_RESIDUAL2, GPT2_ACT_LN2, GPT2_ACT_FCH, GPT2_ACT_FCH_GELU,
    GPT2_ACT_RESIDUAL3,
    GPT2_LAYER_ACTS,                    // how many per layer
    GPT2_ACT_LNF = GPT2_LAYER_ACTS,     // (B,T,C)
    GPT2_ACT_LOGITS,                    // (B,T,Vp)
} GPT2Activation;

typedef struct {
    // memory. recompute (GPT2Recompute): keep only each block's output per layer (the next block's
    // input) and share one set of the other activations among the layers; the passes recompute a
    // block's forward before its backward. device: the engine backend's state (Zero3Backend.ctx),
    // whose device the compute runs on; the state keeps what it takes from it (GPU: the compute
    // stream every kernel is queued on, the device) beside its own handles (cuBLASLt, workspace).
    GPT2ComputeState *(*create)(const GPT2Config *cfg, int B, int T, int recompute, void *device);
    size_t (*activation_bytes)(const GPT2Config *cfg, int B, int T, int recompute);   // what create allocates
    void (*destroy)(GPT2ComputeState *s);
    // The (B,T) host token ids of the next forward; targets NULL: no loss (sampling). training = 1
    // keeps what the backward needs.
    void (*set_batch)(GPT2ComputeState *s, const int *inputs, const int *targets, int training);

    // the math of each unit, forward
    void (*embed_forward)(GPT2ComputeState *s, const GPT2EmbedParams *w);          // encoded = wte[inputs] + wpe
    void (*block_forward)(GPT2ComputeState *s, int l, const GPT2BlockParams *w);   // residual of block l
    void (*final_norm_forward)(GPT2ComputeState *s, const GPT2HeadParams *w);      // lnf = layernorm(residual)
    void (*lm_head_forward)(GPT2ComputeState *s, const GPT2EmbedParams *w);        // logits = lnf wte^T (+ losses)
    // the loss of the last forward (needs targets)
    double (*mean_loss)(GPT2ComputeState *s);          // mean over B*T
    void (*loss_accumulate)(GPT2ComputeState *s);      // adds mean_loss to a running sum without waiting for it
    double (*loss_take)(GPT2ComputeState *s);          // that sum (one read-back), reset to 0
    // ... and backward
    void (*lm_head_backward)(GPT2ComputeState *s, const GPT2EmbedParams *w, const GPT2EmbedParams *dw, float dloss);
    void (*final_norm_backward)(GPT2ComputeState *s, const GPT2HeadParams *w, const GPT2HeadParams *dw);
    void (*block_backward)(GPT2ComputeState *s, int l, const GPT2BlockParams *w, const GPT2BlockParams *dw);
    void (*embed_backward)(GPT2ComputeState *s, const GPT2EmbedParams *dw);      // wte, wpe from the inputs

    // what the last forward computed
    void (*probs)(GPT2ComputeState *s, int b, int t, float *probs);   // softmax row (V), on the host
    // activation `which` of `layer` (layer ignored for LNF, LOGITS): B*T rows in the build's
    // param_type (the CPU's fp32 in both of its tables: its -p bf16 keeps activations fp32), in the
    // compute's memory (read it through the backend's copy_to_host)
    const void *(*activation)(GPT2ComputeState *s, GPT2Activation which, int layer);

    // the device it runs on, for the startup report and the step line
    void (*describe)(GPT2ComputeState *s, char *buf, size_t n);          // device line for the startup report
    double (*flops_fraction)(GPT2ComputeState *s, double flops_per_s);   // MFU (0..1), or <0 when not applicable
    void (*step_begin)(GPT2ComputeState *s, int step);   // around every optimizer step (GPU: NVTX); step_end
    void (*step_end)(GPT2ComputeState *s);               // returns once the device has done the step's work
                                                         // (GPU: the compute stream drained, AdamW included)
    void (*step_note)(GPT2ComputeState *s, char *buf, size_t n);         // appended to rank 0's step line
    void (*run_note)(GPT2ComputeState *s, char *buf, size_t n);   // a line for the end-of-run summary ("": none)
} GPT2Compute;

// ------------------------------------------------------------------------------------------------
// The passes (passes.c), each unit between the engine's phase verbs.
// Activation recompute (-rc): none; each block's forward again inside its backward's gather (no
// extra bytes); or the naive way, with a gather of its own before the backward's (the pitfall the
// notes warn about: one more all-gather per block).
typedef enum { GPT2_RECOMPUTE_NONE = 0, GPT2_RECOMPUTE_IN_GATHER = 1, GPT2_RECOMPUTE_OWN_GATHER = 2 } GPT2Recompute;

typedef struct {
    GPT2Config cfg;
    Zero3 *z;
    const GPT2Compute *compute;
    GPT2ComputeState *state;   // the compute's, made by compute->create
    void *emb_held;   // the embedding unit's params, gathered for the LM head, held until its backward
    int recompute;    // GPT2Recompute
} GPT2Passes;

// Returns the mean loss over this rank's B*T tokens (0 when targets is NULL). training = 1 holds
// the tied embedding for gpt2_pass_backward. training = GPT2_TRAIN_DEFER_LOSS: the same, but the
// loss is not waited for: it returns 0 and adds the loss to a sum gpt2_pass_take_loss reads (once
// per step, so the host never waits for a forward).
#define GPT2_TRAIN_DEFER_LOSS 2
float gpt2_pass_forward(GPT2Passes *p, const int *inputs, const int *targets, int training);
double gpt2_pass_take_loss(GPT2Passes *p);
// After gpt2_pass_forward(..., training = 1). dloss = d(step loss)/d(each token's loss).
void gpt2_pass_backward(GPT2Passes *p, float dloss);

// How many all-gathers one training micro-step of the passes above issues per unit where params are
// SHARDED, in the forward (fwd[u]) and in the backward (bwd[u]), for the collective ledger's theory
// (zero3_theory_ledger). Not a count written out by hand: the passes are run once, over a compute
// that does nothing and an engine at stage 3 on two ranks whose backend moves nothing, and the
// engine's gathers are counted as its observer sees them. keep: no reshard after forward (-ra 0);
// naive_recompute: -rc 2 (its extra gather is a forward verb's, counted in fwd). For GPT-2: every
// unit once each way, the tied embedding twice forward and never backward.
void gpt2_gathers_per_pass(const GPT2Config *c, int keep, int naive_recompute, int *fwd, int *bwd);

#ifdef __cplusplus
}
#endif
