// NCCL for the CPU emulator (tools/emu). Collectives are queued on their stream like any GPU
// work (emu_streams.h) and do their exchange when that stream runs them:
//   - one rank (ZERO3_FORCE_NCCL=1): a collective is a copy (or nothing, in place);
//   - N ranks, in a build with -DUSE_MPI (each rank a process under mpirun): the exchange goes over
//     MPI between the ranks' host buffers (emulated device memory is host memory).
// Sums are computed the same way on every rank (all contributions gathered, then added in rank
// order, in fp32 for fp32/bf16 and fp64 for doubles), so every rank gets bitwise the same result,
// as NCCL guarantees. A collective blocks its process until every rank has run it, like the NCCL
// kernel spins on the GPU; as long as the ranks queue the same collectives in the same order on one
// stream (what NCCL requires), each rank gets to run them and the blocking resolves.
//
// Failure handling, as NCCL 2.28 documents it:
//   - a communicator made with ncclConfig_t.blocking = 0 (ncclCommInitRankConfig; a split inherits
//     its parent's) is non-blocking: a call that does work on it (the init, a split, the finalize,
//     its first collective or group, where NCCL connects its peers) returns ncclInProgress and the
//     caller polls ncclCommGetAsyncError until the state leaves ncclInProgress; another call on
//     the communicator meanwhile is ncclInvalidUsage. (The emulator has done the work at the
//     call; it reports the state as NCCL would.)
//   - ncclCommGetAsyncError and ncclCommAbort may be called from any thread at any time (a
//     watchdog's). An abort makes a collective of the communicator that is waiting for its peers
//     give up: the stream moves on, the collective's result undefined.
//   - EMU_NCCL_FREEZE=R:N plays a rank that stops answering mid-collective: rank R (of
//     MPI_COMM_WORLD) stops its whole process (SIGSTOP) when its N-th all-gather (counted from 1,
//     every communicator's) starts on the stream, before sending anything, so its peers wait in
//     that all-gather for ever (what a dead node, a hung GPU or a frozen process looks like to them).
#pragma once
#include "cuda_runtime.h"
#include "cuda_bf16.h"
#include <limits.h>
#include <sched.h>
#include <signal.h>
#include <unistd.h>
#include <atomic>
#ifdef USE_MPI
#include <mpi.h>
#endif

typedef struct { char internal[128]; } ncclUniqueId;
typedef enum {
    ncclSuccess = 0, ncclUnhandledCudaError = 1, ncclSystemError = 2, ncclInternalError = 3, ncclInvalidArgument = 4,
    ncclInvalidUsage = 5, ncclRemoteError = 6, ncclInProgress = 7, ncclNumResults = 8
} ncclResult_t;
typedef enum { ncclInt8 = 0, ncclFloat = 7, ncclDouble = 8, ncclBfloat16 = 9 } ncclDataType_t;
typedef enum { ncclSum = 0 } ncclRedOp_t;
struct EmuNcclComm {
    int nranks, rank;
    bool blocking;                 // ncclConfig_t.blocking (a split inherits it)
    bool connected;                // its first collective or group has run (a non-blocking one reports it)
    std::atomic<int> state;        // ncclResult_t: ncclSuccess, ncclInProgress, or an error
    std::atomic<bool> aborted;     // ncclCommAbort was called (from any thread)
#ifdef USE_MPI
    MPI_Comm mpi;  // a duplicate of MPI_COMM_WORLD, so the trainer's own MPI traffic cannot interfere
#endif
};
typedef EmuNcclComm* ncclComm_t;

// The communicator configuration (NCCL 2.28's ncclConfig_t, field for field); the emulator reads
// `blocking` and checks the header words, as NCCL does.
#define NCCL_CONFIG_UNDEF_INT INT_MIN
#define NCCL_CONFIG_UNDEF_PTR NULL
#define NCCL_MAJOR 2
#define NCCL_MINOR 28
#define NCCL_PATCH 0
#define NCCL_VERSION(X, Y, Z) (((X) <= 2 && (Y) <= 8) ? (X) * 1000 + (Y) * 100 + (Z) : (X) * 10000 + (Y) * 100 + (Z))
typedef struct ncclConfig_v22800 {
    size_t size;
    unsigned int magic;
    unsigned int version;
    int blocking;
    int cgaClusterSize;
    int minCTAs;
    int maxCTAs;
    const char* netName;
    int splitShare;
    int trafficClass;
    const char* commName;
    int collnetEnable;
    int CTAPolicy;
    int shrinkShare;
    int nvlsCTAs;
    int nChannelsPerNetPeer;
    int nvlinkCentricSched;
} ncclConfig_t;
#define NCCL_CONFIG_INITIALIZER                                                                                        \
    {                                                                                                                  \
        sizeof(ncclConfig_t), 0xcafebeef, NCCL_VERSION(NCCL_MAJOR, NCCL_MINOR, NCCL_PATCH), NCCL_CONFIG_UNDEF_INT,      \
            NCCL_CONFIG_UNDEF_INT, NCCL_CONFIG_UNDEF_INT, NCCL_CONFIG_UNDEF_INT, NCCL_CONFIG_UNDEF_PTR,                 \
            NCCL_CONFIG_UNDEF_INT, NCCL_CONFIG_UNDEF_INT, NCCL_CONFIG_UNDEF_PTR, NCCL_CONFIG_UNDEF_INT,                 \
            NCCL_CONFIG_UNDEF_INT, NCCL_CONFIG_UNDEF_INT, NCCL_CONFIG_UNDEF_INT, NCCL_CONFIG_UNDEF_INT,                 \
            NCCL_CONFIG_UNDEF_INT                                                                                      \
    }

namespace emu {
#ifdef USE_MPI
inline EmuNcclComm* new_comm(int nranks, int rank, bool blocking, MPI_Comm mpi) {
#else
inline EmuNcclComm* new_comm(int nranks, int rank, bool blocking) {
#endif
    EmuNcclComm* c = new EmuNcclComm;
    c->nranks = nranks;
    c->rank = rank;
    c->blocking = blocking;
    c->connected = false;
    c->state = ncclSuccess;
    c->aborted = false;
#ifdef USE_MPI
    c->mpi = mpi;
#endif
    return c;
}
// A call that did work on c: a blocking communicator is done (ncclSuccess); a non-blocking one
// reports ncclInProgress until the caller polls ncclCommGetAsyncError.
inline ncclResult_t settled_later(EmuNcclComm* c) {
    if (c->blocking) return ncclSuccess;
    c->state = ncclInProgress;
    return ncclInProgress;
}
// A call on c is allowed: it exists, is not aborted, and no non-blocking call on it is unsettled.
inline ncclResult_t usable(const EmuNcclComm* c) {
    if (!c) return ncclInvalidArgument;
    if (c->aborted || c->state == ncclInProgress) return ncclInvalidUsage;
    return ncclSuccess;
}
// A collective or group call's result: its first one on a non-blocking communicator reports
// ncclInProgress (NCCL connects the peers then), later ones ncclSuccess.
inline ncclResult_t issued(EmuNcclComm* c) {
    if (c->connected) return ncclSuccess;
    c->connected = true;
    return settled_later(c);
}
}  // namespace emu

inline size_t emu_nccl_size(ncclDataType_t t) { return t == ncclDouble ? 8 : t == ncclFloat ? 4 : t == ncclInt8 ? 1 : 2; }
inline const char* ncclGetErrorString(ncclResult_t r) {
    switch (r) {
    case ncclSuccess: return "no error";
    case ncclInvalidArgument: return "invalid argument (emulated NCCL)";
    case ncclInvalidUsage: return "invalid usage (emulated NCCL)";
    case ncclInProgress: return "NCCL operation in progress";
    default: return "emulated NCCL error";
    }
}
#define NCCL_VERSION_CODE 22800  // 2.28: what the trainer checks for ncclCommSplit (HSDP's groups)
inline ncclResult_t ncclGetVersion(int* v) { *v = NCCL_VERSION_CODE; return ncclSuccess; }

// A fresh random id, as NCCL's: ranks that were not handed rank 0's id cannot form a communicator.
inline ncclResult_t ncclGetUniqueId(ncclUniqueId* id) {
    uint64_t x = (uint64_t)getpid() * 0x9E3779B97F4A7C15ull ^ (uint64_t)(emu::now() * 1e9);
    for (size_t i = 0; i < sizeof(id->internal); i++) {
        x ^= x << 13; x ^= x >> 7; x ^= x << 17;
        id->internal[i] = (char)x;
    }
    return ncclSuccess;
}

// config NULL: blocking. Like NCCL, a config not made from NCCL_CONFIG_INITIALIZER is refused.
inline ncclResult_t ncclCommInitRankConfig(ncclComm_t* c, int nranks, ncclUniqueId id, int rank, ncclConfig_t* config) {
    bool blocking = true;
    if (config) {
        if (config->magic != 0xcafebeef || config->size != sizeof(ncclConfig_t)) return ncclInvalidArgument;
        if (config->blocking != NCCL_CONFIG_UNDEF_INT && config->blocking != 0 && config->blocking != 1) return ncclInvalidArgument;
        blocking = config->blocking != 0;
    }
#ifdef USE_MPI
    int init = 0, world = 0, me = 0;
    MPI_Initialized(&init);
    if (!init) emu::die("emulated NCCL: %d ranks need MPI initialized first", nranks);
    MPI_Comm_size(MPI_COMM_WORLD, &world);
    MPI_Comm_rank(MPI_COMM_WORLD, &me);
    if (world != nranks || me != rank)
        emu::die("emulated NCCL runs over MPI_COMM_WORLD: asked for rank %d of %d, MPI has rank %d of %d", rank, nranks, me, world);
    EmuNcclComm* comm = emu::new_comm(nranks, rank, blocking, MPI_COMM_NULL);
    MPI_Comm_dup(MPI_COMM_WORLD, &comm->mpi);
    // every rank must hold rank 0's id, as with real NCCL (the trainer broadcasts it)
    ncclUniqueId root = id;
    MPI_Bcast(&root, sizeof root, MPI_BYTE, 0, comm->mpi);
    if (memcmp(&root, &id, sizeof id) != 0) emu::die("emulated NCCL: rank %d has a different unique id than rank 0", rank);
    *c = comm;
#else
    (void)id;
    if (nranks != 1 || rank != 0)
        emu::die("emulated NCCL without MPI supports one rank (asked for rank %d of %d): build with -DUSE_MPI and run "
                 "under mpirun", rank, nranks);
    *c = emu::new_comm(1, 0, blocking);
#endif
    return emu::settled_later(*c);
}
inline ncclResult_t ncclCommInitRank(ncclComm_t* c, int nranks, ncclUniqueId id, int rank) {
    return ncclCommInitRankConfig(c, nranks, id, rank, NULL);
}
// The communicator's state: ncclSuccess, ncclInProgress (a non-blocking call not settled yet: it
// settles as it is polled) or an error. Any thread, any time.
inline ncclResult_t ncclCommGetAsyncError(ncclComm_t c, ncclResult_t* async_error) {
    if (!c || !async_error) return ncclInvalidArgument;
    int expected = ncclInProgress;
    if (c->state.compare_exchange_strong(expected, ncclSuccess)) *async_error = ncclInProgress;   // reported once more
    else *async_error = (ncclResult_t)expected;
    return ncclSuccess;
}
// Flushes the communicator's queued operations (here: every stream's, as a drain does).
inline ncclResult_t ncclCommFinalize(ncclComm_t c) {
    if (ncclResult_t r = emu::usable(c)) return r;
    emu::run_all();
    return emu::settled_later(c);
}
inline ncclResult_t ncclCommDestroy(ncclComm_t c) {
    if (!c) return ncclInvalidArgument;
    if (c->state == ncclInProgress) return ncclInvalidUsage;
    emu::run_all();  // as NCCL: pending operations of the communicator finish first
#ifdef USE_MPI
    MPI_Comm_free(&c->mpi);
#endif
    delete c;
    return ncclSuccess;
}
// The ranks of `c` with the same color form a new communicator, ordered by key (NCCL 2.18's
// ncclCommSplit; the config is not used). Like NCCL's, a collective call of every rank of `c`: the
// work already queued on the old communicator runs first, so no rank waits in a queued collective
// while another waits in the split.
inline ncclResult_t ncclCommSplit(ncclComm_t c, int color, int key, ncclComm_t* out, ncclConfig_t* config) {
    if (ncclResult_t r = emu::usable(c)) return r;
    bool blocking = c->blocking;   // config NULL: the parent's
    if (config) {
        if (config->magic != 0xcafebeef || config->size != sizeof(ncclConfig_t)) return ncclInvalidArgument;
        if (config->blocking != NCCL_CONFIG_UNDEF_INT) blocking = config->blocking != 0;
    }
    emu::run_all();
#ifdef USE_MPI
    MPI_Comm m;
    MPI_Comm_split(c->mpi, color, key, &m);
    int n = 0, r = 0;
    MPI_Comm_size(m, &n);
    MPI_Comm_rank(m, &r);
    *out = emu::new_comm(n, r, blocking, m);
#else
    (void)color;
    (void)key;
    *out = emu::new_comm(c->nranks, c->rank, blocking);
#endif
    return emu::settled_later(*out);
}
// Any thread, any time: nothing blocks in an abort (the other ranks may be gone), no MPI call is
// made; a collective of c waiting for its peers gives up (emu::wait_or_abort). The object is kept
// because queued work may still name it (the process is about to exit).
inline ncclResult_t ncclCommAbort(ncclComm_t c) {
    if (!c) return ncclInvalidArgument;
    c->aborted = true;
    return ncclSuccess;
}

namespace emu {

// Element i of a buffer of NCCL type t as a double, and back (fp32 and bf16 via float).
inline double nccl_load(const void* p, ncclDataType_t t, size_t i) {
    if (t == ncclDouble) return ((const double*)p)[i];
    if (t == ncclFloat) return ((const float*)p)[i];
    return __bfloat162float(((const __nv_bfloat16*)p)[i]);
}
inline void nccl_store(void* p, ncclDataType_t t, size_t i, double v) {
    if (t == ncclDouble) ((double*)p)[i] = v;
    else if (t == ncclFloat) ((float*)p)[i] = (float)v;
    else ((__nv_bfloat16*)p)[i] = __float2bfloat16_rn((float)v);
}

// out[i] = sum over r of parts[r*n + i], in rank order: fp32 sums for fp32 and bf16 (one rounding to
// bf16 at the end), fp64 for doubles.
inline void nccl_sum(void* out, const char* parts, int nranks, size_t n, ncclDataType_t t) {
    const size_t stride = n * emu_nccl_size(t);
    for (size_t i = 0; i < n; i++) {
        if (t == ncclDouble) {
            double s = 0.0;
            for (int r = 0; r < nranks; r++) s += nccl_load(parts + r * stride, t, i);
            nccl_store(out, t, i, s);
        } else {
            float s = 0.0f;
            for (int r = 0; r < nranks; r++) s += (float)nccl_load(parts + r * stride, t, i);
            nccl_store(out, t, i, s);
        }
    }
}

#ifdef USE_MPI
inline void mpi_check(int rc, const char* what) {
    if (rc != MPI_SUCCESS) die("emulated NCCL: MPI %s failed (code %d)", what, rc);
}
// MPI counts are ints; the emulated models are far below 2 GiB per collective
inline int mpi_count(size_t bytes) {
    if (bytes > (size_t)INT32_MAX) die("emulated NCCL: %zu bytes in one collective", bytes);
    return (int)bytes;
}
// Waits for the requests as a NCCL kernel spins on its peers' data, until they complete (true) or
// the communicator is aborted (false: the requests stay pending, and the buffers they name must
// outlive them: the caller leaks its staging copies; the process is ending).
inline bool wait_or_abort(MPI_Request* req, int n, EmuNcclComm* c, const char* what) {
    for (;;) {
        int done = 0;
        mpi_check(MPI_Testall(n, req, &done, MPI_STATUSES_IGNORE), what);
        if (done) return true;
        if (c->aborted) return false;
        sched_yield();
    }
}
// EMU_NCCL_FREEZE=R:N (see the top of this file): at the start of each all-gather, rank R stops at
// its N-th.
inline void maybe_freeze_in_all_gather() {
    static int rank = -2, nth = 0, count = 0;
    if (rank == -2) {
        rank = -1;
        const char* s = getenv("EMU_NCCL_FREEZE");
        if (s && *s && (sscanf(s, "%d:%d", &rank, &nth) != 2 || rank < 0 || nth < 1))
            die("EMU_NCCL_FREEZE='%s': want RANK:N (rank RANK stops in its N-th all-gather, N from 1)", s);
    }
    if (rank < 0) return;
    int me = -1;
    MPI_Comm_rank(MPI_COMM_WORLD, &me);
    if (me != rank || ++count != nth) return;
    fprintf(stderr, "[cuda emulator] EMU_NCCL_FREEZE: rank %d stops (SIGSTOP) at the start of its all-gather %d\n", me, nth);
    fflush(stderr);
    raise(SIGSTOP);
}
#endif

// The three collectives as they run on the stream. send/recv may alias (NCCL's in-place forms).
inline void run_all_gather(const void* send, void* recv, size_t n, ncclDataType_t t, EmuNcclComm* c) {
    const size_t bytes = n * emu_nccl_size(t);
#ifdef USE_MPI
    if (c->nranks > 1) {
        maybe_freeze_in_all_gather();
        auto* mine = new std::vector<char>((const char*)send, (const char*)send + bytes);
        MPI_Request req;
        mpi_check(MPI_Iallgather(mine->data(), mpi_count(bytes), MPI_BYTE, recv, mpi_count(bytes), MPI_BYTE, c->mpi, &req),
                  "all-gather");
        if (wait_or_abort(&req, 1, c, "all-gather")) delete mine;
        return;
    }
#endif
    (void)c;
    if (send != recv) memmove(recv, send, bytes);
}

// recv(n) = sum over ranks of their send[rank*n .. rank*n + n)
inline void run_reduce_scatter(const void* send, void* recv, size_t n, ncclDataType_t t, EmuNcclComm* c) {
    const size_t bytes = n * emu_nccl_size(t);
#ifdef USE_MPI
    if (c->nranks > 1) {
        // chunk r of every rank goes to rank r: afterwards parts holds the nranks contributions to mine
        auto* all = new std::vector<char>((const char*)send, (const char*)send + bytes * c->nranks);
        auto* parts = new std::vector<char>(bytes * c->nranks);
        MPI_Request req;
        mpi_check(MPI_Ialltoall(all->data(), mpi_count(bytes), MPI_BYTE, parts->data(), mpi_count(bytes), MPI_BYTE, c->mpi, &req),
                  "reduce-scatter");
        if (!wait_or_abort(&req, 1, c, "reduce-scatter")) return;
        nccl_sum(recv, parts->data(), c->nranks, n, t);
        delete all;
        delete parts;
        return;
    }
#endif
    (void)c;
    if (send != recv) memmove(recv, send, bytes);
}

inline void run_all_reduce(const void* send, void* recv, size_t n, ncclDataType_t t, EmuNcclComm* c) {
    const size_t bytes = n * emu_nccl_size(t);
#ifdef USE_MPI
    if (c->nranks > 1) {
        auto* mine = new std::vector<char>((const char*)send, (const char*)send + bytes);
        auto* parts = new std::vector<char>(bytes * c->nranks);
        MPI_Request req;
        mpi_check(MPI_Iallgather(mine->data(), mpi_count(bytes), MPI_BYTE, parts->data(), mpi_count(bytes), MPI_BYTE, c->mpi, &req),
                  "all-reduce");
        if (!wait_or_abort(&req, 1, c, "all-reduce")) return;
        nccl_sum(recv, parts->data(), c->nranks, n, t);
        delete mine;
        delete parts;
        return;
    }
#endif
    (void)c;
    if (send != recv) memmove(recv, send, bytes);
}

// Point-to-point (ncclSend / ncclRecv), as NCCL pairs them: the k-th send from rank a to rank b
// meets the k-th receive on b from a. Between ncclGroupStart and ncclGroupEnd the calls are only
// written down; the group then runs as one operation on the stream (every send and receive posted,
// then all waited for), so a group that sends to and receives from every peer cannot deadlock.
struct NcclP2p {
    bool send;
    const void* sbuf;
    void* rbuf;
    size_t bytes;
    int peer;
    EmuNcclComm* c;
};
inline int nccl_group_depth = 0;
inline std::vector<NcclP2p> nccl_group_ops;
inline cudaStream_t nccl_group_stream = 0;

inline void run_p2p(const std::vector<NcclP2p>& ops) {
    // what is sent is taken when the group runs, before anything is received (the buffers may alias)
    auto* staged = new std::vector<std::vector<char>>;
    std::vector<std::vector<char>>& sent = *staged;
    for (const NcclP2p& o : ops)
        if (o.send) sent.emplace_back((const char*)o.sbuf, (const char*)o.sbuf + o.bytes);
#ifdef USE_MPI
    if (!ops.empty() && ops[0].c->nranks > 1) {
        std::vector<MPI_Request> req(ops.size());
        size_t k = 0;
        for (size_t i = 0; i < ops.size(); i++) {
            const NcclP2p& o = ops[i];
            if (o.send) mpi_check(MPI_Isend(sent[k++].data(), mpi_count(o.bytes), MPI_BYTE, o.peer, 0, o.c->mpi, &req[i]), "send");
            else mpi_check(MPI_Irecv(o.rbuf, mpi_count(o.bytes), MPI_BYTE, o.peer, 0, o.c->mpi, &req[i]), "receive");
        }
        if (wait_or_abort(req.data(), (int)req.size(), ops[0].c, "send/receive wait")) delete staged;
        return;
    }
#endif
    // one rank: every send is to itself, and meets the receives in order
    size_t k = 0;
    for (const NcclP2p& o : ops) {
        if (o.send) continue;
        if (k >= sent.size() || sent[k].size() != o.bytes) die("emulated NCCL: a receive of %zu bytes with no matching send", o.bytes);
        memcpy(o.rbuf, sent[k++].data(), o.bytes);
    }
    delete staged;
}

inline ncclResult_t p2p_call(bool send, const void* sbuf, void* rbuf, size_t n, ncclDataType_t t, int peer, EmuNcclComm* c,
                             cudaStream_t s) {
    if (ncclResult_t r = usable(c)) return r;
    if (peer < 0 || peer >= c->nranks) return ncclInvalidArgument;
    if (nccl_group_depth > 0 && !nccl_group_ops.empty() && nccl_group_stream != s) return ncclInvalidUsage;
    nccl_group_ops.push_back(NcclP2p{send, sbuf, rbuf, n * emu_nccl_size(t), peer, c});
    nccl_group_stream = s;
    if (nccl_group_depth == 0) {   // outside a group: a group of one
        std::vector<NcclP2p> ops;
        ops.swap(nccl_group_ops);
        enqueue(s, [ops]() { run_p2p(ops); });
        return issued(c);
    }
    return ncclSuccess;
}

}  // namespace emu

// The API calls: checked when issued, queued on the stream.
inline ncclResult_t ncclAllGather(const void* send, void* recv, size_t n, ncclDataType_t t, ncclComm_t c, cudaStream_t s) {
    if (ncclResult_t r = emu::usable(c)) return r;
    emu::enqueue(s, [=]() { emu::run_all_gather(send, recv, n, t, c); });
    return emu::issued(c);
}
inline ncclResult_t ncclReduceScatter(const void* send, void* recv, size_t n, ncclDataType_t t, ncclRedOp_t op, ncclComm_t c,
                                      cudaStream_t s) {
    if (ncclResult_t r = emu::usable(c)) return r;
    if (op != ncclSum) return ncclInvalidArgument;
    emu::enqueue(s, [=]() { emu::run_reduce_scatter(send, recv, n, t, c); });
    return emu::issued(c);
}
inline ncclResult_t ncclAllReduce(const void* send, void* recv, size_t n, ncclDataType_t t, ncclRedOp_t op, ncclComm_t c,
                                  cudaStream_t s) {
    if (ncclResult_t r = emu::usable(c)) return r;
    if (op != ncclSum) return ncclInvalidArgument;
    emu::enqueue(s, [=]() { emu::run_all_reduce(send, recv, n, t, c); });
    return emu::issued(c);
}
inline ncclResult_t ncclGroupStart() { emu::nccl_group_depth++; return ncclSuccess; }
// A group of a non-blocking communicator reports its first run as ncclInProgress, as a collective does.
inline ncclResult_t ncclGroupEnd() {
    if (emu::nccl_group_depth == 0) return ncclInvalidUsage;
    if (--emu::nccl_group_depth == 0 && !emu::nccl_group_ops.empty()) {
        std::vector<emu::NcclP2p> ops;
        ops.swap(emu::nccl_group_ops);
        emu::enqueue(emu::nccl_group_stream, [ops]() { emu::run_p2p(ops); });
        return emu::issued(ops[0].c);
    }
    return ncclSuccess;
}
inline ncclResult_t ncclSend(const void* send, size_t n, ncclDataType_t t, int peer, ncclComm_t c, cudaStream_t s) {
    return emu::p2p_call(true, send, nullptr, n, t, peer, c, s);
}
inline ncclResult_t ncclRecv(void* recv, size_t n, ncclDataType_t t, int peer, ncclComm_t c, cudaStream_t s) {
    return emu::p2p_call(false, nullptr, recv, n, t, peer, c, s);
}
inline ncclResult_t ncclCommUserRank(ncclComm_t c, int* rank) {
    if (!c) return ncclInvalidArgument;
    *rank = c->rank;
    return ncclSuccess;
}
inline ncclResult_t ncclCommCount(ncclComm_t c, int* count) {
    if (!c) return ncclInvalidArgument;
    *count = c->nranks;
    return ncclSuccess;
}
