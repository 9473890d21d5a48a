// cpu/adamw.h: AdamW on host memory, the one host definition of the update. The CPU backend's
// adamw runs it on every step; the GPU trainer runs it on the host under -oo host (the optimizer
// shard in pinned host memory: gpu/backend_nccl.cuh's host optimizer), where the device kernel
// (gpu/shard_math.cuh's adamw_element) must give the same bits. Per element, as torch.optim.AdamW:
//
//   g = grad * grad_scale
//   m = fma(beta1, m, (1 - beta1) g)          v = fma(beta2, v, ((1 - beta2) g) g)
//   p = p * fma(-lr, wd, 1)                   (decoupled decay first, on the old p)
//   p = p - (lr (m / bc1)) / (sqrt(v / bc2) + eps)
//
// with exactly those three fused multiply-adds; how the rest may fuse is the caller's choice:
//   ADAMW_AS_BUILT  the CPU trainer's: fp32 gradients vectorized with no other fusion (the numbers
//                   fp32 runs have always had); bf16 gradients vectorized, fused as the build's
//                   -march allows (a fifth of a bf16 step otherwise)
//   ADAMW_UNFUSED   vectorized, and every other operation rounded on its own on any machine: what
//                   the GPU kernel's explicitly rounded intrinsics compute, bit for bit
#pragma once
#include "../zero3.h"

#ifdef __cplusplus
extern "C" {
#endif

// One step's constants; bc1, bc2 the bias corrections 1 - beta^t, as the caller computes them (the
// CPU trainer in fp32, the GPU's kernel in double, each keeping its own numbers).
typedef struct { float lr, beta1, beta2, eps, grad_scale, bc1, bc2; } AdamwStep;
typedef enum { ADAMW_AS_BUILT = 0, ADAMW_UNFUSED = 1 } AdamwFusion;

// Every segment's update (zero3.h's Zero3AdamSegment, all of it host memory): master, m, v and,
// where params != master (bf16 working params), the params rounded from the new master.
void adamw_host(const Zero3AdamSegment *segs, int nsegs, Zero3DType grad_type, Zero3DType param_type,
                const AdamwStep *step, AdamwFusion fusion);

#ifdef __cplusplus
}
#endif
