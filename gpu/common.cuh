// gpu/common.cuh: what every CUDA file of this project needs: the floatX switch, error checks,
// 16-byte vector loads/stores, warp and block reductions.
//
// Precision: -DENABLE_FP32 makes floatX = float (every kernel then checks tightly against fp32 CPU
// math); otherwise (-DENABLE_BF16, the default) floatX = __nv_bfloat16 and all accumulations still
// happen in fp32: bf16 is a storage format here, never an arithmetic one.
#pragma once
#include <stdio.h>
#include <stdlib.h>
#include <stdint.h>
#include <string.h>
#include <cuda_runtime.h>
#include <cuda_bf16.h>

#if defined(ENABLE_FP32)
typedef float floatX;
#define PRECISION_NAME "FP32"
#else
#ifndef ENABLE_BF16
#define ENABLE_BF16
#endif
typedef __nv_bfloat16 floatX;
#define PRECISION_NAME "BF16"
#endif

#define WARP_SIZE 32
#define CEIL_DIV(a, b) (((a) + (b) - 1) / (b))

// ------------------------------------------------------------------------------------------------
// Error checks: one clear line naming the call site, then exit. A CUDA error leaves the context
// unusable, so there is nothing sensible to recover.

static inline void cuda_check_impl(cudaError_t err, const char* what, const char* file, int line) {
    if (err != cudaSuccess) {
        fprintf(stderr, "CUDA error at %s:%d (%s): %s\n", file, line, what, cudaGetErrorString(err));
        exit(EXIT_FAILURE);
    }
}
#define cudaCheck(call) cuda_check_impl((call), #call, __FILE__, __LINE__)
// after every kernel launch: catches bad launch configurations at the line that made them
#define cudaCheckLaunch() cuda_check_impl(cudaGetLastError(), "kernel launch", __FILE__, __LINE__)

// one line on stderr and exit: a shape the kernels cannot handle is a programming error upstream
#define gpu_require(cond, ...)                                                     \
    do {                                                                           \
        if (!(cond)) {                                                             \
            fprintf(stderr, "gpu kernel precondition failed (%s): ", #cond);       \
            fprintf(stderr, __VA_ARGS__);                                          \
            fprintf(stderr, "\n");                                                 \
            exit(EXIT_FAILURE);                                                    \
        }                                                                          \
    } while (0)

// ------------------------------------------------------------------------------------------------
// Scalar conversions. Device code writes to_float(x) / from_float<T>(f) so the same kernel text
// compiles for float and bf16 storage; bf16 conversion rounds to nearest even.

__host__ __device__ inline float to_float(float x) { return x; }
__host__ __device__ inline float to_float(__nv_bfloat16 x) { return __bfloat162float(x); }
template <typename T> __host__ __device__ inline T from_float(float x);
template <> __host__ __device__ inline float from_float<float>(float x) { return x; }
template <> __host__ __device__ inline __nv_bfloat16 from_float<__nv_bfloat16>(float x) {
    return __float2bfloat16_rn(x);
}

// ------------------------------------------------------------------------------------------------
// Vec16<T>: 16 bytes of T (8 bf16 or 4 floats). Memory-bound kernels move data in these units so
// that every thread issues one 128-bit load instead of several narrow ones. The pointer handed to
// load16/store16 must be 16-byte aligned: callers check the sizes that make this true.

template <typename T>
struct alignas(16) Vec16 {
    static constexpr int size = 16 / sizeof(T);
    T v[size];
    __device__ T& operator[](int i) { return v[i]; }
    __device__ const T& operator[](int i) const { return v[i]; }
};

// (the bits travel as an int4 and are copied into the typed array with memcpy, which compilers turn
// into register moves: writing a Vec16 through an int4 pointer would break C++'s aliasing rules)
template <typename T>
__device__ inline Vec16<T> load16(const T* p) {
    const int4 bits = *reinterpret_cast<const int4*>(p);
    Vec16<T> out;
    memcpy(&out, &bits, sizeof(bits));
    return out;
}
// streaming load (evict-first): for data read once, so it does not push reusable data out of L2
template <typename T>
__device__ inline Vec16<T> load16_stream(const T* p) {
    const int4 bits = __ldcs(reinterpret_cast<const int4*>(p));
    Vec16<T> out;
    memcpy(&out, &bits, sizeof(bits));
    return out;
}
template <typename T>
__device__ inline void store16(T* p, const Vec16<T>& x) {
    int4 bits;
    memcpy(&bits, &x, sizeof(bits));
    *reinterpret_cast<int4*>(p) = bits;
}

typedef Vec16<floatX> xvec;  // the vector of the working precision
#define XVEC_SIZE ((int)(16 / sizeof(floatX)))

// ------------------------------------------------------------------------------------------------
// Reductions. All are fixed-order (butterfly within a warp, warps in index order across a block),
// so the same input gives the same bits on every run.

__device__ inline float warp_sum(float x) {
    for (int offset = 16; offset > 0; offset >>= 1) x += __shfl_xor_sync(0xffffffffu, x, offset);
    return x;
}
__device__ inline float warp_max(float x) {
    for (int offset = 16; offset > 0; offset >>= 1) x = fmaxf(x, __shfl_xor_sync(0xffffffffu, x, offset));
    return x;
}

// Sum over the whole block; every thread gets the result. blockDim.x must be a multiple of 32.
// `scratch` is __shared__ float[32]. The leading __syncthreads makes back-to-back calls safe.
__device__ inline float block_sum(float x, float* scratch) {
    const int lane = threadIdx.x % WARP_SIZE, warp = threadIdx.x / WARP_SIZE;
    const int nwarps = blockDim.x / WARP_SIZE;
    x = warp_sum(x);
    __syncthreads();  // previous users of scratch are done reading
    if (lane == 0) scratch[warp] = x;
    __syncthreads();
    float total = 0.0f;
    for (int w = 0; w < nwarps; w++) total += scratch[w];
    return total;
}

// ------------------------------------------------------------------------------------------------
// Host helpers

// is this pointer aligned to `bytes`? (host code asks it of device pointers; kernels too)
__host__ __device__ inline bool is_aligned(const void* p, size_t bytes) { return ((uintptr_t)p % bytes) == 0; }
