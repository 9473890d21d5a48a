// gpu/flash_attention.cuh: fused causal self-attention, forward and backward, with no T x T matrix
// in memory (the FlashAttention algorithm: tiles of keys in shared memory, an online softmax).
//
// Forward, per (batch b, head h), for every query row t of qkv(B,T,3C) = [q | k | v]:
//     s_j = q_t . k_j / sqrt(HS)  (j <= t),   out_t = sum_j exp(s_j - lse_t) v_j,
//     lse_t = log sum_j exp(s_j)                                  (kept: (B,NH,T) fp32 per layer)
// computed over tiles of keys with a running max m and sum l: when a tile raises the max, what was
// accumulated is rescaled by exp(m_old - m_new). out goes straight to (B,T,C) rows, q/k/v are read
// straight from qkv: no permutes, no (B,NH,T,T) scores or probabilities, no scratch.
// Backward, from dout(B,T,C), out and lse (the probabilities are recomputed, p_tj = exp(s_tj - lse_t)):
//     D_t = dout_t . out_t,   ds_tj = p_tj (dout_t . v_j - D_t)
//     dq_t = scale sum_j ds_tj k_j,   dk_j = scale sum_t ds_tj q_t,   dv_j = sum_t p_tj dout_t
// in two kernels so every output element has one owner and a fixed summation order (no atomics,
// the same bits on every run): one over query blocks (dq, and D for the other), one over key
// blocks (dk, dv). dqkv(B,T,3C) is written whole, in qkv's layout.
//
// This is the portable path: fp32 FMAs on CUDA cores, one thread per query (or key) row, the other
// operand broadcast from shared memory. It runs under the CPU emulator (tools/emu), which has no
// tensor cores, and on any GPU; it is checked element by element against a double-precision CPU
// reference and against the materialized path (tests/cuda/attention.cu). Head sizes up to 64 (every
// GPT-2 size has 64). Everything inside is fp32: only the inputs and outputs are floatX.
#pragma once
#include "common.cuh"
#include "kernels.cuh"

#define FLASH_BQ 64     // query rows per block (forward, dq): one thread each
#define FLASH_BK 32     // keys staged in shared memory per tile (forward, dq)
#define FLASH_SUB 8     // keys per online-softmax update (forward)
#define FLASH_BKV 64    // key rows per block (dk, dv): one thread each
#define FLASH_BQT 16    // queries staged per tile (dk, dv)

// rows [row0, row0 + rows) of one head (columns col0 .. col0 + HS of a matrix with row stride
// `stride`) into tile[rows][HSM] as fp32; rows past T and columns past HS become zeros (the dot
// products run over HSM columns and must see 0, not shared-memory garbage)
template <int HSM>
__device__ inline void flash_stage_rows(float (*tile)[HSM], const floatX* src, int row0, int rows, int T,
                                        size_t stride, int HS) {
    for (int e = threadIdx.x * XVEC_SIZE; e < rows * HSM; e += blockDim.x * XVEC_SIZE) {
        const int r = e / HSM, d = e % HSM;
        if (row0 + r < T && d < HS) {
            const xvec v = load16(src + (size_t)(row0 + r) * stride + d);
#pragma unroll
            for (int k = 0; k < XVEC_SIZE; k++) tile[r][d + k] = to_float(v[k]);
        } else {
#pragma unroll
            for (int k = 0; k < XVEC_SIZE; k++) tile[r][d + k] = 0.0f;
        }
    }
}

// one row of HS floatX (16-byte aligned) into registers, zero past HS, times `mul`
template <int HSM>
__device__ inline void flash_load_row(float* dst, const floatX* src, int HS, float mul) {
#pragma unroll
    for (int d0 = 0; d0 < HSM; d0 += XVEC_SIZE) {
        xvec v;
        if (d0 < HS) v = load16(src + d0);
#pragma unroll
        for (int k = 0; k < XVEC_SIZE; k++) dst[d0 + k] = d0 < HS ? to_float(v[k]) * mul : 0.0f;
    }
}
template <int HSM>
__device__ inline void flash_store_row(floatX* dst, const float* src, int HS, float mul) {
#pragma unroll
    for (int d0 = 0; d0 < HSM; d0 += XVEC_SIZE) {
        if (d0 >= HS) break;
        xvec v;
#pragma unroll
        for (int k = 0; k < XVEC_SIZE; k++) v[k] = from_float<floatX>(src[d0 + k] * mul);
        store16(dst + d0, v);
    }
}

// grid (ceil(T/FLASH_BQ), NH, B), block FLASH_BQ. out (B,T,C), lse (B,NH,T).
template <int HSM>
__global__ void __launch_bounds__(FLASH_BQ) flash_attention_forward_kernel(floatX* out, float* lse, const floatX* qkv,
                                                                           int T, int C, int NH, float scale) {
    __shared__ float ks[FLASH_BK][HSM];
    __shared__ float vs[FLASH_BK][HSM];
    const int HS = C / NH, h = blockIdx.y, b = blockIdx.z;
    const int q0 = blockIdx.x * FLASH_BQ, t = q0 + threadIdx.x;
    const size_t stride = (size_t)3 * C;
    const floatX* head = qkv + (size_t)b * T * stride + (size_t)h * HS;  // q of row 0 of this head
    const bool active = t < T;
    float q[HSM], acc[HSM];
    if (active) flash_load_row<HSM>(q, head + (size_t)t * stride, HS, scale);  // scores come out scaled
    else
#pragma unroll
        for (int d = 0; d < HSM; d++) q[d] = 0.0f;
#pragma unroll
    for (int d = 0; d < HSM; d++) acc[d] = 0.0f;
    float m = -INFINITY, l = 0.0f;
    const int kend = min(T, q0 + FLASH_BQ);  // the keys some query of this block can see
    for (int k0 = 0; k0 < kend; k0 += FLASH_BK) {
        __syncthreads();  // everyone is done with the previous tile
        flash_stage_rows<HSM>(ks, head + C, k0, FLASH_BK, T, stride, HS);
        flash_stage_rows<HSM>(vs, head + 2 * C, k0, FLASH_BK, T, stride, HS);
        __syncthreads();
        for (int j0 = 0; j0 < FLASH_BK; j0 += FLASH_SUB) {
            if (k0 + j0 > t) break;  // this and every later key is in this query's future
            float s[FLASH_SUB];
            float mt = m;
#pragma unroll
            for (int u = 0; u < FLASH_SUB; u++) {
                float dot = 0.0f;
#pragma unroll
                for (int d = 0; d < HSM; d++) dot += q[d] * ks[j0 + u][d];
                s[u] = (k0 + j0 + u <= t) ? dot : -INFINITY;
                mt = fmaxf(mt, s[u]);
            }
            // key k0 + j0 <= t is valid, so mt is finite; exp(-inf) = 0 on the first update
            const float corr = expf(m - mt);
            l *= corr;
#pragma unroll
            for (int d = 0; d < HSM; d++) acc[d] *= corr;
#pragma unroll
            for (int u = 0; u < FLASH_SUB; u++) {
                const float p = expf(s[u] - mt);
                l += p;
#pragma unroll
                for (int d = 0; d < HSM; d++) acc[d] += p * vs[j0 + u][d];
            }
            m = mt;
        }
    }
    if (!active) return;
    flash_store_row<HSM>(out + ((size_t)b * T + t) * C + (size_t)h * HS, acc, HS, 1.0f / l);
    lse[((size_t)b * NH + h) * T + t] = m + logf(l);
}

// dq, and D_t = dout_t . out_t for the dk/dv kernel. grid (ceil(T/FLASH_BQ), NH, B), block FLASH_BQ.
template <int HSM>
__global__ void __launch_bounds__(FLASH_BQ) flash_attention_backward_dq_kernel(
    floatX* dqkv, float* Dbuf, const floatX* dout, const floatX* out, const floatX* qkv, const float* lse, int T,
    int C, int NH, float scale) {
    __shared__ float ks[FLASH_BK][HSM];
    __shared__ float vs[FLASH_BK][HSM];
    __shared__ float dos[FLASH_BQ][HSM + 1];  // each thread's own dout row (+1: rows in different banks)
    const int HS = C / NH, h = blockIdx.y, b = blockIdx.z;
    const int q0 = blockIdx.x * FLASH_BQ, t = q0 + threadIdx.x;
    const size_t stride = (size_t)3 * C;
    const floatX* head = qkv + (size_t)b * T * stride + (size_t)h * HS;
    const bool active = t < T;
    float q[HSM], dq[HSM];
    float* dorow = dos[threadIdx.x];
    float Dt = 0.0f, lse_t = 0.0f;
    if (active) {
        flash_load_row<HSM>(q, head + (size_t)t * stride, HS, scale);
        // dq serves as scratch for dout's row, then for out's
        flash_load_row<HSM>(dq, dout + ((size_t)b * T + t) * C + (size_t)h * HS, HS, 1.0f);
#pragma unroll
        for (int d = 0; d < HSM; d++) dorow[d] = dq[d];
        flash_load_row<HSM>(dq, out + ((size_t)b * T + t) * C + (size_t)h * HS, HS, 1.0f);
#pragma unroll
        for (int d = 0; d < HSM; d++) Dt += dorow[d] * dq[d];
        lse_t = lse[((size_t)b * NH + h) * T + t];
        Dbuf[((size_t)b * NH + h) * T + t] = Dt;
    } else {
#pragma unroll
        for (int d = 0; d < HSM; d++) q[d] = dorow[d] = 0.0f;
    }
#pragma unroll
    for (int d = 0; d < HSM; d++) dq[d] = 0.0f;
    const int kend = min(T, q0 + FLASH_BQ);
    for (int k0 = 0; k0 < kend; k0 += FLASH_BK) {
        __syncthreads();
        flash_stage_rows<HSM>(ks, head + C, k0, FLASH_BK, T, stride, HS);
        flash_stage_rows<HSM>(vs, head + 2 * C, k0, FLASH_BK, T, stride, HS);
        __syncthreads();
        const int jn = min(FLASH_BK, t - k0 + 1);  // keys k0 .. t of this tile (none if t < k0)
        for (int j = 0; j < jn; j++) {
            float s = 0.0f, dp = 0.0f;
#pragma unroll
            for (int d = 0; d < HSM; d++) {
                s += q[d] * ks[j][d];
                dp += dorow[d] * vs[j][d];
            }
            const float ds = expf(s - lse_t) * (dp - Dt);
            // read k again from shared memory (volatile): holding the row in registers since the
            // dot product would take HSM more registers than the kernel has left
            const volatile float* kj = ks[j];
#pragma unroll
            for (int d = 0; d < HSM; d++) dq[d] += ds * kj[d];
        }
    }
    if (!active) return;
    flash_store_row<HSM>(dqkv + ((size_t)b * T + t) * stride + (size_t)h * HS, dq, HS, scale);
}

// dk, dv. grid (ceil(T/FLASH_BKV), NH, B), block FLASH_BKV; needs Dbuf from the dq kernel.
template <int HSM>
__global__ void __launch_bounds__(FLASH_BKV) flash_attention_backward_dkdv_kernel(
    floatX* dqkv, const float* Dbuf, const floatX* dout, const floatX* qkv, const float* lse, int T, int C, int NH,
    float scale) {
    __shared__ float kown[FLASH_BKV][HSM + 1];  // each thread's own key and value rows
    __shared__ float vown[FLASH_BKV][HSM + 1];
    __shared__ float qs[FLASH_BQT][HSM];        // a tile of queries, their dout, lse and D
    __shared__ float dos[FLASH_BQT][HSM];
    __shared__ float lses[FLASH_BQT], Ds[FLASH_BQT];
    const int HS = C / NH, h = blockIdx.y, b = blockIdx.z;
    const int k0 = blockIdx.x * FLASH_BKV, j = k0 + threadIdx.x;
    const size_t stride = (size_t)3 * C;
    const floatX* head = qkv + (size_t)b * T * stride + (size_t)h * HS;
    const floatX* dhead = dout + (size_t)b * T * C + (size_t)h * HS;
    const float* lse_bh = lse + ((size_t)b * NH + h) * T;
    const float* D_bh = Dbuf + ((size_t)b * NH + h) * T;
    const bool active = j < T;
    {
        float tmp[HSM];
        if (active) flash_load_row<HSM>(tmp, head + (size_t)j * stride + C, HS, scale);  // k, pre-scaled
#pragma unroll
        for (int d = 0; d < HSM; d++) kown[threadIdx.x][d] = active ? tmp[d] : 0.0f;
        if (active) flash_load_row<HSM>(tmp, head + (size_t)j * stride + 2 * C, HS, 1.0f);
#pragma unroll
        for (int d = 0; d < HSM; d++) vown[threadIdx.x][d] = active ? tmp[d] : 0.0f;
    }
    // volatile: read from shared memory at every use; the compiler would otherwise keep these
    // loop-invariant rows in 2*HSM registers next to dk and dv, and spill
    const volatile float* kr = kown[threadIdx.x];
    const volatile float* vr = vown[threadIdx.x];
    float dk[HSM], dv[HSM];
#pragma unroll
    for (int d = 0; d < HSM; d++) dk[d] = dv[d] = 0.0f;
    // queries t >= j see key j: from this block's first key to the end
    for (int i0 = k0; i0 < T; i0 += FLASH_BQT) {
        __syncthreads();
        flash_stage_rows<HSM>(qs, head, i0, FLASH_BQT, T, stride, HS);
        flash_stage_rows<HSM>(dos, dhead, i0, FLASH_BQT, T, (size_t)C, HS);
        if (threadIdx.x < FLASH_BQT) {
            const int i = i0 + threadIdx.x;
            lses[threadIdx.x] = i < T ? lse_bh[i] : 0.0f;
            Ds[threadIdx.x] = i < T ? D_bh[i] : 0.0f;
        }
        __syncthreads();
        const int ifirst = max(0, j - i0), iend = min(FLASH_BQT, T - i0);  // queries i0+i with j <= i0+i < T
        for (int i = ifirst; i < iend; i++) {
            float s = 0.0f, dp = 0.0f;
#pragma unroll
            for (int d = 0; d < HSM; d++) {
                s += kr[d] * qs[i][d];
                dp += vr[d] * dos[i][d];
            }
            const float p = expf(s - lses[i]);
            const float ds = p * (dp - Ds[i]);
            const volatile float* qi = qs[i];   // re-read, as in the dq kernel
            const volatile float* doi = dos[i];
#pragma unroll
            for (int d = 0; d < HSM; d++) {
                dv[d] += p * doi[d];
                dk[d] += ds * qi[d];
            }
        }
    }
    if (!active) return;
    floatX* drow = dqkv + ((size_t)b * T + j) * stride + (size_t)h * HS;
    flash_store_row<HSM>(drow + C, dk, HS, scale);
    flash_store_row<HSM>(drow + 2 * C, dv, HS, 1.0f);
}

// per-layer state the backward needs, in floats: lse (B,NH,T)
static inline size_t flash_attention_lse_floats(int B, int T, int NH) { return (size_t)B * NH * T; }
// backward scratch, in floats: D (B,NH,T)
static inline size_t flash_attention_scratch_floats(int B, int T, int NH) { return (size_t)B * NH * T; }

static void flash_attention_check_shapes(int T, int C, int NH) {
    gpu_require(C % NH == 0, "flash attention: C=%d not divisible by NH=%d", C, NH);
    const int HS = C / NH;
    gpu_require(HS % XVEC_SIZE == 0, "flash attention: head size %d not a multiple of %d", HS, XVEC_SIZE);
    gpu_require(HS <= 64, "flash attention: head size %d above 64 (build with ATTENTION=materialized)", HS);
    gpu_require(C % XVEC_SIZE == 0, "flash attention: C=%d not a multiple of %d", C, XVEC_SIZE);
}

// out(B,T,C) from qkv(B,T,3C); lse(B,NH,T) for the backward
static void flash_attention_forward(floatX* out, float* lse, const floatX* qkv, int B, int T, int C, int NH,
                                    cudaStream_t stream) {
    flash_attention_check_shapes(T, C, NH);
    const int HS = C / NH;
    const float scale = 1.0f / sqrtf((float)HS);
    dim3 grid(CEIL_DIV(T, FLASH_BQ), NH, B);
    if (HS <= 32) flash_attention_forward_kernel<32><<<grid, FLASH_BQ, 0, stream>>>(out, lse, qkv, T, C, NH, scale);
    else flash_attention_forward_kernel<64><<<grid, FLASH_BQ, 0, stream>>>(out, lse, qkv, T, C, NH, scale);
    cudaCheckLaunch();
}

// dqkv(B,T,3C) (overwritten) from dout(B,T,C), and the forward's qkv, out and lse. Dbuf: scratch.
static void flash_attention_backward(floatX* dqkv, float* Dbuf, const floatX* dout, const floatX* qkv,
                                     const floatX* out, const float* lse, int B, int T, int C, int NH,
                                     cudaStream_t stream) {
    flash_attention_check_shapes(T, C, NH);
    const int HS = C / NH;
    const float scale = 1.0f / sqrtf((float)HS);
    dim3 gq(CEIL_DIV(T, FLASH_BQ), NH, B), gk(CEIL_DIV(T, FLASH_BKV), NH, B);
    if (HS <= 32) {
        flash_attention_backward_dq_kernel<32><<<gq, FLASH_BQ, 0, stream>>>(dqkv, Dbuf, dout, out, qkv, lse, T, C, NH, scale);
        cudaCheckLaunch();
        flash_attention_backward_dkdv_kernel<32><<<gk, FLASH_BKV, 0, stream>>>(dqkv, Dbuf, dout, qkv, lse, T, C, NH, scale);
    } else {
        flash_attention_backward_dq_kernel<64><<<gq, FLASH_BQ, 0, stream>>>(dqkv, Dbuf, dout, out, qkv, lse, T, C, NH, scale);
        cudaCheckLaunch();
        flash_attention_backward_dkdv_kernel<64><<<gk, FLASH_BKV, 0, stream>>>(dqkv, Dbuf, dout, qkv, lse, T, C, NH, scale);
    }
    cudaCheckLaunch();
}
