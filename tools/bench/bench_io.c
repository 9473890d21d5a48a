/*
tools/bench/bench_io.c: the offload stream's disk pattern (zero3_offload.h) through two kinds of
system call, to choose between them by measurement: pread/pwrite from threads, or io_uring.

    make bench_io
    ./build/bench_io DIR [-g GB] [-r MIB] [-reps K]     # defaults: -g 4 -r 256 -reps 3

The pattern is the optimizer step's: a file of records of -r MiB (the size of a unit's record:
GPT-2 XL's block at 12 bytes a parameter is 354 MiB on one rank, 44 MiB on 8), read in turn into
one of three 4096-aligned slots while the record before it is written back, so a step reads the
file once and writes it once. Every transfer is direct (O_DIRECT: past the page cache). Ways:

    pread, 1 thread     read k, then write k-1, in order: what one I/O thread does with its queue
    pread, 2 threads    read k and write k-1 at once, each on a thread of its own
    io_uring, 2 whole   read k and write k-1 as two requests in one submission, both awaited
    io_uring, 1 MiB x32 both records cut into 1 MiB requests, up to 32 in flight at once

Each prints the bytes moved (read plus written) over the wall time, the median of -reps passes over
the whole file, with their range. The file is made in DIR (a file name of our own, removed on exit
and on every refusal; one already there is never touched) and reserved whole before the first pass.
Without liburing (Debian's liburing-dev) the io_uring ways are left out, and said so.
*/
#define _GNU_SOURCE
#include <errno.h>
#include <fcntl.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <time.h>
#include <unistd.h>
#if __has_include(<liburing.h>)
#include <liburing.h>
#define HAVE_URING 1
#else
#define HAVE_URING 0
#endif

#define BLOCK 4096
#define SLOTS 3
#define CHUNK (1u << 20)
#define DEPTH 32

static char path[4200];
static int fd = -1;

static void die(const char *fmt, const char *what) {
    fprintf(stderr, "error: ");
    fprintf(stderr, fmt, what);
    fprintf(stderr, "\n");
    if (fd >= 0) { close(fd); unlink(path); }
    exit(1);
}

static double now(void) {
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return ts.tv_sec + ts.tv_nsec * 1e-9;
}

static double number(const char *flag, const char *v, double lo, double hi) {
    char *end;
    errno = 0;
    double x = strtod(v, &end);
    if (errno || end == v || *end || !(x >= lo && x <= hi)) {
        char msg[200];
        snprintf(msg, sizeof msg, "%s: expected a number in [%g, %g], got '%%s'", flag, lo, hi);
        die(msg, v);
    }
    return x;
}

typedef struct { size_t record, records; char *slot[SLOTS]; } Layout;

// Exactly n bytes at offset, retrying a short transfer; 0 or errno
static int transfer(int write, char *p, size_t n, off_t offset) {
    while (n > 0) {
        ssize_t k = write ? pwrite(fd, p, n, offset) : pread(fd, p, n, offset);
        if (k < 0 && errno == EINTR) continue;
        if (k <= 0) return k < 0 ? errno : EIO;
        p += k; n -= (size_t)k; offset += k;
    }
    return 0;
}

static void must(int rc, const char *what) { if (rc) die("%s", what); }

// ---- the ways ------------------------------------------------------------------------------------

static void pass_pread1(const Layout *L) {
    for (size_t k = 0; k <= L->records; k++) {
        if (k < L->records) must(transfer(0, L->slot[k % SLOTS], L->record, (off_t)(k * L->record)), "a read failed");
        if (k > 0) must(transfer(1, L->slot[(k - 1) % SLOTS], L->record, (off_t)((k - 1) * L->record)), "a write failed");
    }
}

typedef struct { const Layout *L; size_t k; int write; int rc; } Job;
static void *run_job(void *arg) {
    Job *j = (Job *)arg;
    const size_t k = j->write ? j->k - 1 : j->k;
    j->rc = transfer(j->write, j->L->slot[k % SLOTS], j->L->record, (off_t)(k * j->L->record));
    return NULL;
}
static void pass_pread2(const Layout *L) {
    for (size_t k = 0; k <= L->records; k++) {
        Job r = {L, k, 0, 0}, w = {L, k, 1, 0};
        pthread_t tr, tw;
        int reading = k < L->records, writing = k > 0;
        if (reading) pthread_create(&tr, NULL, run_job, &r);
        if (writing) pthread_create(&tw, NULL, run_job, &w);
        if (reading) pthread_join(tr, NULL);
        if (writing) pthread_join(tw, NULL);
        must(r.rc || w.rc, "a transfer failed");
    }
}

#if HAVE_URING
static struct io_uring ring;

// The requests of one turn (read k, write k-1), cut into pieces of `piece` bytes, at most `depth`
// in flight; a short completion is an error (a direct transfer of whole blocks is never short here)
static void uring_turn(const Layout *L, size_t k, size_t piece, int depth) {
    struct { int write; char *buf; off_t at; } part[2];
    int parts = 0;
    if (k < L->records) part[parts++] = (typeof(part[0])){0, L->slot[k % SLOTS], (off_t)(k * L->record)};
    if (k > 0) part[parts++] = (typeof(part[0])){1, L->slot[(k - 1) % SLOTS], (off_t)((k - 1) * L->record)};
    size_t next[2] = {0, 0}, total = (size_t)parts * ((L->record + piece - 1) / piece), done = 0;
    int inflight = 0, p = 0;
    while (done < total) {
        while (inflight < depth) {   // round-robin over the read and the write, a piece at a time
            int q = -1;
            for (int t = 0; t < parts; t++, p = (p + 1) % parts)
                if (next[p] < L->record) { q = p; p = (p + 1) % parts; break; }
            if (q < 0) break;
            size_t n = L->record - next[q] < piece ? L->record - next[q] : piece;
            struct io_uring_sqe *sqe = io_uring_get_sqe(&ring);
            if (!sqe) break;
            if (part[q].write) io_uring_prep_write(sqe, fd, part[q].buf + next[q], (unsigned)n, part[q].at + (off_t)next[q]);
            else io_uring_prep_read(sqe, fd, part[q].buf + next[q], (unsigned)n, part[q].at + (off_t)next[q]);
            io_uring_sqe_set_data64(sqe, n);
            next[q] += n;
            inflight++;
        }
        if (io_uring_submit(&ring) < 0) die("%s", "io_uring_submit failed");
        struct io_uring_cqe *cqe;
        if (io_uring_wait_cqe(&ring, &cqe) < 0) die("%s", "io_uring_wait_cqe failed");
        if (cqe->res < 0 || (size_t)cqe->res != io_uring_cqe_get_data64(cqe)) die("%s", "an io_uring transfer failed or came short");
        io_uring_cqe_seen(&ring, cqe);
        inflight--;
        done++;
    }
}
static void pass_uring_whole(const Layout *L) { for (size_t k = 0; k <= L->records; k++) uring_turn(L, k, L->record, 2); }
static void pass_uring_chunks(const Layout *L) { for (size_t k = 0; k <= L->records; k++) uring_turn(L, k, CHUNK, DEPTH); }
#endif

typedef struct { const char *name; void (*pass)(const Layout *); } Way;

static int cmp(const void *a, const void *b) { double x = *(const double *)a, y = *(const double *)b; return (x > y) - (x < y); }

int main(int argc, char **argv) {
    if (argc < 2 || argv[1][0] == '-') die("%s", "usage: bench_io DIR [-g GB] [-r MIB] [-reps K]");
    const char *dir = argv[1];
    double gb = 4, mib = 256, reps = 3;
    for (int i = 2; i < argc; i += 2) {
        if (i + 1 >= argc) die("%s: missing its value", argv[i]);
        if (!strcmp(argv[i], "-g")) gb = number("-g", argv[i + 1], 0.01, 1000);
        else if (!strcmp(argv[i], "-r")) mib = number("-r", argv[i + 1], 1, 4096);
        else if (!strcmp(argv[i], "-reps")) reps = number("-reps", argv[i + 1], 1, 100);
        else die("%s: unknown flag (bench_io DIR [-g GB] [-r MIB] [-reps K])", argv[i]);
    }
    struct stat st;
    if (stat(dir, &st) != 0 || !S_ISDIR(st.st_mode)) die("%s: not a folder", dir);
    Layout L = {.record = (size_t)(mib * 1048576) / BLOCK * BLOCK};
    L.records = (size_t)(gb * 1e9) / L.record;
    if (L.records < 2) die("%s", "-g: must hold at least two records of -r MiB");
    snprintf(path, sizeof path, "%s/bench_io.%d.bin", dir, (int)getpid());
    fd = open(path, O_RDWR | O_CREAT | O_EXCL | O_DIRECT, 0600);
    if (fd < 0) {
        int e = errno;
        fd = -1;
        die(e == EINVAL ? "%s: this file system takes no direct I/O (O_DIRECT)" : "%s: cannot create a file there", dir);
    }
    int rc = posix_fallocate(fd, 0, (off_t)(L.records * L.record));
    if (rc) die(rc == ENOSPC ? "%s: not enough free space for -g" : "%s: cannot reserve the file", dir);
    for (int s = 0; s < SLOTS; s++) {
        if (posix_memalign((void **)&L.slot[s], BLOCK, L.record)) die("%s", "out of memory for the slots");
        memset(L.slot[s], 0x5a + s, L.record);
    }
    for (size_t k = 0; k < L.records; k++)   // every block written once: the reads read the disk, not holes
        must(transfer(1, L.slot[k % SLOTS], L.record, (off_t)(k * L.record)), "the first write failed");
    fsync(fd);
#if HAVE_URING
    if (io_uring_queue_init(DEPTH * 2, &ring, 0) < 0) die("%s", "io_uring_queue_init failed (a kernel without io_uring?)");
#endif
    const Way ways[] = {
        {"pread, 1 thread", pass_pread1},
        {"pread, 2 threads", pass_pread2},
#if HAVE_URING
        {"io_uring, 2 whole", pass_uring_whole},
        {"io_uring, 1 MiB x32", pass_uring_chunks},
#endif
    };
    const double moved = 2.0 * (double)L.records * (double)L.record;
    printf("bench_io: %zu records of %.0f MiB in %s (%.2f GB), each pass reads it once and writes it once, direct\n",
           L.records, L.record / 1048576.0, dir, L.records * (double)L.record / 1e9);
    if (!HAVE_URING) printf("io_uring: left out (built without liburing: install liburing-dev and rebuild)\n");
    const int K = (int)reps;
    for (size_t w = 0; w < sizeof ways / sizeof ways[0]; w++) {
        double rate[100];
        for (int r = 0; r < K; r++) {
            double t0 = now();
            ways[w].pass(&L);
            rate[r] = moved / (now() - t0) / 1e9;
        }
        qsort(rate, (size_t)K, sizeof rate[0], cmp);
        printf("  %-20s %6.3f GB/s (median of %d; %.3f-%.3f)\n", ways[w].name, rate[K / 2], K, rate[0], rate[K - 1]);
    }
    close(fd);
    unlink(path);
    return 0;
}
