// host/cli.h: the command line both trainers share (docs/DESIGN.md section 3: the flags are a
// contract). Compiled once (cli.c).
#pragma once
#include "common.h"
#include "gpt2.h"   // GPT2Config, for the checks against the model

#ifdef __cplusplus
extern "C" {
#endif

// What a binary is built as, which its flags can only confirm: the DDP build's stage 0, and a
// precision compiled in (the GPU trainer's PRECISION=BF16 or FP32; the CPU trainer has both, -p
// chooses). train_main fills it from its TrainBuild (train_args_build).
typedef enum { ARGS_PRECISION_EITHER = -1, ARGS_PRECISION_FP32 = 0, ARGS_PRECISION_BF16 = 1 } ArgsPrecision;
typedef struct {
    int ddp_only;             // built with DDP=1: -z 0 only
    ArgsPrecision precision;  // the one precision built in, which -p's default is and -p may only repeat
} ArgsBuild;

// Where a shard lives (-oo, -op): in the memory that computes with it (none), in host memory (the
// CPU trainer's memory already; the GPU trainer's pinned host memory), or in a per-rank file on disk.
typedef enum { OFFLOAD_NONE = 0, OFFLOAD_HOST = 1, OFFLOAD_DISK = 2 } OffloadPlace;
#define OFFLOAD_DIR_MAX 4096   // PATH_MAX: a folder longer than that is refused with its flag
// The disk bandwidth's range (-disk GB/s): 1 MB/s (a slow network disk) to 1 TB/s (beyond an array of
// NVMe drives), so that every planned I/O time is finite and above zero.
#define DISK_GBPS_MIN 1e-3
#define DISK_GBPS_MAX 1e3

// The flags' values (cli.c's table says which flag sets which field, its default and its range).
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
    int backward_prefetch;                // -bp pre|post: Zero3BackwardPrefetch (0 = pre, FSDP's BACKWARD_PRE)
    // the variants the notes teach (README "Variants"): FSDP's and DeepSpeed's knobs
    int shard_group;                      // -hs G: HSDP, shard within groups of G ranks (0 = all)
    int reshard_after_forward;            // -ra 0|1: 0 keeps units gathered until their backward
    int recompute;                        // -rc 0|1|2: activation recompute (2: the naive extra gather)
    long long persist_threshold;          // -pt N: units with fewer parameters stay replicated
    int clip_local;                       // -clip local: each rank clips by its own shard's norm (the pitfall)
    int update_in_backward;               // -ua 1: each unit's AdamW inside the backward, as its gradients are final (-gc 0)
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
    Zero3Link link, link_x;               // -link -linkx G[,LAT] (GB/s alone: -bw -bwx): each rank's links inside a node / across nodes
    int links_emulated;                   // -link or -linkx given: a run holds its collectives for these links
    int ranks_per_node;                   // -rpn: ranks per node (0 = all on one node; -hs G: G)
    double tflops;                        // -tf: TFLOP/s per rank, achieved (planner)
    double mem_gib;                       // -mem: GiB per rank the planner fits the largest model in (0 = off)
    double collective_timeout_s;          // -ct: a collective not done this long after it started ends the run
    // where this rank's shards live (docs/primer.md "Offload"): a placement, not a stage
    int offload_opt;                      // -oo: the optimizer shard (fp32 master, m, v): OFFLOAD_NONE, _HOST, _DISK
    char offload_opt_dir[OFFLOAD_DIR_MAX];      // -oo disk:DIR: its folder ("": the run's -o DIR/offload)
    int offload_params;                   // -op: the parameter shard too (-z 3): OFFLOAD_NONE or OFFLOAD_DISK
    char offload_params_dir[OFFLOAD_DIR_MAX];   // -op disk:DIR: its folder ("": the run's -o DIR/offload)
    int offload_slots;                    // -os: the unit-sized slots each file on disk stages in memory
    double disk_gbps;                     // -disk: the disk's GB/s, for the planner's I/O time
    int world;                            // not a flag: the N ranks args_validate checked the flags against
    ArgsBuild build;                      // what the binary fixes: the DDP build's stage, a built-in precision
    int bf16;                             // -p bf16: mixed precision (bf16 params and gradients, fp32 master, m, v)
} TrainArgs;

// ------------------------------------------------------------------------------------------------
// The table of flags (cli.c, ARGS_FLAGS): one entry a flag. The parser, -h, the range checks, the
// planner and the checkpoint's metadata read it. Adding a flag: its TrainArgs field above, its
// entry in the table, and the code that gives it its meaning.

// The ranges of an emulated or planned link (-link, -linkx G[,LAT]; -bw, -bwx G), spanning real
// networks with room on both sides: 1 MB/s (a slow WAN) to 10 TB/s (beyond NVLink 5's 1.8 TB/s a
// GPU), a latency per ring step above 0 (leave it out for none) up to 1 s (a congested WAN's round
// trip is ~0.3 s). Within them every hold is finite and representable: a 1e15-byte ring at 1 MB/s
// is 1e9 s plus its steps times 1 s, far from a double's limit, and no rate or time underflows.
#define LINK_GBPS_MIN 1e-3
#define LINK_GBPS_MAX 1e4
#define LINK_LATENCY_MIN_S 0.0   // exclusive: a latency given is above it
#define LINK_LATENCY_MAX_S 1.0
// A count's or a seed's upper bound when it is LLONG_MAX, the parser's own limit (2^63 as a double).
#define COUNT_MAX 9223372036854775807.0

typedef enum {
    FLAG_PATH,    // const char *: a file or folder name (lo = 1: it may not be empty)
    FLAG_INT,     // int in [lo, hi]
    FLAG_COUNT,   // long long in [lo, hi] ("expected" says what it counts)
    FLAG_SEED,    // unsigned long long in [lo, hi] (hi COUNT_MAX: up to 2^63-1)
    FLAG_FLOAT,   // float in [lo, hi]
    FLAG_REAL,    // double, read at float precision, in [lo, hi]
    FLAG_CUSTOM,  // its own parser (parse), which knows its field's type
} FlagType;

typedef struct Flag Flag;
struct Flag {
    const char *name;        // "-b"
    FlagType type;
    size_t field;            // offsetof(TrainArgs, ...): the field it sets
    const char *def;         // the default as it would be typed (NULL: zero, none)
    double lo, hi;           // the range, enforced and shown by -h (FLAG_CUSTOM: its parser's; 0, 0: no number)
    const char *expected;    // FLAG_COUNT, FLAG_SEED: what the value is, for the error line
    const char *metavar;     // -h: the value's name ("B", "0|1")
    const char *help;        // -h: what it does ('\n' continues on an indented line)
    const char *shown_def;   // -h: the default as said (NULL: def, or an integer's value; "": none said)
    int recorded;            // 1: meta.bin records it; a resume may change it
    const char *on_resume;   // recorded: what a resume with another value means (a warning), NULL: nothing to say
    const char *plan_leaves_out;   // -plan with it given: what of it the plan does not show (one line; NULL: all of it)
    void (*parse)(const Flag *f, const char *v, TrainArgs *a);   // FLAG_CUSTOM
};

extern const Flag ARGS_FLAGS[];
extern const int ARGS_NFLAGS;
// The flag named name, or NULL.
const Flag *args_flag(const char *name);
void args_check_offload_slots(const TrainArgs *a, int units);   // -os at most the model's units
// A flag's value in a: integers exactly (FLAG_INT, FLAG_COUNT, FLAG_SEED, FLAG_CUSTOM's ints),
// reals as doubles (FLAG_FLOAT, FLAG_REAL). args_flag_is_real says which one holds it.
int args_flag_is_real(const Flag *f);
long long args_flag_int(const Flag *f, const TrainArgs *a);
double args_flag_real(const Flag *f, const TrainArgs *a);
void args_flag_set_int(const Flag *f, TrainArgs *a, long long v);
void args_flag_set_real(const Flag *f, TrainArgs *a, double v);
// The range of f as -h and the error lines say it ("[1, 1048576]", "[0.001, 10000] GB/s, latency
// (0, 1] s"; "" for a flag that is not a number). Returns buf.
const char *args_flag_range(const Flag *f, char *buf, size_t n);
// f's value in a as a user types it ("bf16", "local", "half", "0.001"), for the messages. Returns buf.
const char *args_flag_text(const Flag *f, const TrainArgs *a, char *buf, size_t n);
// Whether a holds another value for f than the default (the flag was given, to another value).
int args_flag_given(const Flag *f, const TrainArgs *a);
// The planner (-plan N) takes every flag a run takes (args_validate is the one check of both); for each
// flag given whose effect the plan does not show, one line on stdout saying what it leaves out.
void args_print_plan_leaves_out(const TrainArgs *a);

// The flags of argv, read once: defaults, parsed, checked. Returns 1 when -h or --help-md was given
// (rank 0 has printed the usage or the table); a bad flag is one error line and exit 1 on every rank.
int args_read(TrainArgs *a, int argc, char **argv, ArgsBuild build);
// Sets every flag to its default on this build (the DDP build's stage 0, a built-in precision).
void args_defaults(TrainArgs *a, ArgsBuild build);
// Parses argv into a (defaults already set); a bad flag is one error line and exit 1 on every rank.
// Returns ARGS_HELP if -h was given, ARGS_HELP_MD for --help-md, else 0.
enum { ARGS_HELP = 1, ARGS_HELP_MD = 2 };
int args_parse(TrainArgs *a, int argc, char **argv);
void args_usage(const TrainArgs *a, const char *prog);   // rank 0 prints every flag (-h)
// Rank 0 prints the table of flags as Markdown, one row a flag: flag and value, meaning, default,
// range (--help-md: docs/formats.md's table is its output, checked by the docs test).
void args_usage_markdown(const TrainArgs *a);
// A bare parameter count for -e with -plan: "7.5B", "350M", "1.5e9", "124k". Returns 1 and sets
// *n when s is one (n >= 1), 0 when s does not look like a number, -1 when it does but is not a
// valid count (an unknown suffix, zero, negative): then err says why.
int parse_param_count(const char *s, double *n, char *err, size_t errlen);

// The one check of the flags against each other, the build and N ranks, which a run (N: its world,
// trainer_create) and the planner (N: -plan N, plan_main) both call, so that each refuses what the
// other refuses with the same line: the stage a variant needs, -o where checkpoints or a resume need
// it, 64-bit batch sums (B*T fits an int, -d a multiple of N*B*T giving at most 10^6 micro-steps),
// -hs G and -hp G dividing N, -linkx's nodes. Sets a->tokens_per_step when it is 0 (N*B*T) and
// returns A, the micro-steps per step. The checks against the model are args_check_model's.
int args_validate(TrainArgs *a, int N);
// Against the model's shape: -wrap K divides its blocks, -t fits its context (maxT); and, for a run
// (not -plan), the plan's peak against this machine's memory (plan_check_machine), before the model
// state is allocated.
void args_check_model(const TrainArgs *a, const GPT2Config *cfg);

#ifdef __cplusplus
}
#endif
