// gpt2_cpu.c: GPT-2's per-unit math in C with OpenMP (fp32, or bf16 mixed precision), as the table the passes call
// (GPT2_CPU_COMPUTE; host/passes.h). It never sees a whole parameter set and knows nothing of
// ZeRO: host/passes.c gathers each unit, hands these functions a typed view of it (w->qkvw, ...),
// and reduces and releases it afterwards. m is the compute's state: activations and scratch, and the
// backend it runs beside (for the report). The GPU's table (gpu/gpt2_gpu.cuh) is the same functions on
// CUDA kernels.
//
// Two tables, one set of functions: GPT2_CPU_COMPUTE (fp32 params and gradients) and
// GPT2_CPU_COMPUTE_BF16 (-p bf16: bf16 params and gradients, the engine keeping the fp32 master).
// With bf16 every activation stays fp32 in memory, so only the functions that touch a parameter or
// its gradient differ, and they decide in one place each (the linear, norm and embedding verbs):
//   linear layers   cpu/kernels_bf16.h's matmuls: bf16 weights and biases, inputs rounded to bf16 as
//                   they are packed (what autocast does), fp32 sums, dW and db rounded once per call
//   layernorms      the bf16 weight and bias widened (exactly) to fp32 for the fp32 kernel; their
//                   gradients summed in fp32 scratch and added into the bf16 buffer, rounded once
//   embedding       bf16 wte and wpe widened; dwte, dwpe rows summed in fp32, rounded once per call
// so every kernel that is not a matmul is the fp32 one, as exact as fp32's (why: layernorm, softmax
// and the attention are where bf16 activations lose most, and autocast keeps them fp32 too).
#include "gpt2_cpu.h"
#include "backend_cpu.h"
#include "kernels.h"
#include "kernels_bf16.h"
#include <stdlib.h>
#include <omp.h>
#include <time.h>

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

// ------------------------------------------------------------------------------------------------
// Phase clock. ZERO3_CPU_PHASES=1 in the environment times every kernel call of a training step by
// the phase it belongs to on the wall clock (=cpu: on this thread's CPU time, which a loaded machine's
// other programs do not inflate; it sees only this thread's work, so it is for OMP_NUM_THREADS=1), and the run's closing report prints the mean ms per step of each (rank 0;
// the first step, the warm-up, left out; validation and sampling passes, outside a step, not counted):
//   matmul       the linear layers' products, the tied LM head's included (forward and backward)
//   attention    attention_forward / attention_backward (scores, causal softmax, att @ V)
//   elementwise  layernorms, GELU, residual adds, the embedding, zeroing the gradient scratch
//   logits       softmax over the vocabulary, cross-entropy, and its gradient (dlogits)
//   other        the step's wall time less the four: AdamW, the gradient norm, the collectives and the
//                engine (the -tr trace splits them: its "adamw" and "wait" spans)
// scripts/bench_cpu.sh --floor sets prints these beside each phase's floor (tools/bench/bench_floor.c).
// Off (the default) a kernel call costs one branch on a flag.
typedef enum { PHASE_MATMUL, PHASE_ATTENTION, PHASE_ELEMENTWISE, PHASE_LOGITS, PHASE_COUNT } Phase;
static const char *const PHASE_NAMES[PHASE_COUNT] = {"matmul", "attention", "elementwise", "logits"};
typedef struct {
    int on;                      // ZERO3_CPU_PHASES: 0 off, PHASE_WALL or PHASE_CPU
    int in_step;                 // between step_begin and step_end: calls are counted
    int steps;                   // steps ended (the first is the warm-up, not counted)
    double step_t0;              // this step's start (phase_now)
    double step_s;               // counted steps' wall seconds, step_begin to step_end
    double phase_s[PHASE_COUNT]; // counted steps' seconds in each phase
} PhaseClock;

enum { PHASE_WALL = 1, PHASE_CPU = 2 };
static int phase_clock_wanted(void) {
    const char *v = getenv("ZERO3_CPU_PHASES");
    if (!v || !*v || !strcmp(v, "0")) return 0;
    if (!strcmp(v, "1")) return PHASE_WALL;
    if (!strcmp(v, "cpu")) return PHASE_CPU;
    fatal("ZERO3_CPU_PHASES=%s: expected 0, 1 (the wall clock) or cpu (this thread's CPU time)", v);
    return 0;
}
static double phase_now(const PhaseClock *pc) {
    struct timespec ts;
    clock_gettime(pc->on == PHASE_CPU ? CLOCK_THREAD_CPUTIME_ID : CLOCK_MONOTONIC, &ts);
    return ts.tv_sec + 1e-9 * ts.tv_nsec;
}
// runs `call`, and with the clock on inside a step adds its wall time to phase `which`
// (variadic: a braced block with commas is one call)
#define PHASE(m, which, ...) do { \
    PhaseClock *pc_ = &(m)->clock; \
    if (!pc_->in_step) { __VA_ARGS__; break; } \
    double pt0_ = phase_now(pc_); __VA_ARGS__; pc_->phase_s[which] += phase_now(pc_) - pt0_; } while (0)

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
    int bf16;               // params and gradients are bf16 (GPT2_CPU_COMPUTE_BF16)
    Bf16Matmul *mm;         // ... and the bf16 matmuls' instruction (bf16_path_best, or ZERO3_BF16_PATH) and scratch
    float *norm[4];         // bf16 only: a layernorm's weight, bias, and their gradients in fp32 (C each)
    PhaseClock clock;       // per-phase wall time (ZERO3_CPU_PHASES=1; off: one untaken branch a kernel)
};
enum { NORM_W, NORM_B, NORM_DW, NORM_DB };

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
    m->clock.on = phase_clock_wanted();
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

// The bf16 matmuls' path: the best this CPU runs, unless ZERO3_BF16_PATH names one (portable, or
// avx512 where the CPU has it), so a test can run both on one machine.
static Bf16Path bf16_path_chosen(void) {
    const char *want = getenv("ZERO3_BF16_PATH");
    if (!want || !*want) return bf16_path_best();
    if (!strcmp(want, "portable")) return BF16_PATH_PORTABLE;
    if (!strcmp(want, "avx512") && bf16_path_available(BF16_PATH_AVX512)) return BF16_PATH_AVX512;
    if (!strcmp(want, "avx512")) fatal("ZERO3_BF16_PATH=avx512: this CPU has no AVX512_BF16");
    fatal("ZERO3_BF16_PATH=%s: expected portable or avx512", want);
    return BF16_PATH_PORTABLE;
}

static GPT2ComputeState *create_bf16(const GPT2Config *cfg, int B, int T, int recompute, void *device) {
    GPT2ComputeState *m = create(cfg, B, T, recompute, device);
    m->bf16 = 1;
    m->mm = xmalloc(sizeof(Bf16Matmul));
    *m->mm = bf16_matmul_new(bf16_path_chosen());
    for (int i = 0; i < 4; i++) m->norm[i] = xcalloc(cfg->channels, sizeof(float));
    return m;
}

static void destroy(GPT2ComputeState *m) {
    if (!m) return;
    for (int i = 0; i < 4; i++) free(m->norm[i]);
    if (m->mm) { bf16_matmul_free(m->mm); free(m->mm); }
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
// The verbs that touch parameters, fp32 or bf16 (the state decides): (B,T) rows of m's batch.

static void linear_forward(GPT2ComputeState *m, float *out, const float *inp, const void *w, const void *b,
                           int C, int OC) {
    if (m->bf16) PHASE(m, PHASE_MATMUL, matmul_forward_bf16(m->mm, out, inp, w, b, m->B, m->T, C, OC));
    else PHASE(m, PHASE_MATMUL, matmul_forward(out, inp, w, b, m->B, m->T, C, OC));
}
// dinp is written (GRAD_WRITE): in GPT-2 each linear layer's input gradient has no other contribution
static void linear_backward(GPT2ComputeState *m, float *dinp, void *dw, void *db, const float *dout,
                            const float *inp, const void *w, int C, int OC) {
    if (m->bf16) PHASE(m, PHASE_MATMUL, matmul_backward_bf16(m->mm, dinp, GRAD_WRITE, dw, db, dout, inp, w, m->B, m->T, C, OC));
    else PHASE(m, PHASE_MATMUL, matmul_backward(dinp, GRAD_WRITE, dw, db, dout, inp, w, m->B, m->T, C, OC));
}

// a bf16 layernorm's weight and bias, widened into the state's scratch
static void norm_widen(GPT2ComputeState *m, const void *w, const void *b) {
    f32_from_bf16_array(m->norm[NORM_W], w, m->cfg.channels);
    f32_from_bf16_array(m->norm[NORM_B], b, m->cfg.channels);
}
static void norm_forward_run(GPT2ComputeState *m, float *out, float *mean, float *rstd, const float *inp, const void *w,
                         const void *b) {
    const int C = m->cfg.channels;
    if (!m->bf16) { layernorm_forward(out, mean, rstd, inp, w, b, m->B, m->T, C); return; }
    norm_widen(m, w, b);
    layernorm_forward(out, mean, rstd, inp, m->norm[NORM_W], m->norm[NORM_B], m->B, m->T, C);
}
// bf16: the gradients summed from zero in fp32 over the call's rows, then added into dw, db once
static void norm_backward_run(GPT2ComputeState *m, float *dinp, void *dw, void *db, const float *dout, const float *inp,
                          const void *w, const float *mean, const float *rstd) {
    const int C = m->cfg.channels;
    if (!m->bf16) { layernorm_backward(dinp, dw, db, dout, inp, w, mean, rstd, m->B, m->T, C); return; }
    f32_from_bf16_array(m->norm[NORM_W], w, C);
    memset(m->norm[NORM_DW], 0, C * sizeof(float));
    memset(m->norm[NORM_DB], 0, C * sizeof(float));
    layernorm_backward(dinp, m->norm[NORM_DW], m->norm[NORM_DB], dout, inp, m->norm[NORM_W], mean, rstd, m->B, m->T, C);
    uint16_t *dw16 = dw, *db16 = db;
    for (int i = 0; i < C; i++) {
        dw16[i] = f32_to_bf16(bf16_to_f32(dw16[i]) + m->norm[NORM_DW][i]);
        db16[i] = f32_to_bf16(bf16_to_f32(db16[i]) + m->norm[NORM_DB][i]);
    }
}
static void norm_forward(GPT2ComputeState *m, float *out, float *mean, float *rstd, const float *inp, const void *w,
                         const void *b) {
    PHASE(m, PHASE_ELEMENTWISE, norm_forward_run(m, out, mean, rstd, inp, w, b));
}
static void norm_backward(GPT2ComputeState *m, float *dinp, void *dw, void *db, const float *dout, const float *inp,
                          const void *w, const float *mean, const float *rstd) {
    PHASE(m, PHASE_ELEMENTWISE, norm_backward_run(m, dinp, dw, db, dout, inp, w, mean, rstd));
}

// ------------------------------------------------------------------------------------------------
// Forward

static void embed_forward(GPT2ComputeState *m, const GPT2EmbedParams *w) {
    const int B = m->B, T = m->T, C = m->cfg.channels;
    if (m->bf16) PHASE(m, PHASE_ELEMENTWISE, encoder_forward_bf16(m->acts[A_ENCODED], m->inputs, w->wte, w->wpe, B, T, C));
    else PHASE(m, PHASE_ELEMENTWISE, encoder_forward(m->acts[A_ENCODED], m->inputs, w->wte, w->wpe, B, T, C));
}

static void block_forward(GPT2ComputeState *m, int l, const GPT2BlockParams *w) {
    const int B = m->B, T = m->T, C = m->cfg.channels, NH = m->cfg.num_heads;
    float **a = m->layer_acts[l];
    const float *residual = block_input(m, l);
    float *l_ln1 = a[A_LN1], *l_qkv = a[A_QKV], *l_atty = a[A_ATTY], *l_attproj = a[A_ATTPROJ];
    float *l_residual2 = a[A_RESIDUAL2], *l_ln2 = a[A_LN2], *l_fch = a[A_FCH], *l_fch_gelu = a[A_FCH_GELU];
    float *l_fcproj = a[A_FCPROJ], *l_residual3 = a[A_RESIDUAL3];
    norm_forward(m, l_ln1, a[A_LN1_MEAN], a[A_LN1_RSTD], residual, w->ln1w, w->ln1b);
    linear_forward(m, l_qkv, l_ln1, w->qkvw, w->qkvb, C, 3 * C);
    PHASE(m, PHASE_ATTENTION, attention_forward(l_atty, m->acts[A_PREATT], a[A_ATT], l_qkv, B, T, C, NH));
    linear_forward(m, l_attproj, l_atty, w->attprojw, w->attprojb, C, C);
    PHASE(m, PHASE_ELEMENTWISE, residual_forward(l_residual2, residual, l_attproj, B * T * C));
    norm_forward(m, l_ln2, a[A_LN2_MEAN], a[A_LN2_RSTD], l_residual2, w->ln2w, w->ln2b);
    linear_forward(m, l_fch, l_ln2, w->fcw, w->fcb, C, 4 * C);
    PHASE(m, PHASE_ELEMENTWISE, gelu_forward(l_fch_gelu, l_fch, B * T * 4 * C));
    linear_forward(m, l_fcproj, l_fch_gelu, w->fcprojw, w->fcprojb, 4 * C, C);
    PHASE(m, PHASE_ELEMENTWISE, residual_forward(l_residual3, l_residual2, l_fcproj, B * T * C));
}

static void final_norm_forward(GPT2ComputeState *m, const GPT2HeadParams *w) {
    const float *last = block_input(m, m->cfg.num_layers);
    norm_forward(m, m->acts[A_LNF], m->acts[A_LNF_MEAN], m->acts[A_LNF_RSTD], last, w->lnfw, w->lnfb);
}

// logits = lnf wte^T (the tied LM head), probs = softmax, and with targets the per-token losses
static void lm_head_forward(GPT2ComputeState *m, const GPT2EmbedParams *w) {
    const int B = m->B, T = m->T, C = m->cfg.channels, V = m->cfg.vocab_size, Vp = m->cfg.padded_vocab_size;
    linear_forward(m, m->acts[A_LOGITS], m->acts[A_LNF], w->wte, NULL, C, Vp);
    PHASE(m, PHASE_LOGITS, softmax_forward(m->acts[A_PROBS], m->acts[A_LOGITS], B, T, V, Vp));
    if (m->targets) PHASE(m, PHASE_LOGITS, crossentropy_forward(m->acts[A_LOSSES], m->acts[A_PROBS], m->targets, B, T, Vp));
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
    PHASE(m, PHASE_LOGITS, {
        for (size_t i = 0; i < BT; i++) s[S_DLOSSES][i] = dloss;
        crossentropy_softmax_backward(s[S_DLOGITS], GRAD_WRITE, s[S_DLOSSES], s[A_PROBS], m->targets, B, T, V, Vp);
    });
    linear_backward(m, s[S_DLN], dw->wte, NULL, s[S_DLOGITS], s[A_LNF], w->wte, C, Vp);
}

// d(lnf) -> d(last residual), which starts the residual stream's gradient (dresidual)
static void final_norm_backward(GPT2ComputeState *m, const GPT2HeadParams *w, const GPT2HeadParams *dw) {
    const int B = m->B, T = m->T, C = m->cfg.channels;
    float **s = m->acts;
    PHASE(m, PHASE_ELEMENTWISE, memset(s[S_DRESIDUAL], 0, (size_t)B * T * C * sizeof(float)));
    norm_backward(m, s[S_DRESIDUAL], dw->lnfw, dw->lnfb, s[S_DLN], block_input(m, m->cfg.num_layers), w->lnfw,
                  s[A_LNF_MEAN], s[A_LNF_RSTD]);
}

// dresidual holds d(residual3 of block l) on entry and d(its input) on exit. The scratch gradients
// (dfch_gelu, dfch, dln, datty, dqkv) are written by their one producer, so they are never zeroed.
static void block_backward(GPT2ComputeState *m, int l, const GPT2BlockParams *w, const GPT2BlockParams *dw) {
    const int B = m->B, T = m->T, C = m->cfg.channels, NH = m->cfg.num_heads;
    float **a = m->layer_acts[l], **s = m->acts;
    float *dres = s[S_DRESIDUAL], *dln = s[S_DLN];
    // MLP: residual3 = residual2 + fcproj, so d(fcproj) = dres and dres flows on to residual2
    linear_backward(m, s[S_DFCH_GELU], dw->fcprojw, dw->fcprojb, dres, a[A_FCH_GELU], w->fcprojw, 4 * C, C);
    PHASE(m, PHASE_ELEMENTWISE, gelu_backward(s[S_DFCH], GRAD_WRITE, a[A_FCH], s[S_DFCH_GELU], B * T * 4 * C));
    linear_backward(m, dln, dw->fcw, dw->fcb, s[S_DFCH], a[A_LN2], w->fcw, C, 4 * C);
    norm_backward(m, dres, dw->ln2w, dw->ln2b, dln, a[A_RESIDUAL2], w->ln2w, a[A_LN2_MEAN], a[A_LN2_RSTD]);
    // attention: residual2 = residual + attproj, the same split
    linear_backward(m, s[S_DATTY], dw->attprojw, dw->attprojb, dres, a[A_ATTY], w->attprojw, C, C);
    PHASE(m, PHASE_ATTENTION, attention_backward(s[S_DQKV], GRAD_WRITE, s[S_DPREATT], s[S_DATT], s[S_DATTY], a[A_QKV], a[A_ATT], B, T, C, NH));
    linear_backward(m, dln, dw->qkvw, dw->qkvb, s[S_DQKV], a[A_LN1], w->qkvw, C, 3 * C);
    norm_backward(m, dres, dw->ln1w, dw->ln1b, dln, block_input(m, l), w->ln1w, a[A_LN1_MEAN], a[A_LN1_RSTD]);
}

// the encoder needs no parameter values, only the inputs and the embedding's gradient buffer
static void embed_backward(GPT2ComputeState *m, const GPT2EmbedParams *dw) {
    const int B = m->B, T = m->T, C = m->cfg.channels;
    const float *dres = m->acts[S_DRESIDUAL];
    if (m->bf16) PHASE(m, PHASE_ELEMENTWISE, encoder_backward_bf16(dw->wte, dw->wpe, dres, m->inputs, B, T, C));
    else PHASE(m, PHASE_ELEMENTWISE, encoder_backward(dw->wte, dw->wpe, dres, m->inputs, B, T, C));
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
    if (m->bf16)
        snprintf(buf, n, "CPU bf16 (fp32 master and activations; matmuls on the %s path), %d OpenMP threads per rank, %s",
                 bf16_path_name(m->mm->path), omp_get_max_threads(), comm);
    else snprintf(buf, n, "CPU fp32, %d OpenMP threads per rank, %s", omp_get_max_threads(), comm);
}
static double flops_fraction(GPT2ComputeState *m, double flops_per_s) { return -1.0; }   // no meaningful peak on a CPU
// the phase clock counts from the second step on (the first warms the buffer pool and the caches)
static void step_begin(GPT2ComputeState *m, int step) {
    PhaseClock *pc = &m->clock;
    if (!pc->on) return;
    if (pc->steps == 1) memset(pc->phase_s, 0, sizeof pc->phase_s);
    pc->in_step = 1;
    pc->step_t0 = phase_now(pc);
}
// every kernel and AdamW ran on this thread: the step is done
static void step_end(GPT2ComputeState *m) {
    PhaseClock *pc = &m->clock;
    if (!pc->on) return;
    pc->in_step = 0;
    if (pc->steps++ >= 1) pc->step_s += phase_now(pc) - pc->step_t0;
}
static void step_note(GPT2ComputeState *m, char *buf, size_t n) { if (n) buf[0] = '\0'; }   // nothing to add on a CPU
// with the phase clock: "cpu phases (...): step S ms | matmul X | ... | other R" (scripts/bench_cpu.sh --floor reads it)
static void run_note(GPT2ComputeState *m, char *buf, size_t n) {
    const PhaseClock *pc = &m->clock;
    if (n) buf[0] = '\0';
    int counted = pc->steps - 1;
    if (!pc->on || counted < 1) return;
    double ms = 1e3 / counted, rest = pc->step_s;
    size_t used = (size_t)snprintf(buf, n, "cpu phases (rank 0, mean %s ms per step over %d steps, the first left out): step %.2f",
                                   pc->on == PHASE_CPU ? "CPU" : "wall", counted, pc->step_s * ms);
    for (int p = 0; p < PHASE_COUNT && used < n; p++) {
        used += (size_t)snprintf(buf + used, n - used, " | %s %.2f", PHASE_NAMES[p], pc->phase_s[p] * ms);
        rest -= pc->phase_s[p];
    }
    if (used < n) snprintf(buf + used, n - used, " | other %.2f", rest * ms);
}

// the two tables: the same functions, a state made for fp32 or for bf16
#define GPT2_CPU_FUNCTIONS \
    .activation_bytes = activation_bytes, .destroy = destroy, .set_batch = set_batch, \
    .embed_forward = embed_forward, .block_forward = block_forward, .final_norm_forward = final_norm_forward, \
    .lm_head_forward = lm_head_forward, \
    .mean_loss = mean_loss, .loss_accumulate = loss_accumulate, .loss_take = loss_take, \
    .lm_head_backward = lm_head_backward, .final_norm_backward = final_norm_backward, \
    .block_backward = block_backward, .embed_backward = embed_backward, \
    .probs = probs_row, .activation = activation, \
    .describe = describe, .flops_fraction = flops_fraction, .step_begin = step_begin, .step_end = step_end, \
    .step_note = step_note, .run_note = run_note
const GPT2Compute GPT2_CPU_COMPUTE = {.create = create, GPT2_CPU_FUNCTIONS};
const GPT2Compute GPT2_CPU_COMPUTE_BF16 = {.create = create_bf16, GPT2_CPU_FUNCTIONS};
