// Check of the deterministic sum of squares (gpu/shard_math.cuh), the building block of the global
// gradient norm: floatX and fp32 inputs, arbitrary lengths and offsets, accumulation, bitwise
// reproducibility, and the same bits whether the slice is 16-byte aligned (vector loads) or not
// (scalar loads): the groups of 8 follow the element index, not the address.
// Build: make -C tests/cuda bin/norm_bf16 (or _fp32); run: tests/cuda/bin/norm_bf16
#include "common.h"
#include "../../gpu/shard_math.cuh"

int main() {
    print_device();
    const size_t n = SIZE(124439809, 1000003);  // ~GPT-2 124M's parameter count, odd
    Rng rng(5);
    std::vector<float> g = random_floatX(n + 1, -0.02f, 0.02f, rng);
    floatX* d_gx = to_device_floatX(g);
    float* d_gf = to_device_float(g);
    // the slice [1, n+1) again, starting 16-byte aligned (the same values, other addresses)
    std::vector<float> slice(g.begin() + 1, g.end());
    floatX* d_gx_aligned = to_device_floatX(slice);
    float* d_gf_aligned = to_device_float(slice);
    float* d_out = device_alloc<float>(1);
    float* d_scratch = device_alloc<float>(SUMSQ_BLOCKS);
    cudaStream_t stream = 0;

    // reference over the slice [1, n+1) (an unaligned shard), then plus the first element squared
    double ref_slice = 0.0;
    for (size_t i = 1; i <= n; i++) ref_slice += (double)g[i] * g[i];
    const double ref_all = ref_slice + (double)g[0] * g[0];

    for (int fp32_input = 0; fp32_input <= 1; fp32_input++) {
        auto sum = [&](bool aligned, size_t count, int accumulate) {  // of the slice's first count elements
            if (fp32_input) sum_squares<float>(d_out, aligned ? d_gf_aligned : d_gf + 1, count, d_scratch, accumulate, stream);
            else sum_squares<floatX>(d_out, aligned ? d_gx_aligned : d_gx + 1, count, d_scratch, accumulate, stream);
        };
        poison(d_out, 1);
        sum(false, n, 0);
        const float first = from_device_float(d_out, 1)[0];
        // accumulate: out already holds g[0]^2 (computed with the same kernel on a 1-element buffer)
        if (fp32_input) sum_squares<float>(d_out, d_gf, 1, d_scratch, 0, stream);
        else sum_squares<floatX>(d_out, d_gx, 1, d_scratch, 0, stream);
        sum(false, n, 1);
        const float accumulated = from_device_float(d_out, 1)[0];
        sum(false, n, 0);
        const float again = from_device_float(d_out, 1)[0];
        sum(true, n, 0);
        const float aligned = from_device_float(d_out, 1)[0];

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
        if (memcmp(&first, &aligned, sizeof(float)) != 0) {
            fprintf(stderr, "  sum_squares: aligned and misaligned slices differ (%.9g vs %.9g)\n", aligned, first);
            ok = false;
        }
        // short and odd lengths (a partial group, fewer groups than threads), both alignments
        for (size_t count : {(size_t)1, (size_t)7, (size_t)9, (size_t)4099}) {
            double ref = 0.0;
            for (size_t i = 1; i <= count; i++) ref += (double)g[i] * g[i];
            float got[2];
            for (int a = 0; a < 2; a++) {
                sum(a == 1, count, 0);
                got[a] = from_device_float(d_out, 1)[0];
            }
            char what[64];
            snprintf(what, sizeof what, "sum_squares.n%zu", count);
            double e;
            ok = compare(what, std::vector<float>{got[0], got[1]}, std::vector<double>{ref, ref}, 0.0, 2e-5, &e) && ok;
            if (memcmp(&got[0], &got[1], sizeof(float)) != 0) {
                fprintf(stderr, "  %s: aligned and misaligned slices differ\n", what);
                ok = false;
            }
        }
        float ms = time_ms([&] { sum(true, n, 0); });
        report(fp32_input ? "sum_squares_fp32" : "sum_squares_floatX", ok, fmax(e1, e2), ms,
               n * (double)(fp32_input ? 4 : sizeof(floatX)), 2.0 * n);
    }
    return finish();
}
