// gpt2_gpu.cuh: GPT-2's per-unit math on CUDA kernels, as the table the passes call
// (GPT2_GPU_COMPUTE; host/passes.h), and the GPU programs' build description (GPU_BUILD). The same
// functions as the CPU's cpu/gpt2_cpu.c: only the math and the memory differ. Kernels (gpu/*.cuh)
// run on the backend's compute stream, which create takes from the backend it is handed
// (gpu/backend_nccl.cuh) and every call names (m->stream), while the engine's collectives run on
// the backend's communication stream and overlap with them. m is the compute's state: that stream
// and backend, activations, scratch, the matmul context (cuBLASLt handle, workspace, plans), the
// pinned token buffers.
//
// Included by train_gpt2_zero3.cu and test_gpt2.cu (the GPU code is built as one translation unit
// per program; the engine and the host library are C, compiled once and linked).
//
// Precision: -DENABLE_BF16 (default): working params, activations and gradients in bf16, fp32 master
// weights and Adam moments in the engine; -DENABLE_FP32: everything fp32 (for tight tests).
#pragma once
#include "common.cuh"
#include "kernels.cuh"
#include "attention.cuh"
#include "flash_attention.cuh"
#include "flash_attention_tc.cuh"
#include "matmul.cuh"
#include "backend_nccl.cuh"
#include "../host/passes.h"
#include "../host/train.h"

// ------------------------------------------------------------------------------------------------
// Activations. floatX tensors, per layer l (shapes):
//   ln1 (B,T,C)  qkv (B,T,3C)  atty (B,T,C)  att (B,NH,T,T)  residual2 (B,T,C)  ln2 (B,T,C)
//   fch (B,T,4C) (pre-GELU)  fch_gelu (B,T,4C)  residual3 (B,T,C)
// fp32 per layer: ln1_mean, ln1_rstd, ln2_mean, ln2_rstd (B,T); att_lse (B,NH,T).
// Global floatX: encoded, lnf (B,T,C), logits (B,T,Vp) (overwritten by dlogits in backward),
// and scratch reused by every layer: qkvr, dqkvr (3 x (B,T,C) in head order), vacc, dvacc (B,T,C),
// dresidual, dln, datty (B,T,C), dqkv (B,T,3C), dfch (B,T,4C),
// datt (B,NH,T,T). Global fp32: lnf_mean, lnf_rstd, losses (B,T), partials (reduction scratch),
// att_d (B,NH,T), lse (B,T: each row's logsumexp of the logits, from the forward to the backward),
// loss_sum (1: the deferred mean losses of this step's micro-steps).
// Attention: the fused flash path (the default: on tensor cores in BF16 builds, gpu/flash_attention_tc.cuh;
// the portable kernels of gpu/flash_attention.cuh in FP32 builds or with -DATTENTION_PORTABLE, make
// ATTENTION=portable; the same memory either way) keeps only att_lse per
// layer and needs att_d as scratch; att, qkvr, dqkvr, vacc, dvacc and datt are then empty. The
// materialized path (-DATTENTION_MATERIALIZED, make ATTENTION=materialized) keeps att (B,NH,T,T)
// per layer and uses that scratch; att_lse and att_d are then empty.
enum { A_LN1, A_QKV, A_ATTY, A_ATT, A_RESIDUAL2, A_LN2, A_FCH, A_FCH_GELU, A_RESIDUAL3, A_PER_LAYER };
enum { F_LN1_MEAN, F_LN1_RSTD, F_LN2_MEAN, F_LN2_RSTD, F_ATT_LSE, F_PER_LAYER };
enum { G_ENCODED, G_LNF, G_LOGITS, G_QKVR, G_DQKVR, G_VACC, G_DVACC, G_DRESIDUAL, G_DLN, G_DATTY, G_DQKV,
       G_DFCH, G_DATT, G_GLOBAL };
enum { H_LNF_MEAN, H_LNF_RSTD, H_LOSSES, H_PARTIALS, H_ATT_D, H_LSE, H_LOSS_SUM, H_GLOBAL };
#if defined(ATTENTION_MATERIALIZED)
#define ATTENTION_FLASH 0
#define ATTENTION_TC 0
#define ATTENTION_NAME "materialized attention"
#elif defined(ENABLE_FP32) || defined(ATTENTION_PORTABLE)
#define ATTENTION_FLASH 1
#define ATTENTION_TC 0
#define ATTENTION_NAME "flash attention (portable)"
#else
#define ATTENTION_FLASH 1
#define ATTENTION_TC 1
#define ATTENTION_NAME "flash attention (tensor cores)"
#endif

struct GPT2ComputeState {
    GpuBackend* gpu;                // the engine's backend (create's device): its device and memory
    cudaStream_t stream;            // its compute stream: every kernel, copy and event of this compute
    GPT2Config cfg;
    int B, T;
    MatmulContext mm;
    floatX* acts_memory;
    float* stats_memory;
    size_t acts_bytes;
    floatX* layer[1024][A_PER_LAYER];
    float* layer_stats[1024][F_PER_LAYER];
    floatX* g[G_GLOBAL];
    float* h[H_GLOBAL];
    int *d_inputs, *d_targets;      // (B,T) on the device
    int *pinned_inputs, *pinned_targets;
    float* pinned_losses;
    cudaEvent_t uploaded;           // the last upload has left the pinned buffers
    EncoderPlan plan;               // this micro-step's tokens sorted for the encoder backward
    int have_targets;               // the current forward computes losses
    int training;                   // ... and keeps what the backward needs (the encoder plan)
};

static size_t layer_act_elems(const GPT2Config* c, int B, int T, int which) {
    const size_t BT = (size_t)B * T, C = c->channels;
    switch (which) {
    case A_QKV: return BT * 3 * C;
    case A_ATT: return ATTENTION_FLASH ? 0 : attention_att_elems(B, T, c->num_heads);
    case A_FCH: case A_FCH_GELU: return BT * 4 * C;
    default: return BT * C;
    }
}
static size_t global_act_elems(const GPT2Config* c, int B, int T, int which) {
    const size_t BT = (size_t)B * T, C = c->channels;
    switch (which) {
    case G_LOGITS: return BT * c->padded_vocab_size;
    case G_QKVR: case G_DQKVR: return ATTENTION_FLASH ? 0 : attention_qkvr_elems(B, T, c->channels);
    case G_VACC: case G_DVACC: return ATTENTION_FLASH ? 0 : BT * C;
    case G_DQKV: return BT * 3 * C;
    case G_DFCH: return BT * 4 * C;
    case G_DATT: return ATTENTION_FLASH ? 0 : attention_att_elems(B, T, c->num_heads);
    default: return BT * C;
    }
}
static size_t global_stat_elems(const GPT2Config* c, int B, int T, int which) {
    const int BT = B * T;
    if (which == H_PARTIALS) {
        size_t a = layernorm_backward_scratch_floats(BT, c->channels);
        size_t b = matmul_backward_scratch_floats(BT, 4 * c->channels);
        return a > b ? a : b;
    }
    if (which == H_ATT_D) return ATTENTION_FLASH ? flash_attention_scratch_floats(B, T, c->num_heads) : 0;
    if (which == H_LOSS_SUM) return 1;
    return (size_t)BT;
}
static size_t layer_stat_elems(const GPT2Config* c, int B, int T, int which) {
    if (which == F_ATT_LSE) return ATTENTION_FLASH ? flash_attention_lse_floats(B, T, c->num_heads) : 0;
    return (size_t)B * T;
}
// What attention keeps and uses, in bytes, on either path (for the memory report): flash keeps the
// lse per layer and one (B,NH,T) scratch; materialized keeps att (B,NH,T,T) per layer and uses
// qkvr, dqkvr (3BTC each), vacc, dvacc (BTC each) and datt (B,NH,T,T).
static double attention_bytes(const GPT2Config* c, int B, int T, int flash) {
    const double L = c->num_layers, bht = (double)B * c->num_heads * T, BTC = (double)B * T * c->channels;
    if (flash) return (L + 1.0) * bht * sizeof(float);
    return (L + 1.0) * bht * T * sizeof(floatX) + 8.0 * BTC * sizeof(floatX);
}

// tensors are carved out of one allocation; each starts 256-byte aligned (cuBLASLt, vector loads)
static size_t align_elems(size_t n, size_t elem_bytes) { return (n * elem_bytes + 255) / 256 * 256 / elem_bytes; }

// With recompute, layer l > 0 has its own residual3 (the next block's input) and shares layer 0's
// other activations and layernorm statistics: the backward recomputes them before it needs them.
static int layer_act_shared(int recompute, int l, int a) { return recompute && l > 0 && a != A_RESIDUAL3; }

// Elements of floatX (*nx) and fp32 (*nf) activations, each tensor 256-byte aligned.
static void activation_elems(const GPT2Config* cfg, int B, int T, int recompute, size_t* nx, size_t* nf) {
    *nx = 0;
    *nf = 0;
    for (int l = 0; l < cfg->num_layers; l++) {
        for (int a = 0; a < A_PER_LAYER; a++)
            if (!layer_act_shared(recompute, l, a)) *nx += align_elems(layer_act_elems(cfg, B, T, a), sizeof(floatX));
        if (!(recompute && l > 0))
            for (int a = 0; a < F_PER_LAYER; a++) *nf += align_elems(layer_stat_elems(cfg, B, T, a), sizeof(float));
    }
    for (int a = 0; a < G_GLOBAL; a++) *nx += align_elems(global_act_elems(cfg, B, T, a), sizeof(floatX));
    for (int a = 0; a < H_GLOBAL; a++) *nf += align_elems(global_stat_elems(cfg, B, T, a), sizeof(float));
}

static size_t activation_bytes(const GPT2Config* cfg, int B, int T, int recompute) {
    size_t nx, nf;
    activation_elems(cfg, B, T, recompute, &nx, &nf);
    return nx * sizeof(floatX) + nf * sizeof(float);
}

static GPT2ComputeState* create(const GPT2Config* cfg, int B, int T, int recompute, void* device) {
    if (cfg->num_layers > 1024) fatal("model: at most 1024 layers");
    const int C = cfg->channels, NH = cfg->num_heads;
    if (C % XVEC_SIZE || (C / NH) % XVEC_SIZE || T % XVEC_SIZE || cfg->padded_vocab_size % XVEC_SIZE)
        fatal("model: the GPU kernels need C, C/NH, T and Vp to be multiples of %d (C=%d NH=%d T=%d Vp=%d)",
              XVEC_SIZE, C, NH, T, cfg->padded_vocab_size);
    GPT2ComputeState* m = (GPT2ComputeState*)xcalloc(1, sizeof(GPT2ComputeState));
    m->gpu = (GpuBackend*)device;
    m->stream = m->gpu->compute;
    m->cfg = *cfg;
    m->B = B;
    m->T = T;
    size_t nx, nf;
    activation_elems(cfg, B, T, recompute, &nx, &nf);
    m->acts_bytes = nx * sizeof(floatX) + nf * sizeof(float);
    m->acts_memory = (floatX*)gpu_alloc(m->gpu, nx * sizeof(floatX));
    m->stats_memory = (float*)gpu_alloc(m->gpu, nf * sizeof(float));
    floatX* px = m->acts_memory;
    float* pf = m->stats_memory;
    for (int l = 0; l < cfg->num_layers; l++) {
        for (int a = 0; a < A_PER_LAYER; a++) {
            if (layer_act_shared(recompute, l, a)) { m->layer[l][a] = m->layer[0][a]; continue; }
            m->layer[l][a] = px;
            px += align_elems(layer_act_elems(cfg, B, T, a), sizeof(floatX));
        }
        for (int a = 0; a < F_PER_LAYER; a++) {
            if (recompute && l > 0) { m->layer_stats[l][a] = m->layer_stats[0][a]; continue; }
            m->layer_stats[l][a] = pf;
            pf += align_elems(layer_stat_elems(cfg, B, T, a), sizeof(float));
        }
    }
    for (int a = 0; a < G_GLOBAL; a++) { m->g[a] = px; px += align_elems(global_act_elems(cfg, B, T, a), sizeof(floatX)); }
    for (int a = 0; a < H_GLOBAL; a++) { m->h[a] = pf; pf += align_elems(global_stat_elems(cfg, B, T, a), sizeof(float)); }

    const size_t BT = (size_t)B * T;
    cudaCheck(cudaMalloc((void**)&m->d_inputs, BT * sizeof(int)));
    cudaCheck(cudaMalloc((void**)&m->d_targets, BT * sizeof(int)));
    cudaCheck(cudaMallocHost((void**)&m->pinned_inputs, BT * sizeof(int)));
    cudaCheck(cudaMallocHost((void**)&m->pinned_targets, BT * sizeof(int)));
    cudaCheck(cudaMallocHost((void**)&m->pinned_losses, BT * sizeof(float)));
    cudaCheck(cudaMemset(m->h[H_LOSS_SUM], 0, sizeof(float)));
    cudaCheck(cudaEventCreateWithFlags(&m->uploaded, cudaEventDisableTiming));
    cudaCheck(cudaEventRecord(m->uploaded, m->stream));
    encoder_plan_create(&m->plan, (int)BT, cfg->vocab_size);
    matmul_init(&m->mm);
    return m;
}

static void destroy(GPT2ComputeState* m) {
    if (!m) return;
    cudaCheck(cudaDeviceSynchronize());
    matmul_destroy(&m->mm);
    encoder_plan_destroy(&m->plan);
    cudaCheck(cudaEventDestroy(m->uploaded));
    cudaCheck(cudaFree(m->d_inputs));
    cudaCheck(cudaFree(m->d_targets));
    cudaCheck(cudaFreeHost(m->pinned_inputs));
    cudaCheck(cudaFreeHost(m->pinned_targets));
    cudaCheck(cudaFreeHost(m->pinned_losses));
    gpu_free(m->gpu, m->acts_memory);
    gpu_free(m->gpu, m->stats_memory);
    free(m);
}

// ------------------------------------------------------------------------------------------------
// Forward. Tokens arrive as host arrays; set_batch uploads them on the compute stream.

static void set_batch(GPT2ComputeState* m, const int* inputs, const int* targets, int training) {
    const int BT = m->B * m->T;
    cudaStream_t s = m->stream;
    // tokens to the device through pinned buffers, once the previous upload has left them
    cudaCheck(cudaEventSynchronize(m->uploaded));
    memcpy(m->pinned_inputs, inputs, (size_t)BT * sizeof(int));
    cudaCheck(cudaMemcpyAsync(m->d_inputs, m->pinned_inputs, (size_t)BT * sizeof(int), cudaMemcpyHostToDevice, s));
    m->have_targets = targets != NULL;
    m->training = training;
    if (targets) {
        memcpy(m->pinned_targets, targets, (size_t)BT * sizeof(int));
        cudaCheck(cudaMemcpyAsync(m->d_targets, m->pinned_targets, (size_t)BT * sizeof(int), cudaMemcpyHostToDevice, s));
    }
    cudaCheck(cudaEventRecord(m->uploaded, s));
    if (training) encoder_plan_build(&m->plan, inputs, BT, s);
}

// The input of block l's residual stream: the embedding for block 0, else block l-1's output.
static const floatX* block_input(const GPT2ComputeState* m, int l) {
    return l == 0 ? m->g[G_ENCODED] : m->layer[l - 1][A_RESIDUAL3];
}

static void embed_forward(GPT2ComputeState* m, const GPT2EmbedParams* w) {
    encoder_forward(m->g[G_ENCODED], m->d_inputs, w->wte, w->wpe, m->B, m->T, m->cfg.channels, m->stream);
}

static void block_forward(GPT2ComputeState* m, int l, const GPT2BlockParams* w) {
    const int B = m->B, T = m->T, C = m->cfg.channels, NH = m->cfg.num_heads, BT = B * T;
    cudaStream_t s = m->stream;
    floatX** a = m->layer[l];
    float** st = m->layer_stats[l];
    const floatX* residual = block_input(m, l);
    floatX *l_ln1 = a[A_LN1], *l_qkv = a[A_QKV], *l_atty = a[A_ATTY], *l_residual2 = a[A_RESIDUAL2];
    floatX *l_ln2 = a[A_LN2], *l_fch = a[A_FCH], *l_fch_gelu = a[A_FCH_GELU], *l_residual3 = a[A_RESIDUAL3];
    layernorm_forward(l_ln1, st[F_LN1_MEAN], st[F_LN1_RSTD], residual, w->ln1w, w->ln1b, BT, C, s);
    matmul_forward(&m->mm, l_qkv, NULL, l_ln1, w->qkvw, w->qkvb, BT, C, 3 * C, s);
#if ATTENTION_TC
    flash_attention_tc_forward(l_atty, st[F_ATT_LSE], l_qkv, B, T, C, NH, s);
#elif ATTENTION_FLASH
    flash_attention_forward(l_atty, st[F_ATT_LSE], l_qkv, B, T, C, NH, s);
#else
    attention_forward(l_atty, a[A_ATT], m->g[G_QKVR], m->g[G_VACC], l_qkv, B, T, C, NH, m->mm.blas, s);
#endif
    // the projections add themselves to the residual stream in their GEMM's epilogue (gpu/matmul.cuh)
    matmul_residual_forward(&m->mm, l_residual2, residual, l_atty, w->attprojw, w->attprojb, BT, C, C, s);
    layernorm_forward(l_ln2, st[F_LN2_MEAN], st[F_LN2_RSTD], l_residual2, w->ln2w, w->ln2b, BT, C, s);
    // fc with GELU: fch gets the pre-activation, fch_gelu the output (fused in the epilogue where possible)
    matmul_forward(&m->mm, l_fch_gelu, l_fch, l_ln2, w->fcw, w->fcb, BT, C, 4 * C, s);
    matmul_residual_forward(&m->mm, l_residual3, l_residual2, l_fch_gelu, w->fcprojw, w->fcprojb, BT, 4 * C, C, s);
}

static void final_norm_forward(GPT2ComputeState* m, const GPT2HeadParams* w) {
    layernorm_forward(m->g[G_LNF], m->h[H_LNF_MEAN], m->h[H_LNF_RSTD], block_input(m, m->cfg.num_layers), w->lnfw,
                      w->lnfb, m->B * m->T, m->cfg.channels, m->stream);
}

// logits = lnf wte^T (the tied LM head); with targets, the per-token losses and each row's logsumexp
// in one pass over the logits (they stay intact: the gradient needs dloss, which the backward brings,
// and then needs only the logsumexp: no reduction is recomputed)
static void lm_head_forward(GPT2ComputeState* m, const GPT2EmbedParams* w) {
    const int BT = m->B * m->T, C = m->cfg.channels, V = m->cfg.vocab_size, Vp = m->cfg.padded_vocab_size;
    matmul_forward(&m->mm, m->g[G_LOGITS], NULL, m->g[G_LNF], w->wte, NULL, BT, C, Vp, m->stream);
    if (m->have_targets)
        fused_classifier(m->g[G_LOGITS], m->h[H_LOSSES], m->d_targets, BT, V, Vp, 0.0f, 0, m->stream, m->h[H_LSE]);
}

static double mean_loss(GPT2ComputeState* m) {
    const int BT = m->B * m->T;
    cudaStream_t s = m->stream;
    cudaCheck(cudaMemcpyAsync(m->pinned_losses, m->h[H_LOSSES], (size_t)BT * sizeof(float), cudaMemcpyDeviceToHost, s));
    cudaCheck(cudaStreamSynchronize(s));
    double sum = 0.0;
    for (int i = 0; i < BT; i++) sum += m->pinned_losses[i];
    return sum / BT;
}

// the training loop's way: the mean loss of every micro-step adds up on the device, read once per step
static void accumulate_loss(GPT2ComputeState* m) {
    loss_accumulate(m->h[H_LOSS_SUM], m->h[H_LOSSES], m->B * m->T, m->stream);
}
static double loss_take(GPT2ComputeState* m) {
    cudaStream_t s = m->stream;
    cudaCheck(cudaMemcpyAsync(m->pinned_losses, m->h[H_LOSS_SUM], sizeof(float), cudaMemcpyDeviceToHost, s));
    cudaCheck(cudaMemsetAsync(m->h[H_LOSS_SUM], 0, sizeof(float), s));
    cudaCheck(cudaStreamSynchronize(s));
    return m->pinned_losses[0];
}

// ------------------------------------------------------------------------------------------------
// Backward. Parameter gradients (dw) accumulate (+=) in the engine's buffers; the reduce-scatter of
// each unit runs on the comm stream while the next unit's backward computes.

// dlogits in place of the logits (elementwise, from the forward's logsumexp), then d(lnf) into dln
// and d(wte) through the tied matrix
static void lm_head_backward(GPT2ComputeState* m, const GPT2EmbedParams* w, const GPT2EmbedParams* dw, float dloss) {
    const int BT = m->B * m->T, C = m->cfg.channels, V = m->cfg.vocab_size, Vp = m->cfg.padded_vocab_size;
    cudaStream_t s = m->stream;
    floatX** g = m->g;
    classifier_backward(g[G_LOGITS], m->h[H_LSE], m->d_targets, BT, V, Vp, dloss, s);
    matmul_backward(&m->mm, g[G_DLN], dw->wte, NULL, m->h[H_PARTIALS], g[G_LOGITS], g[G_LNF], w->wte, NULL, BT, C, Vp, s);
}

// d(lnf) -> d(last residual), which starts the residual stream's gradient (dresidual)
static void final_norm_backward(GPT2ComputeState* m, const GPT2HeadParams* w, const GPT2HeadParams* dw) {
    const int BT = m->B * m->T, C = m->cfg.channels;
    cudaStream_t s = m->stream;
    floatX** g = m->g;
    cudaCheck(cudaMemsetAsync(g[G_DRESIDUAL], 0, (size_t)BT * C * sizeof(floatX), s));
    layernorm_backward(g[G_DRESIDUAL], dw->lnfw, dw->lnfb, m->h[H_PARTIALS], g[G_DLN], block_input(m, m->cfg.num_layers),
                       w->lnfw, m->h[H_LNF_MEAN], m->h[H_LNF_RSTD], BT, C, s);
}

// dresidual holds d(residual3 of block l) on entry and d(its input) on exit.
static void block_backward(GPT2ComputeState* m, int l, const GPT2BlockParams* w, const GPT2BlockParams* dw) {
    const int B = m->B, T = m->T, C = m->cfg.channels, NH = m->cfg.num_heads, BT = B * T;
    cudaStream_t s = m->stream;
    floatX** g = m->g;
    floatX** a = m->layer[l];
    float** st = m->layer_stats[l];
    float* partials = m->h[H_PARTIALS];
    floatX *dres = g[G_DRESIDUAL], *dln = g[G_DLN];
    // MLP: residual3 = residual2 + fcproj, so d(fcproj) = dres and dres flows on to residual2.
    // fcproj's input came through the GELU: its dinp is the gradient of the pre-activation fch.
    matmul_backward(&m->mm, g[G_DFCH], dw->fcprojw, dw->fcprojb, partials, dres, a[A_FCH_GELU], w->fcprojw, a[A_FCH], BT, 4 * C, C, s);
    matmul_backward(&m->mm, dln, dw->fcw, dw->fcb, partials, g[G_DFCH], a[A_LN2], w->fcw, NULL, BT, C, 4 * C, s);
    layernorm_backward(dres, dw->ln2w, dw->ln2b, partials, dln, a[A_RESIDUAL2], w->ln2w, st[F_LN2_MEAN], st[F_LN2_RSTD], BT, C, s);
    // attention: residual2 = residual + attproj, the same split
    matmul_backward(&m->mm, g[G_DATTY], dw->attprojw, dw->attprojb, partials, dres, a[A_ATTY], w->attprojw, NULL, BT, C, C, s);
#if ATTENTION_TC
    flash_attention_tc_backward(g[G_DQKV], m->h[H_ATT_D], g[G_DATTY], a[A_QKV], a[A_ATTY], st[F_ATT_LSE], B, T, C, NH, s);
#elif ATTENTION_FLASH
    flash_attention_backward(g[G_DQKV], m->h[H_ATT_D], g[G_DATTY], a[A_QKV], a[A_ATTY], st[F_ATT_LSE], B, T, C, NH, s);
#else
    attention_backward(g[G_DQKV], g[G_QKVR], g[G_DQKVR], g[G_DVACC], g[G_DATT], g[G_DATTY], a[A_QKV], a[A_ATT], B, T, C, NH,
                       m->mm.blas, s);
#endif
    matmul_backward(&m->mm, dln, dw->qkvw, dw->qkvb, partials, g[G_DQKV], a[A_LN1], w->qkvw, NULL, BT, C, 3 * C, s);
    layernorm_backward(dres, dw->ln1w, dw->ln1b, partials, dln, block_input(m, l), w->ln1w, st[F_LN1_MEAN], st[F_LN1_RSTD], BT, C, s);
}

// the encoder needs no parameter values, only this micro-step's token plan and the gradient buffer
static void embed_backward(GPT2ComputeState* m, const GPT2EmbedParams* dw) {
    encoder_backward(dw->wte, dw->wpe, m->g[G_DRESIDUAL], &m->plan, m->B, m->T, m->cfg.channels, m->stream);
}

// softmax row (V) of position (b,t) after a forward: computed on the host from that row's logits
static void probs_row(GPT2ComputeState* m, int b, int t, float* probs) {
    const int V = m->cfg.vocab_size;
    floatX* row = (floatX*)xmalloc((size_t)V * sizeof(floatX));
    cudaCheck(cudaStreamSynchronize(m->stream));
    cudaCheck(cudaMemcpy(row, m->g[G_LOGITS] + ((size_t)b * m->T + t) * m->cfg.padded_vocab_size, (size_t)V * sizeof(floatX),
                         cudaMemcpyDeviceToHost));
    double mx = -INFINITY, sum = 0.0;
    for (int i = 0; i < V; i++) mx = fmax(mx, (double)to_float(row[i]));
    for (int i = 0; i < V; i++) sum += exp((double)to_float(row[i]) - mx);
    for (int i = 0; i < V; i++) probs[i] = (float)(exp((double)to_float(row[i]) - mx) / sum);
    free(row);
}

// what tests compare against a reference (passes.h: GPT2Activation), in device memory
static const void* activation(GPT2ComputeState* m, GPT2Activation which, int layer) {
    static const int slot[GPT2_LAYER_ACTS] = {A_LN1, A_QKV, A_ATTY, A_RESIDUAL2, A_LN2, A_FCH, A_FCH_GELU, A_RESIDUAL3};
    if (which == GPT2_ACT_LNF) return m->g[G_LNF];
    return which == GPT2_ACT_LOGITS ? m->g[G_LOGITS] : m->layer[layer][slot[which]];
}

// ------------------------------------------------------------------------------------------------
// Reporting

// The peak the MFU is measured against: dense bf16 tensor-core rate of an H100/H200 SXM (989 TFLOP/s,
// the datasheet; what a GEMM reaches on the card is gpu_first.sh's gemm_peak line), fp32 builds: its
// 67 TFLOP/s of plain fp32. ZERO3_PEAK_TFLOPS overrides (other GPUs, or a measured peak).
static double gpu_peak_flops(int device) {
    const char* env = getenv("ZERO3_PEAK_TFLOPS");
    if (env && atof(env) > 0) return atof(env) * 1e12;
    int major = 0, minor = 0;
    cudaCheck(cudaDeviceGetAttribute(&major, cudaDevAttrComputeCapabilityMajor, device));
    cudaCheck(cudaDeviceGetAttribute(&minor, cudaDevAttrComputeCapabilityMinor, device));
    if (major == 9 && minor == 0) return (sizeof(floatX) == 2 ? 989.4e12 : 66.9e12);
    return -1.0;
}

// the device, and the activations this compute holds (with the other attention path's, for comparison)
static void describe(GPT2ComputeState* m, char* buf, size_t n) {
    const int device = m->gpu->device;
    cudaDeviceProp prop;
    cudaCheck(cudaGetDeviceProperties(&prop, device));
    size_t free_b = 0, total_b = 0;
    cudaCheck(cudaMemGetInfo(&free_b, &total_b));
    const double peak = gpu_peak_flops(device);
    const double att = attention_bytes(&m->cfg, m->B, m->T, ATTENTION_FLASH);
    const double att_other = attention_bytes(&m->cfg, m->B, m->T, !ATTENTION_FLASH);
    char peak_s[64] = "no peak known: set ZERO3_PEAK_TFLOPS for MFU";
    if (peak > 0) snprintf(peak_s, sizeof peak_s, "MFU vs %.0f TFLOP/s", peak / 1e12);
    snprintf(buf, n, "GPU %s (device %d), %s, %s, %s; GPU memory in use %.2f of %.2f GiB; activations %.3f GiB "
             "(%s %.3f GiB; %s: %.3f)", prop.name, device,
             PRECISION_NAME, m->gpu->comm ? "NCCL" : "one rank (no NCCL)", peak_s, (total_b - free_b) / 1073741824.0,
             total_b / 1073741824.0, m->acts_bytes / 1073741824.0, attention_path_name(ATTENTION_TC, ATTENTION_NAME), att / 1073741824.0,
             ATTENTION_FLASH ? "materialized" : "flash", att_other / 1073741824.0);
}

static double flops_fraction(GPT2ComputeState* m, double flops_per_s) {
    const double peak = gpu_peak_flops(m->gpu->device);
    return peak > 0 ? flops_per_s / peak : -1.0;
}

static void step_begin(GPT2ComputeState* m, int step) {
    char name[32];
    snprintf(name, sizeof name, "step %d", step);
    nvtxRangePushA(name);
}
// the step ends when the device has done its work: AdamW and (stages 1-2) the updated params'
// gather, which the compute stream waits for, are on the compute stream
static void step_end(GPT2ComputeState* m) {
    cudaCheck(cudaStreamSynchronize(m->stream));
    nvtxRangePop();
}

// " | GPU 12.34 GiB": memory in use on this rank's device (all processes, as nvidia-smi counts it)
static void step_note(GPT2ComputeState* m, char* buf, size_t n) {
    size_t free_b = 0, total_b = 0;
    cudaCheck(cudaMemGetInfo(&free_b, &total_b));
    snprintf(buf, n, " | GPU %.2f GiB", (total_b - free_b) / 1073741824.0);
}

// The end-of-run line: how often a GEMM asked cuBLASLt for the GELU or bias-gradient (BGRADB)
// epilogue and, finding no algorithm, ran the unfused kernels instead (0 and 0: the epilogues ran)
static void run_note(GPT2ComputeState* m, char* buf, size_t n) {
    matmul_epilogue_note(&m->mm, buf, n);
}

static const GPT2Compute GPT2_GPU_COMPUTE = {
    .create = create, .activation_bytes = activation_bytes, .destroy = destroy, .set_batch = set_batch,
    .embed_forward = embed_forward, .block_forward = block_forward, .final_norm_forward = final_norm_forward,
    .lm_head_forward = lm_head_forward,
    .mean_loss = mean_loss, .loss_accumulate = accumulate_loss, .loss_take = loss_take,
    .lm_head_backward = lm_head_backward, .final_norm_backward = final_norm_backward,
    .block_backward = block_backward, .embed_backward = embed_backward,
    .probs = probs_row, .activation = activation,
    .describe = describe, .flops_fraction = flops_fraction, .step_begin = step_begin, .step_end = step_end,
    .step_note = step_note, .run_note = run_note,
};

// the engine's data types for this precision; 64-element aligned tensors (128-byte in bf16,
// 256-byte in fp32: cuBLASLt and the 16-byte vector loads)
#ifdef ZERO3_DDP_ONLY
#define GPU_DDP_ONLY 1
#else
#define GPU_DDP_ONLY 0
#endif
#if defined(ENABLE_FP32)
static const TrainBuild GPU_BUILD = {ZERO3_F32, ZERO3_F32, 64, GPU_DDP_ONLY, 3, &GPT2_GPU_COMPUTE};
#else
static const TrainBuild GPU_BUILD = {ZERO3_BF16, ZERO3_BF16, 64, GPU_DDP_ONLY, 3, &GPT2_GPU_COMPUTE};
#endif

