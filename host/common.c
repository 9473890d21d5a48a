// host/common.c: errors, the all-ranks agreement, checked allocation, small file and path helpers.
#include "common.h"
#include <sys/types.h>
#include <time.h>

ProcessInfo g_proc = {0, 1, NULL, NULL};

void fatal(const char *fmt, ...) {
    if (g_proc.rank == 0) {
        va_list ap;
        va_start(ap, fmt);
        fprintf(stderr, "error: ");
        vfprintf(stderr, fmt, ap);
        fprintf(stderr, "\n");
        va_end(ap);
        fflush(stderr);
    }
    if (g_proc.shutdown) g_proc.shutdown();
    exit(1);
}

void fatal_local(const char *fmt, ...) {
    va_list ap;
    va_start(ap, fmt);
    fprintf(stderr, "error (rank %d): ", g_proc.rank);
    vfprintf(stderr, fmt, ap);
    fprintf(stderr, "\n");
    va_end(ap);
    fflush(stderr);
    if (g_proc.abort_all && g_proc.world > 1) g_proc.abort_all();
    exit(1);
}

void agree_or_exit(const Zero3Backend *be, const char *err) {
    int failed = err[0] != '\0';
    if (be->all_reduce_scalar(be->ctx, failed ? 1.0 : 0.0) == 0.0) return;
    int rank0_failed = be->all_reduce_scalar(be->ctx, (be->rank == 0 && failed) ? 1.0 : 0.0) > 0.0;
    if (failed && be->rank == 0) fprintf(stderr, "error: %s\n", err);
    else if (failed && !rank0_failed) fprintf(stderr, "error (rank %d): %s\n", be->rank, err);
    fflush(stderr);
    if (g_proc.shutdown) g_proc.shutdown();
    exit(1);
}

// The current allocation phase (alloc_phase_begin): what the memory is for, and the backend whose
// agreement ends it (NULL outside a phase; `what` then keeps the last phase's words as context).
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
    if (g_proc.rank != 0 && g_proc.world > 1) {
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

void set_err(char *err, size_t errlen, const char *fmt, ...) {
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(err, errlen, fmt, ap);
    va_end(ap);
}

int fmt_path(char *buf, size_t n, const char *fmt, ...) {
    va_list ap;
    va_start(ap, fmt);
    int len = vsnprintf(buf, n, fmt, ap);
    va_end(ap);
    return (len < 0 || (size_t)len >= n) ? -1 : 0;
}

long long file_size(FILE *f) {
    long long here = ftell(f);
    if (fseek(f, 0, SEEK_END) != 0) return -1;
    long long size = ftell(f);
    fseek(f, here, SEEK_SET);
    return size;
}

int read_at(FILE *f, long long offset, void *dst, size_t n) {
    if (fseeko(f, (off_t)offset, SEEK_SET) != 0) return 0;
    return fread(dst, 1, n, f) == n;
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
