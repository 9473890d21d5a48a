// Check of the deterministic sum of squares (gpu/kernels.cuh), the building block of the global
// gradient norm: floatX and fp32 inputs, arbitrary lengths and offsets, accumulation, bitwise
// reproducibility.
// Build: make -C dev/cuda bin/norm_bf16 (or _fp32); run: dev/cuda/bin/norm_bf16
#include "common.h"
#include "../../gpu/kernels.cuh"

int main() {
    print_device();
    const size_t n = SIZE(124439809, 1000003);  // ~GPT-2 124M's parameter count, odd
    Rng rng(5);
    std::vector<float> g = random_floatX(n + 1, -0.02f, 0.02f, rng);
    floatX* d_gx = to_device_floatX(g);
    float* d_gf = to_device_float(g);
    float* d_out = device_alloc<float>(1);
    float* d_scratch = device_alloc<float>(SUMSQ_BLOCKS);
    cudaStream_t stream = 0;

    // reference over the slice [1, n+1) (an unaligned shard), then plus the first element squared
    double ref_slice = 0.0;
    for (size_t i = 1; i <= n; i++) ref_slice += (double)g[i] * g[i];
    const double ref_all = ref_slice + (double)g[0] * g[0];

    for (int fp32_input = 0; fp32_input <= 1; fp32_input++) {
        auto run_slice = [&](int accumulate) {
            if (fp32_input) sum_squares<float>(d_out, d_gf + 1, n, d_scratch, accumulate, stream);
            else sum_squares<floatX>(d_out, d_gx + 1, n, d_scratch, accumulate, stream);
        };
        poison(d_out, 1);
        run_slice(0);
        const float first = from_device_float(d_out, 1)[0];
        // accumulate: out already holds g[0]^2 (computed with the same kernel on a 1-element buffer)
        if (fp32_input) sum_squares<float>(d_out, d_gf, 1, d_scratch, 0, stream);
        else sum_squares<floatX>(d_out, d_gx, 1, d_scratch, 0, stream);
        run_slice(1);
        const float accumulated = from_device_float(d_out, 1)[0];
        run_slice(0);
        const float again = from_device_float(d_out, 1)[0];

        // fp32 sums: each thread adds ~950 positive terms, then two block reductions: a relative
        // error of a few 1e-6 at worst; inputs are exact in both precisions, so one tolerance.
        double e1, e2;
        bool ok = compare("sum_squares", std::vector<float>{first}, std::vector<double>{ref_slice}, 0.0, 2e-5, &e1);
        ok = compare("sum_squares.accumulate", std::vector<float>{accumulated}, std::vector<double>{ref_all}, 0.0,
                     2e-5, &e2) && ok;
        if (memcmp(&first, &again, sizeof(float)) != 0) {
            fprintf(stderr, "  sum_squares: two runs differ (%.9g vs %.9g): not deterministic\n", first, again);
            ok = false;
        }
        float ms = time_ms([&] { run_slice(0); });
        report(fp32_input ? "sum_squares_fp32" : "sum_squares_floatX", ok, fmax(e1, e2), ms,
               n * (double)(fp32_input ? 4 : sizeof(floatX)), 2.0 * n);
    }
    return finish();
}
