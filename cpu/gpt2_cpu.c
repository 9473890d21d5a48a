// gpt2_cpu.c: GPT-2's per-unit math in fp32 C with OpenMP, as the table the passes call
// (GPT2_CPU_COMPUTE; host/passes.h). It never sees a whole parameter set and knows nothing of
// ZeRO: host/passes.c gathers each unit, hands these functions a typed view of it (w->qkvw, ...),
// and reduces and releases it afterwards. m is the compute's state: activations and scratch, and the
// backend it runs beside (for the report). The GPU's table (gpu/gpt2_gpu.cuh) is the same functions on
// CUDA kernels.
#include "gpt2_cpu.h"
#include "backend_cpu.h"
#include "kernels.h"
#include <omp.h>

// ------------------------------------------------------------------------------------------------
// Activations: one flat allocation, as llm.c. Per layer l (shapes):
//   ln1 (B,T,C) ln1_mean, ln1_rstd (B,T)  qkv (B,T,3C)  atty (B,T,C)  att (B,NH,T,T)
//   attproj (B,T,C)  residual2 (B,T,C)  ln2 (B,T,C) ln2_mean, ln2_rstd (B,T)  fch (B,T,4C)
//   fch_gelu (B,T,4C)  fcproj (B,T,C)  residual3 (B,T,C)
// and encoded (B,T,C), lnf (B,T,C), lnf_mean, lnf_rstd (B,T), logits, probs (B,T,Vp), losses (B,T).
// Backward scratch (reused by every layer): dresidual, dln, datty (B,T,C), dqkv (B,T,3C),
// dfch, dfch_gelu (B,T,4C), dpreatt, datt (B,NH,T,T), dlogits (B,T,Vp), dlosses (B,T).
enum { A_LN1, A_LN1_MEAN, A_LN1_RSTD, A_QKV, A_ATTY, A_ATT, A_ATTPROJ, A_RESIDUAL2, A_LN2, A_LN2_MEAN,
       A_LN2_RSTD, A_FCH, A_FCH_GELU, A_FCPROJ, A_RESIDUAL3, A_PER_LAYER };
enum { A_ENCODED, A_LNF, A_LNF_MEAN, A_LNF_RSTD, A_LOGITS, A_PROBS, A_LOSSES, A_PREATT,
       S_DRESIDUAL, S_DLN, S_DATTY, S_DQKV, S_DFCH, S_DFCH_GELU, S_DPREATT, S_DATT, S_DLOGITS, S_DLOSSES,
       A_GLOBAL };

struct GPT2ComputeState {
    const CpuBackend *backend;   // the engine's backend on this CPU (create's device), described in the report
    GPT2Config cfg;
    int B, T;
    float *memory;
    float *layer_acts[1024][A_PER_LAYER];   // [l][A_*]
    float *acts[A_GLOBAL];
    const int *inputs;      // of the current forward (the encoder backward needs them)
    const int *targets;     // NULL: no loss
    double loss_sum;        // loss_accumulate's running sum
};

static size_t layer_act_size(const GPT2Config *c, int B, int T, int which) {
    size_t BT = (size_t)B * T, C = c->channels, NH = c->num_heads;
    switch (which) {
    case A_LN1_MEAN: case A_LN1_RSTD: case A_LN2_MEAN: case A_LN2_RSTD: return BT;
    case A_QKV: return BT * 3 * C;
    case A_ATT: return (size_t)B * NH * T * T;
    case A_FCH: case A_FCH_GELU: return BT * 4 * C;
    default: return BT * C;
    }
}
static size_t global_act_size(const GPT2Config *c, int B, int T, int which) {
    size_t BT = (size_t)B * T, C = c->channels, NH = c->num_heads, Vp = c->padded_vocab_size;
    switch (which) {
    case A_LNF_MEAN: case A_LNF_RSTD: case A_LOSSES: case S_DLOSSES: return BT;
    case A_LOGITS: case A_PROBS: case S_DLOGITS: return BT * Vp;
    case A_PREATT: case S_DPREATT: case S_DATT: return (size_t)B * NH * T * T;
    case S_DQKV: return BT * 3 * C;
    case S_DFCH: case S_DFCH_GELU: return BT * 4 * C;
    default: return BT * C;
    }
}

// With recompute, layer l > 0 has its own residual3 (the next block's input) and shares layer 0's
// other activations: the backward recomputes them before it needs them.
static int layer_act_shared(int recompute, int l, int a) { return recompute && l > 0 && a != A_RESIDUAL3; }

static size_t activation_bytes(const GPT2Config *cfg, int B, int T, int recompute) {
    size_t total = 0;
    for (int l = 0; l < cfg->num_layers; l++)
        for (int a = 0; a < A_PER_LAYER; a++)
            if (!layer_act_shared(recompute, l, a)) total += layer_act_size(cfg, B, T, a);
    for (int a = 0; a < A_GLOBAL; a++) total += global_act_size(cfg, B, T, a);
    return total * sizeof(float);
}

static GPT2ComputeState *create(const GPT2Config *cfg, int B, int T, int recompute, void *device) {
    if (cfg->num_layers > 1024) fatal("model: at most 1024 layers");
    GPT2ComputeState *m = xcalloc(1, sizeof(GPT2ComputeState));
    m->backend = device;
    m->cfg = *cfg;
    m->B = B;
    m->T = T;
    m->memory = xcalloc(activation_bytes(cfg, B, T, recompute) / sizeof(float), sizeof(float));
    float *p = m->memory;
    for (int l = 0; l < cfg->num_layers; l++)
        for (int a = 0; a < A_PER_LAYER; a++) {
            if (layer_act_shared(recompute, l, a)) { m->layer_acts[l][a] = m->layer_acts[0][a]; continue; }
            m->layer_acts[l][a] = p;
            p += layer_act_size(cfg, B, T, a);
        }
    for (int a = 0; a < A_GLOBAL; a++) { m->acts[a] = p; p += global_act_size(cfg, B, T, a); }
    return m;
}

static void destroy(GPT2ComputeState *m) {
    if (!m) return;
    free(m->memory);
    free(m);
}

static void set_batch(GPT2ComputeState *m, const int *inputs, const int *targets, int training) {
    m->inputs = inputs;
    m->targets = targets;
}

// The input of block l's residual stream: the embedding for block 0, else block l-1's output.
static const float *block_input(const GPT2ComputeState *m, int l) {
    return l == 0 ? m->acts[A_ENCODED] : m->layer_acts[l - 1][A_RESIDUAL3];
}

// ------------------------------------------------------------------------------------------------
// Forward

static void embed_forward(GPT2ComputeState *m, const GPT2EmbedParams *w) {
    encoder_forward(m->acts[A_ENCODED], m->inputs, w->wte, w->wpe, m->B, m->T, m->cfg.channels);
}

static void block_forward(GPT2ComputeState *m, int l, const GPT2BlockParams *w) {
    const int B = m->B, T = m->T, C = m->cfg.channels, NH = m->cfg.num_heads;
    float **a = m->layer_acts[l];
    const float *residual = block_input(m, l);
    float *l_ln1 = a[A_LN1], *l_qkv = a[A_QKV], *l_atty = a[A_ATTY], *l_attproj = a[A_ATTPROJ];
    float *l_residual2 = a[A_RESIDUAL2], *l_ln2 = a[A_LN2], *l_fch = a[A_FCH], *l_fch_gelu = a[A_FCH_GELU];
    float *l_fcproj = a[A_FCPROJ], *l_residual3 = a[A_RESIDUAL3];
    layernorm_forward(l_ln1, a[A_LN1_MEAN], a[A_LN1_RSTD], residual, w->ln1w, w->ln1b, B, T, C);
    matmul_forward(l_qkv, l_ln1, w->qkvw, w->qkvb, B, T, C, 3 * C);
    attention_forward(l_atty, m->acts[A_PREATT], a[A_ATT], l_qkv, B, T, C, NH);
    matmul_forward(l_attproj, l_atty, w->attprojw, w->attprojb, B, T, C, C);
    residual_forward(l_residual2, residual, l_attproj, B * T * C);
    layernorm_forward(l_ln2, a[A_LN2_MEAN], a[A_LN2_RSTD], l_residual2, w->ln2w, w->ln2b, B, T, C);
    matmul_forward(l_fch, l_ln2, w->fcw, w->fcb, B, T, C, 4 * C);
    gelu_forward(l_fch_gelu, l_fch, B * T * 4 * C);
    matmul_forward(l_fcproj, l_fch_gelu, w->fcprojw, w->fcprojb, B, T, 4 * C, C);
    residual_forward(l_residual3, l_residual2, l_fcproj, B * T * C);
}

static void final_norm_forward(GPT2ComputeState *m, const GPT2HeadParams *w) {
    const float *last = block_input(m, m->cfg.num_layers);
    layernorm_forward(m->acts[A_LNF], m->acts[A_LNF_MEAN], m->acts[A_LNF_RSTD], last, w->lnfw, w->lnfb,
                      m->B, m->T, m->cfg.channels);
}

// logits = lnf wte^T (the tied LM head), probs = softmax, and with targets the per-token losses
static void lm_head_forward(GPT2ComputeState *m, const GPT2EmbedParams *w) {
    const int B = m->B, T = m->T, C = m->cfg.channels, V = m->cfg.vocab_size, Vp = m->cfg.padded_vocab_size;
    matmul_forward(m->acts[A_LOGITS], m->acts[A_LNF], w->wte, NULL, B, T, C, Vp);
    softmax_forward(m->acts[A_PROBS], m->acts[A_LOGITS], B, T, V, Vp);
    if (m->targets) crossentropy_forward(m->acts[A_LOSSES], m->acts[A_PROBS], m->targets, B, T, Vp);
}

static double mean_loss(GPT2ComputeState *m) {
    double sum = 0.0;
    for (int i = 0; i < m->B * m->T; i++) sum += m->acts[A_LOSSES][i];
    return sum / (m->B * m->T);
}
static void loss_accumulate(GPT2ComputeState *m) { m->loss_sum += mean_loss(m); }
static double loss_take(GPT2ComputeState *m) {
    double s = m->loss_sum;
    m->loss_sum = 0.0;
    return s;
}

// ------------------------------------------------------------------------------------------------
// Backward. Each kernel adds into its outputs (+=), so scratch is zeroed before use; the parameter
// gradients (dw) accumulate across micro-steps in the engine's buffers.

// dlogits, then d(lnf) into dln and d(wte) through the tied matrix
static void lm_head_backward(GPT2ComputeState *m, const GPT2EmbedParams *w, const GPT2EmbedParams *dw, float dloss) {
    const int B = m->B, T = m->T, C = m->cfg.channels, V = m->cfg.vocab_size, Vp = m->cfg.padded_vocab_size;
    const size_t BT = (size_t)B * T;
    float **s = m->acts;
    for (size_t i = 0; i < BT; i++) s[S_DLOSSES][i] = dloss;
    memset(s[S_DLOGITS], 0, BT * Vp * sizeof(float));
    crossentropy_softmax_backward(s[S_DLOGITS], s[S_DLOSSES], s[A_PROBS], m->targets, B, T, V, Vp);
    memset(s[S_DLN], 0, BT * C * sizeof(float));
    matmul_backward(s[S_DLN], dw->wte, NULL, s[S_DLOGITS], s[A_LNF], w->wte, B, T, C, Vp);
}

// d(lnf) -> d(last residual), which starts the residual stream's gradient (dresidual)
static void final_norm_backward(GPT2ComputeState *m, const GPT2HeadParams *w, const GPT2HeadParams *dw) {
    const int B = m->B, T = m->T, C = m->cfg.channels;
    float **s = m->acts;
    memset(s[S_DRESIDUAL], 0, (size_t)B * T * C * sizeof(float));
    layernorm_backward(s[S_DRESIDUAL], dw->lnfw, dw->lnfb, s[S_DLN], block_input(m, m->cfg.num_layers), w->lnfw,
                       s[A_LNF_MEAN], s[A_LNF_RSTD], B, T, C);
}

// dresidual holds d(residual3 of block l) on entry and d(its input) on exit.
static void block_backward(GPT2ComputeState *m, int l, const GPT2BlockParams *w, const GPT2BlockParams *dw) {
    const int B = m->B, T = m->T, C = m->cfg.channels, NH = m->cfg.num_heads;
    const size_t BT = (size_t)B * T;
    float **a = m->layer_acts[l], **s = m->acts;
    float *dres = s[S_DRESIDUAL], *dln = s[S_DLN];
    // MLP: residual3 = residual2 + fcproj, so d(fcproj) = dres and dres flows on to residual2
    memset(s[S_DFCH_GELU], 0, BT * 4 * C * sizeof(float));
    matmul_backward(s[S_DFCH_GELU], dw->fcprojw, dw->fcprojb, dres, a[A_FCH_GELU], w->fcprojw, B, T, 4 * C, C);
    memset(s[S_DFCH], 0, BT * 4 * C * sizeof(float));
    gelu_backward(s[S_DFCH], a[A_FCH], s[S_DFCH_GELU], B * T * 4 * C);
    memset(dln, 0, BT * C * sizeof(float));
    matmul_backward(dln, dw->fcw, dw->fcb, s[S_DFCH], a[A_LN2], w->fcw, B, T, C, 4 * C);
    layernorm_backward(dres, dw->ln2w, dw->ln2b, dln, a[A_RESIDUAL2], w->ln2w, a[A_LN2_MEAN], a[A_LN2_RSTD], B, T, C);
    // attention: residual2 = residual + attproj, the same split
    memset(s[S_DATTY], 0, BT * C * sizeof(float));
    matmul_backward(s[S_DATTY], dw->attprojw, dw->attprojb, dres, a[A_ATTY], w->attprojw, B, T, C, C);
    memset(s[S_DQKV], 0, BT * 3 * C * sizeof(float));
    attention_backward(s[S_DQKV], s[S_DPREATT], s[S_DATT], s[S_DATTY], a[A_QKV], a[A_ATT], B, T, C, NH);
    memset(dln, 0, BT * C * sizeof(float));
    matmul_backward(dln, dw->qkvw, dw->qkvb, s[S_DQKV], a[A_LN1], w->qkvw, B, T, C, 3 * C);
    layernorm_backward(dres, dw->ln1w, dw->ln1b, dln, block_input(m, l), w->ln1w, a[A_LN1_MEAN], a[A_LN1_RSTD], B, T, C);
}

// the encoder needs no parameter values, only the inputs and the embedding's gradient buffer
static void embed_backward(GPT2ComputeState *m, const GPT2EmbedParams *dw) {
    encoder_backward(dw->wte, dw->wpe, m->acts[S_DRESIDUAL], m->inputs, m->B, m->T, m->cfg.channels);
}

static void probs_row(GPT2ComputeState *m, int b, int t, float *probs) {
    memcpy(probs, m->acts[A_PROBS] + ((size_t)b * m->T + t) * m->cfg.padded_vocab_size, m->cfg.vocab_size * sizeof(float));
}

// what tests compare against a reference (passes.h: GPT2Activation)
static const void *activation(GPT2ComputeState *m, GPT2Activation which, int layer) {
    static const int slot[GPT2_LAYER_ACTS] = {A_LN1, A_QKV, A_ATTY, A_RESIDUAL2, A_LN2, A_FCH, A_FCH_GELU, A_RESIDUAL3};
    if (which == GPT2_ACT_LNF) return m->acts[A_LNF];
    return which == GPT2_ACT_LOGITS ? m->acts[A_LOGITS] : m->layer_acts[layer][slot[which]];
}

// ------------------------------------------------------------------------------------------------
// The device, as the report sees it

static void describe(GPT2ComputeState *m, char *buf, size_t n) {
    char comm[128];
    backend_cpu_describe(m->backend, comm, sizeof comm);
    snprintf(buf, n, "CPU fp32, %d OpenMP threads per rank, %s", omp_get_max_threads(), comm);
}
static double flops_fraction(GPT2ComputeState *m, double flops_per_s) { return -1.0; }   // no meaningful peak on a CPU
static void step_begin(GPT2ComputeState *m, int step) {}
static void step_end(GPT2ComputeState *m) {}   // every kernel and AdamW ran on this thread: the step is done
static void step_note(GPT2ComputeState *m, char *buf, size_t n) { if (n) buf[0] = '\0'; }   // nothing to add on a CPU
static void run_note(GPT2ComputeState *m, char *buf, size_t n) { if (n) buf[0] = '\0'; }

const GPT2Compute GPT2_CPU_COMPUTE = {
    .create = create, .activation_bytes = activation_bytes, .destroy = destroy, .set_batch = set_batch,
    .embed_forward = embed_forward, .block_forward = block_forward, .final_norm_forward = final_norm_forward,
    .lm_head_forward = lm_head_forward,
    .mean_loss = mean_loss, .loss_accumulate = loss_accumulate, .loss_take = loss_take,
    .lm_head_backward = lm_head_backward, .final_norm_backward = final_norm_backward,
    .block_backward = block_backward, .embed_backward = embed_backward,
    .probs = probs_row, .activation = activation,
    .describe = describe, .flops_fraction = flops_fraction, .step_begin = step_begin, .step_end = step_end,
    .step_note = step_note, .run_note = run_note,
};
