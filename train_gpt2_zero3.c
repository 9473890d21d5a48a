// train_gpt2_zero3.c: GPT-2 training in fp32 C with OpenMP, every parameter reached through the
// ZeRO engine (zero3.c) over MPI. This is the reference implementation, the CI path, and what a
// learner runs on a laptop:
//
//   ./train_gpt2_zero3 -e d2c64h2t64 -x 50                 one rank
//   mpirun -np 4 ./train_gpt2_zero3 -e d12 -z 3 -o out     four ranks, ZeRO-3
//
// The model never sees a whole parameter set. Each layer asks the engine for its unit's weights
// (zero3_gather), computes, and gives them back (zero3_release); in backward it asks again, adds its
// gradients into the unit's gradient buffer (zero3_grads) and hands them to the engine to reduce
// (zero3_reduce_grads). What "gather" costs depends on the stage: nothing for 0-2 (full params are
// resident), an all-gather for 3.
#include "common.h"
#include "backend_cpu.h"
#include "cpu_kernels.h"
#include "gpt2.h"
#include "zero3.h"

#define TRAIN_PARAM_TYPE ZERO3_F32
#define TRAIN_GRAD_TYPE ZERO3_F32
#define TRAIN_ALIGN 64   // elements: 256-byte aligned tensors, the same layout as the GPU trainer

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

typedef struct Model {
    GPT2Config cfg;
    Zero3 *z;
    int B, T;
    float *memory;
    float *layer_acts[1024][A_PER_LAYER];   // [l][A_*]
    float *acts[A_GLOBAL];
    const int *inputs;      // of the last forward (the encoder backward needs them)
    const int *targets;
    const float *emb;       // the gathered embedding unit, held from the LM-head forward to its backward
    double mean_loss;
} Model;

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

Model *model_create(const GPT2Config *cfg, Zero3 *z, int B, int T) {
    if (cfg->num_layers > 1024) fatal("model: at most 1024 layers");
    Model *m = xcalloc(1, sizeof(Model));
    m->cfg = *cfg;
    m->z = z;
    m->B = B;
    m->T = T;
    size_t total = 0;
    for (int l = 0; l < cfg->num_layers; l++)
        for (int a = 0; a < A_PER_LAYER; a++) total += layer_act_size(cfg, B, T, a);
    for (int a = 0; a < A_GLOBAL; a++) total += global_act_size(cfg, B, T, a);
    m->memory = xcalloc(total, sizeof(float));
    float *p = m->memory;
    for (int l = 0; l < cfg->num_layers; l++)
        for (int a = 0; a < A_PER_LAYER; a++) { m->layer_acts[l][a] = p; p += layer_act_size(cfg, B, T, a); }
    for (int a = 0; a < A_GLOBAL; a++) { m->acts[a] = p; p += global_act_size(cfg, B, T, a); }
    return m;
}

void model_free(Model *m) {
    if (!m) return;
    free(m->memory);
    free(m);
}

// Pointer to tensor i of a gathered unit (or of its gradient buffer).
static float *unit_tensor(const Model *m, int u, const void *base, int i) {
    return (float *)base + m->z->units[u].tensors[i].offset;
}

// ------------------------------------------------------------------------------------------------
// Forward. Returns the mean loss over the B*T tokens (0 when targets is NULL).
float model_forward(Model *m, const int *inputs, const int *targets, int training) {
    const GPT2Config *c = &m->cfg;
    Zero3 *z = m->z;
    int B = m->B, T = m->T, C = c->channels, NH = c->num_heads, V = c->vocab_size, Vp = c->padded_vocab_size;
    int L = c->num_layers, u_emb = gpt2_unit_emb(c), u_head = gpt2_unit_head(c);
    m->inputs = inputs;
    m->targets = targets;

    const float *emb = zero3_gather(z, u_emb);
    encoder_forward(m->acts[A_ENCODED], inputs, unit_tensor(m, u_emb, emb, EMB_WTE), unit_tensor(m, u_emb, emb, EMB_WPE), B, T, C);
    zero3_release(z, u_emb);

    const float *residual = m->acts[A_ENCODED];
    for (int l = 0; l < L; l++) {
        int u = gpt2_unit_block(c, l);
        const float *w = zero3_gather(z, u);
        float **a = m->layer_acts[l];
        layernorm_forward(a[A_LN1], a[A_LN1_MEAN], a[A_LN1_RSTD], residual, unit_tensor(m, u, w, BLK_LN1W), unit_tensor(m, u, w, BLK_LN1B), B, T, C);
        matmul_forward(a[A_QKV], a[A_LN1], unit_tensor(m, u, w, BLK_QKVW), unit_tensor(m, u, w, BLK_QKVB), B, T, C, 3 * C);
        attention_forward(a[A_ATTY], m->acts[A_PREATT], a[A_ATT], a[A_QKV], B, T, C, NH);
        matmul_forward(a[A_ATTPROJ], a[A_ATTY], unit_tensor(m, u, w, BLK_ATTPROJW), unit_tensor(m, u, w, BLK_ATTPROJB), B, T, C, C);
        residual_forward(a[A_RESIDUAL2], residual, a[A_ATTPROJ], B * T * C);
        layernorm_forward(a[A_LN2], a[A_LN2_MEAN], a[A_LN2_RSTD], a[A_RESIDUAL2], unit_tensor(m, u, w, BLK_LN2W), unit_tensor(m, u, w, BLK_LN2B), B, T, C);
        matmul_forward(a[A_FCH], a[A_LN2], unit_tensor(m, u, w, BLK_FCW), unit_tensor(m, u, w, BLK_FCB), B, T, C, 4 * C);
        gelu_forward(a[A_FCH_GELU], a[A_FCH], B * T * 4 * C);
        matmul_forward(a[A_FCPROJ], a[A_FCH_GELU], unit_tensor(m, u, w, BLK_FCPROJW), unit_tensor(m, u, w, BLK_FCPROJB), B, T, 4 * C, C);
        residual_forward(a[A_RESIDUAL3], a[A_RESIDUAL2], a[A_FCPROJ], B * T * C);
        zero3_release(z, u);
        residual = a[A_RESIDUAL3];
    }

    const float *head = zero3_gather(z, u_head);
    layernorm_forward(m->acts[A_LNF], m->acts[A_LNF_MEAN], m->acts[A_LNF_RSTD], residual,
                      unit_tensor(m, u_head, head, HEAD_LNFW), unit_tensor(m, u_head, head, HEAD_LNFB), B, T, C);
    zero3_release(z, u_head);

    // the LM head is tied to wte: the embedding unit is gathered a second time
    emb = zero3_gather(z, u_emb);
    matmul_forward(m->acts[A_LOGITS], m->acts[A_LNF], unit_tensor(m, u_emb, emb, EMB_WTE), NULL, B, T, C, Vp);
    softmax_forward(m->acts[A_PROBS], m->acts[A_LOGITS], B, T, V, Vp);
    if (training) m->emb = emb;   // kept through the LM-head backward
    else zero3_release(z, u_emb);

    m->mean_loss = 0.0;
    if (targets) {
        crossentropy_forward(m->acts[A_LOSSES], m->acts[A_PROBS], targets, B, T, Vp);
        double sum = 0.0;
        for (int i = 0; i < B * T; i++) sum += m->acts[A_LOSSES][i];
        m->mean_loss = sum / (B * T);
    }
    return (float)m->mean_loss;
}

// ------------------------------------------------------------------------------------------------
// Backward, after model_forward(..., training = 1). dloss is the gradient of the step's loss with
// respect to each token's loss (1 / all tokens of the step). Units are visited in reverse; each
// block's gradients are handed to the engine as soon as they are complete, so its reduction
// overlaps the backward of the block below.
void model_backward(Model *m, float dloss) {
    const GPT2Config *c = &m->cfg;
    Zero3 *z = m->z;
    int B = m->B, T = m->T, C = c->channels, NH = c->num_heads, V = c->vocab_size, Vp = c->padded_vocab_size;
    int L = c->num_layers, u_emb = gpt2_unit_emb(c), u_head = gpt2_unit_head(c);
    size_t BT = (size_t)B * T;
    float **s = m->acts;
    if (!m->emb || !m->targets) fatal_local("model_backward without a training forward");

    // LM head: dlogits, then d(lnf) and d(wte) through the tied matrix
    float *emb_grads = zero3_grads(z, u_emb);
    for (size_t i = 0; i < BT; i++) s[S_DLOSSES][i] = dloss;
    memset(s[S_DLOGITS], 0, BT * Vp * sizeof(float));
    crossentropy_softmax_backward(s[S_DLOGITS], s[S_DLOSSES], s[A_PROBS], m->targets, B, T, V, Vp);
    memset(s[S_DLN], 0, BT * C * sizeof(float));
    matmul_backward(s[S_DLN], unit_tensor(m, u_emb, emb_grads, EMB_WTE), NULL, s[S_DLOGITS], s[A_LNF],
                    unit_tensor(m, u_emb, m->emb, EMB_WTE), B, T, C, Vp);
    zero3_release(z, u_emb);   // the encoder backward needs the gradient buffer only
    m->emb = NULL;

    // final layernorm
    const float *last = L > 0 ? m->layer_acts[L - 1][A_RESIDUAL3] : s[A_ENCODED];
    const float *head = zero3_gather(z, u_head);
    float *head_grads = zero3_grads(z, u_head);
    memset(s[S_DRESIDUAL], 0, BT * C * sizeof(float));
    layernorm_backward(s[S_DRESIDUAL], unit_tensor(m, u_head, head_grads, HEAD_LNFW), unit_tensor(m, u_head, head_grads, HEAD_LNFB),
                       s[S_DLN], last, unit_tensor(m, u_head, head, HEAD_LNFW), s[A_LNF_MEAN], s[A_LNF_RSTD], B, T, C);
    zero3_reduce_grads(z, u_head);
    zero3_release(z, u_head);

    // blocks, last to first. dresidual holds d(residual3 of block l) on entry and d(its input) on exit.
    float *dres = s[S_DRESIDUAL];
    for (int l = L - 1; l >= 0; l--) {
        int u = gpt2_unit_block(c, l);
        const float *w = zero3_gather(z, u);
        float *g = zero3_grads(z, u);
        float **a = m->layer_acts[l];
        const float *residual = l == 0 ? s[A_ENCODED] : m->layer_acts[l - 1][A_RESIDUAL3];
        // MLP: residual3 = residual2 + fcproj, so d(fcproj) = dres and dres flows on to residual2
        memset(s[S_DFCH_GELU], 0, BT * 4 * C * sizeof(float));
        matmul_backward(s[S_DFCH_GELU], unit_tensor(m, u, g, BLK_FCPROJW), unit_tensor(m, u, g, BLK_FCPROJB), dres,
                        a[A_FCH_GELU], unit_tensor(m, u, w, BLK_FCPROJW), B, T, 4 * C, C);
        memset(s[S_DFCH], 0, BT * 4 * C * sizeof(float));
        gelu_backward(s[S_DFCH], a[A_FCH], s[S_DFCH_GELU], B * T * 4 * C);
        memset(s[S_DLN], 0, BT * C * sizeof(float));
        matmul_backward(s[S_DLN], unit_tensor(m, u, g, BLK_FCW), unit_tensor(m, u, g, BLK_FCB), s[S_DFCH], a[A_LN2],
                        unit_tensor(m, u, w, BLK_FCW), B, T, C, 4 * C);
        layernorm_backward(dres, unit_tensor(m, u, g, BLK_LN2W), unit_tensor(m, u, g, BLK_LN2B), s[S_DLN], a[A_RESIDUAL2],
                           unit_tensor(m, u, w, BLK_LN2W), a[A_LN2_MEAN], a[A_LN2_RSTD], B, T, C);
        // attention: residual2 = residual + attproj, the same split
        memset(s[S_DATTY], 0, BT * C * sizeof(float));
        matmul_backward(s[S_DATTY], unit_tensor(m, u, g, BLK_ATTPROJW), unit_tensor(m, u, g, BLK_ATTPROJB), dres, a[A_ATTY],
                        unit_tensor(m, u, w, BLK_ATTPROJW), B, T, C, C);
        memset(s[S_DQKV], 0, BT * 3 * C * sizeof(float));
        attention_backward(s[S_DQKV], s[S_DPREATT], s[S_DATT], s[S_DATTY], a[A_QKV], a[A_ATT], B, T, C, NH);
        memset(s[S_DLN], 0, BT * C * sizeof(float));
        matmul_backward(s[S_DLN], unit_tensor(m, u, g, BLK_QKVW), unit_tensor(m, u, g, BLK_QKVB), s[S_DQKV], a[A_LN1],
                        unit_tensor(m, u, w, BLK_QKVW), B, T, C, 3 * C);
        layernorm_backward(dres, unit_tensor(m, u, g, BLK_LN1W), unit_tensor(m, u, g, BLK_LN1B), s[S_DLN], residual,
                           unit_tensor(m, u, w, BLK_LN1W), a[A_LN1_MEAN], a[A_LN1_RSTD], B, T, C);
        zero3_reduce_grads(z, u);
        zero3_release(z, u);
    }

    // encoder: needs no parameter values, only the embedding's gradient buffer
    encoder_backward(unit_tensor(m, u_emb, emb_grads, EMB_WTE), unit_tensor(m, u_emb, emb_grads, EMB_WPE), dres, m->inputs, B, T, C);
    zero3_reduce_grads(z, u_emb);
}

void model_probs(Model *m, int b, int t, float *probs) {
    memcpy(probs, m->acts[A_PROBS] + ((size_t)b * m->T + t) * m->cfg.padded_vocab_size, m->cfg.vocab_size * sizeof(float));
}

void model_describe(char *buf, size_t n) {
    snprintf(buf, n, "CPU fp32, %d OpenMP threads per rank", omp_get_max_threads());
}
double model_step_flops_fraction(double flops_per_s) { return -1.0; }   // no meaningful peak on a CPU
void model_step_begin(int step) {}
void model_step_end(void) {}
void model_step_note(char *buf, size_t n) { if (n) buf[0] = '\0'; }   // nothing to add on a CPU

#include "train_loop.h"

#ifndef TESTING
int main(int argc, char **argv) {
    Zero3Backend be;
    backend_cpu_init(&be, &argc, &argv);
    int rc = train_main(argc, argv, &be);
    backend_cpu_finish();
    return rc;
}
#endif
