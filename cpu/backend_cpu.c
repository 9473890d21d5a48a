// cpu/backend_cpu.c: the engine's backend for the CPU trainer: host memory, MPI collectives
// (non-blocking, so a unit's all-gather or reduce-scatter can progress while the next unit
// computes), and the shard math as plain C loops with OpenMP. Built without USE_MPI it is a
// one-rank backend where every collective is a copy.
#include "backend_cpu.h"
#include "../host/common.h"
#ifdef USE_MPI
#include <mpi.h>
#endif
#include <omp.h>

#define CPU_MAX_REQUESTS 128

typedef struct {
#ifdef USE_MPI
    MPI_Request req[CPU_MAX_REQUESTS];
#endif
    int busy[CPU_MAX_REQUESTS];
    // an in-place reduce-scatter lands at the start of the buffer (MPI's convention); on wait it is
    // moved to where the engine expects it (rank*n, NCCL's convention)
    void *move_dst[CPU_MAX_REQUESTS];
    const void *move_src[CPU_MAX_REQUESTS];
    size_t move_bytes[CPU_MAX_REQUESTS];
} CpuComm;

static CpuComm g_cpu_comm;

// The shard group the collectives run in (the world, unless HSDP split it), this rank's place in
// it, and the replica group (the ranks with the same place in their shard groups).
#ifdef USE_MPI
static MPI_Comm g_shard_comm = MPI_COMM_NULL, g_replica_comm = MPI_COMM_NULL;
#endif
static int g_shard_rank = 0, g_shard_size = 1, g_replica_size = 1;

static int cpu_slot(void) {
    for (int i = 0; i < CPU_MAX_REQUESTS; i++)
        if (!g_cpu_comm.busy[i]) {
            g_cpu_comm.busy[i] = 1;
            g_cpu_comm.move_dst[i] = NULL;
            return i;
        }
    fatal_local("too many collectives in flight");
}
// handles are slot index + 1 disguised as pointers (NULL stays "no handle")
static void *slot_handle(int i) { return (void *)(intptr_t)(i + 1); }

static void *cpu_alloc(void *ctx, size_t bytes) { return xcalloc(1, bytes); }
static void cpu_copy(void *ctx, void *dst, const void *src, size_t bytes) { memcpy(dst, src, bytes); }
static void cpu_free(void *ctx, void *p) { free(p); }
static void cpu_zero(void *ctx, void *p, size_t bytes) { memset(p, 0, bytes); }

#ifdef USE_MPI
static MPI_Datatype mpi_type(Zero3DType t) {
    if (t != ZERO3_F32) fatal_local("the CPU backend supports fp32 only");
    return MPI_FLOAT;
}
static void check_mpi(int rc, const char *what) {
    if (rc != MPI_SUCCESS) fatal_local("MPI %s failed (code %d)", what, rc);
}
#endif

static void *cpu_all_gather_start(void *ctx, const void *shard, void *full, size_t n, Zero3DType t) {
    int s = cpu_slot();
    size_t bytes = n * zero3_dtype_size(t);
#ifdef USE_MPI
    if (g_shard_size > 1) {
        if (n > INT32_MAX) fatal_local("shard too large for MPI (%zu elements)", n);
        int in_place = (shard == (const char *)full + (size_t)g_shard_rank * bytes);
        check_mpi(MPI_Iallgather(in_place ? MPI_IN_PLACE : shard, (int)n, mpi_type(t), full, (int)n,
                                 mpi_type(t), g_shard_comm, &g_cpu_comm.req[s]), "all-gather");
        return slot_handle(s);
    }
    g_cpu_comm.req[s] = MPI_REQUEST_NULL;
#endif
    if (full != shard) memmove(full, shard, bytes);
    return slot_handle(s);
}

static void *cpu_reduce_scatter_start(void *ctx, const void *full, void *shard, size_t n, Zero3DType t) {
    int s = cpu_slot();
    size_t bytes = n * zero3_dtype_size(t);
    int in_place = (shard == (const char *)full + (size_t)g_shard_rank * bytes);
#ifdef USE_MPI
    if (g_shard_size > 1) {
        if (n > INT32_MAX) fatal_local("shard too large for MPI (%zu elements)", n);
        if (in_place) {
            check_mpi(MPI_Ireduce_scatter_block(MPI_IN_PLACE, (void *)full, (int)n, mpi_type(t), MPI_SUM,
                                                g_shard_comm, &g_cpu_comm.req[s]), "reduce-scatter");
            g_cpu_comm.move_dst[s] = shard;
            g_cpu_comm.move_src[s] = full;
            g_cpu_comm.move_bytes[s] = bytes;
        } else {
            check_mpi(MPI_Ireduce_scatter_block(full, shard, (int)n, mpi_type(t), MPI_SUM, g_shard_comm,
                                                &g_cpu_comm.req[s]), "reduce-scatter");
        }
        return slot_handle(s);
    }
    g_cpu_comm.req[s] = MPI_REQUEST_NULL;
#endif
    if (!in_place) memmove(shard, full, bytes);
    return slot_handle(s);
}

// An in-place sum over comm (the shard group, or the replica group under HSDP).
static void *all_reduce_in(void *buf, size_t n, Zero3DType t, int comm_size
#ifdef USE_MPI
                           , MPI_Comm comm
#endif
) {
    int s = cpu_slot();
#ifdef USE_MPI
    g_cpu_comm.req[s] = MPI_REQUEST_NULL;
    if (comm_size > 1) {
        if (n > INT32_MAX) fatal_local("buffer too large for MPI (%zu elements)", n);
        check_mpi(MPI_Iallreduce(MPI_IN_PLACE, buf, (int)n, mpi_type(t), MPI_SUM, comm, &g_cpu_comm.req[s]), "all-reduce");
    }
#endif
    return slot_handle(s);
}

#ifdef USE_MPI
static void *cpu_all_reduce_start(void *ctx, void *buf, size_t n, Zero3DType t) { return all_reduce_in(buf, n, t, g_shard_size, g_shard_comm); }
static void *cpu_replica_all_reduce_start(void *ctx, void *buf, size_t n, Zero3DType t) {
    return all_reduce_in(buf, n, t, g_replica_size, g_replica_comm);
}
#else
static void *cpu_all_reduce_start(void *ctx, void *buf, size_t n, Zero3DType t) { return all_reduce_in(buf, n, t, 1); }
static void *cpu_replica_all_reduce_start(void *ctx, void *buf, size_t n, Zero3DType t) { return all_reduce_in(buf, n, t, 1); }
#endif

// HSDP: shard groups of G consecutive ranks (color rank / G), replica groups of the ranks with the
// same rank % G. Both keep the world's order, so rank r is place r % G of its shard group.
static void cpu_make_groups(void *ctx, int G) {
#ifdef USE_MPI
    check_mpi(MPI_Comm_split(MPI_COMM_WORLD, g_proc.rank / G, g_proc.rank, &g_shard_comm), "split (shard groups)");
    check_mpi(MPI_Comm_split(MPI_COMM_WORLD, g_proc.rank % G, g_proc.rank, &g_replica_comm), "split (replica groups)");
    MPI_Comm_set_errhandler(g_shard_comm, MPI_ERRORS_RETURN);
    MPI_Comm_set_errhandler(g_replica_comm, MPI_ERRORS_RETURN);
#endif
    g_shard_rank = g_proc.rank % G;
    g_shard_size = G;
    g_replica_size = g_proc.world / G;
}

static void cpu_wait(void *ctx, void *handle) {
    int s = (int)(intptr_t)handle - 1;
    if (s < 0 || s >= CPU_MAX_REQUESTS || !g_cpu_comm.busy[s]) fatal_local("wait on a bad handle");
#ifdef USE_MPI
    check_mpi(MPI_Wait(&g_cpu_comm.req[s], MPI_STATUS_IGNORE), "wait");
#endif
    if (g_cpu_comm.move_dst[s])
        memmove(g_cpu_comm.move_dst[s], g_cpu_comm.move_src[s], g_cpu_comm.move_bytes[s]);
    g_cpu_comm.busy[s] = 0;
}

static double cpu_all_reduce_scalar(void *ctx, double x) {
#ifdef USE_MPI
    if (g_proc.world > 1) check_mpi(MPI_Allreduce(MPI_IN_PLACE, &x, 1, MPI_DOUBLE, MPI_SUM, MPI_COMM_WORLD), "all-reduce");
#endif
    return x;
}

// Sum of squares in fixed 4096-element chunks, each summed in double, chunks added in order: the
// result does not depend on the number of threads. The spans of one norm add up in g_sum_squares.
static double g_sum_squares;
static void cpu_sum_squares_add(void *ctx, const void *xv, size_t n, Zero3DType t) {
    const float *x = xv;
    size_t nchunks = (n + 4095) / 4096;
    double total = 0.0;
    #pragma omp parallel for ordered schedule(static)
    for (size_t c = 0; c < nchunks; c++) {
        double s = 0.0;
        size_t end = (c + 1) * 4096 < n ? (c + 1) * 4096 : n;
        for (size_t i = c * 4096; i < end; i++) s += (double)x[i] * x[i];
        #pragma omp ordered
        total += s;
    }
    g_sum_squares += total;
}
static double cpu_sum_squares_total(void *ctx) {
    double total = g_sum_squares;
    g_sum_squares = 0.0;
    return total;
}

static void cpu_add(void *ctx, void *dstv, const void *srcv, size_t n, Zero3DType t) {
    float *dst = dstv;
    const float *src = srcv;
    #pragma omp parallel for
    for (size_t i = 0; i < n; i++) dst[i] += src[i];
}

static void cpu_cast_from_f32(void *ctx, void *dst, Zero3DType t, const float *src, size_t n) {
    if (t != ZERO3_F32) fatal_local("the CPU backend supports fp32 only");
    if (dst != src) memcpy(dst, src, n * sizeof(float));
}

// AdamW, decoupled decay applied to the weights before the Adam update (as torch.optim.AdamW).
static void cpu_adamw(void *ctx, float *master, float *m, float *v, const void *gradv, Zero3DType gt,
                      void *params, Zero3DType pt, size_t n, float lr, float beta1, float beta2,
                      float eps, float weight_decay, float grad_scale, int t) {
    const float *grad = gradv;
    float bc1 = 1.0f - powf(beta1, (float)t), bc2 = 1.0f - powf(beta2, (float)t);
    #pragma omp parallel for
    for (size_t i = 0; i < n; i++) {
        float g = grad[i] * grad_scale;
        float mi = beta1 * m[i] + (1.0f - beta1) * g;
        float vi = beta2 * v[i] + (1.0f - beta2) * g * g;
        m[i] = mi;
        v[i] = vi;
        float p = master[i] * (1.0f - lr * weight_decay);
        master[i] = p - lr * (mi / bc1) / (sqrtf(vi / bc2) + eps);
    }
    (void)params; (void)pt;   // fp32 working params are the master copy on the CPU
}

#ifdef USE_MPI
static void cpu_shutdown(void) { MPI_Finalize(); }
static void cpu_abort_all(void) { MPI_Abort(MPI_COMM_WORLD, 1); }
#endif

// Starts the transport (MPI when built with it) and fills the backend table.
void backend_cpu_init(Zero3Backend *be, int *argc, char ***argv) {
#ifdef USE_MPI
    MPI_Init(argc, argv);
    MPI_Comm_rank(MPI_COMM_WORLD, &g_proc.rank);
    MPI_Comm_size(MPI_COMM_WORLD, &g_proc.world);
    // errors come back as codes so that we can report them in one line and abort everyone
    MPI_Comm_set_errhandler(MPI_COMM_WORLD, MPI_ERRORS_RETURN);
    g_shard_comm = MPI_COMM_WORLD;
    g_proc.shutdown = cpu_shutdown;
    g_proc.abort_all = cpu_abort_all;
#endif
    memset(be, 0, sizeof(*be));
    be->rank = g_proc.rank;
    be->world = g_proc.world;
    g_shard_rank = g_proc.rank;
    g_shard_size = g_proc.world;
    be->alloc = cpu_alloc;
    be->free = cpu_free;
    be->zero = cpu_zero;
    be->copy_to_host = cpu_copy;
    be->copy_to_device = cpu_copy;
    be->all_gather_start = cpu_all_gather_start;
    be->reduce_scatter_start = cpu_reduce_scatter_start;
    be->all_reduce_start = cpu_all_reduce_start;
    be->wait = cpu_wait;
    be->make_groups = cpu_make_groups;
    be->replica_all_reduce_start = cpu_replica_all_reduce_start;
    be->all_reduce_scalar = cpu_all_reduce_scalar;
    be->sum_squares_add = cpu_sum_squares_add;
    be->sum_squares_total = cpu_sum_squares_total;
    be->add = cpu_add;
    be->cast_from_f32 = cpu_cast_from_f32;
    be->adamw = cpu_adamw;
}

void backend_cpu_finish(void) {
#ifdef USE_MPI
    MPI_Finalize();
#endif
}
