// test_gpt2.cu: the GPU trainer against the PyTorch reference dump (tests/reference/gpt2_reference.py), the
// same checks test_gpt2.c makes of the CPU trainer (tests/test_checks.h).
//
//   ./test_gpt2cu [dump] [model]               (defaults: tests/reference/dumps/tiny.dump tests/reference/dumps/tiny_model.bin)
//   scripts/launch.sh -n 2 ./test_gpt2cu ...   N ranks without MPI (mpirun -np N with USE_MPI=1)
//
// Tolerances (|got - ref| <= tol * (|ref| + rms(ref)) per element, as test_gpt2.c): FP32 builds
// hold bounds close to the CPU trainer's own (every kernel computes in fp32; cuBLAS only sums in
// another order). BF16 builds store every activation, weight and gradient in bf16: a unit roundoff
// u = 2^-8 = 3.9e-3 per rounding. The sums themselves run in fp32 (reduction lengths C, 4C, HS and
// T in the forward, B*T = 384 rows for a weight gradient: at most 384 * 2^-24 = 2e-5, negligible), so
// what counts is the roundings along a path: about 10 per layer forward (layernorm, qkv, attention's
// P, its output, attproj, the residual, layernorm, fc, GELU, fcproj), about twice that backward.
// Independent roundings add like a random walk, sqrt(n) u, with the dumps' 2-3 layers:
//   activations 1e-1:  sqrt(30) u = 2.1e-2 rms; a single element some 4 sigma out: 8.5e-2
//   gradients normwise 3e-2, grad norm 3e-2:  sqrt(60) u = 3.0e-2
//   gradients per element 1.0: only a guard (the cancellation below)
//   loss 2e-3:  a mean over B*T = 384 tokens of per-token errors of a few u and random sign: 4u /
//               sqrt(384) = 8e-4, with 2.5x room
//   later train losses 5e-3:  after the steps the working weights are the fp32 master weights
//               rounded to bf16, u each: the losses move by about u = 3.9e-3
// The CPU emulator (tools/emu) measures errors under these (activations 3.3e-2, normwise 7.3e-3,
// train losses 8e-5 on the small dump). Gradients in BF16 get the loose per-element bound plus the
// per-tensor normwise one (||got - ref|| / ||ref||): a gradient summed in two bf16 steps (the tied
// wte: LM head, then encoder) loses the digits of the rare elements where the two terms cancel,
// which no per-element bound relative to the result can allow for, while any real mistake moves the
// whole tensor.
#include "gpu/gpt2_gpu.cuh"
#include "tests/test_checks.h"

// activations, gradients, gradients normwise, grad norm, loss, later train losses
#if defined(ENABLE_FP32)
static const Tolerances kTolerances = {2e-5, 2e-4, 2e-4, 2e-4, 2e-5, 2e-5};
#else
static const Tolerances kTolerances = {1e-1, 1.0, 3e-2, 3e-2, 2e-3, 5e-3};
#endif

int main(int argc, char** argv) {
    Zero3Backend be;
    gpu_backend_init(&be, &argc, &argv);
    int rc = test_main("test_gpt2cu", argc, argv, &be, &GPU_BUILD, &kTolerances);
    gpu_backend_finish(&be);
    return rc;
}
