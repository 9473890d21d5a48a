// train_gpt2_zero3.c: GPT-2 training in fp32 C with OpenMP on the CPU, every parameter reached
// through the ZeRO engine (zero3.c) over MPI. The reference implementation, the CI path, and what
// a learner runs on a laptop:
//
//   ./train_gpt2_zero3 -e d2c64h2t64 -x 50                 one rank
//   mpirun -np 4 ./train_gpt2_zero3 -e d12 -z 3 -o out     four ranks, ZeRO-3
//
// This file only puts the pieces together: the engine's CPU backend (cpu/backend_cpu.c: host
// memory, MPI), the math of each unit (cpu/gpt2_cpu.c, handed in as a GPT2Compute table in
// CPU_BUILD), and the train loop (host/train.c), which runs the passes (host/passes.c) that
// gather, compute, reduce and release every unit. The GPU trainer (train_gpt2_zero3.cu) is the
// same with CUDA pieces.
#include "cpu/backend_cpu.h"
#include "cpu/gpt2_cpu.h"

int main(int argc, char **argv) {
    Zero3Backend be;
    backend_cpu_init(&be, &argc, &argv);
    int rc = train_main(argc, argv, &be, &CPU_BUILD);
    backend_cpu_finish(&be);
    return rc;
}
