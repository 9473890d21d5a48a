// proc/mpi_sum.h: who adds up a reduction's contributions on the CPU transport, the one definition
// the CPU backend runs (cpu/backend_cpu.c: which sums it hands to MPI) and the peak planner prices
// (host/peak.c: the scratch those sums need). A leaf beside bf16.h: it includes only zero3.h, for
// the element types, so the backend below and the host library above may both include it.
//
//   element type   the reduction (reduce-scatter, all-reduce)    its scratch
//   fp32           MPI's own MPI_SUM (libnbc's schedule)          MPI's copies of the unit
//   bf16           an all-to-all of the parts, each rank adding   the parts, one buffer of the
//                  the parts it receives in fp32, rounded once    unit's size (the backend's)
//
// Why bf16 is not MPI's, and how its moves go: cpu/backend_cpu.c, "bf16 sums, made of moves".
#ifndef PROC_MPI_SUM_H
#define PROC_MPI_SUM_H

#include "../zero3.h"

// 1 when MPI sums a reduction of elements of type t itself; 0 when the CPU backend moves the parts
// and adds them where they land.
static inline int mpi_sums(Zero3DType t) { return t != ZERO3_BF16; }

#endif
