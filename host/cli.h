// host/cli.h: the command line both trainers share (docs/DESIGN.md section 3: the flags are a
// contract). Compiled once (cli.c).
#pragma once
#include "common.h"
#include "gpt2.h"   // GPT2Config, for the checks against the model

#ifdef __cplusplus
extern "C" {
#endif

typedef struct {
    const char *train_path, *val_path;   // -i -j
    const char *init;                     // -e: an llm.c model file or a descriptor dN / dLcChHtT
    const char *out_dir;                  // -o
    int B, T;                             // -b -t
    long long tokens_per_step;            // -d (0 = N*B*T)
    int steps;                            // -x
    float lr, final_frac;                 // -l -q
    int warmup;                           // -u
    float weight_decay;                   // -c
    float grad_clip;                      // -gc (0 = off)
    int stage;                            // -z
    int prefetch_depth;                   // -pd
    // the variants the notes teach (README "Variants"): FSDP's and DeepSpeed's knobs
    int shard_group;                      // -hs G: HSDP, shard within groups of G ranks (0 = all)
    int reshard_after_forward;            // -ra 0|1: 0 keeps units gathered until their backward
    int recompute;                        // -rc 0|1|2: activation recompute (2: the naive extra gather)
    long long persist_threshold;          // -pt N: units with fewer parameters stay replicated
    int clip_local;                       // -clip local: each rank clips by its own shard's norm (the pitfall)
    int wrap;                             // -wrap K|half: K blocks per unit, or attention and MLP apart (0 = 1)
    // ZeRO++ (docs/zeropp.md): ZeRO-3's communication cut three ways
    int quant_weights;                    // -qw 8: the params all-gather in int8 blocks (0 = exact)
    int hp_group;                         // -hp G: secondary shard in groups of G ranks, backward gathers inside (0 = off)
    int quant_grads;                      // -qg 8: gradients reduced by quantized all-to-all, in the group then across (0 = exact)
    int val_every, val_batches;           // -v -m
    int sample_every, gen_tokens;         // -s -g
    int ckpt_every, resume;               // -n -y
    int fresh;                            // -f 1: start over in an -o that holds an earlier run
    unsigned long long seed;              // -S
    const char *trace_path;               // -tr: Chrome trace-event JSON of the run
    int plan_world;                       // -plan N: print the plan for N ranks and exit (0 = off)
    double link_gbps, link_x_gbps;        // -bw -bwx (or -link -linkx): GB/s per rank inside a node / across nodes
    double link_latency_s, link_x_latency_s;   // -link -linkx G,LAT: seconds per ring step (0 = none)
    int links_emulated;                   // -link or -linkx given: a run holds its collectives for these links
    int ranks_per_node;                   // -rpn: ranks per node (0 = all on one node; -hs G: G)
    double tflops;                        // -tf: TFLOP/s per rank, achieved (planner)
    int ddp_only;                         // the DDP build (make DDP=1): fixed at stage 0
} TrainArgs;

// The flags of argv, read once: defaults, parsed, checked. Returns 1 when -h was given (rank 0 has
// printed the usage); a bad flag is one error line and exit 1 on every rank.
int args_read(TrainArgs *a, int argc, char **argv, int ddp_only);
// Sets every flag to its default. ddp_only: this binary is the DDP build (stage 0 only).
void args_defaults(TrainArgs *a, int ddp_only);
// Parses argv into a (defaults already set); a bad flag is one error line and exit 1 on every rank.
// Returns 1 if -h was given.
int args_parse(TrainArgs *a, int argc, char **argv);
void args_usage(const TrainArgs *a, const char *prog);   // rank 0 prints every flag
// A bare parameter count for -e with -plan: "7.5B", "350M", "1.5e9", "124k". Returns 1 and sets
// *n when s is one (n >= 1), 0 when s does not look like a number, -1 when it does but is not a
// valid count (an unknown suffix, zero, negative): then err says why.
int parse_param_count(const char *s, double *n, char *err, size_t errlen);

// The checks a run and the planner share (one error line each, the same words in both). Against
// N ranks (a run's world, or -plan N), 64-bit throughout: B*T fits an int, -d is a multiple of
// N*B*T and gives at most 10^6 micro-steps, -hs G divides N and is below it. Sets a->tokens_per_step
// when it is 0 (N*B*T) and returns A, the micro-steps per step.
int args_check_world(TrainArgs *a, int N);
// Against the model's shape: -wrap K divides its blocks, -t fits its context (maxT).
void args_check_model(const TrainArgs *a, const GPT2Config *cfg);

#ifdef __cplusplus
}
#endif
