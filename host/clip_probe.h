// host/clip_probe.h: what -clip local does to a step, measured (clip_probe.c).
//
// Clipping by a shard's own norm is the first pitfall of sharded training: every rank sees only
// 1/N of the gradient, so a norm computed there is not the model's norm, and each rank scales its
// gradients by a different coefficient. The probe runs beside a -clip local step and prints
//
//   clip local | coefficient by rank 1 0.5595 1 0.4947 | global clipping: norm 2.9041, coefficient 0.3443 |
//              update off by 2.89% (cosine 0.999652)
//
//   coefficient by rank   what each rank scaled its gradient shard by (G / its own shard's norm)
//   global clipping       the norm of the whole gradient, and the one coefficient every rank should use
//   update off by         |u_local - u_global| / |u_global| over the whole model, where u is the
//                         direction AdamW moves each parameter this step (the weight decay, the same
//                         either way, left out): u_local the one applied, u_global the correct one
//   cosine                the angle between the two
//
// AdamW divides by the running RMS of each gradient element, so a rank whose gradients are scaled by a
// steady factor c moves almost exactly as it would unscaled: the damage is in how the coefficients
// change from step to step, and is small unless they do (docs/primer.md, pitfall 1).
#pragma once
#include <stddef.h>
#include "../zero3.h"

#ifdef __cplusplus
extern "C" {
#endif

typedef struct ClipProbe ClipProbe;

ClipProbe *clip_probe_create(const Zero3 *z);
void clip_probe_destroy(ClipProbe *p);
// Before the optimizer step (collective): keeps this rank's AdamW moments, gathers every rank's
// shard norm; returns the whole gradient's norm.
double clip_probe_before(ClipProbe *p, Zero3 *z, double local_norm);
// After the optimizer step (collective): every rank's coefficient, and the update applied with
// coef_local against the one coef_global would have given (AdamW with beta1, beta2, eps, step t).
void clip_probe_after(ClipProbe *p, Zero3 *z, float coef_local, float coef_global, float beta1, float beta2,
                      float eps, int t);
// Rank 0's line for the step just measured.
void clip_probe_print(const ClipProbe *p);

#ifdef __cplusplus
}
#endif
