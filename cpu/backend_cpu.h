// cpu/backend_cpu.h: the CPU trainer's engine backend (backend_cpu.c): host memory, MPI
// collectives, OpenMP shard math.
#pragma once
#include "../zero3.h"

#ifdef __cplusplus
extern "C" {
#endif

// The backend's state (groups, the communication thread, stamps, emulated links): the table's ctx.
typedef struct CpuBackend CpuBackend;

// Makes a backend's state and fills the table with it (be->ctx): starts the transport (MPI when
// built with USE_MPI, unless the process has it already) and, for the backend that started it,
// lends the error path its rank and its exits (proc_exits_lend, proc/proc.h).
void backend_cpu_init(Zero3Backend *be, int *argc, char ***argv);
void backend_cpu_finish(Zero3Backend *be);   // stops the communication thread, finalizes MPI, frees the state
// One line on how collectives run (for the startup report).
void backend_cpu_describe(const CpuBackend *b, char *buf, size_t n);

#ifdef __cplusplus
}
#endif
