/*
Checks cpu/kernels_bf16.h: the bf16 rounding, and matmul_forward_bf16 / matmul_backward_bf16 on both
paths against a float64 reference.

    gcc -O3 -march=native -fopenmp -o /tmp/test_bf16_kernels tests/unit/test_bf16_kernels.c -lm
    /tmp/test_bf16_kernels [--portable-only]

(tests/test_bf16_kernels.sh builds it for -march=native and x86-64 and plants bugs in copies of the
kernels, which it must catch.) What is checked:
- rounding: f32_to_bf16 against an independent one written here in double arithmetic (scale to 8
  significant bits, or the subnormal quantum 2^-133, and round half to even with nearbyint), on
  specials, ties, subnormals, overflow, and a million random bit patterns; bf16_to_f32 as the exact
  inverse on all 65536 bf16 (every NaN stays a NaN);
- every output element of every product of a linear layer, on shapes that cut tiles, panels,
  row blocks, column blocks and depth blocks unevenly (odd K, K past one depth block, M and N not
  multiples of anything): inputs are random fp32 (full mantissa), rounded here independently to
  bf16 where the kernel rounds, and summed in float64; EVERY element must be within
  bf16_sum_bound (the derivation is at the top of cpu/kernels_bf16.h: fp32 accumulation of K + 1
  exact products, plus one bf16 rounding for dweight and dbias). Gradients start non-zero, so the
  accumulation (+= for dinp, one rounding of old + sum for dweight/dbias) is checked too; dinp
  written instead (GRAD_WRITE, over NaN) must be bitwise dinp added into zeros;
- the two paths agree within twice the bound (each is within the bound of the same exact sum);
- the result is bitwise the same on 1, 2 and 3 OpenMP threads, and nothing is written outside the
  outputs (guard bytes on either side of each).
Without AVX512_BF16 (or with --portable-only) only the portable path runs, and one line says so.
Prints per shape and check the worst error in units of the bound; exits 1 on the first failure.
*/
#include <math.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <omp.h>
#include "../../cpu/kernels_bf16.h"

static int failures = 0;

// ------------------------------------------------------------------------------------------------
// an independent bf16 rounding, in double arithmetic

static double round_to_bf16_ref(float x) {
    if (isnan(x) || isinf(x) || x == 0.0f) return x;
    int e;
    frexp(x, &e);                                   // |x| = m 2^e, m in [0.5, 1)
    double quantum = ldexp(1.0, e - 8 > -133 ? e - 8 : -133);   // 8 significant bits, or subnormal
    double r = nearbyint(x / quantum) * quantum;    // the default rounding mode: half to even
    const double bf16_max = ldexp(255.0, 127 - 7);  // (2 - 2^-7) 2^127
    return fabs(r) > bf16_max ? copysign(INFINITY, x) : r;
}
static float f32_of_bits(uint32_t bits) { float f; memcpy(&f, &bits, 4); return f; }

static void check_rounding(void) {
    uint64_t state = 0x9E3779B97F4A7C15ull;
    long checked = 0, bad = 0;
    uint32_t specials[] = {0, 0x80000000u, 0x3f800000u, 0x3f808000u, 0x3f818000u, 0x3f807fffu, 0x3f808001u,
                           0x7f7fffffu, 0x7f7f7fffu, 0x7f7f8000u, 0xff7f8000u, 0x7f800000u, 0xff800000u,
                           0x00000001u, 0x00008000u, 0x00018000u, 0x007fffffu, 0x80008000u, 0x00800000u};
    for (long i = 0; i < 1000000 + (long)(sizeof(specials) / 4); i++) {
        uint32_t bits;
        if (i < (long)(sizeof(specials) / 4)) bits = specials[i];
        else {
            state ^= state << 13; state ^= state >> 7; state ^= state << 17;
            bits = (uint32_t)(state >> 16);
            if (i % 4 == 0) bits = (bits & 0xffff0000u) | 0x8000u;   // an exact tie
        }
        float x = f32_of_bits(bits);
        if (isnan(x)) continue;   // NaN: below, with all bf16
        double want = round_to_bf16_ref(x), got = bf16_to_f32(f32_to_bf16(x));
        checked++;
        if (got != want && !(want == 0 && got == 0)) {
            if (bad++ < 5) fprintf(stderr, "  rounding: 0x%08x -> %.9g, expected %.9g\n", bits, got, want);
        }
    }
    long nan_bad = 0, exact_bad = 0;
    for (uint32_t b = 0; b < 65536; b++) {
        float x = bf16_to_f32((uint16_t)b);
        if (isnan(x)) nan_bad += !isnan(bf16_to_f32(f32_to_bf16(x)));
        else exact_bad += f32_to_bf16(x) != b || (double)x != round_to_bf16_ref(x);
    }
    nan_bad += !isnan(bf16_to_f32(f32_to_bf16(f32_of_bits(0x7f800001u))));   // a NaN whose top bits look like Inf
    printf("rounding: %ld fp32 values (specials, ties, random) %s; all 65536 bf16 %s\n", checked,
           bad ? "FAIL" : "match the reference", nan_bad || exact_bad ? "FAIL" : "round-trip exactly, NaN stays NaN");
    if (bad || nan_bad || exact_bad) failures++;
}

// ------------------------------------------------------------------------------------------------
// data

static uint64_t rng = 0x2545F4914F6CDD1Dull;
static float uniform(void) {   // [-1, 1), all 24 mantissa bits random
    rng ^= rng << 13; rng ^= rng >> 7; rng ^= rng << 17;
    return (float)((rng >> 40) * (1.0 / (1ull << 24))) * 2.0f - 1.0f;
}
static void *xmalloc_or_die(size_t bytes) {
    void *p = malloc(bytes ? bytes : 1);
    if (!p) { fprintf(stderr, "test_bf16_kernels: out of memory (%zu bytes)\n", bytes); exit(1); }
    return p;
}
static float *random_f32(size_t n) {
    float *x = xmalloc_or_die(n * sizeof(float));
    for (size_t i = 0; i < n; i++) x[i] = uniform();
    return x;
}
static uint16_t *random_bf16(size_t n) {   // random bf16, made by the reference rounding
    uint16_t *x = xmalloc_or_die(n * sizeof(uint16_t));
    for (size_t i = 0; i < n; i++) {
        float r = (float)round_to_bf16_ref(uniform());
        uint32_t bits;
        memcpy(&bits, &r, 4);
        x[i] = (uint16_t)(bits >> 16);
    }
    return x;
}
static double bf16_value(uint16_t b) { uint32_t bits = (uint32_t)b << 16; return f32_of_bits(bits); }

// ------------------------------------------------------------------------------------------------
// the float64 reference of one output element: exact init + sum_k a_k b_k, and S = |init| + sum |a_k b_k|

typedef struct { double sum, S; } RefSum;
typedef struct { const char *what; int bf16_out; double worst; long n; } Check;

// one element against its reference: within bf16_sum_bound, or a failure (the first few printed)
static void check_element(Check *c, int K, RefSum ref, double got, size_t i) {
    double bound = bf16_sum_bound(K + 1, ref.S, ref.sum, c->bf16_out);
    double err = fabs(got - ref.sum), ratio = err / bound;
    c->n++;
    if (!(ratio <= 1.0)) {
        if (failures++ < 8)
            fprintf(stderr, "  FAIL %s[%zu]: got %.9g, reference %.9g, error %.3g > bound %.3g\n", c->what, i, got,
                    ref.sum, err, bound);
    }
    if (ratio > c->worst || ratio != ratio) c->worst = ratio;
}

typedef struct {
    int B, T, C, OC;
    float *inp, *dout, *dinp0;          // fp32 activations; dinp's value before the backward
    uint16_t *w, *bias, *dw0, *db0;     // bf16 parameters; the gradients before the backward
} Case;
typedef struct { float *out, *dinp; uint16_t *dw, *db; } Result;

// Outputs live between GUARD bytes of a known pattern on either side, checked after every call: a
// kernel that writes outside its output (a ragged tile stored whole, say) fails.
#define GUARD 64
#define GUARD_BYTE 0xA5
static void *guarded(size_t bytes) {
    unsigned char *p = xmalloc_or_die(bytes + 2 * GUARD);
    memset(p, GUARD_BYTE, GUARD);
    memset(p + GUARD + bytes, GUARD_BYTE, GUARD);
    return p + GUARD;
}
static int guards_intact(const void *buf, size_t bytes) {
    const unsigned char *p = (const unsigned char *)buf - GUARD;
    for (size_t i = 0; i < GUARD; i++)
        if (p[i] != GUARD_BYTE || p[GUARD + bytes + i] != GUARD_BYTE) return 0;
    return 1;
}
static void free_guarded(void *buf) { free((unsigned char *)buf - GUARD); }

// dinp_into: GRAD_ADD starts dinp at the case's dinp0; GRAD_WRITE at NaN, which must not show through
static Result run_case(const Case *k, Bf16Path path, GradInto dinp_into) {
    int BT = k->B * k->T;
    size_t out_bytes = (size_t)BT * k->OC * 4, dinp_bytes = (size_t)BT * k->C * 4;
    size_t dw_bytes = (size_t)k->OC * k->C * 2, db_bytes = (size_t)k->OC * 2;
    Result r = {guarded(out_bytes), guarded(dinp_bytes), guarded(dw_bytes), guarded(db_bytes)};
    for (size_t i = 0; i < (size_t)BT * k->OC; i++) r.out[i] = NAN;   // must be overwritten
    if (dinp_into == GRAD_ADD) memcpy(r.dinp, k->dinp0, dinp_bytes);
    else for (size_t i = 0; i < (size_t)BT * k->C; i++) r.dinp[i] = NAN;
    memcpy(r.dw, k->dw0, dw_bytes);
    memcpy(r.db, k->db0, db_bytes);
    Bf16Matmul mm = bf16_matmul_new(path);
    matmul_forward_bf16(&mm, r.out, k->inp, k->w, k->bias, k->B, k->T, k->C, k->OC);
    matmul_backward_bf16(&mm, r.dinp, dinp_into, r.dw, r.db, k->dout, k->inp, k->w, k->B, k->T, k->C, k->OC);
    bf16_matmul_free(&mm);
    if (!guards_intact(r.out, out_bytes) || !guards_intact(r.dinp, dinp_bytes) || !guards_intact(r.dw, dw_bytes) ||
        !guards_intact(r.db, db_bytes)) {
        failures++;
        fprintf(stderr, "  FAIL %s: a write outside an output buffer\n", bf16_path_name(path));
    }
    return r;
}
static void free_result(Result r) { free_guarded(r.out); free_guarded(r.dinp); free_guarded(r.dw); free_guarded(r.db); }

// every element of one path's result against the float64 reference
static void check_against_reference(const Case *k, Result r, const char *path_name) {
    int BT = k->B * k->T, C = k->C, OC = k->OC;
    // the operands as the kernel must see them: rounded to bf16 by the reference rounding
    double *inp_b = xmalloc_or_die((size_t)BT * C * 8), *dout_b = xmalloc_or_die((size_t)BT * OC * 8);
    for (size_t i = 0; i < (size_t)BT * C; i++) inp_b[i] = round_to_bf16_ref(k->inp[i]);
    for (size_t i = 0; i < (size_t)BT * OC; i++) dout_b[i] = round_to_bf16_ref(k->dout[i]);
    Check out = {"out", 0, 0, 0}, dinp = {"dinp", 0, 0, 0}, dw = {"dweight", 1, 0, 0}, db = {"dbias", 1, 0, 0};
    for (int bt = 0; bt < BT; bt++)
        for (int o = 0; o < OC; o++) {
            RefSum s = {bf16_value(k->bias[o]), fabs(bf16_value(k->bias[o]))};
            for (int c = 0; c < C; c++) {
                double p = inp_b[(size_t)bt * C + c] * bf16_value(k->w[(size_t)o * C + c]);
                s.sum += p; s.S += fabs(p);
            }
            check_element(&out, C, s, r.out[(size_t)bt * OC + o], (size_t)bt * OC + o);
        }
    for (int bt = 0; bt < BT; bt++)
        for (int c = 0; c < C; c++) {
            double init = k->dinp0[(size_t)bt * C + c];
            RefSum s = {init, fabs(init)};
            for (int o = 0; o < OC; o++) {
                double p = dout_b[(size_t)bt * OC + o] * bf16_value(k->w[(size_t)o * C + c]);
                s.sum += p; s.S += fabs(p);
            }
            check_element(&dinp, OC, s, r.dinp[(size_t)bt * C + c], (size_t)bt * C + c);
        }
    for (int o = 0; o < OC; o++) {
        for (int c = 0; c < C; c++) {
            double init = bf16_value(k->dw0[(size_t)o * C + c]);
            RefSum s = {init, fabs(init)};
            for (int bt = 0; bt < BT; bt++) {
                double p = dout_b[(size_t)bt * OC + o] * inp_b[(size_t)bt * C + c];
                s.sum += p; s.S += fabs(p);
            }
            check_element(&dw, BT, s, bf16_value(r.dw[(size_t)o * C + c]), (size_t)o * C + c);
        }
        double init = bf16_value(k->db0[o]);
        RefSum s = {init, fabs(init)};   // dbias sums dout as it is (fp32, no product, no rounding)
        for (int bt = 0; bt < BT; bt++) { s.sum += k->dout[(size_t)bt * OC + o]; s.S += fabs(k->dout[(size_t)bt * OC + o]); }
        check_element(&db, BT, s, bf16_value(r.db[o]), o);
    }
    printf("  %-22s vs float64: worst error / bound: out %.3f, dinp %.3f, dweight %.3f, dbias %.3f\n", path_name,
           out.worst, dinp.worst, dw.worst, db.worst);
    free(inp_b); free(dout_b);
}

// two paths' results within twice the bound of the exact sum (the triangle inequality): the bound is
// evaluated at the portable result's own magnitude, with S from a float64 pass over the operands
static void check_paths_agree(const Case *k, Result a, Result b) {
    int BT = k->B * k->T, C = k->C, OC = k->OC;
    double worst = 0;
    long n = 0, same_bits = 0;
    #define AGREE(x, y, K, S, bf16_out) do { \
        double x_ = (x), y_ = (y), bound_ = 2 * bf16_sum_bound((K) + 1, (S), fabs(x_) + fabs(x_ - y_), bf16_out); \
        double ratio_ = fabs(x_ - y_) / bound_; n++; same_bits += x_ == y_; \
        if (!(ratio_ <= 1.0) && failures++ < 8) \
            fprintf(stderr, "  FAIL paths disagree: %.9g vs %.9g (bound %.3g)\n", x_, y_, bound_); \
        if (!(ratio_ <= worst)) worst = ratio_; } while (0)
    for (int bt = 0; bt < BT; bt++)
        for (int o = 0; o < OC; o++) {
            double S = fabs(bf16_value(k->bias[o]));
            for (int c = 0; c < C; c++) S += fabs(round_to_bf16_ref(k->inp[(size_t)bt * C + c]) * bf16_value(k->w[(size_t)o * C + c]));
            AGREE(a.out[(size_t)bt * OC + o], b.out[(size_t)bt * OC + o], C, S, 0);
        }
    for (int bt = 0; bt < BT; bt++)
        for (int c = 0; c < C; c++) {
            double S = fabs(k->dinp0[(size_t)bt * C + c]);
            for (int o = 0; o < OC; o++) S += fabs(round_to_bf16_ref(k->dout[(size_t)bt * OC + o]) * bf16_value(k->w[(size_t)o * C + c]));
            AGREE(a.dinp[(size_t)bt * C + c], b.dinp[(size_t)bt * C + c], OC, S, 0);
        }
    for (int o = 0; o < OC; o++)
        for (int c = 0; c < C; c++) {
            double S = fabs(bf16_value(k->dw0[(size_t)o * C + c]));
            for (int bt = 0; bt < BT; bt++)
                S += fabs(round_to_bf16_ref(k->dout[(size_t)bt * OC + o]) * round_to_bf16_ref(k->inp[(size_t)bt * C + c]));
            AGREE(bf16_value(a.dw[(size_t)o * C + c]), bf16_value(b.dw[(size_t)o * C + c]), BT, S, 1);
        }
    for (int o = 0; o < OC; o++) AGREE(bf16_value(a.db[o]), bf16_value(b.db[o]), BT, 0, 1);   // same code: equal
    #undef AGREE
    printf("  paths agree: worst difference / bound %.3f; %ld of %ld elements bitwise equal\n", worst, same_bits, n);
}

static int same_result(const Case *k, Result a, Result b) {
    size_t bt_oc = (size_t)k->B * k->T * k->OC, bt_c = (size_t)k->B * k->T * k->C, oc_c = (size_t)k->OC * k->C;
    return !memcmp(a.out, b.out, bt_oc * 4) && !memcmp(a.dinp, b.dinp, bt_c * 4) && !memcmp(a.dw, b.dw, oc_c * 2) &&
           !memcmp(a.db, b.db, (size_t)k->OC * 2);
}

static void run_shape(int B, int T, int C, int OC, int both_paths) {
    int BT = B * T;
    Case k = {B, T, C, OC, random_f32((size_t)BT * C), random_f32((size_t)BT * OC), random_f32((size_t)BT * C),
              random_bf16((size_t)OC * C), random_bf16(OC), random_bf16((size_t)OC * C), random_bf16(OC)};
    printf("B=%d T=%d C=%d OC=%d\n", B, T, C, OC);
    Bf16Path paths[2] = {BF16_PATH_PORTABLE, BF16_PATH_AVX512};
    Result results[2];
    for (int p = 0; p < 1 + both_paths; p++) {
        omp_set_num_threads(1);
        results[p] = run_case(&k, paths[p], GRAD_ADD);
        check_against_reference(&k, results[p], bf16_path_name(paths[p]));
        for (int threads = 2; threads <= 3; threads++) {
            omp_set_num_threads(threads);
            Result again = run_case(&k, paths[p], GRAD_ADD);
            if (!same_result(&k, results[p], again)) {
                failures++;
                fprintf(stderr, "  FAIL %s: %d threads differ from 1 thread\n", bf16_path_name(paths[p]), threads);
            }
            free_result(again);
        }
        // dinp written (GRAD_WRITE, over NaN) is bitwise dinp added into zeros
        Case zero_init = k;
        zero_init.dinp0 = calloc((size_t)BT * C, sizeof(float));
        if (!zero_init.dinp0) { fprintf(stderr, "out of memory\n"); exit(2); }
        Result written = run_case(&k, paths[p], GRAD_WRITE), added = run_case(&zero_init, paths[p], GRAD_ADD);
        if (memcmp(written.dinp, added.dinp, (size_t)BT * C * sizeof(float))) {
            failures++;
            fprintf(stderr, "  FAIL %s: dinp written differs from dinp added into zeros\n", bf16_path_name(paths[p]));
        }
        free_result(written); free_result(added); free(zero_init.dinp0);
    }
    if (both_paths) { check_paths_agree(&k, results[0], results[1]); free_result(results[1]); }
    free_result(results[0]);
    free(k.inp); free(k.dout); free(k.dinp0); free(k.w); free(k.bias); free(k.dw0); free(k.db0);
}

int main(int argc, char **argv) {
    int portable_only = argc > 1 && !strcmp(argv[1], "--portable-only");
    if (argc > 2 || (argc == 2 && !portable_only)) {
        fprintf(stderr, "usage: test_bf16_kernels [--portable-only]\n");
        return 2;
    }
    int both = !portable_only && bf16_path_available(BF16_PATH_AVX512);
    if (!both)
        printf("test_bf16_kernels: %s: checking the portable path only\n",
               portable_only ? "--portable-only" : "this CPU has no AVX512_BF16");
    check_rounding();
    // B, T, C, OC: tiny; odd everything; K = C past one depth block (512) and odd; M past one row
    // block and N past one column block, both ragged; K = B*T past a depth block; d12-like; then
    // operands packed ahead (3 or more blocks): the forward's A and B, then dweight's B (M = OC)
    const int R = BK_ROW_BLOCK, N = BK_COL_BLOCK;
    const int shapes[][4] = {{1, 1, 1, 1}, {2, 3, 7, 5}, {3, 5, 37, 33}, {1, 13, 515, 70}, {2, 150, 24, 291},
                             {1, R + 7, 33, 40}, {1, 64, 768, 96}, {2, 300, 40, N + 5},
                             {1, 2 * R + 8, 37, 2 * N + 18}, {1, 40, 24, 2 * R + 8}};
    for (size_t s = 0; s < sizeof(shapes) / sizeof(shapes[0]) && !failures; s++)
        run_shape(shapes[s][0], shapes[s][1], shapes[s][2], shapes[s][3], both);
    if (failures) { printf("test_bf16_kernels: FAIL (%d elements or checks out of bound)\n", failures); return 1; }
    printf("test_bf16_kernels: all checks pass (%s)\n", both ? "both paths" : "portable path");
    return 0;
}
