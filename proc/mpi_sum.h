// proc/mpi_sum.h: who adds up a reduction's contributions on the CPU transport, the one definition
// the CPU backend runs (cpu/backend_cpu.c: which sums it hands to MPI) and the peak planner prices
// (host/peak.c: the scratch those sums need). A leaf beside bf16.h: it includes only zero3.h, for
// the element types, so the backend below and the host library above may both include it.
//
//   element type, ranks       the reduction (reduce-scatter, all-reduce)    its scratch
//   bf16, anywhere            an all-to-all of the parts, each rank adding   the parts, one buffer of
//   fp32, on one machine      the parts it receives in rank order (bf16:     the unit's size (the
//                             in fp32, rounded once)                         backend's)
//   fp32, across machines     MPI's own MPI_SUM (libnbc's schedule)          MPI's copies of the unit
//
// Why, and how the moves go: cpu/backend_cpu.c, "sums, made of moves". In short: a bf16 operator
// would round after every combine; inside a machine Open MPI's non-blocking reduce-scatter
// reduces the whole unit onto rank 0 and scatters it, where the moves give every rank an Nth of
// the bytes and of the adds; across machines the all-to-all is blind to the nodes (at 2 ranks a
// node it sends 4/3 of a ring's bytes out of each), so fp32 there keeps MPI's schedule.
#ifndef PROC_MPI_SUM_H
#define PROC_MPI_SUM_H

#include "../zero3.h"

// 1 when MPI sums a reduction of elements of type t itself; 0 when the CPU backend moves the parts
// and adds them where they land. one_machine: every rank of the run shares one machine.
static inline int mpi_sums(Zero3DType t, int one_machine) { return t != ZERO3_BF16 && !one_machine; }

#endif
