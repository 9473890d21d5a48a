// test_gpt2.c: the CPU trainer against the PyTorch reference dump (dev/gpt2_reference.py).
//
//   ./test_gpt2 [dump] [model]                 (defaults: dev/ref/tiny.dump dev/ref/tiny_model.bin)
//   mpirun -np N ./test_gpt2 ...               N = 1..4
//
// The checks (every stage, A = 1 and 2, activations, gradients, losses, norms, LRs) are shared with
// test_gpt2.cu and live in tests/test_checks.h. The reference computes in float64, so the errors printed
// are this trainer's own fp32 error.
#define TESTING
#include "train_gpt2_zero3.c"
#include "tests/test_checks.h"

// test_checks.h's view of an activation of the last forward
const void *model_activation(Model *m, int k, int layer) {
    static const int slot[] = {A_LN1, A_QKV, A_ATTY, A_RESIDUAL2, A_LN2, A_FCH, A_FCH_GELU, A_RESIDUAL3};
    if (k == TEST_ACT_LNF) return m->acts[A_LNF];
    return k == TEST_ACT_LOGITS ? m->acts[A_LOGITS] : m->layer_acts[layer][slot[k]];
}

int main(int argc, char **argv) {
    Zero3Backend be;
    backend_cpu_init(&be, &argc, &argv);
    // fp32 against a float64 reference (measured figures in the README's testing section):
    // activations, gradients, no normwise bound, grad norm, loss, later train losses
    const Tolerances tol = {1e-5, 5e-5, INFINITY, 5e-5, 1e-5, 1e-5};
    int rc = test_main("test_gpt2", argc, argv, &be, &CPU_BUILD, &tol);
    backend_cpu_finish();
    return rc;
}
