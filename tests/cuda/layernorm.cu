// Check of layer norm forward and backward (gpu/kernels.cuh), at GPT-2 124M's shape and at a wide
// one (C above 256 vectors: the backward's channel pass gives each thread two vectors) with a row
// count that fills no block evenly.
// Build: make -C tests/cuda bin/layernorm_bf16 (or _fp32); run: tests/cuda/bin/layernorm_bf16
#include "common.h"
#include "../../gpu/kernels.cuh"

struct LnRef {
    std::vector<double> out, mean, rstd;
};

// out(N,C) = (x - mean) / sqrt(var + 1e-5) * w + b, biased variance; all in double
static LnRef cpu_layernorm_forward(const std::vector<float>& x, const std::vector<float>& w,
                                   const std::vector<float>& b, int N, int C) {
    LnRef r;
    r.out.resize((size_t)N * C);
    r.mean.resize(N);
    r.rstd.resize(N);
#pragma omp parallel for
    for (int n = 0; n < N; n++) {
        const float* xr = &x[(size_t)n * C];
        double m = 0.0, v = 0.0;
        for (int c = 0; c < C; c++) m += xr[c];
        m /= C;
        for (int c = 0; c < C; c++) v += (xr[c] - m) * (xr[c] - m);
        v /= C;
        const double s = 1.0 / sqrt(v + 1e-5);
        for (int c = 0; c < C; c++) r.out[(size_t)n * C + c] = (xr[c] - m) * s * w[c] + b[c];
        r.mean[n] = m;
        r.rstd[n] = s;
    }
    return r;
}

// forward and backward on random (N,C) inputs; `tag` names the shape in the KERNEL lines
static void check_layernorm(int N, int C, const char* tag, Rng& rng) {
    const size_t NC = (size_t)N * C;
    char name[96];

    // rows with their own offset and spread, so centring and scaling are really exercised
    std::vector<float> x(NC);
    for (int n = 0; n < N; n++) {
        const float offset = rng.uniform(-2.0f, 2.0f), spread = rng.uniform(0.5f, 3.0f);
        for (int c = 0; c < C; c++) x[(size_t)n * C + c] = round_floatX(offset + spread * rng.uniform(-1.0f, 1.0f));
    }
    std::vector<float> w = random_floatX(C, 0.5f, 1.5f, rng), b = random_floatX(C, -0.5f, 0.5f, rng);
    std::vector<float> dout = random_floatX(NC, -1.0f, 1.0f, rng);
    std::vector<float> dinp0 = random_floatX(NC, -1.0f, 1.0f, rng);  // dinp accumulates (residual stream)
    std::vector<float> dw0 = random_floatX(C, -1.0f, 1.0f, rng), db0 = random_floatX(C, -1.0f, 1.0f, rng);

    floatX *d_x = to_device_floatX(x), *d_w = to_device_floatX(w), *d_b = to_device_floatX(b);
    floatX *d_dout = to_device_floatX(dout), *d_dinp = to_device_floatX(dinp0);
    floatX *d_dw = to_device_floatX(dw0), *d_db = to_device_floatX(db0);
    floatX* d_out = device_alloc<floatX>(NC);
    float *d_mean = device_alloc<float>(N), *d_rstd = device_alloc<float>(N);
    float* d_scratch = device_alloc<float>(layernorm_backward_scratch_floats(N, C));
    cudaStream_t stream = 0;

    LnRef ref = cpu_layernorm_forward(x, w, b, N, C);

    // ---- forward. fp32: statistics in fp32 over 768 values, ~1e-6 relative. bf16: inputs exact,
    // math in fp32, one rounding of the output (2^-8 relative); mean/rstd stay fp32.
    {
        poison(d_out, NC);
        poison(d_mean, N);
        poison(d_rstd, N);
        layernorm_forward(d_out, d_mean, d_rstd, d_x, d_w, d_b, N, C, stream);
        double e1, e2, e3;
        bool ok = compare("layernorm_forward.out", from_device_floatX(d_out, NC), ref.out, TOL(2e-5, 1e-4),
                          TOL(2e-5, 5e-3), &e1);
        ok = compare("layernorm_forward.mean", from_device_float(d_mean, N), ref.mean, 1e-6, 1e-5, &e2) && ok;
        ok = compare("layernorm_forward.rstd", from_device_float(d_rstd, N), ref.rstd, 1e-6, 1e-5, &e3) && ok;
        float ms = time_ms([&] { layernorm_forward(d_out, d_mean, d_rstd, d_x, d_w, d_b, N, C, stream); });
        snprintf(name, sizeof name, "layernorm_forward%s", tag);
        report(name, ok, fmax(e1, fmax(e2, e3)), ms, (2.0 * NC + 2.0 * C) * sizeof(floatX) + 8.0 * N, 7.0 * NC);  // mean, var, normalize, scale, shift
    }

    // ---- backward (uses the GPU's mean/rstd, which were just checked against the reference)
    {
        std::vector<double> ref_dinp(dinp0.begin(), dinp0.end()), ref_dw(dw0.begin(), dw0.end()),
            ref_db(db0.begin(), db0.end());
        std::vector<double> dw_rows((size_t)N * C), db_rows((size_t)N * C);
#pragma omp parallel for
        for (int n = 0; n < N; n++) {
            const double m = ref.mean[n], s = ref.rstd[n];
            double sum_dnorm = 0.0, sum_dnorm_norm = 0.0;
            for (int c = 0; c < C; c++) {
                const double norm = (x[(size_t)n * C + c] - m) * s, dnorm = (double)w[c] * dout[(size_t)n * C + c];
                sum_dnorm += dnorm;
                sum_dnorm_norm += dnorm * norm;
            }
            for (int c = 0; c < C; c++) {
                const size_t i = (size_t)n * C + c;
                const double norm = (x[i] - m) * s, dnorm = (double)w[c] * dout[i];
                ref_dinp[i] += s * (dnorm - sum_dnorm / C - norm * sum_dnorm_norm / C);
                dw_rows[i] = dout[i] * norm;
                db_rows[i] = dout[i];
            }
        }
        for (int n = 0; n < N; n++)
            for (int c = 0; c < C; c++) {
                ref_dw[c] += dw_rows[(size_t)n * C + c];
                ref_db[c] += db_rows[(size_t)n * C + c];
            }

        poison(d_scratch, layernorm_backward_scratch_floats(N, C));  // every partial the reduce reads is written
        layernorm_backward(d_dinp, d_dw, d_db, d_scratch, d_dout, d_x, d_w, d_mean, d_rstd, N, C, stream);
        std::vector<float> got_dinp = from_device_floatX(d_dinp, NC);
        std::vector<float> got_dw = from_device_floatX(d_dw, C), got_db = from_device_floatX(d_db, C);
        // dinp: fp32 math on O(1) values (~1e-6); bf16 adds the output rounding (2^-8 rel).
        // dweight/dbias: sums over N=8192 rows (values up to ~100): fp32 accumulation error relative to
        // the largest value ~1e-6; bf16: plus one output rounding.
        double e1, e2, e3;
        bool ok = compare("layernorm_backward.dinp", got_dinp, ref_dinp, TOL(2e-5, 1e-4), TOL(2e-5, 5e-3), &e1);
        ok = compare("layernorm_backward.dweight", got_dw, ref_dw, TOL(1e-5, 1e-5) * max_abs(ref_dw), TOL(1e-5, 5e-3),
                     &e2) && ok;
        ok = compare("layernorm_backward.dbias", got_db, ref_db, TOL(1e-5, 1e-5) * max_abs(ref_db), TOL(1e-5, 5e-3),
                     &e3) && ok;

        upload_floatX(d_dinp, dinp0);
        upload_floatX(d_dw, dw0);
        upload_floatX(d_db, db0);
        layernorm_backward(d_dinp, d_dw, d_db, d_scratch, d_dout, d_x, d_w, d_mean, d_rstd, N, C, stream);
        std::vector<float> again_dinp = from_device_floatX(d_dinp, NC), again_dw = from_device_floatX(d_dw, C),
                           again_db = from_device_floatX(d_db, C);
        if (again_dinp != got_dinp || again_dw != got_dw || again_db != got_db) {
            fprintf(stderr, "layernorm_backward: two runs on the same input differ (not deterministic)\n");
            ok = false;
        }
        float ms = time_ms([&] {
            layernorm_backward(d_dinp, d_dw, d_db, d_scratch, d_dout, d_x, d_w, d_mean, d_rstd, N, C, stream);
        });
        // dout, x read; dinp read + written; stats read (the fp32 partials, 2C per block written and
        // read again, come on top: 512 blocks, 6 MB at C = 768, 6% more)
        snprintf(name, sizeof name, "layernorm_backward%s", tag);
        report(name, ok, fmax(e1, fmax(e2, e3)), ms, 4.0 * NC * sizeof(floatX) + 8.0 * N, 12.0 * NC);
    }
    for (void* p : {(void*)d_x, (void*)d_w, (void*)d_b, (void*)d_dout, (void*)d_dinp, (void*)d_dw, (void*)d_db,
                    (void*)d_out, (void*)d_mean, (void*)d_rstd, (void*)d_scratch})
        cudaCheck(cudaFree(p));
}

int main() {
    print_device();
    Rng rng(42);
    // GPT-2 124M's rows (B=8, T=1024) and channels; under the emulator 5200 rows of 288, which makes
    // 11 rows per block: a full round of 8 rows, a partial one, and a last block of 8 rows
    check_layernorm(SIZE(8 * 1024, 5200), SIZE(768, 288), "", rng);
    // wide: 4032 / 2016 channels (BF16 / FP32), 504 vectors, put two vectors on the threads of the
    // backward's channel pass (and 203 rows, one per block, under the emulator)
    check_layernorm(SIZE(1000, 203), 2 * XVEC_SIZE * 256 - XVEC_SIZE * 8, "_wide", rng);
    return finish();
}
