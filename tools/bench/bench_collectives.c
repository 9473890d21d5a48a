/*
tools/bench/bench_collectives.c: what ZeRO-3's collectives cost between the ranks of one machine,
against a memory copy of the same bytes. scripts/bench_cpu.sh --collectives runs it; by hand:

    make bench_collectives
    mpirun -np 2 ./build/bench_collectives [-n ELEMENTS[,ELEMENTS...]] [-reps R]

For each size n (fp32 elements of one unit's gathered buffer; the default is GPT-2 124M's block,
7,087,872, and its embedding unit, 39,383,808), every rank times, started and waited on as the
engine's communication thread does (non-blocking, then MPI_Wait):
    all-gather       MPI_Iallgather: each rank's n/N shard into the n-element buffer of every rank
    reduce-scatter   MPI_Ireduce_scatter_block, fp32 MPI_SUM: n elements in, each rank's n/N
                     summed out, in the schedule of the library's choosing
    by moves         the same sum as the CPU backend makes it (cpu/backend_cpu.c, "sums, made of
                     moves"): MPI_Ialltoall sends part r of every rank's n elements to rank r,
                     which adds its N parts in rank order
and the same two collectives as the trainer runs them, through the CPU backend (cpu/backend_cpu.c:
its communication thread, started and waited on as the engine does), in fp32 and in bf16:
    engine gather    the backend's all-gather
    engine sum       the backend's reduce-scatter (a sum made of moves, as on one machine)
(The same rows at ea66f8e, where the backend made both of reads of the peers' buffers with
process_vm_readv, priced those reads against MPI's transfers: docs/performance.md, "Reading the
peers' memory".)
and, beside them, what a memory copy of the same bytes costs on the same rank at the same moment
(the other ranks copying too, so the memory's bandwidth is shared as in the collective):
    copy             memcpy of the (N-1)/N n elements a rank receives (one read, one write)
    copy+sum         the same bytes read from a second array and added into the shard, as a
                     reduce-scatter must (two reads, one write an element)
(the bf16 rows' copy and copy+sum: the same over the bf16 elements, their sums rounded to bf16)
Each figure is the median of R repetitions (default 5), every rank starting together (a barrier
before each), the slowest rank's time. "x copy" is the collective over its copy: 1.0 means the
library moves the bytes at the machine's copy speed, so a faster collective must copy less (shared
memory read in place), not copy faster.
*/
#include "../../cpu/backend_cpu.h"
#include "../../proc/bf16.h"
#include <mpi.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#define MAX_SIZES 16
static const char *USAGE = "usage: bench_collectives [-n ELEMENTS[,ELEMENTS...]] [-reps R]";

static int cmp_double(const void *a, const void *b) {
    double x = *(const double *)a, y = *(const double *)b;
    return (x > y) - (x < y);
}

// the slowest rank's seconds for each repetition of what(), median over the repetitions
typedef void (*Action)(void *arg);
static double median_seconds(Action what, void *arg, int reps) {
    double t[64];
    for (int r = 0; r < reps; r++) {
        MPI_Barrier(MPI_COMM_WORLD);
        double t0 = MPI_Wtime();
        what(arg);
        double mine = MPI_Wtime() - t0;
        MPI_Allreduce(&mine, &t[r], 1, MPI_DOUBLE, MPI_MAX, MPI_COMM_WORLD);
    }
    qsort(t, reps, sizeof t[0], cmp_double);
    return t[reps / 2];
}

typedef struct { float *full, *full2, *shard; size_t n, shard_n; int N, me; Zero3Backend *be; } Buffers;
static void all_gather(void *p) {
    Buffers *b = p;
    MPI_Request req;
    MPI_Iallgather(b->shard, (int)b->shard_n, MPI_FLOAT, b->full, (int)b->shard_n, MPI_FLOAT, MPI_COMM_WORLD, &req);
    MPI_Wait(&req, MPI_STATUS_IGNORE);
}
static void reduce_scatter(void *p) {
    Buffers *b = p;
    MPI_Request req;
    MPI_Ireduce_scatter_block(b->full, b->shard, (int)b->shard_n, MPI_FLOAT, MPI_SUM, MPI_COMM_WORLD, &req);
    MPI_Wait(&req, MPI_STATUS_IGNORE);
}
// the parts arrive in full2 (N parts of shard_n, in rank order), then are added in rank order
static void by_moves(void *p) {
    Buffers *b = p;
    MPI_Request req;
    MPI_Ialltoall(b->full, (int)b->shard_n, MPI_FLOAT, b->full2, (int)b->shard_n, MPI_FLOAT, MPI_COMM_WORLD, &req);
    MPI_Wait(&req, MPI_STATUS_IGNORE);
    for (size_t i = 0; i < b->shard_n; i++) b->shard[i] = b->full2[i];
    for (int r = 1; r < b->N; r++) {
        const float *part = b->full2 + r * b->shard_n;
        for (size_t i = 0; i < b->shard_n; i++) b->shard[i] += part[i];
    }
}
// what a rank receives: the N - 1 other shards, copied into its full buffer
static void copy(void *p) {
    Buffers *b = p;
    for (int r = 0; r < b->N; r++)
        if (r != b->me) memcpy(b->full + r * b->shard_n, b->full2 + r * b->shard_n, b->shard_n * sizeof(float));
}
// what a reduce-scatter must do at least: the N - 1 other ranks' parts of this shard added into it
static void copy_sum(void *p) {
    Buffers *b = p;
    for (int r = 0; r < b->N; r++) {
        if (r == b->me) continue;
        const float *src = b->full2 + r * b->shard_n;
        float *dst = b->shard;
        for (size_t i = 0; i < b->shard_n; i++) dst[i] += src[i];
    }
}

// the trainer's collectives: through the backend, in its memory, started and waited on as the
// engine does (the bf16 rows use the first half of each fp32 buffer's bytes as bf16 elements)
static void engine_gather(Buffers *b, Zero3DType t) {
    const size_t size = zero3_dtype_size(t);
    b->be->wait(b->be->ctx, b->be->all_gather_start(b->be->ctx, (char *)b->full + (size_t)b->me * b->shard_n * size,
                                                     b->full, b->shard_n, t));
}
static void engine_sum(Buffers *b, Zero3DType t) {
    b->be->wait(b->be->ctx, b->be->reduce_scatter_start(b->be->ctx, b->full2, b->shard, b->shard_n, t));
}
static void engine_gather_f32(void *p) { engine_gather(p, ZERO3_F32); }
static void engine_sum_f32(void *p) { engine_sum(p, ZERO3_F32); }
static void engine_gather_bf16(void *p) { engine_gather(p, ZERO3_BF16); }
static void engine_sum_bf16(void *p) { engine_sum(p, ZERO3_BF16); }
// the bf16 rows' copies: the same bytes, half the fp32 rows'
static void copy_bf16(void *p) {
    Buffers *b = p;
    const size_t bytes = b->shard_n * sizeof(uint16_t);
    for (int r = 0; r < b->N; r++)
        if (r != b->me) memcpy((char *)b->full + r * bytes, (char *)b->full2 + r * bytes, bytes);
}
static void copy_sum_bf16(void *p) {
    Buffers *b = p;
    uint16_t *dst = (uint16_t *)b->shard;
    for (int r = 0; r < b->N; r++) {
        if (r == b->me) continue;
        const uint16_t *src = (const uint16_t *)b->full2 + r * b->shard_n;
        for (size_t i = 0; i < b->shard_n; i++) dst[i] = f32_to_bf16(bf16_to_f32(dst[i]) + bf16_to_f32(src[i]));
    }
}

static int parse_count(const char *text, long long lo, long long hi, long long *out) {
    char *end;
    long long v = strtoll(text, &end, 10);
    if (end == text || *end || v < lo || v > hi) return 0;
    *out = v;
    return 1;
}

int main(int argc, char **argv) {
    Zero3Backend be;
    backend_cpu_init(&be, &argc, &argv);   // MPI, and the backend's communication thread
    int N, me;
    MPI_Comm_size(MPI_COMM_WORLD, &N);
    MPI_Comm_rank(MPI_COMM_WORLD, &me);
    long long sizes[MAX_SIZES] = {7087872, 39383808}, reps = 5;
    int nsizes = 2;
    for (int i = 1; i < argc; i++) {
        const char *flag = argv[i], *val = i + 1 < argc ? argv[i + 1] : NULL;
        if (!val) { if (me == 0) fprintf(stderr, "error: bench_collectives: %s: missing its value (%s)\n", flag, USAGE); backend_cpu_finish(&be); return 1; }
        i++;
        if (!strcmp(flag, "-reps")) {
            if (!parse_count(val, 1, 64, &reps)) { if (me == 0) fprintf(stderr, "error: bench_collectives: -reps: expected an integer in [1, 64], got '%s'\n", val); backend_cpu_finish(&be); return 1; }
        } else if (!strcmp(flag, "-n")) {
            char copy_of[1024];
            snprintf(copy_of, sizeof copy_of, "%s", val);
            nsizes = 0;
            for (char *tok = strtok(copy_of, ","); tok; tok = strtok(NULL, ",")) {
                // at most 2^31 - 1 elements a rank's shard (an MPI count), 1 GiB of fp32 per buffer
                if (nsizes == MAX_SIZES || !parse_count(tok, N, 1LL << 28, &sizes[nsizes])) {
                    if (me == 0) fprintf(stderr, "error: bench_collectives: -n: expected up to %d comma-separated element counts in [%d, %lld], got '%s'\n", MAX_SIZES, N, 1LL << 28, val);
                    backend_cpu_finish(&be);
                    return 1;
                }
                nsizes++;
            }
            if (!nsizes) { if (me == 0) fprintf(stderr, "error: bench_collectives: -n: no element count in '%s'\n", val); backend_cpu_finish(&be); return 1; }
        } else { if (me == 0) fprintf(stderr, "error: bench_collectives: %s: unknown flag (%s)\n", flag, USAGE); backend_cpu_finish(&be); return 1; }
    }
    char path[160];
    backend_cpu_describe(be.ctx, path, sizeof path);
    if (me == 0) printf("bench_collectives: %d ranks, median of %lld, the slowest rank's time; the engine's rows: %s\n", N, reps, path);
    if (me == 0) printf("%12s %-5s %-15s %10s %10s %10s %8s\n", "elements", "type", "collective", "ms", "copy ms", "GB/s", "x copy");
    for (int s = 0; s < nsizes; s++) {
        Buffers b = {.N = N, .me = me, .be = &be};
        b.shard_n = (size_t)(sizes[s] / N);   // the engine pads a unit to a multiple of N: so does this
        b.n = b.shard_n * N;
        b.full = be.alloc(be.ctx, b.n * sizeof(float));
        b.full2 = be.alloc(be.ctx, b.n * sizeof(float));
        b.shard = be.alloc(be.ctx, b.shard_n * sizeof(float));
        if (!b.full || !b.full2 || !b.shard) { fprintf(stderr, "error: bench_collectives: cannot allocate 3 buffers of %zu elements\n", b.n); MPI_Abort(MPI_COMM_WORLD, 1); }
        for (size_t i = 0; i < b.n; i++) b.full[i] = b.full2[i] = (float)(i % 1000) * 1e-3f;   // every page touched
        for (size_t i = 0; i < b.shard_n; i++) b.shard[i] = 1.0f;
        all_gather(&b);   // warm: MPI's first call between two ranks sets up their connection
        const double bytes = (double)(N - 1) * b.shard_n * sizeof(float);   // what a rank receives, fp32
        struct { const char *name; Action run, base; double bytes; } rows[] = {
            {"all-gather", all_gather, copy, bytes}, {"reduce-scatter", reduce_scatter, copy_sum, bytes},
            {"by moves", by_moves, copy_sum, bytes},
            {"engine gather", engine_gather_f32, copy, bytes}, {"engine sum", engine_sum_f32, copy_sum, bytes},
            {"engine gather", engine_gather_bf16, copy_bf16, bytes / 2}, {"engine sum", engine_sum_bf16, copy_sum_bf16, bytes / 2}};
        for (int k = 0; k < 7; k++) {
            double t = median_seconds(rows[k].run, &b, (int)reps), tc = median_seconds(rows[k].base, &b, (int)reps);
            if (me == 0) printf("%12zu %-5s %-15s %10.2f %10.2f %10.2f %8.2f\n", b.n, k < 5 ? "fp32" : "bf16", rows[k].name,
                                t * 1e3, tc * 1e3, rows[k].bytes / t * 1e-9, t / tc);
        }
        be.free(be.ctx, b.full);
        be.free(be.ctx, b.full2);
        be.free(be.ctx, b.shard);
    }
    backend_cpu_finish(&be);
    return 0;
}
