// proc.c: the process's rank, its errors, its checked allocation and its clock (proc.h).
#include "proc.h"
#include <pthread.h>
#include <stdarg.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <dirent.h>
#include <unistd.h>

// The handed exits (proc.h), or the defaults before a transport started: one rank, a plain exit.
static const ProcessExits kNoTransport = {0, 1, NULL, NULL, NULL};
static const ProcessExits *g_exits = &kNoTransport;

void proc_exits_lend(const ProcessExits *exits) {
    if (g_exits == &kNoTransport) g_exits = exits;
}

void proc_exits_return(const ProcessExits *exits) {
    if (g_exits == exits) g_exits = &kNoTransport;
}

int proc_rank(void) { return g_exits->rank; }

void fatal(const char *fmt, ...) {
    const ProcessExits *x = g_exits;
    if (x->rank == 0) {
        va_list ap;
        va_start(ap, fmt);
        fprintf(stderr, "error: ");
        vfprintf(stderr, fmt, ap);
        fprintf(stderr, "\n");
        va_end(ap);
        fflush(stderr);
    }
    if (x->shutdown) x->shutdown(x->transport);
    exit(1);
}

void fatal_local(const char *fmt, ...) {
    const ProcessExits *x = g_exits;
    va_list ap;
    va_start(ap, fmt);
    fprintf(stderr, "error (rank %d): ", x->rank);
    vfprintf(stderr, fmt, ap);
    fprintf(stderr, "\n");
    va_end(ap);
    fflush(stderr);
    if (x->abort_all && x->world > 1) x->abort_all(x->transport);
    exit(1);
}

void agree_or_exit(const Zero3Backend *be, const char *err) {
    int failed = err[0] != '\0';
    if (be->all_reduce_scalar(be->ctx, failed ? 1.0 : 0.0) == 0.0) return;
    int rank0_failed = be->all_reduce_scalar(be->ctx, (be->rank == 0 && failed) ? 1.0 : 0.0) > 0.0;
    if (failed && be->rank == 0) fprintf(stderr, "error: %s\n", err);
    else if (failed && !rank0_failed) fprintf(stderr, "error (rank %d): %s\n", be->rank, err);
    fflush(stderr);
    if (g_exits->shutdown) g_exits->shutdown(g_exits->transport);
    exit(1);
}

// ---- the watchdog's lines (proc.h) ----
void watch_describe(char *buf, size_t n, const char *op, const char *unit, int step) {
    int k = snprintf(buf, n, "the %s", op);
    if (unit && unit[0] && k >= 0 && (size_t)k < n) k += snprintf(buf + k, n - (size_t)k, " of unit %s", unit);
    if (k < 0 || (size_t)k >= n) return;
    if (step > 0) snprintf(buf + k, n - (size_t)k, " in step %d", step);
    else snprintf(buf + k, n - (size_t)k, " before the first step");
}

static const char *node_of(const char *nodes, size_t stride, int rank) { return nodes ? nodes + (size_t)rank * stride : ""; }

void watch_peers(char *buf, size_t n, int me, const int *ranks, int count, const char *nodes, size_t stride) {
    int *said = xcalloc((size_t)(count > 0 ? count : 1), sizeof(int));
    size_t k = 0;
    buf[0] = '\0';
    for (int i = 0; i < count; i++) {
        if (said[i] || ranks[i] == me) continue;
        const char *node = node_of(nodes, stride, ranks[i]);
        int same = 0;
        for (int j = i; j < count; j++) same += ranks[j] != me && !strcmp(node_of(nodes, stride, ranks[j]), node);
        k += (size_t)snprintf(buf + k, k < n ? n - k : 0, "%s%s%srank%s", k ? ", " : "", node, nodes ? " " : "",
                              same > 1 ? "s" : "");
        for (int j = i; j < count; j++)
            if (ranks[j] != me && !strcmp(node_of(nodes, stride, ranks[j]), node)) {
                said[j] = 1;
                k += (size_t)snprintf(buf + k, k < n ? n - k : 0, " %d", ranks[j]);
            }
    }
    free(said);
}

static const char *node_or_unknown(const char *node) { return node && node[0] ? node : "an unnamed node"; }

void watch_timeout_line(int rank, const char *node, const char *what, double timeout_s, const char *peers,
                        const char *cause) {
    watch_timeout_line_after(rank, node, what, timeout_s, timeout_s, peers, cause);
}

void watch_timeout_line_after(int rank, const char *node, const char *what, double elapsed_s, double timeout_s,
                              const char *peers, const char *cause) {
    fprintf(stderr, "error (rank %d on %s): collective timeout: %s has not completed %.0f s after it started (-ct %g); "
            "its peers: %s; %s: ending every rank\n", rank, node_or_unknown(node), what, elapsed_s, timeout_s, peers, cause);
    fflush(stderr);
}

void watch_slow_line(int rank, const char *node, int count, int first_step, int last_step, double seconds,
                     double report_s, int every_steps, double timeout_s) {
    fprintf(stderr, "warning (rank %d on %s): slow link: %d collective%s in steps %d-%d took over %g s each (%.1f s in "
            "all), their bytes moving throughout: the link is slow, not down (one such line per %d steps; -ct %g ends "
            "the run only after that long with no byte moved)\n", rank, node_or_unknown(node), count,
            count == 1 ? "" : "s", first_step, last_step, report_s, seconds, every_steps, timeout_s);
    fflush(stderr);
}

void watch_stall_line(int rank, const char *node, const char *what, double waited_s, double report_s, double timeout_s) {
    fprintf(stderr, "warning (rank %d on %s): stall: %s waited %.1f s for its peers before it completed (stalls over "
            "%g s are reported; -ct %g ends the run)\n", rank, node_or_unknown(node), what, waited_s, report_s, timeout_s);
    fflush(stderr);
}

// proc_exit_after's watch: a detached thread that sleeps to the deadline (monotonic), then exits.
typedef struct { struct timespec deadline; int status; } ExitAfter;

static void *exit_after_main(void *arg) {
    const ExitAfter *when = arg;   // the thread's own, never freed: the process ends here
    while (clock_nanosleep(CLOCK_MONOTONIC, TIMER_ABSTIME, &when->deadline, NULL) != 0) {}   // EINTR: sleep on
    fflush(stdout);
    fflush(stderr);
    _exit(when->status);
}

void proc_exit_after(double seconds, int status) {
    double until = now_seconds() + seconds;
    ExitAfter *when = xmalloc(sizeof(ExitAfter));
    when->deadline.tv_sec = (time_t)until;
    when->deadline.tv_nsec = (long)((until - (double)(time_t)until) * 1e9);
    when->status = status;
    pthread_t watch;
    pthread_attr_t attr;
    pthread_attr_init(&attr);
    pthread_attr_setdetachstate(&attr, PTHREAD_CREATE_DETACHED);
    if (pthread_create(&watch, &attr, exit_after_main, when) != 0) {   // then the launcher's own kill ends it
        fprintf(stderr, "warning (rank %d): cannot start the stop's exit watch; the launcher ends this rank\n", proc_rank());
        free(when);
    }
    pthread_attr_destroy(&attr);
}

// The current allocation phase (alloc_phase_begin): what the memory is for, and the backend whose
// agreement ends it (NULL outside a phase; `what` then keeps the last phase's words as context).
// The error path's, as the handed exits are: xmalloc, called from every layer, takes no context, and
// its out-of-memory line must name the phase it fell in.
static struct { const Zero3Backend *be; char what[512]; } g_alloc;

void alloc_phase_begin(const Zero3Backend *be, const char *fmt, ...) {
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(g_alloc.what, sizeof g_alloc.what, fmt, ap);
    va_end(ap);
    g_alloc.be = be;
}

void alloc_phase_end(void) {
    const Zero3Backend *be = g_alloc.be;
    g_alloc.be = NULL;
    if (be) agree_or_exit(be, "");
}

void alloc_failed(size_t bytes, const char *detail) {
    const char *units[] = {"B", "KiB", "MiB", "GiB", "TiB", "PiB", "EiB"};
    double v = (double)bytes;
    int i = 0;
    while (v >= 1024.0 && i < 6) { v /= 1024.0; i++; }
    char msg[1024];
    snprintf(msg, sizeof msg, "out of memory: %s asked for %.2f %s (%zu bytes) of %s", g_alloc.what[0] ? g_alloc.what :
             "an allocation", v, units[i], bytes, detail);
    const Zero3Backend *be = g_alloc.be;
    g_alloc.be = NULL;
    if (be) agree_or_exit(be, msg);   // the other ranks meet it at alloc_phase_end
    // outside a phase the ranks are not at a common point: the failing rank reports and aborts the
    // job. Ranks other than 0 wait a moment first, so that when every rank fails alike (the usual
    // case) rank 0's line is the one printed and its abort ends the others before they print.
    if (g_exits->rank != 0 && g_exits->world > 1) {
        struct timespec ts = {2, 0};
        nanosleep(&ts, NULL);
    }
    fatal_local("%s", msg);
}

void *xmalloc(size_t bytes) {
    void *p = malloc(bytes ? bytes : 1);
    if (!p) alloc_failed(bytes, "host memory");
    return p;
}

void *xcalloc(size_t n, size_t size) {
    void *p = calloc(n ? n : 1, size ? size : 1);
    size_t bytes;
    if (!p) alloc_failed(mul_ok(n, size, &bytes) ? bytes : SIZE_MAX, "host memory");
    return p;
}

int mul_ok(size_t a, size_t b, size_t *out) {
    if (a != 0 && b > SIZE_MAX / a) return 0;
    *out = a * b;
    return 1;
}

double now_seconds(void) {
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return ts.tv_sec + ts.tv_nsec * 1e-9;
}

int proc_open_files(void) {
    DIR *d = opendir("/proc/self/fd");
    if (!d) return -1;
    int n = 0;
    for (struct dirent *e; (e = readdir(d)) != NULL;)
        if (e->d_name[0] != '.') n++;
    closedir(d);
    return n - 1;   // less the descriptor opendir itself holds
}

long long proc_status_bytes(const char *field) {
    FILE *f = fopen("/proc/self/status", "r");
    if (!f) return -1;
    char line[256];
    long long kib = -1;
    const size_t n = strlen(field);
    while (kib < 0 && fgets(line, sizeof line, f))
        if (!strncmp(line, field, n) && line[n] == ':') kib = atoll(line + n + 1);
    fclose(f);
    return kib < 0 ? -1 : kib * 1024;
}

// /proc/thread-self/io: this thread's own counts (proc.h).
double proc_thread_io_bytes(void) {
    FILE *f = fopen("/proc/thread-self/io", "r");
    if (!f) return -1.0;
    char line[128];
    double sum = 0.0;
    int found = 0;
    while (fgets(line, sizeof line, f)) {
        unsigned long long v;
        if (sscanf(line, "rchar: %llu", &v) == 1 || sscanf(line, "wchar: %llu", &v) == 1) { sum += (double)v; found++; }
    }
    fclose(f);
    return found == 2 ? sum : -1.0;
}

// /proc/self/net/dev, not /sys/class/net: sysfs shows the interfaces of the network namespace that
// mounted it, /proc/self/net those of this process's own (a node of scripts/cluster.sh is one). A line
// is "  eth0: RX bytes packets errs drop fifo frame compressed multicast TX bytes ...".
double proc_node_tx_bytes(void) {
    FILE *f = fopen("/proc/self/net/dev", "r");
    if (!f) return -1.0;
    char line[512];
    double total = 0.0;
    int found = 0;
    while (fgets(line, sizeof line, f)) {
        char *colon = strchr(line, ':');
        if (!colon) continue;   // the two header lines
        char *name = line;
        while (*name == ' ') name++;
        if (!strncmp(name, "lo:", 3)) continue;
        unsigned long long rx[8], tx;
        if (sscanf(colon + 1, "%llu %llu %llu %llu %llu %llu %llu %llu %llu", &rx[0], &rx[1], &rx[2], &rx[3], &rx[4], &rx[5],
                   &rx[6], &rx[7], &tx) == 9) { total += (double)tx; found = 1; }
    }
    fclose(f);
    return found ? total : -1.0;
}
