// test_gpt2.c: the CPU trainer against the PyTorch reference dump (tests/reference/gpt2_reference.py).
//
//   ./test_gpt2 [dump] [model]                 (defaults: tests/reference/dumps/tiny.dump tests/reference/dumps/tiny_model.bin)
//   mpirun -np N ./test_gpt2 ...               N = 1..4
//
// The checks (every stage, A = 1 and 2, activations, gradients, losses, norms, LRs) are shared with
// test_gpt2.cu and live in tests/test_checks.h; they drive the same backend, compute and train loop
// the trainer links. The reference computes in float64, so the errors printed are this trainer's
// own fp32 error.
#include "cpu/backend_cpu.h"
#include "cpu/gpt2_cpu.h"
#include "tests/test_checks.h"

int main(int argc, char **argv) {
    Zero3Backend be;
    backend_cpu_init(&be, &argc, &argv);
    // fp32 against a float64 reference (measured figures in the README's testing section):
    // activations, gradients, no normwise bound, grad norm, loss, later train losses
    const Tolerances tol = {1e-5, 5e-5, INFINITY, 5e-5, 1e-5, 1e-5};
    int rc = test_main("test_gpt2", argc, argv, &be, &CPU_BUILD, &tol);
    backend_cpu_finish(&be);
    return rc;
}
