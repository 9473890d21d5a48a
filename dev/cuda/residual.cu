// Check of the elementwise kernels (gpu/kernels.cuh): in-place add, accumulate with a scale into
// another precision, and the fp32 <-> floatX casts. (The residual adds of the forward run in the
// projections' GEMM epilogue: dev/cuda/matmul.cu checks them.)
// Build: make -C dev/cuda bin/residual_bf16 (or _fp32); run: dev/cuda/bin/residual_bf16
#include "common.h"
#include "../../gpu/kernels.cuh"

int main() {
    print_device();
    const size_t N = SIZE((size_t)8 * 1024 * 768, 8 * 64 * 72);
    const size_t M = SIZE(10000019, 100003);  // odd length: the scalar kernels must not assume any alignment or multiple
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
    // fp32 dst += 0.37 * floatX src, on an odd length at an odd offset (a shard slice)
    {
        std::vector<float> dst0 = random_float(M + 1, -4.0f, 4.0f, rng);
        std::vector<float> src = random_floatX(M + 1, -4.0f, 4.0f, rng);
        float* d_dst = to_device_float(dst0);
        floatX* d_src = to_device_floatX(src);
        accumulate<float, floatX>(d_dst + 1, d_src + 1, M, 0.37f, stream);
        std::vector<double> ref(M + 1);
        ref[0] = dst0[0];  // outside the slice: untouched
        for (size_t i = 1; i <= M; i++) ref[i] = (double)dst0[i] + 0.37 * (double)src[i];
        double maxerr;
        bool ok = compare("accumulate.dst", from_device_float(d_dst, M + 1), ref, 1e-6, 1e-6, &maxerr);
        float ms = time_ms([&] { accumulate<float, floatX>(d_dst + 1, d_src + 1, M, 0.37f, stream); });
        report("accumulate_f32_from_floatX", ok, maxerr, ms, M * (8.0 + sizeof(floatX)), 2.0 * M);
    }
    // casts: fp32 -> floatX rounds to nearest (even); floatX -> fp32 is exact
    {
        std::vector<float> f = random_float(M, -100.0f, 100.0f, rng);
        float* d_f = to_device_float(f);
        floatX* d_x = device_alloc<floatX>(M);
        float* d_back = device_alloc<float>(M);
        poison(d_x, M);
        poison(d_back, M);
        cast_copy<floatX, float>(d_x, d_f, M, stream);
        cast_copy<float, floatX>(d_back, d_x, M, stream);
        std::vector<double> ref_x(M);
        for (size_t i = 0; i < M; i++) ref_x[i] = round_floatX(f[i]);  // host rounding, the same RN-even rule
        double e1, e2;
        bool ok = compare("cast_to_floatX", from_device_floatX(d_x, M), ref_x, 0.0, 0.0, &e1);
        ok = compare("cast_to_float", from_device_float(d_back, M), ref_x, 0.0, 0.0, &e2) && ok;
        float ms = time_ms([&] { cast_copy<floatX, float>(d_x, d_f, M, stream); });
        report("cast_fp32_to_floatX", ok, fmax(e1, e2), ms, M * (4.0 + sizeof(floatX)), 0.0);
    }
    return finish();
}
