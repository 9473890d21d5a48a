// proc.h: the process, the bottom layer every other part may include (it includes only zero3.h, for
// the backend table that the all-ranks agreement calls). Four things:
//   who am I     the transport's exits, handed to the error path: this rank, the world size, and how
//                every rank shuts down or aborts
//   how I end    fatal (an error every rank finds), fatal_local (one rank's), agree_or_exit,
//                proc_exit_after (a stopped rank's bounded shutdown), the watchdog's lines (watch_*)
//   my memory    xmalloc / xcalloc, allocation phases, alloc_failed (one "out of memory" line)
//   my clock     now_seconds (and proc_open_files, the open file descriptors)
// The backends (cpu/, gpu/) lend their exits here and report failed allocations here; the host
// library (host/) and the trainers use the rest. Compiled once (proc/proc.c) into the library both
// trainers link.
#pragma once
#include <signal.h>
#include <stddef.h>
#include "../zero3.h"

#ifdef __cplusplus
extern "C" {
#endif

// ------------------------------------------------------------------------------------------------
// Errors. Two kinds:
//  - fatal(): an error every rank finds the same way (a bad flag, a bad input file that all ranks
//    read). Rank 0 prints one line; every rank shuts the transport down and exits 1. No rank waits
//    on another, so nothing hangs.
//  - fatal_local(): an error only this rank sees (its own shard file, a failed collective). It
//    prints with its rank and takes every other rank down with it (MPI_Abort / NCCL abort).
//
// Who the error path is, and how it ends every rank, are the transport's: each backend keeps its
// ProcessExits in its own context, and the process's first one lends them here when it starts
// (proc_exits_lend) and takes them back when it ends. The error path takes no context of its own:
// fatal() is reached from a hundred places, most far from any backend (a flag, a file), and
// xmalloc's out-of-memory line from inside every layer, so it holds that one pointer, written at
// the transport's start and end and never in between: the rank and the exits do not change while a
// transport runs. Everything that changes as a run goes (the step, the unit, a stop signal) lives
// in the backend's context, told through its table (zero3.h).
typedef struct {
    int rank, world;
    void (*shutdown)(void *transport);   // finalize the transport before a collective exit
    void (*abort_all)(void *transport);  // kill every rank (never returns)
    void *transport;                     // the hooks' backend state (the context these exits belong to)
} ProcessExits;

void proc_exits_lend(const ProcessExits *exits);     // the first transport, when it starts (later ones keep theirs)
void proc_exits_return(const ProcessExits *exits);   // ... when it ends: fatal() then only exits
// The rank the handed exits name (0 before a transport started): for what only rank 0 prints.
int proc_rank(void);

void fatal(const char *fmt, ...) __attribute__((noreturn, format(printf, 1, 2)));
void fatal_local(const char *fmt, ...) __attribute__((noreturn, format(printf, 1, 2)));

// Agreement: every rank calls it after a phase that may fail on some ranks (err = "" on success).
// If any rank failed, all of them exit(1) together, so nothing hangs: when rank 0 failed it alone
// prints (the usual case: every rank read the same file), otherwise each failing rank prints its
// own line with its rank. Two scalar all-reduces; a collective, so every rank must reach it.
void agree_or_exit(const Zero3Backend *be, const char *err);

// A stopped run's last resort (host/stop.c): the launcher that sent the stop signal may be taking
// the job down already and no longer serve the transport's shutdown (Open MPI's mpirun on SIGTERM:
// its daemons stop answering MPI_Finalize's exchange and SIGKILL the ranks odls_base_sigkill_timeout
// seconds after their SIGTERM). `seconds` from now the process exits with `status` by itself, its
// output flushed, unless it has ended before.
void proc_exit_after(double seconds, int status);

// The collective watchdog's lines (-ct), one definition for both backends: past a collective's
// deadline the rank prints watch_timeout_line and ends every rank; a collective that waited longer
// than report_s but completed gets watch_stall_line when it ends.
//   what   watch_describe's "the all-gather of unit h.3 in step 7" (op: "all-gather"; unit "" for
//          none; step 0: before the first)
//   peers  watch_peers' "node1 rank 1, node2 ranks 2 3": the collective's other ranks (world ranks)
//          by node, from a table of every rank's node name (`nodes`, `stride` bytes each; NULL:
//          nodes unknown, "ranks 1 2")
//   node   this rank's node name (NULL: unknown)
void watch_describe(char *buf, size_t n, const char *op, const char *unit, int step);
void watch_peers(char *buf, size_t n, int me, const int *ranks, int count, const char *nodes, size_t stride);
void watch_timeout_line(int rank, const char *node, const char *what, double timeout_s, const char *peers,
                        const char *cause);
void watch_stall_line(int rank, const char *node, const char *what, double waited_s, double report_s, double timeout_s);
// The CPU backend's progress-aware lines: its deadline is -ct seconds with no byte moved, so a timed-out
// collective may have started longer ago (elapsed_s); the summary of collectives that were long but
// moved bytes throughout (a slow link). A pause of no bytes (an outage) gets watch_stall_line.
void watch_timeout_line_after(int rank, const char *node, const char *what, double elapsed_s, double timeout_s,
                              const char *peers, const char *cause);
void watch_slow_line(int rank, const char *node, int count, int first_step, int last_step, double seconds,
                     double report_s, int every_steps, double timeout_s);

// ------------------------------------------------------------------------------------------------
// Memory.
void *xmalloc(size_t bytes);
void *xcalloc(size_t n, size_t size);
int mul_ok(size_t a, size_t b, size_t *out);                 // a*b without overflow, or 0

// Out of memory names what asked for it, once. The trainer brackets each phase of large allocations
// that has no collective inside (the model state, the activations, ...) with alloc_phase_begin
// (what the memory is for: the flag or the file) and alloc_phase_end (collective). A failed
// allocation inside a phase -- xmalloc, xcalloc, or a backend's alloc calling alloc_failed -- goes
// straight to agree_or_exit with one line, "out of memory: <what> asked for <bytes> ...", which the
// other ranks meet at alloc_phase_end: every rank exits, one line is printed. Outside a phase the
// failing rank prints the line (naming the last phase's context) and takes the job down.
void alloc_phase_begin(const Zero3Backend *be, const char *fmt, ...) __attribute__((format(printf, 2, 3)));
void alloc_phase_end(void);
// detail: where ("host memory", "GPU memory: 1.2 GiB free of 80 GiB on device 0"). Never returns.
void alloc_failed(size_t bytes, const char *detail) __attribute__((noreturn));

// ------------------------------------------------------------------------------------------------
// The clock.
double now_seconds(void);                                    // monotonic, in seconds

// The process's open file descriptors (the entries of /proc/self/fd), -1 where that is not readable:
// what the engine's step-end invariant compares from step to step, so a leak of one per step shows.
int proc_open_files(void);

// One "Vm..." line of /proc/self/status in bytes (VmRSS: resident now; VmHWM: the most resident
// at once since the process began, the kernel's own count of the pages it touched), -1 where that
// is not readable: the measured peak the planner's peak is checked against (tests/test_peak.sh).
long long proc_status_bytes(const char *field);

// The bytes this machine (or network namespace) has sent, as its kernel counts them: the sum of the
// transmit bytes of /proc/self/net/dev over every interface but loopback; -1 where not readable.
// A node's ranks share it: every frame its NICs sent, TCP/IP's headers and acknowledgements included.
double proc_node_tx_bytes(void);

// The bytes the calling thread has passed through read and write calls, its own (rchar + wchar of
// /proc/thread-self/io: no other thread's, so a disk thread's pread/pwrite are not in it); -1 where
// not readable.
double proc_thread_io_bytes(void);

#ifdef __cplusplus
}
#endif
