// Check of the standalone GELU kernels (gpu/kernels.cuh), tanh approximation. (The fused GELU
// epilogues of the matmul are checked in matmul.cu.)
// Build: make -C tests/cuda bin/gelu_bf16 (or _fp32); run: tests/cuda/bin/gelu_bf16
#include "common.h"
#include "../../gpu/kernels.cuh"

static double cpu_gelu(double x) {
    const double u = sqrt(2.0 / M_PI) * (x + 0.044715 * x * x * x);
    return 0.5 * x * (1.0 + tanh(u));
}
static double cpu_gelu_derivative(double x) {
    const double u = sqrt(2.0 / M_PI) * (x + 0.044715 * x * x * x);
    const double th = tanh(u);
    return 0.5 * (1.0 + th) + 0.5 * x * (1.0 - th * th) * sqrt(2.0 / M_PI) * (1.0 + 3.0 * 0.044715 * x * x);
}

int main() {
    print_device();
    const int B = SIZE(8, 2), T = SIZE(1024, 64), C = SIZE(768, 72);
    const size_t N = (size_t)B * T * 4 * C;  // the MLP's hidden activation
    Rng rng(7);
    std::vector<float> x = random_floatX(N, -5.0f, 5.0f, rng);  // both tails and the curved middle
    std::vector<float> dout = random_floatX(N, -1.0f, 1.0f, rng);
    floatX *d_x = to_device_floatX(x), *d_dout = to_device_floatX(dout);
    floatX* d_out = device_alloc<floatX>(N);
    cudaStream_t stream = 0;

    // fp32: tanhf is accurate to a few ulp; near x=-5 the 1+tanh cancels, leaving ~1e-7 absolute.
    // bf16: inputs exact, fp32 math, one output rounding (2^-8 relative).
    {
        poison(d_out, N);
        gelu_forward(d_out, d_x, N, stream);
        std::vector<double> ref(N);
        for (size_t i = 0; i < N; i++) ref[i] = cpu_gelu(x[i]);
        double maxerr;
        bool ok = compare("gelu_forward.out", from_device_floatX(d_out, N), ref, TOL(1e-6, 1e-6), TOL(1e-5, 5e-3),
                          &maxerr);
        float ms = time_ms([&] { gelu_forward(d_out, d_x, N, stream); });
        report("gelu_forward", ok, maxerr, ms, 2.0 * N * sizeof(floatX), 8.0 * N);  // tanh form: ~8 flops, tanh as one
    }
    {
        floatX* d_d = to_device_floatX(dout);
        gelu_backward_inplace(d_d, d_x, N, stream);
        std::vector<double> ref(N);
        for (size_t i = 0; i < N; i++) ref[i] = dout[i] * cpu_gelu_derivative(x[i]);
        double maxerr;
        bool ok = compare("gelu_backward.dinp", from_device_floatX(d_d, N), ref, TOL(1e-6, 1e-6), TOL(1e-5, 5e-3),
                          &maxerr);
        float ms = time_ms([&] { gelu_backward_inplace(d_d, d_x, N, stream); });
        report("gelu_backward", ok, maxerr, ms, 3.0 * N * sizeof(floatX), 14.0 * N);
    }
    return finish();
}
