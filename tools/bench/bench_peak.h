/*
tools/bench/bench_peak.h: the measured peak of one core's vector multiply-add instructions, for
tools/bench/bench_peak.c and tools/bench/bench_bf16_kernels.c (which prints each kernel's fraction of it), and the
clock every CPU benchmark times with (peak_now, BEST_TIME: tools/bench/bench_cpu_kernels.c's too).

Each thread runs 12 independent dependency chains of one 512-bit instruction (12 chains hide a
latency of up to 12 cycles at one instruction a cycle; Zen 4's FMA has 4, VDPBF16PS 6), for a fixed
number of rounds, best of a few tries. Time (peak_now) is the wall clock, or with BENCH_CLOCK=cpu in
the environment this process's CPU time over its threads: on a shared, busy machine the wall clock
also counts other programs' turns on the cores, and one thread's CPU time does not. With more than one
thread the CPU time undercounts (a thread asleep at a barrier is not charged while its partner waits
for a core), so figures for several threads need an idle machine and the wall clock. Flops are counted
as the matmuls count them, 2 per multiply-add:
    VFMADD231PS zmm   16 fp32 lanes x (1 mul + 1 add)                      = 32 flops
    VDPBF16PS   zmm   16 fp32 lanes x 2 bf16 pairs each x (1 mul + 1 add)  = 64 flops
so a matmul of 2*M*N*K flops at the VDPBF16PS peak takes M*N*K/32 instructions.
x86-64 only; a CPU without AVX-512 (or without AVX512_BF16) reports that peak as 0.
*/
#ifndef DEV_BENCH_PEAK_H
#define DEV_BENCH_PEAK_H

#include <omp.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#if defined(__x86_64__)
#include <immintrin.h>
#endif

typedef enum { PEAK_FP32_FMA, PEAK_BF16_DP } PeakInstruction;
#define PEAK_CHAINS 12
#define PEAK_ROUNDS 5000000L    // of 12 instructions: 60M instructions, about 0.02-0.06 s a core

// seconds: of the wall clock, or (BENCH_CLOCK=cpu) of this process's CPU time over `threads`
static inline double peak_now(int threads) {
    const char *clock_name = getenv("BENCH_CLOCK");
    int cpu = clock_name && !strcmp(clock_name, "cpu");
    struct timespec ts;
    clock_gettime(cpu ? CLOCK_PROCESS_CPUTIME_ID : CLOCK_MONOTONIC, &ts);
    return (ts.tv_sec + 1e-9 * ts.tv_nsec) / (cpu ? threads : 1);
}

// best = the least seconds of `reps` timed runs of `call` on `threads` threads, after one untimed
// warm-up run
#define BEST_TIME(best, reps, threads, call) do { \
    call; (best) = 1e30; \
    for (int rep_ = 0; rep_ < (reps); rep_++) { \
        double t0_ = peak_now(threads); call; double dt_ = peak_now(threads) - t0_; \
        if (dt_ < (best)) (best) = dt_; } } while (0)

#if defined(__x86_64__)
// acc = acc * x + y on each chain (x < 1: it settles at y / (1 - x), never overflows); returns a lane
// of the chains' sum so that nothing can be optimized away
__attribute__((target("avx512f,fma"), noinline, unused))
static float peak_run_fma(long rounds) {
    __m512 acc[PEAK_CHAINS];
    for (int c = 0; c < PEAK_CHAINS; c++) acc[c] = _mm512_set1_ps((float)c);
    const __m512 x = _mm512_set1_ps(0.999f), y = _mm512_set1_ps(0.001f);
    for (long i = 0; i < rounds; i++)
        for (int c = 0; c < PEAK_CHAINS; c++) acc[c] = _mm512_fmadd_ps(acc[c], x, y);
    __m512 s = acc[0];
    for (int c = 1; c < PEAK_CHAINS; c++) s = _mm512_add_ps(s, acc[c]);
    return _mm512_reduce_add_ps(s);
}
// acc += a . b on each chain, a and b pairs of small bf16 (2^-10: 1.6e8 steps add under 2e3)
__attribute__((target("avx512f,avx512bf16"), noinline, unused))
static float peak_run_dpbf16(long rounds) {
    __m512 acc[PEAK_CHAINS];
    for (int c = 0; c < PEAK_CHAINS; c++) acc[c] = _mm512_set1_ps((float)c);
    const __m512bh a = (__m512bh)_mm512_set1_epi32(0x3a803a80), b = (__m512bh)_mm512_set1_epi32(0x3a803a80);
    for (long i = 0; i < rounds; i++)
        for (int c = 0; c < PEAK_CHAINS; c++) acc[c] = _mm512_dpbf16_ps(acc[c], a, b);
    __m512 s = acc[0];
    for (int c = 1; c < PEAK_CHAINS; c++) s = _mm512_add_ps(s, acc[c]);
    return _mm512_reduce_add_ps(s);
}
#endif

static inline int peak_available(PeakInstruction which) {
#if defined(__x86_64__)
    if (!__builtin_cpu_supports("avx512f")) return 0;
    return which == PEAK_FP32_FMA ? __builtin_cpu_supports("fma") : __builtin_cpu_supports("avx512bf16");
#else
    (void)which;
    return 0;
#endif
}

// GFLOP/s of `threads` threads together running the instruction (0 where the CPU lacks it);
// the best of `tries`
static inline double peak_gflops(PeakInstruction which, int threads, int tries) {
    if (!peak_available(which)) return 0.0;
    double flops_per_instruction = which == PEAK_FP32_FMA ? 32.0 : 64.0, best = 0.0;
    for (int t = 0; t < tries; t++) {
        volatile float sink = 0.0f;
        double t0 = peak_now(threads);
        #pragma omp parallel num_threads(threads)
        {
            float r = 0.0f;
#if defined(__x86_64__)
            r = which == PEAK_FP32_FMA ? peak_run_fma(PEAK_ROUNDS) : peak_run_dpbf16(PEAK_ROUNDS);
#endif
            #pragma omp atomic
            sink += r;
        }
        double seconds = peak_now(threads) - t0;
        double gflops = threads * (double)PEAK_ROUNDS * PEAK_CHAINS * flops_per_instruction / seconds * 1e-9;
        if (gflops > best) best = gflops;
        (void)sink;
    }
    return best;
}

#endif
