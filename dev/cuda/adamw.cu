// Check of the sharded AdamW update (gpu/kernels.cuh): fp32 master weights and moments, gradient in
// floatX (and in fp32, the accumulated-gradient case), working params rewritten in floatX.
// Build: make -C dev/cuda bin/adamw_bf16 (or _fp32); run: dev/cuda/bin/adamw_bf16
#include "common.h"
#include "../../gpu/kernels.cuh"

int main() {
    print_device();
    const size_t n = SIZE(16777259, 100003);  // not a multiple of anything: a shard of arbitrary length
    const float lr = 3e-4f, beta1 = 0.9f, beta2 = 0.95f, eps = 1e-8f, wd = 0.1f, grad_scale = 0.7f;
    const int t = 5;
    Rng rng(77);
    std::vector<float> master = random_float(n, -1.0f, 1.0f, rng);
    std::vector<float> grad = random_floatX(n, -0.01f, 0.01f, rng);
    std::vector<float> m0 = random_float(n, -0.01f, 0.01f, rng);
    std::vector<float> v0 = random_float(n, 1e-6f, 1e-4f, rng);

    // reference in double, the contract's formula (decoupled decay on the old p)
    std::vector<double> ref_p(n), ref_m(n), ref_v(n), ref_px(n);
    const double bc1 = 1.0 - pow((double)beta1, t), bc2 = 1.0 - pow((double)beta2, t);
    for (size_t i = 0; i < n; i++) {
        const double g = (double)grad_scale * grad[i];
        ref_m[i] = (double)beta1 * m0[i] + (1.0 - (double)beta1) * g;
        ref_v[i] = (double)beta2 * v0[i] + (1.0 - (double)beta2) * g * g;
        const double upd = (ref_m[i] / bc1) / (sqrt(ref_v[i] / bc2) + eps);
        ref_p[i] = master[i] - (double)lr * (upd + (double)wd * master[i]);
        ref_px[i] = ref_p[i];
    }

    cudaStream_t stream = 0;
    for (int grad_in_fp32 = 0; grad_in_fp32 <= 1; grad_in_fp32++) {
        float *d_master = to_device_float(master), *d_m = to_device_float(m0), *d_v = to_device_float(v0);
        floatX* d_gx = to_device_floatX(grad);
        float* d_gf = to_device_float(grad);
        floatX* d_params = device_alloc<floatX>(n);
        poison(d_params, n);
        auto run = [&] {
            if (grad_in_fp32) adamw_update<float>(d_master, d_params, d_gf, d_m, d_v, n, lr, beta1, beta2, t, eps, wd, grad_scale, stream);
            else adamw_update<floatX>(d_master, d_params, d_gx, d_m, d_v, n, lr, beta1, beta2, t, eps, wd, grad_scale, stream);
        };
        run();
        // master/m/v: fp32 arithmetic on exact inputs, a handful of roundings: 1e-6 relative is loose.
        // the update is ~lr = 3e-4 per element, so an error in it shows up far above 1e-6 of p.
        // params: master rounded to floatX (bf16: 2^-8 relative).
        double e1, e2, e3, e4;
        bool ok = compare("adamw.master", from_device_float(d_master, n), ref_p, 1e-7, 1e-6, &e1);
        ok = compare("adamw.m", from_device_float(d_m, n), ref_m, 1e-8, 1e-6, &e2) && ok;
        ok = compare("adamw.v", from_device_float(d_v, n), ref_v, 1e-14, 1e-6, &e3) && ok;
        ok = compare("adamw.params", from_device_floatX(d_params, n), ref_px, 1e-7, TOL(1e-6, 5e-3), &e4) && ok;
        float ms = time_ms(run);
        // read g, p, m, v; write p, m, v, params
        const double bytes = n * (double)(grad_in_fp32 ? 4 : sizeof(floatX)) + n * 24.0 + n * (double)sizeof(floatX);
        report(grad_in_fp32 ? "adamw_grad_fp32" : "adamw_grad_floatX", ok, fmax(fmax(e1, e2), fmax(e3, e4)), ms, bytes, 14.0 * n);  // ~14 flops per element (moments, bias correction, sqrt, divide, decay)
        cudaCheck(cudaFree(d_master));
        cudaCheck(cudaFree(d_m));
        cudaCheck(cudaFree(d_v));
        cudaCheck(cudaFree(d_gx));
        cudaCheck(cudaFree(d_gf));
        cudaCheck(cudaFree(d_params));
    }
    return finish();
}
