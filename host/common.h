// host/common.h: what every piece of host code shares: the process layer below it (../proc.h: errors
// that end every rank cleanly, checked allocation, the clock), small file reads, paths, a
// counter-based RNG and bf16 conversion. Compiled once (common.c), linked into both trainers.
#pragma once
#include <errno.h>
#include <math.h>
#include <stdarg.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include "../proc/proc.h"   // the process: fatal, agree_or_exit, xmalloc, alloc phases, now_seconds
#include "../proc/bf16.h"   // bf16_to_f32, f32_to_bf16
#include "../zero3.h"

#ifdef __cplusplus
extern "C" {
#endif

// A message into err (vsnprintf: a long path shortens the message instead of overflowing).
void set_err(char *err, size_t errlen, const char *fmt, ...) __attribute__((format(printf, 3, 4)));
// A path into buf; -1 when it does not fit (the trainer bounds -o so that its own paths do).
int fmt_path(char *buf, size_t n, const char *fmt, ...) __attribute__((format(printf, 3, 4)));

long long file_size(FILE *f);                                // bytes, or -1
int read_at(FILE *f, long long offset, void *dst, size_t n);  // exactly n bytes at offset, or 0

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
// The sampler's draw: the first token whose cumulative probability exceeds coin (in [0, 1)); the
// last token when rounding leaves the total under coin.
static inline int sample_from(const float *probs, int V, float coin) {
    float cdf = 0.0f;
    for (int i = 0; i < V; i++) { cdf += probs[i]; if (coin < cdf) return i; }
    return V - 1;
}


#ifdef __cplusplus
}
#endif
