// NCCL for the CPU emulator (dev/cuda/emu). Collectives are queued on their stream like any GPU
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
typedef enum { ncclFloat = 7, ncclDouble = 8, ncclBfloat16 = 9 } ncclDataType_t;
typedef enum { ncclSum = 0 } ncclRedOp_t;
struct EmuNcclComm {
    int nranks, rank;
#ifdef USE_MPI
    MPI_Comm mpi;  // a duplicate of MPI_COMM_WORLD, so the trainer's own MPI traffic cannot interfere
#endif
};
typedef EmuNcclComm* ncclComm_t;

inline size_t emu_nccl_size(ncclDataType_t t) { return t == ncclDouble ? 8 : t == ncclFloat ? 4 : 2; }
inline const char* ncclGetErrorString(ncclResult_t r) { return r == ncclSuccess ? "no error" : "emulated NCCL error"; }
inline ncclResult_t ncclGetVersion(int* v) { *v = 22800; return ncclSuccess; }

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
