// tests/unit/test_bf16_reduce.c: the CPU backend's bf16 sums over N ranks (run under mpirun, any N)
// against a float64 sum rounded once to bf16 by hand.
//
// Every rank makes every rank's contributions from one seed, so each can compute the reference for
// the elements it receives: the exact sum (in double: the contributions are bf16 with exponents
// within 2^-4..2^4, so a sum of up to 64 of them needs at most 8 + 8 + 6 bits, exact in double and
// in fp32), rounded to 8 significant bits, to nearest even (round_once, by frexp and nearbyint, not
// the code under test). A backend that rounds after each combine (MPI's pairwise reduction with a
// bf16 operator, or the parts added with a rounding after each add) lands elsewhere on a share of
// the elements, and the test says how many elements could tell the two apart (it fails if none can).
//
//   case                        what is checked
//   --------------------------- ---------------------------------------------------------------
//   reduce-scatter              each rank's shard: its chunk's sum over the ranks
//   reduce-scatter in place     the same, with the shard inside the full buffer (rank * n)
//   all-reduce (n % N != 0)     every element on every rank, chunks of uneven length
//   the same, twice in flight   two all-reduces started before either is waited on
//   fp32 reduce-scatter,        on one machine fp32 sums are moves too (proc/mpi_sum.h): each
//   fp32 all-reduce             element against its contributions added in fp32 in rank order (a
//                               plain loop here), and so a shard and an all-reduce's chunk agree
//                               bit for bit; the contributions have full 24-bit mantissas, so
//                               another order lands elsewhere on a share of the elements (counted)
// Output: one "ok" line per case on rank 0, or "FAIL ..." and a non-zero exit.
#include <math.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <mpi.h>
#include "../../cpu/backend_cpu.h"

static int g_rank, g_world, g_failed;

// A bf16 contribution: rank r's element i of buffer `seed`, a pattern of bits (a splitmix hash).
static uint16_t contribution(unsigned seed, int r, size_t i) {
    uint64_t z = (uint64_t)seed * 0x9E3779B97F4A7C15ull + (uint64_t)r * 0xBF58476D1CE4E5B9ull + i * 0x94D049BB133111EBull;
    z = (z ^ (z >> 30)) * 0xBF58476D1CE4E5B9ull;
    z = (z ^ (z >> 27)) * 0x94D049BB133111EBull;
    z ^= z >> 31;
    unsigned sign = (unsigned)(z & 1), exponent = 127 - 4 + (unsigned)((z >> 1) % 9), mantissa = (unsigned)((z >> 8) & 0x7f);
    return (uint16_t)(sign << 15 | exponent << 7 | mantissa);
}
static double widen(uint16_t b) {
    uint32_t bits = (uint32_t)b << 16;
    float f;
    memcpy(&f, &bits, 4);
    return f;
}
// x rounded to bf16's 8 significant bits, to nearest even (the default rounding mode of nearbyint)
static double round_once(double x) {
    if (x == 0.0) return 0.0;
    int e;
    double m = frexp(x, &e);   // 0.5 <= |m| < 1
    return ldexp(nearbyint(ldexp(m, 8)), e - 8);
}
static double exact_sum(unsigned seed, size_t i) {
    double s = 0.0;
    for (int r = 0; r < g_world; r++) s += widen(contribution(seed, r, i));
    return s;
}
// the sum rounded after every add, in rank order: what the test must be able to tell apart
static double rounded_each_add(unsigned seed, size_t i) {
    double s = widen(contribution(seed, 0, i));
    for (int r = 1; r < g_world; r++) s = round_once(s + widen(contribution(seed, r, i)));
    return s;
}

// got[k] against the reference of global element first + k; returns how many elements tell
// rounding once from rounding at each add.
static long check_span(const char *name, unsigned seed, const uint16_t *got, size_t first, size_t n) {
    long telling = 0;
    for (size_t k = 0; k < n; k++) {
        const double want = round_once(exact_sum(seed, first + k));
        telling += rounded_each_add(seed, first + k) != want;
        if (widen(got[k]) != want && !g_failed++)
            fprintf(stderr, "FAIL %s: rank %d element %zu: got %.9g, the float64 sum rounded once is %.9g (exact %.9g)\n",
                    name, g_rank, first + k, widen(got[k]), want, exact_sum(seed, first + k));
    }
    return telling;
}

static uint16_t *contributions(unsigned seed, size_t n) {
    uint16_t *x = malloc(n * sizeof(uint16_t));
    for (size_t i = 0; i < n; i++) x[i] = contribution(seed, g_rank, i);
    return x;
}

// Ends the case: every rank's verdict and the count of telling elements, summed; one line on rank 0.
static void verdict(const char *name, long telling) {
    long total = 0;
    int failed = 0;
    MPI_Allreduce(&telling, &total, 1, MPI_LONG, MPI_SUM, MPI_COMM_WORLD);
    MPI_Allreduce(&g_failed, &failed, 1, MPI_INT, MPI_MAX, MPI_COMM_WORLD);
    if (!failed && total == 0 && g_world > 2) {
        if (g_rank == 0) fprintf(stderr, "FAIL %s: no element tells the sum from %s\n", name,
                                 strncmp(name, "fp32", 4) ? "a rounding at each add" : "the sum in another order");
        failed = 1;
    }
    if (failed) { MPI_Barrier(MPI_COMM_WORLD); exit(1); }
    if (g_rank == 0) printf("ok   %s on %d ranks (%ld elements would differ %s)\n", name, g_world, total,
                            strncmp(name, "fp32", 4) ? "if rounded at each add" : "in another order");
}

// ---- fp32 ----
// rank r's fp32 element i of buffer `seed`: a full mantissa, exponents within 2^-4..2^4
static float contribution_f32(unsigned seed, int r, size_t i) {
    const uint16_t hi = contribution(seed, r, i), lo = contribution(seed + 1000, r, i);
    uint32_t bits = (uint32_t)hi << 16 | lo;
    float f;
    memcpy(&f, &bits, 4);
    return f;
}
// the fp32 sum in rank order, and in the reverse order (what the test must be able to tell apart)
static float sum_in_rank_order(unsigned seed, size_t i) {
    volatile float s = contribution_f32(seed, 0, i);
    for (int r = 1; r < g_world; r++) s = s + contribution_f32(seed, r, i);
    return s;
}
static float sum_in_reverse_order(unsigned seed, size_t i) {
    volatile float s = contribution_f32(seed, g_world - 1, i);
    for (int r = g_world - 2; r >= 0; r--) s = s + contribution_f32(seed, r, i);
    return s;
}
static long check_span_f32(const char *name, unsigned seed, const float *got, size_t first, size_t n) {
    long telling = 0;
    for (size_t k = 0; k < n; k++) {
        const float want = sum_in_rank_order(seed, first + k);
        telling += sum_in_reverse_order(seed, first + k) != want;
        if (memcmp(&got[k], &want, sizeof want) && !g_failed++)
            fprintf(stderr, "FAIL %s: rank %d element %zu: got %.9g, the fp32 sum in rank order is %.9g\n", name, g_rank,
                    first + k, got[k], want);
    }
    return telling;
}
static float *contributions_f32(unsigned seed, size_t n) {
    float *x = malloc(n * sizeof(float));
    for (size_t i = 0; i < n; i++) x[i] = contribution_f32(seed, g_rank, i);
    return x;
}
static void f32_cases(Zero3Backend *be) {
    const size_t n = 4099;
    float *full = contributions_f32(31, n * (size_t)g_world);
    be->wait(be->ctx, be->reduce_scatter_start(be->ctx, full, full + (size_t)g_rank * n, n, ZERO3_F32));
    verdict("fp32 reduce-scatter in place", check_span_f32("fp32 reduce-scatter in place", 31, full + (size_t)g_rank * n,
                                                           (size_t)g_rank * n, n));
    free(full);
    const size_t m = 10007;
    float *a = contributions_f32(41, m);
    be->wait(be->ctx, be->all_reduce_start(be->ctx, a, m, ZERO3_F32));
    verdict("fp32 all-reduce", check_span_f32("fp32 all-reduce", 41, a, 0, m));
    free(a);
}

static void reduce_scatter_case(Zero3Backend *be, int in_place) {
    const size_t n = 4099;   // a shard: not a multiple of the sum's blocks
    const unsigned seed = 11 + (unsigned)in_place;
    uint16_t *full = contributions(seed, n * (size_t)g_world), *own = malloc(n * sizeof(uint16_t));
    uint16_t *shard = in_place ? full + (size_t)g_rank * n : own;
    be->wait(be->ctx, be->reduce_scatter_start(be->ctx, full, shard, n, ZERO3_BF16));
    verdict(in_place ? "reduce-scatter in place" : "reduce-scatter",
            check_span(in_place ? "reduce-scatter in place" : "reduce-scatter", seed, shard, (size_t)g_rank * n, n));
    free(full);
    free(own);
}

static void all_reduce_case(Zero3Backend *be, int twice) {
    const size_t n = 10007 + (size_t)twice;   // prime: chunks of uneven length on any N > 1
    uint16_t *a = contributions(21, n), *b = contributions(22, n);
    void *ha = be->all_reduce_start(be->ctx, a, n, ZERO3_BF16);
    if (twice) {
        void *hb = be->all_reduce_start(be->ctx, b, n, ZERO3_BF16);
        be->wait(be->ctx, ha);
        be->wait(be->ctx, hb);
    } else be->wait(be->ctx, ha);
    const char *name = twice ? "two all-reduces in flight" : "all-reduce";
    long telling = check_span(name, 21, a, 0, n);
    if (twice) telling += check_span(name, 22, b, 0, n);
    verdict(name, telling);
    free(a);
    free(b);
}

int main(int argc, char **argv) {
    Zero3Backend be;
    backend_cpu_init(&be, &argc, &argv);
    g_rank = be.rank;
    g_world = be.world;
    reduce_scatter_case(&be, 0);
    reduce_scatter_case(&be, 1);
    all_reduce_case(&be, 0);
    all_reduce_case(&be, 1);
    f32_cases(&be);
    backend_cpu_finish(&be);
    return 0;
}
