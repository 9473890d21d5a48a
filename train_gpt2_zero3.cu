// train_gpt2_zero3.cu: GPT-2 training on GPUs: bf16 (or fp32) kernels, cuBLASLt matmuls, NCCL, and
// every parameter reached through the ZeRO engine (zero3.c), exactly as the CPU trainer
// train_gpt2_zero3.c does it: the same model functions, called by the same shared train loop
// (train_loop.h), in the same gather / release / grads / reduce order. Only the math is different:
// it runs as CUDA kernels (gpu/*.cuh) on one compute stream, while the engine's collectives run on
// a communication stream (gpu/backend_nccl.cuh) and overlap with it. The shared host headers
// (gpt2.h, checkpoint.h, train_loop.h...) are valid C++ and are included here as they are in the
// CPU trainer; only zero3.c is compiled separately (as C) and linked.
//
//   ./train_gpt2_zero3cu -e d12 -b 8 -t 1024 -x 50              one GPU
//   mpirun -np 8 ./train_gpt2_zero3cu -e d12 -z 3 -o out          eight GPUs, ZeRO-3
//   scripts/launch.sh -n 2 ./train_gpt2_zero3cu -e d12            without MPI (USE_MPI=0 build)
//
// Precision: -DENABLE_BF16 (default): working params, activations and gradients in bf16, fp32 master
// weights and Adam moments in the engine; -DENABLE_FP32: everything fp32 (for tight tests).
#include "gpu/common.cuh"
#include "gpu/kernels.cuh"
#include "gpu/attention.cuh"
#include "gpu/matmul.cuh"
#include "gpu/backend_nccl.cuh"

// the engine's data types for this precision, and the copies the shared host code uses to reach the
// engine's buffers, which live in device memory here (gpt2.h, checkpoint.h)
#if defined(ENABLE_FP32)
#define TRAIN_PARAM_TYPE ZERO3_F32
#define TRAIN_GRAD_TYPE ZERO3_F32
#else
#define TRAIN_PARAM_TYPE ZERO3_BF16
#define TRAIN_GRAD_TYPE ZERO3_BF16
#endif
#define TRAIN_ALIGN 64  // elements: tensors start 128-byte (bf16) / 256-byte (fp32) aligned
#define TRAIN_COPY_TO_HOST(dst, src, bytes) gpu_copy_to_host((dst), (src), (bytes))
#define TRAIN_COPY_TO_DEVICE(dst, src, bytes) gpu_copy_to_device((dst), (src), (bytes))
#include "gpt2.h"

// ------------------------------------------------------------------------------------------------
// Activations. floatX tensors, per layer l (shapes):
//   ln1 (B,T,C)  qkv (B,T,3C)  atty (B,T,C)  att (B,NH,T,T)  residual2 (B,T,C)  ln2 (B,T,C)
//   fch (B,T,4C) (pre-GELU)  fch_gelu (B,T,4C)  residual3 (B,T,C)
// fp32 per layer: ln1_mean, ln1_rstd, ln2_mean, ln2_rstd (B,T).
// Global floatX: encoded, lnf (B,T,C), logits (B,T,Vp) (overwritten by dlogits in backward),
// and scratch reused by every layer: proj (attproj/fcproj output), qkvr, dqkvr (3 x (B,T,C) in head
// order), vacc, dvacc (B,T,C), dresidual, dln, datty (B,T,C), dqkv (B,T,3C), dfch (B,T,4C),
// datt (B,NH,T,T). Global fp32: lnf_mean, lnf_rstd, losses (B,T), partials (reduction scratch).
enum { A_LN1, A_QKV, A_ATTY, A_ATT, A_RESIDUAL2, A_LN2, A_FCH, A_FCH_GELU, A_RESIDUAL3, A_PER_LAYER };
enum { F_LN1_MEAN, F_LN1_RSTD, F_LN2_MEAN, F_LN2_RSTD, F_PER_LAYER };
enum { G_ENCODED, G_LNF, G_LOGITS, G_PROJ, G_QKVR, G_DQKVR, G_VACC, G_DVACC, G_DRESIDUAL, G_DLN, G_DATTY, G_DQKV,
       G_DFCH, G_DATT, G_GLOBAL };
enum { H_LNF_MEAN, H_LNF_RSTD, H_LOSSES, H_PARTIALS, H_GLOBAL };

typedef struct Model {
    GPT2Config cfg;
    Zero3* z;
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
    const floatX* emb;              // the gathered embedding unit, held from the LM-head forward to its backward
    int have_targets;
    double mean_loss;
} Model;

static size_t layer_act_elems(const GPT2Config* c, int B, int T, int which) {
    const size_t BT = (size_t)B * T, C = c->channels;
    switch (which) {
    case A_QKV: return BT * 3 * C;
    case A_ATT: return attention_att_elems(B, T, c->num_heads);
    case A_FCH: case A_FCH_GELU: return BT * 4 * C;
    default: return BT * C;
    }
}
static size_t global_act_elems(const GPT2Config* c, int B, int T, int which) {
    const size_t BT = (size_t)B * T, C = c->channels;
    switch (which) {
    case G_LOGITS: return BT * c->padded_vocab_size;
    case G_QKVR: case G_DQKVR: return attention_qkvr_elems(B, T, c->channels);
    case G_DQKV: return BT * 3 * C;
    case G_DFCH: return BT * 4 * C;
    case G_DATT: return attention_att_elems(B, T, c->num_heads);
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
    return (size_t)BT;
}
// tensors are carved out of one allocation; each starts 256-byte aligned (cuBLASLt, vector loads)
static size_t align_elems(size_t n, size_t elem_bytes) { return (n * elem_bytes + 255) / 256 * 256 / elem_bytes; }

Model* model_create(const GPT2Config* cfg, Zero3* z, int B, int T) {
    if (cfg->num_layers > 1024) fatal("model: at most 1024 layers");
    const int C = cfg->channels, NH = cfg->num_heads;
    if (C % XVEC_SIZE || (C / NH) % XVEC_SIZE || T % XVEC_SIZE || cfg->padded_vocab_size % XVEC_SIZE)
        fatal("model: the GPU kernels need C, C/NH, T and Vp to be multiples of %d (C=%d NH=%d T=%d Vp=%d)",
              XVEC_SIZE, C, NH, T, cfg->padded_vocab_size);
    Model* m = (Model*)xcalloc(1, sizeof(Model));
    m->cfg = *cfg;
    m->z = z;
    m->B = B;
    m->T = T;
    size_t nx = 0, nf = 0;
    for (int l = 0; l < cfg->num_layers; l++) {
        for (int a = 0; a < A_PER_LAYER; a++) nx += align_elems(layer_act_elems(cfg, B, T, a), sizeof(floatX));
        for (int a = 0; a < F_PER_LAYER; a++) nf += align_elems((size_t)B * T, sizeof(float));
    }
    for (int a = 0; a < G_GLOBAL; a++) nx += align_elems(global_act_elems(cfg, B, T, a), sizeof(floatX));
    for (int a = 0; a < H_GLOBAL; a++) nf += align_elems(global_stat_elems(cfg, B, T, a), sizeof(float));
    m->acts_bytes = nx * sizeof(floatX) + nf * sizeof(float);
    m->acts_memory = (floatX*)gpu_alloc(NULL, nx * sizeof(floatX));
    m->stats_memory = (float*)gpu_alloc(NULL, nf * sizeof(float));
    floatX* px = m->acts_memory;
    float* pf = m->stats_memory;
    for (int l = 0; l < cfg->num_layers; l++) {
        for (int a = 0; a < A_PER_LAYER; a++) { m->layer[l][a] = px; px += align_elems(layer_act_elems(cfg, B, T, a), sizeof(floatX)); }
        for (int a = 0; a < F_PER_LAYER; a++) { m->layer_stats[l][a] = pf; pf += align_elems((size_t)B * T, sizeof(float)); }
    }
    for (int a = 0; a < G_GLOBAL; a++) { m->g[a] = px; px += align_elems(global_act_elems(cfg, B, T, a), sizeof(floatX)); }
    for (int a = 0; a < H_GLOBAL; a++) { m->h[a] = pf; pf += align_elems(global_stat_elems(cfg, B, T, a), sizeof(float)); }

    const size_t BT = (size_t)B * T;
    cudaCheck(cudaMalloc((void**)&m->d_inputs, BT * sizeof(int)));
    cudaCheck(cudaMalloc((void**)&m->d_targets, BT * sizeof(int)));
    cudaCheck(cudaMallocHost((void**)&m->pinned_inputs, BT * sizeof(int)));
    cudaCheck(cudaMallocHost((void**)&m->pinned_targets, BT * sizeof(int)));
    cudaCheck(cudaMallocHost((void**)&m->pinned_losses, BT * sizeof(float)));
    cudaCheck(cudaEventCreateWithFlags(&m->uploaded, cudaEventDisableTiming));
    cudaCheck(cudaEventRecord(m->uploaded, g_gpu.compute));
    encoder_plan_create(&m->plan, (int)BT, cfg->vocab_size);
    matmul_init(&m->mm);
    return m;
}

void model_free(Model* m) {
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
    gpu_free(NULL, m->acts_memory);
    gpu_free(NULL, m->stats_memory);
    free(m);
}

// Pointer to tensor i of a gathered unit (or of its gradient buffer).
static floatX* unit_tensor(const Model* m, int u, const void* base, int i) {
    return (floatX*)base + m->z->units[u].tensors[i].offset;
}

// ------------------------------------------------------------------------------------------------
// Forward. Returns the mean loss over the B*T tokens (0 when targets is NULL). inputs, targets are
// host (B,T) arrays.
float model_forward(Model* m, const int* inputs, const int* targets, int training) {
    const GPT2Config* c = &m->cfg;
    Zero3* z = m->z;
    const int B = m->B, T = m->T, C = c->channels, NH = c->num_heads, V = c->vocab_size, Vp = c->padded_vocab_size;
    const int L = c->num_layers, BT = B * T, u_emb = gpt2_unit_emb(c), u_head = gpt2_unit_head(c);
    cudaStream_t s = g_gpu.compute;
    cublasHandle_t blas = m->mm.blas;
    nvtxRangePushA("forward");

    // tokens to the device through pinned buffers, once the previous upload has left them
    cudaCheck(cudaEventSynchronize(m->uploaded));
    memcpy(m->pinned_inputs, inputs, (size_t)BT * sizeof(int));
    cudaCheck(cudaMemcpyAsync(m->d_inputs, m->pinned_inputs, (size_t)BT * sizeof(int), cudaMemcpyHostToDevice, s));
    m->have_targets = targets != NULL;
    if (targets) {
        memcpy(m->pinned_targets, targets, (size_t)BT * sizeof(int));
        cudaCheck(cudaMemcpyAsync(m->d_targets, m->pinned_targets, (size_t)BT * sizeof(int), cudaMemcpyHostToDevice, s));
    }
    cudaCheck(cudaEventRecord(m->uploaded, s));
    if (training) encoder_plan_build(&m->plan, inputs, BT, s);

    const floatX* emb = (const floatX*)zero3_gather(z, u_emb);
    encoder_forward(m->g[G_ENCODED], m->d_inputs, unit_tensor(m, u_emb, emb, EMB_WTE), unit_tensor(m, u_emb, emb, EMB_WPE), B, T, C, s);
    zero3_release(z, u_emb);

    const floatX* residual = m->g[G_ENCODED];
    for (int l = 0; l < L; l++) {
        const int u = gpt2_unit_block(c, l);
        const floatX* w = (const floatX*)zero3_gather(z, u);
        floatX** a = m->layer[l];
        float** st = m->layer_stats[l];
        layernorm_forward(a[A_LN1], st[F_LN1_MEAN], st[F_LN1_RSTD], residual, unit_tensor(m, u, w, BLK_LN1W), unit_tensor(m, u, w, BLK_LN1B), BT, C, s);
        matmul_forward(&m->mm, a[A_QKV], NULL, a[A_LN1], unit_tensor(m, u, w, BLK_QKVW), unit_tensor(m, u, w, BLK_QKVB), BT, C, 3 * C, s);
        attention_forward(a[A_ATTY], a[A_ATT], m->g[G_QKVR], m->g[G_VACC], a[A_QKV], B, T, C, NH, blas, s);
        matmul_forward(&m->mm, m->g[G_PROJ], NULL, a[A_ATTY], unit_tensor(m, u, w, BLK_ATTPROJW), unit_tensor(m, u, w, BLK_ATTPROJB), BT, C, C, s);
        residual_forward(a[A_RESIDUAL2], residual, m->g[G_PROJ], (size_t)BT * C, s);
        layernorm_forward(a[A_LN2], st[F_LN2_MEAN], st[F_LN2_RSTD], a[A_RESIDUAL2], unit_tensor(m, u, w, BLK_LN2W), unit_tensor(m, u, w, BLK_LN2B), BT, C, s);
        // fc with GELU: fch gets the pre-activation, fch_gelu the output (fused in the epilogue where possible)
        matmul_forward(&m->mm, a[A_FCH_GELU], a[A_FCH], a[A_LN2], unit_tensor(m, u, w, BLK_FCW), unit_tensor(m, u, w, BLK_FCB), BT, C, 4 * C, s);
        matmul_forward(&m->mm, m->g[G_PROJ], NULL, a[A_FCH_GELU], unit_tensor(m, u, w, BLK_FCPROJW), unit_tensor(m, u, w, BLK_FCPROJB), BT, 4 * C, C, s);
        residual_forward(a[A_RESIDUAL3], a[A_RESIDUAL2], m->g[G_PROJ], (size_t)BT * C, s);
        zero3_release(z, u);
        residual = a[A_RESIDUAL3];
    }

    const floatX* head = (const floatX*)zero3_gather(z, u_head);
    layernorm_forward(m->g[G_LNF], m->h[H_LNF_MEAN], m->h[H_LNF_RSTD], residual, unit_tensor(m, u_head, head, HEAD_LNFW),
                      unit_tensor(m, u_head, head, HEAD_LNFB), BT, C, s);
    zero3_release(z, u_head);

    // the LM head is tied to wte: the embedding unit is gathered a second time
    emb = (const floatX*)zero3_gather(z, u_emb);
    matmul_forward(&m->mm, m->g[G_LOGITS], NULL, m->g[G_LNF], unit_tensor(m, u_emb, emb, EMB_WTE), NULL, BT, C, Vp, s);
    if (training) m->emb = emb;  // kept through the LM-head backward
    else zero3_release(z, u_emb);

    m->mean_loss = 0.0;
    if (targets) {
        // losses only: the gradient needs dloss, which model_backward brings (the logits stay intact)
        fused_classifier(m->g[G_LOGITS], m->h[H_LOSSES], m->d_targets, BT, V, Vp, 0.0f, 0, s);
        cudaCheck(cudaMemcpyAsync(m->pinned_losses, m->h[H_LOSSES], (size_t)BT * sizeof(float), cudaMemcpyDeviceToHost, s));
        cudaCheck(cudaStreamSynchronize(s));
        double sum = 0.0;
        for (int i = 0; i < BT; i++) sum += m->pinned_losses[i];
        m->mean_loss = sum / BT;
    }
    nvtxRangePop();
    return (float)m->mean_loss;
}

// ------------------------------------------------------------------------------------------------
// Backward, after model_forward(..., training = 1). dloss is the gradient of the step's loss with
// respect to each token's loss (1 / all tokens of the step). Units are visited in reverse; each
// block's gradients go to the engine as soon as they are complete, so its reduce-scatter (on the
// comm stream) overlaps the backward of the block below.
void model_backward(Model* m, float dloss) {
    const GPT2Config* c = &m->cfg;
    Zero3* z = m->z;
    const int B = m->B, T = m->T, C = c->channels, NH = c->num_heads, V = c->vocab_size, Vp = c->padded_vocab_size;
    const int L = c->num_layers, BT = B * T, u_emb = gpt2_unit_emb(c), u_head = gpt2_unit_head(c);
    cudaStream_t s = g_gpu.compute;
    cublasHandle_t blas = m->mm.blas;
    floatX** g = m->g;
    float* partials = m->h[H_PARTIALS];
    if (!m->emb || !m->have_targets) fatal_local("model_backward without a training forward");
    nvtxRangePushA("backward");

    // LM head: dlogits in place of the logits, then d(lnf) and d(wte) through the tied matrix
    floatX* emb_grads = (floatX*)zero3_grads(z, u_emb);
    fused_classifier(g[G_LOGITS], m->h[H_LOSSES], m->d_targets, BT, V, Vp, dloss, 1, s);
    matmul_backward(&m->mm, g[G_DLN], unit_tensor(m, u_emb, emb_grads, EMB_WTE), NULL, partials, g[G_LOGITS], g[G_LNF],
                    unit_tensor(m, u_emb, m->emb, EMB_WTE), NULL, BT, C, Vp, s);
    zero3_release(z, u_emb);  // the encoder backward needs the gradient buffer only
    m->emb = NULL;

    // final layernorm
    const floatX* last = L > 0 ? m->layer[L - 1][A_RESIDUAL3] : g[G_ENCODED];
    const floatX* head = (const floatX*)zero3_gather(z, u_head);
    floatX* head_grads = (floatX*)zero3_grads(z, u_head);
    cudaCheck(cudaMemsetAsync(g[G_DRESIDUAL], 0, (size_t)BT * C * sizeof(floatX), s));
    layernorm_backward(g[G_DRESIDUAL], unit_tensor(m, u_head, head_grads, HEAD_LNFW), unit_tensor(m, u_head, head_grads, HEAD_LNFB),
                       partials, g[G_DLN], last, unit_tensor(m, u_head, head, HEAD_LNFW), m->h[H_LNF_MEAN], m->h[H_LNF_RSTD], BT, C, s);
    zero3_reduce_grads(z, u_head);
    zero3_release(z, u_head);

    // blocks, last to first. dresidual holds d(residual3 of block l) on entry and d(its input) on exit.
    floatX* dres = g[G_DRESIDUAL];
    for (int l = L - 1; l >= 0; l--) {
        const int u = gpt2_unit_block(c, l);
        const floatX* w = (const floatX*)zero3_gather(z, u);
        floatX* gr = (floatX*)zero3_grads(z, u);
        floatX** a = m->layer[l];
        float** st = m->layer_stats[l];
        const floatX* residual = l == 0 ? g[G_ENCODED] : m->layer[l - 1][A_RESIDUAL3];
        // MLP: residual3 = residual2 + fcproj, so d(fcproj) = dres and dres flows on to residual2.
        // fcproj's input came through the GELU: its dinp is the gradient of the pre-activation fch.
        matmul_backward(&m->mm, g[G_DFCH], unit_tensor(m, u, gr, BLK_FCPROJW), unit_tensor(m, u, gr, BLK_FCPROJB), partials,
                        dres, a[A_FCH_GELU], unit_tensor(m, u, w, BLK_FCPROJW), a[A_FCH], BT, 4 * C, C, s);
        matmul_backward(&m->mm, g[G_DLN], unit_tensor(m, u, gr, BLK_FCW), unit_tensor(m, u, gr, BLK_FCB), partials, g[G_DFCH],
                        a[A_LN2], unit_tensor(m, u, w, BLK_FCW), NULL, BT, C, 4 * C, s);
        layernorm_backward(dres, unit_tensor(m, u, gr, BLK_LN2W), unit_tensor(m, u, gr, BLK_LN2B), partials, g[G_DLN],
                           a[A_RESIDUAL2], unit_tensor(m, u, w, BLK_LN2W), st[F_LN2_MEAN], st[F_LN2_RSTD], BT, C, s);
        // attention: residual2 = residual + attproj, the same split
        matmul_backward(&m->mm, g[G_DATTY], unit_tensor(m, u, gr, BLK_ATTPROJW), unit_tensor(m, u, gr, BLK_ATTPROJB), partials,
                        dres, a[A_ATTY], unit_tensor(m, u, w, BLK_ATTPROJW), NULL, BT, C, C, s);
        attention_backward(g[G_DQKV], g[G_QKVR], g[G_DQKVR], g[G_DVACC], g[G_DATT], g[G_DATTY], a[A_QKV], a[A_ATT], B, T, C,
                           NH, blas, s);
        matmul_backward(&m->mm, g[G_DLN], unit_tensor(m, u, gr, BLK_QKVW), unit_tensor(m, u, gr, BLK_QKVB), partials, g[G_DQKV],
                        a[A_LN1], unit_tensor(m, u, w, BLK_QKVW), NULL, BT, C, 3 * C, s);
        layernorm_backward(dres, unit_tensor(m, u, gr, BLK_LN1W), unit_tensor(m, u, gr, BLK_LN1B), partials, g[G_DLN], residual,
                           unit_tensor(m, u, w, BLK_LN1W), st[F_LN1_MEAN], st[F_LN1_RSTD], BT, C, s);
        zero3_reduce_grads(z, u);
        zero3_release(z, u);
    }

    // encoder: needs no parameter values, only the embedding's gradient buffer
    encoder_backward(unit_tensor(m, u_emb, emb_grads, EMB_WTE), unit_tensor(m, u_emb, emb_grads, EMB_WPE), dres, &m->plan,
                     B, T, C, s);
    zero3_reduce_grads(z, u_emb);
    nvtxRangePop();
}

// softmax row (V) of position (b,t) after a forward: computed on the host from that row's logits
void model_probs(Model* m, int b, int t, float* probs) {
    const int V = m->cfg.vocab_size;
    floatX* row = (floatX*)xmalloc((size_t)V * sizeof(floatX));
    cudaCheck(cudaStreamSynchronize(g_gpu.compute));
    cudaCheck(cudaMemcpy(row, m->g[G_LOGITS] + ((size_t)b * m->T + t) * m->cfg.padded_vocab_size, (size_t)V * sizeof(floatX),
                         cudaMemcpyDeviceToHost));
    double mx = -INFINITY, sum = 0.0;
    for (int i = 0; i < V; i++) mx = fmax(mx, (double)to_float(row[i]));
    for (int i = 0; i < V; i++) sum += exp((double)to_float(row[i]) - mx);
    for (int i = 0; i < V; i++) probs[i] = (float)(exp((double)to_float(row[i]) - mx) / sum);
    free(row);
}

// ------------------------------------------------------------------------------------------------
// Reporting

// The peak the MFU is measured against: dense bf16 tensor-core rate of an H100/H200 SXM (989 TFLOP/s,
// the datasheet; ~790 measured on random data on one H200 here), fp32 builds: its 67 TFLOP/s of
// plain fp32. ZERO3_PEAK_TFLOPS overrides (other GPUs, or a measured peak).
static double gpu_peak_flops(void) {
    const char* env = getenv("ZERO3_PEAK_TFLOPS");
    if (env && atof(env) > 0) return atof(env) * 1e12;
    int major = 0, minor = 0;
    cudaCheck(cudaDeviceGetAttribute(&major, cudaDevAttrComputeCapabilityMajor, g_gpu.device));
    cudaCheck(cudaDeviceGetAttribute(&minor, cudaDevAttrComputeCapabilityMinor, g_gpu.device));
    if (major == 9 && minor == 0) return (sizeof(floatX) == 2 ? 989.4e12 : 66.9e12);
    return -1.0;
}

void model_describe(char* buf, size_t n) {
    cudaDeviceProp prop;
    cudaCheck(cudaGetDeviceProperties(&prop, g_gpu.device));
    size_t free_b = 0, total_b = 0;
    cudaCheck(cudaMemGetInfo(&free_b, &total_b));
    const double peak = gpu_peak_flops();
    char peak_s[64] = "no peak known: set ZERO3_PEAK_TFLOPS for MFU";
    if (peak > 0) snprintf(peak_s, sizeof peak_s, "MFU vs %.0f TFLOP/s", peak / 1e12);
    snprintf(buf, n, "GPU %s (device %d), %s, %s, %s; GPU memory in use %.2f of %.2f GiB", prop.name, g_gpu.device,
             PRECISION_NAME, g_gpu.comm ? "NCCL" : "one rank (no NCCL)", peak_s, (total_b - free_b) / 1073741824.0,
             total_b / 1073741824.0);
}

double model_step_flops_fraction(double flops_per_s) {
    const double peak = gpu_peak_flops();
    return peak > 0 ? flops_per_s / peak : -1.0;
}

void model_step_begin(int step) {
    char name[32];
    snprintf(name, sizeof name, "step %d", step);
    nvtxRangePushA(name);
}
void model_step_end(void) { nvtxRangePop(); }

// " | GPU 12.34 GiB": memory in use on this rank's device (all processes, as nvidia-smi counts it)
void model_step_note(char* buf, size_t n) {
    size_t free_b = 0, total_b = 0;
    cudaCheck(cudaMemGetInfo(&free_b, &total_b));
    snprintf(buf, n, " | GPU %.2f GiB", (total_b - free_b) / 1073741824.0);
}

#include "train_loop.h"

#ifndef TESTING
int main(int argc, char** argv) {
    Zero3Backend be;
    gpu_backend_init(&be, &argc, &argv);
    int rc = train_main(argc, argv, &be);
    gpu_backend_finish();
    return rc;
}
#endif
