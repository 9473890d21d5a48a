// host/trace.h: -tr FILE, a Chrome trace-event JSON of the run (open it in https://ui.perfetto.dev
// or chrome://tracing). Per rank (a "process") two lanes ("threads") on one time axis:
//   compute        each unit's forward and backward, AdamW, and "wait ..." where the compute side
//                  waited for a collective (the exposed communication), inside a span per step;
//   communication  each collective's transfer (all-gather, reduce-scatter, all-reduce, the norm),
//                  with its kind, unit and the bytes this rank sent (the ledger's ring-model bytes).
// Each rank writes FILE.<run>.rank<r>.part while it runs (<run>: rank 0's pid, so two runs given
// one FILE never share a part); at the end rank 0 joins them into a temp file and links it into
// place as FILE, or, when FILE exists (an earlier run's trace, the part of a run before it was
// stopped and resumed), as the first free numbered sibling FILE.1.json, FILE.2.json, ...: a trace
// never replaces a file. FILE itself is never opened for writing; a FILE that is an input or not a
// regular file is refused at the start; on any failure the parts and the temp file are removed.
// The folder of FILE must be visible to every rank (as -o's is). Times are microseconds from rank
// 0's start; on one machine every rank reads the same monotonic clock, so the lanes line up exactly.
#pragma once
#include "common.h"
#include "fileio.h"

#ifdef __cplusplus
extern "C" {
#endif

typedef struct Trace Trace;

// Collective: checks FILE (not an input, a regular file or nothing) and creates this rank's part
// (one error line, exit 1 on every rank otherwise), agrees on the time origin. NULL path: returns
// NULL, traces nothing. The inputs must be noted first (input_note).
Trace *trace_open(OutputFiles *files, const char *path, const Zero3Backend *be);   // files: the run's (fileio.h)
// Writes one step's timeline (zero3_timeline_read's events) and the step's span [t0, t1] (seconds).
void trace_step(Trace *t, const Zero3 *z, const Zero3Event *ev, int n, int step, double t0, double t1);
// Collective: closes the parts and joins them into FILE or its numbered sibling (rank 0), whose
// name goes into `written` (rank 0; "" elsewhere, or when t is NULL). Frees t.
void trace_close(Trace *t, char *written, size_t n);

#ifdef __cplusplus
}
#endif
