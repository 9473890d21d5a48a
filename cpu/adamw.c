// cpu/adamw.c: AdamW on host memory (cpu/adamw.h has the update and its two fusions).
#include "adamw.h"
#include "../proc/bf16.h"
#include <math.h>
#include <stdint.h>

// One stretch of a segment: the update of every element, in place. The gradient comes in as fp32
// or bf16 (widened exactly); with bf16 working params the new master is rounded into them in the
// same pass, so that each of the five arrays streams through memory once, all together (a pass
// per array, even over a stretch that stays in L1, left the bf16 update a third slower than the
// fp32 one, each pass waiting on one stream). The constants are copied out of the struct and the
// arrays are restrict, so that the loop can be vectorized (16 lanes; the file is compiled with
// -fno-math-errno, so sqrtf can be the vector square root: the same IEEE results, lane by lane).
// Two copies of it are compiled:
//   adamw_stretch_unfused  ADAMW_UNFUSED, and ADAMW_AS_BUILT with fp32 gradients: 16 at a time with
//                          contraction off, so only the three fmaf fuse (the device kernel's
//                          __fmaf_rn) and nothing else does: element by element the results a loop
//                          of one element at a time gives, since vector lanes round as scalars do
//   adamw_stretch_vector   ADAMW_AS_BUILT, bf16: 16 elements at a time, fused as -march allows
typedef struct { float lr, beta1, beta2, eps, grad_scale, weight_decay, bc1, bc2; } AdamStretch;
typedef struct {
    float *restrict master, *restrict m, *restrict v;
    const void *grad;        // fp32 or bf16, as grad_is_bf16 says
    uint16_t *params;        // bf16 working params to round the new master into, or NULL
} AdamArrays;
static inline __attribute__((always_inline)) void adamw_stretch(const AdamStretch *a, AdamArrays s, int grad_is_bf16,
                                                                int round_params, size_t n) {
    const float lr = a->lr, beta1 = a->beta1, beta2 = a->beta2, eps = a->eps, grad_scale = a->grad_scale;
    const float decay = fmaf(-a->lr, a->weight_decay, 1.0f), bc1 = a->bc1, bc2 = a->bc2;
    float *restrict master = s.master, *restrict m = s.m, *restrict v = s.v;
    const float *restrict grad_f32 = (const float *)s.grad;
    const uint16_t *restrict grad_bf16 = (const uint16_t *)s.grad;
    uint16_t *restrict params = s.params;
    for (size_t i = 0; i < n; i++) {
        float g = (grad_is_bf16 ? bf16_to_f32(grad_bf16[i]) : grad_f32[i]) * grad_scale;
        float mi = fmaf(beta1, m[i], (1.0f - beta1) * g);
        float vi = fmaf(beta2, v[i], (1.0f - beta2) * g * g);
        m[i] = mi;
        v[i] = vi;
        float p = master[i] * decay;
        p = p - lr * (mi / bc1) / (sqrtf(vi / bc2) + eps);
        master[i] = p;
        if (round_params) params[i] = f32_to_bf16(p);
    }
}
// grad_is_bf16 and round_params as constants, so that each of the four loops is vectorized on its own
#define ADAMW_FOUR_LOOPS(a, s, grad_is_bf16, n)                                       \
    do {                                                                              \
        if (grad_is_bf16)                                                             \
            (s).params ? adamw_stretch(a, s, 1, 1, n) : adamw_stretch(a, s, 1, 0, n); \
        else                                                                          \
            (s).params ? adamw_stretch(a, s, 0, 1, n) : adamw_stretch(a, s, 0, 0, n); \
    } while (0)
static void adamw_stretch_vector(const AdamStretch *a, AdamArrays s, int grad_is_bf16, size_t n) {
    ADAMW_FOUR_LOOPS(a, s, grad_is_bf16, n);
}
__attribute__((optimize("fp-contract=off")))
static void adamw_stretch_unfused(const AdamStretch *a, AdamArrays s, int grad_is_bf16, size_t n) {
    ADAMW_FOUR_LOOPS(a, s, grad_is_bf16, n);
}

// Segment after segment, each in stretches of ADAM_STRETCH elements split over the threads.
#define ADAM_STRETCH 2048
void adamw_host(const Zero3AdamSegment *segs, int nsegs, Zero3DType gt, Zero3DType pt, const AdamwStep *step,
                AdamwFusion fusion) {
    AdamStretch a = {step->lr, step->beta1, step->beta2, step->eps, step->grad_scale, 0.0f, step->bc1, step->bc2};
    void (*update)(const AdamStretch *, AdamArrays, int, size_t) =
        fusion == ADAMW_UNFUSED || gt == ZERO3_F32 ? adamw_stretch_unfused : adamw_stretch_vector;
    const int grad_is_bf16 = gt == ZERO3_BF16;
    const size_t grad_bytes = zero3_dtype_size(gt);
    for (int s = 0; s < nsegs; s++) {
        float *master = segs[s].master, *m = segs[s].m, *v = segs[s].v;
        const char *grad = (const char *)segs[s].grad;
        uint16_t *params = pt == ZERO3_BF16 && segs[s].params != (void *)master ? segs[s].params : NULL;
        a.weight_decay = segs[s].weight_decay;
        size_t n = segs[s].n, stretches = (n + ADAM_STRETCH - 1) / ADAM_STRETCH;
        #pragma omp parallel for
        for (size_t k = 0; k < stretches; k++) {
            size_t i0 = k * ADAM_STRETCH, len = n - i0 < ADAM_STRETCH ? n - i0 : ADAM_STRETCH;
            AdamArrays arrays = {master + i0, m + i0, v + i0, grad + i0 * grad_bytes, params ? params + i0 : NULL};
            update(&a, arrays, grad_is_bf16, len);
        }
    }
}
