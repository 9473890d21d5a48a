// host/cli.c: parsing and checking the flags (see cli.h).
#include "cli.h"
#include <limits.h>
#include <stddef.h>
#include <sys/stat.h>
#include <unistd.h>
#include "gpt2.h"
#include "plan.h"   // plan_check_machine

static int parse_ll(const char *s, long long *out) {
    char *end;
    errno = 0;
    long long v = strtoll(s, &end, 10);
    if (errno || end == s || *end) return 0;
    *out = v;
    return 1;
}
// Integer flag within [lo, hi].
static int flag_int(const char *flag, const char *val, long long lo, long long hi) {
    long long v;
    if (!parse_ll(val, &v)) fatal("flag %s: expected an integer, got '%s'", flag, val);
    if (v < lo || v > hi) fatal("flag %s: %lld is out of range [%lld, %lld]", flag, v, lo, hi);
    return (int)v;
}
// A real flag within its range, compared before it is narrowed to a float (1e39 is out of range,
// not inf).
static double flag_real(const Flag *f, const char *val) {
    char *end, range[96];
    errno = 0;
    double v = strtod(val, &end);
    int overflow = errno == ERANGE && fabs(v) > 1.0;   // an underflow (1e-400) is judged by the tiny value it reads as
    if (!overflow && (end == val || *end || !isfinite(v))) fatal("flag %s: expected a number, got '%s'", f->name, val);
    if (overflow || v < f->lo || v > f->hi) fatal("flag %s: %s is out of range %s", f->name, val, args_flag_range(f, range, sizeof range));
    return v;
}
static void parse_link(const Flag *f, const char *v, TrainArgs *a);
static void parse_wrap(const Flag *f, const char *v, TrainArgs *a);
static void parse_offload_opt(const Flag *f, const char *v, TrainArgs *a);
static void parse_offload_params(const Flag *f, const char *v, TrainArgs *a);

// The bound of a range as typed: an integer in full (1048576), else %g (0.001, 1e+06).
static void bound_text(double x, char *buf, size_t n) {
    if (x >= COUNT_MAX) snprintf(buf, n, "%lld", LLONG_MAX);
    else if (x == floor(x) && fabs(x) < 1e17) snprintf(buf, n, "%.0f", x);
    else snprintf(buf, n, "%g", x);
}

const char *args_flag_range(const Flag *f, char *buf, size_t n) {
    char lo[32], hi[32];
    bound_text(f->lo, lo, sizeof lo);
    bound_text(f->hi, hi, sizeof hi);
    if (f->parse == parse_link)
        snprintf(buf, n, "[%g, %g] GB/s, latency (%g, %g] s", LINK_GBPS_MIN, LINK_GBPS_MAX, LINK_LATENCY_MIN_S, LINK_LATENCY_MAX_S);
    else if (f->parse == parse_wrap) snprintf(buf, n, "[%s, %s] or half", lo, hi);
    else if (f->type == FLAG_PATH || (f->type == FLAG_CUSTOM && f->hi == 0.0)) snprintf(buf, n, "%s", "");   // no number
    else snprintf(buf, n, "[%s, %s]", lo, hi);
    return buf;
}

// A count or a seed: an integer in [lo, hi]; one line saying what it is and its range otherwise.
static long long flag_count(const Flag *f, const char *v) {
    long long n;
    if (!parse_ll(v, &n) || n < (long long)f->lo || (f->hi < COUNT_MAX && n > (long long)f->hi)) {
        char range[96];
        fatal("flag %s: expected %s in %s, got '%s'", f->name, f->expected, args_flag_range(f, range, sizeof range), v);
    }
    return n;
}

// A number followed by one of the units in the table (the empty unit allowed only if listed):
// *value = number * scale. Returns 0 when the number or the unit is not one of them.
typedef struct { const char *unit; double scale; } UnitScale;
static int parse_with_unit(const char *s, const UnitScale *units, size_t nunits, double *value) {
    char *end;
    errno = 0;
    double v = strtod(s, &end);
    if (errno || end == s || !isfinite(v)) return 0;
    for (size_t i = 0; i < nunits; i++)
        if (!strcmp(end, units[i].unit)) { *value = v * units[i].scale; return 1; }
    return 0;
}

// A bandwidth in GB/s: a bare number, or with a unit a user might type (25GB/s, 25GB, 500MB/s,
// 200Gbit/s, 200Gb/s, 200Gbps).
static int parse_gbps(const char *s, double *gbps) {
    static const UnitScale units[] = {
        {"", 1.0}, {"GB/s", 1.0}, {"GB", 1.0}, {"GBps", 1.0}, {"MB/s", 1e-3}, {"MB", 1e-3}, {"TB/s", 1e3},
        {"Gbit/s", 0.125}, {"Gb/s", 0.125}, {"Gbps", 0.125}, {"Mbit/s", 1.25e-4}, {"Mb/s", 1.25e-4}, {"Mbps", 1.25e-4}};
    return parse_with_unit(s, units, sizeof units / sizeof units[0], gbps);
}

// A latency with its unit (10us, 10µs, 500ns, 1ms, 0.001s): a bare number is refused, its unit unknown.
static int parse_latency(const char *s, double *seconds) {
    static const UnitScale units[] = {{"ns", 1e-9}, {"us", 1e-6}, {"\xc2\xb5s", 1e-6}, {"ms", 1e-3}, {"s", 1.0}};
    return parse_with_unit(s, units, sizeof units / sizeof units[0], seconds);
}

// -link / -linkx GBPS[,LATENCY], each within its range (LINK_GBPS_*, LINK_LATENCY_*_S in cli.h);
// one error line naming the flag and the range otherwise.
static void flag_link(const char *flag, const char *v, double *gbps, double *latency_s) {
    char bw[64];
    const char *comma = strchr(v, ',');
    size_t n = comma ? (size_t)(comma - v) : strlen(v);
    if (n >= sizeof bw) fatal("flag %s: expected GB/s[,latency] like 25GB/s,10us, got '%s'", flag, v);
    memcpy(bw, v, n);
    bw[n] = '\0';
    if (!parse_gbps(bw, gbps))
        fatal("flag %s: bandwidth '%s' is not a number of GB/s (25, 25GB/s, 500MB/s, 200Gbit/s)", flag, bw);
    if (!(*gbps >= LINK_GBPS_MIN && *gbps <= LINK_GBPS_MAX))
        fatal("flag %s: bandwidth %s is out of range [%g, %g] GB/s", flag, bw, LINK_GBPS_MIN, LINK_GBPS_MAX);
    *latency_s = 0.0;
    if (!comma) return;
    if (!parse_latency(comma + 1, latency_s))
        fatal("flag %s: latency '%s' is not a time with its unit (500ns, 10us, 1ms, 0.01s)", flag, comma + 1);
    if (!(*latency_s > LINK_LATENCY_MIN_S && *latency_s <= LINK_LATENCY_MAX_S))
        fatal("flag %s: latency %s is out of range (%g, %g] s", flag, comma + 1, LINK_LATENCY_MIN_S, LINK_LATENCY_MAX_S);
}

// -wrap K|half: K blocks per unit (in the table's range), or each block's attention and MLP apart.
static void parse_wrap(const Flag *f, const char *v, TrainArgs *a) {
    a->wrap = !strcmp(v, "half") ? GPT2_WRAP_HALF : flag_int(f->name, v, (long long)f->lo, (long long)f->hi);
}

// -qw 8, -qg 8: the bit width of ZeRO++'s quantization, 8 only (int8 codes): the range [8, 8].
static void parse_bits(const Flag *f, const char *v, TrainArgs *a) {
    long long bits;
    char range[96];
    if (!parse_ll(v, &bits)) fatal("flag %s: expected an integer, got '%s'", f->name, v);
    if (bits < (long long)f->lo || bits > (long long)f->hi)
        fatal("flag %s: %s-bit quantization is not supported: the range is %s (int8 codes, one fp32 scale per block of %d)",
              f->name, v, args_flag_range(f, range, sizeof range), ZERO3_QUANT_BLOCK);
    args_flag_set_int(f, a, bits);
}

// -clip global|local: 1 for local (each rank clips by its own shard's norm).
static void parse_clip(const Flag *f, const char *v, TrainArgs *a) {
    if (strcmp(v, "global") && strcmp(v, "local")) fatal("flag %s: expected global or local, got '%s'", f->name, v);
    a->clip_local = !strcmp(v, "local");
}

// -p fp32|bf16: the working params' and gradients' precision (the master, m and v are fp32 either way).
// A build with one precision built in (the GPU's) takes only that one: the other would mean nothing.
static const char *const PRECISION_NAMES[2] = {"fp32", "bf16"};
static const char *const PRECISION_MAKE[2] = {"PRECISION=FP32", "PRECISION=BF16"};   // the GPU build's make setting
static void parse_precision(const Flag *f, const char *v, TrainArgs *a) {
    if (strcmp(v, "fp32") && strcmp(v, "bf16")) fatal("flag %s: expected fp32 or bf16, got '%s'", f->name, v);
    const int bf16 = !strcmp(v, "bf16");
    const ArgsPrecision built = a->build.precision;
    if (built != ARGS_PRECISION_EITHER && bf16 != (int)built)
        fatal("flag %s %s: this build is %s (built with %s); rebuild with %s", f->name, v, PRECISION_NAMES[built],
              PRECISION_MAKE[built], PRECISION_MAKE[bf16]);
    a->bf16 = bf16;
}

// -bp pre|post: where the backward's prefetch starts (zero3.h's Zero3BackwardPrefetch).
static void parse_backward_prefetch(const Flag *f, const char *v, TrainArgs *a) {
    if (strcmp(v, "pre") && strcmp(v, "post")) fatal("flag %s: expected pre or post, got '%s'", f->name, v);
    a->backward_prefetch = !strcmp(v, "post") ? ZERO3_BACKWARD_POST : ZERO3_BACKWARD_PRE;
}

// -oo, -op: a place, one of the words the flag takes (host only for -oo), and for disk an optional
// folder after a colon: "disk:DIR". The folder is kept as typed; args_validate checks it on disk.
static void parse_offload(const Flag *f, const char *v, int takes_host, int *place, char *dir) {
    const char *words = takes_host ? "none, host, disk or disk:DIR" : "none, disk or disk:DIR";
    dir[0] = '\0';
    if (!strcmp(v, "none")) *place = OFFLOAD_NONE;
    else if (takes_host && !strcmp(v, "host")) *place = OFFLOAD_HOST;
    else if (!strcmp(v, "disk")) *place = OFFLOAD_DISK;
    else if (!strncmp(v, "disk:", 5)) {
        const char *d = v + 5;
        if (!*d) fatal("flag %s: disk: names no folder; give disk:DIR, or disk for the run's -o DIR/offload", f->name);
        if (strlen(d) >= OFFLOAD_DIR_MAX) fatal("flag %s: the folder is longer than %d characters", f->name, OFFLOAD_DIR_MAX - 1);
        *place = OFFLOAD_DISK;
        snprintf(dir, OFFLOAD_DIR_MAX, "%s", d);
    } else fatal("flag %s: expected %s, got '%s'", f->name, words, v);
}
static void parse_offload_opt(const Flag *f, const char *v, TrainArgs *a) {
    parse_offload(f, v, 1, &a->offload_opt, a->offload_opt_dir);
}
static void parse_offload_params(const Flag *f, const char *v, TrainArgs *a) {
    parse_offload(f, v, 0, &a->offload_params, a->offload_params_dir);
}
static const char *const OFFLOAD_NAMES[3] = {"none", "host", "disk"};

// -link, -linkx GBPS[,LATENCY]: the whole link, and a run that holds its collectives for it.
static void parse_link(const Flag *f, const char *v, TrainArgs *a) {
    Zero3Link *link = (Zero3Link *)((char *)a + f->field);
    flag_link(f->name, v, &link->gbps, &link->latency_s);
    a->links_emulated = 1;
}

// A flag's value as a user types it (-p bf16, -clip local, -wrap half, -l 0.001), for the messages
// that quote it: each custom flag by the words its parser takes, the others by their type.
const char *args_flag_text(const Flag *f, const TrainArgs *a, char *buf, size_t n) {
    if (f->parse == parse_precision) snprintf(buf, n, "%s", PRECISION_NAMES[a->bf16 ? 1 : 0]);
    else if (f->parse == parse_clip) snprintf(buf, n, "%s", a->clip_local ? "local" : "global");
    else if (f->parse == parse_backward_prefetch) snprintf(buf, n, "%s", a->backward_prefetch == ZERO3_BACKWARD_POST ? "post" : "pre");
    else if (f->parse == parse_wrap && a->wrap == GPT2_WRAP_HALF) snprintf(buf, n, "half");
    else if (f->parse == parse_offload_opt || f->parse == parse_offload_params) {
        const int opt = f->parse == parse_offload_opt;
        const char *dir = opt ? a->offload_opt_dir : a->offload_params_dir;
        snprintf(buf, n, "%s%s%s", OFFLOAD_NAMES[opt ? a->offload_opt : a->offload_params], dir[0] ? ":" : "", dir);
    }
    else if (f->parse == parse_link) {
        const Zero3Link *link = (const Zero3Link *)((const char *)a + f->field);
        if (link->latency_s > 0.0) snprintf(buf, n, "%gGB/s,%gs", link->gbps, link->latency_s);
        else snprintf(buf, n, "%gGB/s", link->gbps);
    } else if (args_flag_is_real(f)) snprintf(buf, n, "%g", args_flag_real(f, a));
    else if (f->type == FLAG_SEED) snprintf(buf, n, "%llu", (unsigned long long)args_flag_int(f, a));
    else snprintf(buf, n, "%lld", args_flag_int(f, a));
    return buf;
}

// ------------------------------------------------------------------------------------------------
// The flags. Each entry: name, type, the field it sets, default, range; then by name what a count
// is, its parser (FLAG_CUSTOM), -h's value name, help and shown default, whether meta.bin records it
// and what a resume with another value means, and why the planner refuses it. The model's shape and unit layout (-e, -wrap) are
// the checkpoint's own, not flags: ckpt_meta_check_model compares them.
#define F(field) offsetof(TrainArgs, field)
#define BIG 100000000
static const char SCHEDULE_CHANGED[] = "the LR schedule from here on differs from an uninterrupted run's";
static const char BATCH_CHANGED[] = "the data order follows the step index, so the tokens differ from an uninterrupted run's";
const Flag ARGS_FLAGS[] = {
    // the run: data, model, output folder
    {"-i", FLAG_PATH, F(train_path), "data/tinyshakespeare/tiny_shakespeare_train.bin", 0, 0,
     .metavar = "FILE", .help = "train tokens (llm.c format)"},
    {"-j", FLAG_PATH, F(val_path), "data/tinyshakespeare/tiny_shakespeare_val.bin", 0, 0,
     .metavar = "FILE", .help = "val tokens"},
    {"-e", FLAG_PATH, F(init), "d12", 0, 0, .metavar = "X",
     .help = "init: an llm.c model .bin, or dN (GPT-2 of depth N; d12 = 124M),\n"
             "or dLcChHtT (e.g. d2c64h2t64: L=2 C=64 NH=2 maxT=64)"},
    {"-o", FLAG_PATH, F(out_dir), NULL, 0, 0, .metavar = "DIR", .help = "output: log.csv, checkpoints, exported model",
     .shown_def = "none"},
    // the batch and the optimizer: recorded, a resume may change them
    {"-b", FLAG_INT, F(B), "4", 1, 1 << 20, .metavar = "B", .help = "micro-batch per rank",
     .recorded = 1, .on_resume = BATCH_CHANGED},
    {"-t", FLAG_INT, F(T), "64", 1, 1 << 20, .metavar = "T", .help = "sequence length (at most the model's maxT)",
     .recorded = 1, .on_resume = BATCH_CHANGED},
    {"-d", FLAG_COUNT, F(tokens_per_step), NULL, 1, 1e15, .expected = "a positive token count", .metavar = "TOK",
     .help = "tokens per optimizer step, a multiple of N*B*T (gives A micro-steps)", .shown_def = "N*B*T",
     .recorded = 1, .on_resume = BATCH_CHANGED},
    {"-x", FLAG_INT, F(steps), "20", 1, BIG, .metavar = "S", .help = "steps",
     .recorded = 1, .on_resume = SCHEDULE_CHANGED},
    {"-l", FLAG_FLOAT, F(lr), "3e-4", 0, 10, .metavar = "LR", .help = "peak learning rate",
     .recorded = 1, .on_resume = SCHEDULE_CHANGED},
    {"-u", FLAG_INT, F(warmup), "0", 0, BIG, .metavar = "W", .help = "warmup steps",
     .recorded = 1, .on_resume = SCHEDULE_CHANGED},
    {"-q", FLAG_FLOAT, F(final_frac), "1.0", 0, 1, .metavar = "F", .help = "final LR fraction (cosine decay to F*LR; 1 = constant)",
     .recorded = 1, .on_resume = SCHEDULE_CHANGED},
    {"-c", FLAG_FLOAT, F(weight_decay), "0", 0, 10, .metavar = "WD", .help = "weight decay, on the six matrices only (wte wpe qkvw attprojw fcw fcprojw)",
     .recorded = 1, .on_resume = SCHEDULE_CHANGED},
    {"-gc", FLAG_FLOAT, F(grad_clip), "1.0", 0, 1e6, .metavar = "G", .help = "max global grad norm, 0 = no clipping",
     .recorded = 1, .on_resume = SCHEDULE_CHANGED},
    // ZeRO and its variants (-z recorded: a resume at another stage reshards, and its line says so)
    {"-z", FLAG_INT, F(stage), "3", 0, 3, .metavar = "Z", .help = "ZeRO stage 0 (DDP), 1, 2, 3 (the DDP build, make DDP=1, takes 0 only)",
     .recorded = 1},
    {"-pd", FLAG_INT, F(prefetch_depth), "1", 0, 64, .metavar = "P", .help = "stage-3 prefetch depth (units gathered ahead)"},
    {"-bp", FLAG_CUSTOM, F(backward_prefetch), NULL, 0, 0, .parse = parse_backward_prefetch, .metavar = "pre|post",
     .help = "backward prefetch (-z 3): pre starts the next units' gathers before this unit's gradient\n"
             "compute (FSDP's BACKWARD_PRE), post after it, once its params are freed (one unit fewer live)",
     .shown_def = "pre"},
    {"-hs", FLAG_INT, F(shard_group), NULL, 1, 1 << 20, .metavar = "G",
     .help = "HSDP: shard within groups of G consecutive ranks, replicate across groups (G divides N; -z 1-3)",
     .shown_def = "off"},
    {"-ra", FLAG_INT, F(reshard_after_forward), "1", 0, 1, .metavar = "0|1",
     .help = "reshard after forward; 0 keeps each unit gathered until its backward (-z 3)"},
    {"-rc", FLAG_INT, F(recompute), "0", 0, 2, .metavar = "0|1|2",
     .help = "activation recompute: 1 inside the backward's gather, 2 with its own gather (the pitfall)"},
    {"-pt", FLAG_COUNT, F(persist_threshold), "0", 0, 1e16, .expected = "a parameter count", .metavar = "N",
     .help = "persistence threshold: units with fewer than N parameters stay replicated (-z 1-3)",
     .plan_leaves_out = "persistent units are not modelled: the plan lays every unit out by its stage, so a run's state "
                        "is larger by the replicated units' shards (its startup report shows them)"},
    {"-p", FLAG_CUSTOM, F(bf16), NULL, 0, 0, .parse = parse_precision, .metavar = "fp32|bf16",
     .help = "precision of the working params and gradients; bf16: 2 + 2 bytes a parameter, gathered and\n"
             "reduced as bf16, beside the fp32 master, m, v (12 bytes); checkpoints hold the fp32 master;\n"
             "the GPU trainer is built for one (make PRECISION=BF16 or FP32) and takes only that one",
     .recorded = 1,
     .on_resume = "the checkpoint holds the fp32 master, m and v, so the run goes on from them with the working params "
                  "and gradients in the new precision",
     .plan_leaves_out = NULL},
    {"-clip", FLAG_CUSTOM, F(clip_local), NULL, 0, 0, .parse = parse_clip, .metavar = "global|local",
     .help = "local: each rank clips by its own shard's norm (the pitfall, on purpose)", .shown_def = "global",
     .plan_leaves_out = "local changes the losses, not the memory or traffic: the plan is that of -clip global"},
    {"-ua", FLAG_INT, F(update_in_backward), "0", 0, 1, .metavar = "0|1",
     .help = "update as each unit's gradients are final: AdamW on a unit's shard inside the backward, once its\n"
             "reduction completes (the textbook's stage-3 order; bitwise the update after the backward). Needs -gc 0:\n"
             "clipping scales every update by the norm of all gradients; and the state in memory, no -hs",
     .plan_leaves_out = "it moves AdamW, not the memory or traffic: the plan is that of -ua 0"},
    {"-wrap", FLAG_CUSTOM, F(wrap), NULL, 1, GPT2_WRAP_MAX, .parse = parse_wrap, .metavar = "K|half",
     .help = "unit granularity: K blocks per unit (K divides L, at most 8), or each block's\n"
             "attention and MLP as two units (too-fine units: pitfall 2, docs/primer.md)", .shown_def = "1"},
    // ZeRO++
    {"-qw", FLAG_CUSTOM, F(quant_weights), NULL, 8, 8, .parse = parse_bits, .metavar = "8",
     .help = "ZeRO++ qwZ: gather params as int8 blocks with a scale each (-z 3)", .shown_def = "off"},
    {"-hp", FLAG_INT, F(hp_group), NULL, 1, 1 << 20, .metavar = "G",
     .help = "ZeRO++ hpZ: keep a secondary shard in groups of G ranks; backward gathers stay in the group (-z 3)",
     .shown_def = "off"},
    {"-qg", FLAG_CUSTOM, F(quant_grads), NULL, 8, 8, .parse = parse_bits, .metavar = "8",
     .help = "ZeRO++ qgZ: reduce gradients as int8 blocks, all-to-all in the -hp group then across (-z 3)",
     .shown_def = "off"},
    // what the run does besides training
    {"-v", FLAG_INT, F(val_every), "10", 0, BIG, .metavar = "n", .help = "val every n steps and after the last (0 off)"},
    {"-m", FLAG_INT, F(val_batches), "4", 1, 1000000, .metavar = "n", .help = "val batches per rank"},
    {"-s", FLAG_INT, F(sample_every), "0", 0, BIG, .metavar = "n", .help = "sample every n steps (0 off)"},
    {"-g", FLAG_INT, F(gen_tokens), "64", 1, 1 << 20, .metavar = "n", .help = "tokens to generate"},
    {"-n", FLAG_INT, F(ckpt_every), "0", 0, BIG, .metavar = "n", .help = "checkpoint every n steps (0 off; needs -o)"},
    {"-y", FLAG_INT, F(resume), "0", 0, 1, .metavar = "1", .help = "resume from the latest checkpoint in -o"},
    {"-f", FLAG_INT, F(fresh), "0", 0, 1, .metavar = "1",
     .help = "start over in an -o that holds an earlier run's checkpoints or log (they are kept\n"
             "until this run's first checkpoint is complete; without -y 1 or -f 1 such an -o is refused)"},
    {"-S", FLAG_SEED, F(seed), "1337", 0, COUNT_MAX, .expected = "an integer seed", .metavar = "SEED",
     .help = "seed for init and sampling", .recorded = 1, .on_resume = "the sampling RNG continues from the checkpoint"},
    {"-tr", FLAG_PATH, F(trace_path), NULL, 1, 0, .metavar = "FILE",
     .help = "write a Chrome trace-event JSON of the run (open in Perfetto / chrome://tracing)", .shown_def = "none"},
    // the planner, its links and compute rate (-link, -linkx: a run's emulated links too)
    {"-plan", FLAG_INT, F(plan_world), NULL, 1, 1 << 24, .metavar = "N",
     .help = "print the memory and communication plan for N ranks and the model of -e (which may\n"
             "also be a parameter count: 7.5B, 350M, 1.5e9), allocate nothing, read no data, exit", .shown_def = "off"},
    {"-link", FLAG_CUSTOM, F(link), NULL, 0, 0, .parse = parse_link, .metavar = "G[,LAT]",
     .help = "links: GB/s each rank sends inside a node (25, 25GB/s, 200Gbit/s) and the latency of\n"
             "a ring step (10us, 1ms); a run holds each collective for the ring model's time (docs/time.md)",
     .shown_def = "none"},
    {"-linkx", FLAG_CUSTOM, F(link_x), NULL, 0, 0, .parse = parse_link, .metavar = "G[,LAT]",
     .help = "the same across nodes (nodes: -rpn R ranks, or the -hs G groups)", .shown_def = "-link"},
    {"-bw", FLAG_REAL, F(link.gbps), NULL, LINK_GBPS_MIN, LINK_GBPS_MAX, .metavar = "G", .help = "planner: GB/s each rank sends inside a node (ring links)",
     .shown_def = "none"},
    {"-bwx", FLAG_REAL, F(link_x.gbps), NULL, LINK_GBPS_MIN, LINK_GBPS_MAX, .metavar = "G", .help = "planner: GB/s each rank sends across nodes",
     .shown_def = "-bw"},
    {"-rpn", FLAG_INT, F(ranks_per_node), NULL, 1, 1 << 24, .metavar = "R", .help = "planner: ranks per node",
     .shown_def = "N (one node)"},
    {"-tf", FLAG_REAL, F(tflops), NULL, 1e-3, 1e6, .metavar = "F", .help = "planner: TFLOP/s each rank achieves", .shown_def = "none"},
    {"-mem", FLAG_REAL, F(mem_gib), NULL, 1e-3, 1e6, .metavar = "M",
     .help = "planner: GiB per rank; prints per stage the deepest GPT-2 of -e's width whose peak fits",
     .shown_def = "off"},
    // where the shards live (docs/primer.md "Offload"): a placement, at any stage (-op: ZeRO-3's)
    {"-oo", FLAG_CUSTOM, F(offload_opt), NULL, 0, 0, .parse = parse_offload_opt, .metavar = "none|host|disk[:DIR]",
     .help = "offload the optimizer shard (fp32 master, m, v): host keeps it in host memory (the CPU\n"
             "trainer's is there already: the same placement; the GPU trainer's pinned, AdamW on the host),\n"
             "disk in a per-rank file in DIR (default -o DIR/offload), streamed unit by unit in the step",
     .shown_def = "none"},
    {"-op", FLAG_CUSTOM, F(offload_params), NULL, 0, 0, .parse = parse_offload_params, .metavar = "none|disk[:DIR]",
     .help = "offload the parameter shard too (-z 3; with -p fp32 it is the master itself): a per-rank\n"
             "file in DIR (default -o DIR/offload), read just before each gather, never held, and\n"
             "written back by AdamW",
     .shown_def = "none"},
    {"-os", FLAG_INT, F(offload_slots), "3", 3, 4096, .metavar = "S",
     .help = "offload slots: how many units' records each file of -oo disk, -op disk stages in memory\n"
             "(3: unit k+1 read, k updated, k-1 written back); more let the disk work through the\n"
             "forward and backward too (the last units' write-backs, the next step's first reads)"},
    {"-disk", FLAG_REAL, F(disk_gbps), "0.8", DISK_GBPS_MIN, DISK_GBPS_MAX, .metavar = "G",
     .help = "planner: GB/s of each rank's disk (reads and writes together), for -plan's I/O time of -oo disk, -op disk"},
    // the watchdog
    {"-ct", FLAG_REAL, F(collective_timeout_s), "300", 1, 604800, .metavar = "SEC",
     .help = "collective timeout: a collective not complete SEC seconds after it started ends every\n"
             "rank with one error line (a peer or its link is down); shorter stalls are reported"},
};
const int ARGS_NFLAGS = (int)(sizeof ARGS_FLAGS / sizeof ARGS_FLAGS[0]);
#undef F
#undef BIG

const Flag *args_flag(const char *name) {
    for (int i = 0; i < ARGS_NFLAGS; i++)
        if (!strcmp(ARGS_FLAGS[i].name, name)) return &ARGS_FLAGS[i];
    return NULL;
}

// ------------------------------------------------------------------------------------------------
// A flag's field, by its type

static void *field_of(const Flag *f, const TrainArgs *a) { return (char *)a + f->field; }

int args_flag_is_real(const Flag *f) { return f->type == FLAG_FLOAT || f->type == FLAG_REAL; }

long long args_flag_int(const Flag *f, const TrainArgs *a) {
    void *p = field_of(f, a);
    if (f->type == FLAG_COUNT) return *(long long *)p;
    if (f->type == FLAG_SEED) return (long long)*(unsigned long long *)p;
    return *(int *)p;   // FLAG_INT and the custom flags' ints
}
double args_flag_real(const Flag *f, const TrainArgs *a) {
    void *p = field_of(f, a);
    return f->type == FLAG_FLOAT ? (double)*(float *)p : *(double *)p;
}
void args_flag_set_int(const Flag *f, TrainArgs *a, long long v) {
    void *p = field_of(f, a);
    if (f->type == FLAG_COUNT) *(long long *)p = v;
    else if (f->type == FLAG_SEED) *(unsigned long long *)p = (unsigned long long)v;
    else *(int *)p = (int)v;
}
void args_flag_set_real(const Flag *f, TrainArgs *a, double v) {
    void *p = field_of(f, a);
    if (f->type == FLAG_FLOAT) *(float *)p = (float)v;
    else *(double *)p = v;
}

// The bytes of f's field (what args_flag_given compares).
static size_t field_size(const Flag *f) {
    if (f->type == FLAG_PATH) return sizeof(const char *);
    if (f->type == FLAG_COUNT || f->type == FLAG_SEED) return sizeof(long long);
    if (f->type == FLAG_FLOAT) return sizeof(float);
    if (f->type == FLAG_REAL) return sizeof(double);
    return f->parse == parse_link ? sizeof(Zero3Link) : sizeof(int);
}

int args_flag_given(const Flag *f, const TrainArgs *a) {
    TrainArgs d;
    args_defaults(&d, a->build);
    if (f->type == FLAG_PATH) {
        const char *v = *(const char **)field_of(f, a), *dv = *(const char **)field_of(f, &d);
        return (v == NULL) != (dv == NULL) || (v && strcmp(v, dv));
    }
    return memcmp(field_of(f, a), field_of(f, &d), field_size(f)) != 0;
}

// Sets f from v, checked against its range: one error line naming the flag otherwise.
static void flag_set(const Flag *f, const char *v, TrainArgs *a) {
    switch (f->type) {
    case FLAG_PATH:
        if (strlen(v) < (size_t)f->lo) fatal("flag %s: expected a file name", f->name);
        *(const char **)field_of(f, a) = v;
        break;
    case FLAG_INT: args_flag_set_int(f, a, flag_int(f->name, v, (long long)f->lo, (long long)f->hi)); break;
    case FLAG_COUNT: case FLAG_SEED: args_flag_set_int(f, a, flag_count(f, v)); break;
    case FLAG_FLOAT: case FLAG_REAL: args_flag_set_real(f, a, (float)flag_real(f, v)); break;   // float precision
    case FLAG_CUSTOM: f->parse(f, v, a); break;
    }
}

// ------------------------------------------------------------------------------------------------
// Defaults and usage

void args_defaults(TrainArgs *a, ArgsBuild build) {
    memset(a, 0, sizeof(*a));
    a->build = build;
    for (int i = 0; i < ARGS_NFLAGS; i++)
        if (ARGS_FLAGS[i].def) flag_set(&ARGS_FLAGS[i], ARGS_FLAGS[i].def, a);
    if (build.ddp_only) a->stage = 0;   // the DDP build is fixed at stage 0
    if (build.precision != ARGS_PRECISION_EITHER) a->bf16 = build.precision;   // and a GPU build at its precision
}

// A flag's default as -h and --help-md say it, "" when there is none to say: the table's words
// (shown_def), an integer as this build holds it (the DDP build's -z 0), -p's the build's precision.
static void default_text(const Flag *f, const TrainArgs *a, char *buf, size_t n) {
    buf[0] = '\0';
    if (f->parse == parse_precision) {
        if (a->build.precision == ARGS_PRECISION_EITHER) snprintf(buf, n, "%s", PRECISION_NAMES[a->bf16]);
        else snprintf(buf, n, "%s (built with %s)", PRECISION_NAMES[a->bf16], PRECISION_MAKE[a->bf16]);
    } else if (f->shown_def) snprintf(buf, n, "%s", f->shown_def);
    else if (f->def && f->type == FLAG_INT) snprintf(buf, n, "%lld", args_flag_int(f, a));
    else if (f->def) snprintf(buf, n, "%s", f->def);
}

// One flag's lines of -h: "  -b B      micro-batch per rank               default 4" (the help's
// further lines indented under the first; the default, when there is one to say, on the last).
static void usage_flag(const Flag *f, const TrainArgs *a) {
    char head[64], line[512], def[96];
    snprintf(head, sizeof head, "%s %s", f->name, f->metavar);
    int n = snprintf(line, sizeof line, strlen(head) < 10 ? "  %-10s" : "  %s  ", head);
    for (const char *h = f->help; *h; h++) {
        if (*h == '\n') { printf("%s\n", line); n = snprintf(line, sizeof line, "%12s", ""); continue; }
        if (n < (int)sizeof line - 1) { line[n++] = *h; line[n] = '\0'; }
    }
    default_text(f, a, def, sizeof def);
    char range[96], tail[224] = "";
    args_flag_range(f, range, sizeof range);
    if (def[0]) snprintf(tail, sizeof tail, " default %s%s", def, range[0] ? "," : "");
    if (range[0]) snprintf(tail + strlen(tail), sizeof tail - strlen(tail), " range %s", range);
    if (tail[0]) printf("%-*s%s\n", n < 46 ? 46 : n + 2, line, tail);
    else printf("%s\n", line);
}

void args_usage(const TrainArgs *a, const char *prog) {
    if (proc_rank() != 0) return;
    printf("usage: %s [flags]   (mpirun -np N %s [flags] for N ranks)\n", prog, prog);
    for (int i = 0; i < ARGS_NFLAGS; i++) usage_flag(&ARGS_FLAGS[i], a);
    printf("  -h        this help (--help-md: the same table in Markdown, as docs/formats.md shows it)\n");
}

// Text for a cell of a Markdown table: a '|' escaped (in a code span too), a line break a space,
// and outside code a '*' escaped, so that N*B*T is not read as emphasis.
static void markdown_cell(const char *text, int code) {
    for (const char *c = text; *c; c++) {
        if (*c == '|' || (*c == '*' && !code)) printf("\\%c", *c);
        else putchar(*c == '\n' ? ' ' : *c);
    }
}

void args_usage_markdown(const TrainArgs *a) {
    if (proc_rank() != 0) return;
    printf("| flag | meaning | default | range |\n|---|---|---|---|\n");
    for (int i = 0; i < ARGS_NFLAGS; i++) {
        const Flag *f = &ARGS_FLAGS[i];
        char def[96], range[96];
        default_text(f, a, def, sizeof def);
        args_flag_range(f, range, sizeof range);
        printf("| `%s ", f->name);
        markdown_cell(f->metavar, 1);
        printf("` | ");
        markdown_cell(f->help, 0);
        printf(" | ");
        markdown_cell(def, 0);
        printf(" | ");
        markdown_cell(range, 0);
        printf(" |\n");
    }
}

// ------------------------------------------------------------------------------------------------
// The checks between flags (args_validate): a run on N ranks and -plan N call the same code, so
// every combination one refuses the other refuses with the same line.

// ZeRO++ is built on ZeRO-3's gathers and reduce-scatters: each flag needs -z 3, and -hp's groups
// would duplicate HSDP's (under -hs every gather already stays inside its group).
static void check_zeropp(const TrainArgs *a) {
    const char *flag = a->quant_weights ? "-qw" : a->hp_group ? "-hp" : a->quant_grads ? "-qg" : NULL;
    if (!flag) return;
    if (a->stage != 3) fatal("flag %s: ZeRO++ builds on ZeRO-3's gathers and reductions (-z 3); got -z %d", flag, a->stage);
    if (a->hp_group && a->shard_group)
        fatal("flag -hp: with HSDP (-hs) every gather already stays inside its shard group; use one of the two");
}

// -bp post moves the backward's prefetch: it needs backward gathers (-z 3, -ra 1) and a prefetch
// (-pd >= 1), else it would change nothing.
static void check_backward_prefetch(const TrainArgs *a) {
    if (a->backward_prefetch != ZERO3_BACKWARD_POST) return;
    if (a->stage != 3)
        fatal("flag -bp post: only ZeRO-3 gathers params in the backward (-z 3); at -z %d they stay whole", a->stage);
    if (!a->reshard_after_forward)
        fatal("flag -bp post: with -ra 0 every unit stays gathered from its forward to its backward, so the backward "
              "gathers nothing to prefetch");
    if (a->prefetch_depth == 0) fatal("flag -bp post: with -pd 0 nothing is prefetched; give -pd 1 or more");
}

// -e: a parameter count describes a model to plan for, not one to train (-plan N takes one).
static void check_init(const TrainArgs *a) {
    if (a->plan_world) return;
    double n;
    char err[256];
    struct stat st;   // a path that exists is a model file (checked later, never opened here: a FIFO would block)
    if (stat(a->init, &st) != 0 && parse_param_count(a->init, &n, err, sizeof err) == 1)
        fatal("flag -e: %s is a parameter count: only the planner (-plan N) takes one; train a descriptor "
              "like d12 or a model file", a->init);
}

// -oo disk, -op disk: the folder the state files go in. A run needs it to be a folder it may write
// (an explicit DIR exists already; the default is -o DIR/offload, so -o is needed). The planner
// reads and writes no file, so it checks only the flags.
static void check_offload_dir(const TrainArgs *a, const char *flag, int place, const char *dir) {
    if (place != OFFLOAD_DISK || a->plan_world) return;
    if (!dir[0]) {
        if (!a->out_dir) fatal("flag %s disk: the state files go in -o DIR/offload; give -o DIR, or %s disk:DIR", flag, flag);
        return;
    }
    struct stat st;
    if (stat(dir, &st) != 0) fatal("flag %s: folder '%s': %s", flag, dir, strerror(errno));
    if (!S_ISDIR(st.st_mode)) fatal("flag %s: '%s' is not a folder", flag, dir);
    if (access(dir, W_OK | X_OK) != 0) fatal("flag %s: folder '%s' is not writable: %s", flag, dir, strerror(errno));
}

// Offload is a placement at any stage, but only ZeRO-3 holds the parameters as a shard between uses:
// at -z 0-2 every rank keeps them whole for the forward, so there is no shard to leave on disk.
static void check_offload(const TrainArgs *a) {
    if (a->offload_params && a->stage != 3)
        fatal("flag -op: only ZeRO-3 keeps the parameters as shards between their gathers (-z 3); at -z %d every rank "
              "holds them whole", a->stage);
    check_offload_dir(a, "-oo", a->offload_opt, a->offload_opt_dir);
    check_offload_dir(a, "-op", a->offload_params, a->offload_params_dir);
    if (args_flag_given(args_flag("-os"), a) && a->offload_opt != OFFLOAD_DISK && a->offload_params != OFFLOAD_DISK)
        fatal("flag -os: the slots stage the files on disk, and this run has none: give -oo disk or -op disk");
}

// -ua 1 only where a unit's update needs nothing but its own final gradients: then each unit's AdamW
// inside the backward is bitwise the update after it. Gradient accumulation (-d) is no obstacle (a
// unit's gradients are final at the last micro-step's reduction), nor any stage, -ra, -rc or ZeRO++.
static void check_update_in_backward(const TrainArgs *a) {
    if (!a->update_in_backward) return;
    if (a->grad_clip > 0.0f)
        fatal("flag -ua 1 with -gc %g: global clipping scales every unit's update by the norm of all units' gradients, "
              "known only after the last reduction; give -gc 0", a->grad_clip);
    if (a->clip_local)
        fatal("flag -ua 1 with -clip local: the local norm needs the whole shard's gradients before any update; leave -clip out");
    if (a->offload_opt == OFFLOAD_DISK || a->offload_params == OFFLOAD_DISK)
        fatal("flag -ua 1 with %s disk: the state on disk streams through its slots in unit order during the optimizer "
              "step, not in the backward's; give -ua 0", a->offload_opt == OFFLOAD_DISK ? "-oo" : "-op");
    if (a->offload_opt == OFFLOAD_HOST)
        fatal("flag -ua 1 with -oo host: the host's AdamW takes the step's gradients at once after the backward; give -ua 0");
    if (a->shard_group)
        fatal("flag -ua 1 with -hs %d: under HSDP a unit's gradients are final only after the step's all-reduce across "
              "the replica groups; give -ua 0", a->shard_group);
}

// Flags that contradict each other or the build, whatever the number of ranks: one error line each.
static void check_flags(const TrainArgs *a) {
    check_init(a);
    if (a->build.ddp_only && a->stage != 0) fatal("flag -z: this binary is the DDP build (make DDP=1), fixed at stage 0; got -z %d", a->stage);
    if (a->ckpt_every > 0 && !a->out_dir) fatal("flag -n: checkpoints need an output directory (-o DIR)");
    if (a->resume && !a->out_dir) fatal("flag -y: resuming needs the output directory of the run (-o DIR)");
    // a variant with a stage where it means nothing is a mistake, not a no-op
    if (a->shard_group && a->stage == 0) fatal("flag -hs: HSDP shards the model state within groups; at -z 0 (DDP) nothing is sharded");
    if (!a->reshard_after_forward && a->stage != 3)
        fatal("flag -ra 0: only ZeRO-3 reshards params after the forward (-z 3); at -z %d they stay whole", a->stage);
    check_backward_prefetch(a);
    if (a->persist_threshold && a->stage == 0) fatal("flag -pt: at -z 0 (DDP) every unit is replicated already");
    if (a->recompute == 2 && a->wrap == GPT2_WRAP_HALF)
        fatal("flag -rc 2 with -wrap half: the naive recompute gathers one unit per block; use -rc 1 (or -wrap 1)");
    if (a->mem_gib > 0.0 && !a->plan_world)
        fatal("flag -mem: it asks the planner for the largest model that fits in M GiB per rank; give it with -plan N");
    if (a->resume && a->fresh) fatal("flags -y 1 and -f 1: resume, or start over, not both");
    if (a->links_emulated && a->link_x.gbps > 0.0 && !a->shard_group && !a->ranks_per_node)
        fatal("flag -linkx: links across nodes need nodes: give -rpn R (ranks per node) or HSDP groups (-hs G)");
    check_zeropp(a);
    check_offload(a);
    check_update_in_backward(a);
}

// -os against the model's units (known once it is laid out: the run's, the planner's): a slot holds
// one unit's record, so more slots than units would hold nothing.
void args_check_offload_slots(const TrainArgs *a, int units) {
    if ((a->offload_opt == OFFLOAD_DISK || a->offload_params == OFFLOAD_DISK) && a->offload_slots > units)
        fatal("flag -os: %d slots for a model of %d units: a slot holds one unit's record, so at most %d", a->offload_slots,
              units, units);
}

void args_print_plan_leaves_out(const TrainArgs *a) {
    for (int i = 0; i < ARGS_NFLAGS; i++)
        if (ARGS_FLAGS[i].plan_leaves_out && args_flag_given(&ARGS_FLAGS[i], a))
            printf("not in this plan: flag %s: %s\n", ARGS_FLAGS[i].name, ARGS_FLAGS[i].plan_leaves_out);
}

// ------------------------------------------------------------------------------------------------
// Reading argv

int args_parse(TrainArgs *a, int argc, char **argv) {
    for (int i = 1; i < argc; i++) {
        const char *name = argv[i];
        if (!strcmp(name, "-h") || !strcmp(name, "--help")) return ARGS_HELP;
        if (!strcmp(name, "--help-md")) return ARGS_HELP_MD;
        if (name[0] != '-') fatal("unexpected argument '%s' (flags start with '-'; -h lists them)", name);
        if (i + 1 >= argc) fatal("flag %s: missing its value", name);
        const Flag *f = args_flag(name);
        if (!f) fatal("unknown flag %s (-h lists the flags)", name);
        flag_set(f, argv[++i], a);
    }
    return 0;
}

int parse_param_count(const char *s, double *n, char *err, size_t errlen) {
    if (!((s[0] >= '0' && s[0] <= '9') || s[0] == '.' || s[0] == '-' || s[0] == '+')) return 0;
    char *end;
    errno = 0;
    double v = strtod(s, &end);
    if (end == s) return 0;
    double scale = 1.0;
    if (*end) {
        switch (end[0]) {
        case 'k': case 'K': scale = 1e3; break;
        case 'm': case 'M': scale = 1e6; break;
        case 'b': case 'B': case 'g': case 'G': scale = 1e9; break;
        case 't': case 'T': scale = 1e12; break;
        default: scale = 0.0;
        }
        if (scale == 0.0 || end[1]) {
            set_err(err, errlen, "flag -e: '%s' is neither a model file, a descriptor like d12, nor a parameter count "
                    "(a number with an optional K, M, B or T: 7.5B, 350M, 1.5e9)", s);
            return -1;
        }
    }
    v *= scale;
    if (errno || !isfinite(v) || v < 1.0 || v > 1e16) {
        set_err(err, errlen, "flag -e: a parameter count must be between 1 and 1e16, got '%s'", s);
        return -1;
    }
    *n = v;
    return 1;
}

// ------------------------------------------------------------------------------------------------
// The checks against the N ranks, 64-bit throughout: B, T <= 2^20 and N <= 2^24.

// The batch: B*T fits an int, -d (0: N*B*T, filled in) is a multiple of N*B*T and gives at most
// 10^6 micro-steps.
static void check_batch(TrainArgs *a, int N) {
    long long BT = (long long)a->B * a->T;
    if (BT > INT_MAX)
        fatal("flags -b -t: B*T = %d*%d = %lld tokens per rank per micro-step is more than %d", a->B, a->T, BT, INT_MAX);
    long long per_micro = (long long)N * BT;
    if (a->tokens_per_step == 0) a->tokens_per_step = per_micro;
    if (a->tokens_per_step % per_micro != 0)
        fatal("flag -d: %lld tokens per step is not a multiple of N*B*T = %d*%d*%d = %lld", a->tokens_per_step, N, a->B, a->T, per_micro);
    if (a->tokens_per_step / per_micro > 1000000) fatal("flag -d: %lld tokens per step gives over 10^6 micro-steps", a->tokens_per_step);
}

// The groups: -hs G and -hp G divide N (-hs G below it); emulated links across nodes need more
// than one node among the N ranks.
static void check_groups(const TrainArgs *a, int N) {
    if (a->shard_group && N % a->shard_group != 0)
        fatal("flag -hs: the group size %d does not divide the %d ranks", a->shard_group, N);
    if (a->shard_group == N)
        fatal("flag -hs: one group of all %d ranks is plain sharding with nothing replicated, so -hs %d changes nothing; "
              "leave it out, or give a G below N that divides N", N, N);
    if (a->hp_group && N % a->hp_group != 0)
        fatal("flag -hp: the group size %d does not divide the %d ranks", a->hp_group, N);
    const int node_ranks = a->ranks_per_node > 0 ? a->ranks_per_node : a->shard_group;   // plan_links' nodes
    if (a->links_emulated && a->link_x.gbps > 0.0 && node_ranks >= N)
        fatal("flag -linkx: every one of the %d ranks is on one node (%s %d), so no ring crosses nodes; give fewer "
              "ranks per node", N, a->ranks_per_node ? "-rpn" : "-hs", node_ranks);
}

int args_validate(TrainArgs *a, int N) {
    a->world = N;
    check_flags(a);
    check_batch(a, N);
    check_groups(a, N);
    return (int)(a->tokens_per_step / ((long long)N * a->B * a->T));
}

void args_check_model(const TrainArgs *a, const GPT2Config *cfg) {
    if (a->wrap > 1 && cfg->num_layers % a->wrap != 0)
        fatal("flag -wrap: %d blocks per unit does not divide the model's %d blocks", a->wrap, cfg->num_layers);
    if (a->T > cfg->max_seq_len) fatal("flag -t: sequence length %d is larger than the model's maxT %d", a->T, cfg->max_seq_len);
    if (!a->plan_world) plan_check_machine(a, cfg, a->world);
}

int args_read(TrainArgs *a, int argc, char **argv, ArgsBuild build) {
    args_defaults(a, build);
    const int help = args_parse(a, argc, argv);
    if (!help) return 0;
    if (help == ARGS_HELP_MD) args_usage_markdown(a);
    else args_usage(a, argv[0]);
    return 1;
}
