// gpu/attention.cuh: causal multi-head self-attention, forward and backward.
//
// The plain ("materialized") algorithm, as in the CPU trainer: per (batch, head)
//     att = softmax_causal(q k^T / sqrt(HS)),   out = att v
// with the two products as cuBLAS strided-batched GEMMs over B*NH heads, and our own softmax
// kernels (fp32 math). q, k, v are first permuted from the qkv activation (B,T,3C) = [q|k|v] into
// head-major (B,NH,T,HS) so each head is one contiguous matrix. The (B,NH,T,T) attention matrix is
// the one activation kept per layer for backward; q, k, v are re-permuted from qkv in backward.
#pragma once
#include <cublas_v2.h>
#include "common.cuh"
#include "kernels.cuh"

static inline void cublas_check_impl(cublasStatus_t status, const char* what, const char* file, int line) {
    if (status != CUBLAS_STATUS_SUCCESS) {
        fprintf(stderr, "cuBLAS error at %s:%d (%s): status %d\n", file, line, what, (int)status);
        exit(EXIT_FAILURE);
    }
}
#define cublasCheck(call) cublas_check_impl((call), #call, __FILE__, __LINE__)

#if defined(ENABLE_FP32)
#define CUBLAS_FLOATX CUDA_R_32F
#else
#define CUBLAS_FLOATX CUDA_R_16BF
#endif

// ------------------------------------------------------------------------------------------------
// Permutes between "rows" (B,T,row_stride) holding heads side by side (element (b,t,h,d) at
// rows[(b*T+t)*row_stride + h*HS + d]) and "heads" (B,NH,T,HS). blockIdx.y selects one of several
// such tensors: heads + y*B*NH*T*HS  <->  rows + y*NH*HS (the q, k, v parts of qkv).
// to_heads = 1 gathers rows into heads; 0 scatters heads back into rows.
__global__ void permute_heads_kernel(floatX* heads, floatX* rows, int B, int T, int NH, int HS, int row_stride,
                                     int to_heads) {
    const size_t i = ((size_t)blockIdx.x * blockDim.x + threadIdx.x) * XVEC_SIZE;  // index into heads
    const size_t n = (size_t)B * NH * T * HS;
    if (i >= n) return;
    const int d = (int)(i % HS);
    const int t = (int)((i / HS) % T);
    const int h = (int)((i / ((size_t)HS * T)) % NH);
    const int b = (int)(i / ((size_t)HS * T * NH));
    floatX* head_elem = heads + blockIdx.y * n + i;
    floatX* row_elem = rows + blockIdx.y * (size_t)NH * HS + ((size_t)b * T + t) * row_stride + (size_t)h * HS + d;
    if (to_heads) store16(head_elem, load16(row_elem));
    else store16(row_elem, load16(head_elem));
}

static void permute_heads(floatX* heads, floatX* rows, int nparts, int B, int T, int NH, int HS, int row_stride,
                          int to_heads, cudaStream_t stream) {
    const int block = 256;
    size_t nvec = (size_t)B * NH * T * HS / XVEC_SIZE;
    dim3 grid((unsigned)CEIL_DIV(nvec, (size_t)block), nparts);
    permute_heads_kernel<<<grid, block, 0, stream>>>(heads, rows, B, T, NH, HS, row_stride, to_heads);
    cudaCheckLaunch();
}

// ------------------------------------------------------------------------------------------------
// Causal softmax over rows of att (B*NH*T rows of length T), in place. Row r is query position
// t = r % T; its scores (already scaled by 1/sqrt(HS) in the GEMM) are valid for keys j <= t.
// Writes exp(s_j - max) / sum for j <= t and exact zeros above the diagonal (the next GEMM reads the
// whole row). One warp per row; each lane keeps an online (max, sum) over its own columns, and the
// lanes are combined after rescaling to the row max.
__global__ void causal_softmax_forward_kernel(floatX* att, int rows, int T) {
    const int lane = threadIdx.x % WARP_SIZE;
    const int row = blockIdx.x * (blockDim.x / WARP_SIZE) + threadIdx.x / WARP_SIZE;
    if (row >= rows) return;
    const int nvalid = row % T + 1;
    floatX* p = att + (size_t)row * T;

    float m = -INFINITY, sum = 0.0f;
    for (int j0 = lane * XVEC_SIZE; j0 < nvalid; j0 += WARP_SIZE * XVEC_SIZE) {
        xvec v = load16(p + j0);
#pragma unroll
        for (int k = 0; k < XVEC_SIZE; k++) {
            if (j0 + k >= nvalid) break;
            const float z = to_float(v[k]);
            if (z > m) {
                sum *= expf(m - z);
                m = z;
            }
            sum += expf(z - m);
        }
    }
    const float row_max = warp_max(m);
    // lanes that saw no valid column (m = -inf, sum = 0) contribute 0, not exp(nan)
    const float row_sum = warp_sum(sum > 0.0f ? sum * expf(m - row_max) : 0.0f);
    const float inv_sum = 1.0f / row_sum;

    for (int j0 = lane * XVEC_SIZE; j0 < T; j0 += WARP_SIZE * XVEC_SIZE) {
        xvec v, o;
        if (j0 < nvalid) v = load16(p + j0);
#pragma unroll
        for (int k = 0; k < XVEC_SIZE; k++)
            o[k] = from_float<floatX>(j0 + k < nvalid ? expf(to_float(v[k]) - row_max) * inv_sum : 0.0f);
        store16(p + j0, o);
    }
}

// Softmax backward, in place on datt: dpre_j = att_j * (datt_j - sum_k att_k datt_k) for j <= t,
// 0 above the diagonal (where datt, a full GEMM output, holds values that must not leak through).
// The 1/sqrt(HS) of the forward scaling is applied by the GEMMs that consume dpre.
__global__ void causal_softmax_backward_kernel(floatX* datt, const floatX* att, int rows, int T) {
    const int lane = threadIdx.x % WARP_SIZE;
    const int row = blockIdx.x * (blockDim.x / WARP_SIZE) + threadIdx.x / WARP_SIZE;
    if (row >= rows) return;
    const int nvalid = row % T + 1;
    floatX* d = datt + (size_t)row * T;
    const floatX* a = att + (size_t)row * T;

    float dot = 0.0f;
    for (int j0 = lane * XVEC_SIZE; j0 < nvalid; j0 += WARP_SIZE * XVEC_SIZE) {
        xvec dv = load16(d + j0), av = load16(a + j0);
#pragma unroll
        for (int k = 0; k < XVEC_SIZE; k++)
            if (j0 + k < nvalid) dot += to_float(av[k]) * to_float(dv[k]);
    }
    dot = warp_sum(dot);

    for (int j0 = lane * XVEC_SIZE; j0 < T; j0 += WARP_SIZE * XVEC_SIZE) {
        xvec dv, av, o;
        if (j0 < nvalid) {
            dv = load16(d + j0);
            av = load16(a + j0);
        }
#pragma unroll
        for (int k = 0; k < XVEC_SIZE; k++)
            o[k] = from_float<floatX>(j0 + k < nvalid ? to_float(av[k]) * (to_float(dv[k]) - dot) : 0.0f);
        store16(d + j0, o);
    }
}

// ------------------------------------------------------------------------------------------------
// Strided-batched GEMM in cuBLAS's column-major terms, fp32 accumulation. Row-major X (r x c) is
// column-major X^T, which is how each call below is derived.
static void gemm_batched(cublasHandle_t handle, cublasOperation_t opA, cublasOperation_t opB, int m, int n, int k,
                         float alpha, const floatX* A, int lda, long long strideA, const floatX* Bm, int ldb,
                         long long strideB, float beta, floatX* Cm, int ldc, long long strideC, int batch) {
    cublasCheck(cublasGemmStridedBatchedEx(handle, opA, opB, m, n, k, &alpha, A, CUBLAS_FLOATX, lda, strideA, Bm,
                                           CUBLAS_FLOATX, ldb, strideB, &beta, Cm, CUBLAS_FLOATX, ldc, strideC, batch,
                                           CUBLAS_COMPUTE_32F, CUBLAS_GEMM_DEFAULT));
}

// Scratch sizes, in floatX elements
static inline size_t attention_qkvr_elems(int B, int T, int C) { return 3 * (size_t)B * T * C; }
static inline size_t attention_att_elems(int B, int T, int NH) { return (size_t)B * NH * T * T; }

static void attention_check_shapes(int T, int C, int NH) {
    gpu_require(C % NH == 0, "attention: C=%d not divisible by NH=%d", C, NH);
    gpu_require((C / NH) % XVEC_SIZE == 0, "attention: head size %d not a multiple of %d", C / NH, XVEC_SIZE);
    gpu_require(T % XVEC_SIZE == 0, "attention: T=%d not a multiple of %d", T, XVEC_SIZE);
}

// out(B,T,C) from qkv(B,T,3C). Saves att(B,NH,T,T) for backward.
// Scratch: qkvr (3*B*T*C: q, k, v head-major), vacc (B*T*C: att v, head-major).
static void attention_forward(floatX* out, floatX* att, floatX* qkvr, floatX* vacc, const floatX* qkv, int B, int T,
                              int C, int NH, cublasHandle_t handle, cudaStream_t stream) {
    attention_check_shapes(T, C, NH);
    const int HS = C / NH;
    const size_t head_elems = (size_t)B * NH * T * HS;
    floatX *q = qkvr, *k = qkvr + head_elems, *v = qkvr + 2 * head_elems;
    permute_heads(qkvr, (floatX*)qkv, 3, B, T, NH, HS, 3 * C, 1, stream);

    cublasCheck(cublasSetStream(handle, stream));
    const float scale = 1.0f / sqrtf((float)HS);
    // att(T,T) = scale * q(T,HS) k(T,HS)^T   <=>   att^T = scale * k q^T  (column-major)
    gemm_batched(handle, CUBLAS_OP_T, CUBLAS_OP_N, T, T, HS, scale, k, HS, (long long)T * HS, q, HS,
                 (long long)T * HS, 0.0f, att, T, (long long)T * T, B * NH);
    const int block = 256, rows = B * NH * T;
    causal_softmax_forward_kernel<<<CEIL_DIV(rows, block / WARP_SIZE), block, 0, stream>>>(att, rows, T);
    cudaCheckLaunch();
    // vacc(T,HS) = att(T,T) v(T,HS)   <=>   vacc^T = v^T att^T
    gemm_batched(handle, CUBLAS_OP_N, CUBLAS_OP_N, HS, T, T, 1.0f, v, HS, (long long)T * HS, att, T,
                 (long long)T * T, 0.0f, vacc, HS, (long long)T * HS, B * NH);
    permute_heads(vacc, out, 1, B, T, NH, HS, C, 0, stream);
}

// dqkv(B,T,3C) = (overwritten) gradient of qkv, from dout(B,T,C), qkv and att saved by the forward.
// Scratch: qkvr, dqkvr (3*B*T*C each), dvacc (B*T*C), datt (B*NH*T*T).
static void attention_backward(floatX* dqkv, floatX* qkvr, floatX* dqkvr, floatX* dvacc, floatX* datt,
                               const floatX* dout, const floatX* qkv, const floatX* att, int B, int T, int C, int NH,
                               cublasHandle_t handle, cudaStream_t stream) {
    attention_check_shapes(T, C, NH);
    const int HS = C / NH;
    const size_t head_elems = (size_t)B * NH * T * HS;
    const long long sHead = (long long)T * HS, sAtt = (long long)T * T;
    floatX *q = qkvr, *k = qkvr + head_elems, *v = qkvr + 2 * head_elems;
    floatX *dq = dqkvr, *dk = dqkvr + head_elems, *dv = dqkvr + 2 * head_elems;
    permute_heads(qkvr, (floatX*)qkv, 3, B, T, NH, HS, 3 * C, 1, stream);
    permute_heads(dvacc, (floatX*)dout, 1, B, T, NH, HS, C, 1, stream);

    cublasCheck(cublasSetStream(handle, stream));
    const float scale = 1.0f / sqrtf((float)HS);
    // datt(T,T) = dvacc(T,HS) v^T   <=>   datt^T = v dvacc^T
    gemm_batched(handle, CUBLAS_OP_T, CUBLAS_OP_N, T, T, HS, 1.0f, v, HS, sHead, dvacc, HS, sHead, 0.0f, datt, T,
                 sAtt, B * NH);
    // dv(T,HS) = att^T dvacc   <=>   dv^T = dvacc^T att
    gemm_batched(handle, CUBLAS_OP_N, CUBLAS_OP_T, HS, T, T, 1.0f, dvacc, HS, sHead, att, T, sAtt, 0.0f, dv, HS,
                 sHead, B * NH);
    const int block = 256, rows = B * NH * T;
    causal_softmax_backward_kernel<<<CEIL_DIV(rows, block / WARP_SIZE), block, 0, stream>>>(datt, att, rows, T);
    cudaCheckLaunch();
    // dq(T,HS) = scale * dpre k   <=>   dq^T = scale * k^T dpre^T
    gemm_batched(handle, CUBLAS_OP_N, CUBLAS_OP_N, HS, T, T, scale, k, HS, sHead, datt, T, sAtt, 0.0f, dq, HS, sHead,
                 B * NH);
    // dk(T,HS) = scale * dpre^T q   <=>   dk^T = scale * q^T dpre
    gemm_batched(handle, CUBLAS_OP_N, CUBLAS_OP_T, HS, T, T, scale, q, HS, sHead, datt, T, sAtt, 0.0f, dk, HS, sHead,
                 B * NH);
    permute_heads(dqkvr, dqkv, 3, B, T, NH, HS, 3 * C, 0, stream);
}
