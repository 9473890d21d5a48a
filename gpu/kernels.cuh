// gpu/kernels.cuh: the GPT-2 kernels other than the matmuls (gpu/matmul.cuh) and attention
// (gpu/attention.cuh); the engine's shard math (AdamW, accumulate, casts, the norm's sum of squares)
// is in gpu/shard_math.cuh. Same math and layouts as the CPU trainer (llm.c conventions):
//   activations (B,T,C) row-major; weights (OC,C); tokens int32; logits (B,T,Vp) with V real columns.
// Every launcher takes the stream it runs on and checks the shape conditions its kernel relies on
// (vector width, alignment); it never synchronizes.
//
// Determinism: no kernel here uses floating-point atomics. Where many threads contribute to one
// sum (parameter gradients) each contribution goes to a fixed partial slot and a second
// kernel adds the partials in index order, so two runs on the same input give the same bits.
#pragma once
#include <math.h>
#include "common.cuh"

// block max, the companion of block_sum in common.cuh (same calling rules)
__device__ inline float block_max(float x, float* scratch) {
    const int lane = threadIdx.x % WARP_SIZE, warp = threadIdx.x / WARP_SIZE;
    const int nwarps = blockDim.x / WARP_SIZE;
    x = warp_max(x);
    __syncthreads();
    if (lane == 0) scratch[warp] = x;
    __syncthreads();
    float m = -INFINITY;
    for (int w = 0; w < nwarps; w++) m = fmaxf(m, scratch[w]);
    return m;
}

// ================================================================================================
// Encoder: token + position embedding

// out(B,T,C) = wte(Vp,C)[inp(B,T)] + wpe(maxT,C)[t]. One thread per 16-byte vector of out.
__global__ void encoder_forward_kernel(floatX* out, const int* inp, const floatX* wte, const floatX* wpe,
                                       int B, int T, int C) {
    size_t i = ((size_t)blockIdx.x * blockDim.x + threadIdx.x) * XVEC_SIZE;
    if (i >= (size_t)B * T * C) return;
    int bt = (int)(i / C), c = (int)(i % C), t = bt % T;
    int token = inp[bt];
    xvec e = load16(wte + (size_t)token * C + c);
    xvec p = load16(wpe + (size_t)t * C + c);
    xvec o;
#pragma unroll
    for (int k = 0; k < XVEC_SIZE; k++) o[k] = from_float<floatX>(to_float(e[k]) + to_float(p[k]));
    store16(out + i, o);
}

static void encoder_forward(floatX* out, const int* inp, const floatX* wte, const floatX* wpe,
                            int B, int T, int C, cudaStream_t stream) {
    gpu_require(C % XVEC_SIZE == 0, "encoder_forward: C=%d not a multiple of %d", C, XVEC_SIZE);
    const int block = 256;
    size_t nvec = (size_t)B * T * C / XVEC_SIZE;
    encoder_forward_kernel<<<(unsigned)CEIL_DIV(nvec, (size_t)block), block, 0, stream>>>(out, inp, wte, wpe, B, T, C);
    cudaCheckLaunch();
}

// dwpe(T,C) += sum over b of dout(b,t,:). One thread per vector of one position's channels: the sum
// over b runs in order, so it is deterministic without any partial buffer.
__global__ void encoder_backward_wpe_kernel(floatX* dwpe, const floatX* dout, int B, int T, int C) {
    size_t i = ((size_t)blockIdx.x * blockDim.x + threadIdx.x) * XVEC_SIZE;  // index into (T,C)
    if (i >= (size_t)T * C) return;
    float acc[XVEC_SIZE] = {0.0f};
    for (int b = 0; b < B; b++) {
        xvec d = load16(dout + (size_t)b * T * C + i);
#pragma unroll
        for (int k = 0; k < XVEC_SIZE; k++) acc[k] += to_float(d[k]);
    }
    xvec g = load16(dwpe + i);
#pragma unroll
    for (int k = 0; k < XVEC_SIZE; k++) g[k] = from_float<floatX>(to_float(g[k]) + acc[k]);
    store16(dwpe + i, g);
}

// The wte gradient is a scatter-add: row inp[b,t] of dwte gets dout(b,t,:). To make it deterministic
// without atomics, the host sorts the positions by token first (a counting sort of B*T ints, cheap
// next to a training step): one "bucket" per distinct token, holding its positions in increasing
// order. One block row per bucket then owns its dwte row outright and adds in a fixed order.
//
// Plan layout (ints, host and device alike): [token of bucket (nb)] [start of bucket (nb+1)] [positions (BT)]
typedef struct {
    int* host;     // pinned host copy of the plan
    int* device;   // device copy, what the kernel reads
    int* counts;   // host scratch: one counter per vocabulary entry
    int vocab;     // tokens must lie in [0, vocab)
    int max_bt;    // capacity in positions
    int nbuckets;  // buckets of the plan built last
    int bt;        // positions of the plan built last
    cudaEvent_t uploaded;  // recorded after the upload: the pinned copy may be rewritten once it fired
} EncoderPlan;

static void encoder_plan_create(EncoderPlan* plan, int max_bt, int vocab) {
    plan->vocab = vocab;
    plan->max_bt = max_bt;
    plan->nbuckets = 0;
    plan->bt = 0;
    size_t ints = 3 * (size_t)max_bt + 1;
    cudaCheck(cudaMallocHost((void**)&plan->host, ints * sizeof(int)));
    cudaCheck(cudaMalloc((void**)&plan->device, ints * sizeof(int)));
    plan->counts = (int*)calloc(vocab, sizeof(int));
    if (plan->counts == NULL) { fprintf(stderr, "encoder_plan_create: out of host memory\n"); exit(EXIT_FAILURE); }
    cudaCheck(cudaEventCreateWithFlags(&plan->uploaded, cudaEventDisableTiming));
    cudaCheck(cudaEventRecord(plan->uploaded, 0));
}

static void encoder_plan_destroy(EncoderPlan* plan) {
    cudaCheck(cudaEventSynchronize(plan->uploaded));
    cudaCheck(cudaFreeHost(plan->host));
    cudaCheck(cudaFree(plan->device));
    cudaCheck(cudaEventDestroy(plan->uploaded));
    free(plan->counts);
}

// Builds the plan for the host tokens inp[0..bt) and uploads it on `stream`. Waits (host side) only
// for the previous upload to have left the pinned buffer.
static void encoder_plan_build(EncoderPlan* plan, const int* inp, int bt, cudaStream_t stream) {
    gpu_require(bt <= plan->max_bt, "encoder plan: %d positions, capacity %d", bt, plan->max_bt);
    cudaCheck(cudaEventSynchronize(plan->uploaded));
    int* counts = plan->counts;
    for (int p = 0; p < bt; p++) {
        int tok = inp[p];
        gpu_require(tok >= 0 && tok < plan->vocab, "encoder plan: token %d at position %d outside [0,%d)",
                    tok, p, plan->vocab);
        counts[tok]++;
    }
    // buckets in increasing token order; counts[tok] becomes the write cursor of tok's bucket
    int* bucket_token = plan->host;
    int nb = 0, offset = 0;
    for (int tok = 0; tok < plan->vocab; tok++) {
        if (counts[tok] == 0) continue;
        bucket_token[nb++] = tok;
        int n = counts[tok];
        counts[tok] = offset;
        offset += n;
    }
    int* bucket_start = plan->host + nb;
    int* positions = bucket_start + nb + 1;
    for (int b = 0; b < nb; b++) bucket_start[b] = counts[bucket_token[b]];
    bucket_start[nb] = bt;
    for (int p = 0; p < bt; p++) positions[counts[inp[p]]++] = p;  // increasing p within a bucket
    for (int b = 0; b < nb; b++) counts[bucket_token[b]] = 0;      // ready for the next plan
    plan->nbuckets = nb;
    plan->bt = bt;
    cudaCheck(cudaMemcpyAsync(plan->device, plan->host, (2 * (size_t)nb + 1 + bt) * sizeof(int),
                              cudaMemcpyHostToDevice, stream));
    cudaCheck(cudaEventRecord(plan->uploaded, stream));
}

// dwte(Vp,C): row bucket_token[blockIdx.x] += sum of dout rows at that bucket's positions.
// grid (nbuckets, ceil(C/XVEC_SIZE / blockDim.x)); thread = one vector of channels.
__global__ void encoder_backward_wte_kernel(floatX* dwte, const floatX* dout, const int* plan,
                                            int nbuckets, int C) {
    const int bucket = blockIdx.x;
    const int c = (blockIdx.y * blockDim.x + threadIdx.x) * XVEC_SIZE;
    if (c >= C) return;
    const int* bucket_token = plan;
    const int* bucket_start = plan + nbuckets;
    const int* positions = plan + 2 * nbuckets + 1;
    float acc[XVEC_SIZE] = {0.0f};
    for (int p = bucket_start[bucket]; p < bucket_start[bucket + 1]; p++) {
        xvec d = load16(dout + (size_t)positions[p] * C + c);
#pragma unroll
        for (int k = 0; k < XVEC_SIZE; k++) acc[k] += to_float(d[k]);
    }
    floatX* row = dwte + (size_t)bucket_token[bucket] * C + c;
    xvec g = load16(row);
#pragma unroll
    for (int k = 0; k < XVEC_SIZE; k++) g[k] = from_float<floatX>(to_float(g[k]) + acc[k]);
    store16(row, g);
}

// dwte += scatter of dout by tokens (plan must be built from this batch's tokens); dwpe += sum over b.
// Either gradient pointer may be NULL to skip it.
static void encoder_backward(floatX* dwte, floatX* dwpe, const floatX* dout, const EncoderPlan* plan,
                             int B, int T, int C, cudaStream_t stream) {
    gpu_require(C % XVEC_SIZE == 0, "encoder_backward: C=%d not a multiple of %d", C, XVEC_SIZE);
    if (dwpe != NULL) {
        const int block = 256;
        size_t nvec = (size_t)T * C / XVEC_SIZE;
        encoder_backward_wpe_kernel<<<(unsigned)CEIL_DIV(nvec, (size_t)block), block, 0, stream>>>(dwpe, dout, B, T, C);
        cudaCheckLaunch();
    }
    if (dwte != NULL) {
        gpu_require(plan->bt == B * T, "encoder_backward: plan holds %d positions, batch has %d", plan->bt, B * T);
        const int block = 128;
        dim3 grid(plan->nbuckets, CEIL_DIV(C / XVEC_SIZE, block));
        encoder_backward_wte_kernel<<<grid, block, 0, stream>>>(dwte, dout, plan->device, plan->nbuckets, C);
        cudaCheckLaunch();
    }
}

// ================================================================================================
// Layer norm (eps 1e-5, biased variance, fp32 statistics)

// One warp per row: out(N,C) = (x - mean) * rstd * weight + bias; mean(N), rstd(N) kept for backward.
// The row is read three times (mean, variance, output); the re-reads hit L1, so HBM sees x read and
// out written once. Occupancy on sm_90: 32 registers, no shared memory, so 8 blocks of 256 threads
// (64 warps) fit an SM: full. At N = 16384 rows the grid is 2048 blocks, about two waves of 132 SMs.
__global__ void layernorm_forward_kernel(floatX* out, float* mean, float* rstd, const floatX* inp,
                                         const floatX* weight, const floatX* bias, int N, int C) {
    const int lane = threadIdx.x % WARP_SIZE;
    const int row = blockIdx.x * (blockDim.x / WARP_SIZE) + threadIdx.x / WARP_SIZE;
    if (row >= N) return;  // the whole warp leaves together
    const floatX* x = inp + (size_t)row * C;
    floatX* y = out + (size_t)row * C;

    float sum = 0.0f;
    for (int c = lane * XVEC_SIZE; c < C; c += WARP_SIZE * XVEC_SIZE) {
        xvec v = load16(x + c);
#pragma unroll
        for (int k = 0; k < XVEC_SIZE; k++) sum += to_float(v[k]);
    }
    const float m = warp_sum(sum) / C;

    // variance from the centred values: no cancellation, unlike E[x^2] - m^2
    float var = 0.0f;
    for (int c = lane * XVEC_SIZE; c < C; c += WARP_SIZE * XVEC_SIZE) {
        xvec v = load16(x + c);
#pragma unroll
        for (int k = 0; k < XVEC_SIZE; k++) {
            float d = to_float(v[k]) - m;
            var += d * d;
        }
    }
    const float s = rsqrtf(warp_sum(var) / C + 1e-5f);

    for (int c = lane * XVEC_SIZE; c < C; c += WARP_SIZE * XVEC_SIZE) {
        xvec v = load16(x + c), w = load16(weight + c), b = load16(bias + c), o;
#pragma unroll
        for (int k = 0; k < XVEC_SIZE; k++)
            o[k] = from_float<floatX>((to_float(v[k]) - m) * s * to_float(w[k]) + to_float(b[k]));
        store16(y + c, o);
    }
    if (lane == 0) {
        mean[row] = m;
        rstd[row] = s;
    }
}

static void layernorm_forward(floatX* out, float* mean, float* rstd, const floatX* inp, const floatX* weight,
                              const floatX* bias, int N, int C, cudaStream_t stream) {
    gpu_require(C % XVEC_SIZE == 0, "layernorm_forward: C=%d not a multiple of %d", C, XVEC_SIZE);
    const int block = 256, rows_per_block = block / WARP_SIZE;
    layernorm_forward_kernel<<<CEIL_DIV(N, rows_per_block), block, 0, stream>>>(out, mean, rstd, inp, weight, bias, N, C);
    cudaCheckLaunch();
}

// Layer norm backward. With norm = (x - mean) * rstd and dnorm = weight * dout, per row (N,C):
//   dinp    += rstd * (dnorm - mean_c(dnorm) - norm * mean_c(dnorm * norm))
//   dweight += sum_rows dout * norm,   dbias += sum_rows dout
// The two parts need different mappings, and the kernel runs both over the same rows:
//   dinp needs whole-row sums: one warp per row (shuffle sums, no block barrier), lane l taking the
//   16-byte vectors l, l + 32, ... of the row, as in the forward. The row's dout and x are read
//   twice, for the sums and then for dinp; the second read hits L1.
//   dweight/dbias need per-channel sums over rows, and need only the forward's mean and rstd, not
//   the row sums: thread t owns channel vectors t, t + blockDim, ... (VECS of them) and keeps their
//   sums in registers over all the block's rows (a warp per row would need 2C sums per warp: 48
//   registers per lane at C = 768, and a quarter of the occupancy).
// A block (LN_BWD_WARPS warps) takes rows_per_block rows in rounds of one row per warp; a barrier
// after each round keeps the channel pass on the rows the warps just read, so its reads (the third of
// dout and x) should hit L1/L2 and HBM see dout, x and dinp (read + write) once: 4 * N*C floatX (not
// yet measured on a GPU). At the end thread t writes its
// vectors' sums to partials(gridDim.x, 2, C) and layernorm_backward_reduce_kernel adds the blocks in
// block order. Every sum has a fixed order and the grid depends on N only: the same bits on every run
// and every device, with no atomics.
// Why: the previous kernel had one thread per 8 channels (C/8 = 96 threads per block) and a block
// barrier per row, ~4 such blocks per SM on an H200: 18% occupancy. Occupancy now: layernorm_backward.
#define LN_BWD_WARPS 8
#define LN_BWD_THREADS (LN_BWD_WARPS * WARP_SIZE)
#define LN_BWD_MAX_VECS 2  // C up to 2 * 256 * XVEC_SIZE: 4096 in BF16, 2048 in FP32
#define LN_BWD_TARGET_BLOCKS 512

// dinp of one row, by one warp (every lane calls it)
__device__ inline void layernorm_backward_row(floatX* dinp_row, const floatX* dout_row, const floatX* inp_row,
                                              const floatX* weight, float mean, float rstd, int C) {
    const int lane = threadIdx.x % WARP_SIZE;
    float sum_dnorm = 0.0f, sum_dnorm_norm = 0.0f;
    for (int c = lane * XVEC_SIZE; c < C; c += WARP_SIZE * XVEC_SIZE) {
        const xvec dv = load16(dout_row + c), xv = load16(inp_row + c), wv = load16(weight + c);
#pragma unroll
        for (int k = 0; k < XVEC_SIZE; k++) {
            const float norm = (to_float(xv[k]) - mean) * rstd, dnorm = to_float(wv[k]) * to_float(dv[k]);
            sum_dnorm += dnorm;
            sum_dnorm_norm += dnorm * norm;
        }
    }
    const float mean_dnorm = warp_sum(sum_dnorm) / C, mean_dnorm_norm = warp_sum(sum_dnorm_norm) / C;
    for (int c = lane * XVEC_SIZE; c < C; c += WARP_SIZE * XVEC_SIZE) {
        const xvec dv = load16(dout_row + c), xv = load16(inp_row + c), wv = load16(weight + c);
        xvec g = load16(dinp_row + c);
#pragma unroll
        for (int k = 0; k < XVEC_SIZE; k++) {
            const float norm = (to_float(xv[k]) - mean) * rstd, dnorm = to_float(wv[k]) * to_float(dv[k]);
            g[k] = from_float<floatX>(to_float(g[k]) + rstd * (dnorm - mean_dnorm - norm * mean_dnorm_norm));
        }
        store16(dinp_row + c, g);
    }
}

template <int VECS>
__global__ void __launch_bounds__(LN_BWD_THREADS)
layernorm_backward_kernel(floatX* dinp, float* partials, const floatX* dout, const floatX* inp, const floatX* weight,
                          const float* mean, const float* rstd, int N, int C, int rows_per_block) {
    const int warp = threadIdx.x / WARP_SIZE;
    float dweight_sum[VECS][XVEC_SIZE], dbias_sum[VECS][XVEC_SIZE];
#pragma unroll
    for (int v = 0; v < VECS; v++)
#pragma unroll
        for (int k = 0; k < XVEC_SIZE; k++) {
            dweight_sum[v][k] = 0.0f;
            dbias_sum[v][k] = 0.0f;
        }
    const int row_begin = blockIdx.x * rows_per_block, row_end = min(N, row_begin + rows_per_block);
    for (int round_begin = row_begin; round_begin < row_end; round_begin += LN_BWD_WARPS) {
        const int row = round_begin + warp;
        if (row < row_end)
            layernorm_backward_row(dinp + (size_t)row * C, dout + (size_t)row * C, inp + (size_t)row * C, weight,
                                   mean[row], rstd[row], C);
        __syncthreads();  // the round's rows are in L1: the channel pass reads them there
        const int round_end = min(row_end, round_begin + LN_BWD_WARPS);
#pragma unroll
        for (int v = 0; v < VECS; v++) {
            const int c = (v * LN_BWD_THREADS + threadIdx.x) * XVEC_SIZE;
            if (c >= C) break;
            for (int r = round_begin; r < round_end; r++) {
                const float m = mean[r], s = rstd[r];
                const xvec dv = load16(dout + (size_t)r * C + c), xv = load16(inp + (size_t)r * C + c);
#pragma unroll
                for (int k = 0; k < XVEC_SIZE; k++) {
                    const float d = to_float(dv[k]);
                    dbias_sum[v][k] += d;
                    dweight_sum[v][k] += d * (to_float(xv[k]) - m) * s;
                }
            }
        }
    }
    float* block_dweight = partials + (size_t)blockIdx.x * 2 * C;
    float* block_dbias = block_dweight + C;
#pragma unroll
    for (int v = 0; v < VECS; v++) {
        const int c = (v * LN_BWD_THREADS + threadIdx.x) * XVEC_SIZE;
        if (c >= C) break;
#pragma unroll
        for (int k = 0; k < XVEC_SIZE; k++) {
            block_dweight[c + k] = dweight_sum[v][k];
            block_dbias[c + k] = dbias_sum[v][k];
        }
    }
}

// dweight[c] += sum over blocks of partials[blk][0][c]; dbias[c] likewise from [blk][1][c].
// Block (32, LN_REDUCE_ROWS) covers 32 of the 2C columns: thread (x, y) adds the blocks y,
// y + LN_REDUCE_ROWS, ... in order, then thread (x, 0) adds the LN_REDUCE_ROWS sums in order. (One
// thread per column walking all nblocks, as before, left 2C/256 = 6 blocks to read the 3 MB.)
#define LN_REDUCE_ROWS 16
__global__ void layernorm_backward_reduce_kernel(floatX* dweight, floatX* dbias, const float* partials,
                                                 int nblocks, int C) {
    __shared__ float sums[LN_REDUCE_ROWS][WARP_SIZE];
    const int col = blockIdx.x * WARP_SIZE + threadIdx.x;  // in [0, 2C): dweight then dbias
    float s = 0.0f;
    if (col < 2 * C)
        for (int blk = threadIdx.y; blk < nblocks; blk += LN_REDUCE_ROWS) s += partials[(size_t)blk * 2 * C + col];
    sums[threadIdx.y][threadIdx.x] = s;
    __syncthreads();
    if (threadIdx.y != 0 || col >= 2 * C) return;
    float total = 0.0f;
    for (int y = 0; y < LN_REDUCE_ROWS; y++) total += sums[y][threadIdx.x];
    floatX* grad = col < C ? dweight + col : dbias + (col - C);
    *grad = from_float<floatX>(to_float(*grad) + total);
}

// The block count depends only on N, so the partition (and hence the rounding) is the same on
// every device and every run.
static inline int layernorm_backward_rows_per_block(int N) { return CEIL_DIV(N, LN_BWD_TARGET_BLOCKS); }
static inline int layernorm_backward_blocks(int N) { return CEIL_DIV(N, layernorm_backward_rows_per_block(N)); }
// fp32 scratch the backward needs, in floats
static inline size_t layernorm_backward_scratch_floats(int N, int C) {
    return (size_t)layernorm_backward_blocks(N) * 2 * C;
}

// launches layernorm_backward_kernel<VECS> with the least VECS that covers C
template <int VECS>
static void layernorm_backward_launch(floatX* dinp, float* partials, const floatX* dout, const floatX* inp,
                                      const floatX* weight, const float* mean, const float* rstd, int N, int C,
                                      cudaStream_t stream) {
    if constexpr (VECS < LN_BWD_MAX_VECS) {
        if (C > VECS * LN_BWD_THREADS * XVEC_SIZE) {
            layernorm_backward_launch<VECS + 1>(dinp, partials, dout, inp, weight, mean, rstd, N, C, stream);
            return;
        }
    }
    layernorm_backward_kernel<VECS><<<layernorm_backward_blocks(N), LN_BWD_THREADS, 0, stream>>>(
        dinp, partials, dout, inp, weight, mean, rstd, N, C, layernorm_backward_rows_per_block(N));
    cudaCheckLaunch();
}

// dinp(N,C) += ..., dweight(C) += ..., dbias(C) += ...; scratch: layernorm_backward_scratch_floats(N,C) floats
// Occupancy on sm_90 (ptxas): 64 registers at VECS = 1 in both precisions (73 / 70 at VECS = 2), no
// spills, no shared memory: 4 blocks of 256 threads, 32 warps, per SM (50%). The grid is sized to
// that: LN_BWD_TARGET_BLOCKS = 512 against 132 SMs x 4 = 528 slots, so every block is resident in
// one wave. What feeds HBM is loads in flight, not warps: a warp issues its row's dout and x loads at
// once (3 KB at C = 768 in BF16), ~96 KB per SM, while 4.8 TB/s at an assumed ~1 us of loaded latency
// needs ~36 KB per SM. 64 warps per SM would need <= 32 registers (ptxas spills there) and twice the
// blocks, i.e. twice the partials (12% of the kernel's bytes instead of 6%).
static void layernorm_backward(floatX* dinp, floatX* dweight, floatX* dbias, float* scratch, const floatX* dout,
                               const floatX* inp, const floatX* weight, const float* mean, const float* rstd,
                               int N, int C, cudaStream_t stream) {
    gpu_require(C % XVEC_SIZE == 0, "layernorm_backward: C=%d not a multiple of %d", C, XVEC_SIZE);
    gpu_require(C <= LN_BWD_MAX_VECS * LN_BWD_THREADS * XVEC_SIZE, "layernorm_backward: C=%d above %d", C,
                LN_BWD_MAX_VECS * LN_BWD_THREADS * XVEC_SIZE);
    layernorm_backward_launch<1>(dinp, scratch, dout, inp, weight, mean, rstd, N, C, stream);
    const dim3 reduce_block(WARP_SIZE, LN_REDUCE_ROWS);
    layernorm_backward_reduce_kernel<<<CEIL_DIV(2 * C, WARP_SIZE), reduce_block, 0, stream>>>(
        dweight, dbias, scratch, layernorm_backward_blocks(N), C);
    cudaCheckLaunch();
}

// ================================================================================================
// GELU, tanh approximation (PyTorch's approximate='tanh')

#define GELU_SQRT_2_OVER_PI 0.7978845608028654f
__device__ inline float gelu_value(float x) {
    const float u = GELU_SQRT_2_OVER_PI * (x + 0.044715f * x * x * x);
    return 0.5f * x * (1.0f + tanhf(u));
}
// d gelu / dx
__device__ inline float gelu_derivative(float x) {
    const float u = GELU_SQRT_2_OVER_PI * (x + 0.044715f * x * x * x);
    const float th = tanhf(u);
    const float du_dx = GELU_SQRT_2_OVER_PI * (1.0f + 3.0f * 0.044715f * x * x);
    return 0.5f * (1.0f + th) + 0.5f * x * (1.0f - th * th) * du_dx;
}

// out(N) = gelu(inp(N))
__global__ void gelu_forward_kernel(floatX* out, const floatX* inp, size_t N) {
    size_t i = ((size_t)blockIdx.x * blockDim.x + threadIdx.x) * XVEC_SIZE;
    if (i >= N) return;
    xvec x = load16(inp + i), y;
#pragma unroll
    for (int k = 0; k < XVEC_SIZE; k++) y[k] = from_float<floatX>(gelu_value(to_float(x[k])));
    store16(out + i, y);
}

// d(N) *= gelu'(inp(N)): turns the gradient of gelu's output into the gradient of its input, in place
__global__ void gelu_backward_inplace_kernel(floatX* d, const floatX* inp, size_t N) {
    size_t i = ((size_t)blockIdx.x * blockDim.x + threadIdx.x) * XVEC_SIZE;
    if (i >= N) return;
    xvec x = load16(inp + i), g = load16(d + i);
#pragma unroll
    for (int k = 0; k < XVEC_SIZE; k++) g[k] = from_float<floatX>(to_float(g[k]) * gelu_derivative(to_float(x[k])));
    store16(d + i, g);
}

static void gelu_forward(floatX* out, const floatX* inp, size_t N, cudaStream_t stream) {
    gpu_require(N % XVEC_SIZE == 0, "gelu_forward: N=%zu not a multiple of %d", N, XVEC_SIZE);
    const int block = 256;
    gelu_forward_kernel<<<(unsigned)CEIL_DIV(N / XVEC_SIZE, (size_t)block), block, 0, stream>>>(out, inp, N);
    cudaCheckLaunch();
}

static void gelu_backward_inplace(floatX* d, const floatX* inp, size_t N, cudaStream_t stream) {
    gpu_require(N % XVEC_SIZE == 0, "gelu_backward: N=%zu not a multiple of %d", N, XVEC_SIZE);
    const int block = 256;
    gelu_backward_inplace_kernel<<<(unsigned)CEIL_DIV(N / XVEC_SIZE, (size_t)block), block, 0, stream>>>(d, inp, N);
    cudaCheckLaunch();
}

// ================================================================================================
// Fused classifier: softmax + cross-entropy + its gradient, in place on the logits

// One block per row of logits(BT, Vp). losses[row] = logsumexp(logits[0..V)) - logits[target].
// With write_dlogits, the row is overwritten by dloss * (softmax - onehot(target)) on its V real
// columns and 0 on the padding: the probabilities are never stored.
// Launched at 1024 threads (a 50304-wide row is 6 vectors of 8 per thread). __launch_bounds__ tells
// ptxas so: it then keeps the kernel within 64 registers (65536 / 1024), where without it a build
// using more would compile and fail only at launch (too many resources requested).
#define CLASSIFIER_THREADS 1024
__global__ void __launch_bounds__(CLASSIFIER_THREADS) fused_classifier_kernel(floatX* logits, float* losses, float* lse, const int* targets, int V,
                                        int Vp, float dloss, int write_dlogits) {
    __shared__ float scratch[32];
    floatX* x = logits + (size_t)blockIdx.x * Vp;
    const int target = targets[blockIdx.x];
    // read before the barriers inside block_max/block_sum: after them, other threads overwrite the row
    const float target_logit = to_float(x[target]);

    // per-thread online max and sum of exp over the thread's columns
    float m = -INFINITY, sum = 0.0f;
    for (int j0 = threadIdx.x * XVEC_SIZE; j0 < V; j0 += blockDim.x * XVEC_SIZE) {
        xvec v = load16(x + j0);
#pragma unroll
        for (int k = 0; k < XVEC_SIZE; k++) {
            if (j0 + k >= V) break;
            const float z = to_float(v[k]);
            if (z > m) {
                sum *= expf(m - z);  // exp(-inf) = 0 on the first element: no NaN
                m = z;
            }
            sum += expf(z - m);
        }
    }
    const float row_max = block_max(m, scratch);
    // threads that saw no column have sum 0 and m = -inf: skip them instead of computing exp(nan)
    const float row_sum = block_sum(sum > 0.0f ? sum * expf(m - row_max) : 0.0f, scratch);
    if (threadIdx.x == 0) {
        losses[blockIdx.x] = logf(row_sum) + row_max - target_logit;
        if (lse != NULL) lse[blockIdx.x] = logf(row_sum) + row_max;
    }
    if (!write_dlogits) return;

    const float inv_sum = 1.0f / row_sum;
    for (int j0 = threadIdx.x * XVEC_SIZE; j0 < Vp; j0 += blockDim.x * XVEC_SIZE) {
        xvec v, g;
        if (j0 < V) v = load16(x + j0);
#pragma unroll
        for (int k = 0; k < XVEC_SIZE; k++) {
            const int j = j0 + k;
            float grad = 0.0f;
            if (j < V) {
                const float p = expf(to_float(v[k]) - row_max) * inv_sum;
                grad = (p - (j == target ? 1.0f : 0.0f)) * dloss;
            }
            g[k] = from_float<floatX>(grad);
        }
        store16(x + j0, g);
    }
}

// logits (BT,Vp) in, dlogits out (in place) when write_dlogits; losses (BT) fp32 per token, and
// (lse != NULL) each row's logsumexp for classifier_backward. dloss is d(loss)/d(per-token loss):
// 1/(number of targets the loss averages over).
static void fused_classifier(floatX* logits, float* losses, const int* targets, int BT, int V, int Vp,
                             float dloss, int write_dlogits, cudaStream_t stream, float* lse = NULL) {
    gpu_require(Vp % XVEC_SIZE == 0 && V <= Vp, "fused_classifier: V=%d Vp=%d", V, Vp);
    fused_classifier_kernel<<<BT, CLASSIFIER_THREADS, 0, stream>>>(logits, losses, lse, targets, V, Vp, dloss, write_dlogits);
    cudaCheckLaunch();
}

// The training split of the classifier: the forward (fused_classifier with lse, write_dlogits 0)
// reads the logits once and keeps each row's logsumexp; the backward is then elementwise,
//     dlogits = dloss * (exp(logit - lse[row]) - onehot(target))   (0 on the padding),
// one 16-byte read and write per vector, no reduction recomputed, every thread busy.
__global__ void classifier_backward_kernel(floatX* logits, const float* lse, const int* targets, int V, int Vp,
                                           size_t nvec, float dloss) {
    for (size_t v = (size_t)blockIdx.x * blockDim.x + threadIdx.x; v < nvec; v += (size_t)gridDim.x * blockDim.x) {
        const size_t i = v * XVEC_SIZE;
        const size_t row = i / Vp;
        const int col0 = (int)(i % Vp);  // Vp is a multiple of XVEC_SIZE: the vector is in one row
        xvec x, g;
        if (col0 < V) x = load16_stream(logits + i);
        const float l = lse[row];
        const int target = targets[row];
#pragma unroll
        for (int k = 0; k < XVEC_SIZE; k++) {
            const int j = col0 + k;
            const float grad = j < V ? (expf(to_float(x[k]) - l) - (j == target ? 1.0f : 0.0f)) * dloss : 0.0f;
            g[k] = from_float<floatX>(grad);
        }
        store16(logits + i, g);
    }
}

static void classifier_backward(floatX* logits, const float* lse, const int* targets, int BT, int V, int Vp,
                                float dloss, cudaStream_t stream) {
    gpu_require(Vp % XVEC_SIZE == 0 && V <= Vp, "classifier_backward: V=%d Vp=%d", V, Vp);
    const size_t nvec = (size_t)BT * Vp / XVEC_SIZE;
    const int block = 256;
    const size_t blocks = CEIL_DIV(nvec, (size_t)block);
    const unsigned grid = (unsigned)(blocks < 65536 * 4 ? blocks : 65536 * 4);
    classifier_backward_kernel<<<grid, block, 0, stream>>>(logits, lse, targets, V, Vp, nvec, dloss);
    cudaCheckLaunch();
}

// sum[0] += (sum of losses[0..n)) / n, on the device (one block, fixed order): a training step's
// mean losses add up here without the host waiting for each forward (1024 threads: the bound as
// fused_classifier_kernel's)
#define LOSS_SUM_THREADS 1024
__global__ void __launch_bounds__(LOSS_SUM_THREADS) loss_accumulate_kernel(float* sum, const float* losses, int n) {
    __shared__ float scratch[32];
    float acc = 0.0f;
    for (int i = threadIdx.x; i < n; i += blockDim.x) acc += losses[i];
    acc = block_sum(acc, scratch);
    if (threadIdx.x == 0) sum[0] += acc / n;
}
static void loss_accumulate(float* sum, const float* losses, int n, cudaStream_t stream) {
    loss_accumulate_kernel<<<1, LOSS_SUM_THREADS, 0, stream>>>(sum, losses, n);
    cudaCheckLaunch();
}
