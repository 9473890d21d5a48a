// Check of the fused classifier (gpu/kernels.cuh): per-token cross-entropy loss and, in place,
// dloss * (softmax - onehot) on the V real columns, zeros on the padded ones; and the training split
// the trainer uses: loss + logsumexp in the forward (one read), dlogits elementwise in the backward
// (classifier_backward), the device-side loss sum (loss_accumulate).
// Build: make -C tests/cuda bin/classifier_bf16 (or _fp32); run: tests/cuda/bin/classifier_bf16
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
        report("fused_classifier_loss_only", ok, e1, ms, (double)n * sizeof(floatX), 5.0 * n);  // max, exp, sum: ~5 per logit
    }
    // the training split: forward loss + lse, then the elementwise backward
    {
        float* d_lse = device_alloc<float>(BT);
        float* d_sum = device_alloc<float>(1);
        poison(d_losses, BT);
        poison(d_lse, BT);
        cudaCheck(cudaMemset(d_sum, 0, sizeof(float)));
        fused_classifier(d_logits, d_losses, d_targets, BT, V, Vp, dloss, 0, stream, d_lse);
        loss_accumulate(d_sum, d_losses, BT, stream);
        loss_accumulate(d_sum, d_losses, BT, stream);
        double e1, e2, e3;
        std::vector<double> ref_lse(BT);
        double ref_mean = 0.0;
        for (int r = 0; r < BT; r++) {
            ref_lse[r] = ref_loss[r] + logits[(size_t)r * Vp + targets[r]];
            ref_mean += ref_loss[r] / BT;
        }
        bool ok = compare("classifier_forward.lse", from_device_float(d_lse, BT), ref_lse, 1e-5, 1e-5, &e1);
        // two micro-steps' mean losses, summed in fp32 on the device
        ok = compare("loss_accumulate.sum", from_device_float(d_sum, 1), std::vector<double>{2.0 * ref_mean}, 0.0,
                     1e-5, &e3) && ok;
        const float ms_fwd = time_ms([&] { fused_classifier(d_logits, d_losses, d_targets, BT, V, Vp, dloss, 0, stream, d_lse); });
        report("classifier_forward_lse", ok, fmax(e1, e3), ms_fwd, (double)n * sizeof(floatX), 5.0 * n);
        // keep the logits: the backward overwrites them
        floatX* d_work = device_alloc<floatX>(n);
        cudaCheck(cudaMemcpy(d_work, d_logits, n * sizeof(floatX), cudaMemcpyDeviceToDevice));
        classifier_backward(d_work, d_lse, d_targets, BT, V, Vp, dloss, stream);
        ok = compare("classifier_backward.dlogits", from_device_floatX(d_work, n), ref_grad, 1e-6 * dloss,
                     TOL(5e-5, 5e-3), &e2);
        const float ms_bwd = time_ms([&] {
            cudaCheck(cudaMemcpyAsync(d_work, d_logits, n * sizeof(floatX), cudaMemcpyDeviceToDevice, stream));
            classifier_backward(d_work, d_lse, d_targets, BT, V, Vp, dloss, stream);
        });
        // (the time includes a copy of the logits, which moves as many bytes again)
        report("classifier_backward(+copy)", ok, e2, ms_bwd, 4.0 * n * sizeof(floatX), 4.0 * n);
        cudaCheck(cudaFree(d_work));
        cudaCheck(cudaFree(d_lse));
        cudaCheck(cudaFree(d_sum));
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
        report("fused_classifier", ok, fmax(e1, e2), ms, 2.0 * n * sizeof(floatX), 9.0 * n);
    }
    return finish();
}
