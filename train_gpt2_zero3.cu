// train_gpt2_zero3.cu: GPT-2 training on GPUs: bf16 (or fp32) kernels, cuBLASLt matmuls, NCCL, and
// every parameter reached through the ZeRO engine (zero3.c). The CPU trainer's train_gpt2_zero3.c
// with CUDA pieces: the engine's GPU backend (gpu/backend_nccl.cuh: NCCL on its own stream) and the
// math of each unit on CUDA kernels (gpu/gpt2_gpu.cuh, handed in as a GPT2Compute table in
// GPU_BUILD), under the same train loop (host/train.c) and the same passes (host/passes.c) between
// the same engine verbs. The engine and the host library are C, compiled once and linked.
//
//   ./train_gpt2_zero3cu -e d12 -b 8 -t 1024 -x 50              one GPU
//   mpirun -np 8 ./train_gpt2_zero3cu -e d12 -z 3 -o out          eight GPUs, ZeRO-3
//   scripts/launch.sh -n 2 ./train_gpt2_zero3cu -e d12            without MPI (USE_MPI=0 build)
//
// Precision: -DENABLE_BF16 (default) or -DENABLE_FP32 (gpu/gpt2_gpu.cuh says what each keeps).
#include "gpu/gpt2_gpu.cuh"

int main(int argc, char** argv) {
    Zero3Backend be;
    gpu_backend_init(&be, &argc, &argv);
    int rc = train_main(argc, argv, &be, &GPU_BUILD);
    gpu_backend_finish(&be);
    return rc;
}
