// gpu/host_glue.h: what the C half of the GPU trainer (gpu/train_host.c, gpu/test_host.c) puts in
// front of the shared train loop: the engine's data types for this precision, the device copies
// checkpoint.h goes through, the model API (gpu/host.h), and master-weight loaders that stage
// through host memory. C only.
#pragma once
#include "host.h"
#include "../gpt2.h"

#if defined(ENABLE_FP32)
#define TRAIN_PARAM_TYPE ZERO3_F32
#define TRAIN_GRAD_TYPE ZERO3_F32
#else
#define TRAIN_PARAM_TYPE ZERO3_BF16
#define TRAIN_GRAD_TYPE ZERO3_BF16
#endif
#define TRAIN_ALIGN 64  // elements: tensors start 128-byte (bf16) / 256-byte (fp32) aligned
#define TRAIN_COPY_TO_HOST(dst, src, bytes) gpu_copy_to_host((dst), (src), (bytes))
#define TRAIN_COPY_TO_DEVICE(dst, src, bytes) gpu_copy_to_device((dst), (src), (bytes))

// gpt2.h's loaders write each rank's master slices with host stores; on the GPU those live in
// device memory, so these stage every slice through a host buffer (gpu/train_host.c). The train
// loop calls them by gpt2.h's names.
void gpu_init_random(const GPT2Config* c, Zero3* z, uint64_t seed);
int gpu_load_owned(const GPT2Config* c, Zero3* z, FILE* f, const char* path, int elem_bytes);
#define gpt2_init_random gpu_init_random
#define gpt2_load_owned gpu_load_owned

Model* model_create(const GPT2Config* cfg, Zero3* z, int B, int T);
#define TRAIN_HAS_STEP_HOOKS 1  // model_step_begin / model_step_end / model_step_note (gpu/host.h)

#include "../train_loop.h"
