// tests/cuda/common.h: what every kernel check in tests/cuda shares.
//
// A check: draw random inputs (never zeros: zeros hide unwritten outputs and wrong indexing), round
// them to floatX so the CPU reference sees exactly the values the GPU sees, compute the reference
// in double, poison the GPU outputs (NaN bytes), run the kernel, compare EVERY output element with
//     |gpu - ref| <= atol + rtol * |ref|          (NaN never passes)
// time it with CUDA events (median of repeats after a warm-up), and print one summary line
//     KERNEL <name> PASS|FAIL maxerr=<max |gpu-ref|> time=<ms> <throughput>
// The program's exit code is non-zero if any check failed.
#pragma once
#include <stdio.h>
#include <stdlib.h>
#include <math.h>
#include <vector>
#include <algorithm>
#include <functional>
#include "../../gpu/common.cuh"

// ------------------------------------------------------------------------------------------------
// Tolerances: TOL(fp32, bf16) picks the one for this build's precision

#if defined(ENABLE_FP32)
#define TOL(fp32_value, bf16_value) (fp32_value)
#else
#define TOL(fp32_value, bf16_value) (bf16_value)
#endif

// Problem sizes: GPT-2 124M's on a GPU; much smaller under the CPU emulator (tools/emu), which
// runs every CUDA thread as a fiber and is there to check logic, not speed.
#if defined(__CUDACC_EMU__)
#define SIZE(gpu_value, emu_value) (emu_value)
#define TIMING_REPEATS 1
#else
#define SIZE(gpu_value, emu_value) (gpu_value)
#define TIMING_REPEATS 20
#endif

// ------------------------------------------------------------------------------------------------
// Random inputs (splitmix64: tiny, and the same sequence on every machine)

struct Rng {
    uint64_t state;
    explicit Rng(uint64_t seed) : state(seed) {}
    uint64_t next() {
        uint64_t z = (state += 0x9E3779B97F4A7C15ull);
        z = (z ^ (z >> 30)) * 0xBF58476D1CE4E5B9ull;
        z = (z ^ (z >> 27)) * 0x94D049BB133111EBull;
        return z ^ (z >> 31);
    }
    float uniform() { return (float)((next() >> 40) * (1.0 / 16777216.0)); }  // [0,1)
    float uniform(float lo, float hi) { return lo + (hi - lo) * uniform(); }
    int integer(int n) { return (int)(next() % (uint64_t)n); }
};

// the value the GPU will see once x is stored as floatX
static inline float round_floatX(float x) { return to_float(from_float<floatX>(x)); }

// n uniform values in [lo,hi), rounded to floatX
static std::vector<float> random_floatX(size_t n, float lo, float hi, Rng& rng) {
    std::vector<float> v(n);
    for (size_t i = 0; i < n; i++) v[i] = round_floatX(rng.uniform(lo, hi));
    return v;
}
// n uniform fp32 values in [lo,hi) (for fp32 buffers: master weights, Adam moments)
static std::vector<float> random_float(size_t n, float lo, float hi, Rng& rng) {
    std::vector<float> v(n);
    for (size_t i = 0; i < n; i++) v[i] = rng.uniform(lo, hi);
    return v;
}

// ------------------------------------------------------------------------------------------------
// Device buffers

template <typename T>
static T* device_alloc(size_t n) {
    T* p = NULL;
    cudaCheck(cudaMalloc((void**)&p, (n > 0 ? n : 1) * sizeof(T)));
    return p;
}
// fill with 0xFF bytes: NaN in both fp32 and bf16, so an element the kernel forgot fails the check
template <typename T>
static void poison(T* p, size_t n) { cudaCheck(cudaMemset(p, 0xFF, n * sizeof(T))); }

static floatX* to_device_floatX(const std::vector<float>& host) {
    std::vector<floatX> tmp(host.size());
    for (size_t i = 0; i < host.size(); i++) tmp[i] = from_float<floatX>(host[i]);
    floatX* d = device_alloc<floatX>(host.size());
    cudaCheck(cudaMemcpy(d, tmp.data(), host.size() * sizeof(floatX), cudaMemcpyHostToDevice));
    return d;
}
static float* to_device_float(const std::vector<float>& host) {
    float* d = device_alloc<float>(host.size());
    cudaCheck(cudaMemcpy(d, host.data(), host.size() * sizeof(float), cudaMemcpyHostToDevice));
    return d;
}
static int* to_device_int(const std::vector<int>& host) {
    int* d = device_alloc<int>(host.size());
    cudaCheck(cudaMemcpy(d, host.data(), host.size() * sizeof(int), cudaMemcpyHostToDevice));
    return d;
}
static void upload_floatX(floatX* d, const std::vector<float>& host) {
    std::vector<floatX> tmp(host.size());
    for (size_t i = 0; i < host.size(); i++) tmp[i] = from_float<floatX>(host[i]);
    cudaCheck(cudaMemcpy(d, tmp.data(), host.size() * sizeof(floatX), cudaMemcpyHostToDevice));
}
static std::vector<float> from_device_floatX(const floatX* d, size_t n) {
    std::vector<floatX> tmp(n);
    cudaCheck(cudaDeviceSynchronize());
    cudaCheck(cudaMemcpy(tmp.data(), d, n * sizeof(floatX), cudaMemcpyDeviceToHost));
    std::vector<float> out(n);
    for (size_t i = 0; i < n; i++) out[i] = to_float(tmp[i]);
    return out;
}
static std::vector<float> from_device_float(const float* d, size_t n) {
    std::vector<float> out(n);
    cudaCheck(cudaDeviceSynchronize());
    cudaCheck(cudaMemcpy(out.data(), d, n * sizeof(float), cudaMemcpyDeviceToHost));
    return out;
}

// ------------------------------------------------------------------------------------------------
// Comparison and reporting

static int g_failures = 0;

// Compares every element; prints the first few mismatches. Returns true when all pass; *maxerr gets
// the largest |got - ref| (infinite if any NaN/inf appeared).
static bool compare(const char* what, const std::vector<float>& got, const std::vector<double>& ref, double atol,
                    double rtol, double* maxerr) {
    if (got.size() != ref.size()) {
        fprintf(stderr, "%s: size mismatch %zu vs %zu\n", what, got.size(), ref.size());
        *maxerr = INFINITY;
        return false;
    }
    size_t bad = 0;
    double worst = 0.0;
    for (size_t i = 0; i < got.size(); i++) {
        const double g = got[i], r = ref[i];
        const double err = fabs(g - r);
        const bool ok = isfinite(g) && err <= atol + rtol * fabs(r);
        if (!isfinite(g)) worst = INFINITY;
        else if (err > worst) worst = err;
        if (!ok) {
            if (bad < 5) fprintf(stderr, "  %s[%zu]: gpu %.8g ref %.8g (err %.3g, allowed %.3g)\n", what, i, g, r, err,
                                 atol + rtol * fabs(r));
            bad++;
        }
    }
    if (bad > 0) fprintf(stderr, "  %s: %zu of %zu elements outside tolerance (atol %.3g rtol %.3g)\n", what, bad,
                         got.size(), atol, rtol);
    *maxerr = worst;
    return bad == 0;
}

// normwise relative error ||got - ref|| / ||ref||: catches a systematic error that per-element
// tolerances, widened for bf16's worst single-element case, would let through
static double rel_fro(const std::vector<float>& got, const std::vector<double>& ref) {
    double num = 0.0, den = 0.0;
    for (size_t i = 0; i < got.size() && i < ref.size(); i++) {
        num += (got[i] - ref[i]) * (got[i] - ref[i]);
        den += ref[i] * ref[i];
    }
    return den > 0.0 ? sqrt(num / den) : sqrt(num);
}
// compare() plus a bound on the normwise relative error
static bool compare_normwise(const char* what, const std::vector<float>& got, const std::vector<double>& ref,
                             double atol, double rtol, double max_rel_fro, double* maxerr) {
    bool ok = compare(what, got, ref, atol, rtol, maxerr);
    const double rf = rel_fro(got, ref);
    if (!(rf <= max_rel_fro)) {
        fprintf(stderr, "  %s: normwise relative error %.3g above %.3g\n", what, rf, max_rel_fro);
        ok = false;
    }
    printf("  %s: normwise relative error %.3g (bound %.3g)\n", what, rf, max_rel_fro);
    return ok;
}

// largest |x| of a reference: tolerances for sums are stated relative to the data's scale
static double max_abs(const std::vector<double>& v) {
    double m = 0.0;
    for (double x : v) m = fmax(m, fabs(x));
    return m;
}

// Median time in ms of `repeats` runs of f (each timed alone with events), after 3 warm-up runs.
static float time_ms(const std::function<void()>& f, int repeats = TIMING_REPEATS) {
    cudaEvent_t start, stop;
    cudaCheck(cudaEventCreate(&start));
    cudaCheck(cudaEventCreate(&stop));
    for (int i = 0; i < (TIMING_REPEATS > 1 ? 3 : 0); i++) f();
    std::vector<float> times;
    for (int i = 0; i < repeats; i++) {
        cudaCheck(cudaEventRecord(start));
        f();
        cudaCheck(cudaEventRecord(stop));
        cudaCheck(cudaEventSynchronize(stop));
        float ms;
        cudaCheck(cudaEventElapsedTime(&ms, start, stop));
        times.push_back(ms);
    }
    cudaCheck(cudaGetLastError());
    cudaCheck(cudaEventDestroy(start));
    cudaCheck(cudaEventDestroy(stop));
    std::sort(times.begin(), times.end());
    return times[times.size() / 2];
}

// The summary line, and the kernel's accounting: `bytes` moved through device memory (each input
// read once and each output written once: the least a kernel can move) and `flops` done (the
// arithmetic of the math, not of any particular implementation). From them, what the H200 bounds
// the kernel to (HBM3e 4.8 TB/s; dense tensor-core 989 TFLOP/s in bf16, 67 TFLOP/s of plain fp32 in
// fp32 builds) and the share of that bound the measured time reaches:
//     KERNEL <name> PASS maxerr=.. time=..ms bytes=..MB flops=..GFLOP | ..GB/s ..TFLOP/s | bound ..ms (memory|compute) = ..% of it
// Under the emulator the times, and so the rates and shares, mean nothing; the bytes and FLOPs do.
#define H200_BYTES_PER_S 4.8e12
#if defined(ENABLE_FP32)
#define H200_FLOPS_PER_S 66.9e12
#else
#define H200_FLOPS_PER_S 989.4e12
#endif
static void report(const char* name, bool pass, double maxerr, float ms, double bytes, double flops) {
    const double s = ms * 1e-3;
    const double t_mem = bytes / H200_BYTES_PER_S, t_flop = flops / H200_FLOPS_PER_S;
    const double bound = fmax(t_mem, t_flop);
    printf("KERNEL %s/%s %s maxerr=%.3e time=%.4fms bytes=%.2fMB flops=%.3fGFLOP | %.0fGB/s %.1fTFLOP/s | H200 bound "
           "%.4fms (%s) = %.0f%% of it\n",
           name, PRECISION_NAME, pass ? "PASS" : "FAIL", maxerr, ms, bytes / 1e6, flops / 1e9, bytes / s / 1e9,
           flops / s / 1e12, bound * 1e3, t_mem >= t_flop ? "memory" : "compute", s > 0 ? 100.0 * bound / s : 0.0);
    fflush(stdout);
    if (!pass) g_failures++;
}

// prints the device once, at the start of every check
static void print_device() {
    int dev;
    cudaCheck(cudaGetDevice(&dev));
    cudaDeviceProp prop;
    cudaCheck(cudaGetDeviceProperties(&prop, dev));
    printf("device: %s, %d SMs, %.1f GiB, precision %s\n", prop.name, prop.multiProcessorCount,
           prop.totalGlobalMem / 1073741824.0, PRECISION_NAME);
}

static int finish() { return g_failures == 0 ? EXIT_SUCCESS : EXIT_FAILURE; }
