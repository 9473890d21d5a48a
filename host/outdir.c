// host/outdir.c: the output folder -o of a run: made and probed before the long setup, locked for
// the run's life (one run per folder), an earlier run's output refused unless -y 1 or -f 1 says
// what to do with it, the files the run writes there checked against its inputs (fileio.h's rule),
// the folder's identity checked before every write by name, and DIR/log.csv: started, cut back on
// resume, or written beside an earlier log until this run's first checkpoint (-f 1); and what the
// run saves there: its checkpoints and the trained model.bin.
#include "trainer.h"
#include "export.h"
#include "fileio.h"
#include <dirent.h>
#include <sys/stat.h>
#include <unistd.h>

// Before every write into -o by name (collective): is -o still the folder this run started in? A
// folder moved away under a live run (and perhaps a new run's folder made under the old name) ends
// this run with one error line; it writes nothing more, so the files now at that path are untouched.
// Its log and checkpoints so far are in the moved folder: resume there with -o NEWPATH -y 1.
void trainer_check_folder(const Trainer *tr, const char *writing) {
    char err[4096] = "";
    if (dir_moved(tr->output.files))
        set_err(err, sizeof err, "flag -o: %s is no longer the folder this run started in (it was moved or replaced while the run "
                "went on): not writing %s there. This run's log and checkpoints are in the folder where it went "
                "(resume from there with -o NEWPATH -y 1); the files at %s are untouched", tr->args.out_dir, writing, tr->args.out_dir);
    agree_or_exit(tr->be, err);
}

// Does DIR hold an earlier run's output (a `latest`, readable or not; checkpoint folders; a log or
// an exported model)? 1 and `found` says what, or 0.
static int out_dir_earlier_run(const char *dir, char *found, size_t n) {
    char path[4200], name[CKPT_NAME_MAX], why[4400];
    struct stat st;
    fmt_path(path, sizeof path, "%s/latest", dir);
    if (lstat(path, &st) == 0) {
        if (ckpt_read_latest(dir, name, why, sizeof why) == 0) set_err(found, n, "checkpoints (latest: %s)", name);
        else set_err(found, n, "checkpoints, with a `latest` that cannot be read (%s)", why);
        return 1;
    }
    DIR *d = opendir(dir);
    struct dirent *e;
    while (d && (e = readdir(d)) != NULL)
        if (!strncmp(e->d_name, "ckpt_", 5)) {
            set_err(found, n, "checkpoints (%s) but no `latest`", e->d_name);
            closedir(d);
            return 1;
        }
    if (d) closedir(d);
    const char *outputs[] = {"log.csv", "model.bin"};
    for (int i = 0; i < 2; i++) {
        fmt_path(path, sizeof path, "%s/%s", dir, outputs[i]);
        if (lstat(path, &st) == 0) { set_err(found, n, "the %s of an earlier run", outputs[i]); return 1; }
    }
    return 0;
}

// The files a run writes into -o by name, checked before anything is written (fileio.h's rule): each
// a regular file or nothing, and none of them an input.
static void trainer_check_out_files(const OutputFiles *files, const char *dir, char *err, size_t n) {
    const char *names[] = {"log.csv", "model.bin", "latest"};
    for (int i = 0; i < 3 && !err[0]; i++) {
        char path[4200];
        fmt_path(path, sizeof path, "%s/%s", dir, names[i]);
        if (strcmp(names[i], "latest") != 0 || access(path, F_OK) != 0)   // a bad `latest` is out_dir_earlier_run's to name
            output_check(files, path, "flag -o", err, n);
    }
}

// The run's inputs, by identity, for the outputs to be checked against (fileio.h's rule).
void trainer_note_inputs(const Trainer *tr) {
    const TrainArgs *a = &tr->args;
    OutputFiles *files = tr->output.files;
    GPT2Config shape;
    if (!(a->init[0] == 'd' && gpt2_config_from_descriptor(a->init, &shape) == 0)) input_note(files, a->init, "the model file of -e");
    input_note(files, a->train_path, "the train tokens of -i");
    input_note(files, a->val_path, "the val tokens of -j");
    input_note(files, TOKENIZER_PATH, "the tokenizer");
}

// -o: creates the output directory (and its parents) and checks that it takes files, before the
// long setup, so a bad -o fails at once on every rank. Then rank 0 takes the folder's run lock for
// the life of the run (one run per folder), and a fresh run refuses a folder that holds an earlier
// run's output unless -f 1 says to start over: nothing this run did not write is replaced without
// being asked. -y 1 on a folder that does not exist creates nothing.
void trainer_prepare_out_dir(const Trainer *tr) {
    const TrainArgs *a = &tr->args;
    const char *dir = a->out_dir;
    char err[2048] = "";
    if (dir && strlen(dir) > 3000) set_err(err, sizeof err, "flag -o: the path is longer than 3000 characters");
    else if (dir && tr->be->rank == 0) {
        char probe[4200];
        fmt_path(probe, sizeof probe, "%s/.write_test", dir);
        FILE *f = NULL;
        struct stat st;
        if (a->resume && stat(dir, &st) != 0 && errno == ENOENT)
            set_err(err, sizeof err, "flag -y: %s does not exist, so there is no checkpoint to resume from", dir);
        else if (make_dirs(dir) != 0)
            set_err(err, sizeof err, "flag -o: cannot create directory %s (%s)", dir, strerror(errno));
        else if (!(f = fopen(probe, "wb")))
            set_err(err, sizeof err, "flag -o: cannot write into %s (%s)", dir, strerror(errno));
        if (f) { fclose(f); remove(probe); }
        char msg[1024];
        int lock = err[0] ? 0 : dir_lock(tr->output.files, dir, msg, sizeof msg);
        if (lock == 1)
            set_err(err, sizeof err, "flag -o: %s is in use by another run (%s): two runs in one folder would overwrite "
                    "each other's log and checkpoints; wait for it to end, or give another -o", dir, msg);
        else if (lock == 2) fprintf(stderr, "warning: flag -o: %s; nothing stops a second run from using %s at the same time\n", msg, dir);
        else if (lock < 0) set_err(err, sizeof err, "flag -o: %s", msg);
        if (!err[0]) trainer_check_out_files(tr->output.files, dir, err, sizeof err);
        char found[4600];
        if (!err[0] && !a->resume && out_dir_earlier_run(dir, found, sizeof found)) {
            if (!a->fresh)
                set_err(err, sizeof err, "flag -o: %s holds %s; -y 1 resumes that run, -f 1 starts over (the old "
                        "checkpoints stay until this run's first checkpoint is complete)", dir, found);
            else
                fprintf(stderr, "warning: -f 1: starting over in %s, which holds %s; the old checkpoints and log.csv stay "
                        "until this run's first checkpoint is complete\n", dir, found);
        }
    }
    agree_or_exit(tr->be, err);
    // every rank: the folder by identity, so a folder renamed away under the run is never taken for a new one
    if (dir && dir_hold(tr->output.files, dir) != 0) set_err(err, sizeof err, "flag -o: cannot open %s (%s)", dir, strerror(errno));
    agree_or_exit(tr->be, err);
}

// log.csv's columns (trainer_log_row writes a row of them), and those of a log written before the
// process's peak had its own column: there mem_peak_bytes held the engine's peak, and there was no
// mem_engine_peak_bytes.
static const char LOG_HEADER[] = "step,train_loss,val_loss,lr,grad_norm,ms,tokens_per_s,comm_bytes,mem_states_bytes,"
                                 "mem_peak_bytes,compute_ms,exposed_comm_ms,mem_engine_peak_bytes\n";
static const char LOG_HEADER_ENGINE_PEAK[] = "step,train_loss,val_loss,lr,grad_norm,ms,tokens_per_s,comm_bytes,"
                                             "mem_states_bytes,mem_peak_bytes,compute_ms,exposed_comm_ms\n";

// A row of the engine-peak log in today's columns: its 10th field (the engine's peak) moves to the
// end, and the process's peak, never measured then, is left empty.
static void log_row_upgraded(FILE *out, const char *line) {
    const char *f[13];
    int n = 0;
    f[n++] = line;
    for (const char *c = line; *c && n < 13; c++)
        if (*c == ',') f[n++] = c + 1;
    if (n != 12) { fputs(line, out); return; }   // not a row of that log: kept as it is
    size_t engine_len = (size_t)(f[10] - f[9] - 1), tail_len = strcspn(f[11], "\n");
    fprintf(out, "%.*s,,%.*s,%.*s,%.*s\n", (int)(f[9] - line - 1), line, (int)(f[11] - f[10] - 1), f[10],
            (int)tail_len, f[11], (int)engine_len, f[9]);
}

// When resuming, log.csv keeps its header and the rows of the steps before the checkpoint; the rows
// of steps the resumed run will redo are dropped (the file is rewritten beside and renamed; the
// temp file is the one a -f 1 run killed before its first checkpoint left, so that goes too). A log
// in the engine-peak columns is rewritten in today's, each row's figures where they now belong; a
// log of other columns is refused (appending to it would mix two tables in one file).
static int log_truncate(OutputFiles *files, const char *path, int keep_below, char *err, size_t errlen) {
    FILE *in = open_regular_file(path, NULL, 0);
    if (!in) return 0;   // no log yet: trainer_open_log starts one
    char line[4096];
    if (!fgets(line, sizeof line, in)) { fclose(in); return 0; }   // empty: trainer_open_log's header follows
    const int upgrade = strcmp(line, LOG_HEADER_ENGINE_PEAK) == 0;
    if (!upgrade && strcmp(line, LOG_HEADER) != 0) {
        fclose(in);
        set_err(err, errlen, "flag -o: %s has other columns than this trainer writes (its header: %.*s); move it aside to "
                "resume", path, (int)strcspn(line, "\n"), line);
        return -1;
    }
    char tmp[4200];
    FILE *out = output_begin(files, path, tmp, sizeof tmp, err, errlen);
    if (!out) { fclose(in); return -1; }
    fputs(LOG_HEADER, out);
    while (fgets(line, sizeof line, in)) {
        long long step;
        char *end;
        errno = 0;
        step = strtoll(line, &end, 10);
        int is_row = (end != line && *end == ',' && errno == 0);
        if (!is_row || step < 0 || step >= keep_below) continue;
        if (upgrade) log_row_upgraded(out, line);
        else fputs(line, out);
    }
    fclose(in);
    return commit_file(files, out, tmp, path, err, errlen);
}

// DIR/log.csv, one log per history: it always matches the checkpoint `latest` names. A resumed run
// cuts it back to the checkpoint's step and appends; a run that starts over where an earlier log
// is (-f 1) writes its rows beside it (log.csv.tmp) and renames them over it when its first
// checkpoint commits (trainer_log_publish), so until then the old rows stay with the old checkpoints.
void trainer_open_log(Trainer *tr) {
    const char *dir = tr->args.out_dir;
    char err[1024] = "";
    if (dir && tr->be->rank == 0) {
        char path[4096];
        fmt_path(path, sizeof path, "%s/log.csv", dir);
        struct stat st;
        int exists = lstat(path, &st) == 0;
        int append = tr->args.resume && exists;
        if (exists && !S_ISREG(st.st_mode))   // opening a FIFO to write would wait for a reader forever
            set_err(err, sizeof err, "flag -o: %s is not a regular file (it is %s)", path, file_kind(st.st_mode));
        else if (append && log_truncate(tr->output.files, path, tr->start_step, err, sizeof err) != 0) { /* err says why */ }
        else if (append && !(tr->output.log = fopen(path, "a")))
            set_err(err, sizeof err, "flag -o: cannot write %s (%s)", path, strerror(errno));
        else if (!append && exists) tr->output.log = output_begin(tr->output.files, path, tr->output.log_tmp, sizeof tr->output.log_tmp, err, sizeof err);
        else if (!append && !(tr->output.log = fopen(path, "w")))   // nothing to keep: the rows go straight in
            set_err(err, sizeof err, "flag -o: cannot write %s (%s)", path, strerror(errno));
        if (tr->output.log && !append) fputs(LOG_HEADER, tr->output.log);
    }
    agree_or_exit(tr->be, err);
}

// A checkpoint has committed: a log written beside the old one replaces it now (rank 0).
void trainer_log_publish(Trainer *tr) {
    char err[1024] = "";
    if (tr->be->rank == 0 && tr->output.log_tmp[0]) {
        char path[4096];
        fmt_path(path, sizeof path, "%s/log.csv", tr->args.out_dir);
        if (!dir_moved(tr->output.files) && publish_file(tr->output.files, tr->output.log, tr->output.log_tmp, path, err, sizeof err) == 0) tr->output.log_tmp[0] = '\0';
    }
    agree_or_exit(tr->be, err);
}


// The step's row of DIR/log.csv (rank 0, with -o): the columns trainer_open_log wrote.
void trainer_log_row(const Trainer *tr, const TrainLoop *loop, const StepResult *r) {
    if (!tr->output.log) return;
    const double ms = r->ms;
    fprintf(tr->output.log, "%d,%.9g,", r->step, r->loss);
    if (!isnan(r->val)) fprintf(tr->output.log, "%.9g", r->val);
    fprintf(tr->output.log, ",%.9g,%.9g,%.3f,%.1f,%.0f,%zu,%lld,%.3f,%.3f,%zu\n", r->lr, r->norm, ms, loop->tokens / (ms / 1000.0),
            r->comm, tr->z.resident.bytes, r->process_peak, ms - r->exposed_ms, r->exposed_ms, r->engine_peak);
    fflush(tr->output.log);
}


// Saves the training state after `step` completed steps (collective).
void trainer_checkpoint(Trainer *tr, int step) {
    const TrainArgs *a = &tr->args;
    trainer_check_folder(tr, "a checkpoint");
    CkptMeta m;
    memset(&m, 0, sizeof m);
    m.step = step;
    m.world = tr->z.world;          // the shard world (HSDP: the group size)
    m.ranks = tr->be->world;        // the data-parallel ranks
    m.run = *a;                     // meta.bin keeps the flags the table records
    m.align = tr->z.cfg.align;
    m.cfg = tr->cfg;
    m.A = tr->A;
    m.data_window = (long long)step * tr->A * tr->be->world;
    m.sample_rng = tr->sample.rng;
    double t0 = now_seconds();
    ckpt_save(tr->output.files, a->out_dir, &m, &tr->z, tr->output.last_ckpt);
    trainer_log_publish(tr);
    char size[32];
    format_bytes(size, sizeof size, 12.0 * (double)tr->z.totals.shard * tr->z.world);
    progress(tr, "checkpoint: %s/%s written (step %d, %d shard files, %s, %.2f s)\n", a->out_dir, tr->output.last_ckpt, step,
             tr->z.world, size, now_seconds() - t0);
}

// Writes DIR/model.bin, the trained model in llm.c's format (collective).
void trainer_export(Trainer *tr) {
    char path[4096];
    fmt_path(path, sizeof path, "%s/model.bin", tr->args.out_dir);
    trainer_check_folder(tr, "model.bin");
    double t0 = now_seconds();
    progress(tr, "export: writing %s (llm.c version %d, every rank its own slices)\n", path, tr->build->export_version);
    model_export(tr->output.files, path, &tr->cfg, &tr->z, tr->build->export_version);
    progress(tr, "export: done (%.2f s)\n", now_seconds() - t0);
}
