// gpt2_cpu.h: the CPU's GPT-2 math (gpt2_cpu.c) as a compute table, and the CPU
// trainers' build description: what train_gpt2_zero3.c and test_gpt2.c hand to the train loop.
#pragma once
#include "../host/train.h"

#ifdef __cplusplus
extern "C" {
#endif

extern const GPT2Compute GPT2_CPU_COMPUTE;
extern const GPT2Compute GPT2_CPU_COMPUTE_BF16;   // -p bf16: bf16 params and gradients, fp32 activations

// fp32 params and gradients (bf16 with -p bf16, through the second table); 64-element (256-byte) aligned tensors, the same layout as the GPU
// trainer. The including program's flags decide the rest (make DDP=1, the bf16-export build).
#ifdef ZERO3_DDP_ONLY
#define CPU_DDP_ONLY 1
#else
#define CPU_DDP_ONLY 0
#endif
#ifndef TRAIN_EXPORT_VERSION
#define TRAIN_EXPORT_VERSION 3   // model.bin as fp32 (5: bf16, the build tests/test_export.sh uses)
#endif
static const TrainBuild CPU_BUILD = {ZERO3_F32, ZERO3_F32, 64, CPU_DDP_ONLY, TRAIN_EXPORT_VERSION, &GPT2_CPU_COMPUTE,
                                   &GPT2_CPU_COMPUTE_BF16, 1};

#ifdef __cplusplus
}
#endif
