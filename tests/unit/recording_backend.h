// tests/unit/recording_backend.h: an engine backend for unit tests that run the real engine and the
// real passes without a transport: rank 0 of 2, host memory, collectives that only copy and are
// complete when started. A test may watch the collectives the engine starts (on_gather,
// on_reduce: the full-size buffer each one reads or fills), and fails through CHECK.
#pragma once
#include "../../host/passes.h"
#include <stdio.h>

static int failures = 0;
#define CHECK(cond, ...) do { if (!(cond)) { failures++; fprintf(stderr, "FAIL: " __VA_ARGS__); fprintf(stderr, "\n"); } } while (0)

static void (*on_gather)(const void *full);   // an all-gather into `full` starts
static void (*on_reduce)(const void *full);   // a reduce-scatter of `full` starts

static void *b_alloc(void *ctx, size_t bytes) { return xcalloc(1, bytes); }
static void b_free(void *ctx, void *p) { free(p); }
static void b_zero(void *ctx, void *p, size_t bytes) { memset(p, 0, bytes); }
static void b_copy(void *ctx, void *dst, const void *src, size_t bytes) { memcpy(dst, src, bytes); }
static int g_handles;
static void *b_all_gather(void *ctx, const void *shard, void *full, size_t n, Zero3DType t) {
    if (on_gather) on_gather(full);
    if (shard != full) memmove(full, shard, n * 4);
    return (void *)(intptr_t)++g_handles;
}
static void *b_reduce_scatter(void *ctx, const void *full, void *shard, size_t n, Zero3DType t) {
    if (on_reduce) on_reduce(full);
    if (shard != full) memmove(shard, full, n * 4);
    return (void *)(intptr_t)++g_handles;
}
static void *b_all_reduce(void *ctx, void *buf, size_t n, Zero3DType t) { return (void *)(intptr_t)++g_handles; }
static void b_wait(void *ctx, void *h) {}
static double b_scalar(void *ctx, double x) { return x; }
static void b_sumsq_add(void *ctx, const void *x, size_t n, Zero3DType t) {}
static double b_sumsq_total(void *ctx) { return 1.0; }
static void b_add(void *ctx, void *dst, const void *src, size_t n, Zero3DType t) {}
static void b_adamw(void *ctx, const Zero3AdamSegment *segs, int nsegs, Zero3DType gt, Zero3DType pt, float lr,
                    float b1, float b2, float eps, float scale, int t) {}

static Zero3Backend recording_backend(void) {
    Zero3Backend be;
    memset(&be, 0, sizeof be);
    be.rank = 0; be.world = 2;
    be.alloc = b_alloc; be.free = b_free; be.zero = b_zero; be.copy_to_host = b_copy; be.copy_to_device = b_copy;
    be.all_gather_start = b_all_gather; be.reduce_scatter_start = b_reduce_scatter; be.all_reduce_start = b_all_reduce;
    be.wait = b_wait; be.all_reduce_scalar = b_scalar; be.sum_squares_add = b_sumsq_add;
    be.sum_squares_total = b_sumsq_total; be.add = b_add; be.adamw = b_adamw;
    return be;
}
