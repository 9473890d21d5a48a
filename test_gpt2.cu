// test_gpt2.cu: the GPU trainer against the PyTorch reference dump (dev/gpt2_reference.py), the
// same checks test_gpt2.c makes of the CPU trainer (tests/test_checks.h).
//
//   ./test_gpt2cu [dump] [model]               (defaults: dev/ref/tiny.dump dev/ref/tiny_model.bin)
//   scripts/launch.sh -n 2 ./test_gpt2cu ...   N ranks without MPI (mpirun -np N with USE_MPI=1)
//
// Tolerances (|got - ref| <= tol * (|ref| + rms(ref)) per element, as test_gpt2.c): FP32 builds
// hold bounds close to the CPU trainer's own (every kernel computes in fp32; cuBLAS only sums in
// another order). BF16 builds store every activation, weight and gradient in bf16, 2^-8 relative per
// rounding, compounded through the layers and the optimizer steps; their bounds are a few times the
// errors the CPU emulator (dev/cuda/emu) measured on the tiny model. Gradients in BF16 get a loose
// per-element bound plus a per-tensor normwise one (||got - ref|| / ||ref||): a gradient summed in
// two bf16 steps (the tied wte: LM head, then encoder) loses the digits of the rare elements where
// the two terms cancel, which no per-element bound relative to the result can allow for, while any
// real mistake moves the whole tensor.
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
