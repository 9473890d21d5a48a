// test_gpt2.cu: the GPU trainer against the PyTorch reference dump (dev/gpt2_reference.py), the
// same checks test_gpt2.c makes of the CPU trainer.
//
//   ./test_gpt2cu [dump] [model]               (defaults: dev/ref/tiny.dump dev/ref/tiny_model.bin)
//   scripts/launch.sh -n 2 ./test_gpt2cu ...   N ranks without MPI (mpirun -np N with USE_MPI=1)
//
// For every ZeRO stage (only 0 in the DDP build) and for A = 1 and 2 micro-steps, on N ranks:
// step 0's activations, logits and loss; step 0's gradients, each rank its owned slice, and the
// global norm; the losses, gradient norms and LRs of the reference's training steps.
//
// The checks read the dump and map gradients to file positions with the shared host code, which is
// C: they live in gpu/test_host.c (compiled as C, like gpu/train_host.c for the trainer). This file
// is the GPU side: train_gpt2_zero3.cu's model and NCCL backend, and main.
#define TESTING
#include "train_gpt2_zero3.cu"

int main(int argc, char** argv) {
    Zero3Backend be;
    gpu_backend_init(&be, &argc, &argv);
    int rc = gpu_test_main(argc, argv, &be, g_proc);
    gpu_backend_finish();
    return rc;
}
