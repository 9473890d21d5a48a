// Check of the encoder kernels (gpu/kernels.cuh): token + position embedding, forward and the
// deterministic backward (host-sorted buckets for wte, ordered sum over b for wpe).
// Build: make -C tests/cuda bin/encoder_bf16  (or _fp32);  run: tests/cuda/bin/encoder_bf16
#include "common.h"
#include "../../gpu/kernels.cuh"

// out(B,T,C) = wte[inp] + wpe[t]
static std::vector<double> cpu_encoder_forward(const std::vector<int>& inp, const std::vector<float>& wte,
                                               const std::vector<float>& wpe, int B, int T, int C) {
    std::vector<double> out((size_t)B * T * C);
    for (int bt = 0; bt < B * T; bt++)
        for (int c = 0; c < C; c++)
            out[(size_t)bt * C + c] = (double)wte[(size_t)inp[bt] * C + c] + wpe[(size_t)(bt % T) * C + c];
    return out;
}

int main() {
    print_device();
    const int B = SIZE(8, 2), T = SIZE(1024, 64), C = SIZE(768, 72), V = SIZE(50257, 1000), Vp = SIZE(50304, 1024);
    const size_t BTC = (size_t)B * T * C;
    Rng rng(1337);

    // tokens: half from a few very common ids (long buckets, like "the" and "\n"), half anywhere
    std::vector<int> inp(B * T);
    for (int i = 0; i < B * T; i++) inp[i] = (rng.uniform() < 0.5f) ? rng.integer(64) : rng.integer(V);
    std::vector<float> wte = random_floatX((size_t)Vp * C, -1.0f, 1.0f, rng);
    std::vector<float> wpe = random_floatX((size_t)T * C, -1.0f, 1.0f, rng);
    std::vector<float> dout = random_floatX(BTC, -1.0f, 1.0f, rng);
    std::vector<float> dwte0 = random_floatX((size_t)Vp * C, -1.0f, 1.0f, rng);  // gradients accumulate
    std::vector<float> dwpe0 = random_floatX((size_t)T * C, -1.0f, 1.0f, rng);

    int* d_inp = to_device_int(inp);
    floatX *d_wte = to_device_floatX(wte), *d_wpe = to_device_floatX(wpe), *d_dout = to_device_floatX(dout);
    floatX *d_dwte = to_device_floatX(dwte0), *d_dwpe = to_device_floatX(dwpe0);
    floatX* d_out = device_alloc<floatX>(BTC);
    cudaStream_t stream = 0;

    // ---- forward: one addition per element, exact in fp32; bf16 adds one output rounding (2^-8 rel)
    {
        poison(d_out, BTC);
        encoder_forward(d_out, d_inp, d_wte, d_wpe, B, T, C, stream);
        std::vector<double> ref = cpu_encoder_forward(inp, wte, wpe, B, T, C);
        double maxerr;
        bool ok = compare("encoder_forward.out", from_device_floatX(d_out, BTC), ref, TOL(1e-6, 1e-6),
                          TOL(1e-6, 5e-3), &maxerr);
        float ms = time_ms([&] { encoder_forward(d_out, d_inp, d_wte, d_wpe, B, T, C, stream); });
        report("encoder_forward", ok, maxerr, ms, 3.0 * BTC * sizeof(floatX), (double)BTC);
    }

    // ---- backward
    {
        EncoderPlan plan;
        encoder_plan_create(&plan, B * T, V);
        encoder_plan_build(&plan, inp.data(), B * T, stream);
        encoder_backward(d_dwte, d_dwpe, d_dout, &plan, B, T, C, stream);

        std::vector<double> ref_wte(dwte0.begin(), dwte0.end()), ref_wpe(dwpe0.begin(), dwpe0.end());
        for (int bt = 0; bt < B * T; bt++)
            for (int c = 0; c < C; c++) {
                ref_wte[(size_t)inp[bt] * C + c] += dout[(size_t)bt * C + c];
                ref_wpe[(size_t)(bt % T) * C + c] += dout[(size_t)bt * C + c];
            }
        // fp32 sums of up to ~B*T/2 terms of size <= 1: absolute error well under 1e-4 (values up to ~70);
        // bf16: the sum is exact-ish in fp32, then one rounding of the result to bf16 (2^-8 relative)
        std::vector<float> got_wte = from_device_floatX(d_dwte, (size_t)Vp * C);
        std::vector<float> got_wpe = from_device_floatX(d_dwpe, (size_t)T * C);
        double e1, e2;
        bool ok = compare("encoder_backward.dwte", got_wte, ref_wte, TOL(2e-4, 1e-4), TOL(1e-5, 5e-3), &e1);
        ok = compare("encoder_backward.dwpe", got_wpe, ref_wpe, TOL(2e-5, 1e-4), TOL(1e-5, 5e-3), &e2) && ok;

        // determinism: the same inputs give the same bits
        upload_floatX(d_dwte, dwte0);
        upload_floatX(d_dwpe, dwpe0);
        encoder_backward(d_dwte, d_dwpe, d_dout, &plan, B, T, C, stream);
        std::vector<float> again_wte = from_device_floatX(d_dwte, (size_t)Vp * C);
        std::vector<float> again_wpe = from_device_floatX(d_dwpe, (size_t)T * C);
        if (memcmp(again_wte.data(), got_wte.data(), got_wte.size() * sizeof(float)) != 0 ||
            memcmp(again_wpe.data(), got_wpe.data(), got_wpe.size() * sizeof(float)) != 0) {
            fprintf(stderr, "encoder_backward: two runs on the same input differ (not deterministic)\n");
            ok = false;
        }
        float ms = time_ms([&] { encoder_backward(d_dwte, d_dwpe, d_dout, &plan, B, T, C, stream); });
        // dout read once, dwpe read+written, dwte rows of the distinct tokens read+written
        report("encoder_backward", ok, fmax(e1, e2), ms,
               (BTC + 2.0 * T * C + 2.0 * plan.nbuckets * C) * sizeof(floatX), 2.0 * BTC);
        float ms_plan;
        {
            cudaEvent_t a, b;
            cudaCheck(cudaEventCreate(&a));
            cudaCheck(cudaEventCreate(&b));
            cudaCheck(cudaEventRecord(a, stream));
            for (int i = 0; i < 10; i++) encoder_plan_build(&plan, inp.data(), B * T, stream);
            cudaCheck(cudaEventRecord(b, stream));
            cudaCheck(cudaEventSynchronize(b));
            cudaCheck(cudaEventElapsedTime(&ms_plan, a, b));
        }
        printf("  encoder plan (host sort + upload of %d positions, %d buckets): %.3f ms\n", B * T, plan.nbuckets,
               ms_plan / 10);
        encoder_plan_destroy(&plan);
    }
    return finish();
}
