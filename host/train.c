// host/train.c: the training driver both trainers share: setup (the model, the data, resume, the
// params published, the run's theory ledger), one optimizer step (micro-steps, global norm,
// clipping, AdamW through the engine), the step loop and train_main. Compiled once and linked into
// both trainers; what differs by device comes through the backend table (zero3.h) and the
// TrainBuild a trainer's main passes in, which carries the compute table (GPT2Compute, passes.h).
// The output folder, the report, evaluation and stopping are the trainer's other files (trainer.h).
//
// With -o DIR the run writes DIR/log.csv, a sharded checkpoint every -n steps and at the end, and the
// trained model as DIR/model.bin (llm.c format); -y 1 resumes from DIR/latest (checkpoint.h).
#include "trainer.h"
#include <malloc.h>
#include <sys/stat.h>
#include <signal.h>
#include "fileio.h"
#include "plan.h"
#include "readfile.h"
#include "../observe/zero3_observe.h"
#include "zeropp.h"

// LR at step s (contract): warmup lr*(s+1)/W for s < W, then cosine from lr towards F*lr over the
// remaining S - W steps, as llm.c: progress (s - W) / (S - W) runs from 0 at s = W to (S-W-1)/(S-W)
// at the last step (so the last step's LR is just above F*lr). Same formula as tests/reference/gpt2_reference.py.
float lr_at(const TrainArgs *a, int s) {
    if (s < a->warmup) return a->lr * (float)(s + 1) / (float)a->warmup;
    int decay_steps = a->steps - a->warmup;
    if (decay_steps <= 0) return a->lr;
    double progress = (double)(s - a->warmup) / (double)decay_steps;
    double cosine = 0.5 * (1.0 + cos(M_PI * progress));   // 1 -> 0
    return (float)(a->lr * (a->final_frac + (1.0 - a->final_frac) * cosine));
}

// ------------------------------------------------------------------------------------------------
// Setup

// Lays the model out in the engine and fills each rank's master slices: from the seed, or from an
// llm.c model file (each rank reads only its slices). When resuming, the checkpoint fills them
// instead (trainer_resume), so only the shape is taken from -e.
// -wrap: the granularity of the units; it and -t checked against the model once it is known, as
// the planner checks them (cli.h).
static void trainer_set_wrap(Trainer *tr) {
    args_check_model(&tr->args, &tr->cfg);
    tr->cfg.wrap = tr->args.wrap;
}

// -oo disk, -op disk: one store's file (its flag, its folder, what it holds), reserved whole before
// anything fills it; err set where this rank cannot (an unwritable folder, a disk without the room).
static void trainer_store_start(Trainer *tr, Zero3Store what, const char *flag, const char *dir_given, const char *words,
                                char *err, size_t errlen) {
    Zero3 *z = &tr->z;
    char dir[OFFLOAD_DIR_MAX + 16];
    if (dir_given[0]) snprintf(dir, sizeof dir, "%s", dir_given);
    else {
        fmt_path(dir, sizeof dir, "%s/offload", tr->args.out_dir);
        if (mkdir(dir, 0755) != 0 && errno != EEXIST) {
            set_err(err, errlen, "flag %s disk: cannot make the folder %s (%s)", flag, dir, strerror(errno));
            return;
        }
    }
    if (zero3_offload_start(z, what, dir, err, errlen) != 0) return;
    const Zero3Offload *o = what == ZERO3_STORE_PARAMS ? z->params_offload : z->offload;
    progress(tr, "offload: the %s in %s (%.3f GB a rank, %d slots of %.3f GB in memory, %s I/O)\n", words,
             zero3_offload_path(o), zero3_offload_file_bytes(o) / 1e9, zero3_offload_slots(o), zero3_offload_slots_bytes(o) / 1e9,
             zero3_offload_stats(o).direct ? "direct" : "buffered: the file system takes no O_DIRECT");
}

// The stores on disk, each reserved whole before anything fills it. A rank that cannot says so;
// every rank then removes its own files and all exit together, so no file is left half-made.
static void trainer_offload_start(Trainer *tr) {
    const TrainArgs *a = &tr->args;
    char err[4600] = "";
    args_check_offload_slots(a, tr->z.nunits);
    if (a->offload_opt == OFFLOAD_DISK)
        trainer_store_start(tr, ZERO3_STORE_OPTIMIZER, "-oo", a->offload_opt_dir, "optimizer state", err, sizeof err);
    if (a->offload_params == OFFLOAD_DISK && !err[0])
        trainer_store_start(tr, ZERO3_STORE_PARAMS, "-op", a->offload_params_dir, "parameter shard", err, sizeof err);
    if (a->offload_opt != OFFLOAD_DISK && a->offload_params != OFFLOAD_DISK) return;
    if (tr->be->all_reduce_scalar(tr->be->ctx, err[0] ? 1.0 : 0.0) > 0.0) {
        zero3_offload_close(tr->z.offload);   // another rank failed (or the other store): this rank's files go too
        zero3_offload_close(tr->z.params_offload);
        tr->z.offload = tr->z.params_offload = NULL;
    }
    agree_or_exit(tr->be, err);
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
        trainer_offload_start(tr);
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
    trainer_offload_start(tr);
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
    ckpt_load_latest(a->out_dir, &tr->cfg, &tr->z, &m, tr->output.last_ckpt);
    if (m.step > a->steps)
        fatal("flag -x: the checkpoint %s/%s is at step %d, past the %d steps asked for", a->out_dir, tr->output.last_ckpt, m.step, a->steps);
    const int resharded = m.world != tr->z.world || m.run.stage != a->stage;
    tr->start_step = m.step;
    tr->start_saved = resharded ? -1 : m.step;   // a checkpoint of this layout is already on disk: not written again
    tr->sample.rng = m.sample_rng;
    progress(tr, "resume: %s/%s, step %d, written on N=%d at ZeRO stage %d%s (%.2f s)\n", a->out_dir, tr->output.last_ckpt,
             m.step, m.world, m.run.stage, resharded ? ", resharded" : "", now_seconds() - t0);
    // what may legitimately change on resume, said out loud (the table of flags says what each means)
    if (tr->be->rank == 0) ckpt_warn_changes(&m, a);
}

// The token files: the training split must hold one batch of -b x -t (B*T+1 tokens); the validation
// split is read only when the run validates (-v > 0), and one shorter than a batch is served as one
// batch of rows spread over it (dataloader.h), as long as it holds one sequence (T+1 tokens).
static void trainer_open_data(Trainer *tr) {
    const TrainArgs *a = &tr->args;
    const int V = tr->cfg.vocab_size;
    char err[1024];
    int rc = loader_open(&tr->data.train, a->train_path, a->B, a->T, V, err, sizeof err);
    if (rc == LOADER_SHORT)
        fatal("flag -b: a batch of -b %d x -t %d = %lld tokens needs %lld tokens of training data (the last target is "
              "one further), and the training split %s (-i) holds %zu: lower -b or -t, or give a longer -i", a->B, a->T,
              (long long)a->B * a->T, (long long)a->B * a->T + 1, a->train_path, tr->data.train.ntok);
    if (rc) fatal("flag -i: %s", err);
    if (a->val_every <= 0) return;   // -v 0: the validation file is never opened
    rc = loader_open(&tr->data.val, a->val_path, a->B, a->T, V, err, sizeof err);
    const size_t val_tokens = tr->data.val.ntok;   // loader_spread closes the loader when it fails
    if (rc == LOADER_SHORT && loader_spread(&tr->data.val, err, sizeof err))
        fatal("flag -t: -t %d needs %d tokens for one validation sequence, and the validation split %s (-j) holds %zu: "
              "lower -t, give a longer -j, or -v 0 to train without validation", a->T, a->T + 1, a->val_path, val_tokens);
    if (rc && rc != LOADER_SHORT) fatal("flag -j: %s; validation (every -v %d steps) reads it, -v 0 turns it off", err, a->val_every);
}

// -p: the engine's types and the compute that uses them: the build's own, or -p bf16's second table
// on a build that has one (the CPU's). A build of one precision (the GPU's) took only its own
// (args_read, train_args_build).
static void trainer_precision(Trainer *tr, Zero3DType *pt, Zero3DType *gt) {
    const TrainBuild *b = tr->build;
    *pt = b->param_type;
    *gt = b->grad_type;
    tr->compute = b->compute;
    if (!tr->args.bf16 || !b->compute_bf16) return;
    *pt = *gt = ZERO3_BF16;
    tr->compute = b->compute_bf16;
}

// An offload I/O fault, found by this rank alone (its own file): its line, every rank taken down.
static void trainer_offload_fault(const char *msg) { fatal_local("%s", msg); }

// What -oo and -op ask of this build, before anything is allocated.
static void trainer_check_offload(const Trainer *tr) {
    const TrainArgs *a = &tr->args;
    if (a->offload_params == OFFLOAD_DISK) {
        if (!tr->build->state_in_host_memory)
            fatal("flag -op disk: this build keeps the parameter shard in device memory; the CPU trainer reads it from disk");
        if (a->clip_local)
            fatal("flag -clip local with -op disk: its probe replays AdamW on the segments in memory; with -op disk the "
                  "step streams them unit by unit (use -clip global)");
    }
    // host: a device's backend gives pinned host memory and updates the state there (host_adamw);
    // where the engine's memory is the host's (the CPU's) it is that memory
    if (a->offload_opt == OFFLOAD_HOST && !tr->build->state_in_host_memory && !(tr->be->host_alloc && tr->be->host_adamw))
        fatal("flag -oo host: this build's backend has no host memory for the optimizer state (use -oo none)");
    if (a->offload_opt != OFFLOAD_DISK) return;
    if (!tr->build->state_in_host_memory)
        fatal("flag -oo disk: this build keeps the optimizer state in device memory; the CPU trainer streams it from disk");
    if (a->clip_local)
        fatal("flag -clip local: its probe reads AdamW's moments in memory; with -oo disk they are on disk (use -clip global)");
}

// Rank 0 of a run over several nodes counts its node's bytes on the wire (report.c's wire line):
// the ranks of its node, when they are ranks 0 .. K-1 (the ring model's node 0) and the kernel's
// count is readable; else 0, nothing counted.
static int trainer_wire_node_ranks(const Zero3Backend *be) {
    if (be->rank != 0 || !be->node_name || !be->node_name(be->ctx, 0) || proc_node_tx_bytes() < 0.0) return 0;
    const char *node0 = be->node_name(be->ctx, 0);
    int k = 0;
    while (k < be->world && !strcmp(be->node_name(be->ctx, k), node0)) k++;
    for (int r = k; r < be->world; r++)
        if (!strcmp(be->node_name(be->ctx, r), node0)) return 0;   // node 0's ranks are not 0 .. K-1
    return k < be->world ? k : 0;   // one node: no wire between ranks
}

static void trainer_setup(Trainer *tr, const Zero3Backend *be) {
    TrainArgs *a = &tr->args;
    tr->be = be;
    const TrainBuild *b = tr->build;
    Zero3DType pt, gt;
    trainer_precision(tr, &pt, &gt);
    trainer_check_offload(tr);
    Zero3Config zc = {.stage = a->stage, .prefetch_depth = a->prefetch_depth,
                      .backward_prefetch = (Zero3BackwardPrefetch)a->backward_prefetch, .align = b->align,
                      .param_type = pt, .grad_type = gt,
                      .persist_threshold = (size_t)a->persist_threshold,
                      .reshard_after_forward = a->reshard_after_forward, .shard_group = a->shard_group,
                      .quant_weights = a->quant_weights, .hp_group = a->hp_group, .quant_grads = a->quant_grads,
                      .optimizer_medium = a->offload_opt == OFFLOAD_DISK   ? ZERO3_ON_DISK
                                          : a->offload_opt == OFFLOAD_HOST ? ZERO3_IN_HOST
                                                                           : ZERO3_IN_MEMORY,
                      .params_medium = a->offload_params == OFFLOAD_DISK ? ZERO3_ON_DISK : ZERO3_IN_MEMORY,
                      .offload_slots = a->offload_slots,
                      .fail = trainer_offload_fault, .observer = &ZERO3_OBSERVER};
    zero3_init(&tr->z, be, &zc);
    tr->measure.resident_before = proc_status_bytes("VmRSS");   // the process before the run's memory: its baseline
    trainer_load_model(tr);

    trainer_open_data(tr);
    char err[512];
    // the tokenizer is optional: without it samples print token ids
    tr->sample.have_tok = (tokenizer_init(&tr->sample.tok, TOKENIZER_PATH, err, sizeof err) == 0);

    alloc_phase_begin(be, "the batch of -b %d -t %d", a->B, a->T);
    tr->data.inputs = (int *)xmalloc((size_t)a->B * a->T * sizeof(int));
    tr->data.targets = (int *)xmalloc((size_t)a->B * a->T * sizeof(int));
    alloc_phase_end();
    tr->sample.rng = a->seed ^ 0x5DEECE66Dull;
    tr->start_saved = -1;   // a fresh run has no checkpoint yet
    if (a->resume) trainer_resume(tr);
}

static void trainer_publish(Trainer *tr) {
    zero3_publish_params(&tr->z);
    alloc_phase_begin(tr->be, "the activations of -b %d -t %d for -e %s", tr->args.B, tr->args.T, tr->args.init);
    tr->compute_state = tr->compute->create(&tr->cfg, tr->args.B, tr->args.T, tr->args.recompute, tr->be->ctx);
    alloc_phase_end();
    // what a later allocation is for (the engine's pool fills during the first step)
    alloc_phase_begin(NULL, "the gathered units and gradient buffers of -e %s at ZeRO stage %d (-pd %d), in the first step",
                      tr->args.init, tr->args.stage, tr->args.prefetch_depth);
    tr->passes.cfg = tr->cfg;
    tr->passes.z = &tr->z;
    tr->passes.compute = tr->compute;
    tr->passes.state = tr->compute_state;
    tr->passes.recompute = tr->args.recompute;
}

// The collectives of one step on paper, for the report and the end-of-run comparison.
static void trainer_theory_ledger(Trainer *tr) {
    int *fwd = (int *)xmalloc((size_t)tr->z.nunits * sizeof(int)), *bwd = (int *)xmalloc((size_t)tr->z.nunits * sizeof(int));
    gpt2_gathers_per_pass(&tr->cfg, !tr->args.reshard_after_forward, tr->args.recompute == GPT2_RECOMPUTE_OWN_GATHER, fwd, bwd);
    zero3_theory_ledger(&tr->z, -1, tr->A, tr->z.cfg.param_type, tr->z.cfg.grad_type, fwd, bwd, &tr->measure.ledger_theory);
    free(fwd);
    free(bwd);
    if (tr->args.clip_local)   // each rank's own norm: no all-reduce of it
        tr->measure.ledger_theory.row[ZERO3_COLL_NORM] = (Zero3LedgerRow){0};
}

// The heap from the first step on holds what the run holds (the peak a run prints is the process's,
// tests/test_peak.sh). The setup's freed temporaries (the init's host buffers, the recording pass's
// engine) are given back. And glibc's threshold for mapping a buffer on its own, given back to the
// kernel when freed, is fixed: left to itself glibc raises it past the largest such buffer freed so
// far (the setup's), and MPI's non-blocking reductions (fp32 across machines: proc/mpi_sum.h),
// which allocate a copy of the unit they sum and free it when done, would take their copies from the heap, where a freed copy stays resident
// and the next may land beside it. So each copy is resident only while its reduction runs, as the
// peak planner counts it (host/peak.c's MPI scratch; docs/time.md).
enum { HEAP_OWN_MAPPING = 128 * 1024 };   // glibc's own starting threshold
static void trainer_settle_heap(void) {
    malloc_trim(0);
    mallopt(M_MMAP_THRESHOLD, HEAP_OWN_MAPPING);
    mallopt(M_TRIM_THRESHOLD, HEAP_OWN_MAPPING);   // raised with it: the heap's free top given back past this
}

// This rank's peak memory, the one meaning of "peak" a run reports (the step line, log.csv's
// mem_peak_bytes, the closing report): the kernel's count of the process's peak resident bytes
// (VmHWM) less what it held before the model state was allocated (the program, the MPI library,
// their buffers). Every buffer the run allocates is written in a step (the state, the activations,
// the pool), so after one step it is the run's peak so far: model state, activations, transient
// buffers, the pool's reserve and whatever MPI allocates for its collectives. -1 where unknown.
long long trainer_process_peak(const Trainer *tr) {
    long long peak = proc_status_bytes("VmHWM"), before = tr->measure.resident_before;
    return peak < 0 || before < 0 ? -1 : peak - before;
}

// Every rank's peak to rank 0, one blocking scalar sum per rank (each rank adds its own figure, the
// others 0: exact, the figures are far below 2^53): the ranks differ (rank 0 holds MPI's copies of
// the units it reduces). Outside the engine, so in no ledger; -1 from any rank that cannot read it.
void trainer_gather_peaks(Trainer *tr) {
    const Zero3Backend *be = tr->be;
    const long long mine = trainer_process_peak(tr);
    long long *all = (long long *)xmalloc((size_t)be->world * sizeof(long long));
    for (int r = 0; r < be->world; r++) all[r] = (long long)be->all_reduce_scalar(be->ctx, be->rank == r ? (double)mine : 0.0);
    if (be->rank == 0) tr->measure.rank_peaks = all;
    else free(all);
}

// Everything before the first step, for flags already parsed: the output folder, model, data,
// resume, the params published where the stage needs them, what the run measures against.
Trainer *trainer_create(const TrainArgs *args, const Zero3Backend *be, const TrainBuild *build) {
    Trainer *tr = (Trainer *)xcalloc(1, sizeof(Trainer));
    tr->build = build;
    tr->args = *args;
    tr->be = be;
    // the flags against each other and the N ranks, as -plan N checks them (cli.h), before the output
    // folder is touched; A micro-steps per step
    tr->A = args_validate(&tr->args, be->world);
    tr->output.files = output_files_new();
    trainer_note_inputs(tr);
    trainer_prepare_out_dir(tr);
    tr->measure.trace = trace_open(tr->output.files, tr->args.trace_path, be);   // an unwritable -tr fails before the long setup
    trainer_setup(tr, be);
    predict_links(&tr->measure.predict, &tr->args, be);   // the engine's groups are made: the links can be set
    trainer_publish(tr);
    trainer_theory_ledger(tr);
    trainer_settle_heap();
    tr->measure.unit_exposed_sum = (double *)xcalloc((size_t)tr->z.nunits, sizeof(double));
    tr->measure.open_files = -1;
    tr->measure.wire_node_ranks = trainer_wire_node_ranks(be);
    if (tr->args.clip_local) tr->clip_probe = clip_probe_create(&tr->z);
    predict_configure(&tr->measure.predict, &tr->args, &tr->z, &tr->measure.ledger_theory, tr->A, gpt2_unit_emb(&tr->cfg), tr->start_step,
                      tr->args.steps, model_flops_per_token(tr) * (double)tr->args.tokens_per_step / be->world);
    return tr;
}

Zero3 *trainer_engine(Trainer *tr) { return &tr->z; }
GPT2Passes *trainer_model(Trainer *tr) { return &tr->passes; }
const TrainArgs *trainer_args(const Trainer *tr) { return &tr->args; }
int trainer_micro_steps(const Trainer *tr) { return tr->A; }
const int *trainer_inputs(const Trainer *tr) { return tr->data.inputs; }
const int *trainer_targets(const Trainer *tr) { return tr->data.targets; }

// Frees what trainer_create made; the -tr file is joined here (rank 0).
void trainer_destroy(Trainer *tr) {
    trace_close(tr->measure.trace, NULL, 0);   // rank 0 joins the ranks' parts into the -tr file
    tr->compute->destroy(tr->compute_state);
    zero3_free(&tr->z);
    loader_close(&tr->data.train);
    loader_close(&tr->data.val);
    if (tr->sample.have_tok) tokenizer_free(&tr->sample.tok);
    free(tr->data.inputs);
    free(tr->data.targets);
    if (tr->output.log) fclose(tr->output.log);
    free(tr->measure.unit_exposed_sum);
    free(tr->measure.rank_peaks);
    clip_probe_destroy(tr->clip_probe);
    output_files_free(tr->output.files);
    free(tr);
}

// ------------------------------------------------------------------------------------------------
// One optimizer step: A micro-steps of forward + backward (the engine gathers, releases and reduces
// per unit), then the global norm, the clip coefficient and AdamW on this rank's shard.

// This rank's micro-batch k of step `step` into tr->data.inputs, tr->data.targets. Data order (contract):
// rank r at step s, micro-step k reads window (s*A + k)*N + r.
void trainer_load_batch(Trainer *tr, int step, int k) {
    const int N = tr->be->world, r = tr->be->rank, A = tr->A;
    loader_window(&tr->data.train, ((long long)step * A + k) * N + r, tr->data.inputs, tr->data.targets);
}

// The clip coefficient, as torch.nn.utils.clip_grad_norm_: G/(norm+1e-6) when that is below 1,
// else 1 (also when clipping is off, G = 0).
static float clip_coefficient(float max_norm, double norm) {
    if (max_norm <= 0.0f) return 1.0f;
    double coef = max_norm / (norm + 1e-6);
    return coef < 1.0 ? (float)coef : 1.0f;
}

// Test hook: ZERO3_RAISE_STOP=S.K raises SIGUSR1 on rank 0 inside micro-step K of step S (1-based,
// as the step lines; after that micro-step's stop check, as a signal arriving while it computes),
// ZERO3_RAISE_STOP=export as the finished run's last checkpoint and export begin: the stop path at
// a step's edges, at a known point (tests/test_edges.sh). `micro` is 0-based; -1 for the export.
static void raise_stop_if_due(const Trainer *tr, int step, int micro) {
    const char *at = getenv("ZERO3_RAISE_STOP");
    if (!at || tr->be->rank != 0) return;
    int s = 0, k = 0;
    const int due_now = micro < 0 ? strcmp(at, "export") == 0 : sscanf(at, "%d.%d", &s, &k) == 2 && s == step + 1 && k == micro + 1;
    if (due_now) raise(SIGUSR1);
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
        raise_stop_if_due(tr, step, k);
        trainer_load_batch(tr, step, k);
        zero3_micro_begin(&tr->z, k, A, ZERO3_PASS_TRAIN);
        gpt2_pass_forward(&tr->passes, tr->data.inputs, tr->data.targets, GPT2_TRAIN_DEFER_LOSS);
        gpt2_pass_backward(&tr->passes, dloss);
    }
    return A;
}

// AdamW's constants (GPT-2's: llm.c's and nanoGPT's betas), one definition for the update wherever it runs
static const float ADAM_BETA1 = 0.9f, ADAM_BETA2 = 0.95f, ADAM_EPS = 1e-8f;

int trainer_step(Trainer *tr, int step, float lr, float *loss, float *norm, float *clip) {
    const TrainArgs *a = &tr->args;
    const int N = tr->be->world, A = tr->A;
    zero3_step_begin(&tr->z);
    // -ua 1 (-gc 0: the clip coefficient is 1): each unit's AdamW inside the last micro-step's backward
    if (a->update_in_backward) zero3_update_in_backward(&tr->z, lr, ADAM_BETA1, ADAM_BETA2, ADAM_EPS, a->weight_decay, step + 1);
    int done = trainer_accumulate(tr, step);
    double loss_sum = gpt2_pass_take_loss(&tr->passes);   // the micro-steps' mean losses, read once
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
    zero3_optimizer_step(&tr->z, lr, ADAM_BETA1, ADAM_BETA2, ADAM_EPS, a->weight_decay, *clip, step + 1);
    if (tr->clip_probe) clip_probe_after(tr->clip_probe, &tr->z, *clip, global_clip, ADAM_BETA1, ADAM_BETA2, ADAM_EPS, step + 1);
    zero3_check_released(&tr->z);
    *norm = (float)gnorm;
    *loss = (float)(tr->be->all_reduce_scalar(tr->be->ctx, loss_sum) / ((double)A * N));
    return A;
}


// ------------------------------------------------------------------------------------------------
// The step loop: learning rate, step, evaluate, log, sample, checkpoint, stop?


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
// tools/bench/pytorch_baseline.py times opt.step() and loss.item(); the timeline's stamps are read after.
static void trainer_timed_step(Trainer *tr, StepResult *r) {
    const int step = r->step;
    float lr = r->lr, norm, clip;
    double t0 = now_seconds();
    if (tr->be->at_step) tr->be->at_step(tr->be->ctx, step + 1);   // the step the backend's watchdog names
    if (tr->measure.wire_node_ranks) tr->measure.wire_step_start = proc_node_tx_bytes();
    tr->compute->step_begin(tr->compute_state, step);
    float loss;
    int done = trainer_step(tr, step, lr, &loss, &norm, &clip);
    tr->compute->step_end(tr->compute_state);   // the device's work of the step done, AdamW included
    double t1 = now_seconds();   // the step's end: loss and norm on the host, parameters updated
    r->given_up_after = done < tr->A ? done : -1;
    if (done < tr->A) return;   // nothing to measure, log or trace
    r->loss = loss;
    r->norm = norm;
    r->comm = tr->z.observe.stats.comm_bytes;
    r->engine_peak = zero3_peak_bytes(&tr->z);
    r->process_peak = trainer_process_peak(tr);
    tr->measure.ledger_step = tr->z.observe.stats.ledger;
    r->ms = (t1 - t0) * 1000.0;
    r->exposed_ms = trainer_timeline(tr, step, t0, t1);
    if (tr->measure.wire_node_ranks && step > tr->start_step) {   // as for ms/step, the first step is left out
        tr->measure.wire_sent += proc_node_tx_bytes() - tr->measure.wire_step_start;
        tr->measure.wire_steps++;
    }
}

// The process's part of the step-end invariant (with ZERO3_CHECK_STEPS; the engine checks its own
// in zero3_check_step_end): no more open files after a step than after the first one, so a file
// the loop's outputs (log, trace, checkpoints, samples) leak once a step shows in a long run.
static void trainer_check_open_files(Trainer *tr) {
    if (!tr->z.step.check_steps) return;
    int files = proc_open_files();
    if (tr->measure.open_files < 0) tr->measure.open_files = files;
    else if (files > tr->measure.open_files)
        fatal_local("step end: %d open files, %d after the first checked step", files, tr->measure.open_files);
}

// A non-finite loss or norm ends the run on every rank, naming the checkpoint to resume from.
static void trainer_check_finite(const Trainer *tr, const TrainLoop *loop, StepResult *r) {
    if (r->step == loop->nan_step) r->loss = NAN;   // test hook (nan_step_from_env)
    if (isfinite(r->loss) && isfinite(r->norm)) return;
    if (tr->output.last_ckpt[0])
        fatal("step %d: loss %g, grad norm %g is not finite; stopping. The last good checkpoint, %s/%s, is intact: "
              "resume with -y 1 (perhaps with a lower -l)", r->step, r->loss, r->norm, tr->args.out_dir, tr->output.last_ckpt);
    fatal("step %d: loss %g, grad norm %g is not finite; stopping (no checkpoint was written: -o DIR -n STEPS "
          "keeps one)", r->step, r->loss, r->norm);
}

// The end of a run with -o: a checkpoint of the final state (unless the last step just wrote one)
// and the trained model as an llm.c file; then the summary (rank 0).
static void trainer_finish(Trainer *tr, const TrainLoop *loop) {
    const TrainArgs *a = &tr->args;
    raise_stop_if_due(tr, a->steps, -1);
    trainer_gather_peaks(tr);   // the steps' peak: the last checkpoint and export below are -o's, not the training's
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
    TrainLoop loop = {(double)a->tokens_per_step, 0.0, tr->start_saved, nan_step_from_env()};
    for (int step = tr->start_step; step < a->steps; step++) {
        StepResult r = {.step = step, .lr = lr_at(a, step), .val = NAN};
        trainer_timed_step(tr, &r);
        if (r.given_up_after >= 0) return trainer_stop_in_step(tr, &loop, &r);
        trainer_check_open_files(tr);
        trainer_check_finite(tr, &loop, &r);
        if (step > tr->start_step) loop.total_ms += r.ms;   // the first step warms caches and the buffer pool
        if (due(a->val_every, step, a->steps)) r.val = trainer_validate(tr);
        trainer_print_step(tr, &loop, &r);
        trainer_log_row(tr, &loop, &r);
        if (due(a->sample_every, step, a->steps)) trainer_sample(tr);
        if (a->ckpt_every > 0 && (step + 1) % a->ckpt_every == 0) { trainer_checkpoint(tr, step + 1); loop.saved_step = step + 1; }
        int stop = trainer_stop_if_asked(tr, &loop, step);
        if (stop) return stop;   // main tears the transport down as after a finished run
    }
    trainer_finish(tr, &loop);
    return 0;
}

ArgsBuild train_args_build(const TrainBuild *b) {
    ArgsBuild ab = {.ddp_only = b->ddp_only, .precision = ARGS_PRECISION_EITHER};
    if (!b->compute_bf16) ab.precision = b->param_type == ZERO3_BF16 ? ARGS_PRECISION_BF16 : ARGS_PRECISION_FP32;
    return ab;
}

int train_main(int argc, char **argv, const Zero3Backend *be, const TrainBuild *build) {
    TrainArgs args;
    if (args_read(&args, argc, argv, train_args_build(build))) return 0;   // -h: the usage printed
    if (args.plan_world) return plan_main(&args, build->align);   // -plan: on paper only, nothing allocated, no data read
    install_stop_handlers(be);
    if (be->collective_timeout) be->collective_timeout(be->ctx, args.collective_timeout_s);   // -ct: the watchdog
    else if (be->world > 1 && be->rank == 0)   // a flag never means nothing silently
        fprintf(stderr, "warning: -ct %g is not applied: this trainer's collectives (NCCL) have no watchdog, so a peer "
                "or link that is down hangs the run until its launcher or scheduler ends it\n", args.collective_timeout_s);
    Trainer *tr = trainer_create(&args, be, build);
    if (tr->args.clip_local && be->rank == 0)
        fprintf(stderr, "warning: -clip local: each rank clips by the norm of its own gradient shard, so the ranks scale "
                "their gradients differently and the run leaves stage 0's losses (the pitfall, on purpose)\n");
    trainer_report(tr);
    trainer_open_log(tr);
    int status = trainer_run(tr);
    trainer_destroy(tr);
    return status;
}
