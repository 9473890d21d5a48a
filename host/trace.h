// host/trace.h: -tr FILE, a Chrome trace-event JSON of the run (open it in https://ui.perfetto.dev
// or chrome://tracing). Per rank (a "process") two lanes ("threads") on one time axis:
//   compute        each unit's forward and backward, AdamW, and "wait ..." where the compute side
//                  waited for a collective (the exposed communication), inside a span per step;
//   communication  each collective's transfer (all-gather, reduce-scatter, all-reduce, the norm),
//                  with its kind, unit and the bytes this rank sent (the ledger's ring-model bytes).
// Each rank writes FILE.rank<r>.part while it runs; at the end rank 0 joins them into FILE. The
// folder of FILE must be visible to every rank (as -o's is). Times are microseconds from rank 0's
// start; on one machine every rank reads the same monotonic clock, so the lanes line up exactly.
#pragma once
#include "common.h"

#ifdef __cplusplus
extern "C" {
#endif

typedef struct Trace Trace;

// Collective: opens this rank's part and checks that FILE can be written (one error line, exit 1
// on every rank otherwise), agrees on the time origin. NULL path: returns NULL, traces nothing.
Trace *trace_open(const char *path, const Zero3Backend *be);
// Writes one step's timeline (zero3_timeline_read's events) and the step's span [t0, t1] (seconds).
void trace_step(Trace *t, const Zero3 *z, const Zero3Event *ev, int n, int step, double t0, double t1);
// Collective: closes the parts and joins them into FILE (rank 0).
void trace_close(Trace *t);

#ifdef __cplusplus
}
#endif
