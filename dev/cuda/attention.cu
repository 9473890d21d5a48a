// Check of causal self-attention forward and backward: the materialized path (gpu/attention.cuh:
// permutes, batched GEMMs, causal softmax) and the fused flash path (gpu/flash_attention.cuh), each
// against a double-precision CPU reference, and the flash outputs against the materialized ones.
// Build: make -C dev/cuda bin/attention_bf16 (or _fp32); run: dev/cuda/bin/attention_bf16
#include "common.h"
#include "../../gpu/attention.cuh"
#include "../../gpu/flash_attention.cuh"

// qkv(B,T,3C) = [q | k | v], head h at columns h*HS..; everything in double
struct AttRef {
    std::vector<double> out, att, dqkv;
};

static AttRef cpu_attention(const std::vector<float>& qkv, const std::vector<float>& dout, int B, int T, int C,
                            int NH) {
    const int HS = C / NH;
    const double scale = 1.0 / sqrt((double)HS);
    AttRef r;
    r.out.assign((size_t)B * T * C, 0.0);
    r.att.assign((size_t)B * NH * T * T, 0.0);
    r.dqkv.assign((size_t)B * T * 3 * C, 0.0);
#pragma omp parallel for collapse(2)
    for (int b = 0; b < B; b++)
        for (int h = 0; h < NH; h++) {
            auto Q = [&](int t, int d) { return (double)qkv[((size_t)b * T + t) * 3 * C + h * HS + d]; };
            auto K = [&](int t, int d) { return (double)qkv[((size_t)b * T + t) * 3 * C + C + h * HS + d]; };
            auto Vv = [&](int t, int d) { return (double)qkv[((size_t)b * T + t) * 3 * C + 2 * C + h * HS + d]; };
            auto DQKV = [&](int t, int part, int d) -> double& {
                return r.dqkv[((size_t)b * T + t) * 3 * C + part * C + h * HS + d];
            };
            std::vector<double> datt(T), dpre(T);
            for (int t = 0; t < T; t++) {
                double* a = &r.att[(((size_t)b * NH + h) * T + t) * T];
                double m = -INFINITY;
                for (int j = 0; j <= t; j++) {
                    double s = 0.0;
                    for (int d = 0; d < HS; d++) s += Q(t, d) * K(j, d);
                    a[j] = s * scale;
                    m = fmax(m, a[j]);
                }
                double sum = 0.0;
                for (int j = 0; j <= t; j++) {
                    a[j] = exp(a[j] - m);
                    sum += a[j];
                }
                for (int j = 0; j <= t; j++) a[j] /= sum;
                for (int d = 0; d < HS; d++) {
                    double o = 0.0;
                    for (int j = 0; j <= t; j++) o += a[j] * Vv(j, d);
                    r.out[((size_t)b * T + t) * C + h * HS + d] = o;
                }
                // backward of this query row
                const float* g = &dout[((size_t)b * T + t) * C + h * HS];
                double dot = 0.0;
                for (int j = 0; j <= t; j++) {
                    double s = 0.0;
                    for (int d = 0; d < HS; d++) s += g[d] * Vv(j, d);
                    datt[j] = s;
                    dot += a[j] * s;
                    for (int d = 0; d < HS; d++) DQKV(j, 2, d) += a[j] * g[d];
                }
                for (int j = 0; j <= t; j++) dpre[j] = a[j] * (datt[j] - dot) * scale;
                for (int j = 0; j <= t; j++)
                    for (int d = 0; d < HS; d++) {
                        DQKV(t, 0, d) += dpre[j] * K(j, d);
                        DQKV(j, 1, d) += dpre[j] * Q(t, d);
                    }
            }
        }
    return r;
}

// The flash path on one shape: forward (out, lse) and backward (dqkv) against the CPU reference;
// with `mat_out` / `mat_dqkv` (the materialized path's results on the same inputs) also against those.
static void check_flash(const char* tag, int B, int T, int C, int NH, uint64_t seed, const std::vector<float>* mat_out,
                        const std::vector<float>* mat_dqkv) {
    const int HS = C / NH;
    const size_t BTC = (size_t)B * T * C, nlse = flash_attention_lse_floats(B, T, NH);
    Rng rng(seed);
    std::vector<float> qkv = random_floatX(3 * BTC, -1.0f, 1.0f, rng);
    std::vector<float> dout = random_floatX(BTC, -1.0f, 1.0f, rng);
    if (mat_out) {  // the same inputs as the materialized check (same seed, same draws)
        Rng r2(2024);
        qkv = random_floatX(3 * BTC, -1.0f, 1.0f, r2);
        dout = random_floatX(BTC, -1.0f, 1.0f, r2);
    }
    AttRef ref = cpu_attention(qkv, dout, B, T, C, NH);
    // lse reference: log sum_j exp(s_j), from the reference probabilities' normalizer
    std::vector<double> ref_lse(nlse);
    for (int b = 0; b < B; b++)
        for (int h = 0; h < NH; h++)
            for (int t = 0; t < T; t++) {
                double mx = -INFINITY, sum = 0.0;
                std::vector<double> sc(t + 1);
                for (int j = 0; j <= t; j++) {
                    double s = 0.0;
                    for (int d = 0; d < HS; d++)
                        s += (double)qkv[((size_t)b * T + t) * 3 * C + h * HS + d] *
                             qkv[((size_t)b * T + j) * 3 * C + C + h * HS + d];
                    sc[j] = s / sqrt((double)HS);
                    mx = fmax(mx, sc[j]);
                }
                for (int j = 0; j <= t; j++) sum += exp(sc[j] - mx);
                ref_lse[((size_t)b * NH + h) * T + t] = mx + log(sum);
            }
    floatX *d_qkv = to_device_floatX(qkv), *d_dout = to_device_floatX(dout);
    floatX *d_out = device_alloc<floatX>(BTC), *d_dqkv = device_alloc<floatX>(3 * BTC);
    float *d_lse = device_alloc<float>(nlse), *d_D = device_alloc<float>(flash_attention_scratch_floats(B, T, NH));
    cudaStream_t stream = 0;
    // causal: half the T x T scores, two T x T x HS products forward, five backward (s, dp, dq, dk, dv)
    const double fwd_flops = 2.0 * 2.0 * B * NH * (double)T * T * HS / 2.0, bwd_flops = 2.5 * fwd_flops;
    const double fwd_bytes = (3.0 * BTC + BTC) * sizeof(floatX) + nlse * 4.0;
    const double bwd_bytes = (3.0 * BTC + 2.0 * BTC + 3.0 * BTC) * sizeof(floatX) + 2.0 * nlse * 4.0;
    char name[96];
    // Tolerances: everything is fp32 inside, only the inputs and outputs are floatX: fp32 builds
    // ~1e-6 relative; bf16 builds round the output once (2^-8 relative, 4e-3 of |out| <= 1)
    {
        poison(d_out, BTC);
        poison(d_lse, nlse);
        flash_attention_forward(d_out, d_lse, d_qkv, B, T, C, NH, stream);
        std::vector<float> got = from_device_floatX(d_out, BTC);
        double e1, e2, e3 = 0.0;
        bool ok = compare_normwise("flash_forward.out", got, ref.out, TOL(1e-5, 1e-2), TOL(1e-4, 1e-2), TOL(1e-5, 5e-3), &e1);
        ok = compare("flash_forward.lse", from_device_float(d_lse, nlse), ref_lse, 1e-5, 1e-5, &e2) && ok;
        if (mat_out) {
            std::vector<double> m(mat_out->begin(), mat_out->end());
            ok = compare_normwise("flash_forward.out vs materialized", got, m, TOL(1e-5, 3e-2), TOL(1e-4, 4e-2),
                                  TOL(1e-5, 1.5e-2), &e3) && ok;
        }
        float ms = time_ms([&] { flash_attention_forward(d_out, d_lse, d_qkv, B, T, C, NH, stream); });
        snprintf(name, sizeof name, "flash_attention_forward%s", tag);
        report(name, ok, fmax(e1, fmax(e2, e3)), ms, fwd_bytes, fwd_flops);
    }
    {
        poison(d_dqkv, 3 * BTC);
        poison(d_D, nlse);
        flash_attention_backward(d_dqkv, d_D, d_dout, d_qkv, d_out, d_lse, B, T, C, NH, stream);
        std::vector<float> got = from_device_floatX(d_dqkv, 3 * BTC);
        const double scale = max_abs(ref.dqkv);
        double e1, e2 = 0.0;
        // bf16: out and dout enter D = dout . out rounded; dqkv is rounded once on store
        bool ok = compare_normwise("flash_backward.dqkv", got, ref.dqkv, TOL(1e-5, 1.5e-2) * scale, TOL(1e-4, 3e-2),
                                   TOL(1e-5, 8e-3), &e1);
        if (mat_dqkv) {
            std::vector<double> m(mat_dqkv->begin(), mat_dqkv->end());
            ok = compare_normwise("flash_backward.dqkv vs materialized", got, m, TOL(1e-5, 3e-2) * scale,
                                  TOL(1e-4, 6e-2), TOL(1e-5, 2e-2), &e2) && ok;
        }
        float ms = time_ms([&] { flash_attention_backward(d_dqkv, d_D, d_dout, d_qkv, d_out, d_lse, B, T, C, NH, stream); });
        snprintf(name, sizeof name, "flash_attention_backward%s", tag);
        report(name, ok, fmax(e1, e2), ms, bwd_bytes, bwd_flops);
    }
    cudaCheck(cudaFree(d_qkv));
    cudaCheck(cudaFree(d_dout));
    cudaCheck(cudaFree(d_out));
    cudaCheck(cudaFree(d_dqkv));
    cudaCheck(cudaFree(d_lse));
    cudaCheck(cudaFree(d_D));
}

int main() {
    print_device();
    const int B = SIZE(4, 2), T = SIZE(1024, 64), C = SIZE(768, 72), NH = SIZE(12, 3), HS = C / NH;
    const size_t BTC = (size_t)B * T * C, natt = attention_att_elems(B, T, NH);
    Rng rng(2024);
    // q, k in [-1,1]: scaled scores up to about +-3, a softmax that is neither flat nor one-hot
    std::vector<float> qkv = random_floatX(3 * BTC, -1.0f, 1.0f, rng);
    std::vector<float> dout = random_floatX(BTC, -1.0f, 1.0f, rng);
    AttRef ref = cpu_attention(qkv, dout, B, T, C, NH);

    cublasHandle_t handle;
    cublasCheck(cublasCreate(&handle));
    cublasCheck(cublasSetMathMode(handle, CUBLAS_DEFAULT_MATH));
    floatX *d_qkv = to_device_floatX(qkv), *d_dout = to_device_floatX(dout);
    floatX *d_out = device_alloc<floatX>(BTC), *d_att = device_alloc<floatX>(natt);
    floatX *d_qkvr = device_alloc<floatX>(3 * BTC), *d_dqkvr = device_alloc<floatX>(3 * BTC);
    floatX *d_vacc = device_alloc<floatX>(BTC), *d_datt = device_alloc<floatX>(natt);
    floatX* d_dqkv = device_alloc<floatX>(3 * BTC);
    cudaStream_t stream = 0;
    const double fwd_flops = 2.0 * 2.0 * B * NH * (double)T * T * HS;  // two T x T x HS GEMMs per head

    // Tolerances. fp32: every product is fp32 with fp32 accumulation: ~1e-6 relative.
    // bf16: the scaled scores are stored in bf16 before the softmax (relative error 2^-8 of a score
    // up to ~3, so up to ~1.2% on its exp), the probabilities are rounded again (2^-8), and the GEMMs
    // read them: single elements can be off by a few percent of the row's scale, so the per-element
    // bounds are wide and a normwise bound (1e-2, MET's range for bf16 operands) catches systematic error.
    {
        poison(d_out, BTC);
        poison(d_att, natt);
        attention_forward(d_out, d_att, d_qkvr, d_vacc, d_qkv, B, T, C, NH, handle, stream);
        std::vector<float> got_att = from_device_floatX(d_att, natt);
        double e1, e2;
        bool ok = compare_normwise("attention_forward.att", got_att, ref.att, TOL(1e-6, 2e-4), TOL(1e-4, 4e-2),
                                   TOL(1e-5, 1e-2), &e1);
        // above the diagonal the probabilities must be exact zeros (the next GEMM reads them)
        size_t leaks = 0;
        for (size_t bh = 0; bh < (size_t)B * NH; bh++)
            for (int t = 0; t < T; t++)
                for (int j = t + 1; j < T; j++) leaks += got_att[(bh * T + t) * T + j] != 0.0f;
        if (leaks) {
            fprintf(stderr, "  attention_forward.att: %zu nonzero entries above the diagonal\n", leaks);
            ok = false;
        }
        ok = compare_normwise("attention_forward.out", from_device_floatX(d_out, BTC), ref.out, TOL(1e-5, 2e-2),
                              TOL(1e-4, 4e-2), TOL(1e-5, 1e-2), &e2) && ok;
        float ms = time_ms([&] { attention_forward(d_out, d_att, d_qkvr, d_vacc, d_qkv, B, T, C, NH, handle, stream); });
        // bytes (materialized): qkv read and permuted (3+3), q k v read by the GEMMs (3), att written by
        // the first GEMM, read and written by the softmax, read by the second (4 x natt), vacc written,
        // read and permuted into out (3)
        report("attention_forward", ok, fmax(e1, e2), ms, (12.0 * BTC + 4.0 * natt) * sizeof(floatX), fwd_flops);
    }
    {
        poison(d_dqkv, 3 * BTC);
        attention_backward(d_dqkv, d_qkvr, d_dqkvr, d_vacc, d_datt, d_dout, d_qkv, d_att, B, T, C, NH, handle, stream);
        double maxerr;
        const double scale = max_abs(ref.dqkv);
        bool ok = compare_normwise("attention_backward.dqkv", from_device_floatX(d_dqkv, 3 * BTC), ref.dqkv,
                                   TOL(1e-5, 2e-2) * scale, TOL(1e-4, 5e-2), TOL(1e-5, 1.5e-2), &maxerr);
        float ms = time_ms([&] {
            attention_backward(d_dqkv, d_qkvr, d_dqkvr, d_vacc, d_datt, d_dout, d_qkv, d_att, B, T, C, NH, handle, stream);
        });
        // bytes: the permutes (qkv 6, dout 2, dqkv 6), the GEMMs' operands and results (~6 x BTC), datt
        // written, read and written by the softmax backward, read by two GEMMs; att read twice (7 x natt)
        report("attention_backward", ok, maxerr, ms, (20.0 * BTC + 7.0 * natt) * sizeof(floatX), 2.0 * fwd_flops);
    }
    cublasCheck(cublasDestroy(handle));
    // the flash path: on the same inputs (against the CPU and the materialized results), then at
    // head size 64 (GPT-2's) with T not a multiple of the tile sizes
    {
        std::vector<float> mat_out = from_device_floatX(d_out, BTC), mat_dqkv = from_device_floatX(d_dqkv, 3 * BTC);
        check_flash("", B, T, C, NH, 2024, &mat_out, &mat_dqkv);
        check_flash("[HS=64]", SIZE(2, 1), SIZE(1000, 88), SIZE(1024, 128), SIZE(16, 2), 7, NULL, NULL);
    }
    return finish();
}
