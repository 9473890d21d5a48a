// Check of the linear layers (gpu/matmul.cuh): cuBLASLt forward with bias and GELU epilogues, the
// projections' residual add in the epilogue (C = residual, beta = 1), backward (dinp, dweight
// accumulation, dbias from the BGRADB epilogue or from the deterministic kernels), DGELU epilogue;
// fused (every epilogue on) and unfused paths.
// Each GPT-2 shape is checked at a reduced row count (the CPU reference is a double GEMM) and timed
// at B*T = 8192 (GPT-2 124M at B=8, T=1024).
// Build: make -C tests/cuda bin/matmul_bf16 (or _fp32); run: tests/cuda/bin/matmul_bf16
#include "common.h"
#include "../../gpu/matmul.cuh"

// out(M,N) = sum_k a(i,k) b(k,j), a(i,k) = A[i*sa_i + k*sa_k], b row-major (K,N); double accumulation
static std::vector<double> cpu_gemm(int M, int N, int K, const float* A, size_t sa_i, size_t sa_k, const float* Bkn) {
    std::vector<double> out((size_t)M * N, 0.0);
#pragma omp parallel for
    for (int i = 0; i < M; i++) {
        double* o = &out[(size_t)i * N];
        for (int k = 0; k < K; k++) {
            const double a = A[(size_t)i * sa_i + (size_t)k * sa_k];
            const float* b = Bkn + (size_t)k * N;
            for (int j = 0; j < N; j++) o[j] += a * b[j];
        }
    }
    return out;
}
static std::vector<float> transpose(const std::vector<float>& x, int rows, int cols) {
    std::vector<float> t(x.size());
    for (int r = 0; r < rows; r++)
        for (int c = 0; c < cols; c++) t[(size_t)c * rows + r] = x[(size_t)r * cols + c];
    return t;
}
static double cpu_gelu(double x) { return 0.5 * x * (1.0 + tanh(sqrt(2.0 / M_PI) * (x + 0.044715 * x * x * x))); }
static double cpu_gelu_derivative(double x) {
    const double th = tanh(sqrt(2.0 / M_PI) * (x + 0.044715 * x * x * x));
    return 0.5 * (1.0 + th) + 0.5 * x * (1.0 - th * th) * sqrt(2.0 / M_PI) * (1.0 + 3.0 * 0.044715 * x * x);
}

// Tolerances. fp32: true fp32 products and sums over K <= 3072 terms of size <= 1: worst-case error
// K * 2^-24 ~ 2e-4 absolute, so atol = 1e-5 of the output's largest value (>= 20) and rtol 1e-4.
// bf16: inputs exact, fp32 accumulation, then one or two roundings to bf16 (2^-8 each): rtol 1e-2,
// atol 1e-3 of the largest value, and normwise 5e-3. cuBLASLt's GELU epilogues may evaluate tanh
// their own way: in fp32 builds their check allows 2e-3 (FP32 trainers use our GELU kernels).
#define ATOL_REL TOL(1e-5, 1e-3)
#define RTOL TOL(1e-4, 1e-2)
#define FRO TOL(1e-5, 5e-3)
#define RTOL_EPILOGUE TOL(2e-3, 1e-2)
#define FRO_EPILOGUE TOL(2e-3, 5e-3)

struct Shape {
    const char* name;
    int check_BT, C, OC;
    bool bias;
    bool gelu_out;  // forward applies GELU to the output (the fc layer)
    bool gelu_in;   // the input came through a GELU: backward multiplies dinp by gelu'(pre) (fcproj)
    bool residual;  // the output adds to the residual stream in the epilogue (attproj, fcproj)
};

static bool check(const char* what, const std::vector<float>& got, const std::vector<double>& ref, bool epilogue,
                  double* maxerr) {
    double e;
    bool ok = compare_normwise(what, got, ref, ATOL_REL * max_abs(ref), epilogue ? RTOL_EPILOGUE : RTOL,
                               epilogue ? FRO_EPILOGUE : FRO, &e);
    *maxerr = fmax(*maxerr, e);
    return ok;
}

static void run_shape(MatmulContext* ctx, const Shape& s, int bench_BT, Rng& rng) {
    const int BT = s.check_BT, C = s.C, OC = s.OC;
    cudaStream_t stream = 0;
    // buffers sized for the benchmark; the check uses the first BT rows
    std::vector<float> inp = random_floatX((size_t)bench_BT * C, -1.0f, 1.0f, rng);
    std::vector<float> w = random_floatX((size_t)OC * C, -1.0f, 1.0f, rng);
    std::vector<float> bias = random_floatX(OC, -1.0f, 1.0f, rng);
    std::vector<float> dout = random_floatX((size_t)bench_BT * OC, -1.0f, 1.0f, rng);
    std::vector<float> dw0 = random_floatX((size_t)OC * C, -1.0f, 1.0f, rng);
    std::vector<float> db0 = random_floatX(OC, -1.0f, 1.0f, rng);
    // pre-activation of the input (for gelu_in): GPT-2's range
    std::vector<float> pre_in = random_floatX((size_t)bench_BT * C, -4.0f, 4.0f, rng);
    // the residual stream the projection adds to (GPT-2's residuals grow to tens)
    std::vector<float> residual = random_floatX(s.residual ? (size_t)bench_BT * OC : 0, -20.0f, 20.0f, rng);
    floatX *d_inp = to_device_floatX(inp), *d_w = to_device_floatX(w), *d_bias = to_device_floatX(bias);
    floatX *d_dout = to_device_floatX(dout), *d_dw = to_device_floatX(dw0), *d_db = to_device_floatX(db0);
    floatX* d_pre_in = to_device_floatX(pre_in);
    floatX* d_residual = to_device_floatX(residual);
    floatX *d_out = device_alloc<floatX>((size_t)bench_BT * OC), *d_pre = device_alloc<floatX>((size_t)bench_BT * OC);
    floatX* d_dinp = device_alloc<floatX>((size_t)bench_BT * C);
    float* d_scratch = device_alloc<float>(matmul_backward_scratch_floats(bench_BT, OC));
    const floatX* b = s.bias ? d_bias : NULL;

    // ---- reference
    std::vector<float> wT = transpose(w, OC, C);
    std::vector<double> ref_pre = cpu_gemm(BT, OC, C, inp.data(), C, 1, wT.data());  // inp W^T
    if (s.bias)
        for (int i = 0; i < BT; i++)
            for (int o = 0; o < OC; o++) ref_pre[(size_t)i * OC + o] += bias[o];
    std::vector<double> ref_dinp = cpu_gemm(BT, C, OC, dout.data(), OC, 1, w.data());  // dout W
    std::vector<double> ref_dw = cpu_gemm(OC, C, BT, dout.data(), 1, OC, inp.data());  // dout^T inp
    for (size_t i = 0; i < ref_dw.size(); i++) ref_dw[i] += dw0[i];
    std::vector<double> ref_db(db0.begin(), db0.end());
    for (int i = 0; i < BT; i++)
        for (int o = 0; o < OC; o++) ref_db[o] += dout[(size_t)i * OC + o];

    const int saved_gelu_fusion = ctx->gelu_fusion, saved_bias_grad_fusion = ctx->bias_grad_fusion;
    const int saved_bias_fusion = ctx->bias_fusion;
    char name[128];
    // ---- forward (with GELU or a bias: the epilogues, and the path without them, which
    // ZERO3_GPU_EPILOGUES=0 takes: a plain GEMM, then bias_forward and the GELU kernel)
    const bool fwd_epilogue = s.gelu_out || s.bias;
    for (int fused = 0; fused <= (fwd_epilogue ? 1 : 0); fused++) {
        ctx->gelu_fusion = fused;
        ctx->bias_fusion = fused;
        const long fallbacks = ctx->gelu_fallbacks;
        poison(d_out, (size_t)BT * OC);
        poison(d_pre, (size_t)BT * OC);
        matmul_forward(ctx, d_out, s.gelu_out ? d_pre : NULL, d_inp, d_w, b, BT, C, OC, stream);
        double maxerr = 0.0;
        bool ok;
        if (s.gelu_out) {
            std::vector<double> ref_out(ref_pre.size());
            for (size_t i = 0; i < ref_pre.size(); i++) ref_out[i] = cpu_gelu(ref_pre[i]);
            ok = check("pre_gelu", from_device_floatX(d_pre, (size_t)BT * OC), ref_pre, false, &maxerr);
            ok = check("out", from_device_floatX(d_out, (size_t)BT * OC), ref_out, fused, &maxerr) && ok;
            if (fused && ctx->gelu_fallbacks != fallbacks)
                printf("  note: no cuBLASLt algorithm with the GELU epilogue here: the unfused path ran\n");
        } else {
            ok = check("out", from_device_floatX(d_out, (size_t)BT * OC), ref_pre, false, &maxerr);
        }
        float ms = time_ms([&] { matmul_forward(ctx, d_out, s.gelu_out ? d_pre : NULL, d_inp, d_w, b, bench_BT, C, OC, stream); });
        snprintf(name, sizeof(name), "matmul_forward_%s%s", s.name, fwd_epilogue ? (fused ? "_fused" : "_unfused") : "");
        // bytes: inp, weight read, out written (+ the pre-activation when GELU is fused or applied after)
        report(name, ok, maxerr, ms, ((double)bench_BT * C + (double)C * OC + (s.gelu_out ? 2.0 : 1.0) * bench_BT * OC) * sizeof(floatX),
               2.0 * bench_BT * C * OC);
    }

    // ---- forward into the residual stream: out = residual + inp W^T + bias, rounded once (the sum
    // is formed in fp32 in the epilogue), so the tolerances are those of the plain forward
    for (int fused = 0; s.residual && fused <= (s.bias ? 1 : 0); fused++) {
        ctx->bias_fusion = fused;
        std::vector<double> ref_out(ref_pre);
        for (int i = 0; i < BT; i++)
            for (int o = 0; o < OC; o++) ref_out[(size_t)i * OC + o] += residual[(size_t)i * OC + o];
        poison(d_out, (size_t)BT * OC);
        matmul_residual_forward(ctx, d_out, d_residual, d_inp, d_w, b, BT, C, OC, stream);
        double maxerr = 0.0;
        bool ok = check("out", from_device_floatX(d_out, (size_t)BT * OC), ref_out, false, &maxerr);
        float ms = time_ms([&] { matmul_residual_forward(ctx, d_out, d_residual, d_inp, d_w, b, bench_BT, C, OC, stream); });
        snprintf(name, sizeof(name), "matmul_residual_forward_%s%s", s.name, s.bias ? (fused ? "_fused" : "_unfused") : "");
        // bytes: inp, weight, residual read, out written (the unfused way adds a residual kernel:
        // out written and read again, residual read, sum written: 2 * BT*OC more)
        report(name, ok, maxerr, ms, ((double)bench_BT * C + (double)C * OC + 2.0 * bench_BT * OC) * sizeof(floatX),
               2.0 * bench_BT * C * OC);
    }

    // ---- backward (with gelu_in or a bias: with the DGELU / BGRADB epilogues and the unfused path)
    const bool has_epilogue = s.gelu_in || s.bias;
    for (int fused = 0; fused <= (has_epilogue ? 1 : 0); fused++) {
        ctx->gelu_fusion = fused;
        ctx->bias_grad_fusion = fused;
        const long fallbacks = ctx->gelu_fallbacks, bias_grad_fallbacks = ctx->bias_grad_fallbacks;
        upload_floatX(d_dw, dw0);
        upload_floatX(d_db, db0);
        poison(d_dinp, (size_t)BT * C);
        floatX* dbias = s.bias ? d_db : NULL;
        const floatX* pre = s.gelu_in ? d_pre_in : NULL;
        matmul_backward(ctx, d_dinp, d_dw, dbias, d_scratch, d_dout, d_inp, d_w, pre, BT, C, OC, stream);
        std::vector<double> ref_d = ref_dinp;
        if (s.gelu_in)
            for (int i = 0; i < BT; i++)
                for (int c = 0; c < C; c++) ref_d[(size_t)i * C + c] *= cpu_gelu_derivative(pre_in[(size_t)i * C + c]);
        double maxerr = 0.0;
        std::vector<float> got_dw = from_device_floatX(d_dw, (size_t)OC * C);
        bool ok = check("dinp", from_device_floatX(d_dinp, (size_t)BT * C), ref_d, s.gelu_in && fused, &maxerr);
        ok = check("dweight", got_dw, ref_dw, false, &maxerr) && ok;
        std::vector<float> got_db;
        if (s.bias) {
            got_db = from_device_floatX(d_db, OC);
            ok = check("dbias", got_db, ref_db, false, &maxerr) && ok;
        }
        if (s.gelu_in && fused && ctx->gelu_fallbacks != fallbacks)
            printf("  note: no cuBLASLt algorithm with the DGELU epilogue here: the unfused path ran\n");
        if (s.bias && fused && ctx->bias_grad_fallbacks != bias_grad_fallbacks)
            printf("  note: no cuBLASLt algorithm with the BGRADB epilogue here: bias_backward ran\n");
        // determinism of the accumulated gradients
        upload_floatX(d_dw, dw0);
        upload_floatX(d_db, db0);
        matmul_backward(ctx, d_dinp, d_dw, dbias, d_scratch, d_dout, d_inp, d_w, pre, BT, C, OC, stream);
        if (from_device_floatX(d_dw, (size_t)OC * C) != got_dw || (s.bias && from_device_floatX(d_db, OC) != got_db)) {
            fprintf(stderr, "  matmul_backward: two runs on the same input differ (not deterministic)\n");
            ok = false;
        }
        float ms = time_ms([&] {
            matmul_backward(ctx, d_dinp, d_dw, dbias, d_scratch, d_dout, d_inp, d_w, pre, bench_BT, C, OC, stream);
        });
        snprintf(name, sizeof(name), "matmul_backward_%s%s", s.name, has_epilogue ? (fused ? "_fused" : "_unfused") : "");
        // bytes: dout, inp, weight read, dinp written, dweight read and written (dbias: OC, nothing);
        // the unfused path reads dout once more for dbias (and dinp twice more without DGELU): its
        // time against the fused one shows what the epilogues save
        report(name, ok, maxerr, ms, (2.0 * bench_BT * C + (double)bench_BT * OC + 3.0 * C * OC) * sizeof(floatX),
               4.0 * bench_BT * C * OC);
    }
    ctx->gelu_fusion = saved_gelu_fusion;
    ctx->bias_grad_fusion = saved_bias_grad_fusion;
    ctx->bias_fusion = saved_bias_fusion;
    cudaCheck(cudaFree(d_inp));
    cudaCheck(cudaFree(d_w));
    cudaCheck(cudaFree(d_bias));
    cudaCheck(cudaFree(d_dout));
    cudaCheck(cudaFree(d_dw));
    cudaCheck(cudaFree(d_db));
    cudaCheck(cudaFree(d_pre_in));
    cudaCheck(cudaFree(d_residual));
    cudaCheck(cudaFree(d_out));
    cudaCheck(cudaFree(d_pre));
    cudaCheck(cudaFree(d_dinp));
    cudaCheck(cudaFree(d_scratch));
}

int main() {
    print_device();
    MatmulContext ctx;
    matmul_init(&ctx);
    Rng rng(12345);
    const int bench_BT = SIZE(8 * 1024, 64);
    const Shape shapes[] = {
        {"qkv", SIZE(2048, 64), SIZE(768, 72), SIZE(2304, 216), true, false, false, false},
        {"attproj", SIZE(2048, 64), SIZE(768, 72), SIZE(768, 72), true, false, false, true},
        {"fc", SIZE(2048, 64), SIZE(768, 72), SIZE(3072, 288), true, true, false, false},
        {"fcproj", SIZE(2048, 64), SIZE(3072, 288), SIZE(768, 72), true, false, true, true},
        {"lmhead", SIZE(128, 16), SIZE(768, 72), SIZE(50304, 1024), false, false, false, false},
    };
    printf("checked at the row count in each shape; timed at B*T = %d\n", bench_BT);
    for (const Shape& s : shapes) run_shape(&ctx, s, bench_BT, rng);
    matmul_destroy(&ctx);
    return finish();
}
