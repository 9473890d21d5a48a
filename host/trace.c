// host/trace.c: the trace-event JSON writer (see trace.h).
#include "trace.h"
#include "../observe/zero3_observe.h"

#include "fileio.h"
#include <fcntl.h>
#include <sys/stat.h>
#include <unistd.h>

struct Trace {
    const Zero3Backend *be;
    OutputFiles *files; // the run's (fileio.h): the parts are pending there until joined
    char path[4096];   // -tr FILE, as given
    long long run;     // this run's id (rank 0's pid): the parts and the temp file carry it
    char part[4200];   // this rank's part, FILE.<run>.rank<r>.part
    FILE *f;
    double origin;     // rank 0's clock at the start, seconds
};

static void part_path(char *buf, size_t n, const Trace *t, int rank) { fmt_path(buf, n, "%s.%lld.rank%d.part", t->path, t->run, rank); }

// This rank's part (or rank 0's temp file): a new file (O_EXCL: never one that exists, so never another run's or a FIFO).
static FILE *part_create(OutputFiles *files, const char *part) {
    int fd = open(part, O_WRONLY | O_CREAT | O_EXCL | O_CLOEXEC, 0644);
    FILE *f = fd >= 0 ? fdopen(fd, "wb") : NULL;
    if (!f && fd >= 0) close(fd);
    if (f) output_pending_add(files, part);
    return f;
}

Trace *trace_open(OutputFiles *files, const char *path, const Zero3Backend *be) {
    if (!path) return NULL;
    Trace *t = (Trace *)xcalloc(1, sizeof(Trace));
    t->be = be;
    t->files = files;
    char err[1024] = "";
    // the run id every rank names its part with: rank 0's pid (two runs with one -tr never meet)
    t->run = (long long)be->all_reduce_scalar(be->ctx, be->rank == 0 ? (double)getpid() : 0.0);
    if (strlen(path) > 4000) set_err(err, sizeof err, "flag -tr: the path is longer than 4000 characters");
    else if (output_check(files, path, "flag -tr", err, sizeof err) == 0) {
        snprintf(t->path, sizeof t->path, "%s", path);
        part_path(t->part, sizeof t->part, t, be->rank);
        if (!(t->f = part_create(files, t->part))) set_err(err, sizeof err, "flag -tr: cannot write %s (%s)", path, strerror(errno));
    }
    agree_or_exit(be, err);
    double mine = now_seconds();
    t->origin = be->all_reduce_scalar(be->ctx, be->rank == 0 ? mine : 0.0);
    return t;
}

static double us(const Trace *t, double seconds) { return (seconds - t->origin) * 1e6; }

static const char *unit_name(const Zero3 *z, int u) { return u >= 0 ? z->units[u].name : "all"; }

void trace_step(Trace *t, const Zero3 *z, const Zero3Event *ev, int n, int step, double t0, double t1) {
    if (!t || !t->f) return;
    const int r = t->be->rank;
    FILE *f = t->f;
    fprintf(f, ",\n{\"name\":\"step %d\",\"cat\":\"step\",\"ph\":\"X\",\"pid\":%d,\"tid\":0,\"ts\":%.3f,\"dur\":%.3f,"
            "\"args\":{\"step\":%d,\"exposed_comm_ms\":%.3f,\"prefetch_depth\":%d,\"backward_prefetch\":\"%s\"}}", step, r,
            us(t, t0), (t1 - t0) * 1e6, step, z->observe.stats.exposed_s * 1e3, z->cfg.prefetch_depth,
            z->cfg.backward_prefetch == ZERO3_BACKWARD_POST ? "post" : "pre");
    for (int i = 0; i < n; i++) {
        const Zero3Event *e = &ev[i];
        double ts = us(t, e->t_begin), dur = (e->t_end - e->t_begin) * 1e6;
        if (dur < 0) dur = 0;
        const char *kind = e->coll < ZERO3_COLL_KINDS ? ZERO3_COLL_NAMES[e->coll] : "";
        switch (e->type) {
        case ZERO3_EV_FORWARD: case ZERO3_EV_BACKWARD: case ZERO3_EV_OPTIMIZER: {
            const char *what = e->type == ZERO3_EV_FORWARD ? "fwd" : e->type == ZERO3_EV_BACKWARD ? "bwd" : "adamw";
            fprintf(f, ",\n{\"name\":\"%s %s\",\"cat\":\"compute\",\"ph\":\"X\",\"pid\":%d,\"tid\":0,\"ts\":%.3f,\"dur\":%.3f,"
                    "\"args\":{\"step\":%d,\"micro\":%d,\"unit\":\"%s\"}}", what, e->unit >= 0 ? unit_name(z, e->unit) : "",
                    r, ts, dur, step, e->micro, unit_name(z, e->unit));
            break;
        }
        case ZERO3_EV_WAIT:
            fprintf(f, ",\n{\"name\":\"wait %s %s\",\"cat\":\"exposed\",\"ph\":\"X\",\"pid\":%d,\"tid\":0,\"ts\":%.3f,\"dur\":%.3f,"
                    "\"args\":{\"step\":%d,\"micro\":%d,\"kind\":\"%s\",\"unit\":\"%s\"}}", kind, unit_name(z, e->unit), r, ts, dur,
                    step, e->micro, kind, unit_name(z, e->unit));
            break;
        case ZERO3_EV_COLLECTIVE:
            fprintf(f, ",\n{\"name\":\"%s %s\",\"cat\":\"comm\",\"ph\":\"X\",\"pid\":%d,\"tid\":1,\"ts\":%.3f,\"dur\":%.3f,"
                    "\"args\":{\"step\":%d,\"micro\":%d,\"kind\":\"%s\",\"unit\":\"%s\",\"bytes\":%.0f}}", kind, unit_name(z, e->unit),
                    r, ts, dur, step, e->micro, kind, unit_name(z, e->unit), e->bytes);
            break;
        }
    }
}

// The name the joined trace takes: FILE itself, or when FILE exists (an earlier run's trace, a
// resumed run's first part) the first free numbered sibling, FILE.1.json for FILE.json. Linked into
// place (link fails when the name exists), so no file is ever replaced, even by a run finishing at
// the same moment. 0, with the name in out; -1 with a message.
static int trace_place(const Trace *t, const char *tmp, char *out, size_t n, char *err, size_t errlen) {
    const char *slash = strrchr(t->path, '/'), *dot = strrchr(t->path, '.');
    int stem = (dot && (!slash || dot > slash + 1)) ? (int)(dot - t->path) : (int)strlen(t->path);
    for (int k = 0; k < 10000; k++) {
        if (k == 0) fmt_path(out, n, "%s", t->path);
        else fmt_path(out, n, "%.*s.%d%s", stem, t->path, k, t->path + stem);
        if (output_check(t->files, out, "trace", err, errlen) != 0) { err[0] = '\0'; continue; }   // a folder or an input: the next name
        if (link(tmp, out) == 0) { unlink(tmp); output_pending_forget(t->files, tmp); return 0; }
        if (errno == EEXIST) continue;
        set_err(err, errlen, "trace: cannot write %s (%s)", out, strerror(errno));
        return -1;
    }
    set_err(err, errlen, "trace: %s and 9999 numbered siblings all exist", t->path);
    return -1;
}

// Rank 0: every rank's part into the temp file FILE.<run>.tmp. 0, or -1 with a message.
static int trace_join(const Trace *t, FILE *out, const char *tmp, char *err, size_t errlen) {
    fprintf(out, "{\"displayTimeUnit\":\"ms\",\"traceEvents\":[\n"
            "{\"name\":\"trace\",\"ph\":\"M\",\"pid\":0,\"tid\":0,\"args\":{\"ranks\":%d}}", t->be->world);
    for (int r = 0; r < t->be->world; r++) {
        fprintf(out, ",\n{\"name\":\"process_name\",\"ph\":\"M\",\"pid\":%d,\"args\":{\"name\":\"rank %d\"}}", r, r);
        fprintf(out, ",\n{\"name\":\"process_sort_index\",\"ph\":\"M\",\"pid\":%d,\"args\":{\"sort_index\":%d}}", r, r);
        fprintf(out, ",\n{\"name\":\"thread_name\",\"ph\":\"M\",\"pid\":%d,\"tid\":0,\"args\":{\"name\":\"compute\"}}", r);
        fprintf(out, ",\n{\"name\":\"thread_name\",\"ph\":\"M\",\"pid\":%d,\"tid\":1,\"args\":{\"name\":\"communication\"}}", r);
        char part[4200];
        part_path(part, sizeof part, t, r);
        FILE *in = fopen(part, "rb");
        if (!in) { set_err(err, errlen, "trace: cannot read %s (%s)", part, strerror(errno)); return -1; }
        char buf[65536];
        size_t got;
        while ((got = fread(buf, 1, sizeof buf, in)) > 0) fwrite(buf, 1, got, out);
        fclose(in);
    }
    fprintf(out, "\n]}\n");
    errno = 0;
    if (fflush(out) != 0 || ferror(out) || fsync(fileno(out)) != 0) {
        set_err(err, errlen, "trace: cannot write %s (%s)", tmp, strerror(errno ? errno : EIO));
        return -1;
    }
    return 0;
}

void trace_close(Trace *t, char *written, size_t n) {
    if (written && n) written[0] = '\0';
    if (!t) return;
    char err[1024] = "";
    if (t->f && fclose(t->f) != 0) set_err(err, sizeof err, "trace: cannot write %s (%s)", t->part, strerror(errno));
    t->f = NULL;
    // every part is complete before rank 0 reads them; on any failure every rank removes its own
    if (t->be->all_reduce_scalar(t->be->ctx, err[0] ? 1.0 : 0.0) == 0.0 && t->be->rank == 0) {
        char tmp[4200], name[4200];
        fmt_path(tmp, sizeof tmp, "%s.%lld.tmp", t->path, t->run);
        FILE *out = part_create(t->files, tmp);
        if (!out) set_err(err, sizeof err, "trace: cannot write %s (%s)", tmp, strerror(errno));
        else {
            int ok = trace_join(t, out, tmp, err, sizeof err) == 0;
            if (fclose(out) != 0 && ok) { set_err(err, sizeof err, "trace: cannot write %s (%s)", tmp, strerror(errno)); ok = 0; }
            if (ok && trace_place(t, tmp, name, sizeof name, err, sizeof err) == 0) {
                printf("trace: %s (%d ranks; open it in https://ui.perfetto.dev or chrome://tracing)\n", name, t->be->world);
                if (written) fmt_path(written, n, "%s", name);
            }
            output_abandon(t->files, NULL, tmp);   // gone already when it was linked into place
        }
    }
    t->be->all_reduce_scalar(t->be->ctx, 0.0);   // rank 0 has read every part
    unlink(t->part);
    output_pending_forget(t->files, t->part);
    agree_or_exit(t->be, err);
    free(t);
}
