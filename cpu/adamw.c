// cpu/adamw.c: AdamW on host memory (cpu/adamw.h has the update and its two fusions).
#include "adamw.h"
#include "../proc/bf16.h"
#include <math.h>
#include <stdint.h>

// bf16 spans to and from fp32 (one rounding each way, proc/bf16.h's)
static inline void f32_from_bf16_span(float *dst, const uint16_t *src, size_t n) {
    for (size_t i = 0; i < n; i++) dst[i] = bf16_to_f32(src[i]);
}
static inline void bf16_from_f32_span(uint16_t *dst, const float *src, size_t n) {
    for (size_t i = 0; i < n; i++) dst[i] = f32_to_bf16(src[i]);
}

// One stretch of a segment with fp32 gradients g: the update of every element, in place. The
// constants are copied out of the struct and the arrays are restrict, so that the loop can be
// vectorized (16 lanes; the file is compiled with -fno-math-errno, so sqrtf can be the vector
// square root: the same IEEE results, lane by lane). Two copies of it are compiled:
//   adamw_stretch_unfused  ADAMW_UNFUSED, and ADAMW_AS_BUILT with fp32 gradients: 16 at a time with
//                          contraction off, so only the three fmaf fuse (the device kernel's
//                          __fmaf_rn) and nothing else does: element by element the results a loop
//                          of one element at a time gives, since vector lanes round as scalars do
//   adamw_stretch_vector   ADAMW_AS_BUILT, bf16: 16 elements at a time, fused as -march allows
typedef struct { float lr, beta1, beta2, eps, grad_scale, weight_decay, bc1, bc2; } AdamStretch;
static inline __attribute__((always_inline)) void adamw_stretch(const AdamStretch *a, float *restrict master,
                                                                float *restrict m, float *restrict v,
                                                                const float *restrict grad, size_t n) {
    const float lr = a->lr, beta1 = a->beta1, beta2 = a->beta2, eps = a->eps, grad_scale = a->grad_scale;
    const float decay = fmaf(-a->lr, a->weight_decay, 1.0f), bc1 = a->bc1, bc2 = a->bc2;
    for (size_t i = 0; i < n; i++) {
        float g = grad[i] * grad_scale;
        float mi = fmaf(beta1, m[i], (1.0f - beta1) * g);
        float vi = fmaf(beta2, v[i], (1.0f - beta2) * g * g);
        m[i] = mi;
        v[i] = vi;
        float p = master[i] * decay;
        master[i] = p - lr * (mi / bc1) / (sqrtf(vi / bc2) + eps);
    }
}
static void adamw_stretch_vector(const AdamStretch *a, float *master, float *m, float *v, const float *grad, size_t n) {
    adamw_stretch(a, master, m, v, grad, n);
}
__attribute__((optimize("fp-contract=off")))
static void adamw_stretch_unfused(const AdamStretch *a, float *master, float *m, float *v, const float *grad, size_t n) {
    adamw_stretch(a, master, m, v, grad, n);
}

// Segment after segment, each in stretches of ADAM_STRETCH elements split over the threads: bf16
// gradients are widened (exactly) into an fp32 stretch first, so the update itself is the one fp32
// loop either way; with bf16 working params the updated master is rounded into them.
#define ADAM_STRETCH 2048
void adamw_host(const Zero3AdamSegment *segs, int nsegs, Zero3DType gt, Zero3DType pt, const AdamwStep *step,
                AdamwFusion fusion) {
    AdamStretch a = {step->lr, step->beta1, step->beta2, step->eps, step->grad_scale, 0.0f, step->bc1, step->bc2};
    void (*update)(const AdamStretch *, float *, float *, float *, const float *, size_t) =
        fusion == ADAMW_UNFUSED || gt == ZERO3_F32 ? adamw_stretch_unfused : adamw_stretch_vector;
    for (int s = 0; s < nsegs; s++) {
        float *master = segs[s].master, *m = segs[s].m, *v = segs[s].v;
        const void *grad = segs[s].grad;
        uint16_t *params = pt == ZERO3_BF16 && segs[s].params != (void *)master ? segs[s].params : NULL;
        a.weight_decay = segs[s].weight_decay;
        size_t n = segs[s].n, stretches = (n + ADAM_STRETCH - 1) / ADAM_STRETCH;
        #pragma omp parallel for
        for (size_t k = 0; k < stretches; k++) {
            size_t i0 = k * ADAM_STRETCH, len = n - i0 < ADAM_STRETCH ? n - i0 : ADAM_STRETCH;
            float wide[ADAM_STRETCH];
            const float *g = (const float *)grad + i0;
            if (gt == ZERO3_BF16) {
                f32_from_bf16_span(wide, (const uint16_t *)grad + i0, len);
                g = wide;
            }
            update(&a, master + i0, m + i0, v + i0, g, len);
            if (params) bf16_from_f32_span(params + i0, master + i0, len);
        }
    }
}
