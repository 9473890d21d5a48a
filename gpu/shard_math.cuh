// gpu/shard_math.cuh: the kernels behind the engine's shard math (zero3.h's Zero3Backend: add,
// cast_from_f32, adamw, sum_squares_add): elementwise work and one reduction on slices of the
// engine's flat buffers (shards, and tensor pieces that a shard boundary cuts).
//
// Groups of 8. Every kernel here walks its slice in groups of SLICE_GROUP = 8 consecutive elements
// counted from the slice's first element: 16 bytes of bf16, 32 of fp32. When every pointer of the
// slice is 16-byte aligned, a group moves as one 128-bit load/store (bf16) or two (fp32); otherwise
// as 8 scalar accesses. The last group of a slice may be partial and is always scalar. On the GPU
// the engine aligns tensors and shards to 64 elements, so the trainer's slices are all aligned (only
// their lengths are arbitrary); the scalar path is there for correctness on any slice, and
// tests/cuda checks it with odd offsets.
//
// The load path never changes WHICH elements form a group nor the order in which a thread combines
// them: both follow the element index alone. So an aligned and a misaligned copy of the same slice
// give the same bits, which keeps the sum of squares (a reduction) deterministic for a given shard
// length whatever the buffer's alignment.
//
// Determinism: no floating-point atomics; the sum of squares adds fixed partial slots in order.
#pragma once
#include <math.h>
#include "common.cuh"
#include "../zero3.h"

#define SLICE_GROUP 8
#define SLICE_THREADS 256

// out[0..count) = p[0..count) in fp32 (out[count..) = 0). vector: p is 16-byte aligned and the
// group is whole, so it moves as 16-byte loads.
template <typename T>
__device__ inline void load_group(float (&out)[SLICE_GROUP], const T* p, int count, bool vector) {
    constexpr int V = Vec16<T>::size;  // elements per 16 bytes: 8 bf16, 4 fp32
    if (vector && count == SLICE_GROUP) {
#pragma unroll
        for (int w = 0; w < SLICE_GROUP / V; w++) {
            const Vec16<T> x = load16(p + w * V);
#pragma unroll
            for (int k = 0; k < V; k++) out[w * V + k] = to_float(x[k]);
        }
    } else {
#pragma unroll
        for (int k = 0; k < SLICE_GROUP; k++) out[k] = k < count ? to_float(p[k]) : 0.0f;
    }
}

// p[0..count) = in[0..count) rounded to T (round to nearest even for bf16)
template <typename T>
__device__ inline void store_group(T* p, const float (&in)[SLICE_GROUP], int count, bool vector) {
    constexpr int V = Vec16<T>::size;
    if (vector && count == SLICE_GROUP) {
#pragma unroll
        for (int w = 0; w < SLICE_GROUP / V; w++) {
            Vec16<T> x;
#pragma unroll
            for (int k = 0; k < V; k++) x[k] = from_float<T>(in[w * V + k]);
            store16(p + w * V, x);
        }
    } else {
#pragma unroll
        for (int k = 0; k < SLICE_GROUP; k++)
            if (k < count) p[k] = from_float<T>(in[k]);
    }
}

// elements of the group starting at element i of an n-element slice
__device__ inline int group_count(size_t i, size_t n) { return n - i < SLICE_GROUP ? (int)(n - i) : SLICE_GROUP; }

// blocks of SLICE_THREADS threads for one group per thread over n elements
static inline unsigned slice_blocks(size_t n) {
    const size_t blocks = CEIL_DIV(CEIL_DIV(n, (size_t)SLICE_GROUP), (size_t)SLICE_THREADS);
    gpu_require(blocks < (1ull << 31), "shard slice of %zu elements: too many blocks", n);
    return (unsigned)blocks;
}

// ================================================================================================
// Accumulate and cast: dst(N) += scale * src(N), dst(N) = (Tdst) src(N)
//
// Any mix of fp32 and bf16 storage, fp32 arithmetic. One group of 8 per thread, one thread per group:
// the engine's uses (accumulating a shard's gradients across micro-steps, casting the master to the
// working params) are one pass over memory, so nothing is gained by more work per thread.

template <typename Tdst, typename Tsrc>
__global__ void accumulate_kernel(Tdst* dst, const Tsrc* src, size_t n, float scale, bool vector) {
    const size_t i = ((size_t)blockIdx.x * blockDim.x + threadIdx.x) * SLICE_GROUP;
    if (i >= n) return;
    const int count = group_count(i, n);
    float d[SLICE_GROUP], s[SLICE_GROUP];
    load_group(d, dst + i, count, vector);
    load_group(s, src + i, count, vector);
#pragma unroll
    for (int k = 0; k < SLICE_GROUP; k++) d[k] = d[k] + scale * s[k];
    store_group(dst + i, d, count, vector);
}

template <typename Tdst, typename Tsrc>
static void accumulate(Tdst* dst, const Tsrc* src, size_t n, float scale, cudaStream_t stream) {
    if (n == 0) return;
    const bool vector = is_aligned(dst, 16) && is_aligned(src, 16);
    accumulate_kernel<Tdst, Tsrc><<<slice_blocks(n), SLICE_THREADS, 0, stream>>>(dst, src, n, scale, vector);
    cudaCheckLaunch();
}

// dst(N) += src(N) in the working precision
static void add_inplace(floatX* dst, const floatX* src, size_t n, cudaStream_t stream) {
    accumulate<floatX, floatX>(dst, src, n, 1.0f, stream);
}

template <typename Tdst, typename Tsrc>
__global__ void cast_kernel(Tdst* dst, const Tsrc* src, size_t n, bool vector) {
    const size_t i = ((size_t)blockIdx.x * blockDim.x + threadIdx.x) * SLICE_GROUP;
    if (i >= n) return;
    const int count = group_count(i, n);
    float x[SLICE_GROUP];
    load_group(x, src + i, count, vector);
    store_group(dst + i, x, count, vector);
}

template <typename Tdst, typename Tsrc>
static void cast_copy(Tdst* dst, const Tsrc* src, size_t n, cudaStream_t stream) {
    if (n == 0) return;
    const bool vector = is_aligned(dst, 16) && is_aligned(src, 16);
    cast_kernel<Tdst, Tsrc><<<slice_blocks(n), SLICE_THREADS, 0, stream>>>(dst, src, n, vector);
    cudaCheckLaunch();
}

// ================================================================================================
// AdamW
//
// Per element, as torch.optim.AdamW and the CPU backend (cpu/backend_cpu.c), with g the gradient
// times grad_scale (the clipping coefficient) and bias_correction_k = 1 - beta_k^t:
//     m = beta1 m + (1 - beta1) g,   v = beta2 v + (1 - beta2) g^2
//     p = p (1 - lr wd)                                   (decoupled decay first, on the old p)
//     p = p - lr (m / bias_correction1) / (sqrt(v / bias_correction2) + eps)
// master, m, v fp32; the working params (floatX) are rewritten from the new master.
//
// adamw_element is the update of one element; adamw_multi_kernel applies it to every tensor piece
// of a step in ONE launch (what the trainer runs): the engine's ~150 pieces per step (GPT-2 124M)
// would otherwise be ~150 launches, most of them too small to fill the GPU. tests/cuda/adamw.cu holds
// it, bit for bit, to a one-tensor kernel over the same adamw_element.

typedef struct {
    float lr, beta1, beta2, bias_correction1, bias_correction2, eps, grad_scale;
} AdamwHyper;

// bias corrections in double on the host: 1 - 0.95^t loses digits in fp32 when t is small
static AdamwHyper adamw_hyper(float lr, float beta1, float beta2, int t, float eps, float grad_scale) {
    AdamwHyper h;
    h.lr = lr;
    h.beta1 = beta1;
    h.beta2 = beta2;
    h.bias_correction1 = (float)(1.0 - pow((double)beta1, (double)t));
    h.bias_correction2 = (float)(1.0 - pow((double)beta2, (double)t));
    h.eps = eps;
    h.grad_scale = grad_scale;
    return h;
}

// One element: updates p (the master weight), m, v in place from the raw gradient. Every operation
// is an explicitly rounded intrinsic, so that no compiler fuses or approximates one (nvcc contracts
// a * b + c into an fma and -use_fast_math approximates / and sqrtf; g++ for the emulator fuses
// nothing): the same bits as the host AdamW (cpu/adamw.h, ADAMW_UNFUSED), which -oo host runs
// instead of this kernel. The three fmas are the host's three fmaf, in its operation order.
__device__ inline void adamw_element(float& p, float& m, float& v, float grad, const AdamwHyper& h,
                                     float weight_decay) {
    const float g = __fmul_rn(grad, h.grad_scale);
    m = __fmaf_rn(h.beta1, m, __fmul_rn(1.0f - h.beta1, g));
    v = __fmaf_rn(h.beta2, v, __fmul_rn(__fmul_rn(1.0f - h.beta2, g), g));
    const float decayed = __fmul_rn(p, __fmaf_rn(-h.lr, weight_decay, 1.0f));
    const float step = __fdiv_rn(__fmul_rn(h.lr, __fdiv_rn(m, h.bias_correction1)),
                                 __fadd_rn(__fsqrt_rn(__fdiv_rn(v, h.bias_correction2)), h.eps));
    p = __fsub_rn(decayed, step);
}

// The multi-tensor launch (like apex's multi_tensor_apply). The segments (zero3.h's
// Zero3AdamSegment, as the engine built them) are cut into chunks of ADAMW_CHUNK elements, and
// block b updates chunk b of the chunk table: chunk (segment s, start, count) covers elements
// [start, start + count) of segment s. No grid-stride loop and no search: the host did the mapping.
// In a chunk, thread t takes the groups t, t + blockDim, ...; a chunk starts a multiple of 8
// elements into its segment, so its pointers are 16-byte aligned exactly when the segment's are
// (checked per chunk, in the kernel: the segment pointers live on the device).
#define ADAMW_CHUNK 8192   // elements per block: 256 threads x 4 groups of 8
#define ADAMW_THREADS 256

typedef struct {
    int segment;   // index into the segment table
    int count;     // elements, at most ADAMW_CHUNK
    size_t start;  // first element, inside the segment
} AdamwChunk;

// chunks needed for the segments; with `chunks` != NULL also writes them
static size_t adamw_chunk_table(const Zero3AdamSegment* segs, int nsegs, AdamwChunk* chunks) {
    size_t nchunks = 0;
    for (int s = 0; s < nsegs; s++)
        for (size_t start = 0; start < segs[s].n; start += ADAMW_CHUNK, nchunks++)
            if (chunks != NULL) {
                const size_t left = segs[s].n - start;
                chunks[nchunks].segment = s;
                chunks[nchunks].count = (int)(left < ADAMW_CHUNK ? left : ADAMW_CHUNK);
                chunks[nchunks].start = start;
            }
    return nchunks;
}

template <typename Tgrad>
__global__ void adamw_multi_kernel(const Zero3AdamSegment* segs, const AdamwChunk* chunks, AdamwHyper h) {
    const AdamwChunk chunk = chunks[blockIdx.x];
    const Zero3AdamSegment seg = segs[chunk.segment];
    float* master = seg.master + chunk.start;
    float* m = seg.m + chunk.start;
    float* v = seg.v + chunk.start;
    const Tgrad* grad = (const Tgrad*)seg.grad + chunk.start;
    // the working params are rewritten from the master unless they are the master (fp32 builds)
    floatX* params = seg.params == (void*)seg.master ? NULL : (floatX*)seg.params + chunk.start;
    const bool vector = is_aligned(master, 16) && is_aligned(m, 16) && is_aligned(v, 16) && is_aligned(grad, 16) &&
                        (params == NULL || is_aligned(params, 16));
    for (int i = threadIdx.x * SLICE_GROUP; i < chunk.count; i += blockDim.x * SLICE_GROUP) {
        const int count = group_count(i, chunk.count);
        float p[SLICE_GROUP], mk[SLICE_GROUP], vk[SLICE_GROUP], g[SLICE_GROUP];
        load_group(p, master + i, count, vector);
        load_group(mk, m + i, count, vector);
        load_group(vk, v + i, count, vector);
        load_group(g, grad + i, count, vector);
#pragma unroll
        for (int k = 0; k < SLICE_GROUP; k++) adamw_element(p[k], mk[k], vk[k], g[k], h, seg.weight_decay);
        store_group(m + i, mk, count, vector);
        store_group(v + i, vk, count, vector);
        store_group(master + i, p, count, vector);
        if (params != NULL) store_group(params + i, p, count, vector);
    }
}

// Launches the update of every chunk of a table already on the device (d_segs, d_chunks).
template <typename Tgrad>
static void adamw_multi_update(const Zero3AdamSegment* d_segs, const AdamwChunk* d_chunks, size_t nchunks,
                               const AdamwHyper& h, cudaStream_t stream) {
    if (nchunks == 0) return;
    gpu_require(nchunks < (1ull << 31), "adamw: %zu chunks exceed the grid", nchunks);
    adamw_multi_kernel<Tgrad><<<(unsigned)nchunks, ADAMW_THREADS, 0, stream>>>(d_segs, d_chunks, h);
    cudaCheckLaunch();
}

// ================================================================================================
// Sum of squares, deterministic two-pass reduction (for the global gradient norm)
//
// partials[b] = sum of x^2 over the groups of block b, then one block adds the partials in order.
// A fixed grid (independent of the device) and the fixed groups of 8 make the element-to-thread
// assignment, and so the rounding, a function of n alone: thread j of the SUMSQ_BLOCKS x
// SUMSQ_THREADS grid takes groups j, j + grid, ... and adds each group's squares in element order.

#define SUMSQ_BLOCKS 256
#define SUMSQ_THREADS 512

template <typename T>
__global__ void sumsq_partial_kernel(float* partials, const T* x, size_t n, bool vector) {
    __shared__ float scratch[32];
    float acc = 0.0f;
    const size_t stride = (size_t)gridDim.x * blockDim.x * SLICE_GROUP;
    for (size_t i = ((size_t)blockIdx.x * blockDim.x + threadIdx.x) * SLICE_GROUP; i < n; i += stride) {
        float xs[SLICE_GROUP];
        load_group(xs, x + i, group_count(i, n), vector);
#pragma unroll
        for (int k = 0; k < SLICE_GROUP; k++) acc += xs[k] * xs[k];  // a partial group's tail is 0
    }
    const float total = block_sum(acc, scratch);
    if (threadIdx.x == 0) partials[blockIdx.x] = total;
}

// out[0] = (accumulate ? out[0] : 0) + sum of partials[0..nparts), in a fixed order. One block.
__global__ void sumsq_final_kernel(float* out, const float* partials, int nparts, int accumulate) {
    __shared__ float scratch[32];
    float acc = 0.0f;
    for (int i = threadIdx.x; i < nparts; i += blockDim.x) acc += partials[i];
    const float total = block_sum(acc, scratch);
    if (threadIdx.x == 0) out[0] = (accumulate ? out[0] : 0.0f) + total;
}

// out[0] (device, fp32) = [out[0] +] sum x[i]^2. scratch: SUMSQ_BLOCKS floats.
template <typename T>
static void sum_squares(float* out, const T* x, size_t n, float* scratch, int accumulate, cudaStream_t stream) {
    sumsq_partial_kernel<T><<<SUMSQ_BLOCKS, SUMSQ_THREADS, 0, stream>>>(scratch, x, n, is_aligned(x, 16));
    cudaCheckLaunch();
    sumsq_final_kernel<<<1, SUMSQ_THREADS, 0, stream>>>(out, scratch, SUMSQ_BLOCKS, accumulate);
    cudaCheckLaunch();
}

// ------------------------------------------------------------------------------------------------
// ZeRO++'s block quantization (zero3.h: one fp32 scale per ZERO3_QUANT_BLOCK elements, int8 codes,
// the packed span = n codes then n / block scales). One thread block per quantization block, one
// element per thread: the block's largest magnitude by a shared-memory tree (a max is exact in any
// order, so the scale is the CPU backend's to the bit), then every code by zero3_quant_code, the
// function the CPU backend calls.
template <typename T>
__global__ void quantize_kernel(const T* src, signed char* codes, float* scales) {
    __shared__ float amax[ZERO3_QUANT_BLOCK];
    const size_t i = (size_t)blockIdx.x * ZERO3_QUANT_BLOCK + threadIdx.x;
    const float x = to_float(src[i]);
    amax[threadIdx.x] = fabsf(x);
    __syncthreads();
    for (int s = ZERO3_QUANT_BLOCK / 2; s > 0; s >>= 1) {
        if ((int)threadIdx.x < s) amax[threadIdx.x] = fmaxf(amax[threadIdx.x], amax[threadIdx.x + s]);
        __syncthreads();
    }
    const float scale = zero3_quant_scale(amax[0]);
    codes[i] = zero3_quant_code(x, scale);
    if (threadIdx.x == 0) scales[blockIdx.x] = scale;
}

template <typename T>
static void quantize_blocks(const T* src, size_t n, void* packed, cudaStream_t stream) {
    if (n == 0) return;
    quantize_kernel<T><<<(unsigned)(n / ZERO3_QUANT_BLOCK), ZERO3_QUANT_BLOCK, 0, stream>>>(
        src, (signed char*)packed, (float*)((char*)packed + n));
    cudaCheck(cudaGetLastError());
}

// dst[i] = code[i] * scale of its block, or dst[i] + that (the sum in fp32, rounded once to T).
template <typename T>
__global__ void dequantize_kernel(const signed char* codes, const float* scales, size_t n, T* dst, int accumulate) {
    const size_t i = (size_t)blockIdx.x * blockDim.x + threadIdx.x;
    if (i >= n) return;
    const float v = (float)codes[i] * scales[i / ZERO3_QUANT_BLOCK];
    dst[i] = from_float<T>(accumulate ? to_float(dst[i]) + v : v);
}

template <typename T>
static void dequantize_blocks(const void* packed, size_t n, T* dst, int accumulate, cudaStream_t stream) {
    if (n == 0) return;
    dequantize_kernel<T><<<(unsigned)((n + SLICE_THREADS - 1) / SLICE_THREADS), SLICE_THREADS, 0, stream>>>(
        (const signed char*)packed, (const float*)((const char*)packed + n), n, dst, accumulate);
    cudaCheck(cudaGetLastError());
}
