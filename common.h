// common.h: host-side helpers both trainers share: errors that end every rank cleanly, checked
// allocation and file I/O, timing, a counter-based RNG.
#pragma once
#include <errno.h>
#include <stdarg.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <math.h>

// ------------------------------------------------------------------------------------------------
// Errors. Two kinds:
//  - fatal(): an error every rank finds the same way (a bad flag, a bad input file that all ranks
//    read). Rank 0 prints one line; every rank shuts the transport down and exits 1. No rank waits
//    on another, so nothing hangs.
//  - fatal_local(): an error only this rank sees (its own shard file, a failed collective). It
//    prints with its rank and takes every other rank down with it (MPI_Abort / NCCL abort).
// The transport installs the two hooks below.
typedef struct {
    int rank, world;
    void (*shutdown)(void);   // finalize the transport before a collective exit
    void (*abort_all)(void);  // kill every rank (never returns)
} ProcessInfo;
static ProcessInfo g_proc = {0, 1, NULL, NULL};

static void fatal(const char *fmt, ...) __attribute__((noreturn, format(printf, 1, 2)));
static void fatal(const char *fmt, ...) {
    if (g_proc.rank == 0) {
        va_list ap;
        va_start(ap, fmt);
        fprintf(stderr, "error: ");
        vfprintf(stderr, fmt, ap);
        fprintf(stderr, "\n");
        va_end(ap);
        fflush(stderr);
    }
    if (g_proc.shutdown) g_proc.shutdown();
    exit(1);
}

static void fatal_local(const char *fmt, ...) __attribute__((noreturn, format(printf, 1, 2)));
static void fatal_local(const char *fmt, ...) {
    va_list ap;
    va_start(ap, fmt);
    fprintf(stderr, "error (rank %d): ", g_proc.rank);
    vfprintf(stderr, fmt, ap);
    fprintf(stderr, "\n");
    va_end(ap);
    fflush(stderr);
    if (g_proc.abort_all && g_proc.world > 1) g_proc.abort_all();
    exit(1);
}

static void *xmalloc(size_t bytes) {
    void *p = malloc(bytes ? bytes : 1);
    if (!p) fatal_local("out of memory allocating %zu bytes", bytes);
    return p;
}
static void *xcalloc(size_t n, size_t size) {
    void *p = calloc(n ? n : 1, size ? size : 1);
    if (!p) fatal_local("out of memory allocating %zu x %zu bytes", n, size);
    return p;
}

// Size of an open file in bytes, or -1.
static long long file_size(FILE *f) {
    long long here = ftell(f);
    if (fseek(f, 0, SEEK_END) != 0) return -1;
    long long size = ftell(f);
    fseek(f, here, SEEK_SET);
    return size;
}

// Reads exactly n bytes at offset, or returns 0.
static int read_at(FILE *f, long long offset, void *dst, size_t n) {
    if (fseeko(f, (off_t)offset, SEEK_SET) != 0) return 0;
    return fread(dst, 1, n, f) == n;
}

// size_t multiply that reports overflow (returns 0 on overflow)
static int mul_ok(size_t a, size_t b, size_t *out) {
    if (a != 0 && b > SIZE_MAX / a) return 0;
    *out = a * b;
    return 1;
}

static double now_seconds(void) {
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return ts.tv_sec + ts.tv_nsec * 1e-9;
}

// ------------------------------------------------------------------------------------------------
// Counter-based RNG: the value at index i depends only on (seed, i), never on which rank computes
// it or in what order. So a rank can initialize just its own shard and the model is the same on
// any number of ranks. splitmix64 mixes the counter; Box-Muller turns two uniforms into a normal.
static inline uint64_t splitmix64(uint64_t x) {
    x += 0x9E3779B97F4A7C15ull;
    x = (x ^ (x >> 30)) * 0xBF58476D1CE4E5B9ull;
    x = (x ^ (x >> 27)) * 0x94D049BB133111EBull;
    return x ^ (x >> 31);
}
static inline double uniform_at(uint64_t seed, uint64_t i) {   // in (0, 1)
    return ((splitmix64(seed * 0x100000001B3ull ^ splitmix64(i)) >> 11) + 0.5) * (1.0 / 9007199254740992.0);
}
static inline float normal_at(uint64_t seed, uint64_t i) {
    double u1 = uniform_at(seed, 2 * i), u2 = uniform_at(seed, 2 * i + 1);
    return (float)(sqrt(-2.0 * log(u1)) * cos(6.283185307179586 * u2));
}

// Sequential RNG state for sampling (xorshift*), kept in checkpoints.
static inline uint32_t random_u32(uint64_t *state) {
    *state ^= *state >> 12;
    *state ^= *state << 25;
    *state ^= *state >> 27;
    return (uint32_t)((*state * 0x2545F4914F6CDD1Dull) >> 32);
}
static inline float random_f32(uint64_t *state) { return (random_u32(state) >> 8) / 16777216.0f; }
