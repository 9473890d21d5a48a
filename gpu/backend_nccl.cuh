// gpu/backend_nccl.cuh: the ZeRO engine's backend on GPUs (zero3.h's Zero3Backend): device memory,
// NCCL collectives on their own stream, and the shard math as CUDA kernels.
//
// Two streams:
//   compute  every kernel, memset and the optimizer;
//   comm     every collective (higher priority, so a gather is not starved by a long backward).
// Every dependency between them is an event:
//   - a collective waits for the compute work queued before it (it reads what that work wrote, or
//     writes into a pool buffer that work was still using): recorded in collective_begin;
//   - a handle is an event recorded on comm after the collective; zero3's wait() makes the compute
//     stream wait for it, so later kernels see the result. The host never blocks on a collective,
//     except all_reduce_scalar, which returns a number.
// So the engine's prefetch (gather l+1 issued before block l computes; under -bp post, after block
// l's backward, so the gather waits for it like any collective and may reuse its freed buffer) and
// early reduce-scatter (issued right after block l's backward) overlap with compute, and the engine's
// transient pool is reused safely: a buffer goes back to the pool only after its collective's handle
// was waited on, which orders its next use on the compute stream after the collective.
//
// The watchdog (-ct SECONDS, be->collective_timeout), the CPU backend's on NCCL: every collective
// has a deadline, the moment it started on the comm stream plus the timeout, and every wait for it
// is bounded:
//   wait                                          | bounded by
//   ----------------------------------------------+------------------------------------------------
//   the collective on the GPU (host blocked in a  | a watchdog thread: polls the collective's two
//   stream or event synchronize, or running on)   | events (cudaEventQuery: started, completed) and
//                                                 | ncclCommGetAsyncError every WATCH_POLL_S
//   a NCCL call that returns ncclInProgress (the  | the host's own poll of ncclCommGetAsyncError
//   communicators are non-blocking: blocking=0)   | (nccl_settle), against the same deadline
//   ncclCommAbort itself                          | alarm(WATCH_ABORT_GRACE_S)
// Past a deadline the rank prints the CPU trainer's line (proc.h's watch_timeout_line: the
// collective, its unit, the step, its peers' nodes), aborts its communicators (the NCCL kernels
// stop spinning) and _exits with the fatal status 1, whatever its host thread is blocked in; mpirun
// or scripts/launch.sh then ends the other ranks, and a rank neither reaches ends by its own
// watchdog. A collective that waited longer than report_s but completed is a stall: one line when
// the watchdog sees it complete. Without -ct (test_gpt2cu) nothing is watched.
//
// Launch: with MPI (USE_MPI), ranks come from MPI and NCCL's unique id is broadcast over it.
// Without MPI, scripts/launch.sh starts the processes with RANK, WORLD_SIZE, LOCAL_RANK and
// ZERO3_RENDEZVOUS, a file through which rank 0 hands the id to the others. Rank r uses device
// LOCAL_RANK % (number of devices). One rank needs no NCCL at all: its collectives are copies.
#pragma once
#include <errno.h>
#include <nccl.h>
#include <pthread.h>
#include <nvtx3/nvToolsExt.h>
#include <sys/stat.h>
#include <unistd.h>
#ifdef USE_MPI
#include <mpi.h>
#endif
#include "../proc/proc.h"
#include "../zero3.h"
#include "../cpu/adamw.h"
#include "common.cuh"
#include "shard_math.cuh"

#define GPU_MAX_HANDLES 128
#define GPU_NODE_NAME 64      // the bytes of a node's host name kept per rank
#define WATCH_RING 1024       // collectives the watchdog follows at once (issued, not yet seen complete)
#define WATCH_POLL_S 0.05     // the watchdog looks this often
#define WATCH_ABORT_GRACE_S 5 // an abort that blocks ends the rank by SIGALRM this much later

// A group of ranks as world ranks first, first + stride, ... (count of them): a communicator's
// members, for the watchdog's "its peers".
typedef struct { int first, stride, count; } GpuRing;

// One collective the watchdog follows, from its issue until it sees it complete.
typedef struct {
    cudaEvent_t begun, ended;   // recorded on the comm stream just before and just after it
    char what[160];             // "the all-gather of unit h.3 in step 7"
    ncclComm_t comm;            // its communicator (async errors)
    GpuRing ring;               // its ranks
    double started;             // the host time the watchdog first saw `begun` fired (0: not yet)
} WatchedCollective;

// The watchdog's state. ring[head, tail) (mod WATCH_RING) are the collectives issued and not yet
// seen complete, in comm-stream order: the oldest is the pending one. The host thread fills
// ring[tail] (its events recorded) and publishes it under mu; the watchdog thread retires from
// head under mu. An entry's events are re-recorded only after it is retired.
typedef struct {
    double timeout_s;           // a collective's deadline after it started (0: off, nothing watched)
    double report_s;            // a collective that waited longer is reported as a stall
    char unit[40];              // the label of the collectives issued from here on
    int step;                   // the step they belong to (at_step)
    char (*nodes)[GPU_NODE_NAME];   // every rank's host name (MPI), or only this rank's (nodes[0])
    int nodes_known;            // nodes holds every rank's (else peers are named by rank only)
    WatchedCollective ring[WATCH_RING];
    unsigned head, tail;
    WatchedCollective issuing;  // the collective being issued (its entry once published)
    pthread_mutex_t mu;
    pthread_t thread;
    int running, stop;          // the thread was started / is asked to end (under mu)
    int fired;                  // the timeout line was printed (atomic: one line a rank)
} GpuWatch;

// -oo host: the optimizer state (fp32 master where separate, m, v) in pinned host memory, and what
// the step moves between it and the device (gpu_host_adamw): the ranges at host_alloc, the streams,
// events and staging at the first step (none of it without -oo host). The step works in pieces: a
// segment, or a part of one of at most `piece` elements, each with its own event.
#define GPU_HOST_RANGES 4   // host_alloc's buffers: master, m, v (and one to spare)
#define GPU_HOST_PIECE (1 << 20)   // a piece's elements by default: 4 MiB of fp32 gradients, 2 of bf16
typedef struct {
    void* range[GPU_HOST_RANGES];     // host_alloc's buffers and their bytes (gpu_zero tells them apart)
    size_t range_bytes[GPU_HOST_RANGES];
    cudaStream_t out;           // the gradients' copies to the host, piece after piece
    cudaStream_t back;          // the params' copies back to the device (beside out: both directions at once)
    cudaEvent_t compute_done;   // recorded on compute: the gradients are reduced
    cudaEvent_t* piece_out;     // [piece]: recorded on out after that piece's copies to the host
    cudaEvent_t params_back;    // recorded on back after the last piece's copy back
    char* grads;                // pinned: the step's gradient pieces, back to back (grad_type)
    char* params;               // pinned: the params pieces the host AdamW writes (param_type)
    size_t grads_cap, params_cap;
    size_t piece;               // elements a piece at most (ZERO3_GPU_HOST_PIECE; 0: whole segments)
    Zero3AdamSegment* host_pieces;     // [piece] as the host AdamW sees them (pointing into the above)
    Zero3AdamSegment* device_pieces;   // [piece] the same elements on the device (grad, params)
    int pieces_cap;             // the arrays' length and the events made
    int npieces;                // the last step's pieces: the layout the next backward's early copies use
    size_t grad_size;           // and their gradients' element size
    cudaEvent_t grads_final;    // recorded on compute at gpu_grads_final: a unit's shard is reduced
    // [piece] its gradients already on their way out (gpu_grads_final, during the backward): the
    // device and host addresses and length they went with, so the step copies only what did not
    const void** early_grad;
    const void** early_host;
    size_t* early_n;
} GpuHostState;

// The backend's state, reached through every function's ctx (Zero3Backend.ctx); nothing of it is
// the file's, so two backends can live in one process. The compute (gpu/gpt2_gpu.cuh) takes its stream
// and device from it when it is created.
typedef struct {
    int rank, world, local_rank, device;
    int owns_mpi;               // this backend started MPI: it finalizes it
    ProcessExits exits;         // how every rank ends from here (proc/proc.h; handed to the error path by the first backend)
    ncclComm_t comm;            // every rank; NULL on one rank
    ncclComm_t shard_comm;      // the collectives' group: comm, or HSDP's shard group (NULL: one rank)
    ncclComm_t replica_comm;    // HSDP: the ranks with the same place in their groups (NULL: none)
    ncclComm_t node_comm, cross_comm;   // ZeRO++: node groups inside the shard group, and across them
    int node_size, cross_size;
    GpuRing world_ring, shard_ring, replica_ring, node_ring, cross_ring;   // each communicator's ranks
    GpuWatch watch;             // -ct's watchdog
    cudaStream_t compute, comm_stream;
    cudaEvent_t compute_ready;  // re-recorded before every collective (a wait copies its state)
    cudaEvent_t handle_event[GPU_MAX_HANDLES];
    int handle_busy[GPU_MAX_HANDLES];
    float* sumsq_scratch;       // device: SUMSQ_BLOCKS partials of the span being summed
    float* sumsq_slots;         // device: one sum per span queued since the last total
    float* sumsq_host;          // pinned: the slots, read back once per total
    int sumsq_count;            // spans queued
    double* scalar_device;      // all_reduce_scalar's buffer
    double* scalar_host;        // pinned
    // the AdamW launch's table, [segments][chunks] (gpu_adamw): built on the host in a pinned
    // buffer, uploaded on the compute stream, read there by the kernel
    char* adamw_table_host;     // pinned: the table uploaded last
    char* adamw_table_device;
    size_t adamw_table_cap;     // bytes of each
    int adamw_nsegs;            // segments of the table uploaded last
    size_t adamw_nchunks;       // its chunks
    cudaEvent_t adamw_uploaded; // recorded on compute after the upload
    // -oo host (gpu_host_adamw): the optimizer state in pinned host memory, updated by the host
    GpuHostState host;
    // stamps (zero3.h): timing events recorded on the compute stream (stamp) or around each
    // collective on the comm stream; read once per step, relative to the first one, whose host
    // time is taken when it is recorded
    cudaEvent_t* stamp_events;
    int nstamps, stamp_cap;
    double stamp_host0;
    int last_begin, last_end;   // the last collective's two stamps
} GpuBackend;

static void nccl_check_impl(ncclResult_t r, const char* what, const char* file, int line) {
    if (r != ncclSuccess) fatal_local("NCCL error at %s:%d (%s): %s", file, line, what, ncclGetErrorString(r));
}
#define ncclCheck(call) nccl_check_impl((call), #call, __FILE__, __LINE__)

static void watch_fire(GpuBackend* g, const WatchedCollective* c, const char* cause) __attribute__((noreturn));

// A call on a non-blocking communicator may return ncclInProgress: its work goes on, and the
// communicator's state (ncclCommGetAsyncError) says when it has settled, before any other call on
// it. Polled here; with `c` (a collective being issued under -ct) no longer than its deadline.
static ncclResult_t nccl_settle(GpuBackend* g, ncclComm_t comm, ncclResult_t r, const WatchedCollective* c) {
    const double t0 = now_seconds();
    while (r == ncclInProgress) {
        usleep(20);
        ncclResult_t q = ncclCommGetAsyncError(comm, &r);
        if (q != ncclSuccess) return q;
        if (r == ncclInProgress && c && g->watch.timeout_s > 0.0 && now_seconds() > t0 + g->watch.timeout_s)
            watch_fire(g, c, "a peer or its link is down (NCCL did not settle the call)");
    }
    return r;
}
// every NCCL call on a communicator: settled, then checked
#define ncclSettle(g, comm, call) nccl_check_impl(nccl_settle((g), (comm), (call), NULL), #call, __FILE__, __LINE__)
// a call that makes *pcomm (an init, a split): settled on the new communicator
#define ncclMade(g, pcomm, call)                                                                      \
    do {                                                                                          \
        ncclResult_t made_ = (call);                                                              \
        nccl_check_impl(nccl_settle((g), *(pcomm), made_, NULL), #call, __FILE__, __LINE__);      \
    } while (0)
#define ncclIssue(g, comm, call) nccl_check_impl(nccl_settle((g), (comm), (call), &(g)->watch.issuing), #call, __FILE__, __LINE__)

static ncclDataType_t nccl_type(Zero3DType t) { return t == ZERO3_BF16 ? ncclBfloat16 : t == ZERO3_I8 ? ncclInt8 : ncclFloat; }

// ------------------------------------------------------------------------------------------------
// Memory

static void* gpu_alloc(void* ctx, size_t bytes) {
    GpuBackend* g = (GpuBackend*)ctx;
    void* p = NULL;
    cudaError_t err = cudaMalloc(&p, bytes ? bytes : 1);
    if (err != cudaSuccess) {
        size_t free_b = 0, total_b = 0;
        cudaGetLastError();
        cudaMemGetInfo(&free_b, &total_b);
        char detail[160];
        snprintf(detail, sizeof detail, "GPU memory (%.1f MiB free of %.1f MiB on device %d)",
                 free_b / 1048576.0, total_b / 1048576.0, g->device);
        alloc_failed(bytes, detail);
    }
    // the engine relies on zeroed memory (padding stays zero). On the compute stream, not the legacy
    // default stream (which the non-blocking streams do not wait for): every later kernel, and every
    // collective (collective_begin waits for the compute stream), sees the zeros first.
    cudaCheck(cudaMemsetAsync(p, 0, bytes, g->compute));
    return p;
}
static void gpu_free(void* ctx, void* p) {
    // cudaFree synchronizes the device, so no stream can still be using p
    cudaCheck(cudaFree(p));
}

// -oo host's memory: pinned (the copy engines reach it directly), zeroed as alloc's is, and
// recorded, so that gpu_zero knows it is the host's to clear. No kernel and no asynchronous copy
// touches it (the step stages through its own buffers; the loaders' copies are synchronous), so
// the host may clear it at once.
static int host_range_of(const GpuBackend* g, const void* p) {
    for (int i = 0; i < GPU_HOST_RANGES; i++)
        if (g->host.range[i] && (const char*)p >= (const char*)g->host.range[i] &&
            (const char*)p < (const char*)g->host.range[i] + g->host.range_bytes[i])
            return i;
    return -1;
}
static void* gpu_host_alloc(void* ctx, size_t bytes) {
    GpuBackend* g = (GpuBackend*)ctx;
    int slot = 0;
    while (slot < GPU_HOST_RANGES && g->host.range[slot]) slot++;
    if (slot == GPU_HOST_RANGES) fatal_local("host memory: more than %d optimizer buffers", GPU_HOST_RANGES);
    void* p = NULL;
    if (cudaMallocHost(&p, bytes ? bytes : 1) != cudaSuccess) {
        cudaGetLastError();
        alloc_failed(bytes, "pinned host memory for the optimizer state (-oo host)");
    }
    memset(p, 0, bytes);
    g->host.range[slot] = p;
    g->host.range_bytes[slot] = bytes;
    return p;
}
static void gpu_host_free(void* ctx, void* p) {
    GpuBackend* g = (GpuBackend*)ctx;
    const int slot = host_range_of(g, p);
    if (slot >= 0) g->host.range[slot] = NULL;
    cudaCheck(cudaFreeHost(p));   // synchronizes the device
}
static void gpu_zero(void* ctx, void* p, size_t bytes) {
    GpuBackend* g = (GpuBackend*)ctx;
    if (host_range_of(g, p) >= 0) memset(p, 0, bytes);   // the optimizer state in host memory (-oo host)
    else cudaCheck(cudaMemsetAsync(p, 0, bytes, g->compute));
}

// ------------------------------------------------------------------------------------------------
// Stamps: the timeline on the device. A wait's two stamps on the compute stream bracket the time
// the stream stalled for a collective (the exposed communication); a collective's two on the comm
// stream bracket its transfer.

static int stamp_on(GpuBackend* g, cudaStream_t stream) {
    if (g->nstamps == g->stamp_cap) {
        int cap = g->stamp_cap ? 2 * g->stamp_cap : 1024;
        g->stamp_events = (cudaEvent_t*)realloc(g->stamp_events, (size_t)cap * sizeof(cudaEvent_t));
        if (!g->stamp_events) fatal_local("out of host memory (stamps)");
        for (int i = g->stamp_cap; i < cap; i++) cudaCheck(cudaEventCreate(&g->stamp_events[i]));
        g->stamp_cap = cap;
    }
    if (g->nstamps == 0) g->stamp_host0 = now_seconds();
    cudaCheck(cudaEventRecord(g->stamp_events[g->nstamps], stream));
    return g->nstamps++;
}
static int gpu_stamp(void* ctx) {
    GpuBackend* g = (GpuBackend*)ctx;
    return stamp_on(g, g->compute);
}
static void gpu_comm_stamps(void* ctx, int* begin, int* end) {
    GpuBackend* g = (GpuBackend*)ctx;
    *begin = g->last_begin;
    *end = g->last_end;
}
static void gpu_stamps_read(void* ctx, double* seconds, int n) {
    GpuBackend* g = (GpuBackend*)ctx;
    for (int i = 0; i < n && i < g->nstamps; i++) {
        cudaCheck(cudaEventSynchronize(g->stamp_events[i]));
        float ms = 0.0f;
        cudaCheck(cudaEventElapsedTime(&ms, g->stamp_events[0], g->stamp_events[i]));
        seconds[i] = g->stamp_host0 + ms / 1000.0;
    }
    for (int i = g->nstamps; i < n; i++) seconds[i] = g->stamp_host0;
    g->nstamps = 0;
}

// ------------------------------------------------------------------------------------------------
// The watchdog (the table at the top)

// the collective's peers by node: "node1 rank 1, node2 ranks 2 3" (proc.h's watch_peers)
static void watch_peers_of(const GpuBackend* g, const GpuRing* ring, char* buf, size_t n) {
    int* ranks = (int*)xcalloc((size_t)(ring->count > 0 ? ring->count : 1), sizeof(int));
    for (int i = 0; i < ring->count; i++) ranks[i] = ring->first + i * ring->stride;
    watch_peers(buf, n, g->rank, ranks, ring->count, g->watch.nodes_known ? (const char*)g->watch.nodes : NULL, GPU_NODE_NAME);
    free(ranks);
}

static void comms_abort(GpuBackend* g);

// Past a deadline (the watchdog thread, or the host settling a call): the one line, the
// communicators aborted, the process ended with the fatal status, whatever the host thread is
// blocked in. A second thread to get here waits for the first's _exit.
static void watch_fire(GpuBackend* g, const WatchedCollective* c, const char* cause) {
    if (__atomic_exchange_n(&g->watch.fired, 1, __ATOMIC_ACQ_REL))
        for (;;) pause();
    char peers[512];
    watch_peers_of(g, &c->ring, peers, sizeof peers);
    watch_timeout_line(g->rank, g->watch.nodes[g->watch.nodes_known ? g->rank : 0], c->what, g->watch.timeout_s, peers, cause);
    alarm(WATCH_ABORT_GRACE_S);   // an abort that blocks does not keep the rank alive
    comms_abort(g);
    _exit(1);
}

// One look (under mu): retire the collectives seen complete (reporting stalls), then hold the
// pending one to its deadline and its communicator's state.
static void watch_look_locked(GpuBackend* g) {
    GpuWatch* w = &g->watch;
    while (w->head != w->tail) {
        WatchedCollective* c = &w->ring[w->head % WATCH_RING];
        const double now = now_seconds();
        if (c->started == 0.0 && cudaEventQuery(c->begun) == cudaSuccess) c->started = now;
        if (cudaEventQuery(c->ended) == cudaSuccess) {
            if (c->started > 0.0 && now - c->started > w->report_s)
                watch_stall_line(g->rank, w->nodes[w->nodes_known ? g->rank : 0], c->what, now - c->started, w->report_s,
                                 w->timeout_s);
            w->head++;
            continue;
        }
        ncclResult_t async = ncclSuccess;
        if (c->comm && ncclCommGetAsyncError(c->comm, &async) == ncclSuccess && async != ncclSuccess && async != ncclInProgress) {
            char cause[200];
            snprintf(cause, sizeof cause, "NCCL reports: %s", ncclGetErrorString(async));
            watch_fire(g, c, cause);
        }
        if (c->started > 0.0 && now > c->started + w->timeout_s) watch_fire(g, c, "a peer or its link is down");
        return;
    }
}

static void* watch_main(void* arg) {
    GpuBackend* g = (GpuBackend*)arg;
    GpuWatch* w = &g->watch;
    cudaSetDevice(g->device);   // its events are this device's
    const struct timespec nap = {0, (long)(WATCH_POLL_S * 1e9)};
    pthread_mutex_lock(&w->mu);
    while (!w->stop) {
        watch_look_locked(g);
        pthread_mutex_unlock(&w->mu);
        nanosleep(&nap, NULL);
        pthread_mutex_lock(&w->mu);
    }
    pthread_mutex_unlock(&w->mu);
    return NULL;
}

// The watchdog (zero3.h's collective_timeout): from here on every collective is followed.
static void gpu_collective_timeout(void* ctx, double timeout_s) {
    GpuBackend* g = (GpuBackend*)ctx;
    GpuWatch* w = &g->watch;
    if (w->running || g->world == 1) { w->timeout_s = g->world == 1 ? 0.0 : timeout_s; return; }   // one rank: no peer to wait for
    for (int i = 0; i < WATCH_RING; i++) {
        cudaCheck(cudaEventCreateWithFlags(&w->ring[i].begun, cudaEventDisableTiming));
        cudaCheck(cudaEventCreateWithFlags(&w->ring[i].ended, cudaEventDisableTiming));
    }
    w->timeout_s = timeout_s;
    w->report_s = fmin(5.0, timeout_s / 10.0);
    if (pthread_create(&w->thread, NULL, watch_main, g) != 0) fatal_local("cannot start the collective watchdog (-ct)");
    w->running = 1;
}
static void gpu_label(void* ctx, const char* unit) {
    GpuBackend* g = (GpuBackend*)ctx;
    snprintf(g->watch.unit, sizeof g->watch.unit, "%s", unit ? unit : "");
}
static void gpu_at_step(void* ctx, int step) { ((GpuBackend*)ctx)->watch.step = step; }

// Stops the watchdog thread (the communicators are about to go).
static void watch_stop(GpuBackend* g) {
    GpuWatch* w = &g->watch;
    if (!w->running) return;
    pthread_mutex_lock(&w->mu);
    w->stop = 1;
    pthread_mutex_unlock(&w->mu);
    pthread_join(w->thread, NULL);
    w->running = 0;
    for (int i = 0; i < WATCH_RING; i++) {
        cudaCheck(cudaEventDestroy(w->ring[i].begun));
        cudaCheck(cudaEventDestroy(w->ring[i].ended));
    }
}

static int watching(const GpuBackend* g, ncclComm_t comm) { return g->watch.running && comm != NULL; }

// The collective about to be issued on `comm` (op: its name; unit: the label, "" for a scalar):
// described for the watchdog's line, and its `begun` event recorded on the comm stream. A full ring
// waits for its oldest collective here (the watchdog still holds that one to its deadline).
static void watch_issue(GpuBackend* g, ncclComm_t comm, const GpuRing* ring, const char* op, const char* unit) {
    GpuWatch* w = &g->watch;
    WatchedCollective* c = &w->issuing;
    watch_describe(c->what, sizeof c->what, op, unit, w->step);
    c->comm = comm;
    c->ring = *ring;
    if (!watching(g, comm)) return;
    pthread_mutex_lock(&w->mu);
    while (w->tail - w->head == WATCH_RING) {
        const unsigned oldest = w->head;
        pthread_mutex_unlock(&w->mu);
        cudaCheck(cudaEventSynchronize(w->ring[oldest % WATCH_RING].ended));
        pthread_mutex_lock(&w->mu);
        if (w->head == oldest) w->head++;
    }
    c->begun = w->ring[w->tail % WATCH_RING].begun;
    c->ended = w->ring[w->tail % WATCH_RING].ended;
    pthread_mutex_unlock(&w->mu);
    cudaCheck(cudaEventRecord(c->begun, g->comm_stream));
}

// ... and issued: its `ended` event recorded, the entry published to the watchdog.
static void watch_issued(GpuBackend* g) {
    GpuWatch* w = &g->watch;
    if (!watching(g, w->issuing.comm)) return;
    cudaCheck(cudaEventRecord(w->issuing.ended, g->comm_stream));
    pthread_mutex_lock(&w->mu);
    WatchedCollective* slot = &w->ring[w->tail % WATCH_RING];
    *slot = w->issuing;
    slot->started = 0.0;
    w->tail++;
    pthread_mutex_unlock(&w->mu);
}

// ------------------------------------------------------------------------------------------------
// Collectives

// op: the collective's name in the watchdog's lines (the CPU backend's words); comm and ring: where
// it runs (comm NULL: one rank, a copy)
static void collective_begin(GpuBackend* g, const char* op, ncclComm_t comm, const GpuRing* ring) {
    nvtxRangePushA(op);
    // the collective reads what the compute work queued so far wrote (gradients, updated params), or
    // writes into a pool buffer that work last used: it must start after all of it
    cudaCheck(cudaEventRecord(g->compute_ready, g->compute));
#if ZERO3_TEST_DROP_WAIT != 1  // =1 drops this wait, to show the emulator catches it (tests/test_emu_streams.sh)
    cudaCheck(cudaStreamWaitEvent(g->comm_stream, g->compute_ready, 0));
#endif
    g->last_begin = stamp_on(g, g->comm_stream);
    watch_issue(g, comm, ring, op, g->watch.unit);
}

// the handle: an event recorded on comm after the collective (slot index + 1, NULL stays "none")
static void* collective_end(GpuBackend* g) {
    watch_issued(g);
    for (int i = 0; i < GPU_MAX_HANDLES; i++) {
        if (g->handle_busy[i]) continue;
        g->handle_busy[i] = 1;
        g->last_end = stamp_on(g, g->comm_stream);
        // recorded after the collective: waiting on it means the collective's result is complete
        cudaCheck(cudaEventRecord(g->handle_event[i], g->comm_stream));
        nvtxRangePop();
        return (void*)(intptr_t)(i + 1);
    }
    fatal_local("too many collectives in flight (%d)", GPU_MAX_HANDLES);
}

static void* gpu_all_gather_start(void* ctx, const void* shard, void* full, size_t n, Zero3DType t) {
    GpuBackend* g = (GpuBackend*)ctx;
    collective_begin(g, "all-gather", g->shard_comm, &g->shard_ring);
    const size_t bytes = n * zero3_dtype_size(t);
    if (g->shard_comm) ncclIssue(g, g->shard_comm, ncclAllGather(shard, full, n, nccl_type(t), g->shard_comm, g->comm_stream));
    else if (shard != full) cudaCheck(cudaMemcpyAsync(full, shard, bytes, cudaMemcpyDeviceToDevice, g->comm_stream));
    return collective_end(g);
}

// NCCL's in-place convention is the engine's: shard == full + rank*n
static void* gpu_reduce_scatter_start(void* ctx, const void* full, void* shard, size_t n, Zero3DType t) {
    GpuBackend* g = (GpuBackend*)ctx;
    collective_begin(g, "reduce-scatter", g->shard_comm, &g->shard_ring);
    const size_t bytes = n * zero3_dtype_size(t);
    if (g->shard_comm) ncclIssue(g, g->shard_comm, ncclReduceScatter(full, shard, n, nccl_type(t), ncclSum, g->shard_comm, g->comm_stream));
    else if (shard != full) cudaCheck(cudaMemcpyAsync(shard, full, bytes, cudaMemcpyDeviceToDevice, g->comm_stream));
    return collective_end(g);
}

static void* gpu_all_reduce_start(void* ctx, void* buf, size_t n, Zero3DType t) {
    GpuBackend* g = (GpuBackend*)ctx;
    collective_begin(g, "all-reduce", g->shard_comm, &g->shard_ring);
    if (g->shard_comm) ncclIssue(g, g->shard_comm, ncclAllReduce(buf, buf, n, nccl_type(t), ncclSum, g->shard_comm, g->comm_stream));
    return collective_end(g);
}

// HSDP: the reduced gradients summed across the replica groups, on the comm stream like the rest.
static void* gpu_replica_all_reduce_start(void* ctx, void* buf, size_t n, Zero3DType t) {
    GpuBackend* g = (GpuBackend*)ctx;
    collective_begin(g, "all-reduce across the replicas", g->replica_comm, &g->replica_ring);
    if (g->replica_comm) ncclIssue(g, g->replica_comm, ncclAllReduce(buf, buf, n, nccl_type(t), ncclSum, g->replica_comm, g->comm_stream));
    return collective_end(g);
}

// HSDP: split the ranks into shard groups of G consecutive ranks and replica groups (same rank % G),
// with ncclCommSplit (NCCL 2.18 and later). A group of one rank needs no communicator: every rank
// takes part in both splits (they are collective), then a split of one rank is destroyed at once;
// the others are destroyed in gpu_backend_finish.
// A communicator's end: its queued work flushed (ncclCommFinalize, settled), then freed.
static void comm_destroy(GpuBackend* g, ncclComm_t c) {
#if defined(NCCL_VERSION_CODE) && NCCL_VERSION_CODE >= 21400
    ncclSettle(g, c, ncclCommFinalize(c));
#endif
    ncclCheck(ncclCommDestroy(c));
}

static ncclComm_t comm_unless_alone(GpuBackend* g, ncclComm_t c, int ranks) {
    if (ranks > 1) return c;
    if (c) comm_destroy(g, c);
    return NULL;
}

static void gpu_make_groups(void* ctx, int G) {
    GpuBackend* g = (GpuBackend*)ctx;
#if defined(NCCL_VERSION_CODE) && NCCL_VERSION_CODE >= 21800
    ncclComm_t shard = NULL, replica = NULL;
    // a split of a non-blocking communicator is non-blocking (config NULL: the parent's); the new
    // one settles before any call on it
    ncclMade(g, &shard, ncclCommSplit(g->comm, g->rank / G, g->rank, &shard, NULL));
    ncclMade(g, &replica, ncclCommSplit(g->comm, g->rank % G, g->rank, &replica, NULL));
    g->shard_comm = comm_unless_alone(g, shard, G);
    g->replica_comm = comm_unless_alone(g, replica, g->world / G);
    g->shard_ring = GpuRing{g->rank / G * G, 1, G};
    g->replica_ring = GpuRing{g->rank % G, G, g->world / G};
#else
    (void)G;
    fatal("flag -hs: HSDP on GPUs needs ncclCommSplit (NCCL 2.18 or later); this build's NCCL has none");
#endif
}

// ZeRO++: node groups of G consecutive ranks of the shard group and cross groups (the same place in
// theirs), split from the shard group's communicator as HSDP's are from the world's.
static void gpu_make_node_groups(void* ctx, int G) {
    GpuBackend* g = (GpuBackend*)ctx;
#if defined(NCCL_VERSION_CODE) && NCCL_VERSION_CODE >= 21800
    int r = 0, n = 1;
    ncclCheck(ncclCommUserRank(g->shard_comm, &r));
    ncclCheck(ncclCommCount(g->shard_comm, &n));
    ncclMade(g, &g->node_comm, ncclCommSplit(g->shard_comm, r / G, r, &g->node_comm, NULL));
    ncclMade(g, &g->cross_comm, ncclCommSplit(g->shard_comm, r % G, r, &g->cross_comm, NULL));
    g->node_size = G;
    g->cross_size = n / G;
    const int shard_first = g->rank - r;   // the shard group's ranks are consecutive (gpu_make_groups)
    g->node_ring = GpuRing{shard_first + r / G * G, 1, G};
    g->cross_ring = GpuRing{shard_first + r % G, G, n / G};
#else
    (void)G;
    fatal("flags -hp and -qg: ZeRO++'s node groups on GPUs need ncclCommSplit (NCCL 2.18 or later); this build's NCCL has none");
#endif
}

static void* gpu_node_all_gather_start(void* ctx, const void* shard, void* full, size_t n, Zero3DType t) {
    GpuBackend* g = (GpuBackend*)ctx;
    collective_begin(g, "all-gather in the node group", g->node_comm, &g->node_ring);
    ncclIssue(g, g->node_comm, ncclAllGather(shard, full, n, nccl_type(t), g->node_comm, g->comm_stream));
    return collective_end(g);
}

// An all-to-all as NCCL writes one: a send and a receive with every peer, in one group.
static void* gpu_all_to_all_start(void* ctx, const void* send, void* recv, size_t bytes, int across) {
    GpuBackend* g = (GpuBackend*)ctx;
    ncclComm_t comm = across ? g->cross_comm : g->node_comm;
    collective_begin(g, across ? "all-to-all across the node groups" : "all-to-all in the node group", comm,
                     across ? &g->cross_ring : &g->node_ring);
#if defined(NCCL_VERSION_CODE) && NCCL_VERSION_CODE >= 21800
    const int peers = across ? g->cross_size : g->node_size;
    ncclCheck(ncclGroupStart());
    for (int p = 0; p < peers; p++) {
        ncclCheck(ncclSend((const char*)send + (size_t)p * bytes, bytes, ncclInt8, p, comm, g->comm_stream));
        ncclCheck(ncclRecv((char*)recv + (size_t)p * bytes, bytes, ncclInt8, p, comm, g->comm_stream));
    }
    ncclIssue(g, comm, ncclGroupEnd());
#else
    (void)send; (void)recv; (void)bytes;
    fatal_local("all-to-all without ncclCommSplit's node groups");
#endif
    return collective_end(g);
}

static void gpu_wait(void* ctx, void* handle) {
    GpuBackend* g = (GpuBackend*)ctx;
    const int i = (int)(intptr_t)handle - 1;
    if (i < 0 || i >= GPU_MAX_HANDLES || !g->handle_busy[i]) fatal_local("wait on a bad collective handle");
    // later compute work reads (or reuses) the collective's buffers: it must wait for it
#if ZERO3_TEST_DROP_WAIT != 2  // =2 drops this wait, to show the emulator catches it (tests/test_emu_streams.sh)
    cudaCheck(cudaStreamWaitEvent(g->compute, g->handle_event[i], 0));
#endif
    g->handle_busy[i] = 0;  // the event may be re-recorded: the wait above has captured it
}

// A blocking sum of one double over the ranks (norms, losses, agreements).
static double gpu_all_reduce_scalar(void* ctx, double x) {
    GpuBackend* g = (GpuBackend*)ctx;
    g->last_begin = stamp_on(g, g->comm_stream);
    g->last_end = g->last_begin;
    if (!g->comm) return x;
    *g->scalar_host = x;
    cudaCheck(cudaMemcpyAsync(g->scalar_device, g->scalar_host, sizeof(double), cudaMemcpyHostToDevice,
                              g->comm_stream));
    watch_issue(g, g->comm, &g->world_ring, "scalar all-reduce", "");
    ncclIssue(g, g->comm, ncclAllReduce(g->scalar_device, g->scalar_device, 1, ncclDouble, ncclSum, g->comm,
                                        g->comm_stream));
    watch_issued(g);
    cudaCheck(cudaMemcpyAsync(g->scalar_host, g->scalar_device, sizeof(double), cudaMemcpyDeviceToHost,
                              g->comm_stream));
    g->last_end = stamp_on(g, g->comm_stream);
    cudaCheck(cudaStreamSynchronize(g->comm_stream));
    return *g->scalar_host;
}

// ------------------------------------------------------------------------------------------------
// Shard math, on the compute stream

// The global norm's sum of squares without a host round trip per span: each span's sum goes to its
// own device slot (no atomics: the result is deterministic); the total reads every slot back in one
// copy and adds them in order in double, as the CPU backend does.
#define GPU_SUMSQ_SLOTS ZERO3_MAX_UNITS
static void gpu_sum_squares_add(void* ctx, const void* x, size_t n, Zero3DType t) {
    GpuBackend* g = (GpuBackend*)ctx;
    if (g->sumsq_count == GPU_SUMSQ_SLOTS) fatal_local("sum of squares: more than %d spans before a total", GPU_SUMSQ_SLOTS);
    float* out = g->sumsq_slots + g->sumsq_count++;
    if (t == ZERO3_BF16) sum_squares<__nv_bfloat16>(out, (const __nv_bfloat16*)x, n, g->sumsq_scratch, 0, g->compute);
    else sum_squares<float>(out, (const float*)x, n, g->sumsq_scratch, 0, g->compute);
}

static double gpu_sum_squares_total(void* ctx) {
    GpuBackend* g = (GpuBackend*)ctx;
    const int n = g->sumsq_count;
    g->sumsq_count = 0;
    if (n == 0) return 0.0;
    cudaCheck(cudaMemcpyAsync(g->sumsq_host, g->sumsq_slots, (size_t)n * sizeof(float), cudaMemcpyDeviceToHost, g->compute));
    cudaCheck(cudaStreamSynchronize(g->compute));   // the step's one read-back for the norm
    double total = 0.0;
    for (int i = 0; i < n; i++) total += (double)g->sumsq_host[i];
    return total;
}

static void gpu_add(void* ctx, void* dst, const void* src, size_t n, Zero3DType t) {
    GpuBackend* g = (GpuBackend*)ctx;
    if (t == ZERO3_BF16) accumulate<__nv_bfloat16, __nv_bfloat16>((__nv_bfloat16*)dst, (const __nv_bfloat16*)src, n, 1.0f, g->compute);
    else accumulate<float, float>((float*)dst, (const float*)src, n, 1.0f, g->compute);
}

static void gpu_copy(void* ctx, void* dst, const void* src, size_t bytes) {
    GpuBackend* g = (GpuBackend*)ctx;
    cudaCheck(cudaMemcpyAsync(dst, src, bytes, cudaMemcpyDeviceToDevice, g->compute));
}

// ZeRO++'s block quantization on the compute stream (gpu/shard_math.cuh)
static void gpu_quantize(void* ctx, const void* src, Zero3DType t, size_t n, void* packed) {
    GpuBackend* g = (GpuBackend*)ctx;
    if (t == ZERO3_BF16) quantize_blocks<__nv_bfloat16>((const __nv_bfloat16*)src, n, packed, g->compute);
    else quantize_blocks<float>((const float*)src, n, packed, g->compute);
}
static void gpu_dequantize(void* ctx, const void* packed, size_t n, void* dst, Zero3DType t, int accumulate) {
    GpuBackend* g = (GpuBackend*)ctx;
    if (t == ZERO3_BF16) dequantize_blocks<__nv_bfloat16>(packed, n, (__nv_bfloat16*)dst, accumulate, g->compute);
    else dequantize_blocks<float>(packed, n, (float*)dst, accumulate, g->compute);
}

static void gpu_cast_from_f32(void* ctx, void* dst, Zero3DType t, const float* src, size_t n) {
    GpuBackend* g = (GpuBackend*)ctx;
    if (t == ZERO3_BF16) cast_copy<__nv_bfloat16, float>((__nv_bfloat16*)dst, src, n, g->compute);
    else if (dst != src) cudaCheck(cudaMemcpyAsync(dst, src, n * sizeof(float), cudaMemcpyDeviceToDevice, g->compute));
}

// Makes the device table (segments, then their chunks) describe segs[0..nsegs). The engine hands the
// same segments every step (its buffers never move), so the table is built and uploaded once and
// only a changed segment list (another run, a test) builds it again.
//
// The pinned buffer is read by the copy engine when the upload RUNS on the compute stream, which
// is later than this call returns: the host may rewrite it only after that upload has happened,
// hence the event recorded behind the copy and synchronized on before a rewrite (the host's one
// dependency; it waits only when a table changes, never in the steady state). The device table is
// written by the upload and read by the kernels, all on the compute stream, so stream order keeps
// the next upload behind every kernel that read the previous table; the comm stream never touches it.
static void adamw_table_upload(GpuBackend* g, const Zero3AdamSegment* segs, int nsegs) {
    const size_t seg_bytes = (size_t)nsegs * sizeof(Zero3AdamSegment);
    if (nsegs == g->adamw_nsegs && memcmp(g->adamw_table_host, segs, seg_bytes) == 0) return;
    const size_t nchunks = adamw_chunk_table(segs, nsegs, NULL);
    const size_t bytes = seg_bytes + nchunks * sizeof(AdamwChunk);
    cudaCheck(cudaEventSynchronize(g->adamw_uploaded));   // the last upload has left the pinned buffer
    if (bytes > g->adamw_table_cap) {
        // cudaFree waits for the device: no kernel still reads the old device table
        cudaCheck(cudaFreeHost(g->adamw_table_host));
        cudaCheck(cudaFree(g->adamw_table_device));
        cudaCheck(cudaMallocHost((void**)&g->adamw_table_host, bytes));
        cudaCheck(cudaMalloc((void**)&g->adamw_table_device, bytes));
        g->adamw_table_cap = bytes;
    }
    memcpy(g->adamw_table_host, segs, seg_bytes);
    adamw_chunk_table(segs, nsegs, (AdamwChunk*)(g->adamw_table_host + seg_bytes));
    cudaCheck(cudaMemcpyAsync(g->adamw_table_device, g->adamw_table_host, bytes, cudaMemcpyHostToDevice,
                              g->compute));
    cudaCheck(cudaEventRecord(g->adamw_uploaded, g->compute));
    g->adamw_nsegs = nsegs;
    g->adamw_nchunks = nchunks;
}

// Params in a precision other than floatX would be written with the wrong width (params ==
// master, fp32 builds, are skipped by the kernel): both AdamWs, device and host, refuse them.
static void adamw_check_param_type(Zero3DType pt) {
    if (pt != ZERO3_F32 && zero3_dtype_size(pt) != sizeof(floatX))
        fatal_local("adamw: params of %zu bytes in a %s build", zero3_dtype_size(pt), PRECISION_NAME);
}

// The whole step's AdamW in one kernel launch (gpu/shard_math.cuh: adamw_multi_kernel).
static void gpu_adamw(void* ctx, const Zero3AdamSegment* segs, int nsegs, Zero3DType gt, Zero3DType pt, float lr,
                      float beta1, float beta2, float eps, float grad_scale, int t) {
    GpuBackend* g = (GpuBackend*)ctx;
    adamw_check_param_type(pt);
    if (nsegs == 0) return;
    adamw_table_upload(g, segs, nsegs);
    const Zero3AdamSegment* d_segs = (const Zero3AdamSegment*)g->adamw_table_device;
    const AdamwChunk* d_chunks = (const AdamwChunk*)(g->adamw_table_device + (size_t)nsegs * sizeof(Zero3AdamSegment));
    const AdamwHyper h = adamw_hyper(lr, beta1, beta2, t, eps, grad_scale);
    if (gt == ZERO3_BF16) adamw_multi_update<__nv_bfloat16>(d_segs, d_chunks, g->adamw_nchunks, h, g->compute);
    else adamw_multi_update<float>(d_segs, d_chunks, g->adamw_nchunks, h, g->compute);
}

// -oo host: AdamW on the host, on the optimizer state in pinned host memory (ZeRO-Offload). The
// engine hands the step's segments as for gpu_adamw, their m, v (and the master, bf16 runs) in
// host_alloc's memory, grad and params on the device. The step cuts them into pieces (host_stage:
// each segment, or its parts of at most H->piece elements) and pipelines them, as ZeRO-Offload does:
//
//   during the backward (gpu_grads_final, from the second step: the pieces' layout is the last step's)
//   compute stream:  a unit's reduce-scatter waited on -> record grads_final
//   out stream:      wait grads_final; each piece in the unit's shard: its gradients -> host.grads;
//                    record piece_out[p]
//   at the step
//   compute stream:  ... the last reduce-scatter waited on, the norm read back (clipping's coefficient
//                    is grad_scale: the norm comes before the update) -> record compute_done
//   out stream:      wait compute_done; for each piece p: its gradients -> host.grads unless they left
//                    already (and, fp32 runs, its params, which are the master, -> host.params);
//                    record piece_out[p]
//   host thread:     for each piece p: wait piece_out[p]; the CPU trainer's AdamW (cpu/adamw.c) on p
//                    alone, writing m, v, the master and host.params; queue p's params on back
//   back stream:     host.params of piece p -> its params on the device, as the host queues them;
//                    after the last piece, record params_back
//   compute stream:  wait params_back (the next forward reads the new params)
//
// So while the host updates piece p, the out stream copies p+1.. to the host and the back stream
// copies ..p-1 to the device: the two directions and the host's arithmetic overlap, and only the first
// piece's copy out and the last one's copy back stand alone. The back stream waits for no event: a
// piece's copy is queued only after the host saw piece_out[p] (compute_done, and the D2H of p's
// fp32 params, before it) and wrote p's params. Where the engine says a unit's shard is final
// (stages 2-3 without HSDP's replicas: Zero3Backend.grads_final) its gradients leave under the rest
// of the backward; the others (stages 0-1, HSDP, qgZ, one rank) leave at the step. Bit for bit the device
// kernel's update: AdamW is per element, so a piece is updated as in the whole; the bias corrections
// are adamw_hyper's (double, rounded once to fp32), and the host runs ADAMW_UNFUSED, the order of
// operations adamw_element spells out with explicitly rounded intrinsics, in whatever lanes a
// piece's length gives it.
// A segment of n elements cut in pieces of at most H->piece (0: whole, an empty one too)
static size_t pieces_of(const GpuHostState* H, size_t n) {
    return H->piece && n > H->piece ? (n + H->piece - 1) / H->piece : 1;
}

// The step's pieces, in both views, and the staging buffers sized to them (grown after the copies of
// the last step are done with them: cudaFreeHost synchronizes the device). Returns the pieces.
static int host_stage(GpuBackend* g, const Zero3AdamSegment* segs, int nsegs, size_t gsize, size_t psize) {
    GpuHostState* H = &g->host;
    if (!H->out) {
        cudaCheck(cudaStreamCreateWithFlags(&H->out, cudaStreamNonBlocking));
        cudaCheck(cudaStreamCreateWithFlags(&H->back, cudaStreamNonBlocking));
        cudaCheck(cudaEventCreateWithFlags(&H->compute_done, cudaEventDisableTiming));
        cudaCheck(cudaEventCreateWithFlags(&H->params_back, cudaEventDisableTiming));
        cudaCheck(cudaEventCreateWithFlags(&H->grads_final, cudaEventDisableTiming));
    }
    size_t gbytes = 0, pbytes = 0;
    int npieces = 0;
    for (int s = 0; s < nsegs; s++) {
        gbytes += segs[s].n * gsize;
        pbytes += segs[s].n * psize;
        npieces += (int)pieces_of(H, segs[s].n);
    }
    if (gbytes > H->grads_cap) {
        cudaCheck(cudaFreeHost(H->grads));
        cudaCheck(cudaMallocHost((void**)&H->grads, gbytes));
        H->grads_cap = gbytes;
    }
    if (pbytes > H->params_cap) {
        cudaCheck(cudaFreeHost(H->params));
        cudaCheck(cudaMallocHost((void**)&H->params, pbytes));
        H->params_cap = pbytes;
    }
    if (npieces > H->pieces_cap) {
        free(H->host_pieces);
        free(H->device_pieces);
        free(H->early_grad); free(H->early_host); free(H->early_n);
        H->host_pieces = (Zero3AdamSegment*)xmalloc((size_t)npieces * sizeof(Zero3AdamSegment));
        H->device_pieces = (Zero3AdamSegment*)xmalloc((size_t)npieces * sizeof(Zero3AdamSegment));
        H->early_grad = (const void**)calloc((size_t)npieces, sizeof(void*));   // none early
        H->early_host = (const void**)calloc((size_t)npieces, sizeof(void*));
        H->early_n = (size_t*)calloc((size_t)npieces, sizeof(size_t));
        if (!H->early_grad || !H->early_host || !H->early_n) fatal("out of host memory");
        cudaEvent_t* events = (cudaEvent_t*)xmalloc((size_t)npieces * sizeof(cudaEvent_t));   // the old ones kept
        for (int p = 0; p < npieces; p++)
            if (p < H->pieces_cap) events[p] = H->piece_out[p];
            else cudaCheck(cudaEventCreateWithFlags(&events[p], cudaEventDisableTiming));
        free(H->piece_out);
        H->piece_out = events;
        H->pieces_cap = npieces;
    }
    size_t go = 0, po = 0;
    int p = 0;
    for (int s = 0; s < nsegs; s++) {
        const int master_is_params = segs[s].params == (void*)segs[s].master;
        for (size_t k = 0, i0 = 0; k < pieces_of(H, segs[s].n); k++, i0 += H->piece) {
            Zero3AdamSegment d = segs[s];   // the device view: elements i0.. of the segment, weight decay its
            d.n = H->piece && segs[s].n - i0 > H->piece ? H->piece : segs[s].n - i0;
            d.master += i0;
            d.m += i0;
            d.v += i0;
            d.grad = (const char*)d.grad + i0 * gsize;
            d.params = (char*)d.params + i0 * psize;
            Zero3AdamSegment h = d;         // the host's: m, v (and a bf16 run's master) in place, the rest staged
            h.grad = H->grads + go;
            h.params = H->params + po;
            if (master_is_params) h.master = (float*)h.params;   // fp32: the master is the params, staged
            H->device_pieces[p] = d;
            H->host_pieces[p++] = h;
            go += d.n * gsize;
            po += d.n * psize;
        }
    }
    return p;
}

static void gpu_host_adamw(void* ctx, const Zero3AdamSegment* segs, int nsegs, Zero3DType gt, Zero3DType pt, float lr,
                           float beta1, float beta2, float eps, float grad_scale, int t) {
    GpuBackend* g = (GpuBackend*)ctx;
    adamw_check_param_type(pt);
    if (nsegs == 0) return;
    GpuHostState* H = &g->host;
    const size_t gsize = zero3_dtype_size(gt), psize = zero3_dtype_size(pt);
    const int npieces = host_stage(g, segs, nsegs, gsize, psize);
    const Zero3AdamSegment *dev = H->device_pieces, *host = H->host_pieces;
    // every piece's gradients out (and the fp32 master, where it is the params), once the compute
    // stream has them, an event after each
    cudaCheck(cudaEventRecord(H->compute_done, g->compute));
    cudaCheck(cudaStreamWaitEvent(H->out, H->compute_done, 0));
    for (int p = 0; p < npieces; p++) {
        // a piece whose gradients left during the backward, to where they go now: its event stands
        const int early = H->early_grad[p] == dev[p].grad && H->early_host[p] == host[p].grad && H->early_n[p] == dev[p].n;
        if (!early)
            cudaCheck(cudaMemcpyAsync((void*)host[p].grad, dev[p].grad, dev[p].n * gsize, cudaMemcpyDeviceToHost, H->out));
        if (dev[p].params == (void*)dev[p].master)
            cudaCheck(cudaMemcpyAsync(host[p].params, dev[p].params, dev[p].n * psize, cudaMemcpyDeviceToHost, H->out));
        cudaCheck(cudaEventRecord(H->piece_out[p], H->out));
    }
    // piece by piece as each lands: the update on the host, bit for bit the kernel's, then its params back
    const AdamwHyper h = adamw_hyper(lr, beta1, beta2, t, eps, grad_scale);
    const AdamwStep step = {lr, beta1, beta2, eps, grad_scale, h.bias_correction1, h.bias_correction2};
    for (int p = 0; p < npieces; p++) {
        cudaCheck(cudaEventSynchronize(H->piece_out[p]));
        adamw_host(&host[p], 1, gt, pt, &step, ADAMW_UNFUSED);
        cudaCheck(cudaMemcpyAsync(dev[p].params, host[p].params, dev[p].n * psize, cudaMemcpyHostToDevice, H->back));
        H->early_grad[p] = NULL;   // the next step's pieces leave afresh
    }
    H->npieces = npieces;
    H->grad_size = gsize;
    // the compute stream's next kernels wait for the last piece back
    cudaCheck(cudaEventRecord(H->params_back, H->back));
    cudaCheck(cudaStreamWaitEvent(g->compute, H->params_back, 0));
}

// -oo host, during the backward (Zero3Backend.grads_final): a unit's gradient shard is reduced, so
// the pieces of the last step's layout that lie in it leave for the host now, on the out stream,
// behind the compute stream's wait for the reduce-scatter; each records its piece_out as the step's
// copy would, and gpu_host_adamw copies only the pieces that did not leave (the same segments come
// every step: a layout that changed leaves nothing early). The first step has no layout yet: its
// gradients leave at the step.
static void gpu_grads_final(void* ctx, const void* grads, size_t bytes) {
    GpuBackend* g = (GpuBackend*)ctx;
    GpuHostState* H = &g->host;
    if (!H->npieces) return;
    const char *begin = (const char*)grads, *end = begin + bytes;
    int recorded = 0;
    for (int p = 0; p < H->npieces; p++) {
        const Zero3AdamSegment *d = &H->device_pieces[p], *h = &H->host_pieces[p];
        const char* at = (const char*)d->grad;
        if (at < begin || at + d->n * H->grad_size > end || H->early_grad[p]) continue;
        if (!recorded) {
            cudaCheck(cudaEventRecord(H->grads_final, g->compute));
            cudaCheck(cudaStreamWaitEvent(H->out, H->grads_final, 0));
            recorded = 1;
        }
        cudaCheck(cudaMemcpyAsync((void*)h->grad, d->grad, d->n * H->grad_size, cudaMemcpyDeviceToHost, H->out));
        cudaCheck(cudaEventRecord(H->piece_out[p], H->out));
        H->early_grad[p] = d->grad;
        H->early_host[p] = h->grad;
        H->early_n[p] = d->n;
    }
}

// ------------------------------------------------------------------------------------------------
// Copies

// Copies between engine buffers (device) and host memory, for the model file loaders, checkpoints,
// the export and the tests' checks (the backend's copy_to_host / copy_to_device). Synchronous:
// they run at start-up, at checkpoints and in tests, after all queued work.
// The engine's side may be host memory too (-oo host's optimizer state): cudaMemcpyDefault, which
// takes each side's kind from its address (unified addressing), copies either.
static void gpu_copy_to_host(void* ctx, void* dst, const void* src, size_t bytes) {
    cudaCheck(cudaDeviceSynchronize());
    cudaCheck(cudaMemcpy(dst, src, bytes, cudaMemcpyDefault));
}
static void gpu_copy_to_device(void* ctx, void* dst, const void* src, size_t bytes) {
    cudaCheck(cudaDeviceSynchronize());
    cudaCheck(cudaMemcpy(dst, src, bytes, cudaMemcpyDefault));
    // from pageable memory cudaMemcpy may return before the DMA has landed, and the non-blocking
    // streams would not wait for it
    cudaCheck(cudaDeviceSynchronize());
}

// ------------------------------------------------------------------------------------------------
// Start-up: ranks, device, NCCL

// An integer environment variable, or `fallback` when unset; a malformed value is an error.
static int env_int(const char* name, int fallback) {
    const char* s = getenv(name);
    if (!s || !*s) return fallback;
    char* end;
    long v = strtol(s, &end, 10);
    if (*end || v < 0 || v > (1 << 24)) fatal("environment variable %s='%s' is not a non-negative integer", name, s);
    return (int)v;
}

#define RENDEZVOUS_MAGIC "ZERO3-NCCL-ID-1"
typedef struct {
    char magic[16];
    int world;
    ncclUniqueId id;
} RendezvousRecord;

// Rank 0 writes the id to `path` atomically (temp file, fsync, rename), so a reader never sees half.
static void rendezvous_publish(const char* path, const ncclUniqueId* id, int world) {
    RendezvousRecord rec;
    memset(&rec, 0, sizeof rec);
    snprintf(rec.magic, sizeof rec.magic, "%s", RENDEZVOUS_MAGIC);
    rec.world = world;
    rec.id = *id;
    char tmp[4200];
    snprintf(tmp, sizeof tmp, "%s.tmp.%d", path, (int)getpid());
    FILE* f = fopen(tmp, "wb");
    if (!f) fatal_local("rendezvous: cannot create %s (%s)", tmp, strerror(errno));
    int ok = fwrite(&rec, sizeof rec, 1, f) == 1 && fflush(f) == 0 && fsync(fileno(f)) == 0;
    fclose(f);
    if (!ok || rename(tmp, path) != 0) {
        remove(tmp);
        fatal_local("rendezvous: cannot write %s (%s)", path, strerror(errno));
    }
}

// The other ranks poll for the file, up to ZERO3_RENDEZVOUS_TIMEOUT seconds (default 120).
static void rendezvous_read(const char* path, ncclUniqueId* id, int world) {
    const int timeout = env_int("ZERO3_RENDEZVOUS_TIMEOUT", 120);
    const double deadline = now_seconds() + timeout;
    for (;;) {
        FILE* f = fopen(path, "rb");
        if (f) {
            RendezvousRecord rec;
            size_t got = fread(&rec, 1, sizeof rec, f);
            fclose(f);
            if (got != sizeof rec || strncmp(rec.magic, RENDEZVOUS_MAGIC, sizeof rec.magic) != 0)
                fatal_local("rendezvous: %s is not a NCCL id file written by rank 0 (%zu bytes)", path, got);
            if (rec.world != world)
                fatal_local("rendezvous: %s was written for WORLD_SIZE=%d, this rank has %d (a file left by another launch?)",
                            path, rec.world, world);
            *id = rec.id;
            return;
        }
        if (now_seconds() > deadline)
            fatal_local("rendezvous: no NCCL id in %s after %d s: is rank 0 running? (ZERO3_RENDEZVOUS_TIMEOUT sets the wait)",
                        path, timeout);
        usleep(20000);
    }
}

// Aborts every communicator (a failing rank must not leave the others blocked in a collective).
// comms_abort is the watchdog's own (it never waits for the watchdog thread).
static void comms_abort(GpuBackend* g) {
    if (g->shard_comm && g->shard_comm != g->comm) ncclCommAbort(g->shard_comm);
    if (g->replica_comm) ncclCommAbort(g->replica_comm);
    if (g->node_comm) ncclCommAbort(g->node_comm);
    if (g->cross_comm) ncclCommAbort(g->cross_comm);
    if (g->comm) ncclCommAbort(g->comm);
    g->comm = g->shard_comm = g->replica_comm = g->node_comm = g->cross_comm = NULL;
}
static void gpu_abort_comms(GpuBackend* g) {
    watch_stop(g);   // it polls the communicators
    comms_abort(g);
}

// The backend's exits (proc/proc.h), handed to the error path by the process's first backend (gpu_find_rank).
static void gpu_shutdown(void* transport) {
    // a collective exit (every rank found the same error): nothing may block on the others
    GpuBackend* g = (GpuBackend*)transport;
    gpu_abort_comms(g);
#ifdef USE_MPI
    if (g->owns_mpi) MPI_Finalize();
#endif
}
static void gpu_abort_all(void* transport) {
    gpu_abort_comms((GpuBackend*)transport);
#ifdef USE_MPI
    MPI_Abort(MPI_COMM_WORLD, 1);
#endif
    exit(1);  // without MPI, scripts/launch.sh ends the other ranks when one fails
}

// Every rank's host name for the watchdog's lines: gathered over MPI; without MPI only this rank's
// is known (its peers are named by rank).
static void gather_node_names(GpuBackend* g) {
    GpuWatch* w = &g->watch;
    char mine[GPU_NODE_NAME] = "";
    if (gethostname(mine, sizeof mine - 1) != 0) mine[0] = '\0';
#ifdef USE_MPI
    w->nodes = (char(*)[GPU_NODE_NAME])xcalloc((size_t)g->world, GPU_NODE_NAME);
    MPI_Allgather(mine, GPU_NODE_NAME, MPI_CHAR, w->nodes, GPU_NODE_NAME, MPI_CHAR, MPI_COMM_WORLD);
    w->nodes_known = 1;
#else
    w->nodes = (char(*)[GPU_NODE_NAME])xcalloc(1, GPU_NODE_NAME);
    memcpy(w->nodes[0], mine, GPU_NODE_NAME);
    w->nodes_known = g->world == 1;
#endif
}

// This process's rank and world (MPI, started here unless the process has it already, or the
// launcher's RANK / WORLD_SIZE / LOCAL_RANK). The process's first backend also lends the error path
// its rank and its exits (proc_exits_lend).
static void gpu_find_rank(GpuBackend* g, int* argc, char*** argv) {
#ifdef USE_MPI
    int started = 0;
    MPI_Initialized(&started);
    if (!started) MPI_Init(argc, argv);
    g->owns_mpi = !started;
    MPI_Comm_rank(MPI_COMM_WORLD, &g->rank);
    MPI_Comm_size(MPI_COMM_WORLD, &g->world);
    MPI_Comm local;
    MPI_Comm_split_type(MPI_COMM_WORLD, MPI_COMM_TYPE_SHARED, 0, MPI_INFO_NULL, &local);
    MPI_Comm_rank(local, &g->local_rank);
    MPI_Comm_free(&local);
#else
    g->world = env_int("WORLD_SIZE", 1);
    g->rank = env_int("RANK", 0);
    g->local_rank = env_int("LOCAL_RANK", g->rank);
    if (g->world < 1 || g->rank >= g->world)
        fatal("environment: RANK=%d must be below WORLD_SIZE=%d", g->rank, g->world);
#endif
    g->exits = ProcessExits{g->rank, g->world, gpu_shutdown, gpu_abort_all, g};
    proc_exits_lend(&g->exits);
    g->world_ring = g->shard_ring = GpuRing{0, 1, g->world};
    gather_node_names(g);
}

// This rank's GPU (LOCAL_RANK % devices), its two streams, and the small buffers and events the
// backend keeps for its whole life.
static void gpu_open_device(GpuBackend* g) {
    int ndev = 0;
    if (cudaGetDeviceCount(&ndev) != cudaSuccess || ndev == 0) {
        cudaGetLastError();
        fatal_local("no CUDA device found (this is the GPU trainer; the CPU one is train_gpt2_zero3)");
    }
    g->device = g->local_rank % ndev;
    cudaCheck(cudaSetDevice(g->device));
    int least, greatest;
    cudaCheck(cudaDeviceGetStreamPriorityRange(&least, &greatest));
    cudaCheck(cudaStreamCreateWithPriority(&g->compute, cudaStreamNonBlocking, least));
    cudaCheck(cudaStreamCreateWithPriority(&g->comm_stream, cudaStreamNonBlocking, greatest));
    cudaCheck(cudaEventCreateWithFlags(&g->compute_ready, cudaEventDisableTiming));
    for (int i = 0; i < GPU_MAX_HANDLES; i++) cudaCheck(cudaEventCreateWithFlags(&g->handle_event[i], cudaEventDisableTiming));
    cudaCheck(cudaMalloc((void**)&g->sumsq_scratch, SUMSQ_BLOCKS * sizeof(float)));
    cudaCheck(cudaMalloc((void**)&g->sumsq_slots, GPU_SUMSQ_SLOTS * sizeof(float)));
    cudaCheck(cudaMallocHost((void**)&g->sumsq_host, GPU_SUMSQ_SLOTS * sizeof(float)));
    cudaCheck(cudaMalloc((void**)&g->scalar_device, sizeof(double)));
    cudaCheck(cudaMallocHost((void**)&g->scalar_host, sizeof(double)));
    cudaCheck(cudaEventCreateWithFlags(&g->adamw_uploaded, cudaEventDisableTiming));
    cudaCheck(cudaEventRecord(g->adamw_uploaded, g->compute));   // "no upload pending"
}

// The NCCL communicator of all ranks, for N > 1 (ZERO3_FORCE_NCCL=1 makes one on one rank too, to
// test that path): rank 0's id reaches the others over MPI, or through the rendezvous file.
static void gpu_connect(GpuBackend* g) {
    if (g->world == 1 && !env_int("ZERO3_FORCE_NCCL", 0)) return;
    ncclUniqueId id;
    if (g->rank == 0) ncclCheck(ncclGetUniqueId(&id));
#ifdef USE_MPI
    MPI_Bcast(&id, sizeof id, MPI_BYTE, 0, MPI_COMM_WORLD);
#else
    const char* path = getenv("ZERO3_RENDEZVOUS");
    if (g->world > 1 && (!path || !*path))
        fatal("WORLD_SIZE=%d without MPI needs ZERO3_RENDEZVOUS, a file path every rank can see: start the ranks "
              "with scripts/launch.sh -n %d ...", g->world, g->world);
    if (g->world > 1) {
        if (g->rank == 0) rendezvous_publish(path, &id, g->world);
        else rendezvous_read(path, &id, g->world);
    }
#endif
#if defined(NCCL_VERSION_CODE) && NCCL_VERSION_CODE >= 21400
    // non-blocking (blocking = 0): no NCCL call holds the host thread waiting for a peer, so the
    // watchdog's deadline bounds every wait and its abort always finds the host free to end
    ncclConfig_t config = NCCL_CONFIG_INITIALIZER;
    config.blocking = 0;
    ncclMade(g, &g->comm, ncclCommInitRankConfig(&g->comm, g->world, id, g->rank, &config));
#else
    ncclCheck(ncclCommInitRank(&g->comm, g->world, id, g->rank));
#endif
    g->shard_comm = g->comm;   // until HSDP splits it (gpu_make_groups)
}

// the collective handles started and not yet waited on (the engine's step-end invariant wants none)
static int gpu_collectives_in_flight(void* ctx) {
    GpuBackend* g = (GpuBackend*)ctx;
    int n = 0;
    for (int i = 0; i < GPU_MAX_HANDLES; i++) n += g->handle_busy[i] != 0;
    return n;
}

static void gpu_fill_table(Zero3Backend* be, GpuBackend* g) {
    memset(be, 0, sizeof(*be));
    be->ctx = g;
    be->rank = g->rank;
    be->world = g->world;
    be->alloc = gpu_alloc;
    be->free = gpu_free;
    be->zero = gpu_zero;
    be->copy_to_host = gpu_copy_to_host;
    be->copy_to_device = gpu_copy_to_device;
    be->all_gather_start = gpu_all_gather_start;
    be->reduce_scatter_start = gpu_reduce_scatter_start;
    be->all_reduce_start = gpu_all_reduce_start;
    be->wait = gpu_wait;
    be->make_groups = gpu_make_groups;
    be->replica_all_reduce_start = gpu_replica_all_reduce_start;
    be->all_reduce_scalar = gpu_all_reduce_scalar;
    be->sum_squares_add = gpu_sum_squares_add;
    be->sum_squares_total = gpu_sum_squares_total;
    be->add = gpu_add;
    be->copy = gpu_copy;
    be->make_node_groups = gpu_make_node_groups;
    be->node_all_gather_start = gpu_node_all_gather_start;
    be->all_to_all_start = gpu_all_to_all_start;
    be->quantize = gpu_quantize;
    be->dequantize = gpu_dequantize;
    be->cast_from_f32 = gpu_cast_from_f32;
    be->adamw = gpu_adamw;
    be->host_alloc = gpu_host_alloc;
    be->host_free = gpu_host_free;
    be->host_adamw = gpu_host_adamw;
    be->grads_final = gpu_grads_final;
    be->stamp = gpu_stamp;
    be->comm_stamps = gpu_comm_stamps;
    be->stamps_read = gpu_stamps_read;
    be->collectives_in_flight = gpu_collectives_in_flight;
    be->collective_timeout = gpu_collective_timeout;
    be->label = gpu_label;
    be->at_step = gpu_at_step;
}

// Makes a backend's state: finds this process's rank, picks its GPU, connects the ranks and fills
// the table with it (be->ctx).
static void gpu_backend_init(Zero3Backend* be, int* argc, char*** argv) {
    GpuBackend* g = (GpuBackend*)xcalloc(1, sizeof(GpuBackend));
    pthread_mutex_init(&g->watch.mu, NULL);
    gpu_find_rank(g, argc, argv);
    g->host.piece = (size_t)env_int("ZERO3_GPU_HOST_PIECE", GPU_HOST_PIECE);   // -oo host's pieces (read here: a bad one ends the run before it starts)
    gpu_open_device(g);
    gpu_connect(g);
    gpu_fill_table(be, g);
}

// Destroys the communicators, then the device's streams, events and buffers; frees the state.
static void gpu_backend_finish(Zero3Backend* be) {
    GpuBackend* g = (GpuBackend*)be->ctx;
    cudaCheck(cudaDeviceSynchronize());
    watch_stop(g);
    if (g->shard_comm && g->shard_comm != g->comm) comm_destroy(g, g->shard_comm);
    if (g->replica_comm) comm_destroy(g, g->replica_comm);
    if (g->node_comm) comm_destroy(g, g->node_comm);
    if (g->cross_comm) comm_destroy(g, g->cross_comm);
    if (g->comm) comm_destroy(g, g->comm);
    g->comm = g->shard_comm = g->replica_comm = g->node_comm = g->cross_comm = NULL;
    for (int i = 0; i < GPU_MAX_HANDLES; i++) cudaCheck(cudaEventDestroy(g->handle_event[i]));
    for (int i = 0; i < g->stamp_cap; i++) cudaCheck(cudaEventDestroy(g->stamp_events[i]));
    free(g->stamp_events);
    cudaCheck(cudaEventDestroy(g->compute_ready));
    cudaCheck(cudaFree(g->sumsq_scratch));
    cudaCheck(cudaFree(g->sumsq_slots));
    cudaCheck(cudaFreeHost(g->sumsq_host));
    cudaCheck(cudaFree(g->scalar_device));
    cudaCheck(cudaFreeHost(g->scalar_host));
    cudaCheck(cudaFreeHost(g->adamw_table_host));
    cudaCheck(cudaFree(g->adamw_table_device));
    cudaCheck(cudaEventDestroy(g->adamw_uploaded));
    if (g->host.out) {   // -oo host ran a step
        cudaCheck(cudaFreeHost(g->host.grads));
        cudaCheck(cudaFreeHost(g->host.params));
        for (int p = 0; p < g->host.pieces_cap; p++) cudaCheck(cudaEventDestroy(g->host.piece_out[p]));
        free(g->host.piece_out);
        free(g->host.host_pieces);
        free(g->host.device_pieces);
        cudaCheck(cudaEventDestroy(g->host.compute_done));
        cudaCheck(cudaEventDestroy(g->host.params_back));
        cudaCheck(cudaStreamDestroy(g->host.out));
        cudaCheck(cudaStreamDestroy(g->host.back));
    }
    cudaCheck(cudaStreamDestroy(g->compute));
    cudaCheck(cudaStreamDestroy(g->comm_stream));
    free(g->watch.nodes);
    pthread_mutex_destroy(&g->watch.mu);
    proc_exits_return(&g->exits);   // the error path's exits no longer lead here
#ifdef USE_MPI
    if (g->owns_mpi) MPI_Finalize();
#endif
    free(g);
    be->ctx = NULL;
}
