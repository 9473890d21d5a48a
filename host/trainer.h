// host/trainer.h: the trainer's parts, inside the host library (train.h is its face to the
// trainers and the tests). The Trainer, grouped the way Zero3 is, and the verbs its files lend
// each other:
//
//   file          holds                                                     called from
//   train.c       setup, resume, one step, the step loop, train_main        the trainers' mains
//   outdir.c      the output folder -o: its checks, its lock, log.csv,      setup, loop, stop.c
//                 the checkpoints and model.bin written there
//   report.c      the startup report, the step line, the timeline, the      setup, loop, the end
//                 end-of-run summary (ledger measured against theory)
//   evaluate.c    validation and sampling                                   loop
//   stop.c        stop signals, the collective stop check, the stop         loop (and evaluate.c)
//                 checkpoint and its message
//
// One run, as train_main drives it (train.c):
//   parse the flags once; -plan N: print the plan, exit
//   install the stop handlers                                    stop.c
//   note the inputs, prepare -o (lock, earlier run?)             outdir.c
//   model, data, resume, params published, theory ledger         train.c
//   startup report; open log.csv                                 report.c, outdir.c
//   for each step: timed step, checks, validate, step line, log row, sample, checkpoint, stop?
//   checkpoint, model.bin, summary
#pragma once
#include "train.h"
#include "checkpoint.h"
#include "clip_probe.h"
#include "dataloader.h"
#include "predict.h"
#include "tokenizer.h"
#include "trace.h"

#define TOKENIZER_PATH "data/tinyshakespeare/gpt2_tokenizer.bin"   // optional: without it samples print token ids

struct Trainer {
    TrainArgs args;                  // the flags, parsed once (train_main); -d filled in by args_validate
    const TrainBuild *build;         // what this binary is: data types, export version, compute table
    const Zero3Backend *be;          // the transport: rank, world, collectives
    // the model: its shape, the engine holding its state, the math over it
    GPT2Config cfg;                  // the model's shape (from -e, or the checkpoint's) and -wrap
    Zero3 z;                         // the engine: units, shards, buffers, collectives
    const GPT2Compute *compute;      // the trainer's math (build->compute)
    GPT2ComputeState *compute_state; // its activations and kernels
    GPT2Passes passes;               // the passes over the units (host/passes.c)
    // the run's position
    int A;                           // micro-steps per step
    int start_step;                  // 0, or the checkpoint's step when resuming
    int start_saved;                 // the resumed checkpoint's step when it has this run's layout (N, stage), else -1
    ClipProbe *clip_probe;           // -clip local: the step beside what global clipping would do
    struct {                         // the tokens (-i -j) and this rank's batch
        DataLoader train, val;
        int *inputs, *targets;       // (B,T) host
    } data;
    struct {                         // sampling (-s -g)
        Tokenizer tok;               // the GPT-2 tokenizer, when TOKENIZER_PATH is there
        int have_tok;                // 0: samples print token ids
        uint64_t rng;                // the sampling RNG (a checkpoint carries it on)
    } sample;
    struct {                         // what the run writes into -o (outdir.c)
        OutputFiles *files;          // the rule's state: inputs noted, temp files pending, -o's lock and identity (fileio.h)
        FILE *log;                   // log.csv (rank 0), or NULL without -o
        char log_tmp[4200];          // while log.csv still holds an earlier run's rows (-f 1): this run's, beside it
        char last_ckpt[CKPT_NAME_MAX];   // the newest checkpoint this run wrote or resumed from
    } output;
    struct {                         // what the run measures and compares with theory (report.c)
        Trace *trace;                // -tr
        Zero3Ledger ledger_theory;   // this run's collectives per step, in theory
        Zero3Ledger ledger_step;     // ... as the engine counted them in the last step
        double *unit_exposed_sum;    // per unit, seconds waited over the timed steps
        double norm_exposed_sum;     // the same for the norm (no unit)
        int timed_steps;             // steps in those sums (the first step is left out)
        RunPrediction predict;       // the time model's prediction for this run, and the measurement
        int open_files;              // with ZERO3_CHECK_STEPS: open files after the first step (-1: not yet)
        long long resident_before;   // the process's resident bytes (VmRSS) before the model state, -1 unknown
        long long *rank_peaks;       // rank 0, at the end: every rank's trainer_process_peak (NULL before)
        int wire_node_ranks;         // rank 0, a run over several nodes: its node's ranks (0 .. this-1); 0: not counted
        double wire_sent, wire_step_start;   // the kernel's count of the bytes rank 0's node sent in the timed steps
        int wire_steps;              // the steps in wire_sent
    } measure;
};

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
    long long process_peak;            // the process's peak resident bytes so far, less its baseline (trainer_process_peak)
    size_t engine_peak;                // the engine's buffers at their most in the step: resident state + pool held
    int given_up_after;                // a stop signal gave the step up after this many micro-steps; -1: it ran whole
} StepResult;

// ---- outdir.c
void trainer_note_inputs(const Trainer *tr);         // the inputs by identity, for the outputs to be checked against
void trainer_prepare_out_dir(const Trainer *tr);     // -o made, locked, checked for an earlier run (collective)
void trainer_check_folder(const Trainer *tr, const char *writing);   // is -o still this run's folder? (collective)
void trainer_open_log(Trainer *tr);                  // log.csv: new, cut back to the resumed step, or beside (-f 1)
void trainer_log_publish(Trainer *tr);               // a checkpoint committed: the log beside replaces the old one
void trainer_log_row(const Trainer *tr, const TrainLoop *loop, const StepResult *r);   // the step's row (rank 0)
void trainer_checkpoint(Trainer *tr, int step);      // the training state after `step` steps (collective)
void trainer_export(Trainer *tr);                    // DIR/model.bin, llm.c's format (collective)

// ---- report.c
void format_bytes(char *buf, size_t n, double bytes);   // "1.50 MiB"
// What a long phase is doing (rank 0), so a user watching a big model knows it is not stuck.
void progress(const Trainer *tr, const char *fmt, ...) __attribute__((format(printf, 2, 3)));
double model_flops_per_token(const Trainer *tr);        // the numerator of MFU
void trainer_report(Trainer *tr);                        // the startup report (rank 0)
double trainer_timeline(Trainer *tr, int step, double t0, double t1);   // the step's exposed ms, trace, prediction
void trainer_print_step(const Trainer *tr, const TrainLoop *loop, const StepResult *r);   // the step line (rank 0)
void trainer_summary(const Trainer *tr);                 // the end of the run (rank 0)

// ---- train.c
long long trainer_process_peak(const Trainer *tr);   // this rank's peak, the kernel's count (-1 unknown)
void trainer_gather_peaks(Trainer *tr);             // every rank's trainer_process_peak to rank 0 (collective)

// ---- evaluate.c
float trainer_validate(Trainer *tr);   // the mean val loss over -m batches per rank; NaN when a stop cut it short
void trainer_sample(Trainer *tr);      // -g tokens sampled after an EOT, printed by rank 0

// ---- stop.c
void install_stop_handlers(const Zero3Backend *be);   // and the backend's waits told of a stop (stop_source)
int trainer_stop_requested(const Trainer *tr);   // did any rank get a stop signal? (collective)
int trainer_stop_if_asked(Trainer *tr, const TrainLoop *loop, int step);   // after a whole step: the exit status, or 0
int trainer_stop_in_step(Trainer *tr, const TrainLoop *loop, const StepResult *r);   // a step given up: the exit status
