// Check of the elementwise kernels (gpu/shard_math.cuh): in-place add, accumulate with a scale into
// the same or another precision, and the fp32 <-> floatX casts, on odd lengths at 16-byte aligned
// offsets (vector loads) and misaligned ones (scalar loads). (The residual adds of the forward run in
// the projections' GEMM epilogue: tests/cuda/matmul.cu checks them.)
// Build: make -C tests/cuda bin/residual_bf16 (or _fp32); run: tests/cuda/bin/residual_bf16
#include <type_traits>
#include "common.h"
#include "../../gpu/kernels.cuh"
#include "../../gpu/shard_math.cuh"

// a T buffer on the device and back (floatX rounds, fp32 is exact), and random values exact in T
template <typename T>
static T* to_device(const std::vector<float>& host) {
    if constexpr (std::is_same<T, float>::value) return to_device_float(host);
    else return to_device_floatX(host);
}
template <typename T>
static std::vector<float> from_device(const T* d, size_t n) {
    if constexpr (std::is_same<T, float>::value) return from_device_float(d, n);
    else return from_device_floatX(d, n);
}
template <typename T>
static std::vector<float> random_of(size_t n, float lo, float hi, Rng& rng) {
    return std::is_same<T, float>::value ? random_float(n, lo, hi, rng) : random_floatX(n, lo, hi, rng);
}

// dst[offset, offset+M) += 0.37 * src[offset, offset+M) on an odd length (a shard slice); the
// elements before the slice stay untouched. Tolerance: one fp32 multiply-add of exact values
// (1e-6 relative is loose), plus one rounding to bf16 when dst is floatX.
template <typename Tdst, typename Tsrc>
static void check_accumulate(const char* name, size_t M, size_t offset, Rng& rng) {
    std::vector<float> dst0 = random_of<Tdst>(M + offset, -4.0f, 4.0f, rng);
    std::vector<float> src = random_of<Tsrc>(M + offset, -4.0f, 4.0f, rng);
    Tdst* d_dst = to_device<Tdst>(dst0);
    Tsrc* d_src = to_device<Tsrc>(src);
    accumulate<Tdst, Tsrc>(d_dst + offset, d_src + offset, M, 0.37f, 0);
    std::vector<double> ref(M + offset);
    for (size_t i = 0; i < offset; i++) ref[i] = dst0[i];  // outside the slice: untouched
    for (size_t i = offset; i < M + offset; i++) ref[i] = (double)dst0[i] + 0.37 * (double)src[i];
    double maxerr;
    const double rtol = std::is_same<Tdst, float>::value ? 1e-6 : 5e-3;
    bool ok = compare(name, from_device<Tdst>(d_dst, M + offset), ref, 1e-6, rtol, &maxerr);
    float ms = time_ms([&] { accumulate<Tdst, Tsrc>(d_dst + offset, d_src + offset, M, 0.37f, 0); });
    report(name, ok, maxerr, ms, M * (2.0 * sizeof(Tdst) + sizeof(Tsrc)), 2.0 * M);
    cudaCheck(cudaFree(d_dst));
    cudaCheck(cudaFree(d_src));
}

// casts at an offset: fp32 -> floatX rounds to nearest (even); floatX -> fp32 is exact
static void check_casts(const char* name, size_t M, size_t offset, Rng& rng) {
    std::vector<float> f = random_float(M + offset, -100.0f, 100.0f, rng);
    float* d_f = to_device_float(f);
    floatX* d_x = device_alloc<floatX>(M + offset);
    float* d_back = device_alloc<float>(M + offset);
    poison(d_x, M + offset);
    poison(d_back, M + offset);
    cast_copy<floatX, float>(d_x + offset, d_f + offset, M, 0);
    cast_copy<float, floatX>(d_back + offset, d_x + offset, M, 0);
    std::vector<double> ref_x(M);
    for (size_t i = 0; i < M; i++) ref_x[i] = round_floatX(f[offset + i]);  // host rounding, the same RN-even rule
    std::vector<float> got_x = from_device_floatX(d_x, M + offset), got_back = from_device_float(d_back, M + offset);
    bool ok = true;
    for (size_t i = 0; i < offset; i++)  // before the slice: the poison, untouched
        if (!isnan(got_x[i]) || !isnan(got_back[i])) {
            fprintf(stderr, "  %s: element %zu before the slice was written\n", name, i);
            ok = false;
        }
    double e1, e2;
    ok = compare("cast_to_floatX", std::vector<float>(got_x.begin() + offset, got_x.end()), ref_x, 0.0, 0.0, &e1) && ok;
    ok = compare("cast_to_float", std::vector<float>(got_back.begin() + offset, got_back.end()), ref_x, 0.0, 0.0, &e2) && ok;
    float ms = time_ms([&] { cast_copy<floatX, float>(d_x + offset, d_f + offset, M, 0); });
    report(name, ok, fmax(e1, e2), ms, M * (4.0 + sizeof(floatX)), 0.0);
    cudaCheck(cudaFree(d_f));
    cudaCheck(cudaFree(d_x));
    cudaCheck(cudaFree(d_back));
}

int main() {
    print_device();
    const size_t N = SIZE((size_t)8 * 1024 * 768, 8 * 64 * 72);
    const size_t M = SIZE(10000019, 30011);  // odd: the last group of 8 is partial
    Rng rng(3);
    std::vector<float> a = random_floatX(N, -4.0f, 4.0f, rng), b = random_floatX(N, -4.0f, 4.0f, rng);
    floatX* d_b = to_device_floatX(b);
    cudaStream_t stream = 0;

    // one fp32 addition of two exact values: exact in fp32 up to one rounding (2^-24); bf16: 2^-8
    {
        floatX* d_dst = to_device_floatX(a);
        add_inplace(d_dst, d_b, N, stream);
        std::vector<double> ref(N);
        for (size_t i = 0; i < N; i++) ref[i] = (double)a[i] + b[i];
        double maxerr;
        bool ok = compare("add_inplace.dst", from_device_floatX(d_dst, N), ref, 1e-7, TOL(1e-7, 5e-3), &maxerr);
        float ms = time_ms([&] { add_inplace(d_dst, d_b, N, stream); });
        report("add_inplace", ok, maxerr, ms, 3.0 * N * sizeof(floatX), (double)N);
    }
    // odd lengths (a partial last group), 16-byte aligned (offset 0) and not (offsets 1, 3)
    check_accumulate<float, floatX>("accumulate_f32_from_floatX", M, 0, rng);
    check_accumulate<float, floatX>("accumulate_f32_from_floatX_misaligned", M, 1, rng);
    check_accumulate<floatX, floatX>("accumulate_floatX", M, 0, rng);
    check_accumulate<floatX, floatX>("accumulate_floatX_misaligned", M, 3, rng);
    check_accumulate<float, float>("accumulate_f32", M, 0, rng);
    check_casts("cast_fp32_to_floatX", M, 0, rng);
    check_casts("cast_fp32_to_floatX_misaligned", M, 1, rng);
    return finish();
}
