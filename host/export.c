// host/export.c: the trained model as an llm.c model file (version 3 fp32 or 5 bf16), written by
// every rank at once, each its own pieces, so no rank ever holds the whole model.
#include "export.h"
#include "fileio.h"
#include <sys/types.h>
#include <unistd.h>

typedef struct { FILE *f; const float *host; size_t base; int version; int failed; } ExportArg;
static void export_piece(const GPT2Piece *p, void *varg) {
    ExportArg *a = (ExportArg *)varg;
    if (a->failed) return;
    const float *src = a->host + (p->unit_pos - a->base);
    if (a->version == 3) {
        if (fseeko(a->f, (off_t)(1024 + 4 * (long long)p->file_elem), SEEK_SET) != 0 ||
            fwrite(src, sizeof(float), p->count, a->f) != p->count) a->failed = 1;
        return;
    }
    uint16_t buf[4096];
    if (fseeko(a->f, (off_t)(1024 + 2 * (long long)p->file_elem), SEEK_SET) != 0) { a->failed = 1; return; }
    for (size_t done = 0; done < p->count && !a->failed; done += 4096) {
        size_t n = p->count - done < 4096 ? p->count - done : 4096;
        for (size_t i = 0; i < n; i++) buf[i] = f32_to_bf16(src[done + i]);
        if (fwrite(buf, 2, n, a->f) != n) a->failed = 1;
    }
}

// agree_or_exit, except that when any rank failed, rank 0 first removes the temporary file: a
// failed export leaves no partial model.bin.tmp behind.
static void export_agree(OutputFiles *files, const Zero3Backend *be, const char *err, const char *tmp) {
    if (be->all_reduce_scalar(be->ctx, err[0] ? 1.0 : 0.0) == 0.0) return;
    if (be->rank == 0) output_abandon(files, NULL, tmp);
    agree_or_exit(be, err);
}

// Writes `path` (collective): rank 0 creates path.tmp with the header at its full size, every rank
// writes its owned slices at their file offsets, all agree, rank 0 renames. Dies on failure.
void model_export(OutputFiles *files, const char *path, const GPT2Config *cfg, Zero3 *z, int version) {
    const Zero3Backend *be = z->be;
    char err[1024] = "", tmp[4200];
    fmt_path(tmp, sizeof tmp, "%s.tmp", path);
    int elem = version == 3 ? 4 : 2;   // tmp: output_begin's name, path.tmp
    if (be->rank == 0) {
        int32_t h[256];
        gpt2_write_header(h, cfg, version);
        char why[900] = "";
        FILE *f = output_begin(files, path, tmp, sizeof tmp, why, sizeof why);
        off_t size = (off_t)(1024 + (long long)gpt2_num_parameters(cfg) * elem);
        if (!f) set_err(err, sizeof err, "export: %s", why);
        else {
            if (fwrite(h, sizeof h, 1, f) != 1 || fflush(f) != 0 || ftruncate(fileno(f), size) != 0)
                set_err(err, sizeof err, "export: cannot write %s (%s)", tmp, strerror(errno));
            fclose(f);
        }
    }
    export_agree(files, be, err, tmp);
    // under HSDP the replica groups hold the same slices: the first group writes them
    FILE *f = z->replica == 0 ? fopen(tmp, "r+b") : NULL;
    if (!f && z->replica == 0) set_err(err, sizeof err, "export: cannot open %s (%s)", tmp, strerror(errno));
    for (int u = 0; u < z->nunits && f && !err[0]; u++) {
        size_t S = z->units[u].shard, begin = zero3_owned_begin(z, u);
        float *host = (float *)xmalloc(S * sizeof(float));
        z->be->copy_to_host(z->be->ctx, host, zero3_owned_master(z, u), S * sizeof(float));
        ExportArg a = {f, host, begin, version, 0};
        gpt2_for_each_piece(cfg, z, u, begin, S, export_piece, &a);
        free(host);
        if (a.failed) set_err(err, sizeof err, "export: write to %s failed (%s)", tmp, strerror(errno));
    }
    if (f) {
        if (!err[0] && (fflush(f) != 0 || fsync(fileno(f)) != 0))
            set_err(err, sizeof err, "export: write to %s failed (%s)", tmp, strerror(errno));
        fclose(f);
    }
    export_agree(files, be, err, tmp);
    if (be->rank == 0) {   // every rank's slices are durable (fsynced above): rename into place
        FILE *done = fopen(tmp, "rb");
        char why[900] = "";
        if (!done || commit_file(files, done, tmp, path, why, sizeof why) != 0) set_err(err, sizeof err, "export: %s", done ? why : strerror(errno));
    }
    export_agree(files, be, err, tmp);
}
