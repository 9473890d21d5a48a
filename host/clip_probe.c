// host/clip_probe.c: the -clip local step measured beside the step global clipping would have made
// (clip_probe.h). Nothing here changes the run: it copies the engine's buffers to the host and sums
// over the ranks.
#include <math.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include "clip_probe.h"
#include "../proc/proc.h"

#define PROBE_MAX_RANKS 8   // coefficients printed one by one up to this many ranks, else min and max

struct ClipProbe {
    float *m0, *v0;        // this rank's AdamW moments before the step (host copies)
    size_t n;              // their length: the engine's optimizer span
    float *grad;           // one segment's gradient, as fp32 on the host
    unsigned char *raw;    // ... as the engine holds it (grad_type)
    size_t seg_max;        // the longest segment: the two buffers' length
    double *coef;          // every rank's coefficient (world of them)
    int world;
    double global_norm, global_coef;
    double off, cosine;    // |u_local - u_global| / |u_global|, and the cosine of the two
};

ClipProbe *clip_probe_create(const Zero3 *z) {
    ClipProbe *p = xcalloc(1, sizeof *p);
    p->n = z->resident.optim_numel;
    p->m0 = xmalloc(p->n * sizeof(float) + 1);
    p->v0 = xmalloc(p->n * sizeof(float) + 1);
    p->world = z->world;
    p->coef = xcalloc((size_t)z->world, sizeof(double));
    return p;
}

void clip_probe_destroy(ClipProbe *p) {
    if (!p) return;
    free(p->m0);
    free(p->v0);
    free(p->grad);
    free(p->raw);
    free(p->coef);
    free(p);
}

double clip_probe_before(ClipProbe *p, Zero3 *z, double local_norm) {
    const Zero3Backend *be = z->be;
    be->copy_to_host(be->ctx, p->m0, z->resident.adam_m, p->n * sizeof(float));
    be->copy_to_host(be->ctx, p->v0, z->resident.adam_v, p->n * sizeof(float));
    p->global_norm = sqrt(be->all_reduce_scalar(be->ctx, local_norm * local_norm));
    return p->global_norm;
}

// The direction AdamW moves one element with gradient g scaled by c, from moments m0, v0 (the Adam
// part of the update: decoupled weight decay does not depend on the gradient).
static double adam_direction(double g, double c, double m0, double v0, double b1, double b2, double eps,
                             double bc1, double bc2) {
    double m = b1 * m0 + (1.0 - b1) * c * g;
    double v = b2 * v0 + (1.0 - b2) * (c * g) * (c * g);
    return (m / bc1) / (sqrt(v / bc2) + eps);
}

// Segment s's gradient, as the optimizer read it, into p->grad as fp32.
static const float *segment_gradient(ClipProbe *p, const Zero3 *z, const Zero3AdamSegment *seg) {
    const size_t gsize = zero3_dtype_size(z->cfg.grad_type);
    if (seg->n > p->seg_max) {
        free(p->grad);
        free(p->raw);
        p->seg_max = seg->n;
        p->grad = xmalloc(seg->n * sizeof(float));
        p->raw = xmalloc(seg->n * gsize);
    }
    z->be->copy_to_host(z->be->ctx, p->raw, seg->grad, seg->n * gsize);
    if (z->cfg.grad_type == ZERO3_F32) return memcpy(p->grad, p->raw, seg->n * sizeof(float));
    for (size_t i = 0; i < seg->n; i++) {   // bf16: the upper half of an fp32
        uint16_t h;
        memcpy(&h, p->raw + 2 * i, 2);
        uint32_t bits = (uint32_t)h << 16;
        memcpy(&p->grad[i], &bits, 4);
    }
    return p->grad;
}

// Over this rank's optimizer span, summed over the ranks: u_l.u_l, u_g.u_g and u_l.u_g.
static void compare_updates(ClipProbe *p, Zero3 *z, double cl, double cg, double b1, double b2, double eps, int t) {
    const Zero3Backend *be = z->be;
    double bc1 = 1.0 - pow(b1, t), bc2 = 1.0 - pow(b2, t), ll = 0, gg = 0, lg = 0;
    for (int s = 0; s < z->adam.count; s++) {
        const Zero3AdamSegment *seg = &z->adam.segs[s];
        const float *g = segment_gradient(p, z, seg);
        size_t k = (size_t)(seg->m - z->resident.adam_m);   // where the segment's moments start
        for (size_t i = 0; i < seg->n; i++) {
            double ul = adam_direction(g[i], cl, p->m0[k + i], p->v0[k + i], b1, b2, eps, bc1, bc2);
            double ug = adam_direction(g[i], cg, p->m0[k + i], p->v0[k + i], b1, b2, eps, bc1, bc2);
            ll += ul * ul; gg += ug * ug; lg += ul * ug;
        }
    }
    ll = be->all_reduce_scalar(be->ctx, ll);
    gg = be->all_reduce_scalar(be->ctx, gg);
    lg = be->all_reduce_scalar(be->ctx, lg);
    double diff2 = ll + gg - 2.0 * lg;
    p->off = gg > 0 ? sqrt(diff2 > 0 ? diff2 : 0.0) / sqrt(gg) : 0.0;
    p->cosine = ll > 0 && gg > 0 ? lg / sqrt(ll * gg) : 1.0;
}

void clip_probe_after(ClipProbe *p, Zero3 *z, float coef_local, float coef_global, float beta1, float beta2,
                      float eps, int t) {
    const Zero3Backend *be = z->be;
    for (int r = 0; r < z->world; r++)   // one scalar each: rank r's coefficient, zero on the others
        p->coef[r] = be->all_reduce_scalar(be->ctx, r == be->rank ? coef_local : 0.0);
    p->global_coef = coef_global;
    compare_updates(p, z, coef_local, coef_global, beta1, beta2, eps, t);
}

void clip_probe_print(const ClipProbe *p) {
    printf("  clip local | coefficient by rank");
    if (p->world <= PROBE_MAX_RANKS) {
        for (int r = 0; r < p->world; r++) printf(" %.4g", p->coef[r]);
    } else {
        double lo = p->coef[0], hi = p->coef[0];
        for (int r = 1; r < p->world; r++) { lo = fmin(lo, p->coef[r]); hi = fmax(hi, p->coef[r]); }
        printf(" %.4g to %.4g", lo, hi);
    }
    printf(" | global clipping: norm %.4f, coefficient %.4g | update off by %.3g%% (cosine %.6f)\n",
           p->global_norm, p->global_coef, 100.0 * p->off, p->cosine);
}
