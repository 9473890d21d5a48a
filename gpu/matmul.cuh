// gpu/matmul.cuh: the linear layers, through cuBLASLt, and the bias gradient kernel (its fallback).
//
//   forward:  out(BT,OC) = inp(BT,C) W(OC,C)^T + bias(OC) [+ residual(BT,OC)]   [or GELU'd, see below]
//   backward: dinp(BT,C) = dout(BT,OC) W(OC,C)                       [optionally times gelu'(pre)]
//             dW(OC,C) += dout^T inp,   dbias(OC) += column sums of dout
//
// cuBLASLt is column-major; a row-major X (r x c) is a column-major X^T (c x r) with ld = c, so
// out^T(OC x BT) = W(OC x C) inp^T(C x BT): A = W stored as C x OC and transposed, B = inp as is.
// fp32 accumulation always (CUBLAS_COMPUTE_32F: in FP32 builds this is true fp32, never TF32).
//
// The switch ZERO3_GPU_EPILOGUES=0 (environment, read once in matmul_init) turns every cuBLASLt
// epilogue off: each GEMM is plain (the residual still enters as C with beta = 1, which is the GEMM
// itself, not an epilogue), then bias_forward adds the bias, our GELU kernels apply GELU and gelu',
// and bias_backward sums the bias gradient. Same math, other rounding points (the bias is added to
// the rounded product): a rerun with it tells a rounding difference from a bug in an epilogue
// (tests/test_emu_train.sh: the same losses within bf16's rounding either way). The end-of-run line
// says which ran (matmul_epilogue_note).
//
// GELU fusion: the MLP's fc layer can compute gelu(x W^T + b) in the GEMM epilogue and store the
// pre-activation next to it (GELU_AUX_BIAS), and its backward can multiply by gelu'(pre) in the
// epilogue of dinp (DGELU). cuBLASLt implements the tanh approximation, the one GPT-2 uses. When no
// algorithm supports the epilogue for a shape/precision, we fall back to the plain GEMM plus our own
// GELU kernels: same math, one more pass over memory.
//
// Residual fusion (the forward's fewer passes over the residual stream). The two projections that
// end a block's halves feed the residual stream: residual2 = residual + attproj(atty), residual3 =
// residual2 + fcproj(fch_gelu). cuBLASLt computes D = alpha op(A) op(B) + beta C (+ bias) with C and
// D distinct matrices of one layout, so with beta = 1 and C = the incoming residual, the GEMM writes
// the next residual directly, rounded to floatX once (bias and residual added in fp32 first).
// Bytes through HBM per residual add, X = BT*C*sizeof(floatX) (B=16 T=1024 C=768 bf16: X = 25.2 MB),
// counting the projection's output, the add and the layernorm that reads the sum (ln2, or the next
// block's ln1):
//   (a) projection to scratch, residual kernel, layernorm:   write X; read 2X write X; read X write X = 6X
//   (b) residual in the projection's epilogue (this file):   read X (C) write X (D); read X write X   = 4X
//   (c) llm.c's fused residual+layernorm kernel:              write X; read 2X, write 2X              = 5X
// (b) moves the least and keeps ZeRO-3's unit boundaries: (c) would need, for residual3, the NEXT
// block's ln1 weights at the end of this block, which the engine gathers only around that block.
// Per layer (two adds) (b) saves 4X = 101 MB against (a), one kernel launch per add and the proj
// scratch; 12 layers: 1.21 GB per forward, ~0.25 ms at the H200's 4.8 TB/s (an estimate from
// bytes, doubled with recompute).
//
// Bias gradient fusion: the dW GEMM reads dout anyway, as its B operand (k = BT rows); cuBLASLt's
// BGRADB epilogue writes the column sums of op(B) over k, i.e. dbias, from that same pass. It
// overwrites (no +=) and stores in the output type, so it goes to scratch and one OC-long add
// accumulates it into dbias (in BF16 that is two roundings instead of one, both of 2^-9: exact when
// dbias starts at zero). Its summation order is fixed by the algorithm the plan caches: bitwise the
// same run to run on one GPU model and cuBLAS version, like the GEMMs themselves. Without an algorithm
// for it, bias_backward below (partial sums + ordered reduce) reads dout once more. Saved per layer
// at B=16 T=1024: qkv, attproj, fc, fcproj read 9*BT*C floatX once less, 226 MB; 12 layers: 2.7 GB
// per step, ~0.57 ms at 4.8 TB/s (estimate).
#pragma once
#include <cublasLt.h>
#include "common.cuh"
#include "kernels.cuh"
#include "shard_math.cuh"  // add_inplace (the bias gradient)
#include "attention.cuh"  // cublasCheck, CUBLAS_FLOATX

#define MATMUL_WORKSPACE_BYTES ((size_t)32 << 20)
#define MATMUL_MAX_PLANS 128

// A cached GEMM plan: everything cuBLASLt needs that depends only on the shape, the epilogue and the
// operands' alignments (descriptor, layouts, the heuristic's algorithm), built on first use and kept.
// A step asks for a handful of shapes thousands of times; only the bias and aux pointers change
// between calls, and they are set on the cached descriptor just before each launch.
typedef struct {
    int m, n, k, lda, ldb, ldd, transA, transB, epi, has_bias;
    uint32_t alignA, alignB, alignC, alignD;
    int ok;                                  // 0: cuBLASLt had no algorithm (the caller falls back)
    cublasLtMatmulDesc_t desc;
    cublasLtMatrixLayout_t layA, layB, layD;
    cublasLtMatmulAlgo_t algo;
} MatmulPlan;

typedef struct {
    cublasLtHandle_t lt;     // all linear layers
    cublasHandle_t blas;     // the attention's batched GEMMs
    void* workspace;         // cuBLASLt workspace, used on one stream at a time
    size_t workspace_bytes;
    int bias_fusion;         // 1: the bias in the GEMM's epilogue; 0: a plain GEMM, then bias_forward
    int gelu_fusion;         // 1: try the GELU epilogues first; 0: always the unfused path
    long gelu_fallbacks;     // times a GELU epilogue was asked for but no algorithm had it
    int bias_grad_fusion;    // 1: try the BGRADB epilogue in the dW GEMM first; 0: always bias_backward
    long bias_grad_fallbacks;  // times BGRADB was asked for but no algorithm had it
    long plain_fallbacks;    // GEMMs cuBLASLt had no algorithm for at all, run by cublasGemmEx
    MatmulPlan plans[MATMUL_MAX_PLANS];
    int nplans;
    long plan_misses;        // plans built (the rest of the calls reused one)
} MatmulContext;

// ZERO3_GPU_EPILOGUES=0: no cuBLASLt epilogue at all (the header says why one would want that)
static int matmul_epilogues_wanted(void) {
    const char* env = getenv("ZERO3_GPU_EPILOGUES");
    return !(env && strcmp(env, "0") == 0);
}

static void matmul_init(MatmulContext* ctx) {
    cublasCheck(cublasLtCreate(&ctx->lt));
    cublasCheck(cublasCreate(&ctx->blas));
    // default math: no TF32 in fp32 GEMMs, tensor cores for bf16
    cublasCheck(cublasSetMathMode(ctx->blas, CUBLAS_DEFAULT_MATH));
    ctx->workspace_bytes = MATMUL_WORKSPACE_BYTES;
    cudaCheck(cudaMalloc(&ctx->workspace, ctx->workspace_bytes));
    // FP32 builds exist to match the CPU math tightly: cuBLASLt's epilogue may evaluate tanh its own
    // way, so they use our GELU kernels unless asked otherwise
#if defined(ENABLE_FP32)
    ctx->gelu_fusion = 0;
#else
    ctx->gelu_fusion = 1;
#endif
    const int epilogues = matmul_epilogues_wanted();
    ctx->gelu_fusion = ctx->gelu_fusion && epilogues;
    ctx->bias_fusion = epilogues;
    ctx->gelu_fallbacks = 0;
    ctx->bias_grad_fusion = epilogues;
    ctx->bias_grad_fallbacks = 0;
    ctx->plain_fallbacks = 0;
    ctx->nplans = 0;
    ctx->plan_misses = 0;
}

static void matmul_plan_destroy(MatmulPlan* p) {
    cublasCheck(cublasLtMatrixLayoutDestroy(p->layA));
    cublasCheck(cublasLtMatrixLayoutDestroy(p->layB));
    cublasCheck(cublasLtMatrixLayoutDestroy(p->layD));
    cublasCheck(cublasLtMatmulDescDestroy(p->desc));
}

static void matmul_destroy(MatmulContext* ctx) {
    for (int i = 0; i < ctx->nplans; i++) matmul_plan_destroy(&ctx->plans[i]);
    ctx->nplans = 0;
    cudaCheck(cudaFree(ctx->workspace));
    cublasCheck(cublasLtDestroy(ctx->lt));
    cublasCheck(cublasDestroy(ctx->blas));
}

// largest power of two (up to 256) dividing the address: cuBLASLt's heuristic must be told the
// real alignment of every pointer, or it may pick a kernel that assumes more
static inline uint32_t pointer_alignment(const void* p) {
    uint32_t a = 256;
    while (a > 1 && ((uintptr_t)p % a) != 0) a >>= 1;
    return a;
}

typedef enum { EPI_NONE, EPI_BIAS, EPI_GELU_AUX, EPI_DGELU, EPI_BGRADB } MatmulEpilogue;

// D(m x n, ldd) = alpha * op(A) op(B) + beta * C, column-major, C of D's layout (C = NULL: C is D
// itself, which with beta = 1 accumulates into D), with an optional epilogue:
//   EPI_BIAS:     + bias(m)
//   EPI_GELU_AUX: aux = result (+ bias(m) if bias != NULL), D = gelu(aux); aux has ld = ldd
//   EPI_DGELU:    D = result * gelu'(aux), aux the saved pre-activation, ld = ldd
//   EPI_BGRADB:   bias_grad(n) = sum over k of op(B) (column sums of op(B)), overwritten
// A is stored k x m (transA) or m x k; B is stored n x k (transB) or k x n.
// Returns false if cuBLASLt has no algorithm for this combination (the caller falls back).
static bool matmul_lt(MatmulContext* ctx, floatX* D, const floatX* A, const floatX* B, const floatX* C,
                      const floatX* bias, floatX* bias_grad, floatX* aux, MatmulEpilogue epi, int m, int n, int k,
                      bool transA, bool transB, int lda, int ldb, int ldd, float alpha, float beta,
                      cudaStream_t stream) {
    if (C == NULL) C = D;
    // the epilogue's vector: read (bias) or written (bias gradient); cuBLASLt has one pointer for both
    const floatX* vec = epi == EPI_BGRADB ? bias_grad : bias;
    const int has_bias = vec != NULL && (epi == EPI_BIAS || epi == EPI_GELU_AUX || epi == EPI_BGRADB);
    const uint32_t alignA = pointer_alignment(A), alignB = pointer_alignment(B), alignC = pointer_alignment(C),
                   alignD = pointer_alignment(D);
    MatmulPlan* p = NULL;
    for (int i = 0; i < ctx->nplans && p == NULL; i++) {
        MatmulPlan* c = &ctx->plans[i];
        if (c->m == m && c->n == n && c->k == k && c->lda == lda && c->ldb == ldb && c->ldd == ldd &&
            c->transA == (int)transA && c->transB == (int)transB && c->epi == (int)epi && c->has_bias == has_bias &&
            c->alignA == alignA && c->alignB == alignB && c->alignC == alignC && c->alignD == alignD)
            p = c;
    }
    if (p == NULL) {
        // a new shape: build its plan (when the cache is full, the oldest plan makes room)
        if (ctx->nplans == MATMUL_MAX_PLANS) {
            matmul_plan_destroy(&ctx->plans[0]);
            memmove(&ctx->plans[0], &ctx->plans[1], (MATMUL_MAX_PLANS - 1) * sizeof(MatmulPlan));
            ctx->nplans--;
        }
        p = &ctx->plans[ctx->nplans++];
        ctx->plan_misses++;
        memset(p, 0, sizeof(*p));
        p->m = m; p->n = n; p->k = k; p->lda = lda; p->ldb = ldb; p->ldd = ldd;
        p->transA = transA; p->transB = transB; p->epi = epi; p->has_bias = has_bias;
        p->alignA = alignA; p->alignB = alignB; p->alignC = alignC; p->alignD = alignD;
        cublasCheck(cublasLtMatmulDescCreate(&p->desc, CUBLAS_COMPUTE_32F, CUDA_R_32F));
        const cublasOperation_t opA = transA ? CUBLAS_OP_T : CUBLAS_OP_N, opB = transB ? CUBLAS_OP_T : CUBLAS_OP_N;
        cublasCheck(cublasLtMatmulDescSetAttribute(p->desc, CUBLASLT_MATMUL_DESC_TRANSA, &opA, sizeof(opA)));
        cublasCheck(cublasLtMatmulDescSetAttribute(p->desc, CUBLASLT_MATMUL_DESC_TRANSB, &opB, sizeof(opB)));
        cublasLtEpilogue_t epilogue = CUBLASLT_EPILOGUE_DEFAULT;
        if (epi == EPI_BIAS) epilogue = CUBLASLT_EPILOGUE_BIAS;
        if (epi == EPI_GELU_AUX) epilogue = has_bias ? CUBLASLT_EPILOGUE_GELU_AUX_BIAS : CUBLASLT_EPILOGUE_GELU_AUX;
        if (epi == EPI_DGELU) epilogue = CUBLASLT_EPILOGUE_DGELU;
        if (epi == EPI_BGRADB) epilogue = CUBLASLT_EPILOGUE_BGRADB;
        cublasCheck(cublasLtMatmulDescSetAttribute(p->desc, CUBLASLT_MATMUL_DESC_EPILOGUE, &epilogue, sizeof(epilogue)));
        if (epi == EPI_GELU_AUX || epi == EPI_DGELU) {
            const int64_t aux_ld = ldd;
            cublasCheck(cublasLtMatmulDescSetAttribute(p->desc, CUBLASLT_MATMUL_DESC_EPILOGUE_AUX_LD, &aux_ld, sizeof(aux_ld)));
        }
        // the heuristic sees the pointers' attributes as set for this first call
        if (has_bias)
            cublasCheck(cublasLtMatmulDescSetAttribute(p->desc, CUBLASLT_MATMUL_DESC_BIAS_POINTER, &vec, sizeof(vec)));
        if (epi == EPI_GELU_AUX || epi == EPI_DGELU)
            cublasCheck(cublasLtMatmulDescSetAttribute(p->desc, CUBLASLT_MATMUL_DESC_EPILOGUE_AUX_POINTER, &aux, sizeof(aux)));
        cublasCheck(cublasLtMatrixLayoutCreate(&p->layA, CUBLAS_FLOATX, transA ? k : m, transA ? m : k, lda));
        cublasCheck(cublasLtMatrixLayoutCreate(&p->layB, CUBLAS_FLOATX, transB ? n : k, transB ? k : n, ldb));
        cublasCheck(cublasLtMatrixLayoutCreate(&p->layD, CUBLAS_FLOATX, m, n, ldd));
        cublasLtMatmulPreference_t pref;
        cublasCheck(cublasLtMatmulPreferenceCreate(&pref));
        cublasCheck(cublasLtMatmulPreferenceSetAttribute(pref, CUBLASLT_MATMUL_PREF_MAX_WORKSPACE_BYTES,
                                                         &ctx->workspace_bytes, sizeof(ctx->workspace_bytes)));
        cublasCheck(cublasLtMatmulPreferenceSetAttribute(pref, CUBLASLT_MATMUL_PREF_MIN_ALIGNMENT_A_BYTES, &alignA, sizeof(alignA)));
        cublasCheck(cublasLtMatmulPreferenceSetAttribute(pref, CUBLASLT_MATMUL_PREF_MIN_ALIGNMENT_B_BYTES, &alignB, sizeof(alignB)));
        cublasCheck(cublasLtMatmulPreferenceSetAttribute(pref, CUBLASLT_MATMUL_PREF_MIN_ALIGNMENT_C_BYTES, &alignC, sizeof(alignC)));
        cublasCheck(cublasLtMatmulPreferenceSetAttribute(pref, CUBLASLT_MATMUL_PREF_MIN_ALIGNMENT_D_BYTES, &alignD, sizeof(alignD)));
        cublasLtMatmulHeuristicResult_t heuristic;
        int found = 0;
        cublasStatus_t status = cublasLtMatmulAlgoGetHeuristic(ctx->lt, p->desc, p->layA, p->layB, p->layD, p->layD,
                                                               pref, 1, &heuristic, &found);
        p->ok = (status == CUBLAS_STATUS_SUCCESS && found > 0);
        if (p->ok) p->algo = heuristic.algo;
        cublasCheck(cublasLtMatmulPreferenceDestroy(pref));
    }
    if (!p->ok) return false;
    // this call's bias and aux (the plan is keyed on their presence and on the operands' alignment)
    if (has_bias)
        cublasCheck(cublasLtMatmulDescSetAttribute(p->desc, CUBLASLT_MATMUL_DESC_BIAS_POINTER, &vec, sizeof(vec)));
    if (epi == EPI_GELU_AUX || epi == EPI_DGELU)
        cublasCheck(cublasLtMatmulDescSetAttribute(p->desc, CUBLASLT_MATMUL_DESC_EPILOGUE_AUX_POINTER, &aux, sizeof(aux)));
    // C has D's layout (the same descriptor): D itself (weight gradients, +=) or the incoming residual
    cublasCheck(cublasLtMatmul(ctx->lt, p->desc, &alpha, A, p->layA, B, p->layB, &beta, C, p->layD, D, p->layD,
                               &p->algo, ctx->workspace, ctx->workspace_bytes, stream));
    return true;
}

// out(BT,OC) += bias(OC), every row: the bias when the epilogues are off (ZERO3_GPU_EPILOGUES=0)
__global__ void bias_forward_kernel(floatX* out, const floatX* bias, size_t n, int OC) {
    const size_t i = ((size_t)blockIdx.x * blockDim.x + threadIdx.x) * XVEC_SIZE;
    if (i >= n) return;
    xvec o = load16(out + i);
    const xvec b = load16(bias + i % OC);
#pragma unroll
    for (int k = 0; k < XVEC_SIZE; k++) o[k] = from_float<floatX>(to_float(o[k]) + to_float(b[k]));
    store16(out + i, o);
}

static void bias_forward(floatX* out, const floatX* bias, int BT, int OC, cudaStream_t stream) {
    gpu_require(OC % XVEC_SIZE == 0, "bias_forward: OC=%d not a multiple of %d", OC, XVEC_SIZE);
    const size_t n = (size_t)BT * OC;
    bias_forward_kernel<<<(unsigned)CEIL_DIV(n / XVEC_SIZE, 256), 256, 0, stream>>>(out, bias, n, OC);
    cudaCheckLaunch();
}

// The same GEMM through cuBLAS, for a shape cuBLASLt's heuristic has no algorithm for (a library
// build or GPU it has no kernel for): D = op(A) op(B) + beta C, C first copied to D when distinct
// (cublasGemmEx has no separate C), then the bias (EPI_BIAS) by bias_forward. The first such shape
// is named on stderr; the count is in the end-of-run line (matmul_epilogue_note). A shape cuBLAS
// rejects too ends the run with one error naming it.
static void matmul_cublas(MatmulContext* ctx, floatX* D, const floatX* A, const floatX* B, const floatX* C,
                          const floatX* bias, MatmulEpilogue epi, int m, int n, int k, bool transA, bool transB,
                          int lda, int ldb, int ldd, float beta, cudaStream_t stream) {
    gpu_require(ldd == m && (epi == EPI_NONE || epi == EPI_BIAS),
                "matmul: no cuBLASLt algorithm for a %dx%dx%d GEMM (%s, transA=%d transB=%d, ldd=%d, epilogue %d) "
                "and no cuBLAS fallback for it", m, n, k, PRECISION_NAME, (int)transA, (int)transB, ldd, (int)epi);
    if (ctx->plain_fallbacks++ == 0)
        fprintf(stderr, "matmul: cuBLASLt has no algorithm for a %dx%dx%d GEMM (%s, transA=%d transB=%d): "
                "cublasGemmEx instead\n", m, n, k, PRECISION_NAME, (int)transA, (int)transB);
    if (C != NULL && C != D)
        cudaCheck(cudaMemcpyAsync(D, C, (size_t)m * n * sizeof(floatX), cudaMemcpyDeviceToDevice, stream));
    const float alpha = 1.0f;
    cublasCheck(cublasSetStream(ctx->blas, stream));
    const cublasStatus_t st = cublasGemmEx(ctx->blas, transA ? CUBLAS_OP_T : CUBLAS_OP_N, transB ? CUBLAS_OP_T : CUBLAS_OP_N,
                                           m, n, k, &alpha, A, CUBLAS_FLOATX, lda, B, CUBLAS_FLOATX, ldb, &beta, D,
                                           CUBLAS_FLOATX, ldd, CUBLAS_COMPUTE_32F, CUBLAS_GEMM_DEFAULT);
    gpu_require(st == CUBLAS_STATUS_SUCCESS, "matmul: neither cuBLASLt nor cublasGemmEx (%s) runs a %dx%dx%d GEMM (%s, transA=%d transB=%d)",
                cublasGetStatusString(st), m, n, k, PRECISION_NAME, (int)transA, (int)transB);
    if (epi == EPI_BIAS && bias != NULL) bias_forward(D, bias, n, m, stream);
}

// a GEMM that must run: cuBLASLt, else the same through cuBLAS (matmul_cublas). C: as in matmul_lt.
static void matmul_lt_required(MatmulContext* ctx, floatX* D, const floatX* A, const floatX* B, const floatX* C,
                               const floatX* bias, MatmulEpilogue epi, int m, int n, int k, bool transA, bool transB,
                               int lda, int ldb, int ldd, float beta, cudaStream_t stream) {
    if (!matmul_lt(ctx, D, A, B, C, bias, NULL, NULL, epi, m, n, k, transA, transB, lda, ldb, ldd, 1.0f, beta, stream))
        matmul_cublas(ctx, D, A, B, C, bias, epi, m, n, k, transA, transB, lda, ldb, ldd, beta, stream);
}

// D(BT,OC) = inp weight^T + beta * C [+ bias]: the bias in the epilogue, or (epilogues off) a plain
// GEMM and then bias_forward. C: as in matmul_lt (NULL: D).
static void matmul_bias_forward(MatmulContext* ctx, floatX* D, const floatX* C_in, const floatX* inp,
                                const floatX* weight, const floatX* bias, int BT, int C, int OC, float beta,
                                cudaStream_t stream) {
    const int in_epilogue = bias != NULL && ctx->bias_fusion;
    matmul_lt_required(ctx, D, weight, inp, C_in, in_epilogue ? bias : NULL, in_epilogue ? EPI_BIAS : EPI_NONE, OC,
                       BT, C, true, false, C, C, OC, beta, stream);
    if (bias != NULL && !in_epilogue) bias_forward(D, bias, BT, OC, stream);
}

// out(BT,OC) = inp(BT,C) weight(OC,C)^T [+ bias(OC)]. With pre_gelu != NULL: pre_gelu(BT,OC) gets
// that result and out = gelu(pre_gelu).
static void matmul_forward(MatmulContext* ctx, floatX* out, floatX* pre_gelu, const floatX* inp,
                           const floatX* weight, const floatX* bias, int BT, int C, int OC, cudaStream_t stream) {
    if (pre_gelu == NULL) {
        matmul_bias_forward(ctx, out, NULL, inp, weight, bias, BT, C, OC, 0.0f, stream);
        return;
    }
    if (ctx->gelu_fusion &&
        matmul_lt(ctx, out, weight, inp, NULL, bias, NULL, pre_gelu, EPI_GELU_AUX, OC, BT, C, true, false, C, C, OC,
                  1.0f, 0.0f, stream))
        return;
    if (ctx->gelu_fusion) ctx->gelu_fallbacks++;
    matmul_bias_forward(ctx, pre_gelu, NULL, inp, weight, bias, BT, C, OC, 0.0f, stream);
    gelu_forward(out, pre_gelu, (size_t)BT * OC, stream);
}

// out(BT,OC) = residual(BT,OC) + inp(BT,C) weight(OC,C)^T [+ bias(OC)]: a projection that ends in the
// residual stream, the add done in the GEMM's epilogue (C = residual, beta = 1; see the header).
// out and residual must be different buffers (the residual stream keeps every block's output).
static void matmul_residual_forward(MatmulContext* ctx, floatX* out, const floatX* residual, const floatX* inp,
                                    const floatX* weight, const floatX* bias, int BT, int C, int OC,
                                    cudaStream_t stream) {
    gpu_require(out != residual, "matmul_residual_forward: out and residual are the same buffer");
    matmul_bias_forward(ctx, out, residual, inp, weight, bias, BT, C, OC, 1.0f, stream);
}

// ------------------------------------------------------------------------------------------------
// Bias gradient without the epilogue (the fallback when cuBLASLt has no BGRADB algorithm):
// dbias(OC) += sum over rows of dout(BT,OC), deterministic.
// Kernel 1: block (32, 8) covers 32 vectors of columns and a chunk of rows; each thread sums its
// vector over every 8th row of the chunk, the 8 row-lanes are added in order through shared memory,
// and the block's column sums go to partials(nchunks, OC). Kernel 2 adds the chunks in order.
#define BIAS_ROWS_PER_CHUNK 128
__global__ void bias_backward_partial_kernel(float* partials, const floatX* dout, int BT, int OC) {
    __shared__ float sums[8][32 * XVEC_SIZE];
    const int col0 = (blockIdx.x * 32 + threadIdx.x) * XVEC_SIZE;
    const int row_begin = blockIdx.y * BIAS_ROWS_PER_CHUNK;
    const int row_end = min(BT, row_begin + BIAS_ROWS_PER_CHUNK);
    float acc[XVEC_SIZE] = {0.0f};
    if (col0 < OC) {
        for (int r = row_begin + threadIdx.y; r < row_end; r += 8) {
            xvec d = load16(dout + (size_t)r * OC + col0);
#pragma unroll
            for (int k = 0; k < XVEC_SIZE; k++) acc[k] += to_float(d[k]);
        }
    }
#pragma unroll
    for (int k = 0; k < XVEC_SIZE; k++) sums[threadIdx.y][threadIdx.x * XVEC_SIZE + k] = acc[k];
    __syncthreads();
    // 256 threads, 32*XVEC_SIZE columns (256 in bf16, 128 in fp32): one column per thread
    const int tid = threadIdx.y * 32 + threadIdx.x;
    if (tid < 32 * XVEC_SIZE) {
        const int col = blockIdx.x * 32 * XVEC_SIZE + tid;
        float s = 0.0f;
        for (int y = 0; y < 8; y++) s += sums[y][tid];
        if (col < OC) partials[(size_t)blockIdx.y * OC + col] = s;
    }
}

__global__ void bias_backward_reduce_kernel(floatX* dbias, const float* partials, int nchunks, int OC) {
    const int col = blockIdx.x * blockDim.x + threadIdx.x;
    if (col >= OC) return;
    float s = 0.0f;
    for (int i = 0; i < nchunks; i++) s += partials[(size_t)i * OC + col];
    dbias[col] = from_float<floatX>(to_float(dbias[col]) + s);
}

// fp32 scratch the backward of a layer with a bias needs, in floats (the fallback's partials; the
// BGRADB path uses the first OC floatX of it)
static inline size_t matmul_backward_scratch_floats(int BT, int OC) {
    return (size_t)CEIL_DIV(BT, BIAS_ROWS_PER_CHUNK) * OC;
}

static void bias_backward(floatX* dbias, float* scratch, const floatX* dout, int BT, int OC, cudaStream_t stream) {
    gpu_require(OC % XVEC_SIZE == 0, "bias_backward: OC=%d not a multiple of %d", OC, XVEC_SIZE);
    const int nchunks = CEIL_DIV(BT, BIAS_ROWS_PER_CHUNK);
    dim3 grid(CEIL_DIV(OC, 32 * XVEC_SIZE), nchunks), block(32, 8);
    bias_backward_partial_kernel<<<grid, block, 0, stream>>>(scratch, dout, BT, OC);
    cudaCheckLaunch();
    bias_backward_reduce_kernel<<<CEIL_DIV(OC, 256), 256, 0, stream>>>(dbias, scratch, nchunks, OC);
    cudaCheckLaunch();
}

// dweight(OC,C) += dout^T inp and, with dbias != NULL, dbias(OC) += column sums of dout: one GEMM
// with the BGRADB epilogue into scratch plus an OC-long add, else the GEMM and bias_backward.
// dweight^T(C x OC) += inp^T(C x BT) dout(BT x OC): A = inp as stored (C x BT), B = dout^T stored (OC x BT);
// BGRADB sums op(B) = dout over k = BT, one value per column of D = per output channel.
static void matmul_weight_backward(MatmulContext* ctx, floatX* dweight, floatX* dbias, float* scratch,
                                   const floatX* dout, const floatX* inp, int BT, int C, int OC, cudaStream_t stream) {
    if (dbias != NULL && ctx->bias_grad_fusion) {
        floatX* bias_grad = (floatX*)scratch;  // OC floatX: fits, the scratch holds >= OC floats
        if (matmul_lt(ctx, dweight, inp, dout, NULL, NULL, bias_grad, NULL, EPI_BGRADB, C, OC, BT, false, true, C, OC,
                      C, 1.0f, 1.0f, stream)) {
            add_inplace(dbias, bias_grad, (size_t)OC, stream);
            return;
        }
        ctx->bias_grad_fallbacks++;
    }
    if (dbias != NULL) bias_backward(dbias, scratch, dout, BT, OC, stream);
    matmul_lt_required(ctx, dweight, inp, dout, NULL, NULL, EPI_NONE, C, OC, BT, false, true, C, OC, C, 1.0f, stream);
}

// Backward of matmul_forward (and of matmul_residual_forward, whose residual's gradient is dout itself):
//   dinp(BT,C)   = dout(BT,OC) weight(OC,C)                   (overwritten; NULL to skip)
//                  with pre_gelu != NULL: times gelu'(pre_gelu(BT,C)) -- i.e. dinp is then the gradient
//                  of the *previous* layer's pre-activation (the fc layer whose gelu fed this one)
//   dweight(OC,C) += dout^T inp(BT,C)
//   dbias(OC)    += column sums of dout (NULL to skip); scratch: matmul_backward_scratch_floats floats
static void matmul_backward(MatmulContext* ctx, floatX* dinp, floatX* dweight, floatX* dbias, float* scratch,
                            const floatX* dout, const floatX* inp, const floatX* weight, const floatX* pre_gelu,
                            int BT, int C, int OC, cudaStream_t stream) {
    matmul_weight_backward(ctx, dweight, dbias, scratch, dout, inp, BT, C, OC, stream);
    if (dinp == NULL) return;
    // dinp^T(C x BT) = weight^T(C x OC) dout^T(OC x BT): both as stored
    if (pre_gelu != NULL && ctx->gelu_fusion &&
        matmul_lt(ctx, dinp, weight, dout, NULL, NULL, NULL, (floatX*)pre_gelu, EPI_DGELU, C, BT, OC, false, false, C,
                  OC, C, 1.0f, 0.0f, stream))
        return;
    if (pre_gelu != NULL && ctx->gelu_fusion) ctx->gelu_fallbacks++;
    matmul_lt_required(ctx, dinp, weight, dout, NULL, NULL, EPI_NONE, C, BT, OC, false, false, C, OC, C, 0.0f, stream);
    if (pre_gelu != NULL) gelu_backward_inplace(dinp, pre_gelu, (size_t)BT * C, stream);
}

// what the end-of-run line says about the epilogues: fallbacks counted, or the switch that took them off
static void matmul_epilogue_note(const MatmulContext* ctx, char* buf, size_t n) {
    if (!ctx->bias_fusion)
        snprintf(buf, n, "epilogue fallbacks: gelu %ld, bgradb %ld (every cuBLASLt epilogue off: ZERO3_GPU_EPILOGUES=0; "
                 "plain GEMMs, then our bias, GELU and bias-gradient kernels)", ctx->gelu_fallbacks, ctx->bias_grad_fallbacks);
    else
        snprintf(buf, n, "epilogue fallbacks: gelu %ld, bgradb %ld%s", ctx->gelu_fallbacks, ctx->bias_grad_fallbacks,
                 ctx->gelu_fusion ? "" : " (the GELU epilogue is off in this build: our GELU kernels run)");
    // the GEMMs cuBLASLt had no algorithm for at all, only where there were any
    const size_t used = strlen(buf);
    if (ctx->plain_fallbacks > 0 && used < n)
        snprintf(buf + used, n - used, "; GEMMs through cublasGemmEx (no cuBLASLt algorithm): %ld", ctx->plain_fallbacks);
}
