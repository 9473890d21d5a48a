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
#pragma once
#include "cuda_runtime.h"
#include "cuda_bf16.h"
#include <unistd.h>
#ifdef USE_MPI
#include <mpi.h>
#endif

typedef struct { char internal[128]; } ncclUniqueId;
typedef enum { ncclSuccess = 0, ncclSystemError = 2, ncclInvalidArgument = 4, ncclInvalidUsage = 5 } ncclResult_t;
typedef enum { ncclInt8 = 0, ncclFloat = 7, ncclDouble = 8, ncclBfloat16 = 9 } ncclDataType_t;
typedef enum { ncclSum = 0 } ncclRedOp_t;
struct EmuNcclComm {
    int nranks, rank;
#ifdef USE_MPI
    MPI_Comm mpi;  // a duplicate of MPI_COMM_WORLD, so the trainer's own MPI traffic cannot interfere
#endif
};
typedef EmuNcclComm* ncclComm_t;

inline size_t emu_nccl_size(ncclDataType_t t) { return t == ncclDouble ? 8 : t == ncclFloat ? 4 : t == ncclInt8 ? 1 : 2; }
inline const char* ncclGetErrorString(ncclResult_t r) { return r == ncclSuccess ? "no error" : "emulated NCCL error"; }
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

inline ncclResult_t ncclCommInitRank(ncclComm_t* c, int nranks, ncclUniqueId id, int rank) {
#ifdef USE_MPI
    int init = 0, world = 0, me = 0;
    MPI_Initialized(&init);
    if (!init) emu::die("emulated NCCL: %d ranks need MPI initialized first", nranks);
    MPI_Comm_size(MPI_COMM_WORLD, &world);
    MPI_Comm_rank(MPI_COMM_WORLD, &me);
    if (world != nranks || me != rank)
        emu::die("emulated NCCL runs over MPI_COMM_WORLD: asked for rank %d of %d, MPI has rank %d of %d", rank, nranks, me, world);
    EmuNcclComm* comm = new EmuNcclComm{nranks, rank, MPI_COMM_NULL};
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
    *c = new EmuNcclComm{1, 0};
#endif
    return ncclSuccess;
}
inline ncclResult_t ncclCommDestroy(ncclComm_t c) {
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
inline ncclResult_t ncclCommSplit(ncclComm_t c, int color, int key, ncclComm_t* out, void* config) {
    (void)config;
    emu::run_all();
#ifdef USE_MPI
    MPI_Comm m;
    MPI_Comm_split(c->mpi, color, key, &m);
    int n = 0, r = 0;
    MPI_Comm_size(m, &n);
    MPI_Comm_rank(m, &r);
    *out = new EmuNcclComm{n, r, m};
#else
    (void)color;
    (void)key;
    *out = new EmuNcclComm{c->nranks, c->rank};
#endif
    return ncclSuccess;
}
// nothing may block in an abort (the other ranks may be gone): no MPI call, and the object is kept
// because queued work may still name it (the process is about to exit)
inline ncclResult_t ncclCommAbort(ncclComm_t c) { return c ? ncclSuccess : ncclInvalidArgument; }

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
#endif

// The three collectives as they run on the stream. send/recv may alias (NCCL's in-place forms).
inline void run_all_gather(const void* send, void* recv, size_t n, ncclDataType_t t, EmuNcclComm* c) {
    const size_t bytes = n * emu_nccl_size(t);
#ifdef USE_MPI
    if (c->nranks > 1) {
        std::vector<char> mine((const char*)send, (const char*)send + bytes);
        mpi_check(MPI_Allgather(mine.data(), mpi_count(bytes), MPI_BYTE, recv, mpi_count(bytes), MPI_BYTE, c->mpi),
                  "all-gather");
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
        std::vector<char> all((const char*)send, (const char*)send + bytes * c->nranks), parts(bytes * c->nranks);
        mpi_check(MPI_Alltoall(all.data(), mpi_count(bytes), MPI_BYTE, parts.data(), mpi_count(bytes), MPI_BYTE, c->mpi),
                  "reduce-scatter");
        nccl_sum(recv, parts.data(), c->nranks, n, t);
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
        std::vector<char> mine((const char*)send, (const char*)send + bytes), parts(bytes * c->nranks);
        mpi_check(MPI_Allgather(mine.data(), mpi_count(bytes), MPI_BYTE, parts.data(), mpi_count(bytes), MPI_BYTE, c->mpi),
                  "all-reduce");
        nccl_sum(recv, parts.data(), c->nranks, n, t);
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
    std::vector<std::vector<char>> sent;
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
        mpi_check(MPI_Waitall((int)req.size(), req.data(), MPI_STATUSES_IGNORE), "send/receive wait");
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
}

inline ncclResult_t p2p_call(bool send, const void* sbuf, void* rbuf, size_t n, ncclDataType_t t, int peer, EmuNcclComm* c,
                             cudaStream_t s) {
    if (!c || peer < 0 || peer >= c->nranks) return ncclInvalidArgument;
    if (nccl_group_depth > 0 && !nccl_group_ops.empty() && nccl_group_stream != s) return ncclInvalidUsage;
    nccl_group_ops.push_back(NcclP2p{send, sbuf, rbuf, n * emu_nccl_size(t), peer, c});
    nccl_group_stream = s;
    if (nccl_group_depth == 0) {   // outside a group: a group of one
        std::vector<NcclP2p> ops;
        ops.swap(nccl_group_ops);
        enqueue(s, [ops]() { run_p2p(ops); });
    }
    return ncclSuccess;
}

}  // namespace emu

// The API calls: checked when issued, queued on the stream.
inline ncclResult_t ncclAllGather(const void* send, void* recv, size_t n, ncclDataType_t t, ncclComm_t c, cudaStream_t s) {
    if (!c) return ncclInvalidArgument;
    emu::enqueue(s, [=]() { emu::run_all_gather(send, recv, n, t, c); });
    return ncclSuccess;
}
inline ncclResult_t ncclReduceScatter(const void* send, void* recv, size_t n, ncclDataType_t t, ncclRedOp_t op, ncclComm_t c,
                                      cudaStream_t s) {
    if (!c || op != ncclSum) return ncclInvalidArgument;
    emu::enqueue(s, [=]() { emu::run_reduce_scatter(send, recv, n, t, c); });
    return ncclSuccess;
}
inline ncclResult_t ncclAllReduce(const void* send, void* recv, size_t n, ncclDataType_t t, ncclRedOp_t op, ncclComm_t c,
                                  cudaStream_t s) {
    if (!c || op != ncclSum) return ncclInvalidArgument;
    emu::enqueue(s, [=]() { emu::run_all_reduce(send, recv, n, t, c); });
    return ncclSuccess;
}
inline ncclResult_t ncclGroupStart() { emu::nccl_group_depth++; return ncclSuccess; }
inline ncclResult_t ncclGroupEnd() {
    if (emu::nccl_group_depth == 0) return ncclInvalidUsage;
    if (--emu::nccl_group_depth == 0 && !emu::nccl_group_ops.empty()) {
        std::vector<emu::NcclP2p> ops;
        ops.swap(emu::nccl_group_ops);
        emu::enqueue(emu::nccl_group_stream, [ops]() { emu::run_p2p(ops); });
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
