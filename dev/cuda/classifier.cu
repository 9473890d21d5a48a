// Check of the fused classifier (gpu/kernels.cuh): per-token cross-entropy loss and, in place,
// dloss * (softmax - onehot) on the V real columns, zeros on the padded ones.
// Build: make -C dev/cuda bin/classifier_bf16 (or _fp32); run: dev/cuda/bin/classifier_bf16
#include "common.h"
#include "../../gpu/kernels.cuh"

int main() {
    print_device();
    const int B = SIZE(2, 2), T = SIZE(1024, 16), BT = B * T, V = SIZE(50257, 5003), Vp = SIZE(50304, 5120);
    const size_t n = (size_t)BT * Vp;
    Rng rng(99);
    // GPT-2-like logit spread; padded columns get garbage the kernel must ignore
    std::vector<float> logits = random_floatX(n, -6.0f, 6.0f, rng);
    std::vector<int> targets(BT);
    for (int i = 0; i < BT; i++) targets[i] = rng.integer(V);
    const float dloss = 1.0f / BT;

    floatX* d_logits = to_device_floatX(logits);
    int* d_targets = to_device_int(targets);
    float* d_losses = device_alloc<float>(BT);
    cudaStream_t stream = 0;

    std::vector<double> ref_loss(BT), ref_grad(n);
#pragma omp parallel for
    for (int r = 0; r < BT; r++) {
        const float* x = &logits[(size_t)r * Vp];
        double m = -INFINITY, s = 0.0;
        for (int j = 0; j < V; j++) m = fmax(m, (double)x[j]);
        for (int j = 0; j < V; j++) s += exp(x[j] - m);
        ref_loss[r] = log(s) + m - x[targets[r]];
        for (int j = 0; j < Vp; j++)
            ref_grad[(size_t)r * Vp + j] = j < V ? (exp(x[j] - m) / s - (j == targets[r] ? 1.0 : 0.0)) * dloss : 0.0;
    }

    // loss only: the logits must stay as they were
    {
        poison(d_losses, BT);
        fused_classifier(d_logits, d_losses, d_targets, BT, V, Vp, dloss, 0, stream);
        std::vector<double> ref_logits(logits.begin(), logits.end());
        double e1, e2;
        // losses (~11) are fp32 sums of 50257 exps of exact inputs: ~1e-6 relative in both precisions
        bool ok = compare("classifier_loss_only.losses", from_device_float(d_losses, BT), ref_loss, 1e-5, 1e-5, &e1);
        ok = compare("classifier_loss_only.logits_untouched", from_device_floatX(d_logits, n), ref_logits, 0.0, 0.0,
                     &e2) && ok;
        float ms = time_ms([&] { fused_classifier(d_logits, d_losses, d_targets, BT, V, Vp, dloss, 0, stream); });
        report("fused_classifier_loss_only", ok, e1, ms, (double)n * sizeof(floatX), 0);
    }
    // loss and gradient in place
    {
        poison(d_losses, BT);
        fused_classifier(d_logits, d_losses, d_targets, BT, V, Vp, dloss, 1, stream);
        double e1, e2;
        bool ok = compare("fused_classifier.losses", from_device_float(d_losses, BT), ref_loss, 1e-5, 1e-5, &e1);
        // fp32: exp and the 50257-term sum give ~1e-5 relative on each probability; bf16 adds one
        // output rounding (2^-8). atol covers the target column, where p - 1 cancels.
        ok = compare("fused_classifier.dlogits", from_device_floatX(d_logits, n), ref_grad, 1e-6 * dloss,
                     TOL(5e-5, 5e-3), &e2) && ok;
        // timed on its own output: the work does not depend on the values, and they stay finite
        float ms = time_ms([&] { fused_classifier(d_logits, d_losses, d_targets, BT, V, Vp, dloss, 1, stream); });
        report("fused_classifier", ok, fmax(e1, e2), ms, 2.0 * n * sizeof(floatX), 0);
    }
    return finish();
}
