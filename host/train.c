// host/train.c: the training driver both trainers share: setup, the step loop (micro-steps, global
// norm, clipping, AdamW through the engine), validation, sampling, logging and the startup report.
// Compiled once and linked into both trainers; what differs by device comes through the backend
// table (zero3.h) and the TrainBuild a trainer's main passes in, which carries the compute table
// (GPT2Compute, passes.h).
//
// With -o DIR the run writes DIR/log.csv, a sharded checkpoint every -n steps and at the end, and the
// trained model as DIR/model.bin (llm.c format); -y 1 resumes from DIR/latest (checkpoint.h).
#include "train.h"
#include "checkpoint.h"
#include "clip_probe.h"
#include "cli.h"
#include "dataloader.h"
#include "export.h"
#include "fileio.h"
#include "passes.h"
#include "plan.h"
#include "predict.h"
#include "readfile.h"
#include "tokenizer.h"
#include "trace.h"
#include "../zero3_observe.h"
#include "zeropp.h"
#include <dirent.h>
#include <signal.h>
#include <sys/stat.h>
#include <unistd.h>

#define TOKENIZER_PATH "data/tinyshakespeare/gpt2_tokenizer.bin"   // optional: without it samples print token ids

struct Trainer {
    TrainArgs args;
    GPT2Config cfg;
    Zero3 z;
    const Zero3Backend *be;
    const GPT2Compute *compute;   // the trainer's math (build->compute)
    GPT2ComputeState *model;      // its activations and kernels
    GPT2Passes gpt2;              // the passes over the units (host/passes.c)
    DataLoader train, val;
    int A;                 // micro-steps per step
    int *inputs, *targets; // (B,T) host
    FILE *log;
    char log_tmp[4200];    // while log.csv still holds an earlier run's rows (-f 1): this run's, beside it
    Tokenizer tok;
    int have_tok;
    uint64_t sample_rng;
    int start_step;                   // 0, or the checkpoint's step when resuming
    char last_ckpt[CKPT_NAME_MAX];    // the newest checkpoint this run wrote or resumed from
    const TrainBuild *build;
    Trace *trace;                     // -tr
    Zero3Ledger ledger_theory;        // this run's collectives per step, in theory
    Zero3Ledger ledger_step;          // ... as the engine counted them in the last step
    double *unit_exposed_sum;         // per unit, seconds waited over the timed steps
    double norm_exposed_sum;          // the same for the norm (no unit)
    int timed_steps;
    RunPrediction predict;            // the time model's prediction for this run, and the measurement
    ClipProbe *clip_probe;            // -clip local: the step beside what global clipping would do
    int open_files;                   // with ZERO3_CHECK_STEPS: open files after the first step (-1: not yet)
};

// LR at step s (contract): warmup lr*(s+1)/W for s < W, then cosine from lr towards F*lr over the
// remaining S - W steps, as llm.c: progress (s - W) / (S - W) runs from 0 at s = W to (S-W-1)/(S-W)
// at the last step (so the last step's LR is just above F*lr). Same formula as dev/gpt2_reference.py.
float lr_at(const TrainArgs *a, int s) {
    if (s < a->warmup) return a->lr * (float)(s + 1) / (float)a->warmup;
    int decay_steps = a->steps - a->warmup;
    if (decay_steps <= 0) return a->lr;
    double progress = (double)(s - a->warmup) / (double)decay_steps;
    double cosine = 0.5 * (1.0 + cos(M_PI * progress));   // 1 -> 0
    return (float)(a->lr * (a->final_frac + (1.0 - a->final_frac) * cosine));
}

static void format_bytes(char *buf, size_t n, double bytes) {
    const char *unit[] = {"B", "KiB", "MiB", "GiB", "TiB"};
    int i = 0;
    while (bytes >= 1024.0 && i < 4) { bytes /= 1024.0; i++; }
    snprintf(buf, n, "%.2f %s", bytes, unit[i]);
}

// ------------------------------------------------------------------------------------------------
// Setup

// Prints what a long phase is doing (rank 0), so a user watching a big model knows it is not stuck.
static void progress(const Trainer *tr, const char *fmt, ...) __attribute__((format(printf, 2, 3)));
static void progress(const Trainer *tr, const char *fmt, ...) {
    if (tr->be->rank != 0) return;
    va_list ap;
    va_start(ap, fmt);
    vprintf(fmt, ap);
    va_end(ap);
    fflush(stdout);
}

// Lays the model out in the engine and fills each rank's master slices: from the seed, or from an
// llm.c model file (each rank reads only its slices). When resuming, the checkpoint fills them
// instead (trainer_resume), so only the shape is taken from -e.
// -wrap: the granularity of the units; it and -t checked against the model once it is known, as
// the planner checks them (cli.h).
static void trainer_set_wrap(Trainer *tr) {
    args_check_model(&tr->args, &tr->cfg);
    tr->cfg.wrap = tr->args.wrap;
}

static void trainer_load_model(Trainer *tr) {
    const TrainArgs *a = &tr->args;
    Zero3 *z = &tr->z;
    // the model state is the first large allocation: out of memory names -e (alloc_phase_begin)
    const char *state_what = "the model state of -e %s (parameters, gradients, AdamW m and v; ZeRO stage %d)";
    if (a->init[0] == 'd' && gpt2_config_from_descriptor(a->init, &tr->cfg) == 0) {
        trainer_set_wrap(tr);
        gpt2_register_units(&tr->cfg, z);
        alloc_phase_begin(tr->be, state_what, a->init, a->stage);
        zero3_allocate(z);
        if (!a->resume) {
            progress(tr, "init: random GPT-2 %s, seed %llu\n", a->init, a->seed);
            gpt2_init_random(&tr->cfg, z, a->seed);
        }
        alloc_phase_end();
        return;
    }
    char why[128];
    FILE *f = open_regular_file(a->init, why, sizeof why);   // a FIFO or a folder is refused, never waited on
    if (!f) fatal("flag -e: cannot open model file %s (%s); or give a descriptor like d12", a->init, why);
    char err[512] = "";
    int elem_bytes;
    if (gpt2_read_header(f, a->init, &tr->cfg, &elem_bytes, err, sizeof err)) fatal("%s", err);
    trainer_set_wrap(tr);
    gpt2_register_units(&tr->cfg, z);
    alloc_phase_begin(tr->be, state_what, a->init, a->stage);
    zero3_allocate(z);
    if (!a->resume) {
        progress(tr, "init: loading %s (%s, each rank reads its own slices)\n", a->init, elem_bytes == 4 ? "fp32" : "bf16");
        char path[600];
        snprintf(path, sizeof path, "model file %s", a->init);
        if (gpt2_load_owned(&tr->cfg, z, f, a->init, elem_bytes)) set_err(err, sizeof err, "%s: read failed", path);
        else gpt2_check_finite_owned(&tr->cfg, z, path, err, sizeof err);   // NaN/Inf: each rank its own slices
    }
    fclose(f);
    alloc_phase_end();
    agree_or_exit(tr->be, err);
}

// -y 1: fills every rank's master, m and v from the checkpoint DIR/latest names (resharding when
// N or the stage changed) and continues its step counter, data position and sampling RNG.
static void trainer_resume(Trainer *tr) {
    const TrainArgs *a = &tr->args;
    CkptMeta m;
    double t0 = now_seconds();
    progress(tr, "resume: reading the checkpoint %s/latest names\n", a->out_dir);
    ckpt_load_latest(a->out_dir, &tr->cfg, &tr->z, &m, tr->last_ckpt);
    if (m.step > a->steps)
        fatal("flag -x: the checkpoint %s/%s is at step %d, past the %d steps asked for", a->out_dir, tr->last_ckpt, m.step, a->steps);
    tr->start_step = m.step;
    tr->sample_rng = m.sample_rng;
    progress(tr, "resume: %s/%s, step %d, written on N=%d at ZeRO stage %d%s (%.2f s)\n", a->out_dir, tr->last_ckpt,
             m.step, m.world, m.stage, (m.world != tr->z.world || m.stage != a->stage) ? ", resharded" : "",
             now_seconds() - t0);
    // what may legitimately change on resume, said out loud: a different batch moves the data order
    // (it follows the step index, docs/DESIGN.md), a different schedule changes the LR from here on
    if (tr->be->rank == 0) {
        if (m.tokens_per_step != a->tokens_per_step || m.B * m.T != a->B * a->T)
            fprintf(stderr, "warning: the checkpoint was written with %lld tokens/step (B=%d T=%d), this run uses %lld (B=%d T=%d): "
                    "the data order follows the step index, so the tokens differ from an uninterrupted run\n",
                    m.tokens_per_step, m.B, m.T, a->tokens_per_step, a->B, a->T);
        if (m.total_steps != a->steps || m.warmup != a->warmup || m.lr != a->lr || m.final_frac != a->final_frac ||
            m.weight_decay != a->weight_decay || m.grad_clip != a->grad_clip)
            fprintf(stderr, "warning: the checkpoint's schedule (-x %d -u %d -l %g -q %g -c %g -gc %g) differs from this run's "
                    "(-x %d -u %d -l %g -q %g -c %g -gc %g)\n", m.total_steps, m.warmup, m.lr, m.final_frac, m.weight_decay,
                    m.grad_clip, a->steps, a->warmup, a->lr, a->final_frac, a->weight_decay, a->grad_clip);
        if (m.seed != a->seed)
            fprintf(stderr, "warning: the checkpoint's seed %llu differs from -S %llu (the sampling RNG continues from the checkpoint)\n",
                    (unsigned long long)m.seed, a->seed);
    }
}

// Before every write into -o by name (collective): is -o still the folder this run started in? A
// folder moved away under a live run (and perhaps a new run's folder made under the old name) ends
// this run with one error line; it writes nothing more, so the files now at that path are untouched.
// Its log and checkpoints so far are in the moved folder: resume there with -o NEWPATH -y 1.
static void trainer_check_folder(const Trainer *tr, const char *writing) {
    char err[4096] = "";
    if (dir_moved())
        set_err(err, sizeof err, "flag -o: %s is no longer the folder this run started in (it was moved or replaced while the run "
                "went on): not writing %s there. This run's log and checkpoints are in the folder where it went "
                "(resume from there with -o NEWPATH -y 1); the files at %s are untouched", tr->args.out_dir, writing, tr->args.out_dir);
    agree_or_exit(tr->be, err);
}

static void trainer_log_publish(Trainer *tr);   // with the log, below

// Saves the training state after `step` completed steps (collective).
static void trainer_checkpoint(Trainer *tr, int step) {
    const TrainArgs *a = &tr->args;
    trainer_check_folder(tr, "a checkpoint");
    CkptMeta m;
    memset(&m, 0, sizeof m);
    m.step = step;
    m.world = tr->z.world;          // the shard world (HSDP: the group size)
    m.ranks = tr->be->world;        // the data-parallel ranks
    m.stage = a->stage;
    m.align = tr->z.cfg.align;
    m.cfg = tr->cfg;
    m.B = a->B; m.T = a->T; m.A = tr->A;
    m.tokens_per_step = a->tokens_per_step;
    m.data_window = (long long)step * tr->A * tr->be->world;
    m.sample_rng = tr->sample_rng;
    m.seed = a->seed;
    m.total_steps = a->steps; m.warmup = a->warmup;
    m.lr = a->lr; m.final_frac = a->final_frac; m.weight_decay = a->weight_decay; m.grad_clip = a->grad_clip;
    double t0 = now_seconds();
    ckpt_save(a->out_dir, &m, &tr->z, tr->last_ckpt);
    trainer_log_publish(tr);
    char size[32];
    format_bytes(size, sizeof size, 12.0 * (double)tr->z.totals.shard * tr->z.world);
    progress(tr, "checkpoint: %s/%s written (step %d, %d shard files, %s, %.2f s)\n", a->out_dir, tr->last_ckpt, step,
             tr->z.world, size, now_seconds() - t0);
}

// Writes DIR/model.bin, the trained model in llm.c's format (collective).
static void trainer_export(Trainer *tr) {
    char path[4096];
    fmt_path(path, sizeof path, "%s/model.bin", tr->args.out_dir);
    trainer_check_folder(tr, "model.bin");
    double t0 = now_seconds();
    progress(tr, "export: writing %s (llm.c version %d, every rank its own slices)\n", path, tr->build->export_version);
    model_export(path, &tr->cfg, &tr->z, tr->build->export_version);
    progress(tr, "export: done (%.2f s)\n", now_seconds() - t0);
}

// The token files: the training split must hold one batch of -b x -t (B*T+1 tokens); the validation
// split is read only when the run validates (-v > 0), and one shorter than a batch is served as one
// batch of rows spread over it (dataloader.h), as long as it holds one sequence (T+1 tokens).
static void trainer_open_data(Trainer *tr) {
    const TrainArgs *a = &tr->args;
    const int V = tr->cfg.vocab_size;
    char err[1024];
    int rc = loader_open(&tr->train, a->train_path, a->B, a->T, V, err, sizeof err);
    if (rc == LOADER_SHORT)
        fatal("flag -b: a batch of -b %d x -t %d = %lld tokens needs %lld tokens of training data (the last target is "
              "one further), and the training split %s (-i) holds %zu: lower -b or -t, or give a longer -i", a->B, a->T,
              (long long)a->B * a->T, (long long)a->B * a->T + 1, a->train_path, tr->train.ntok);
    if (rc) fatal("flag -i: %s", err);
    if (a->val_every <= 0) return;   // -v 0: the validation file is never opened
    rc = loader_open(&tr->val, a->val_path, a->B, a->T, V, err, sizeof err);
    const size_t val_tokens = tr->val.ntok;   // loader_spread closes the loader when it fails
    if (rc == LOADER_SHORT && loader_spread(&tr->val, err, sizeof err))
        fatal("flag -t: -t %d needs %d tokens for one validation sequence, and the validation split %s (-j) holds %zu: "
              "lower -t, give a longer -j, or -v 0 to train without validation", a->T, a->T + 1, a->val_path, val_tokens);
    if (rc && rc != LOADER_SHORT) fatal("flag -j: %s; validation (every -v %d steps) reads it, -v 0 turns it off", err, a->val_every);
}

static void trainer_setup(Trainer *tr, const Zero3Backend *be) {
    TrainArgs *a = &tr->args;
    tr->be = be;
    // the flags against the number of ranks, as the planner checks them (cli.h); A micro-steps per step
    tr->A = args_check_world(a, be->world);
    const TrainBuild *b = tr->build;
    Zero3Config zc = {.stage = a->stage, .prefetch_depth = a->prefetch_depth, .align = b->align,
                      .param_type = b->param_type, .grad_type = b->grad_type,
                      .persist_threshold = (size_t)a->persist_threshold,
                      .keep_params_until_backward = !a->reshard_after_forward, .shard_group = a->shard_group,
                      .quant_weights = a->quant_weights, .hp_group = a->hp_group, .quant_grads = a->quant_grads,
                      .observer = &ZERO3_OBSERVER};
    zero3_init(&tr->z, be, &zc);
    trainer_load_model(tr);

    trainer_open_data(tr);
    char err[512];
    // the tokenizer is optional: without it samples print token ids
    tr->have_tok = (tokenizer_init(&tr->tok, TOKENIZER_PATH, err, sizeof err) == 0);

    alloc_phase_begin(be, "the batch of -b %d -t %d", a->B, a->T);
    tr->inputs = (int *)xmalloc((size_t)a->B * a->T * sizeof(int));
    tr->targets = (int *)xmalloc((size_t)a->B * a->T * sizeof(int));
    alloc_phase_end();
    tr->sample_rng = a->seed ^ 0x5DEECE66Dull;
    if (a->resume) trainer_resume(tr);
}

static void trainer_publish(Trainer *tr) {
    zero3_publish_params(&tr->z);
    alloc_phase_begin(tr->be, "the activations of -b %d -t %d for -e %s", tr->args.B, tr->args.T, tr->args.init);
    tr->model = tr->compute->create(&tr->cfg, tr->args.B, tr->args.T, tr->args.recompute, tr->be->ctx);
    alloc_phase_end();
    // what a later allocation is for (the engine's pool fills during the first step)
    alloc_phase_begin(NULL, "the gathered units and gradient buffers of -e %s at ZeRO stage %d (-pd %d), in the first step",
                      tr->args.init, tr->args.stage, tr->args.prefetch_depth);
    tr->gpt2.cfg = tr->cfg;
    tr->gpt2.z = &tr->z;
    tr->gpt2.compute = tr->compute;
    tr->gpt2.state = tr->model;
    tr->gpt2.recompute = tr->args.recompute;
}

// The variants of this run (README "Variants"), and this exact configuration on paper: model state
// from every unit's own layout, bytes per step with A micro-steps from the run's collective ledger
// (and, under HSDP, the part that crosses replica groups), activations with and without recompute.
// The measured figures are in the step line and log.csv; tests/variants.py holds them to these.
static void trainer_report_variants(const Trainer *tr) {
    const TrainArgs *a = &tr->args;
    const Zero3 *z = &tr->z;
    char buf[4][32];
    printf("| variants HSDP %s, reshard after forward %s, recompute %s, persistence threshold %lld (%d units, "
           "%zu params replicated), clip %s\n", a->shard_group ? "on" : "off", a->reshard_after_forward ? "yes" : "no (-ra 0)",
           a->recompute == 0 ? "off" : a->recompute == 1 ? "in the backward's gather" : "with its own gather (-rc 2)",
           a->persist_threshold, zero3_persistent_units(z), z->totals.persistent_numel, a->clip_local ? "LOCAL (the pitfall)" : "global");
    if (z->replicas > 1)
        printf("|   HSDP: %d shard groups of %d ranks; gathers and reduce-scatters inside a group, the gradient shards "
               "all-reduced across groups\n", z->replicas, z->world);
    // the run's collective ledger in theory (trainer_create): all of it, and the part across groups
    double comm = zero3_ledger_bytes(&tr->ledger_theory), inter = tr->ledger_theory.row[ZERO3_COLL_REPLICA_REDUCE].bytes;
    format_bytes(buf[0], sizeof buf[0], zero3_theory_run_state_bytes(z));
    format_bytes(buf[1], sizeof buf[1], comm);
    format_bytes(buf[2], sizeof buf[2], comm - inter);
    format_bytes(buf[3], sizeof buf[3], inter);
    printf("|   this run in theory: model state %s per rank; sent per step %s (A=%d micro-steps) = %s inside "
           "groups + %s across\n", buf[0], buf[1], tr->A, buf[2], buf[3]);
    printf("|   theory bytes: state %.0f comm %.0f inter %.0f\n", zero3_theory_run_state_bytes(z), comm, inter);
    zeropp_report(z, &tr->ledger_theory);
    format_bytes(buf[0], sizeof buf[0], (double)tr->compute->activation_bytes(&tr->cfg, a->B, a->T, 0));
    format_bytes(buf[1], sizeof buf[1], (double)tr->compute->activation_bytes(&tr->cfg, a->B, a->T, 1));
    printf("|   activations per rank: %s without recompute, %s with (-rc 1/2)%s\n", buf[0], buf[1],
           a->recompute ? "   <- this run" : "");
}

// The data lines: both splits, or the training split alone under -v 0; a validation split shorter
// than one batch says how it is read.
static void report_data(const Trainer *tr) {
    const TrainArgs *a = &tr->args;
    const DataLoader *val = &tr->val;
    printf("| data     train %s (%zu tokens), ", a->train_path, tr->train.ntok);
    if (a->val_every <= 0) printf("val off (-v 0: %s is not read)\n", a->val_path);
    else printf("val %s (%zu tokens)\n", a->val_path, val->ntok);
    if (a->val_every > 0 && val->spread)
        printf("| val      %zu tokens, fewer than one batch (B*T+1 = %lld): each validation batch is B=%d rows of T=%d "
               "spread evenly over the split, its %zu targets in %lld predictions\n", val->ntok, (long long)a->B * a->T + 1,
               a->B, a->T, val->ntok - 1, (long long)a->B * a->T);
}

static void trainer_report(Trainer *tr) {
    if (tr->be->rank != 0) return;
    const TrainArgs *a = &tr->args;
    const GPT2Config *c = &tr->cfg;
    const Zero3 *z = &tr->z;
    int N = tr->be->world;
    char dev[256];
    tr->compute->describe(tr->model, dev, sizeof dev);
    printf("+-------------------------------------------------------------------------\n");
    printf("| GPT-2 ZeRO trainer   %s\n", dev);
    printf("| model    %s: L=%d C=%d NH=%d V=%d (Vp %d) maxT=%d, %zu parameters\n", a->init, c->num_layers,
           c->channels, c->num_heads, c->vocab_size, c->padded_vocab_size, c->max_seq_len, z->totals.numel);
    printf("| ranks    N=%d, ZeRO stage %d%s, prefetch depth %d, %d units\n", N, a->stage,
           a->stage == 0 ? " (DDP)" : "", a->prefetch_depth, z->nunits);
    printf("| batch    B=%d T=%d, %lld tokens/step = %d ranks x %d micro-steps x %d x %d\n", a->B, a->T,
           a->tokens_per_step, N, tr->A, a->B, a->T);
    printf("| optim    AdamW lr %g warmup %d final %g wd %g clip %g, %d steps\n", a->lr, a->warmup,
           a->final_frac, a->weight_decay, a->grad_clip, a->steps);
    report_data(tr);
    char links[512];
    predict_describe_links(&tr->predict, N, links, sizeof links);
    printf("| links    %s\n", links);
    printf("+-------------------------------------------------------------------------\n");
    printf("| model-state memory per rank (params + grads + optimizer), %zu params, N=%d\n", z->totals.numel, N);
    printf("|   stage        theory        comm/step (theory, A=%d micro-step%s)\n", tr->A, tr->A > 1 ? "s" : "");
    const char *names[4] = {"0 DDP ", "1     ", "2     ", "3     "};
    int *fwd = (int *)xmalloc((size_t)z->nunits * sizeof(int)), *bwd = (int *)xmalloc((size_t)z->nunits * sizeof(int));
    gpt2_gathers_per_pass(c, 0, 0, fwd, bwd);   // the plain stages of the table
    for (int s = 0; s <= 3; s++) {
        char mem[32], comm[32];
        Zero3Ledger l;
        zero3_theory_ledger(z, s, tr->A, z->cfg.param_type, z->cfg.grad_type, fwd, bwd, &l);
        format_bytes(mem, sizeof mem, zero3_theory_state_bytes(s, (double)z->totals.numel, N, z->cfg.param_type, z->cfg.grad_type));
        format_bytes(comm, sizeof comm, zero3_ledger_bytes(&l));
        printf("|   %s  %12s  %12s%s\n", names[s], mem, comm, s == a->stage ? "   <- this run" : "");
    }
    free(fwd);
    free(bwd);
    char res[32];
    format_bytes(res, sizeof res, (double)z->resident.bytes);
    printf("|   this run holds %s of model state (padded units) + gathered units/grad buffers (see peak)\n", res);
    trainer_report_variants(tr);
    printf("|   (comm: bytes each rank sends, ring model, with the padding; grads SHARDED reduce-scatter at every\n"
           "|    micro-step and stage 3 gathers at every one, stages 0-1 reduce once per step; -plan N for other N)\n");
    printf("+-------------------------------------------------------------------------\n");
    printf("| collective ledger per step, this run (theory: count, bytes each rank sends)\n");
    for (int k = 0; k < ZERO3_COLL_KINDS; k++) {
        const Zero3LedgerRow *row = &tr->ledger_theory.row[k];
        if (row->count == 0) continue;
        char b[32];
        format_bytes(b, sizeof b, row->bytes);
        printf("|   %-15s %6.0f  %12s  (%.0f bytes)\n", ZERO3_COLL_NAMES[k], row->count, b, row->bytes);
    }
    printf("+-------------------------------------------------------------------------\n");
    fflush(stdout);
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
static void trainer_check_out_files(const char *dir, char *err, size_t n) {
    const char *names[] = {"log.csv", "model.bin", "latest"};
    for (int i = 0; i < 3 && !err[0]; i++) {
        char path[4200];
        fmt_path(path, sizeof path, "%s/%s", dir, names[i]);
        if (strcmp(names[i], "latest") != 0 || access(path, F_OK) != 0)   // a bad `latest` is out_dir_earlier_run's to name
            output_check(path, "flag -o", err, n);
    }
}

// The run's inputs, by identity, for the outputs to be checked against (fileio.h's rule).
static void trainer_note_inputs(const TrainArgs *a) {
    GPT2Config shape;
    if (!(a->init[0] == 'd' && gpt2_config_from_descriptor(a->init, &shape) == 0)) input_note(a->init, "the model file of -e");
    input_note(a->train_path, "the train tokens of -i");
    input_note(a->val_path, "the val tokens of -j");
    input_note(TOKENIZER_PATH, "the tokenizer");
}

// -o: creates the output directory (and its parents) and checks that it takes files, before the
// long setup, so a bad -o fails at once on every rank. Then rank 0 takes the folder's run lock for
// the life of the run (one run per folder), and a fresh run refuses a folder that holds an earlier
// run's output unless -f 1 says to start over: nothing this run did not write is replaced without
// being asked. -y 1 on a folder that does not exist creates nothing.
static void trainer_prepare_out_dir(const Trainer *tr) {
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
        int lock = err[0] ? 0 : dir_lock(dir, msg, sizeof msg);
        if (lock == 1)
            set_err(err, sizeof err, "flag -o: %s is in use by another run (%s): two runs in one folder would overwrite "
                    "each other's log and checkpoints; wait for it to end, or give another -o", dir, msg);
        else if (lock == 2) fprintf(stderr, "warning: flag -o: %s; nothing stops a second run from using %s at the same time\n", msg, dir);
        else if (lock < 0) set_err(err, sizeof err, "flag -o: %s", msg);
        if (!err[0]) trainer_check_out_files(dir, err, sizeof err);
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
    if (dir && dir_hold(dir) != 0) set_err(err, sizeof err, "flag -o: cannot open %s (%s)", dir, strerror(errno));
    agree_or_exit(tr->be, err);
}

// When resuming, log.csv keeps its header and the rows of the steps before the checkpoint; the rows
// of steps the resumed run will redo are dropped (the file is rewritten beside and renamed; the
// temp file is the one a -f 1 run killed before its first checkpoint left, so that goes too).
static int log_truncate(const char *path, int keep_below, char *err, size_t errlen) {
    FILE *in = open_regular_file(path, NULL, 0);
    if (!in) return 0;   // no log yet: trainer_open_log starts one
    char tmp[4200];
    FILE *out = output_begin(path, tmp, sizeof tmp, err, errlen);
    if (!out) { fclose(in); return -1; }
    char line[4096];
    int first = 1;
    while (fgets(line, sizeof line, in)) {
        long long step;
        char *end;
        errno = 0;
        step = strtoll(line, &end, 10);
        int is_row = (end != line && *end == ',' && errno == 0);
        if (first || (is_row && step >= 0 && step < keep_below)) fputs(line, out);
        first = 0;
    }
    fclose(in);
    return commit_file(out, tmp, path, err, errlen);
}

// DIR/log.csv, one log per history: it always matches the checkpoint `latest` names. A resumed run
// cuts it back to the checkpoint's step and appends; a run that starts over where an earlier log
// is (-f 1) writes its rows beside it (log.csv.tmp) and renames them over it when its first
// checkpoint commits (trainer_log_publish), so until then the old rows stay with the old checkpoints.
static void trainer_open_log(Trainer *tr) {
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
        else if (append && log_truncate(path, tr->start_step, err, sizeof err) != 0) { /* err says why */ }
        else if (append && !(tr->log = fopen(path, "a")))
            set_err(err, sizeof err, "flag -o: cannot write %s (%s)", path, strerror(errno));
        else if (!append && exists) tr->log = output_begin(path, tr->log_tmp, sizeof tr->log_tmp, err, sizeof err);
        else if (!append && !(tr->log = fopen(path, "w")))   // nothing to keep: the rows go straight in
            set_err(err, sizeof err, "flag -o: cannot write %s (%s)", path, strerror(errno));
        if (tr->log && !append)
            fprintf(tr->log, "step,train_loss,val_loss,lr,grad_norm,ms,tokens_per_s,comm_bytes,mem_states_bytes,mem_peak_bytes,"
                    "compute_ms,exposed_comm_ms\n");
    }
    agree_or_exit(tr->be, err);
}

// A checkpoint has committed: a log written beside the old one replaces it now (rank 0).
static void trainer_log_publish(Trainer *tr) {
    char err[1024] = "";
    if (tr->be->rank == 0 && tr->log_tmp[0]) {
        char path[4096];
        fmt_path(path, sizeof path, "%s/log.csv", tr->args.out_dir);
        if (!dir_moved() && publish_file(tr->log, tr->log_tmp, path, err, sizeof err) == 0) tr->log_tmp[0] = '\0';
    }
    agree_or_exit(tr->be, err);
}

// ------------------------------------------------------------------------------------------------
// Evaluation and sampling

static int trainer_stop_requested(const Trainer *tr);   // with the preemption, below

// Validation: batch j on rank r reads window j*N + r of the val file; the loss is the mean over all
// m*N windows (contract). A stop signal ends it at the next batch on every rank (NaN: the step's
// log row has no val_loss); validation changes no state, so the resumed run is unaffected.
static float trainer_validate(Trainer *tr) {
    int N = tr->be->world, r = tr->be->rank;
    double sum = 0.0;
    for (int j = 0; j < tr->args.val_batches; j++) {
        if (trainer_stop_requested(tr)) {
            if (r == 0) printf("validation cut short after %d of %d batches: stop requested\n", j, tr->args.val_batches);
            return NAN;
        }
        loader_window(&tr->val, (long long)j * N + r, tr->inputs, tr->targets);
        zero3_micro_begin(&tr->z, 0, 1, ZERO3_PASS_FORWARD);
        sum += gpt2_pass_forward(&tr->gpt2, tr->inputs, tr->targets, 0);
    }
    return (float)(tr->be->all_reduce_scalar(tr->be->ctx, sum) / ((double)tr->args.val_batches * N));
}

// A sample cut short by a stop signal: the RNG draws the tokens it did not sample (one draw each),
// so the checkpoint's RNG state is the one an uninterrupted run has after the whole sample.
static void trainer_sample_cut(Trainer *tr, int done) {
    for (int g = done; g < tr->args.gen_tokens; g++) random_u32(&tr->sample_rng);
    if (tr->be->rank == 0) printf("\n---- sample cut short after %d of %d tokens: stop requested\n", done, tr->args.gen_tokens);
}

// Samples gen_tokens tokens after an EOT. Every rank runs the same forward passes (under ZeRO-3 no
// rank holds the whole model) with the same RNG, so they all pick the same tokens; rank 0 prints.
// A stop signal ends it at the next token on every rank.
static void trainer_sample(Trainer *tr) {
    int B = tr->args.B, T = tr->args.T, V = tr->cfg.vocab_size;
    float *probs = (float *)xmalloc((size_t)V * sizeof(float));
    for (int i = 0; i < B * T; i++) tr->inputs[i] = 50256 % V;
    if (tr->be->rank == 0) { printf("---- sample\n"); fflush(stdout); }   // seen at once, before the first token
    int pos = 1;   // tokens in the context window (the first is the EOT)
    for (int g = 0; g < tr->args.gen_tokens; g++) {
        if (trainer_stop_requested(tr)) { trainer_sample_cut(tr, g); free(probs); return; }
        zero3_micro_begin(&tr->z, 0, 1, ZERO3_PASS_FORWARD);
        gpt2_pass_forward(&tr->gpt2, tr->inputs, NULL, 0);
        tr->compute->probs(tr->model, 0, pos - 1, probs);
        float coin = random_f32(&tr->sample_rng), cdf = 0.0f;
        int next = V - 1;
        for (int i = 0; i < V; i++) { cdf += probs[i]; if (coin < cdf) { next = i; break; } }
        // every rank must have picked the same token (same weights, same RNG): one scalar says so
        char err[128] = "";
        if (tr->be->all_reduce_scalar(tr->be->ctx, next) != (double)next * tr->be->world)
            set_err(err, sizeof err, "sampling: the ranks picked different tokens (this rank %d)", next);
        agree_or_exit(tr->be, err);
        if (tr->be->rank == 0) {
            if (tr->have_tok) tokenizer_print(&tr->tok, (uint32_t)next, stdout);
            else printf("%d ", next);
            fflush(stdout);
        }
        if (pos < T) tr->inputs[pos++] = next;
        else {   // slide the window
            memmove(tr->inputs, tr->inputs + 1, (T - 1) * sizeof(int));
            tr->inputs[T - 1] = next;
        }
    }
    if (tr->be->rank == 0) printf("\n----\n");
    free(probs);
}

// ------------------------------------------------------------------------------------------------
// One optimizer step: A micro-steps of forward + backward (the engine gathers, releases and reduces
// per unit), then the global norm, the clip coefficient and AdamW on this rank's shard.

// This rank's micro-batch k of step `step` into tr->inputs, tr->targets. Data order (contract):
// rank r at step s, micro-step k reads window (s*A + k)*N + r.
void trainer_load_batch(Trainer *tr, int step, int k) {
    const int N = tr->be->world, r = tr->be->rank, A = tr->A;
    loader_window(&tr->train, ((long long)step * A + k) * N + r, tr->inputs, tr->targets);
}

// The clip coefficient, as torch.nn.utils.clip_grad_norm_: G/(norm+1e-6) when that is below 1,
// else 1 (also when clipping is off, G = 0).
static float clip_coefficient(float max_norm, double norm) {
    if (max_norm <= 0.0f) return 1.0f;
    double coef = max_norm / (norm + 1e-6);
    return coef < 1.0 ? (float)coef : 1.0f;
}

// The micro-steps of step `step`, their gradients accumulated in the engine. With A > 1 every rank
// asks before each micro-step after the first whether a stop signal came (one scalar all-reduce:
// all ranks answer alike), so a long step ends within one micro-step. Returns the micro-steps run.
static int trainer_accumulate(Trainer *tr, int step) {
    const TrainArgs *a = &tr->args;
    const int N = tr->be->world, A = tr->A;
    const float dloss = 1.0f / ((float)a->B * a->T * A * N);   // the step loss is the mean over all tokens
    for (int k = 0; k < A; k++) {
        if (k > 0 && trainer_stop_requested(tr)) return k;
        trainer_load_batch(tr, step, k);
        zero3_micro_begin(&tr->z, k, A, ZERO3_PASS_TRAIN);
        gpt2_pass_forward(&tr->gpt2, tr->inputs, tr->targets, GPT2_TRAIN_DEFER_LOSS);
        gpt2_pass_backward(&tr->gpt2, dloss);
    }
    return A;
}

int trainer_step(Trainer *tr, int step, float lr, float *loss, float *norm, float *clip) {
    const TrainArgs *a = &tr->args;
    const int N = tr->be->world, A = tr->A;
    zero3_step_begin(&tr->z);
    int done = trainer_accumulate(tr, step);
    double loss_sum = gpt2_pass_take_loss(&tr->gpt2);   // the micro-steps' mean losses, read once
    if (done < A) {   // given up: the partial losses and gradients are dropped, the model is unchanged
        zero3_step_abandon(&tr->z);
        *loss = *norm = NAN;
        *clip = 1.0f;
        return done;
    }
    // -clip local: each rank's own shard's norm, so each rank clips by a different coefficient
    double gnorm = a->clip_local ? zero3_local_grad_norm(&tr->z) : zero3_grad_norm(&tr->z);
    *clip = clip_coefficient(a->grad_clip, gnorm);
    float global_clip = tr->clip_probe ? clip_coefficient(a->grad_clip, clip_probe_before(tr->clip_probe, &tr->z, gnorm)) : 0;
    zero3_optimizer_step(&tr->z, lr, 0.9f, 0.95f, 1e-8f, a->weight_decay, *clip, step + 1);
    if (tr->clip_probe) clip_probe_after(tr->clip_probe, &tr->z, *clip, global_clip, 0.9f, 0.95f, 1e-8f, step + 1);
    zero3_check_idle(&tr->z);
    *norm = (float)gnorm;
    *loss = (float)(tr->be->all_reduce_scalar(tr->be->ctx, loss_sum) / ((double)A * N));
    return A;
}

// ------------------------------------------------------------------------------------------------
// Preemption: SIGTERM (what Slurm and other schedulers send before they preempt a job) or SIGINT
// asks the run to stop. The handler only records the signal (async-signal-safe: a flag and a
// write); after each step (and between micro-steps, validation batches and sampled tokens) every
// rank adds its flag in one scalar all-reduce, so all ranks stop at the same point, write a
// checkpoint of the last whole step (with -o) and exit non-zero. A second signal ends the
// process at once, by the signal's default action.
static volatile sig_atomic_t g_stop_signal = 0;

static void on_stop_signal(int sig) {
    if (g_stop_signal) {   // the second one: stop now, leaving no temp file behind (unlink only: async-signal-safe)
        output_remove_pending();
        signal(sig, SIG_DFL);
        raise(sig);
        return;
    }
    g_stop_signal = sig;
    static const char msg[] = "\nstop requested: stopping at the next step, micro-step, validation batch or sampled "
                              "token, then a checkpoint (with -o) and exit; a second signal stops at once\n";
    if (g_proc.rank == 0) { ssize_t k = write(STDERR_FILENO, msg, sizeof msg - 1); (void)k; }
}

static void install_stop_handlers(void) {
    struct sigaction sa;
    memset(&sa, 0, sizeof sa);
    sa.sa_handler = on_stop_signal;
    sigemptyset(&sa.sa_mask);
    sa.sa_flags = SA_RESTART;
    sigaction(SIGTERM, &sa, NULL);
    sigaction(SIGINT, &sa, NULL);
    sigaction(SIGUSR1, &sa, NULL);   // mpirun forwards SIGUSR1 to every rank (SIGTERM it acts on itself)
}

// Collective: did any rank get a stop signal? (One scalar all-reduce: the long loops ask it at every
// batch or token, so every rank leaves them at the same point.)
static int trainer_stop_requested(const Trainer *tr) {
    return tr->be->all_reduce_scalar(tr->be->ctx, g_stop_signal ? 1.0 : 0.0) > 0.0;
}

// Collective: did any rank get a stop signal? Then the exit status every rank uses, 128 + the
// highest signal number any rank got (all ranks agree on it), else 0.
static int trainer_stop_status(const Trainer *tr) {
    const Zero3Backend *be = tr->be;
    if (!trainer_stop_requested(tr)) return 0;
    int sig = SIGINT;
    const int sigs[] = {SIGTERM, SIGUSR1};
    for (int i = 0; i < 2; i++)
        if (be->all_reduce_scalar(be->ctx, g_stop_signal == sigs[i] ? 1.0 : 0.0) > 0.0 && sigs[i] > sig) sig = sigs[i];
    return 128 + sig;
}

static const char *signal_name(int sig) {
    return sig == SIGTERM ? "SIGTERM" : sig == SIGUSR1 ? "SIGUSR1" : sig == SIGINT ? "SIGINT" : "a signal";
}

// The step's timeline: exposed communication per unit for the summary, the trace.
// The model FLOPs of one trained token, the numerator of MFU (recomputation is not counted: MFU, not
// HFU). The linear layers: 6 per parameter (2 forward, 4 backward; the tied LM head is wte, counted
// once, and the embeddings' few FLOPs are counted as if they were matmuls, as everyone does).
// Attention's two matmuls per layer, q k^T and p v, each 2*T*C per token over the full T x T matrix,
// forward and backward (x3): 12*L*T*C, halved because the mask makes half of it zeros that a fused
// kernel skips: 6*L*T*C. (PaLM's appendix counts 12*L*T*C; llm.c counts 6*L*T*C, as here.) For
// GPT-2 124M at T=1024: 6*124.4M + 6*12*1024*768 = 746M + 56.6M per token (attention 7%).
static double model_flops_per_token(const Trainer *tr) {
    const GPT2Config *c = &tr->cfg;
    return 6.0 * (double)tr->z.totals.numel + 6.0 * c->num_layers * (double)tr->args.T * c->channels;
}

static double trainer_timeline(Trainer *tr, int step, double t0, double t1) {
    int n;
    const Zero3Event *ev = zero3_timeline_read(&tr->z, &n);
    if (!ev) return 0.0;
    if (step > tr->start_step) {   // as for ms/step, the first step (recording, warming) is left out
        double units = 0.0;
        for (int u = 0; u < tr->z.nunits; u++) { tr->unit_exposed_sum[u] += tr->z.observe.unit_exposed_s[u]; units += tr->z.observe.unit_exposed_s[u]; }
        tr->norm_exposed_sum += tr->z.observe.stats.exposed_s - units;
        tr->timed_steps++;
    }
    trace_step(tr->trace, &tr->z, ev, n, step, t0, t1);
    predict_step(&tr->predict, step, ev, n, t0, t1, tr->z.observe.stats.exposed_s);
    return tr->z.observe.stats.exposed_s * 1e3;
}

// One row of the ledger as a reader says it: "6 collectives, 48,898,560 bytes in all" (the bytes are
// the row's total, not each collective's).
static void format_ledger_row(char *buf, size_t n, const Zero3LedgerRow *row) {
    char digits[32], grouped[48];
    snprintf(digits, sizeof digits, "%.0f", row->bytes);
    int len = (int)strlen(digits), j = 0;
    for (int i = 0; i < len; i++) {
        if (i > 0 && (len - i) % 3 == 0) grouped[j++] = ',';
        grouped[j++] = digits[i];
    }
    grouped[j] = 0;
    snprintf(buf, n, "%3.0f %-12s %15s bytes in all", row->count, row->count == 1 ? "collective," : "collectives,", grouped);
}

// Fragmentation, the fourth kind of memory beside model state, activations and transient buffers:
// what the engine's buffer pool reserves beyond the most bytes the last step held in it at once
// (a released buffer is kept for the next request it fits, so a smaller one can sit in a bigger one).
static void trainer_print_pool(const Trainer *tr) {
    const Zero3 *z = &tr->z;
    size_t reserved = z->pool.bytes, held = z->observe.stats.transient_peak;
    char r[32], h[32], f[32];
    format_bytes(r, sizeof r, (double)reserved);
    format_bytes(h, sizeof h, (double)held);
    format_bytes(f, sizeof f, reserved > held ? (double)(reserved - held) : 0.0);
    printf("buffer pool: %d buffers reserve %s; the last step held at most %s in them at once; fragmentation %s (%.1f%%)\n",
           z->pool.count, r, h, f, reserved > held ? 100.0 * (double)(reserved - held) / (double)reserved : 0.0);
}

// At the end (rank 0): the last step's collectives against the theory, where the compute side
// waited, unit by unit, and the compute's own line (run_note).
static void trainer_summary(const Trainer *tr) {
    if (tr->be->rank != 0) return;
    int match = 1;
    printf("collective ledger, last step (rank 0): measured | theory\n");
    for (int k = 0; k < ZERO3_COLL_KINDS; k++) {
        const Zero3LedgerRow *m = &tr->ledger_step.row[k], *t = &tr->ledger_theory.row[k];
        if (m->count == 0 && t->count == 0) continue;
        int same = m->count == t->count && fabs(m->bytes - t->bytes) <= 1e-9 * (t->bytes + 1.0);
        match &= same;
        char measured[96], theory[96];
        format_ledger_row(measured, sizeof measured, m);
        format_ledger_row(theory, sizeof theory, t);
        printf("  %-15s %s | %s  %s\n", ZERO3_COLL_NAMES[k], measured, theory, same ? "ok" : "DIFFERENT");
    }
    printf("ledger: %s\n", match ? "measured = theory" : "measured != theory");
    trainer_print_pool(tr);
    if (tr->z.step.checked_steps > 0)   // ZERO3_CHECK_STEPS=1
        printf("step-end invariant held at %d steps (%d pool buffers, %d open files)\n", tr->z.step.checked_steps,
               tr->z.pool.count, tr->open_files);
    if (tr->timed_steps > 0) {
        printf("exposed communication by unit (rank 0, mean ms per step over %d steps):", tr->timed_steps);
        for (int u = 0; u < tr->z.nunits; u++) {
            if (u % 8 == 0) printf("\n ");
            printf(" %s %.2f", tr->z.units[u].name, 1e3 * tr->unit_exposed_sum[u] / tr->timed_steps);
        }
        printf("\n  norm %.2f\n", 1e3 * tr->norm_exposed_sum / tr->timed_steps);
    }
    char note[256] = "";
    tr->compute->run_note(tr->model, note, sizeof note);   // what the device has to say (GPU: epilogue fallbacks)
    if (note[0]) printf("%s\n", note);
    fflush(stdout);
    predict_report(&tr->predict);
}

void trainer_destroy(Trainer *tr) {
    trace_close(tr->trace, NULL, 0);   // rank 0 joins the ranks' parts into the -tr file
    tr->compute->destroy(tr->model);
    zero3_free(&tr->z);
    loader_close(&tr->train);
    loader_close(&tr->val);
    if (tr->have_tok) tokenizer_free(&tr->tok);
    free(tr->inputs);
    free(tr->targets);
    if (tr->log) fclose(tr->log);
    free(tr->unit_exposed_sum);
    clip_probe_destroy(tr->clip_probe);
    free(tr);
}

// Everything before the first step: flags, the output folder, model, data, resume, the params
// published where the stage needs them. NULL when -h asked for the usage (printed).
// The trainer for flags already parsed (train_main parses them once, to see -plan first).
static Trainer *trainer_start(const TrainArgs *args, const Zero3Backend *be, const TrainBuild *build) {
    Trainer *tr = (Trainer *)xcalloc(1, sizeof(Trainer));
    tr->build = build;
    tr->compute = build->compute;
    tr->args = *args;
    tr->be = be;
    trainer_note_inputs(&tr->args);
    trainer_prepare_out_dir(tr);
    tr->trace = trace_open(tr->args.trace_path, be);   // an unwritable -tr fails before the long setup
    trainer_setup(tr, be);
    predict_links(&tr->predict, &tr->args, be);   // the engine's groups are made: the links can be set
    trainer_publish(tr);
    // the collectives of one step on paper, for the report and the end-of-run comparison
    int *fwd = (int *)xmalloc((size_t)tr->z.nunits * sizeof(int)), *bwd = (int *)xmalloc((size_t)tr->z.nunits * sizeof(int));
    gpt2_gathers_per_pass(&tr->cfg, !tr->args.reshard_after_forward, tr->args.recompute == GPT2_RECOMPUTE_OWN_GATHER, fwd, bwd);
    zero3_theory_ledger(&tr->z, -1, tr->A, tr->z.cfg.param_type, tr->z.cfg.grad_type, fwd, bwd, &tr->ledger_theory);
    free(fwd);
    free(bwd);
    if (tr->args.clip_local)   // each rank's own norm: no all-reduce of it
        tr->ledger_theory.row[ZERO3_COLL_NORM] = (Zero3LedgerRow){0};
    tr->unit_exposed_sum = (double *)xcalloc((size_t)tr->z.nunits, sizeof(double));
    tr->open_files = -1;
    if (tr->args.clip_local) tr->clip_probe = clip_probe_create(&tr->z);
    predict_configure(&tr->predict, &tr->args, &tr->z, &tr->ledger_theory, tr->A, gpt2_unit_emb(&tr->cfg), tr->start_step,
                      tr->args.steps, model_flops_per_token(tr) * (double)tr->args.tokens_per_step / be->world);
    return tr;
}

Trainer *trainer_create(int argc, char **argv, const Zero3Backend *be, const TrainBuild *build) {
    TrainArgs args;
    args_defaults(&args, build->ddp_only);
    if (args_parse(&args, argc, argv)) { args_usage(&args, argv[0]); return NULL; }
    return trainer_start(&args, be, build);
}

Zero3 *trainer_engine(Trainer *tr) { return &tr->z; }
GPT2Passes *trainer_model(Trainer *tr) { return &tr->gpt2; }
const TrainArgs *trainer_args(const Trainer *tr) { return &tr->args; }
int trainer_micro_steps(const Trainer *tr) { return tr->A; }
const int *trainer_inputs(const Trainer *tr) { return tr->inputs; }
const int *trainer_targets(const Trainer *tr) { return tr->targets; }

// ------------------------------------------------------------------------------------------------
// The step loop: learning rate, step, evaluate, log, sample, checkpoint, stop?

// What the loop carries from step to step.
typedef struct {
    double tokens;     // tokens per step (-d)
    double total_ms;   // the timed steps' milliseconds (the first step is left out)
    int saved_step;    // the step of the checkpoint this run wrote last, or -1
    int nan_step;      // test hook: the step whose loss is made NaN, or -1
} TrainLoop;

// What one step measured, for the step line and log.csv.
typedef struct {
    int step;
    float lr, loss, norm, val;         // val: NaN when the step did not validate
    double ms, exposed_ms;             // the step's time, and the part the compute side waited on collectives
    double comm;                       // bytes this rank sent in the step
    size_t peak;                       // the engine's peak bytes in the step
    int given_up_after;                // a stop signal gave the step up after this many micro-steps; -1: it ran whole
} StepResult;

// Test hook (tests/test_faults.sh): ZERO3_INJECT_NAN_STEP=k makes step k's loss NaN on every rank,
// to check that a non-finite loss stops the run with the last checkpoint intact.
static int nan_step_from_env(void) {
    const char *inject = getenv("ZERO3_INJECT_NAN_STEP");
    return inject ? atoi(inject) : -1;
}

// Every `every` steps and at the last one (validation, samples); never when every <= 0.
static int due(int every, int step, int steps) { return every > 0 && ((step + 1) % every == 0 || step == steps - 1); }

// One optimizer step, timed, with the step's own traffic and peak taken before validation or
// sampling add their gathers. The time runs from the step's start until its results are on the
// host and the device has finished its optimizer (the compute's step_end waits for it), as
// dev/pytorch_baseline.py times opt.step() and loss.item(); the timeline's stamps are read after.
static void trainer_timed_step(Trainer *tr, StepResult *r) {
    const int step = r->step;
    float lr = r->lr, norm, clip;
    double t0 = now_seconds();
    tr->compute->step_begin(tr->model, step);
    float loss;
    int done = trainer_step(tr, step, lr, &loss, &norm, &clip);
    tr->compute->step_end(tr->model);   // the device's work of the step done, AdamW included
    double t1 = now_seconds();   // the step's end: loss and norm on the host, parameters updated
    r->given_up_after = done < tr->A ? done : -1;
    if (done < tr->A) return;   // nothing to measure, log or trace
    r->loss = loss;
    r->norm = norm;
    r->comm = tr->z.observe.stats.comm_bytes;
    r->peak = zero3_peak_bytes(&tr->z);
    tr->ledger_step = tr->z.observe.stats.ledger;
    r->ms = (t1 - t0) * 1000.0;
    r->exposed_ms = trainer_timeline(tr, step, t0, t1);
}

// The process's part of the step-end invariant (with ZERO3_CHECK_STEPS; the engine checks its own
// in zero3_check_step_end): no more open files after a step than after the first one, so a file
// the loop's outputs (log, trace, checkpoints, samples) leak once a step shows in a long run.
static void trainer_check_open_files(Trainer *tr) {
    if (!tr->z.step.check_at_end) return;
    int files = proc_open_files();
    if (tr->open_files < 0) tr->open_files = files;
    else if (files > tr->open_files)
        fatal_local("step end: %d open files, %d after the first checked step", files, tr->open_files);
}

// A non-finite loss or norm ends the run on every rank, naming the checkpoint to resume from.
static void trainer_check_finite(const Trainer *tr, const TrainLoop *loop, StepResult *r) {
    if (r->step == loop->nan_step) r->loss = NAN;   // test hook (nan_step_from_env)
    if (isfinite(r->loss) && isfinite(r->norm)) return;
    if (tr->last_ckpt[0])
        fatal("step %d: loss %g, grad norm %g is not finite; stopping. The last good checkpoint, %s/%s, is intact: "
              "resume with -y 1 (perhaps with a lower -l)", r->step, r->loss, r->norm, tr->args.out_dir, tr->last_ckpt);
    fatal("step %d: loss %g, grad norm %g is not finite; stopping (no checkpoint was written: -o DIR -n STEPS "
          "keeps one)", r->step, r->loss, r->norm);
}

// The step line on stdout (rank 0).
static void print_step_line(const Trainer *tr, const TrainLoop *loop, const StepResult *r) {
    const TrainArgs *a = &tr->args;
    const int step = r->step;
    const double ms = r->ms, tokens = loop->tokens, exposed_ms = r->exposed_ms;
    double avg_ms = step > tr->start_step ? loop->total_ms / (step - tr->start_step) : ms;
    double eta = avg_ms * (a->steps - 1 - step) / 1000.0;
    char sent[32], peak[32];
    format_bytes(sent, sizeof sent, r->comm);
    format_bytes(peak, sizeof peak, (double)r->peak);
    double mfu = tr->compute->flops_fraction(tr->model, model_flops_per_token(tr) * tokens / (ms / 1000.0) / tr->be->world);
    printf("step %*d/%d | loss %.6f", (int)log10(a->steps) + 1, step + 1, a->steps, r->loss);
    if (!isnan(r->val)) printf(" | val %.6f", r->val);
    printf(" | lr %.2e | norm %.4f | %.1f ms | %.0f tok/s", r->lr, r->norm, ms, tokens / (ms / 1000.0));
    if (mfu >= 0) printf(" | MFU %.1f%%", 100.0 * mfu);
    char note[128] = "";
    tr->compute->step_note(tr->model, note, sizeof note);
    printf(" | exposed comm %.1f ms (%.0f%%) | sent %s | peak %s%s | ETA %dm%02ds\n", exposed_ms,
           ms > 0 ? 100.0 * exposed_ms / ms : 0.0, sent, peak, note, (int)eta / 60, (int)eta % 60);
    fflush(stdout);
}

// The step's row of DIR/log.csv (rank 0, with -o): the columns trainer_open_log wrote.
static void write_log_row(const Trainer *tr, const TrainLoop *loop, const StepResult *r) {
    if (!tr->log) return;
    const double ms = r->ms;
    fprintf(tr->log, "%d,%.9g,", r->step, r->loss);
    if (!isnan(r->val)) fprintf(tr->log, "%.9g", r->val);
    fprintf(tr->log, ",%.9g,%.9g,%.3f,%.1f,%.0f,%zu,%zu,%.3f,%.3f\n", r->lr, r->norm, ms, loop->tokens / (ms / 1000.0),
            r->comm, tr->z.resident.bytes, r->peak, ms - r->exposed_ms, r->exposed_ms);
    fflush(tr->log);
}

static void trainer_log_step(const Trainer *tr, const TrainLoop *loop, const StepResult *r) {
    if (tr->be->rank != 0) return;
    print_step_line(tr, loop, r);
    if (tr->clip_probe) clip_probe_print(tr->clip_probe);
    write_log_row(tr, loop, r);
}

// Stops the run on a stop signal (every rank, collective): saves the state after `whole` steps
// (unless just saved), says when it stopped (`when`) and how to resume, and returns `status`.
static int trainer_stop(Trainer *tr, const TrainLoop *loop, int whole, int status, const char *when) {
    const TrainArgs *a = &tr->args;
    if (a->out_dir && loop->saved_step != whole) trainer_checkpoint(tr, whole);
    char trace[4200], trace_note[4400] = "";
    trace_close(tr->trace, trace, sizeof trace);   // the steps so far: a resumed run's trace never replaces it
    tr->trace = NULL;
    if (trace[0]) fmt_path(trace_note, sizeof trace_note, "; the trace of these steps is %s (a resumed run's trace goes to "
                           "a new numbered file beside it)", trace);
    if (tr->be->rank == 0) {
        fflush(stdout);
        if (a->out_dir)
            fprintf(stderr, "stopped by %s %s: checkpoint %s/%s is complete; resume with the same command and -y 1%s\n",
                    signal_name(status - 128), when, a->out_dir, tr->last_ckpt, trace_note);
        else
            fprintf(stderr, "stopped by %s %s; nothing was saved (-o DIR keeps a checkpoint to resume from)%s\n",
                    signal_name(status - 128), when, trace_note);
        fflush(stderr);
    }
    // no rank exits before rank 0 has printed: mpirun ends the job when the first rank exits non-zero
    tr->be->all_reduce_scalar(tr->be->ctx, 0.0);
    return status;
}

// After a whole step: a stop signal on some rank (collective) stops the run there; 0 to go on.
static int trainer_stop_if_asked(Trainer *tr, const TrainLoop *loop, int step) {
    int status = step + 1 < tr->args.steps ? trainer_stop_status(tr) : 0;
    if (!status) return 0;
    char when[96];
    snprintf(when, sizeof when, "after step %d of %d", step + 1, tr->args.steps);
    return trainer_stop(tr, loop, step + 1, status, when);
}

// A step a stop signal gave up between micro-steps: the run stops with the steps before it; the
// resumed run runs this step again from its first micro-step (same data, same result).
static int trainer_stop_in_step(Trainer *tr, const TrainLoop *loop, const StepResult *r) {
    char when[160];
    snprintf(when, sizeof when, "during step %d of %d, after %d of its %d micro-steps (the resumed run does the step "
             "again)", r->step + 1, tr->args.steps, r->given_up_after, tr->A);
    return trainer_stop(tr, loop, r->step, trainer_stop_status(tr), when);
}

// The end of a run with -o: a checkpoint of the final state (unless the last step just wrote one)
// and the trained model as an llm.c file; then the summary (rank 0).
static void trainer_finish(Trainer *tr, const TrainLoop *loop) {
    const TrainArgs *a = &tr->args;
    if (a->out_dir) {
        if (loop->saved_step != a->steps) trainer_checkpoint(tr, a->steps);
        trainer_export(tr);
    }
    trainer_summary(tr);
    if (a->quant_weights || a->quant_grads) zeropp_report_quant_error(&tr->z);   // collective
}

// Runs the steps from the start step (0, or the resumed one). Returns the exit status: 0, or
// 128 + the signal when preempted.
static int trainer_run(Trainer *tr) {
    const TrainArgs *a = &tr->args;
    TrainLoop loop = {(double)a->tokens_per_step, 0.0, -1, nan_step_from_env()};
    for (int step = tr->start_step; step < a->steps; step++) {
        StepResult r = {.step = step, .lr = lr_at(a, step), .val = NAN};
        trainer_timed_step(tr, &r);
        if (r.given_up_after >= 0) return trainer_stop_in_step(tr, &loop, &r);
        trainer_check_open_files(tr);
        trainer_check_finite(tr, &loop, &r);
        if (step > tr->start_step) loop.total_ms += r.ms;   // the first step warms caches and the buffer pool
        if (due(a->val_every, step, a->steps)) r.val = trainer_validate(tr);
        trainer_log_step(tr, &loop, &r);
        if (due(a->sample_every, step, a->steps)) trainer_sample(tr);
        if (a->ckpt_every > 0 && (step + 1) % a->ckpt_every == 0) { trainer_checkpoint(tr, step + 1); loop.saved_step = step + 1; }
        int stop = trainer_stop_if_asked(tr, &loop, step);
        if (stop) return stop;   // main tears the transport down as after a finished run
    }
    trainer_finish(tr, &loop);
    return 0;
}

int train_main(int argc, char **argv, const Zero3Backend *be, const TrainBuild *build) {
    TrainArgs args;
    args_defaults(&args, build->ddp_only);
    if (args_parse(&args, argc, argv)) { args_usage(&args, argv[0]); return 0; }   // -h
    if (args.plan_world) return plan_main(&args, build->align);   // -plan: on paper only, nothing allocated, no data read
    install_stop_handlers();
    Trainer *tr = trainer_start(&args, be, build);
    if (tr->args.clip_local && be->rank == 0)
        fprintf(stderr, "warning: -clip local: each rank clips by the norm of its own gradient shard, so the ranks scale "
                "their gradients differently and the run leaves stage 0's losses (the pitfall, on purpose)\n");
    trainer_report(tr);
    trainer_open_log(tr);
    int status = trainer_run(tr);
    trainer_destroy(tr);
    return status;
}
