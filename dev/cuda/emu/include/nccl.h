// NCCL for the CPU emulator (dev/cuda/emu): one rank only, where every collective is a copy (or
// nothing, in place). Enough to run the NCCL code path of the backend (ZERO3_FORCE_NCCL=1).
#pragma once
#include "cuda_runtime.h"

typedef struct { char internal[128]; } ncclUniqueId;
typedef enum { ncclSuccess = 0, ncclInvalidArgument = 4, ncclInvalidUsage = 5 } ncclResult_t;
typedef enum { ncclFloat = 7, ncclDouble = 8, ncclBfloat16 = 9 } ncclDataType_t;
typedef enum { ncclSum = 0 } ncclRedOp_t;
struct EmuNcclComm { int nranks; };
typedef EmuNcclComm* ncclComm_t;

inline size_t emu_nccl_size(ncclDataType_t t) { return t == ncclDouble ? 8 : t == ncclFloat ? 4 : 2; }
inline const char* ncclGetErrorString(ncclResult_t r) { return r == ncclSuccess ? "no error" : "emulated NCCL error"; }
inline ncclResult_t ncclGetVersion(int* v) { *v = 22800; return ncclSuccess; }
inline ncclResult_t ncclGetUniqueId(ncclUniqueId* id) { memset(id, 7, sizeof(*id)); return ncclSuccess; }
inline ncclResult_t ncclCommInitRank(ncclComm_t* c, int nranks, ncclUniqueId, int rank) {
    if (nranks != 1 || rank != 0) emu::die("emulated NCCL supports one rank (asked for rank %d of %d)", rank, nranks);
    *c = new EmuNcclComm{1};
    return ncclSuccess;
}
inline ncclResult_t ncclCommDestroy(ncclComm_t c) { delete c; return ncclSuccess; }
inline ncclResult_t ncclCommAbort(ncclComm_t c) { delete c; return ncclSuccess; }
inline ncclResult_t ncclAllGather(const void* send, void* recv, size_t n, ncclDataType_t t, ncclComm_t c, cudaStream_t) {
    if (!c) return ncclInvalidArgument;
    if (send != recv) memmove(recv, send, n * emu_nccl_size(t));
    return ncclSuccess;
}
inline ncclResult_t ncclReduceScatter(const void* send, void* recv, size_t n, ncclDataType_t t, ncclRedOp_t, ncclComm_t c, cudaStream_t) {
    if (!c) return ncclInvalidArgument;
    if (send != recv) memmove(recv, send, n * emu_nccl_size(t));
    return ncclSuccess;
}
inline ncclResult_t ncclAllReduce(const void* send, void* recv, size_t n, ncclDataType_t t, ncclRedOp_t, ncclComm_t c, cudaStream_t) {
    if (!c) return ncclInvalidArgument;
    if (send != recv) memmove(recv, send, n * emu_nccl_size(t));
    return ncclSuccess;
}
