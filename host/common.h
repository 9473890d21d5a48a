// host/common.h: what every piece of host code shares: errors that end every rank cleanly (and the
// agreement that makes a failure on some ranks end all of them), checked allocation, small file
// reads, paths, timing, and a counter-based RNG. Compiled once (common.c), linked into both trainers.
#pragma once
#include <errno.h>
#include <math.h>
#include <stdarg.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include "../zero3.h"

#ifdef __cplusplus
extern "C" {
#endif

// ------------------------------------------------------------------------------------------------
// Errors. Two kinds:
//  - fatal(): an error every rank finds the same way (a bad flag, a bad input file that all ranks
//    read). Rank 0 prints one line; every rank shuts the transport down and exits 1. No rank waits
//    on another, so nothing hangs.
//  - fatal_local(): an error only this rank sees (its own shard file, a failed collective). It
//    prints with its rank and takes every other rank down with it (MPI_Abort / NCCL abort).
// The transport (cpu/backend_cpu.c, gpu/backend_nccl.cuh) installs the two hooks.
typedef struct {
    int rank, world;
    void (*shutdown)(void);   // finalize the transport before a collective exit
    void (*abort_all)(void);  // kill every rank (never returns)
} ProcessInfo;
extern ProcessInfo g_proc;

void fatal(const char *fmt, ...) __attribute__((noreturn, format(printf, 1, 2)));
void fatal_local(const char *fmt, ...) __attribute__((noreturn, format(printf, 1, 2)));

// Agreement: every rank calls it after a phase that may fail on some ranks (err = "" on success).
// If any rank failed, all of them exit(1) together, so nothing hangs: when rank 0 failed it alone
// prints (the usual case: every rank read the same file), otherwise each failing rank prints its
// own line with its rank. Two scalar all-reduces; a collective, so every rank must reach it.
void agree_or_exit(const Zero3Backend *be, const char *err);

void *xmalloc(size_t bytes);
void *xcalloc(size_t n, size_t size);

// Out of memory names what asked for it, once. The trainer brackets each phase of large allocations
// that has no collective inside (the model state, the activations, ...) with alloc_phase_begin
// (what the memory is for: the flag or the file) and alloc_phase_end (collective). A failed
// allocation inside a phase -- xmalloc, xcalloc, or a backend's alloc calling alloc_failed -- goes
// straight to agree_or_exit with one line, "out of memory: <what> asked for <bytes> ...", which the
// other ranks meet at alloc_phase_end: every rank exits, one line is printed. Outside a phase the
// failing rank prints the line (naming the last phase's context) and takes the job down.
void alloc_phase_begin(const Zero3Backend *be, const char *fmt, ...) __attribute__((format(printf, 2, 3)));
void alloc_phase_end(void);
// detail: where ("host memory", "GPU memory: 1.2 GiB free of 80 GiB on device 0"). Never returns.
void alloc_failed(size_t bytes, const char *detail) __attribute__((noreturn));

// A message into err (vsnprintf: a long path shortens the message instead of overflowing).
void set_err(char *err, size_t errlen, const char *fmt, ...) __attribute__((format(printf, 3, 4)));
// A path into buf; -1 when it does not fit (the trainer bounds -o so that its own paths do).
int fmt_path(char *buf, size_t n, const char *fmt, ...) __attribute__((format(printf, 3, 4)));

long long file_size(FILE *f);                                // bytes, or -1
int read_at(FILE *f, long long offset, void *dst, size_t n);  // exactly n bytes at offset, or 0
int mul_ok(size_t a, size_t b, size_t *out);                 // a*b without overflow, or 0
double now_seconds(void);                                    // monotonic

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

// bf16 <-> fp32 on the host (model files, checkpoints and tests read and write bf16).
static inline float bf16_to_f32(uint16_t b) {
    uint32_t bits = (uint32_t)b << 16;
    float f;
    memcpy(&f, &bits, 4);
    return f;
}
static inline uint16_t f32_to_bf16(float f) {   // round to nearest even
    uint32_t bits;
    memcpy(&bits, &f, 4);
    if ((bits & 0x7fffffff) > 0x7f800000) return (uint16_t)((bits >> 16) | 0x40);   // NaN stays NaN
    bits += 0x7fff + ((bits >> 16) & 1);
    return (uint16_t)(bits >> 16);
}

#ifdef __cplusplus
}
#endif
