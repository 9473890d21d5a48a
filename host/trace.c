// host/trace.c: the trace-event JSON writer (see trace.h).
#include "trace.h"

struct Trace {
    const Zero3Backend *be;
    char path[4096], part[4200];
    FILE *f;
    double origin;   // rank 0's clock at the start, seconds
};

Trace *trace_open(const char *path, const Zero3Backend *be) {
    if (!path) return NULL;
    Trace *t = (Trace *)xcalloc(1, sizeof(Trace));
    t->be = be;
    char err[1024] = "";
    if (strlen(path) > 4000) set_err(err, sizeof err, "flag -tr: the path is longer than 4000 characters");
    else {
        snprintf(t->path, sizeof t->path, "%s", path);
        fmt_path(t->part, sizeof t->part, "%s.rank%d.part", path, be->rank);
        if (be->rank == 0) {   // the file itself: written at the end, probed now
            FILE *probe = fopen(path, "wb");
            if (!probe) set_err(err, sizeof err, "flag -tr: cannot write %s (%s)", path, strerror(errno));
            else fclose(probe);
        }
        if (!err[0] && !(t->f = fopen(t->part, "wb")))
            set_err(err, sizeof err, "flag -tr: cannot write %s (%s)", t->part, strerror(errno));
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
            "\"args\":{\"step\":%d,\"exposed_comm_ms\":%.3f}}", step, r, us(t, t0), (t1 - t0) * 1e6, step,
            z->stats.exposed_s * 1e3);
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

void trace_close(Trace *t) {
    if (!t) return;
    char err[1024] = "";
    if (t->f && fclose(t->f) != 0) set_err(err, sizeof err, "trace: cannot write %s (%s)", t->part, strerror(errno));
    t->f = NULL;
    agree_or_exit(t->be, err);   // every part is complete before rank 0 reads them
    if (t->be->rank == 0) {
        FILE *out = fopen(t->path, "wb");
        if (!out) fatal_local("trace: cannot write %s (%s)", t->path, strerror(errno));
        fprintf(out, "{\"displayTimeUnit\":\"ms\",\"traceEvents\":[\n"
                "{\"name\":\"trace\",\"ph\":\"M\",\"pid\":0,\"tid\":0,\"args\":{\"ranks\":%d}}", t->be->world);
        for (int r = 0; r < t->be->world; r++) {
            fprintf(out, ",\n{\"name\":\"process_name\",\"ph\":\"M\",\"pid\":%d,\"args\":{\"name\":\"rank %d\"}}", r, r);
            fprintf(out, ",\n{\"name\":\"process_sort_index\",\"ph\":\"M\",\"pid\":%d,\"args\":{\"sort_index\":%d}}", r, r);
            fprintf(out, ",\n{\"name\":\"thread_name\",\"ph\":\"M\",\"pid\":%d,\"tid\":0,\"args\":{\"name\":\"compute\"}}", r);
            fprintf(out, ",\n{\"name\":\"thread_name\",\"ph\":\"M\",\"pid\":%d,\"tid\":1,\"args\":{\"name\":\"communication\"}}", r);
            char part[4200];
            fmt_path(part, sizeof part, "%s.rank%d.part", t->path, r);
            FILE *in = fopen(part, "rb");
            if (!in) fatal_local("trace: cannot read %s (%s)", part, strerror(errno));
            char buf[65536];
            size_t got;
            while ((got = fread(buf, 1, sizeof buf, in)) > 0) fwrite(buf, 1, got, out);
            fclose(in);
            remove(part);
        }
        fprintf(out, "\n]}\n");
        if (fclose(out) != 0) fatal_local("trace: cannot write %s (%s)", t->path, strerror(errno));
        printf("trace: %s (%d ranks; open it in https://ui.perfetto.dev or chrome://tracing)\n", t->path, t->be->world);
    }
    free(t);
}
