// cpu/backend_cpu.c: the engine's backend for the CPU trainer: host memory, MPI collectives run by
// a communication thread (so a unit's all-gather or reduce-scatter progresses while the next unit
// computes), stamps for the timeline, and the shard math as plain C loops with OpenMP. Built
// without USE_MPI it is a one-rank backend where every collective is a copy.
#ifndef _GNU_SOURCE
#define _GNU_SOURCE   // pthread_setname_np
#endif
#include "backend_cpu.h"
#include "../proc/proc.h"
#include "../proc/bf16.h"
#include "../proc/mpi_sum.h"
#include "adamw.h"
#ifdef USE_MPI
#include <mpi.h>
#endif
#include <errno.h>
#include <sys/resource.h>
#include <math.h>
#include <omp.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

#define CPU_MAX_REQUESTS 128
#define CPU_NODE_NAME 64   // the bytes of a node's host name kept per rank

// ------------------------------------------------------------------------------------------------
// The communication thread: the CPU's twin of the GPU's NCCL stream.
//
// MPI's non-blocking collectives move data only while some thread is inside an MPI call, so a
// prefetched all-gather issued before a unit's compute would sit still until the compute thread
// waits for it. With more than one rank, each collective is therefore handed to one worker thread
// per rank that runs them in issue order, one at a time (as a stream does), and drives each to
// completion with MPI_Test while the compute thread works. Between two tests it sleeps a little
// (ZERO3_COMM_POLL_US, default 20 microseconds), so on a machine with as many ranks as cores it
// does not take the cores from the compute; while the compute thread waits for a collective it
// polls without sleeping. wait() blocks on the request's completion (a condition variable).
//
// The worker starts exactly the MPI calls the compute thread would (MPI_Iallgather, and for a sum
// an all-to-all and, for an all-reduce, an all-gather: see sum_start; MPI_Iallreduce for scalars),
// in the same order, so the results are bitwise those without it. (A scalar's non-blocking sum need not add in MPI_Allreduce's order: with
// Open MPI here both agree at 2, 3, 4, 6 and 8 ranks and differ in the last bit at 5.) MPI is initialized with MPI_THREAD_SERIALIZED: only one
// thread at a time calls MPI, and during training that is the worker alone (every collective,
// all_reduce_scalar included, goes through it). A library without that level, or
// ZERO3_COMM_THREAD=0, gets the old path: collectives started and waited on the compute thread.
//
// Stamps (zero3.h): the compute thread stamps "now"; each collective takes two stamps that the
// worker fills when the transfer starts and ends. One mutex guards the queue and the stamps.
//
// Emulated links (-link, -linkx; be->emulate_links): on one machine a collective is a memory copy,
// far faster than a network. With links set, each collective, once its data has moved, is held
// until the ring model's time for its bytes and steps over its ring's slowest link has passed since
// the moment every rank of the ring could start it (the latest of the ranks' "ready" times: when
// each one's link was free and the collective issued, agreed in one more all-reduce of a number).
// The data moved is the same, so results are bitwise those without links; the transfer's stamps
// become that start and the end of the hold, so the timeline and the trace show the network's time.
//
// The watchdog (-ct SECONDS, be->collective_timeout): every collective has a deadline, its start on
// this rank plus the timeout, and every wait for it is bounded:
//   wait                          | bounded by
//   ------------------------------+--------------------------------------------------------------
//   the MPI transfer (drive)      | the deadline: past it, one error line and every rank aborted
//   the emulated link's hold      | the deadline, and a stop signal (it ends within HOLD_SLICE_S)
//   the compute thread's wait     | the deadline plus WAIT_GRACE_S (the worker itself is stuck)
// Past the deadline the rank prints what it waited for (the collective, its unit, the step, its
// peers' nodes) and calls MPI_Abort; a rank the launcher cannot reach (its link is down) ends by
// itself (cpu_abort_all).
// Slow is not down: the deadline is -ct seconds with no byte moved. While a collective waits, drive
// samples the bytes this thread has moved (proc_thread_io_bytes: Open MPI's TCP transport reads and
// writes its messages with readv and writev in the thread that drives it, this one, counted in
// /proc/thread-self/io; the offload's disk thread has its own count), and every byte moved pushes the
// deadline to that moment plus -ct. A link that is down moves none, and ends the run -ct seconds
// after its last byte; a slow one never does. When a collective that waited completes:
//   it paused (no byte for longer than outage_s:   | one stall line, at once (an outage: the link
//   1.5 step times, at least 2 s, at most 5 s)    | was down a while, or a peer stopped)
//   it took longer than report_s, bytes moving     | counted; one "slow link" summary line per
//                                                  | SLOW_EVERY_STEPS steps (the first at once)
// A collective that only moves bytes through shared memory (ranks of one node) shows no progress
// here; its peers' waits are the ones across the network.

enum { OP_GATHER, OP_REDUCE_SCATTER, OP_ALL_REDUCE, OP_SCALAR, OP_ALL_TO_ALL };
enum { IN_SHARD_GROUP, IN_NODE_GROUP, IN_CROSS_GROUP };   // ZeRO++: where a gather or all-to-all runs
enum { SLOT_FREE, SLOT_QUEUED, SLOT_DONE };

typedef struct {
    int kind;
    const void *src;
    void *dst;
    size_t n;
    Zero3DType t;
    int in_place;
    int replica;        // an all-reduce over the replica group (HSDP), not the shard group
    int group;          // ZeRO++: IN_NODE_GROUP or IN_CROSS_GROUP for a gather or an all-to-all
    double scalar;
    int stamp_begin, stamp_end;
    double ready;       // when this rank could start it: issued, and the collectives before it done
    double deadline;    // the last byte moved (at first: ready) + the collective timeout: past it the watchdog
                        // ends the run (the worker moves it on, the compute thread's wait reads it: atomic)
    double idle_max;    // the longest stretch of its wait with no byte moved (drive's samples)
    char unit[40];      // the unit it belongs to (be->label when it was issued; "" for none)
    int step;           // the step it was issued in (be->at_step's)
    unsigned gen;       // the stamp generation the two stamps belong to
    int state;          // SLOT_*, under mu
#ifdef USE_MPI
    MPI_Request req;
#endif
    // an in-place reduce-scatter that MPI sums lands at the start of the buffer (MPI's convention);
    // once complete it is moved to where the engine expects it (rank*n, NCCL's)
    void *move_dst;
    const void *move_src;
    size_t move_bytes;
    // a sum made of moves (sum_start): the parts that arrived, the all-reduce's split (sum_split),
    // and the phase: SUM_PARTS, SUM_GATHER, SUM_DONE
    struct { void *parts; int *split; int phase; } sum;
} CpuOp;

typedef struct {
    CpuOp op[CPU_MAX_REQUESTS];
    int busy[CPU_MAX_REQUESTS];   // handed out, not yet waited on (compute thread only)
    int threaded;                 // the communication thread runs the collectives
    int thread_level_ok;          // the MPI library gave MPI_THREAD_SERIALIZED
    pthread_t thread;
    pthread_mutex_t mu;
    pthread_cond_t work, done;
    int queue[CPU_MAX_REQUESTS], qhead, qlen;
    int stop, started;
    int waiting;                  // the compute thread is blocked in wait (atomic)
    long poll_ns;
    // stamps
    double away_s, away_end;      // the last stretch this process was not running (note_away), and its end
    void *parts;                  // the worker's buffer for a sum's parts (parts_buffer)
    size_t parts_cap;             // its bytes
    double *stamps;
    int nstamps, stamp_cap;
    unsigned gen;
    int last_begin, last_end;
} CpuComm;

// The groups the collectives run in: the shard group (the world, unless HSDP split it) with this
// rank's place in it, the replica group (the ranks with the same place in their shard groups), and
// ZeRO++'s node groups inside the shard group and cross groups across them (make_node_groups).
typedef struct {
#ifdef USE_MPI
    MPI_Comm shard, replica, node, cross;
#endif
    int shard_rank, shard_size, replica_size;
    int node_size, cross_size;
    int one_machine;      // every rank of the world shares this machine (proc/mpi_sum.h's rule)
} CpuGroups;

// MPI sums elements of type t in this run (proc/mpi_sum.h's rule, on this run's machines)
static int mpi_sums_here(const CpuGroups *g, Zero3DType t) { return mpi_sums(t, g->one_machine); }

// The backend's state, reached through every function's ctx (Zero3Backend.ctx): nothing of it is
// the file's, so two backends can live in one process.
struct CpuBackend {
    int rank, world;      // this process among the ranks
    ProcessExits exits;   // how every rank ends from here (proc/proc.h; handed to the error path by the first backend)
    int owns_mpi;         // this backend initialized MPI: it finalizes it
    CpuComm comm;         // the communication thread, its slots and the stamps
    CpuGroups groups;
    struct { int on; Zero3Links links; } links;   // the emulated links (emulate_links), when on
    double sum_squares;   // the spans of one norm added so far (sum_squares_add)
    struct { double *sums; size_t cap; } chunks;   // one span's chunk sums (sum_squares_add), kept
    struct {
        double timeout_s;     // a collective's deadline after its start (0: none)
        double report_s;      // a transfer that waited longer is reported as a stall when it ends
        char unit[40];        // the label of the collectives started from here on
        int step;             // the step they belong to (at_step)
        int (*stop_requested)(void);   // a stop signal arrived? (stop_source; NULL: never asked)
        int holds_off;        // a stop was requested: emulated holds end at once
        char (*nodes)[CPU_NODE_NAME];   // every rank's host name (gathered at start)
        double step_s;        // the run's step time (a running mean of at_step's intervals; 0: none yet; atomic)
        double step_began;    // when the current step began (compute thread)
        struct { int count, first, last, printed_at; double seconds; } slow;   // the slow collectives not yet summarized (worker)
    } watch;
};

// ---- stamps (callers hold mu) ----
static int stamp_new_locked(CpuComm *c, double t) {
    if (c->nstamps == c->stamp_cap) {
        c->stamp_cap = c->stamp_cap ? 2 * c->stamp_cap : 4096;
        c->stamps = realloc(c->stamps, (size_t)c->stamp_cap * sizeof(double));
        if (!c->stamps) fatal_local("out of host memory (stamps)");
    }
    c->stamps[c->nstamps] = t;
    return c->nstamps++;
}
static void stamp_set_locked(CpuComm *c, const CpuOp *o, int which, double t) {
    int i = which ? o->stamp_end : o->stamp_begin;
    if (o->gen == c->gen && i >= 0 && i < c->nstamps) c->stamps[i] = t;
}
static void stamp_set_to(CpuComm *c, const CpuOp *o, int which, double t) {
    pthread_mutex_lock(&c->mu);
    stamp_set_locked(c, o, which, t);
    pthread_mutex_unlock(&c->mu);
}
static void stamp_set(CpuComm *c, const CpuOp *o, int which) { stamp_set_to(c, o, which, now_seconds()); }

static int cpu_stamp(void *ctx) {
    CpuComm *c = &((CpuBackend *)ctx)->comm;
    double t = now_seconds();
    pthread_mutex_lock(&c->mu);
    int i = stamp_new_locked(c, t);
    pthread_mutex_unlock(&c->mu);
    return i;
}
static void cpu_comm_stamps(void *ctx, int *begin, int *end) {
    const CpuComm *c = &((CpuBackend *)ctx)->comm;
    *begin = c->last_begin;
    *end = c->last_end;
}
static void cpu_stamps_read(void *ctx, double *seconds, int n) {
    CpuComm *c = &((CpuBackend *)ctx)->comm;
    pthread_mutex_lock(&c->mu);
    for (int i = 0; i < n; i++) seconds[i] = i < c->nstamps ? c->stamps[i] : 0.0;
    c->nstamps = 0;
    c->gen++;
    pthread_mutex_unlock(&c->mu);
}

// A slot for a new collective, with its two communication-side stamps (filled when it runs).
static int cpu_slot(CpuComm *c) {
    for (int i = 0; i < CPU_MAX_REQUESTS; i++)
        if (!c->busy[i]) {
            c->busy[i] = 1;
            CpuOp *o = &c->op[i];
            memset(o, 0, sizeof(*o));
            double t = now_seconds();
            pthread_mutex_lock(&c->mu);
            o->stamp_begin = stamp_new_locked(c, t);
            o->stamp_end = stamp_new_locked(c, t);
            o->gen = c->gen;
            o->state = SLOT_QUEUED;
            pthread_mutex_unlock(&c->mu);
            c->last_begin = o->stamp_begin;
            c->last_end = o->stamp_end;
#ifdef USE_MPI
            o->req = MPI_REQUEST_NULL;
#endif
            return i;
        }
    fatal_local("too many collectives in flight");
}
// handles are slot index + 1 disguised as pointers (NULL stays "no handle")
static void *slot_handle(int i) { return (void *)(intptr_t)(i + 1); }
// the slots started and not yet waited on (the engine's step-end invariant wants none)
static int cpu_collectives_in_flight(void *ctx) {
    const CpuComm *c = &((CpuBackend *)ctx)->comm;
    int n = 0;
    for (int i = 0; i < CPU_MAX_REQUESTS; i++) n += c->busy[i] != 0;
    return n;
}

static void *cpu_alloc(void *ctx, size_t bytes) { return xcalloc(1, bytes); }
static void cpu_copy(void *ctx, void *dst, const void *src, size_t bytes) { memcpy(dst, src, bytes); }
static void cpu_free(void *ctx, void *p) { free(p); }
static void cpu_zero(void *ctx, void *p, size_t bytes) { memset(p, 0, bytes); }

#ifdef USE_MPI
static MPI_Datatype mpi_type(Zero3DType t) {
    if (t == ZERO3_I8) return MPI_BYTE;   // ZeRO++'s packed codes and scales: moved, never summed
    return t == ZERO3_BF16 ? MPI_UINT16_T : MPI_FLOAT;
}

static void check_mpi(int rc, const char *what) {
    if (rc != MPI_SUCCESS) fatal_local("MPI %s failed (code %d)", what, rc);
}

// The communicator a collective runs in.
static MPI_Comm op_comm(const CpuGroups *g, const CpuOp *o) {
    if (o->kind == OP_SCALAR) return MPI_COMM_WORLD;
    if (o->kind == OP_ALL_REDUCE) return o->replica ? g->replica : g->shard;
    return o->group == IN_NODE_GROUP ? g->node : o->group == IN_CROSS_GROUP ? g->cross : g->shard;
}

// ---- sums, made of moves ----
// MPI's reductions combine the ranks' contributions pairwise in an order and on ranks of the
// library's choosing, and a bf16 operator would round after every combine: N - 1 roundings, in an
// order that changes with the algorithm. Inside one machine Open MPI's non-blocking reduce-scatter
// (libnbc) also reduces the whole unit onto rank 0 along a binomial tree and then scatters it:
// rank 0 receives N - 1 whole buffers and adds them all while the others wait. So a bf16 sum
// anywhere, and an fp32 sum when every rank shares one machine (proc/mpi_sum.h: the rule, which
// the peak planner reads too), moves the parts and adds them where they land:
//   reduce-scatter  an all-to-all sends chunk r of every rank's buffer to rank r; each rank adds
//                   its N parts in rank order (bf16: in fp32, rounded once), into its shard
//   all-reduce      the same over N near-equal chunks of the buffer (the first n % N one longer),
//                   then an all-gather of the summed chunks into every rank's buffer
// Each phase a rank sends (N - 1)/N of the buffer, as a ring does, so the bytes are the ring
// model's, every rank adds an Nth of the sum, and each element's sum depends only on the
// contributions, in rank order: a reduce-scatter's shard and an all-reduce's chunk hold the same
// bits for the same element, whatever the library's algorithms. Across machines the all-to-all
// does not see the nodes (at 2 ranks a node each rank sends half its buffer out of the node, 4/3
// of a ring's bytes there), so an fp32 sum there stays MPI's.
enum { SUM_PARTS, SUM_GATHER, SUM_DONE };

static int sum_by_moves(const CpuGroups *g, const CpuOp *o) {
    return (o->kind == OP_REDUCE_SCATTER || o->kind == OP_ALL_REDUCE) && !mpi_sums_here(g, o->t);
}

// dst[i] = the sum of parts[r*n + i] over r = 0..N-1, in rank order; bf16 parts are added in fp32
// and rounded once (in blocks of fp32 sums, so that the adds vectorize; each element's order is
// the same either way).
#define SUM_BLOCK 1024
static void add_parts(void *dst, const void *received, int N, size_t n, Zero3DType t) {
    if (t != ZERO3_BF16) {
        float *d = dst;
        const float *parts = received;
        for (size_t i = 0; i < n; i++) d[i] = parts[i];
        for (int r = 1; r < N; r++) {
            const float *part = parts + (size_t)r * n;
            for (size_t i = 0; i < n; i++) d[i] += part[i];
        }
        return;
    }
    uint16_t *d = dst;
    const uint16_t *parts = received;
    float sum[SUM_BLOCK];
    for (size_t i0 = 0; i0 < n; i0 += SUM_BLOCK) {
        const size_t len = n - i0 < SUM_BLOCK ? n - i0 : SUM_BLOCK;
        for (size_t i = 0; i < len; i++) sum[i] = bf16_to_f32(parts[i0 + i]);
        for (int r = 1; r < N; r++) {
            const uint16_t *part = parts + (size_t)r * n + i0;
            for (size_t i = 0; i < len; i++) sum[i] += bf16_to_f32(part[i]);
        }
        for (size_t i = 0; i < len; i++) d[i0 + i] = f32_to_bf16(sum[i]);
    }
}

// The all-reduce's split of an n-element buffer over N ranks, 4N ints: each rank's chunk (count,
// offset) as sent, then this rank's parts as received (N of its own count, one after another).
static int *sum_split(size_t n, int N, int me) {
    int *split = xmalloc(4 * (size_t)N * sizeof(int));
    int *count = split, *offset = split + N, *rcount = split + 2 * N, *roffset = split + 3 * N;
    for (int r = 0, at = 0; r < N; r++) {
        count[r] = (int)(n / (size_t)N) + (r < (int)(n % (size_t)N));
        offset[r] = at;
        at += count[r];
    }
    for (int r = 0; r < N; r++) { rcount[r] = count[me]; roffset[r] = r * count[me]; }
    return split;
}

// The buffer the parts arrive in: the worker's own, kept and grown (it runs one collective at a
// time, and a fresh buffer of a unit's size each time would be zeroed by the kernel page by page),
// or, where collectives start on the compute thread and several may be in flight, one of their own.
static void *parts_buffer(CpuComm *c, size_t bytes) {
    if (!c->threaded) return xmalloc(bytes);
    if (bytes > c->parts_cap) {
        free(c->parts);
        c->parts = xmalloc(bytes);
        c->parts_cap = bytes;
    }
    return c->parts;
}
static void parts_done(CpuComm *c, CpuOp *o) {
    if (!c->threaded) free(o->sum.parts);
    o->sum.parts = NULL;
}

// The first phase: every rank's parts of this rank's chunk on their way here.
static void sum_start(const CpuGroups *g, CpuComm *c, CpuOp *o) {
    MPI_Comm comm = op_comm(g, o);
    MPI_Datatype type = mpi_type(o->t);
    const size_t size = zero3_dtype_size(o->t);
    int N, me;
    MPI_Comm_size(comm, &N);
    MPI_Comm_rank(comm, &me);
    o->sum.phase = SUM_PARTS;
    if (o->kind == OP_REDUCE_SCATTER) {
        o->sum.parts = parts_buffer(c, (size_t)N * o->n * size);
        check_mpi(MPI_Ialltoall(o->src, (int)o->n, type, o->sum.parts, (int)o->n, type, comm, &o->req),
                  "all-to-all (a reduce-scatter)");
        return;
    }
    int *split = o->sum.split = sum_split(o->n, N, me);
    o->sum.parts = parts_buffer(c, ((size_t)N * (size_t)split[me] + 1) * size);
    check_mpi(MPI_Ialltoallv(o->dst, split, split + N, type, o->sum.parts, split + 2 * N, split + 3 * N, type, comm,
                             &o->req), "all-to-all (an all-reduce)");
}

// A phase's transfer is done: the parts are added, and an all-reduce's summed chunks start on
// their way to every rank. Returns 1 when it started another transfer (to be driven too).
static int sum_next(const CpuGroups *g, CpuComm *c, CpuOp *o) {
    if (!sum_by_moves(g, o) || o->sum.phase == SUM_DONE) return 0;
    MPI_Comm comm = op_comm(g, o);
    int N, me;
    MPI_Comm_size(comm, &N);
    MPI_Comm_rank(comm, &me);
    int *split = o->sum.split;
    if (o->sum.phase == SUM_PARTS) {
        void *mine = o->kind == OP_REDUCE_SCATTER ? o->dst : (char *)o->dst + (size_t)split[N + me] * zero3_dtype_size(o->t);
        add_parts(mine, o->sum.parts, N, o->kind == OP_REDUCE_SCATTER ? o->n : (size_t)split[me], o->t);
        parts_done(c, o);
        if (o->kind == OP_ALL_REDUCE) {
            o->sum.phase = SUM_GATHER;
            check_mpi(MPI_Iallgatherv(MPI_IN_PLACE, 0, MPI_DATATYPE_NULL, o->dst, split, split + N, mpi_type(o->t), comm,
                                      &o->req), "all-gather (an all-reduce)");
            return 1;
        }
    }
    free(split);
    o->sum.split = NULL;
    o->sum.phase = SUM_DONE;
    return 0;
}

// Starts the MPI call of a collective (whichever thread runs the collectives); all of them are
// non-blocking, so that every wait for one can be bounded (drive).
static void op_start(CpuBackend *b, CpuOp *o) {
    const CpuGroups *g = &b->groups;
    if (sum_by_moves(g, o)) { sum_start(g, &b->comm, o); return; }
    MPI_Comm group = op_comm(g, o);
    switch (o->kind) {
    case OP_GATHER:
        check_mpi(MPI_Iallgather(o->in_place ? MPI_IN_PLACE : o->src, (int)o->n, mpi_type(o->t), o->dst, (int)o->n,
                                 mpi_type(o->t), group, &o->req), "all-gather");
        break;
    case OP_ALL_TO_ALL:
        check_mpi(MPI_Ialltoall(o->src, (int)o->n, MPI_BYTE, o->dst, (int)o->n, MPI_BYTE, group, &o->req), "all-to-all");
        break;
    case OP_REDUCE_SCATTER:
        if (o->in_place)
            check_mpi(MPI_Ireduce_scatter_block(MPI_IN_PLACE, (void *)o->src, (int)o->n, mpi_type(o->t), MPI_SUM,
                                                g->shard, &o->req), "reduce-scatter");
        else
            check_mpi(MPI_Ireduce_scatter_block(o->src, o->dst, (int)o->n, mpi_type(o->t), MPI_SUM,
                                                g->shard, &o->req), "reduce-scatter");
        break;
    case OP_ALL_REDUCE:
        check_mpi(MPI_Iallreduce(MPI_IN_PLACE, o->dst, (int)o->n, mpi_type(o->t), MPI_SUM, group, &o->req),
                  "all-reduce");
        break;
    default:   // OP_SCALAR
        check_mpi(MPI_Iallreduce(MPI_IN_PLACE, &o->scalar, 1, MPI_DOUBLE, MPI_SUM, group, &o->req), "all-reduce");
    }
}

static void op_timed_out(const CpuBackend *b, const CpuOp *o, const char *cause) __attribute__((noreturn));

// Drives a request of collective o to completion with MPI_Test, until o's deadline (then the
// watchdog ends the run); on the communication thread it naps between tests while the compute
// thread is busy (poll_ns; 0 on the compute thread's own path: no naps).
// A deadline passed while this rank itself was not running (stopped by SIGSTOP, a debugger, a
// suspended VM) is this rank's fault, not a peer's: drive counts the gaps between its tests longer
// than SELF_GAP_S, and when they make up half the timeout, the line says so instead of blaming the peers.
// A stop that ended just before the collective started counts too (note_away: the worker's idle
// wait sees the gap): its peers gave up on this rank while it was stopped, so when it wakes into a
// collective that no peer will join, the fault is still its own.
#define SELF_GAP_S 1.0
static void note_away(CpuComm *c, double gap, double now) {
    if (gap > SELF_GAP_S) { c->away_s = gap; c->away_end = now; }
}
// How long this rank was not running during collective o or in the -ct seconds before it began.
static double away_for(const CpuBackend *b, const CpuOp *o, double during) {
    const CpuComm *c = &b->comm;
    const double before = c->away_end >= o->ready - b->watch.timeout_s ? c->away_s : 0.0;
    return during > before ? during : before;
}
#define PROGRESS_SAMPLE_S 0.2   // drive looks at the bytes moved this often
// fewer bytes than this between two looks are no progress: Open MPI's progress engine itself reads and
// writes a few bytes (its wake-up pipes) while a link is down; 16 KiB a look is 80 KB/s
#define PROGRESS_MIN_BYTES 16384.0

static double deadline_of(const CpuOp *o) { double d; __atomic_load(&o->deadline, &d, __ATOMIC_ACQUIRE); return d; }

static void drive(CpuBackend *b, CpuOp *o, MPI_Request *req) {
    CpuComm *c = &b->comm;
    double last = now_seconds(), not_running = 0.0;
    double bytes = proc_thread_io_bytes(), moved_at = last, next_sample = last + PROGRESS_SAMPLE_S;
    for (;;) {
        int flag = 1;
        if (*req != MPI_REQUEST_NULL) check_mpi(MPI_Test(req, &flag, MPI_STATUS_IGNORE), "test");
        const double now = now_seconds();
        if (flag || now >= next_sample) {   // bytes moved since the last look: the deadline moves on
            const double at = proc_thread_io_bytes();
            if (now - moved_at > o->idle_max) o->idle_max = now - moved_at;
            if (at >= bytes + PROGRESS_MIN_BYTES && bytes >= 0.0) {
                moved_at = now;
                if (b->watch.timeout_s > 0.0) {
                    const double d = now + b->watch.timeout_s;
                    __atomic_store(&o->deadline, &d, __ATOMIC_RELEASE);
                }
            }
            bytes = at;   // per look: a trickle of wake-ups never adds up to progress
            next_sample = now + PROGRESS_SAMPLE_S;
        }
        if (flag) return;
        if (now - last > SELF_GAP_S) { not_running += now - last; note_away(c, now - last, now); }
        last = now;
        if (now > deadline_of(o)) {
            char cause[200];
            const double away = away_for(b, o, not_running);
            if (away > 0.5 * b->watch.timeout_s)
                snprintf(cause, sizeof cause, "this rank itself was not running for %.1f s of it or just before it (stopped, "
                         "or starved of CPU), so its peers are not to blame", away);
            else snprintf(cause, sizeof cause, "a peer or its link is down");   // no byte moved for -ct seconds
            op_timed_out(b, o, cause);
        }
        if (!__atomic_load_n(&c->waiting, __ATOMIC_ACQUIRE) && c->poll_ns > 0) {
            struct timespec ts = {0, c->poll_ns};
            nanosleep(&ts, NULL);
        }
    }
}

// Drives collective o through every transfer it is made of (a bf16 sum: two or three, in turn).
static void drive_op(CpuBackend *b, CpuOp *o) {
    do drive(b, o, &o->req);
    while (sum_next(&b->groups, &b->comm, o));
}

// The ring a collective runs on (its communicator, and its ranks as first, stride, count) and the
// ring model's seconds for it over the emulated links.
static double op_link_seconds(const CpuBackend *b, const CpuOp *o, MPI_Comm *comm) {
    const CpuGroups *g = &b->groups;
    int first = b->rank - g->shard_rank, stride = 1, n = g->shard_size, all_reduce = 1;
    double F = (double)o->n * zero3_dtype_size(o->t);   // the full buffer
    *comm = g->shard;
    switch (o->kind) {
    case OP_GATHER: case OP_REDUCE_SCATTER: all_reduce = 0; F *= n; break;   // n: one rank's shard
    case OP_ALL_REDUCE:
        if (o->replica) { first = g->shard_rank; stride = g->shard_size; n = g->replica_size; *comm = g->replica; }
        break;
    default: first = 0; n = b->world; F = sizeof(double); *comm = MPI_COMM_WORLD;   // OP_SCALAR
    }
    double sent, steps;
    zero3_ring_cost(all_reduce, F, n, &sent, &steps);
    return zero3_link_seconds(zero3_links_ring(&b->links.links, first, stride, n), sent, steps);
}

#define HOLD_SLICE_S 0.05   // a hold looks at the stop signal this often
#define WAIT_GRACE_S 10.0   // the compute thread's wait gives the worker this long past a deadline
#define ABORT_GRACE_S 5     // a rank MPI_Abort cannot take down ends by itself this much later

// Ends every rank: MPI_Abort asks the launcher to kill the job; a rank whose launcher it cannot
// reach (its node's link is down) ends by SIGALRM ABORT_GRACE_S seconds later all the same.
static void abort_every_rank(void) __attribute__((noreturn));
static void abort_every_rank(void) {
    alarm(ABORT_GRACE_S);
    MPI_Abort(MPI_COMM_WORLD, 1);
    _exit(1);
}

static const char *op_name(const CpuOp *o) {
    switch (o->kind) {
    case OP_GATHER: return o->group == IN_NODE_GROUP ? "all-gather in the node group" : "all-gather";
    case OP_REDUCE_SCATTER: return "reduce-scatter";
    case OP_ALL_REDUCE: return o->replica ? "all-reduce across the replicas" : "all-reduce";
    case OP_ALL_TO_ALL: return o->group == IN_CROSS_GROUP ? "all-to-all across the node groups" : "all-to-all in the node group";
    default: return "scalar all-reduce";
    }
}

// "the all-gather of unit h.3 in step 7" (proc.h's watch_describe)
static void op_describe(const CpuOp *o, char *buf, size_t n) { watch_describe(buf, n, op_name(o), o->unit, o->step); }

// The collective's peers by node, in rank order: "node1 rank 1, node2 ranks 2 3" (local MPI calls
// only: no message is sent).
static void op_peers(const CpuBackend *b, const CpuOp *o, char *buf, size_t n) {
    MPI_Group group, world;
    int size = 0;
    MPI_Comm_group(op_comm(&b->groups, o), &group);
    MPI_Comm_group(MPI_COMM_WORLD, &world);
    MPI_Group_size(group, &size);
    int *in_group = xcalloc((size_t)size, sizeof(int)), *in_world = xcalloc((size_t)size, sizeof(int));
    for (int i = 0; i < size; i++) in_group[i] = i;
    MPI_Group_translate_ranks(group, size, in_group, world, in_world);
    watch_peers(buf, n, b->rank, in_world, size, (const char *)b->watch.nodes, CPU_NODE_NAME);
    free(in_group); free(in_world);
    MPI_Group_free(&group);
    MPI_Group_free(&world);
}

// Past o's deadline: one line saying what this rank waited for, on whom and why, then every rank ends.
static void op_timed_out(const CpuBackend *b, const CpuOp *o, const char *cause) {
    char what[160], peers[512];
    op_describe(o, what, sizeof what);
    op_peers(b, o, peers, sizeof peers);
    watch_timeout_line_after(b->rank, b->watch.nodes[b->rank], what, now_seconds() - o->ready, b->watch.timeout_s, peers, cause);
    abort_every_rank();
}

#define SLOW_EVERY_STEPS 20   // a slow link's summary line: at most one per this many steps
#define OUTAGE_STEPS 1.5      // a pause longer than this many step times is an outage (a peer computing waits under 1)
// ... and longer than this: on a link shaped far below its traffic, TCP's retransmission timer leaves
// pauses of 1-2 s with nothing moving (0.02 Gbit/s in tests/test_cluster.sh: up to 1.7 s)
#define OUTAGE_MIN_S 2.0
#define OUTAGE_MAX_S 5.0

// The longest pause without a byte that is still part of a normal wait (a peer computing, TCP's
// retransmission timer): 1.5 step times of this run, within OUTAGE_MIN_S..OUTAGE_MAX_S (the
// least before the first step ends).
static double outage_seconds(const CpuBackend *b) {
    double step;
    __atomic_load(&b->watch.step_s, &step, __ATOMIC_ACQUIRE);
    return fmin(OUTAGE_MAX_S, fmax(OUTAGE_MIN_S, OUTAGE_STEPS * step));
}

// A collective that completed after a long wait: an outage gets its line at once; a slow one is
// counted, and summarized once per SLOW_EVERY_STEPS steps.
static void op_report_stall(CpuBackend *b, const CpuOp *o) {
    const double waited = now_seconds() - o->ready, outage = outage_seconds(b);
    if (b->watch.report_s <= 0.0) return;
    const char *node = b->watch.nodes[b->rank];
    if (o->idle_max > outage) {
        char what[160];
        op_describe(o, what, sizeof what);
        watch_stall_line(b->rank, node, what, waited, outage, b->watch.timeout_s);
        return;
    }
    if (waited <= b->watch.report_s) return;
    typeof(b->watch.slow) *sl = &b->watch.slow;
    if (sl->count++ == 0) sl->first = o->step;
    sl->last = o->step; sl->seconds += waited;
    if (sl->printed_at == 0 || o->step >= sl->printed_at + SLOW_EVERY_STEPS) {
        watch_slow_line(b->rank, node, sl->count, sl->first, sl->last, sl->seconds, b->watch.report_s,
                        SLOW_EVERY_STEPS, b->watch.timeout_s);
        *sl = (typeof(*sl)){.printed_at = o->step > 0 ? o->step : 1};
    }
}

// A collective's start on this rank: its ready time and deadline (the worker sets them under mu,
// where the compute thread's wait reads them), then the MPI call.
static void op_arm(const CpuBackend *b, CpuOp *o) {
    o->ready = now_seconds();
    const double d = b->watch.timeout_s > 0.0 ? o->ready + b->watch.timeout_s : INFINITY;
    __atomic_store(&o->deadline, &d, __ATOMIC_RELEASE);
    o->idle_max = 0.0;
}
static void op_begin(CpuBackend *b, CpuOp *o) {
    op_arm(b, o);
    op_start(b, o);
}

static int stop_signalled(const CpuBackend *b) { return b->watch.stop_requested && b->watch.stop_requested(); }

// Sleeps until the monotonic time `until`, in slices, ending early once a stop is requested.
static void sleep_until(CpuBackend *b, double until) {
    for (double t = now_seconds(); t < until && !b->watch.holds_off; t = now_seconds()) {
        if (stop_signalled(b)) { b->watch.holds_off = 1; break; }
        double next = fmin(until, t + HOLD_SLICE_S);
        struct timespec ts = {(time_t)next, (long)((next - (double)(time_t)next) * 1e9)};
        clock_nanosleep(CLOCK_MONOTONIC, TIMER_ABSTIME, &ts, NULL);
    }
}

// Holds a collective whose data has moved until its ring time has passed since every rank of its
// ring could start it. Returns that start (the latest ready time of the ring's ranks). A stop
// signal on any rank of the ring ends the holds (the data has moved: only time is given up), and
// a hold past the deadline is the watchdog's, as a stalled transfer would be.
static double link_hold(CpuBackend *b, CpuOp *o) {
    MPI_Comm comm;
    const double seconds = op_link_seconds(b, o, &comm);
    double clock[2] = {o->ready, stop_signalled(b) || b->watch.holds_off ? 1.0 : 0.0};   // the start, a stop
    MPI_Request req;
    check_mpi(MPI_Iallreduce(MPI_IN_PLACE, clock, 2, MPI_DOUBLE, MPI_MAX, comm, &req), "all-reduce (link clock)");
    drive(b, o, &req);
    if (clock[1] > 0.0) b->watch.holds_off = 1;
    const double until = clock[0] + seconds;
    sleep_until(b, fmin(until, deadline_of(o)));
    if (!b->watch.holds_off && until > deadline_of(o)) {
        char cause[160];
        snprintf(cause, sizeof cause, "the emulated link (-link, -linkx) holds it %.1f s, longer than -ct allows", seconds);
        op_timed_out(b, o, cause);
    }
    return clock[0];
}
#endif

// A collective's data has moved: an in-place reduce-scatter that MPI summed is moved to where the
// engine expects it, and an emulated link holds it for the network's time. Returns when it began:
// its ring start under emulation, else when this rank started it.
static double op_complete(CpuBackend *b, CpuOp *o) {
    if (o->move_dst) memmove(o->move_dst, o->move_src, o->move_bytes);
#ifdef USE_MPI
    if (b->links.on) return link_hold(b, o);
#endif
    return o->ready;
}

#ifdef USE_MPI
#define IDLE_LOOK_NS 250000000L   // the idle worker looks at the clock 4 times a second
// The worker: runs the queued collectives in order, each to completion.
static void *comm_thread_main(void *arg) {
    CpuBackend *b = arg;
    CpuComm *c = &b->comm;
    pthread_mutex_lock(&c->mu);
    for (;;) {
        while (c->qlen == 0 && !c->stop) {   // a timed wait, so that a stop of the process shows as a gap
            struct timespec ts;
            clock_gettime(CLOCK_REALTIME, &ts);
            ts.tv_nsec += IDLE_LOOK_NS;
            if (ts.tv_nsec >= 1000000000L) { ts.tv_sec++; ts.tv_nsec -= 1000000000L; }
            const double before = now_seconds();
            pthread_cond_timedwait(&c->work, &c->mu, &ts);
            const double after = now_seconds();
            note_away(c, after - before - IDLE_LOOK_NS * 1e-9, after);
        }
        if (c->qlen == 0) break;   // stopped, nothing left
        CpuOp *o = &c->op[c->queue[c->qhead]];
        c->qhead = (c->qhead + 1) % CPU_MAX_REQUESTS;
        c->qlen--;
        op_arm(b, o);
        pthread_mutex_unlock(&c->mu);
        op_start(b, o);
        drive_op(b, o);
        op_report_stall(b, o);
        double begin = op_complete(b, o), t = now_seconds();
        pthread_mutex_lock(&c->mu);
        stamp_set_locked(c, o, 0, begin);
        stamp_set_locked(c, o, 1, t);
        o->state = SLOT_DONE;
        pthread_cond_broadcast(&c->done);
    }
    pthread_mutex_unlock(&c->mu);
    return NULL;
}

// The worker ahead of the compute, on request. On a machine with as many ranks as cores every
// rank's worker shares a core with compute threads, and the scheduler's fair share can leave a
// gather waiting behind the compute it is about to feed. ZERO3_COMM_NICE=K (0-19, default 0) puts
// the compute thread K nice levels above the worker once the worker has started (raising one's own
// nice needs no privilege where lowering one does), and the OpenMP threads it starts from then on
// inherit it. Measured at K = 10 (docs/performance.md, "The communication thread ahead of the
// compute"): the 2-rank bf16 step's exposed waits shrank in every pair and its step was faster in
// 7 of 9 pairs, the fp32 step in 3 of 6, within a spread as wide as the gain; so it stays off
// unless asked for.
#define COMM_NICE_DEFAULT 0
static int compute_nice_behind(void) {   // ZERO3_COMM_NICE, checked
    const char *text = getenv("ZERO3_COMM_NICE");
    if (!text || !*text) return COMM_NICE_DEFAULT;
    char *end = NULL;
    const long behind = strtol(text, &end, 10);
    if (*end || behind < 0 || behind > 19)
        fatal("ZERO3_COMM_NICE: expected an integer in [0, 19] (the compute threads' nice above the communication "
              "thread's), got '%s'", text);
    return (int)behind;
}
static void compute_behind_worker(int behind) {
    errno = 0;
    const int nice_now = getpriority(PRIO_PROCESS, 0);   // Linux: PRIO_PROCESS 0 is the calling thread
    if (behind > 0 && errno == 0) (void)setpriority(PRIO_PROCESS, 0, nice_now + behind > 19 ? 19 : nice_now + behind);
}

static void comm_thread_start(CpuBackend *b, int behind) {
    CpuComm *c = &b->comm;
    const char *poll = getenv("ZERO3_COMM_POLL_US");
    c->poll_ns = 1000L * (poll && *poll ? atol(poll) : 20);
    if (pthread_create(&c->thread, NULL, comm_thread_main, b) != 0) fatal_local("cannot start the communication thread");
    pthread_setname_np(c->thread, "zero3-comm");   // its name in top -H and /proc/PID/task/*/comm
    c->started = 1;
    compute_behind_worker(behind);
}

// Stops the worker after the collectives queued so far (they complete first).
static void comm_thread_stop(CpuComm *c) {
    if (!c->started) return;
    pthread_mutex_lock(&c->mu);
    c->stop = 1;
    pthread_cond_signal(&c->work);
    pthread_mutex_unlock(&c->mu);
    pthread_join(c->thread, NULL);
    c->started = 0;
}
#endif

// Hands a filled slot to whichever thread runs collectives: queued for the worker, or started now.
static void *op_issue(CpuBackend *b, int s) {
    CpuComm *c = &b->comm;
    const CpuGroups *g = &b->groups;
    CpuOp *o = &c->op[s];
    if (o->kind != OP_SCALAR) snprintf(o->unit, sizeof o->unit, "%s", b->watch.unit);
    o->step = b->watch.step;
    // the ranks this collective spans: the shard group, or the replica group for HSDP's all-reduce
    const int span = o->kind == OP_SCALAR ? b->world : o->replica ? g->replica_size
                   : o->group == IN_NODE_GROUP ? g->node_size : o->group == IN_CROSS_GROUP ? g->cross_size : g->shard_size;
    (void)span;   // without MPI every collective is a local copy
#ifdef USE_MPI
    if (span > 1) {
        if (o->n > INT32_MAX) fatal_local("collective too large for MPI (%zu elements)", o->n);
        if (c->threaded) {
            pthread_mutex_lock(&c->mu);
            c->queue[(c->qhead + c->qlen) % CPU_MAX_REQUESTS] = s;
            c->qlen++;
            pthread_cond_signal(&c->work);
            pthread_mutex_unlock(&c->mu);
        } else {
            op_begin(b, o);
        }
        return slot_handle(s);
    }
#endif
    // one rank: a copy (MPI's in-place reduce-scatter convention does not arise)
    stamp_set(c, o, 0);
    if (o->kind == OP_GATHER && o->dst != o->src) memmove(o->dst, o->src, o->n * zero3_dtype_size(o->t));
    if (o->kind == OP_REDUCE_SCATTER && !o->in_place) memmove(o->dst, o->src, o->n * zero3_dtype_size(o->t));
    if (o->kind == OP_ALL_TO_ALL) memmove(o->dst, o->src, o->n);
    stamp_set(c, o, 1);
    o->state = SLOT_DONE;
    return slot_handle(s);
}

static void *cpu_all_gather_start(void *ctx, const void *shard, void *full, size_t n, Zero3DType t) {
    CpuBackend *b = ctx;
    int s = cpu_slot(&b->comm);
    CpuOp *o = &b->comm.op[s];
    o->kind = OP_GATHER; o->src = shard; o->dst = full; o->n = n; o->t = t;
    o->in_place = (shard == (const char *)full + (size_t)b->groups.shard_rank * n * zero3_dtype_size(t));
    return op_issue(b, s);
}

static void *cpu_reduce_scatter_start(void *ctx, const void *full, void *shard, size_t n, Zero3DType t) {
    CpuBackend *b = ctx;
    int s = cpu_slot(&b->comm);
    CpuOp *o = &b->comm.op[s];
    size_t bytes = n * zero3_dtype_size(t);
    o->kind = OP_REDUCE_SCATTER; o->src = full; o->dst = shard; o->n = n; o->t = t;
    o->in_place = (shard == (const char *)full + (size_t)b->groups.shard_rank * bytes);
    o->move_dst = NULL;   // a sum of moves copies the parts out first, so its result lands in place
    if (o->in_place && b->groups.shard_size > 1 && mpi_sums_here(&b->groups, t)) {
        o->move_dst = shard; o->move_src = full; o->move_bytes = bytes;
    }
    return op_issue(b, s);
}

// An in-place sum over the shard group, or (replica = 1) over the replica group under HSDP.
static void *all_reduce_in(CpuBackend *b, void *buf, size_t n, Zero3DType t, int replica) {
    int s = cpu_slot(&b->comm);
    CpuOp *o = &b->comm.op[s];
    o->kind = OP_ALL_REDUCE; o->dst = buf; o->n = n; o->t = t; o->replica = replica;
    return op_issue(b, s);
}
static void *cpu_all_reduce_start(void *ctx, void *buf, size_t n, Zero3DType t) { return all_reduce_in(ctx, buf, n, t, 0); }
static void *cpu_replica_all_reduce_start(void *ctx, void *buf, size_t n, Zero3DType t) { return all_reduce_in(ctx, buf, n, t, 1); }

// HSDP: shard groups of G consecutive ranks (color rank / G), replica groups of the ranks with the
// same rank % G. Both keep the world's order, so rank r is place r % G of its shard group.
static void cpu_make_groups(void *ctx, int G) {
    CpuBackend *b = ctx;
    CpuGroups *g = &b->groups;
#ifdef USE_MPI
    check_mpi(MPI_Comm_split(MPI_COMM_WORLD, b->rank / G, b->rank, &g->shard), "split (shard groups)");
    check_mpi(MPI_Comm_split(MPI_COMM_WORLD, b->rank % G, b->rank, &g->replica), "split (replica groups)");
    MPI_Comm_set_errhandler(g->shard, MPI_ERRORS_RETURN);
    MPI_Comm_set_errhandler(g->replica, MPI_ERRORS_RETURN);
#endif
    g->shard_rank = b->rank % G;
    g->shard_size = G;
    g->replica_size = b->world / G;
}

// ZeRO++: node groups of G consecutive ranks of the shard group, cross groups of the ranks with the
// same place in theirs (split like HSDP's, one level down).
static void cpu_make_node_groups(void *ctx, int G) {
    CpuGroups *g = &((CpuBackend *)ctx)->groups;
#ifdef USE_MPI
    check_mpi(MPI_Comm_split(g->shard, g->shard_rank / G, g->shard_rank, &g->node), "split (node groups)");
    check_mpi(MPI_Comm_split(g->shard, g->shard_rank % G, g->shard_rank, &g->cross), "split (cross groups)");
    MPI_Comm_set_errhandler(g->node, MPI_ERRORS_RETURN);
    MPI_Comm_set_errhandler(g->cross, MPI_ERRORS_RETURN);
#endif
    g->node_size = G;
    g->cross_size = g->shard_size / G;
}

static void *cpu_node_all_gather_start(void *ctx, const void *shard, void *full, size_t n, Zero3DType t) {
    CpuBackend *b = ctx;
    int s = cpu_slot(&b->comm);
    CpuOp *o = &b->comm.op[s];
    o->kind = OP_GATHER; o->src = shard; o->dst = full; o->n = n; o->t = t; o->group = IN_NODE_GROUP;
    o->in_place = 0;
    return op_issue(b, s);
}

static void *cpu_all_to_all_start(void *ctx, const void *send, void *recv, size_t bytes, int across) {
    CpuBackend *b = ctx;
    int s = cpu_slot(&b->comm);
    CpuOp *o = &b->comm.op[s];
    o->kind = OP_ALL_TO_ALL; o->src = send; o->dst = recv; o->n = bytes; o->t = ZERO3_I8;
    o->group = across ? IN_CROSS_GROUP : IN_NODE_GROUP;
    return op_issue(b, s);
}

// The compute thread's wait for o (holding mu), a second at a time: past o's deadline and a grace,
// the worker is stuck where its own watchdog cannot look, and this thread ends the run.
static void wait_done_a_while(CpuBackend *b, CpuOp *o) {
    struct timespec ts;
    clock_gettime(CLOCK_REALTIME, &ts);
    ts.tv_sec += 1;
    pthread_cond_timedwait(&b->comm.done, &b->comm.mu, &ts);
#ifdef USE_MPI
    // deadline 0: the worker has not started o yet (a fresh slot is zeroed): nothing to time
    if (o->state != SLOT_DONE && deadline_of(o) > 0.0 && now_seconds() > deadline_of(o) + WAIT_GRACE_S) {
        char what[160];
        op_describe(o, what, sizeof what);
        fprintf(stderr, "error (rank %d): collective timeout: %s has not completed %g s after it started (-ct %g), and "
                "the communication thread did not end the run: ending every rank\n", b->rank, what,
                b->watch.timeout_s + WAIT_GRACE_S, b->watch.timeout_s);
        fflush(stderr);
        abort_every_rank();
    }
#endif
}

static void cpu_wait(void *ctx, void *handle) {
    CpuBackend *b = ctx;
    CpuComm *c = &b->comm;
    int s = (int)(intptr_t)handle - 1;
    if (s < 0 || s >= CPU_MAX_REQUESTS || !c->busy[s]) fatal_local("wait on a bad handle");
    CpuOp *o = &c->op[s];
    if (c->threaded) {
        pthread_mutex_lock(&c->mu);
        __atomic_add_fetch(&c->waiting, 1, __ATOMIC_RELEASE);
        while (o->state != SLOT_DONE) wait_done_a_while(b, o);
        __atomic_sub_fetch(&c->waiting, 1, __ATOMIC_RELEASE);
        pthread_mutex_unlock(&c->mu);
    } else if (o->state != SLOT_DONE) {
#ifdef USE_MPI
        drive_op(b, o);
        op_report_stall(b, o);
#endif
        stamp_set_to(c, o, 0, op_complete(b, o));
        stamp_set(c, o, 1);
    }
    o->state = SLOT_FREE;
    c->busy[s] = 0;
}

static double cpu_all_reduce_scalar(void *ctx, double x) {
    CpuBackend *b = ctx;
    CpuComm *c = &b->comm;
    int s = cpu_slot(c);
    CpuOp *o = &c->op[s];
    o->kind = OP_SCALAR; o->scalar = x;
    o->step = b->watch.step;
#ifdef USE_MPI
    if (b->world > 1 && c->threaded) {
        cpu_wait(ctx, op_issue(b, s));
        return o->scalar;
    }
    o->ready = now_seconds();
    if (b->world > 1) {
        op_begin(b, o);
        drive(b, o, &o->req);
        stamp_set_to(c, o, 0, op_complete(b, o));
    } else stamp_set(c, o, 0);
#else
    stamp_set(c, o, 0);
#endif
    stamp_set(c, o, 1);
    o->state = SLOT_DONE;
    cpu_wait(ctx, slot_handle(s));
    return o->scalar;
}

// Sum of squares in fixed 4096-element chunks, each summed in double, chunks added in order: the
// result does not depend on the number of threads. The spans of one norm add up in sum_squares.
// A chunk is eight running sums, element i in lane i % 8 (each element widened exactly to double),
// added in lane order at the chunk's end: a fixed order that vectorizes, where one running sum
// would be a chain of dependent adds (a quarter of the optimizer's time in fp32). The lanes' sum
// differs from one running sum's by rounding alone: about 1e-16 of the norm, under the fp32
// clip coefficient's last bit (docs/performance.md measures what it moves).
#define SQUARES_LANES 8
static inline __attribute__((always_inline)) double chunk_squares(const void *xv, size_t n, int is_bf16) {
    double lane[SQUARES_LANES] = {0};
    size_t i = 0;
    for (; i + SQUARES_LANES <= n; i += SQUARES_LANES)   // whole rows of lanes: one vector of doubles
        for (int l = 0; l < SQUARES_LANES; l++) {
            double v = is_bf16 ? bf16_to_f32(((const uint16_t *)xv)[i + l]) : ((const float *)xv)[i + l];
            lane[l] += v * v;
        }
    for (int l = 0; i < n; i++, l++) {
        double v = is_bf16 ? bf16_to_f32(((const uint16_t *)xv)[i]) : ((const float *)xv)[i];
        lane[l] += v * v;
    }
    double s = 0.0;
    for (int l = 0; l < SQUARES_LANES; l++) s += lane[l];
    return s;
}
static double chunk_squares_bf16(const uint16_t *x, size_t n) { return chunk_squares(x, n, 1); }
static double chunk_squares_f32(const float *x, size_t n) { return chunk_squares(x, n, 0); }
static void cpu_sum_squares_add(void *ctx, const void *xv, size_t n, Zero3DType t) {
    CpuBackend *b = ctx;
    const int is_bf16 = t == ZERO3_BF16;
    size_t nchunks = (n + 4095) / 4096;
    if (nchunks > b->chunks.cap) {
        free(b->chunks.sums);
        b->chunks.sums = xmalloc(nchunks * sizeof(double));
        b->chunks.cap = nchunks;
    }
    double *sums = b->chunks.sums;
    // the chunks on every thread at once, then their sums in chunk order on this one: an ordered
    // add inside the loop would hold each thread's first chunk until the threads before it ended
    #pragma omp parallel for schedule(static)
    for (size_t c = 0; c < nchunks; c++) {
        size_t end = (c + 1) * 4096 < n ? (c + 1) * 4096 : n;
        sums[c] = is_bf16 ? chunk_squares_bf16((const uint16_t *)xv + c * 4096, end - c * 4096)
                          : chunk_squares_f32((const float *)xv + c * 4096, end - c * 4096);
    }
    double total = 0.0;
    for (size_t c = 0; c < nchunks; c++) total += sums[c];
    b->sum_squares += total;
}
static double cpu_sum_squares_total(void *ctx) {
    CpuBackend *b = ctx;
    double total = b->sum_squares;
    b->sum_squares = 0.0;
    return total;
}

static void cpu_add(void *ctx, void *dstv, const void *srcv, size_t n, Zero3DType t) {
    if (t == ZERO3_BF16) {   // summed in fp32, rounded once
        uint16_t *d = dstv;
        const uint16_t *a = srcv;
        #pragma omp parallel for
        for (size_t i = 0; i < n; i++) d[i] = f32_to_bf16(bf16_to_f32(d[i]) + bf16_to_f32(a[i]));
        return;
    }
    float *dst = dstv;
    const float *src = srcv;
    #pragma omp parallel for
    for (size_t i = 0; i < n; i++) dst[i] += src[i];
}

static void cpu_copy_bytes(void *ctx, void *dst, const void *src, size_t bytes) { memmove(dst, src, bytes); }

// ZeRO++'s block quantization (zero3.h): each block's scale from its largest magnitude, then the
// codes; blocks split over the threads.
// Element i of a buffer of type t (fp32 or bf16) as fp32, and back (bf16 rounded to nearest even).
static inline float elem_f32(const void *x, Zero3DType t, size_t i) {
    return t == ZERO3_BF16 ? bf16_to_f32(((const uint16_t *)x)[i]) : ((const float *)x)[i];
}
static inline void elem_set(void *x, Zero3DType t, size_t i, float v) {
    if (t == ZERO3_BF16) ((uint16_t *)x)[i] = f32_to_bf16(v);
    else ((float *)x)[i] = v;
}

static void cpu_quantize(void *ctx, const void *src, Zero3DType t, size_t n, void *packed) {
    signed char *codes = packed;
    float *scales = (float *)((char *)packed + n);
    #pragma omp parallel for
    for (size_t b = 0; b < n / ZERO3_QUANT_BLOCK; b++) {
        const size_t first = b * ZERO3_QUANT_BLOCK;
        float amax = 0.0f;
        for (int i = 0; i < ZERO3_QUANT_BLOCK; i++) amax = fmaxf(amax, fabsf(elem_f32(src, t, first + i)));
        float scale = zero3_quant_scale(amax);
        scales[b] = scale;
        for (int i = 0; i < ZERO3_QUANT_BLOCK; i++) codes[first + i] = zero3_quant_code(elem_f32(src, t, first + i), scale);
    }
}

// accumulate: dst + the decoded value, summed in fp32 and rounded once to t
static void cpu_dequantize(void *ctx, const void *packed, size_t n, void *dst, Zero3DType t, int accumulate) {
    const signed char *codes = packed;
    const float *scales = (const float *)((const char *)packed + n);
    #pragma omp parallel for
    for (size_t i = 0; i < n; i++) {
        float v = (float)codes[i] * scales[i / ZERO3_QUANT_BLOCK];
        elem_set(dst, t, i, accumulate ? elem_f32(dst, t, i) + v : v);
    }
}

static void cpu_cast_from_f32(void *ctx, void *dst, Zero3DType t, const float *src, size_t n) {
    if (t == ZERO3_BF16) {
        #pragma omp parallel for
        for (size_t i = 0; i < n; i++) ((uint16_t *)dst)[i] = f32_to_bf16(src[i]);
    } else if (dst != src) memcpy(dst, src, n * sizeof(float));
}

// AdamW: the host AdamW (cpu/adamw.c, which the GPU trainer's -oo host links too), with the bias
// corrections in fp32 as this trainer has always computed them and fused as this build fuses.
static void cpu_adamw(void *ctx, const Zero3AdamSegment *segs, int nsegs, Zero3DType gt, Zero3DType pt,
                      float lr, float beta1, float beta2, float eps, float grad_scale, int t) {
    const AdamwStep step = {lr, beta1, beta2, eps, grad_scale, 1.0f - powf(beta1, (float)t), 1.0f - powf(beta2, (float)t)};
    adamw_host(segs, nsegs, gt, pt, &step, ADAMW_AS_BUILT);
}

#ifdef USE_MPI
// The ranks of the world that share this rank's machine (MPI's shared-memory split).
static int ranks_on_this_machine(void) {
    MPI_Comm local;
    int here = 0;
    check_mpi(MPI_Comm_split_type(MPI_COMM_WORLD, MPI_COMM_TYPE_SHARED, 0, MPI_INFO_NULL, &local), "split (one machine)");
    MPI_Comm_size(local, &here);
    MPI_Comm_free(&local);
    return here;
}
#endif

// Emulated links: the hold compares the clocks of the ranks of a ring, so they must share one
// machine's monotonic clock.
static int cpu_emulate_links(void *ctx, const Zero3Links *links, char *err, size_t errlen) {
    CpuBackend *b = ctx;
#ifdef USE_MPI
    const int here = ranks_on_this_machine();
    if (here != b->world) {
        snprintf(err, errlen, "emulated links need every rank on one machine (%d of the %d ranks share this one): "
                 "the hold compares the ranks' clocks", here, b->world);
        return -1;
    }
#endif
    b->links.links = *links;
    b->links.on = 1;
    return 0;
}

// ------------------------------------------------------------------------------------------------
// Start and end

#ifdef USE_MPI
// The backend's exits (proc/proc.h), handed to the error path by the process's first backend: a
// collective exit stops the worker and finalizes MPI; one rank's failure takes every rank down.
static void cpu_shutdown(void *transport) {
    comm_thread_stop(&((CpuBackend *)transport)->comm);
    MPI_Finalize();
}
static void cpu_abort_all(void *transport) { abort_every_rank(); }

// Every rank's host name (MPI_Get_processor_name: the node's hostname), for the report and the
// watchdog's lines.
static void gather_node_names(CpuBackend *b) {
    char name[MPI_MAX_PROCESSOR_NAME], mine[CPU_NODE_NAME] = "";
    int len = 0;
    if (MPI_Get_processor_name(name, &len) == MPI_SUCCESS) snprintf(mine, sizeof mine, "%.*s", CPU_NODE_NAME - 1, name);
    b->watch.nodes = xcalloc((size_t)b->world, CPU_NODE_NAME);
    check_mpi(MPI_Allgather(mine, CPU_NODE_NAME, MPI_CHAR, b->watch.nodes, CPU_NODE_NAME, MPI_CHAR, MPI_COMM_WORLD),
              "all-gather (host names)");
}

// MPI (started here unless the process has it already: then the first backend owns it), this
// rank's place, and the communication thread when the library allows one.
static void cpu_start_mpi(CpuBackend *b, int *argc, char ***argv) {
    int provided = MPI_THREAD_SINGLE, started = 0;
    MPI_Initialized(&started);
    if (started) MPI_Query_thread(&provided);
    else MPI_Init_thread(argc, argv, MPI_THREAD_SERIALIZED, &provided);
    b->owns_mpi = !started;
    MPI_Comm_rank(MPI_COMM_WORLD, &b->rank);
    MPI_Comm_size(MPI_COMM_WORLD, &b->world);
    // errors come back as codes so that we can report them in one line and abort everyone
    MPI_Comm_set_errhandler(MPI_COMM_WORLD, MPI_ERRORS_RETURN);
    b->groups.shard = MPI_COMM_WORLD;
    b->groups.one_machine = ranks_on_this_machine() == b->world;
    gather_node_names(b);
    CpuComm *c = &b->comm;
    c->thread_level_ok = provided >= MPI_THREAD_SERIALIZED;
    const char *want = getenv("ZERO3_COMM_THREAD");
    int wanted = !(want && !strcmp(want, "0"));
    if (b->world > 1 && wanted && !c->thread_level_ok && b->rank == 0)
        fprintf(stderr, "warning: this MPI library provides thread level %d, below MPI_THREAD_SERIALIZED: no "
                "communication thread; collectives progress only while the compute thread is inside MPI\n", provided);
    c->threaded = b->world > 1 && wanted && c->thread_level_ok;
    b->exits = (ProcessExits){b->rank, b->world, cpu_shutdown, cpu_abort_all, b};
    proc_exits_lend(&b->exits);   // the process's first backend: the error path's rank and exits
    const int behind = compute_nice_behind();   // checked on every run, a worker or none
    if (c->threaded) comm_thread_start(b, behind);
}
#endif

// The watchdog (zero3.h): the timeout, the label of the collectives to come, the nodes' names.
static void cpu_collective_timeout(void *ctx, double timeout_s) {
    CpuBackend *b = ctx;
    b->watch.timeout_s = timeout_s;
    b->watch.report_s = fmin(5.0, timeout_s / 10.0);
}
static void cpu_label(void *ctx, const char *unit) {
    CpuBackend *b = ctx;
    snprintf(b->watch.unit, sizeof b->watch.unit, "%s", unit ? unit : "");
}
// The step in flight, and the run's step time (a running mean of the intervals between steps, which
// sets what pause counts as an outage: outage_seconds).
static void cpu_at_step(void *ctx, int step) {
    CpuBackend *b = ctx;
    const double now = now_seconds();
    if (b->watch.step_began > 0.0 && step == b->watch.step + 1) {
        double mean, last = now - b->watch.step_began;
        __atomic_load(&b->watch.step_s, &mean, __ATOMIC_ACQUIRE);
        mean = mean > 0.0 ? 0.8 * mean + 0.2 * last : last;
        __atomic_store(&b->watch.step_s, &mean, __ATOMIC_RELEASE);
    }
    b->watch.step_began = now;
    b->watch.step = step;
}
static void cpu_stop_source(void *ctx, int (*stop_requested)(void)) { ((CpuBackend *)ctx)->watch.stop_requested = stop_requested; }
static const char *cpu_node_name(void *ctx, int rank) {
    const CpuBackend *b = ctx;
    return b->watch.nodes && rank >= 0 && rank < b->world ? b->watch.nodes[rank] : NULL;
}

// A fresh state: one rank, no groups split, no collective in flight.
static CpuBackend *cpu_backend_new(void) {
    CpuBackend *b = xcalloc(1, sizeof(CpuBackend));
    b->world = 1;
    b->groups = (CpuGroups){.shard_size = 1, .replica_size = 1, .node_size = 1, .cross_size = 1};
#ifdef USE_MPI
    b->groups.shard = b->groups.replica = b->groups.node = b->groups.cross = MPI_COMM_NULL;
#endif
    CpuComm *c = &b->comm;
    pthread_mutex_init(&c->mu, NULL);
    pthread_cond_init(&c->work, NULL);
    pthread_cond_init(&c->done, NULL);
    c->last_begin = c->last_end = -1;
    return b;
}

static void cpu_fill_table(Zero3Backend *be, CpuBackend *b) {
    memset(be, 0, sizeof(*be));
    be->ctx = b;
    be->rank = b->rank;
    be->world = b->world;
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
    be->copy = cpu_copy_bytes;
    be->make_node_groups = cpu_make_node_groups;
    be->node_all_gather_start = cpu_node_all_gather_start;
    be->all_to_all_start = cpu_all_to_all_start;
    be->quantize = cpu_quantize;
    be->dequantize = cpu_dequantize;
    be->cast_from_f32 = cpu_cast_from_f32;
    be->adamw = cpu_adamw;
    be->stamp = cpu_stamp;
    be->comm_stamps = cpu_comm_stamps;
    be->stamps_read = cpu_stamps_read;
    be->emulate_links = cpu_emulate_links;
    be->collectives_in_flight = cpu_collectives_in_flight;
    be->collective_timeout = cpu_collective_timeout;
    be->label = cpu_label;
    be->at_step = cpu_at_step;
    be->stop_source = cpu_stop_source;
    be->node_name = cpu_node_name;
}

void backend_cpu_init(Zero3Backend *be, int *argc, char ***argv) {
    CpuBackend *b = cpu_backend_new();
#ifdef USE_MPI
    cpu_start_mpi(b, argc, argv);
#endif
    b->groups.shard_rank = b->rank;
    b->groups.shard_size = b->world;
    cpu_fill_table(be, b);
}

void backend_cpu_describe(const CpuBackend *b, char *buf, size_t n) {
    if (b->world == 1) snprintf(buf, n, "one rank: no collectives");
    else if (b->comm.threaded) snprintf(buf, n, "MPI on a communication thread (MPI_THREAD_SERIALIZED)");
    else snprintf(buf, n, "MPI on the compute thread (%s)",
                  b->comm.thread_level_ok ? "ZERO3_COMM_THREAD=0" : "no MPI_THREAD_SERIALIZED");
}

void backend_cpu_finish(Zero3Backend *be) {
    CpuBackend *b = be->ctx;
#ifdef USE_MPI
    comm_thread_stop(&b->comm);
    CpuGroups *g = &b->groups;
    MPI_Comm *split[] = {&g->shard, &g->replica, &g->node, &g->cross};   // the groups made by splits
    for (int i = 0; i < 4; i++)
        if (*split[i] != MPI_COMM_NULL && *split[i] != MPI_COMM_WORLD) MPI_Comm_free(split[i]);
    proc_exits_return(&b->exits);   // the error path's exits no longer lead here
    if (b->owns_mpi) MPI_Finalize();
#endif
    pthread_mutex_destroy(&b->comm.mu);
    pthread_cond_destroy(&b->comm.work);
    pthread_cond_destroy(&b->comm.done);
    free(b->comm.stamps);
    free(b->comm.parts);
    free(b->watch.nodes);
    free(b->chunks.sums);
    free(b);
    be->ctx = NULL;
}
