// Check of causal self-attention forward and backward: the materialized path (gpu/attention.cuh:
// permutes, batched GEMMs, causal softmax), the portable fused path (gpu/flash_attention.cuh) and, in
// BF16 builds, the tensor-core fused path (gpu/flash_attention_tc.cuh), each against a
// double-precision CPU reference, the fused ones also against the materialized results and each
// other, run twice for bitwise determinism. The CPU reference of each shape is computed once and
// shared by every path that checks it (cpu_reference).
// The shapes, and the head size each checks:
//   shape                       GPU sizes                  emulator sizes (SIZE's second value)
//   main (every path)           B=4 T=1024 C=768 NH=12: 64  B=2 T=136 C=72 NH=3: 24
//   [HS=64] (fused paths)       B=2 T=1000 C=1024 NH=16: 64 B=1 T=200 C=128 NH=2: 64
//   [B=16] (fused, timed; against the portable path, no CPU reference)
// So on a GPU every shape here has GPT-2's head size 64; head size 24 (not a multiple of the 16-wide
// tensor-core tiles in one dimension) is checked on a GPU only by test_gpt2cu against the small dump
// (C=72, NH=3), and here under the emulator.
// Build: make -C tests/cuda bin/attention_bf16 (or _fp32); run: tests/cuda/bin/attention_bf16
#include "common.h"
#include "../../gpu/attention.cuh"
#include "../../gpu/flash_attention.cuh"
#include "../../gpu/flash_attention_tc.cuh"

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

// A fused path: its forward and backward (the same interface) and its tolerances against the
// double-precision reference (each path states why, where it is defined below).
struct FlashTolerances {
    double out_atol, out_rtol, out_fro;     // out: per element |err| <= atol + rtol |ref|, normwise bound
    double dqkv_atol, dqkv_rtol, dqkv_fro;  // dqkv: atol relative to max |dqkv|
};
struct FlashPath {
    const char* name;
    void (*forward)(floatX*, float*, const floatX*, int, int, int, int, cudaStream_t);
    void (*backward)(floatX*, float*, const floatX*, const floatX*, const floatX*, const float*, int, int, int, int,
                     cudaStream_t);
    FlashTolerances tol;
};
// Portable path (fp32 FMAs inside, only inputs and outputs floatX): fp32 builds ~1e-6 relative;
// bf16 builds round out once on store (2^-9 relative), and out and dout enter D = dout . out rounded,
// dqkv is rounded once on store.
static const FlashPath kPortable = {"flash_attention", flash_attention_forward, flash_attention_backward,
                                    {TOL(1e-5, 1e-2), TOL(1e-4, 1e-2), TOL(1e-5, 5e-3),
                                     TOL(1e-5, 1.5e-2), TOL(1e-4, 3e-2), TOL(1e-5, 8e-3)}};
#if defined(ENABLE_BF16)
// Tensor-core path (bf16 only): on top of the portable path's roundings, P is rounded to bf16 before
// P V (2^-9 relative per probability, while the row sum uses the fp32 p), and P^T and dS are rounded
// to bf16 before dV = P^T dout, dQ = dS K, dK = dS^T Q. Each rounding is unbiased and averages out
// over a row's keys, so normwise the error stays near one rounding (~3e-3); single elements where
// terms cancel get wider per-element bounds.
// Two variants of it (gpu/flash_attention_tc.cuh), the same math in different tilings, checked and
// timed side by side so that a GPU run shows which is faster: 16 or 32 rows per warp in the forward
// and dq kernels (TcRows16, TcRows32). The trainer uses TcDefault, one of them.
static const FlashTolerances kTensorCoreTol = {1.5e-2, 2e-2, 6e-3, 2e-2, 4e-2, 1e-2};
static const FlashPath kTensorCoreVariants[] = {
    {"flash_attention_tc_rows16", flash_attention_tc_forward_with<TcRows16>,
     flash_attention_tc_backward_with<TcRows16>, kTensorCoreTol},
    {"flash_attention_tc_rows32", flash_attention_tc_forward_with<TcRows32>,
     flash_attention_tc_backward_with<TcRows32>, kTensorCoreTol},
};
#endif
struct FlashResult {
    std::vector<float> out, dqkv;
};
struct FlashOther {  // another path's results on the same inputs, to compare with
    const char* name;
    const FlashResult* result;
};

// every element the same bits (the outputs are finite: compare() has passed them)
static bool same_bits(const char* what, const std::vector<float>& a, const std::vector<float>& b) {
    const bool same = a.size() == b.size() && memcmp(a.data(), b.data(), a.size() * sizeof(float)) == 0;
    if (!same) fprintf(stderr, "  %s: not deterministic (two runs differ)\n", what);
    return same;
}

// lse reference: log sum_j exp(s_j) per (b, h, query row), the softmax's normalizer
static std::vector<double> cpu_lse(const std::vector<float>& qkv, int B, int T, int C, int NH) {
    const int HS = C / NH;
    std::vector<double> lse(flash_attention_lse_floats(B, T, NH));
#pragma omp parallel for collapse(2)
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
                lse[((size_t)b * NH + h) * T + t] = mx + log(sum);
            }
    return lse;
}

// The CPU reference (attention and lse) of one shape's inputs, computed the first time a path asks
// for it and kept: at GPU sizes it takes seconds of every core, and every path checks the same inputs
// (random_floatX draws from Rng(seed), so the shape and the seed name them).
struct CpuReference {
    int B, T, C, NH;
    uint64_t seed;
    AttRef att;
    std::vector<double> lse;
};
static const CpuReference& cpu_reference(const std::vector<float>& qkv, const std::vector<float>& dout, int B, int T,
                                         int C, int NH, uint64_t seed) {
    static std::vector<CpuReference*> cache;  // (never freed: the program ends after the checks)
    for (const CpuReference* r : cache)
        if (r->B == B && r->T == T && r->C == C && r->NH == NH && r->seed == seed) return *r;
    CpuReference* r = new CpuReference{B, T, C, NH, seed, cpu_attention(qkv, dout, B, T, C, NH), cpu_lse(qkv, B, T, C, NH)};
    cache.push_back(r);
    return *r;
}

// A fused path on one shape: forward (out, lse) and backward (dqkv) against the CPU reference (unless
// `with_cpu` is false: a shape too large for it), each run twice for bitwise determinism, and
// against `others` (other paths' results on the same inputs: same seed, same draws). Returns its results.
static FlashResult check_flash(const FlashPath& path, const char* tag, int B, int T, int C, int NH, uint64_t seed,
                               const std::vector<FlashOther>& others, bool with_cpu = true) {
    const int HS = C / NH;
    const size_t BTC = (size_t)B * T * C, nlse = flash_attention_lse_floats(B, T, NH);
    Rng rng(seed);
    std::vector<float> qkv = random_floatX(3 * BTC, -1.0f, 1.0f, rng);
    std::vector<float> dout = random_floatX(BTC, -1.0f, 1.0f, rng);
    static const AttRef no_ref;
    static const std::vector<double> no_lse;
    const CpuReference* cpu = with_cpu ? &cpu_reference(qkv, dout, B, T, C, NH, seed) : NULL;
    const AttRef& ref = cpu ? cpu->att : no_ref;
    const std::vector<double>& ref_lse = cpu ? cpu->lse : no_lse;
    floatX *d_qkv = to_device_floatX(qkv), *d_dout = to_device_floatX(dout);
    floatX *d_out = device_alloc<floatX>(BTC), *d_dqkv = device_alloc<floatX>(3 * BTC);
    float *d_lse = device_alloc<float>(nlse), *d_D = device_alloc<float>(flash_attention_scratch_floats(B, T, NH));
    cudaStream_t stream = 0;
    // FLOPs, causal: the T(T+1)/2 visible (query, key) pairs counted as T^2/2; per pair and head
    // dimension 2 FLOPs (multiply, add) in each of two products forward (S = Q K^T, O = P V), five
    // backward (S, dP, dQ, dK, dV). What the math needs: the tensor-core path also multiplies the
    // masked half of each diagonal 16x16 block, the portable path does not.
    const double fwd_flops = 2.0 * 2.0 * B * NH * (double)T * T * HS / 2.0, bwd_flops = 2.5 * fwd_flops;
    // bytes: forward reads qkv, writes out and lse; backward reads qkv, out, dout, lse, writes dqkv,
    // and D once written and once read
    const double fwd_bytes = (3.0 * BTC + BTC) * sizeof(floatX) + nlse * 4.0;
    const double bwd_bytes = (3.0 * BTC + 2.0 * BTC + 3.0 * BTC) * sizeof(floatX) + 3.0 * nlse * 4.0;
    const FlashTolerances& tol = path.tol;
    FlashResult res;
    char name[96], what[128];
    {
        std::vector<float> first;
        for (int run = 0; run < 2; run++) {
            poison(d_out, BTC);
            poison(d_lse, nlse);
            path.forward(d_out, d_lse, d_qkv, B, T, C, NH, stream);
            (run == 0 ? first : res.out) = from_device_floatX(d_out, BTC);
        }
        double e1 = 0.0, e2 = 0.0, e3 = 0.0;
        bool ok = true;
        snprintf(what, sizeof what, "%s_forward.out", path.name);
        if (with_cpu) ok = compare_normwise(what, res.out, ref.out, tol.out_atol, tol.out_rtol, tol.out_fro, &e1);
        ok = same_bits(what, first, res.out) && ok;
        snprintf(what, sizeof what, "%s_forward.lse", path.name);
        if (with_cpu) ok = compare(what, from_device_float(d_lse, nlse), ref_lse, 1e-5, 1e-5, &e2) && ok;
        for (const FlashOther& o : others) {
            std::vector<double> m(o.result->out.begin(), o.result->out.end());
            snprintf(what, sizeof what, "%s_forward.out vs %s", path.name, o.name);
            double e;
            ok = compare_normwise(what, res.out, m, TOL(1e-5, 3e-2), TOL(1e-4, 4e-2), TOL(1e-5, 1.5e-2), &e) && ok;
            e3 = fmax(e3, e);
        }
        float ms = time_ms([&] { path.forward(d_out, d_lse, d_qkv, B, T, C, NH, stream); });
        snprintf(name, sizeof name, "%s_forward%s", path.name, tag);
        report(name, ok, fmax(e1, fmax(e2, e3)), ms, fwd_bytes, fwd_flops);
    }
    {
        std::vector<float> first;
        for (int run = 0; run < 2; run++) {
            poison(d_dqkv, 3 * BTC);
            poison(d_D, nlse);
            path.backward(d_dqkv, d_D, d_dout, d_qkv, d_out, d_lse, B, T, C, NH, stream);
            (run == 0 ? first : res.dqkv) = from_device_floatX(d_dqkv, 3 * BTC);
        }
        // the data's scale, for the absolute tolerances: the reference's, else this result's own
        const double scale = max_abs(with_cpu ? ref.dqkv : std::vector<double>(res.dqkv.begin(), res.dqkv.end()));
        double e1 = 0.0, e2 = 0.0;
        bool ok = true;
        snprintf(what, sizeof what, "%s_backward.dqkv", path.name);
        if (with_cpu)
            ok = compare_normwise(what, res.dqkv, ref.dqkv, tol.dqkv_atol * scale, tol.dqkv_rtol, tol.dqkv_fro, &e1);
        ok = same_bits(what, first, res.dqkv) && ok;
        for (const FlashOther& o : others) {
            std::vector<double> m(o.result->dqkv.begin(), o.result->dqkv.end());
            snprintf(what, sizeof what, "%s_backward.dqkv vs %s", path.name, o.name);
            double e;
            ok = compare_normwise(what, res.dqkv, m, TOL(1e-5, 3e-2) * scale, TOL(1e-4, 6e-2), TOL(1e-5, 2e-2), &e) && ok;
            e2 = fmax(e2, e);
        }
        float ms = time_ms([&] { path.backward(d_dqkv, d_D, d_dout, d_qkv, d_out, d_lse, B, T, C, NH, stream); });
        snprintf(name, sizeof name, "%s_backward%s", path.name, tag);
        report(name, ok, fmax(e1, e2), ms, bwd_bytes, bwd_flops);
    }
    cudaCheck(cudaFree(d_qkv));
    cudaCheck(cudaFree(d_dout));
    cudaCheck(cudaFree(d_out));
    cudaCheck(cudaFree(d_dqkv));
    cudaCheck(cudaFree(d_lse));
    cudaCheck(cudaFree(d_D));
    return res;
}

int main() {
    print_device();
    // (the shapes and their head sizes: the table on top)
    const int B = SIZE(4, 2), T = SIZE(1024, 136), C = SIZE(768, 72), NH = SIZE(12, 3), HS = C / NH;
    const size_t BTC = (size_t)B * T * C, natt = attention_att_elems(B, T, NH);
    Rng rng(2024);
    // q, k in [-1,1]: scaled scores up to about +-3, a softmax that is neither flat nor one-hot
    std::vector<float> qkv = random_floatX(3 * BTC, -1.0f, 1.0f, rng);
    std::vector<float> dout = random_floatX(BTC, -1.0f, 1.0f, rng);
    const AttRef& ref = cpu_reference(qkv, dout, B, T, C, NH, 2024).att;  // (the fused paths below reuse it)

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
    // the fused paths: on the same inputs (against the CPU, the materialized results and each other),
    // then at head size 64 (GPT-2's) with T not a multiple of the tile sizes
    {
        const FlashResult mat = {from_device_floatX(d_out, BTC), from_device_floatX(d_dqkv, 3 * BTC)};
        const FlashResult portable = check_flash(kPortable, "", B, T, C, NH, 2024, {{"materialized", &mat}});
        const int B2 = SIZE(2, 1), T2 = SIZE(1000, 200), C2 = SIZE(1024, 128), NH2 = SIZE(16, 2);
        const FlashResult portable64 = check_flash(kPortable, "[HS=64]", B2, T2, C2, NH2, 7, {});
        // the training batch (GPT-2 124M: B=16, T=1024): at B=4 a kernel's grid is a few waves over
        // the SMs and its tail weighs on the time; at B=16 the tilings compare as they run in training.
        // Timed, and checked against the portable path on the same inputs (whose correctness the
        // checks above establish; the CPU reference would take minutes here).
        const int B16 = SIZE(16, 3);
        char tag16[16];
        snprintf(tag16, sizeof tag16, "[B=%d]", B16);
        const FlashResult portable16 = check_flash(kPortable, tag16, B16, T, C, NH, 16, {}, false);
#if defined(ENABLE_BF16)
        for (const FlashPath& tc : kTensorCoreVariants) {
            check_flash(tc, "", B, T, C, NH, 2024, {{"materialized", &mat}, {"portable", &portable}});
            check_flash(tc, "[HS=64]", B2, T2, C2, NH2, 7, {{"portable", &portable64}});
            check_flash(tc, tag16, B16, T, C, NH, 16, {{"portable", &portable16}}, false);
        }
#else
        (void)portable;
        (void)portable64;
        (void)portable16;
#endif
    }
    return finish();
}
