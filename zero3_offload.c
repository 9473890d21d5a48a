// zero3_offload.c: a rank's shards on disk (zero3_offload.h draws the picture). One store of per-unit
// records serves both kinds (the optimizer state, -oo disk; the parameter shard, -op disk): they
// differ only in what a record holds (Zero3Store's table below). In order: the file and its records;
// the I/O thread and its requests; the slots (a cache outside the step, a read before a gather, a
// stream inside the step); opening and closing.
#define _GNU_SOURCE
#include "zero3_offload.h"
#include "zero3.h"
#include <errno.h>
#include <fcntl.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <time.h>
#include <unistd.h>

#define BLOCK 4096    // O_DIRECT's alignment: of a record's offset and length, and of a slot
#define MIN_SLOTS 3   // unit k-1 written back, k updated, k+1 read

// IO_FILL: a slot zeroed in place of a read (the bf16 params' stream: AdamW writes all of them)
typedef enum { IO_NONE = 0, IO_READ, IO_WRITE, IO_FILL } IoOp;

typedef struct {
    char *buf;         // BLOCK-aligned, the largest record of the units it takes (unit mod S = its index)
    int unit;          // the unit it holds once its requests are done (-1 none)
    int dirty;         // changed since it was read: to be written back before it takes another unit
    uint64_t ticket;   // the number of its last request (0: none); done once o->completed reaches it
} Slot;

// A request to the I/O thread: its own copy of the slot's unit, as a slot may hold a write-back of
// one unit and, queued behind it, the read of the next (the queue runs in order).
typedef struct {
    int slot, unit;
    IoOp op;
} Request;

struct Zero3Offload {
    Zero3 *z;
    Zero3Store what;
    char dir[4096];               // the folder of every rank's file of this store
    char path[4200];
    int fd, direct;
    int narrays;                  // optimizer: 3 (master, m, v) or 2 (m, v: the fp32 params are the master); params: 1
    size_t elem_bytes;            // of an array's element: 4 (fp32 state) or the params' type
    int stream_fills;             // the step's stream zeroes a slot instead of reading it (the bf16 params)
    size_t *record_at;            // per unit: the byte offset of its record
    size_t *record_bytes;         // per unit: its length, a multiple of BLOCK (0: a unit the store does not hold)
    size_t *span;                 // per unit: the elements of one array
    uint64_t *checksum;           // per unit: of its record as last written
    unsigned char *written;       // per unit: the record holds data (else it reads as zeros)
    size_t file_bytes;
    size_t slots_bytes;           // of all the slots together
    int nslots;                   // Zero3Config.offload_slots (at least MIN_SLOTS), at most one per unit
    Slot *slot;
    int read_ahead;               // the optimizer's first units are queued for the next stream
    // the I/O thread: one request at a time, in the order queued (so request number k is done once
    // completed >= k); at most two a slot are queued (a write-back, then the next unit's read)
    pthread_t thread;
    pthread_mutex_t mu;
    pthread_cond_t wake, finished;
    Request *queue;
    int qcap, qhead, qlen, quit;
    uint64_t queued, completed;
    char error[4600];             // the first I/O failure, reported by the main thread
    Zero3OffloadStats stats;
};

static double seconds_now(void) {
    struct timespec t;
    clock_gettime(CLOCK_MONOTONIC, &t);
    return t.tv_sec + 1e-9 * t.tv_nsec;
}

// What each store holds, by Zero3Store: its file's name and the words its messages use.
static const char *const STORE_FILE[2] = {"optimizer", "params"};
static const char *const STORE_WORDS[2] = {"optimizer state", "parameter shard"};

// Every rank's file of store o in its folder: the ranks that share it (one node's) see them all.
static void unlink_every_rank(const Zero3Offload *o) {
    char path[4200];
    for (int r = 0; r < o->z->be->world; r++) {
        snprintf(path, sizeof path, "%s/%s_r%05d.bin", o->dir, STORE_FILE[o->what], r);
        unlink(path);
    }
}

// The run ends with one line naming the file: the trainer's hook (every rank taken down, killed
// where they stand), else exit. The scratch files go first, this store's and the other's, every
// rank's that this rank can see (the others are killed before they could remove theirs): the
// checkpoints hold the state to resume from.
static void offload_fail(Zero3Offload *o, const char *msg) {
    if (o->z->offload) unlink_every_rank(o->z->offload);
    if (o->z->params_offload) unlink_every_rank(o->z->params_offload);
    if (o->z->cfg.fail) o->z->cfg.fail(msg);
    fprintf(stderr, "%s\n", msg);
    exit(1);
}

// ---- the records ---------------------------------------------------------------------------------

// A checksum of a record: four 64-bit lanes, multiply and rotate, so it keeps up with the disk. A
// changed word changes its lane (each step is a bijection of the lane).
static uint64_t record_checksum(const void *data, size_t bytes) {
    const uint64_t *w = (const uint64_t *)data;
    uint64_t h[4] = {1, 2, 3, 4};
    for (size_t i = 0; i + 4 <= bytes / 8; i += 4)
        for (int l = 0; l < 4; l++) {
            h[l] = (h[l] ^ w[i + l]) * 0x9E3779B97F4A7C15ull;
            h[l] = h[l] << 29 | h[l] >> 35;
        }
    return h[0] ^ (h[1] * 3) ^ (h[2] * 5) ^ (h[3] * 7);
}

// Exactly n bytes at offset (retrying a signal's interruption and a short transfer). 0, or errno;
// a read past the end of the file is ENODATA (a truncated file).
static int transfer(int fd, IoOp op, void *buf, size_t n, size_t offset) {
    char *p = (char *)buf;
    while (n > 0) {
        ssize_t k = op == IO_READ ? pread(fd, p, n, (off_t)offset) : pwrite(fd, p, n, (off_t)offset);
        if (k < 0 && errno == EINTR) continue;
        if (k < 0) return errno;
        if (k == 0) return op == IO_READ ? ENODATA : ENOSPC;
        p += k; n -= (size_t)k; offset += (size_t)k;
    }
    return 0;
}

// One request, on the I/O thread: unit s->unit's record between the slot and the file, with its
// checksum taken (write) or checked (read). A unit never written reads as zeros.
static void run_request(Zero3Offload *o, const Request *r) {
    const int u = r->unit;
    const IoOp op = r->op;
    char *buf = o->slot[r->slot].buf;
    const size_t bytes = o->record_bytes[u];
    if (op == IO_FILL || (op == IO_READ && !o->written[u])) { memset(buf, 0, bytes); return; }
    if (op == IO_WRITE) o->checksum[u] = record_checksum(buf, bytes);
    double t0 = seconds_now();
    int rc = transfer(o->fd, op, buf, bytes, o->record_at[u]);
    double dt = seconds_now() - t0;
    pthread_mutex_lock(&o->mu);
    o->stats.io_seconds += dt;
    if (op == IO_READ) o->stats.bytes_read += (double)bytes; else o->stats.bytes_written += (double)bytes;
    pthread_mutex_unlock(&o->mu);
    char why[200] = "";
    if (rc) snprintf(why, sizeof why, "%s of unit %s's record failed (%s)", op == IO_READ ? "the read" : "the write",
                     o->z->units[u].name, rc == ENODATA ? "the file is shorter than the run made it: truncated" : strerror(rc));
    else if (op == IO_READ && record_checksum(buf, bytes) != o->checksum[u])
        snprintf(why, sizeof why, "unit %s's record changed behind the run's back since it wrote it (checksum mismatch: overwritten, or truncated and written past)", o->z->units[u].name);
    else if (op == IO_WRITE) o->written[u] = 1;
    if (why[0]) {
        pthread_mutex_lock(&o->mu);
        if (!o->error[0]) snprintf(o->error, sizeof o->error, "offload: %s: %s", o->path, why);
        pthread_mutex_unlock(&o->mu);
    }
}

static void *io_thread(void *arg) {
    Zero3Offload *o = (Zero3Offload *)arg;
    pthread_mutex_lock(&o->mu);
    for (;;) {
        while (o->qlen == 0 && !o->quit) pthread_cond_wait(&o->wake, &o->mu);
        if (o->quit) break;   // closing: what is still queued is of files about to be removed
        const Request r = o->queue[o->qhead];
        pthread_mutex_unlock(&o->mu);
        run_request(o, &r);
        pthread_mutex_lock(&o->mu);
        o->qhead = (o->qhead + 1) % o->qcap;
        o->qlen--;
        o->completed++;
        pthread_cond_broadcast(&o->finished);
    }
    pthread_mutex_unlock(&o->mu);
    return NULL;
}

// ---- requests, from the main thread ----------------------------------------------------------------

// Waits for slot i's requests, if any; a failure ends the run here, on the main thread.
static void slot_wait(Zero3Offload *o, int i) {
    pthread_mutex_lock(&o->mu);
    while (o->completed < o->slot[i].ticket) pthread_cond_wait(&o->finished, &o->mu);
    char error[4600];
    snprintf(error, sizeof error, "%s", o->error);
    pthread_mutex_unlock(&o->mu);
    if (error[0]) offload_fail(o, error);
}

// Queues op on slot i (for unit u), behind the slot's earlier requests: the queue runs in order,
// so a read queued after a write-back of the same slot finds the write done. The main thread
// touches a slot's buffer only once slot_wait has seen all of its requests done.
static void slot_queue(Zero3Offload *o, int i, IoOp op, int u) {
    Slot *s = &o->slot[i];
    pthread_mutex_lock(&o->mu);
    while (o->qlen == o->qcap) pthread_cond_wait(&o->finished, &o->mu);
    o->queue[(o->qhead + o->qlen) % o->qcap] = (Request){i, u, op};
    o->qlen++;
    s->unit = u;
    s->dirty = 0;
    s->ticket = ++o->queued;
    pthread_cond_signal(&o->wake);
    pthread_mutex_unlock(&o->mu);
}

// Slot i's unit written back if it changed (queued; the slot's next request waits for it).
static void slot_write_back(Zero3Offload *o, int i) {
    if (o->slot[i].unit >= 0 && o->slot[i].dirty) slot_queue(o, i, IO_WRITE, o->slot[i].unit);
}

// ---- the cache, outside the step ---------------------------------------------------------------------

static int slot_of(const Zero3Offload *o, int u) {
    for (int i = 0; i < o->nslots; i++)
        if (o->slot[i].unit == u) return i;
    return -1;
}

void *zero3_offload_array(Zero3Offload *o, int u, int array) {
    int i = slot_of(o, u);
    if (i < 0) {
        i = u % o->nslots;   // the stream's slot for u: the cache and the stream agree on where a unit sits
        slot_write_back(o, i);
        slot_queue(o, i, IO_READ, u);
    }
    slot_wait(o, i);
    o->slot[i].dirty = 1;
    // the record's arrays: the params' one; the optimizer's master only when separate
    int k = o->what == ZERO3_STORE_PARAMS ? 0 : o->narrays == 3 ? array : array - 1;
    if (k < 0) zero3_die("zero3_offload_array: the fp32 master is the params, not offloaded");
    return o->slot[i].buf + (size_t)k * o->span[u] * o->elem_bytes;
}

// ---- the read before a gather -------------------------------------------------------------------------

// Unit u's record read from the file now (its checksum checked), into its slot; what the slot held
// is written back first if it changed. Always a read, even where a slot holds u already: a gather
// sees the file, and the I/O is the same at every step. Valid until the slot's next request.
const void *zero3_offload_read(Zero3Offload *o, int u) {
    const int i = u % o->nslots;
    slot_write_back(o, i);
    slot_queue(o, i, IO_READ, u);
    slot_wait(o, i);
    return o->slot[i].buf;
}

void zero3_offload_flush(Zero3Offload *o) {
    for (int i = 0; i < o->nslots; i++) slot_write_back(o, i);
    zero3_offload_drain(o);
}

void zero3_offload_drain(Zero3Offload *o) {
    for (int i = 0; i < o->nslots; i++) slot_wait(o, i);
}

// ---- the stream, inside the optimizer step ---------------------------------------------------------

// The file is the size the run made it: a truncated (or grown) file stops the step before it reads.
static void check_file_size(Zero3Offload *o) {
    struct stat st;
    char msg[4400];
    if (fstat(o->fd, &st) != 0 || (size_t)st.st_size != o->file_bytes) {
        snprintf(msg, sizeof msg, "offload: %s: the file holds %lld bytes, the run made it %zu: changed behind the run's back",
                 o->path, (long long)st.st_size, o->file_bytes);
        offload_fail(o, msg);
    }
}

// Every record is read once a stream, whatever a slot holds: a step's I/O is the same at every
// step and for any number of slots (the planner's count).
static void stream_read(Zero3Offload *o, int u) {
    if (u >= o->z->nunits) return;
    slot_queue(o, u % o->nslots, o->stream_fills ? IO_FILL : IO_READ, u);
}

// The optimizer's first units, 0 .. nslots-2, each into its slot (behind the last stream's
// write-back of that slot), queued at the step's start: they are read under its forward and
// backward (their m and v change only in the step). The params' are not read ahead: the forward's
// gathers read each record where they are issued.
void zero3_offload_read_ahead(Zero3Offload *o) {
    if (o->what != ZERO3_STORE_OPTIMIZER || o->read_ahead) return;
    for (int u = 0; u < o->nslots - 1; u++) {
        slot_write_back(o, u);   // what the cache changed there since
        stream_read(o, u);
    }
    o->read_ahead = 1;
}

void zero3_offload_stream_begin(Zero3Offload *o) {
    check_file_size(o);
    for (int i = 0; i < o->nslots; i++) slot_write_back(o, i);   // what the cache changed; not waited for
    // the first units, where the step's start did not read them ahead (or the cache took their slot since)
    for (int u = 0; u < o->nslots - 1; u++)
        if (!(o->read_ahead && o->slot[u].unit == u)) stream_read(o, u);
    o->read_ahead = 0;
}

void zero3_offload_take(Zero3Offload *o, int u) { slot_wait(o, u % o->nslots); }

void zero3_offload_give(Zero3Offload *o, int u) {
    const int i = u % o->nslots;
    o->slot[i].dirty = 1;   // AdamW changed it
    slot_write_back(o, i);
    stream_read(o, u + o->nslots - 1);   // into unit u-1's slot, behind its write-back
}

// ---- opening and closing --------------------------------------------------------------------------

static size_t round_block(size_t x) { return (x + BLOCK - 1) / BLOCK * BLOCK; }

// The elements of one array of unit u's record: its optimizer span; for the params, its shard where
// its params are SHARDED (a persistent unit's stay in memory: no record).
static size_t record_span(const Zero3Offload *o, int u) {
    const Zero3 *z = o->z;
    size_t begin, count;
    if (o->what == ZERO3_STORE_PARAMS) return z->units[u].layout.params == ZERO3_SHARDED ? z->units[u].shard : 0;
    zero3_optimizer_range(z, u, &begin, &count);
    return count;
}

// The records' places: unit after unit, each its arrays over its span, BLOCK-padded. Slot i takes
// the units u = i mod S (the stream's, the cache's and the gathers' rule alike), so it is as large as
// the largest of their records: the one slot that takes the embedding need not make every slot its size.
static void lay_out_records(Zero3Offload *o) {
    Zero3 *z = o->z;
    size_t at = 0;
    for (int u = 0; u < z->nunits; u++) {
        const size_t count = record_span(o, u);
        o->span[u] = count;
        o->record_at[u] = at;
        o->record_bytes[u] = round_block((size_t)o->narrays * count * o->elem_bytes);
        at += o->record_bytes[u];
    }
    o->file_bytes = at;
    o->slots_bytes = 0;
    for (int i = 0; i < o->nslots; i++) {
        size_t largest = BLOCK;
        for (int u = i; u < z->nunits; u += o->nslots)
            if (o->record_bytes[u] > largest) largest = o->record_bytes[u];
        if (posix_memalign((void **)&o->slot[i].buf, BLOCK, largest)) zero3_die("out of host memory");
        o->slot[i].unit = -1;
        o->slots_bytes += largest;
    }
}

// Opens the file direct where the folder's file system takes it (tmpfs does not: buffered there).
static int open_file(Zero3Offload *o, char *err, size_t errlen) {
    o->fd = open(o->path, O_RDWR | O_CREAT | O_TRUNC | O_DIRECT, 0600);
    o->direct = o->fd >= 0;
    if (o->fd < 0 && errno == EINVAL) o->fd = open(o->path, O_RDWR | O_CREAT | O_TRUNC, 0600);
    if (o->fd < 0) {
        snprintf(err, errlen, "offload: cannot create %s (%s)", o->path, strerror(errno));
        return -1;
    }
    int rc = o->file_bytes ? posix_fallocate(o->fd, 0, (off_t)o->file_bytes) : 0;
    if (rc) {
        snprintf(err, errlen, "offload: %s: cannot reserve %.3f GB for this rank's %s (%s)", o->path,
                 o->file_bytes / 1e9, STORE_WORDS[o->what], strerror(rc));
        close(o->fd);
        unlink(o->path);
        o->fd = -1;
        return -1;
    }
    return 0;
}

static void free_store(Zero3Offload *o) {
    for (int i = 0; i < o->nslots; i++) free(o->slot[i].buf);
    free(o->slot); free(o->queue);
    free(o->record_at); free(o->record_bytes); free(o->span); free(o->checksum); free(o->written);
    free(o);
}

Zero3Offload *zero3_offload_open(Zero3 *z, Zero3Store what, const char *dir, char *err, size_t errlen) {
    Zero3Offload *o = (Zero3Offload *)calloc(1, sizeof(Zero3Offload));
    const size_t n = (size_t)z->nunits;
    if (!o) zero3_die("out of host memory");
    o->z = z;
    o->what = what;
    if (what == ZERO3_STORE_PARAMS) {
        o->narrays = 1;
        o->elem_bytes = zero3_dtype_size(z->cfg.param_type);
        o->stream_fills = !z->resident.master_is_params;   // bf16: AdamW writes every param from the master
    } else {
        o->narrays = z->resident.master_is_params ? 2 : 3;
        o->elem_bytes = sizeof(float);
    }
    o->record_at = calloc(n, sizeof(size_t)); o->record_bytes = calloc(n, sizeof(size_t)); o->span = calloc(n, sizeof(size_t));
    o->checksum = calloc(n, sizeof(uint64_t)); o->written = calloc(n, 1);
    if (!o->record_at || !o->record_bytes || !o->span || !o->checksum || !o->written) zero3_die("out of host memory");
    const int asked = z->cfg.offload_slots > MIN_SLOTS ? z->cfg.offload_slots : MIN_SLOTS;
    o->nslots = asked > z->nunits ? z->nunits : asked;   // a slot a unit at most (the trainer refuses more)
    o->qcap = 2 * o->nslots;
    o->slot = calloc((size_t)o->nslots, sizeof(Slot)); o->queue = calloc((size_t)o->qcap, sizeof(Request));
    if (!o->slot || !o->queue) zero3_die("out of host memory");
    snprintf(o->dir, sizeof o->dir, "%s", dir);
    snprintf(o->path, sizeof o->path, "%s/%s_r%05d.bin", dir, STORE_FILE[what], z->be->rank);
    lay_out_records(o);
    if (open_file(o, err, errlen)) { free_store(o); return NULL; }
    o->stats.direct = o->direct;
    pthread_mutex_init(&o->mu, NULL);
    pthread_cond_init(&o->wake, NULL);
    pthread_cond_init(&o->finished, NULL);
    if (pthread_create(&o->thread, NULL, io_thread, o)) zero3_die("cannot start the offload I/O thread");
    return o;
}

void zero3_offload_close(Zero3Offload *o) {
    if (!o) return;
    pthread_mutex_lock(&o->mu);
    o->quit = 1;
    pthread_cond_signal(&o->wake);
    pthread_mutex_unlock(&o->mu);
    pthread_join(o->thread, NULL);
    close(o->fd);
    unlink(o->path);
    free_store(o);
}

const char *zero3_offload_path(const Zero3Offload *o) { return o->path; }
double zero3_offload_file_bytes(const Zero3Offload *o) { return (double)o->file_bytes; }
int zero3_offload_slots(const Zero3Offload *o) { return o->nslots; }
double zero3_offload_slots_bytes(const Zero3Offload *o) { return (double)o->slots_bytes; }

Zero3OffloadStats zero3_offload_stats(const Zero3Offload *o) { return o->stats; }
