// Check of causal self-attention forward and backward (gpu/attention.cuh): permutes, batched GEMMs,
// causal softmax.
// Build: make -C dev/cuda bin/attention_bf16 (or _fp32); run: dev/cuda/bin/attention_bf16
#include "common.h"
#include "../../gpu/attention.cuh"

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
        report("attention_forward", ok, fmax(e1, e2), ms, 0, fwd_flops);
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
        report("attention_backward", ok, maxerr, ms, 0, 2.0 * fwd_flops);
    }
    cublasCheck(cublasDestroy(handle));
    return finish();
}
