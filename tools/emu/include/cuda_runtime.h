// A CPU emulator of the CUDA runtime, for running this project's kernels on a machine without a
// GPU (tools/emu/README.md). Not a product: just enough of CUDA for our code, executed
// faithfully where it matters for finding bugs:
//   - every thread of a block is a fiber with its own stack; __syncthreads() and warp shuffles are
//     real rendezvous points, so a block-level reduction runs exactly as written, and a barrier or
//     shuffle that not all threads reach is reported as a deadlock instead of silently "working";
//   - launches are checked like the driver checks them (block size, grid limits), and a bad one is
//     a sticky error that cudaGetLastError() returns;
//   - device memory is plain host memory filled with 0xFF (NaN) on allocation, so reading memory
//     nothing wrote shows up as NaN; built with -fsanitize=address, out-of-bounds accesses abort;
//   - streams are queues (emu_streams.h): launches, async copies, memsets and event records run
//     only when the host forces them, with the streams interleaved adversarially, so a missing
//     cross-stream dependency gives a wrong result too.
#pragma once
#include <stdint.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <math.h>
#include <time.h>
#include <sys/mman.h>
#include <map>
#include <vector>
#include <functional>
#include <type_traits>

#define __CUDACC_EMU__ 1
#define __global__
#define __device__
#define __host__
#define __forceinline__ inline
#define __noinline__
#define __launch_bounds__(...)
// block-shared memory: a function-local static is shared by every fiber of the block (blocks run
// one after another, so they never share it concurrently)
#define __shared__ static
#define __grid_constant__

// ------------------------------------------------------------------------------------------------
// Types

struct uint3 { unsigned x, y, z; };
struct dim3 {
    unsigned x, y, z;
    dim3(unsigned x_ = 1, unsigned y_ = 1, unsigned z_ = 1) : x(x_), y(y_), z(z_) {}
};
struct alignas(16) int4 { int x, y, z, w; };
struct alignas(16) float4 { float x, y, z, w; };

typedef enum cudaError {
    cudaSuccess = 0,
    cudaErrorInvalidValue = 1,
    cudaErrorMemoryAllocation = 2,
    cudaErrorInvalidConfiguration = 9,
    cudaErrorNotReady = 600,
    cudaErrorLaunchFailure = 719,
} cudaError_t;

typedef enum { cudaMemcpyHostToHost, cudaMemcpyHostToDevice, cudaMemcpyDeviceToHost, cudaMemcpyDeviceToDevice,
               cudaMemcpyDefault } cudaMemcpyKind;
typedef enum { cudaDevAttrMultiProcessorCount = 16, cudaDevAttrComputeCapabilityMajor = 75,
               cudaDevAttrComputeCapabilityMinor = 76 } cudaDeviceAttr;
typedef enum { cudaFuncAttributeMaxDynamicSharedMemorySize = 8 } cudaFuncAttribute;

struct EmuStream;  // emu_streams.h
struct EmuEvent;
typedef EmuStream* cudaStream_t;
typedef EmuEvent* cudaEvent_t;
#define cudaStreamNonBlocking 0x01
#define cudaStreamDefault 0x00
#define cudaEventDefault 0x00
#define cudaEventDisableTiming 0x02
#define cudaHostAllocDefault 0x00
#define cudaStreamLegacy ((cudaStream_t)0x1)
#define cudaStreamPerThread ((cudaStream_t)0x2)

struct cudaDeviceProp {
    char name[256];
    int multiProcessorCount;
    size_t totalGlobalMem;
    int major, minor;
    int l2CacheSize;
    size_t sharedMemPerBlock;
    int clockRate;
};

namespace emu {

// ------------------------------------------------------------------------------------------------
// Errors

inline cudaError_t& last_error() {
    static cudaError_t e = cudaSuccess;
    return e;
}
[[noreturn]] __attribute__((format(printf, 1, 2))) inline void die(const char* fmt, ...) {
    va_list ap;
    va_start(ap, fmt);
    fprintf(stderr, "[cuda emulator] ");
    vfprintf(stderr, fmt, ap);
    fprintf(stderr, "\n");
    va_end(ap);
    fflush(stderr);
    abort();
}
#define CEIL_DIV_EMU(a, b) (((a) + (b) - 1) / (b))
}  // namespace emu

#include "emu_streams.h"

namespace emu {

// ------------------------------------------------------------------------------------------------
// Fibers: one per CUDA thread of the running block.

extern "C" void emu_switch(void** save_sp, void* load_sp);
asm(R"(
.text
.globl emu_switch
.type emu_switch,@function
emu_switch:
    pushq %rbp
    pushq %rbx
    pushq %r12
    pushq %r13
    pushq %r14
    pushq %r15
    movq %rsp, (%rdi)
    movq %rsi, %rsp
    popq %r15
    popq %r14
    popq %r13
    popq %r12
    popq %rbx
    popq %rbp
    ret
.size emu_switch,.-emu_switch
)");

#if defined(__SANITIZE_ADDRESS__)
extern "C" void __sanitizer_start_switch_fiber(void** fake_stack_save, const void* bottom, size_t size);
extern "C" void __sanitizer_finish_switch_fiber(void* fake_stack_save, const void** bottom_old, size_t* size_old);
extern "C" void __asan_unpoison_memory_region(void const volatile* addr, size_t size);
#endif

enum FiberState { RUNNABLE, AT_BLOCK_BARRIER, AT_WARP_BARRIER, FINISHED };

struct Fiber {
    void* sp;
    char* stack;       // usable stack [stack, stack + stack_size)
    uint3 tid;
    int linear;        // linear thread index in the block
    FiberState state;
};

constexpr size_t kStackSize = 256 * 1024;
constexpr int kMaxThreads = 1024;

struct Scheduler {
    Fiber fibers[kMaxThreads];
    int nthreads = 0;
    int live = 0;
    int block_arrived = 0;
    int warp_arrived[32] = {0};
    int warp_live[32] = {0};
    int warp_ready[32] = {0};  // RUNNABLE lanes per warp, kept up to date so picking a warp is cheap
    int lane_exited[kMaxThreads] = {0};
    uint32_t shuffle_slot[kMaxThreads];
    void* scheduler_sp = nullptr;
    Fiber* current = nullptr;
    const std::function<void()>* body = nullptr;
    char* stacks = nullptr;
#if defined(__SANITIZE_ADDRESS__)
    void* fake_stack = nullptr;
    const void* main_bottom = nullptr;
    size_t main_size = 0;
#endif
    uint3 blockIdx, blockDim, gridDim;
};

inline Scheduler& sched() {
    static Scheduler s;
    return s;
}

inline void switch_to_scheduler() {
    Scheduler& s = sched();
    Fiber* f = s.current;
#if defined(__SANITIZE_ADDRESS__)
    void* fake = nullptr;
    __sanitizer_start_switch_fiber(f->state == FINISHED ? nullptr : &fake, s.main_bottom, s.main_size);
    emu_switch(&f->sp, s.scheduler_sp);
    __sanitizer_finish_switch_fiber(fake, nullptr, nullptr);
#else
    emu_switch(&f->sp, s.scheduler_sp);
#endif
}

extern "C" inline void emu_fiber_entry() {
    Scheduler& s = sched();
#if defined(__SANITIZE_ADDRESS__)
    __sanitizer_finish_switch_fiber(nullptr, &s.main_bottom, &s.main_size);
#endif
    (*s.body)();
    Fiber* f = s.current;
    f->state = FINISHED;
    s.warp_ready[f->linear / 32]--;
    s.live--;
    s.warp_live[f->linear / 32]--;
    s.lane_exited[f->linear] = 1;
    switch_to_scheduler();
    die("a finished fiber was resumed");
}

inline void fiber_start(Fiber* f) {
    // initial frame for emu_switch: six callee-saved registers, then the "return address"
    // emu_fiber_entry, then a fake return address for it; top is 16-aligned so that the entry
    // sees the stack alignment of a normal call
#if defined(__SANITIZE_ADDRESS__)
    // the fiber that used this stack before ended inside a switch, its frames never returned: their
    // redzones are still poisoned and would look like overflows to the new fiber
    __asan_unpoison_memory_region(f->stack, kStackSize);
#endif
    uint64_t* top = (uint64_t*)(((uintptr_t)(f->stack + kStackSize)) & ~(uintptr_t)15);
    uint64_t* sp = top - 8;
    for (int i = 0; i < 6; i++) sp[i] = 0;
    sp[6] = (uint64_t)(uintptr_t)&emu_fiber_entry;
    sp[7] = 0;
    f->sp = sp;
    f->state = RUNNABLE;
}

inline void resume(Fiber* f) {
    Scheduler& s = sched();
    s.current = f;
#if defined(__SANITIZE_ADDRESS__)
    __sanitizer_start_switch_fiber(&s.fake_stack, f->stack, kStackSize);
    emu_switch(&s.scheduler_sp, f->sp);
    __sanitizer_finish_switch_fiber(s.fake_stack, nullptr, nullptr);
#else
    emu_switch(&s.scheduler_sp, f->sp);
#endif
    s.current = nullptr;
}

// Runs one block to completion. The schedule is adversarial on purpose, at warp granularity like
// the hardware: a random warp with runnable lanes runs all of them to their next barrier, and then,
// with a probability drawn per block (0 to 254/256), keeps going (seeded: EMU_SCHED_SEED). Barriers release the moment their last
// participant arrives. So one warp can race ahead of the others into the next phase exactly as on a
// GPU, and a missing __syncthreads shows up as a wrong result instead of passing by luck.
inline uint64_t sched_random() {
    static uint64_t state = 0;
    if (state == 0) {
        const char* seed = getenv("EMU_SCHED_SEED");
        state = 0x9E3779B97F4A7C15ull * (uint64_t)(seed ? atoll(seed) + 1 : 2);
    }
    state ^= state << 13;
    state ^= state >> 7;
    state ^= state << 17;
    return state;
}

inline void run_block(const std::function<void()>& body) {
    Scheduler& s = sched();
    const int n = s.nthreads;
    const int nwarps = (n + 31) / 32;
    s.body = &body;
    s.live = n;
    s.block_arrived = 0;
    for (int w = 0; w < 32; w++) {
        s.warp_arrived[w] = 0;
        s.warp_live[w] = 0;
        s.warp_ready[w] = 0;
    }
    for (int i = 0; i < n; i++) {
        Fiber* f = &s.fibers[i];
        f->linear = i;
        f->tid.x = i % s.blockDim.x;
        f->tid.y = (i / s.blockDim.x) % s.blockDim.y;
        f->tid.z = i / (s.blockDim.x * s.blockDim.y);
        f->stack = s.stacks + (size_t)i * (kStackSize + 4096) + 4096;  // a guard page below each stack
        s.lane_exited[i] = 0;
        s.warp_live[i / 32]++;
        s.warp_ready[i / 32]++;
        fiber_start(f);
    }
    auto release_warp = [&](int w) {
        if (s.warp_arrived[w] > 0 && s.warp_arrived[w] == s.warp_live[w]) {
            for (int i = w * 32; i < n && i < (w + 1) * 32; i++)
                if (s.fibers[i].state == AT_WARP_BARRIER) {
                    s.fibers[i].state = RUNNABLE;
                    s.warp_ready[w]++;
                }
            s.warp_arrived[w] = 0;
        }
    };
    auto release_block = [&]() {
        if (s.block_arrived > 0 && s.block_arrived == s.live) {
            for (int j = 0; j < n; j++)
                if (s.fibers[j].state == AT_BLOCK_BARRIER) {
                    s.fibers[j].state = RUNNABLE;
                    s.warp_ready[j / 32]++;
                }
            s.block_arrived = 0;
        }
    };
    auto warp_runnable = [&](int w) { return s.warp_ready[w] > 0; };
    // how often a warp keeps running past a barrier: drawn per block, from lock-step to racing ahead
    static const uint64_t kStickiness[4] = {0, 128, 230, 254};  // out of 256
    const uint64_t sticky = kStickiness[sched_random() % 4];
    while (s.live > 0) {
        int w = -1;
        const int start = (int)(sched_random() % (uint64_t)nwarps);
        for (int k = 0; k < nwarps && w < 0; k++)
            if (warp_runnable((start + k) % nwarps)) w = (start + k) % nwarps;
        if (w < 0)
            die("deadlock in block (%u,%u,%u): threads wait at __syncthreads/shuffles that others never reach "
                "(%d live, %d at the block barrier)", s.blockIdx.x, s.blockIdx.y, s.blockIdx.z, s.live, s.block_arrived);
        do {
            for (int i = w * 32; i < n && i < (w + 1) * 32; i++) {
                if (s.fibers[i].state != RUNNABLE) continue;
                resume(&s.fibers[i]);
                release_warp(w);  // a lane arrived at a shuffle, or left the warp
                release_block();  // a thread arrived at __syncthreads, or finished
            }
        } while (warp_runnable(w) && (sched_random() % 256) < sticky);
    }
}

inline Fiber* self() {
    Fiber* f = sched().current;
    if (!f) die("a device function was called outside a kernel");
    return f;
}

inline void syncthreads() {
    Scheduler& s = sched();
    Fiber* f = self();
    f->state = AT_BLOCK_BARRIER;
    s.warp_ready[f->linear / 32]--;
    s.block_arrived++;
    switch_to_scheduler();
}

inline void warp_barrier() {
    Scheduler& s = sched();
    Fiber* f = self();
    f->state = AT_WARP_BARRIER;
    s.warp_ready[f->linear / 32]--;
    s.warp_arrived[f->linear / 32]++;
    switch_to_scheduler();
}

template <typename T>
inline T shfl_xor(T value, int lane_mask) {
    static_assert(sizeof(T) == 4, "emulated shuffles move 4-byte values");
    Scheduler& s = sched();
    Fiber* f = self();
    const int lane = f->linear % 32, base = f->linear - lane;
    const int partner = base + (lane ^ lane_mask);
    memcpy(&s.shuffle_slot[f->linear], &value, 4);
    warp_barrier();  // every live lane has published its value
    if (partner >= s.nthreads || s.lane_exited[partner])
        die("shuffle with thread %d, which has exited or does not exist (asked by thread %d)", partner, f->linear);
    T out;
    memcpy(&out, &s.shuffle_slot[partner], 4);
    warp_barrier();  // every lane has read before anyone publishes the next value
    return out;
}

// ------------------------------------------------------------------------------------------------
// Launch

inline void init_stacks() {
    Scheduler& s = sched();
    if (s.stacks) return;
    size_t per = kStackSize + 4096;
    void* mem = mmap(nullptr, per * kMaxThreads, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
    if (mem == MAP_FAILED) die("cannot map fiber stacks");
    s.stacks = (char*)mem;
    for (int i = 0; i < kMaxThreads; i++) mprotect(s.stacks + (size_t)i * per, 4096, PROT_NONE);
}

inline long& launch_count() {
    static long n = 0;
    return n;
}

// Runs every block of a grid, one after the other, each as fibers (run_block).
inline void run_grid(dim3 grid, dim3 block, const std::function<void()>& body) {
    init_stacks();
    Scheduler& s = sched();
    s.nthreads = (int)(block.x * block.y * block.z);
    s.blockDim = {block.x, block.y, block.z};
    s.gridDim = {grid.x, grid.y, grid.z};
    for (unsigned bz = 0; bz < grid.z; bz++)
        for (unsigned by = 0; by < grid.y; by++)
            for (unsigned bx = 0; bx < grid.x; bx++) {
                s.blockIdx = {bx, by, bz};
                run_block(body);
            }
}

// A launch checks its configuration when issued (a bad one is the sticky launch error, as from the
// driver) and queues the grid on its stream with copies of the arguments, which is what the GPU
// receives: the host may change its variables right after the launch.
template <typename K>
struct Launcher {
    K kernel;
    dim3 grid, block;
    cudaStream_t stream;
    template <typename... Args>
    void operator()(Args... args) {
        launch_count()++;
        const unsigned long threads = (unsigned long)block.x * block.y * block.z;
        if (threads == 0 || threads > 1024 || block.z > 64 || grid.x == 0 || grid.y == 0 || grid.z == 0 ||
            grid.y > 65535 || grid.z > 65535 || grid.x > 2147483647u) {
            fprintf(stderr, "[cuda emulator] invalid launch configuration: grid (%u,%u,%u) block (%u,%u,%u)\n", grid.x,
                    grid.y, grid.z, block.x, block.y, block.z);
            last_error() = cudaErrorInvalidConfiguration;
            return;
        }
        if (sched().current) die("kernel launched from device code");
        K k = kernel;
        const dim3 g = grid, b = block;
        enqueue(stream, [k, g, b, args...]() { run_grid(g, b, [&]() { k(args...); }); });
    }
};

template <typename K>
inline Launcher<K> launch(K kernel, dim3 grid, dim3 block, size_t shared_bytes = 0, cudaStream_t stream = nullptr) {
    (void)shared_bytes;
    return Launcher<K>{kernel, grid, block, stream};
}

// ------------------------------------------------------------------------------------------------
// Memory

struct Allocation { size_t bytes; };
inline std::map<uintptr_t, Allocation>& allocations() {
    static std::map<uintptr_t, Allocation> m;
    return m;
}
inline size_t& bytes_in_use() {
    static size_t b = 0;
    return b;
}
constexpr size_t kDeviceBytes = (size_t)16 << 30;  // what cudaMemGetInfo reports as total
// pinned host memory (cudaMallocHost): an async copy reads or writes it when the copy runs
inline std::map<uintptr_t, size_t>& pinned() {
    static std::map<uintptr_t, size_t> m;
    return m;
}

// Whether p lies inside one of the ranges of `m` (start -> bytes).
template <typename M, typename F>
inline bool inside(const M& m, const void* p, F bytes_of) {
    auto it = m.upper_bound((uintptr_t)p);
    if (it == m.begin()) return false;
    --it;
    return (uintptr_t)p < it->first + (bytes_of(it->second) ? bytes_of(it->second) : 1);
}
inline bool is_device(const void* p) { return inside(allocations(), p, [](const Allocation& a) { return a.bytes; }); }
inline bool is_pinned(const void* p) { return inside(pinned(), p, [](size_t b) { return b; }); }

}  // namespace emu

#define threadIdx (emu::self()->tid)
#define blockIdx (emu::sched().blockIdx)
#define blockDim (emu::sched().blockDim)
#define gridDim (emu::sched().gridDim)

// ------------------------------------------------------------------------------------------------
// Device intrinsics and math

inline void __syncthreads() { emu::syncthreads(); }
// a rendezvous of the warp's lanes (the mask is taken to be the whole warp, the only use here)
inline void __syncwarp(unsigned mask = 0xffffffffu) {
    (void)mask;
    emu::warp_barrier();
}
inline float __shfl_xor_sync(unsigned mask, float v, int lane_mask, int width = 32) {
    (void)mask; (void)width;
    return emu::shfl_xor(v, lane_mask);
}
inline int __shfl_xor_sync(unsigned mask, int v, int lane_mask, int width = 32) {
    (void)mask; (void)width;
    return emu::shfl_xor(v, lane_mask);
}
inline unsigned __shfl_xor_sync(unsigned mask, unsigned v, int lane_mask, int width = 32) {
    (void)mask; (void)width;
    return emu::shfl_xor(v, lane_mask);
}
inline int4 __ldcs(const int4* p) { return *p; }
inline void __stcs(int4* p, int4 v) { *p = v; }
inline int4 __ldg(const int4* p) { return *p; }
inline float rsqrtf(float x) { return 1.0f / sqrtf(x); }
// the explicitly rounded arithmetic (round to nearest even): IEEE single operations on the host, one
// rounding each (build.sh's g++ targets plain x86-64, so it fuses no multiply into an add)
inline float __fadd_rn(float a, float b) { return a + b; }
inline float __fsub_rn(float a, float b) { return a - b; }
inline float __fmul_rn(float a, float b) { return a * b; }
inline float __fdiv_rn(float a, float b) { return a / b; }
inline float __fsqrt_rn(float a) { return sqrtf(a); }
inline float __fmaf_rn(float a, float b, float c) { return fmaf(a, b, c); }
inline int min(int a, int b) { return a < b ? a : b; }
inline int max(int a, int b) { return a > b ? a : b; }
inline long long clock64() { return (long long)(emu::now() * 1e9); }

// ------------------------------------------------------------------------------------------------
// Runtime API

inline const char* cudaGetErrorString(cudaError_t e) {
    switch (e) {
    case cudaSuccess: return "no error";
    case cudaErrorInvalidValue: return "invalid argument";
    case cudaErrorMemoryAllocation: return "out of memory";
    case cudaErrorInvalidConfiguration: return "invalid configuration argument";
    case cudaErrorNotReady: return "device not ready";
    default: return "unknown error";
    }
}
inline cudaError_t cudaGetLastError() {
    cudaError_t e = emu::last_error();
    emu::last_error() = cudaSuccess;
    return e;
}
inline cudaError_t cudaPeekAtLastError() { return emu::last_error(); }

inline cudaError_t cudaMalloc(void** p, size_t bytes) {
    // exact-size allocations (so AddressSanitizer sees any out-of-bounds access), 256-aligned like the driver
    void* mem = aligned_alloc(256, ((bytes ? bytes : 1) + 255) / 256 * 256);
    if (!mem) return cudaErrorMemoryAllocation;
    memset(mem, 0xFF, bytes);  // NaN in fp32 and bf16: reading what nothing wrote is visible
    emu::allocations()[(uintptr_t)mem] = {bytes};
    emu::bytes_in_use() += bytes;
    *p = mem;
    return cudaSuccess;
}
template <typename T>
inline cudaError_t cudaMalloc(T** p, size_t bytes) { return cudaMalloc((void**)p, bytes); }
// cudaFree synchronizes the device: nothing queued can still use the memory
inline cudaError_t cudaFree(void* p) {
    if (!p) return cudaSuccess;
    emu::run_all();
    auto it = emu::allocations().find((uintptr_t)p);
    if (it == emu::allocations().end()) return cudaErrorInvalidValue;
    emu::bytes_in_use() -= it->second.bytes;
    emu::allocations().erase(it);
    free(p);
    return cudaSuccess;
}
inline cudaError_t cudaMallocAsync(void** p, size_t bytes, cudaStream_t) { return cudaMalloc(p, bytes); }
// stream-ordered: the memory goes away when the stream reaches this point
inline cudaError_t cudaFreeAsync(void* p, cudaStream_t s) {
    if (p && emu::allocations().find((uintptr_t)p) == emu::allocations().end()) return cudaErrorInvalidValue;
    emu::enqueue(s, [p]() {
        auto it = emu::allocations().find((uintptr_t)p);
        emu::bytes_in_use() -= it->second.bytes;
        emu::allocations().erase(it);
        free(p);
    });
    return cudaSuccess;
}
inline cudaError_t cudaMallocHost(void** p, size_t bytes) {
    *p = malloc(bytes ? bytes : 1);
    if (!*p) return cudaErrorMemoryAllocation;
    emu::pinned()[(uintptr_t)*p] = bytes;
    return cudaSuccess;
}
template <typename T>
inline cudaError_t cudaMallocHost(T** p, size_t bytes) { return cudaMallocHost((void**)p, bytes); }
// like cudaFree, synchronizes the device
inline cudaError_t cudaFreeHost(void* p) {
    if (!p) return cudaSuccess;
    emu::run_all();
    if (!emu::pinned().erase((uintptr_t)p)) return cudaErrorInvalidValue;
    free(p);
    return cudaSuccess;
}
inline cudaError_t cudaMemGetInfo(size_t* free_bytes, size_t* total) {
    *total = emu::kDeviceBytes;
    *free_bytes = emu::kDeviceBytes - emu::bytes_in_use();
    return cudaSuccess;
}

namespace emu {
// An async copy, as CUDA defines it (the "API synchronization behavior" notes):
//   - pageable host source: the data is staged when the call is made, so the host may reuse its
//     buffer at once; pinned source or device source: read when the copy runs;
//   - pageable host destination: the call returns only once the copy is done; pinned or device
//     destination: written when the copy runs, i.e. only after a synchronization is it there.
inline void copy_async(void* dst, const void* src, size_t bytes, cudaStream_t stream) {
    const bool src_pageable = !is_device(src) && !is_pinned(src);
    const bool dst_pageable = !is_device(dst) && !is_pinned(dst);
    if (src_pageable && dst_pageable) {  // host to host: synchronous
        memmove(dst, src, bytes);
        return;
    }
    if (src_pageable) {
        std::vector<char> staged((const char*)src, (const char*)src + bytes);
        enqueue(stream, [dst, staged]() { memcpy(dst, staged.data(), staged.size()); });
    } else if (dst_pageable) {
        enqueue_and_wait(stream, [dst, src, bytes]() { memmove(dst, src, bytes); });
    } else {
        enqueue(stream, [dst, src, bytes]() { memmove(dst, src, bytes); });
    }
}
}  // namespace emu

inline cudaError_t cudaMemcpyAsync(void* dst, const void* src, size_t bytes, cudaMemcpyKind, cudaStream_t s = nullptr) {
    emu::copy_async(dst, src, bytes, s);
    return cudaSuccess;
}
// cudaMemcpy is a copy on the legacy default stream (so after all work on blocking streams, but
// not after work on non-blocking ones), synchronous except for device-to-device copies and
// pageable-host-to-device ones, which may still be in flight when it returns.
inline cudaError_t cudaMemcpy(void* dst, const void* src, size_t bytes, cudaMemcpyKind) {
    const bool src_pinned_host = emu::is_pinned(src);
    emu::copy_async(dst, src, bytes, nullptr);
    if (src_pinned_host || !emu::is_device(dst)) emu::run_until(emu::legacy_stream(), emu::legacy_stream()->enqueued);
    return cudaSuccess;
}
inline cudaError_t cudaMemsetAsync(void* dst, int value, size_t bytes, cudaStream_t s = nullptr) {
    emu::enqueue(s, [dst, value, bytes]() { memset(dst, value, bytes); });
    return cudaSuccess;
}
// asynchronous on the legacy stream for device memory, as in CUDA
inline cudaError_t cudaMemset(void* dst, int value, size_t bytes) { return cudaMemsetAsync(dst, value, bytes, nullptr); }

inline cudaError_t cudaStreamCreateWithFlags(cudaStream_t* s, unsigned flags) {
    *s = emu::new_stream(false, !(flags & cudaStreamNonBlocking));
    return cudaSuccess;
}
inline cudaError_t cudaStreamCreate(cudaStream_t* s) { return cudaStreamCreateWithFlags(s, cudaStreamDefault); }
inline cudaError_t cudaStreamCreateWithPriority(cudaStream_t* s, unsigned flags, int) {
    return cudaStreamCreateWithFlags(s, flags);
}
inline cudaError_t cudaDeviceGetStreamPriorityRange(int* least, int* greatest) {
    *least = 0;
    *greatest = -5;
    return cudaSuccess;
}
// a destroyed stream's work still completes (here: now); the object stays for events that name it
inline cudaError_t cudaStreamDestroy(cudaStream_t s) {
    if (!s || s == cudaStreamLegacy || s == cudaStreamPerThread || !s->alive) return cudaErrorInvalidValue;
    emu::run_until(s, s->enqueued);
    s->alive = false;
    return cudaSuccess;
}
inline cudaError_t cudaStreamSynchronize(cudaStream_t stream) {
    EmuStream* s = emu::resolve(stream);
    // a marker: on the legacy stream it also waits for the blocking streams, as a sync of it does
    const uint64_t t = emu::enqueue(s, []() {});
    emu::run_until(s, t);
    return cudaSuccess;
}
inline cudaError_t cudaStreamQuery(cudaStream_t stream) {
    emu::run_any_ready();
    return emu::pending(emu::resolve(stream)) ? cudaErrorNotReady : cudaSuccess;
}
inline cudaError_t cudaStreamWaitEvent(cudaStream_t stream, cudaEvent_t e, unsigned = 0) {
    if (!e || !e->alive) return cudaErrorInvalidValue;
    if (e->stream) emu::add_wait(emu::resolve(stream), e->stream, e->ticket);
    return cudaSuccess;
}
inline cudaError_t cudaDeviceSynchronize() {
    emu::run_all();
    return cudaSuccess;
}

inline cudaError_t cudaEventCreate(cudaEvent_t* e) {
    *e = new EmuEvent{nullptr, 0, 0.0, true};
    return cudaSuccess;
}
inline cudaError_t cudaEventCreateWithFlags(cudaEvent_t* e, unsigned) { return cudaEventCreate(e); }
// kept (not freed) so that a record still queued can mark it; events are few
inline cudaError_t cudaEventDestroy(cudaEvent_t e) {
    if (!e || !e->alive) return cudaErrorInvalidValue;
    e->alive = false;
    return cudaSuccess;
}
inline cudaError_t cudaEventRecord(cudaEvent_t e, cudaStream_t stream = nullptr) {
    if (!e || !e->alive) return cudaErrorInvalidValue;
    EmuStream* s = emu::resolve(stream);
    // the record is queued; the event now stands for this position of the stream
    const uint64_t t = emu::enqueue(s, [e, s]() {
        if (e->stream == s && e->ticket == s->completed + 1) e->time = emu::now();
    });
    e->stream = s;
    e->ticket = t;
    return cudaSuccess;
}
inline cudaError_t cudaEventSynchronize(cudaEvent_t e) {
    if (!e || !e->alive) return cudaErrorInvalidValue;
    if (e->stream) emu::run_until(e->stream, e->ticket);
    return cudaSuccess;
}
// On the host thread a query moves the emulated GPU one step (it progresses while the host polls);
// from another thread (a watchdog) it only reads whether the event's work has run, as a query on a
// GPU does while the host thread is blocked elsewhere. The event must not be re-recorded meanwhile.
inline cudaError_t cudaEventQuery(cudaEvent_t e) {
    if (!e || !e->alive) return cudaErrorInvalidValue;
    if (!emu::on_host_thread()) return !e->stream || emu::has_run_seen(e->stream, e->ticket) ? cudaSuccess : cudaErrorNotReady;
    if (!e->stream || emu::has_run(e->stream, e->ticket)) return cudaSuccess;
    emu::run_any_ready();
    return emu::has_run(e->stream, e->ticket) ? cudaSuccess : cudaErrorNotReady;
}
inline cudaError_t cudaEventElapsedTime(float* ms, cudaEvent_t a, cudaEvent_t b) {
    if (!a || !b || !a->stream || !b->stream) return cudaErrorInvalidValue;
    if (!emu::has_run(a->stream, a->ticket) || !emu::has_run(b->stream, b->ticket)) return cudaErrorNotReady;
    *ms = (float)((b->time - a->time) * 1e3);
    return cudaSuccess;
}

inline cudaError_t cudaGetDeviceCount(int* n) {
    *n = 1;
    return cudaSuccess;
}
inline cudaError_t cudaGetDevice(int* d) {
    *d = 0;
    return cudaSuccess;
}
inline cudaError_t cudaSetDevice(int d) { return d == 0 ? cudaSuccess : cudaErrorInvalidValue; }
inline cudaError_t cudaDeviceGetAttribute(int* v, cudaDeviceAttr a, int) {
    switch (a) {
    case cudaDevAttrMultiProcessorCount: *v = 4; break;
    case cudaDevAttrComputeCapabilityMajor: *v = 9; break;
    case cudaDevAttrComputeCapabilityMinor: *v = 0; break;
    default: *v = 0;
    }
    return cudaSuccess;
}
inline cudaError_t cudaGetDeviceProperties(cudaDeviceProp* p, int) {
    memset(p, 0, sizeof(*p));
    snprintf(p->name, sizeof(p->name), "CPU emulator (no GPU)");
    p->multiProcessorCount = 4;
    p->totalGlobalMem = emu::kDeviceBytes;
    p->major = 9;
    p->minor = 0;
    p->l2CacheSize = 1 << 20;
    p->sharedMemPerBlock = 48 * 1024;
    return cudaSuccess;
}
template <typename F>
inline cudaError_t cudaFuncSetAttribute(F, cudaFuncAttribute, int) { return cudaSuccess; }
inline cudaError_t cudaDriverGetVersion(int* v) { *v = 13000; return cudaSuccess; }
inline cudaError_t cudaRuntimeGetVersion(int* v) { *v = 13000; return cudaSuccess; }
