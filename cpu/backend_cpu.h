// cpu/backend_cpu.h: the CPU trainer's engine backend (backend_cpu.c): host memory, MPI
// collectives, OpenMP shard math.
#pragma once
#include "../zero3.h"

#ifdef __cplusplus
extern "C" {
#endif

// Starts the transport (MPI when built with USE_MPI), installs g_proc's hooks, fills the table.
void backend_cpu_init(Zero3Backend *be, int *argc, char ***argv);
void backend_cpu_finish(void);   // stops the communication thread, finalizes MPI
// One line on how collectives run (for the startup report).
void backend_cpu_describe(char *buf, size_t n);

#ifdef __cplusplus
}
#endif
