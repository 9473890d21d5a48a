// host/cli.c: parsing and checking the flags (see cli.h).
#include "cli.h"
#include <limits.h>
#include <sys/stat.h>
#include "gpt2.h"

void args_defaults(TrainArgs *a, int ddp_only) {
    memset(a, 0, sizeof(*a));
    a->ddp_only = ddp_only;
    a->train_path = "data/tinyshakespeare/tiny_shakespeare_train.bin";
    a->val_path = "data/tinyshakespeare/tiny_shakespeare_val.bin";
    a->init = "d12";
    a->B = 4; a->T = 64;
    a->steps = 20;
    a->lr = 3e-4f; a->final_frac = 1.0f; a->warmup = 0;
    a->weight_decay = 0.0f; a->grad_clip = 1.0f;
    a->stage = ddp_only ? 0 : 3;
    a->prefetch_depth = 1;
    a->reshard_after_forward = 1;
    a->val_every = 10; a->val_batches = 4;
    a->sample_every = 0; a->gen_tokens = 64;
    a->seed = 1337;
}

void args_usage(const TrainArgs *a, const char *prog) {
    if (g_proc.rank != 0) return;
    printf("usage: %s [flags]   (mpirun -np N %s [flags] for N ranks)\n", prog, prog);
    printf("  -i FILE   train tokens (llm.c format)        default data/tinyshakespeare/tiny_shakespeare_train.bin\n");
    printf("  -j FILE   val tokens                         default data/tinyshakespeare/tiny_shakespeare_val.bin\n");
    printf("  -e X      init: an llm.c model .bin, or dN (GPT-2 of depth N; d12 = 124M),\n");
    printf("            or dLcChHtT (e.g. d2c64h2t64: L=2 C=64 NH=2 maxT=64)   default d12\n");
    printf("  -o DIR    output: log.csv, checkpoints, exported model    default none\n");
    printf("  -b B      micro-batch per rank               default 4\n");
    printf("  -t T      sequence length                    default 64\n");
    printf("  -d TOK    tokens per optimizer step, a multiple of N*B*T (gives A micro-steps)   default N*B*T\n");
    printf("  -x S      steps                              default 20\n");
    printf("  -l LR     peak learning rate                 default 3e-4\n");
    printf("  -u W      warmup steps                       default 0\n");
    printf("  -q F      final LR fraction (cosine decay to F*LR; 1 = constant)   default 1.0\n");
    printf("  -c WD     weight decay on the six matrices   default 0\n");
    printf("  -gc G     max global grad norm, 0 = no clipping   default 1.0\n");
    printf("  -z Z      ZeRO stage 0 (DDP), 1, 2, 3        default %d\n", a->ddp_only ? 0 : 3);
    printf("  -pd P     stage-3 prefetch depth (units gathered ahead)   default 1\n");
    printf("  -hs G     HSDP: shard within groups of G consecutive ranks, replicate across groups (G divides N)\n");
    printf("  -ra 0|1   reshard after forward; 0 keeps each unit gathered until its backward (-z 3)   default 1\n");
    printf("  -rc 0|1|2 activation recompute: 1 inside the backward's gather, 2 with its own gather (the pitfall)\n");
    printf("  -pt N     persistence threshold: units with fewer than N parameters stay replicated   default 0\n");
    printf("  -clip global|local   local: each rank clips by its own shard's norm (the pitfall, on purpose)\n");
    printf("  -wrap K|half  unit granularity: K blocks per unit (K divides L, at most 8), or each block's\n");
    printf("            attention and MLP as two units (too-fine units: pitfall 2, docs/primer.md)   default 1\n");
    printf("  -qw 8     ZeRO++ qwZ: gather params as int8 blocks with a scale each (-z 3)   default off\n");
    printf("  -hp G     ZeRO++ hpZ: keep a secondary shard in groups of G ranks; backward gathers stay in the group (-z 3)\n");
    printf("  -qg 8     ZeRO++ qgZ: reduce gradients as int8 blocks, all-to-all in the -hp group then across (-z 3)\n");
    printf("  -v n      val every n steps (0 off)          default 10\n");
    printf("  -m n      val batches per rank               default 4\n");
    printf("  -s n      sample every n steps (0 off)       default 0\n");
    printf("  -g n      tokens to generate                 default 64\n");
    printf("  -n n      checkpoint every n steps (0 off; needs -o)   default 0\n");
    printf("  -y 1      resume from the latest checkpoint in -o\n");
    printf("  -f 1      start over in an -o that holds an earlier run's checkpoints or log (they are kept\n");
    printf("            until this run's first checkpoint is complete; without -y 1 or -f 1 such an -o is refused)\n");
    printf("  -S SEED   seed for init and sampling         default 1337\n");
    printf("  -tr FILE  write a Chrome trace-event JSON of the run (open in Perfetto / chrome://tracing)\n");
    printf("  -plan N   print the memory and communication plan for N ranks and the model of -e (which may\n");
    printf("            also be a parameter count: 7.5B, 350M, 1.5e9), allocate nothing, exit\n");
    printf("  -link G[,LAT]  links: GB/s each rank sends inside a node (25, 25GB/s, 200Gbit/s) and the latency of\n");
    printf("            a ring step (10us, 1ms); a run holds each collective for the ring model's time (docs/time.md)\n");
    printf("  -linkx G[,LAT] the same across nodes (nodes: -rpn R ranks, or the -hs G groups)\n");
    printf("  -bw G     planner: GB/s each rank sends inside a node (ring links)\n");
    printf("  -bwx G    planner: GB/s each rank sends across nodes        default -bw\n");
    printf("  -rpn R    planner: ranks per node                           default N (one node)\n");
    printf("  -tf F     planner: TFLOP/s each rank achieves\n");
    printf("  -h        this help\n");
}

static int parse_ll(const char *s, long long *out) {
    char *end;
    errno = 0;
    long long v = strtoll(s, &end, 10);
    if (errno || end == s || *end) return 0;
    *out = v;
    return 1;
}
static int parse_f(const char *s, float *out) {
    char *end;
    errno = 0;
    double v = strtod(s, &end);
    if (errno || end == s || *end || !isfinite(v)) return 0;
    *out = (float)v;
    return 1;
}

// Integer flag within [lo, hi].
static int flag_int(const char *flag, const char *val, long long lo, long long hi) {
    long long v;
    if (!parse_ll(val, &v)) fatal("flag %s: expected an integer, got '%s'", flag, val);
    if (v < lo || v > hi) fatal("flag %s: %lld is out of range [%lld, %lld]", flag, v, lo, hi);
    return (int)v;
}
static float flag_float(const char *flag, const char *val, float lo, float hi) {
    float v;
    if (!parse_f(val, &v)) fatal("flag %s: expected a number, got '%s'", flag, val);
    if (v < lo || v > hi) fatal("flag %s: %g is out of range [%g, %g]", flag, v, lo, hi);
    return v;
}

// The run: data, model, output folder, batch shape, steps, optimizer. Returns 0 when f is none of them.
static int set_run_flag(TrainArgs *a, const char *f, const char *v) {
    if (!strcmp(f, "-i")) a->train_path = v;
    else if (!strcmp(f, "-j")) a->val_path = v;
    else if (!strcmp(f, "-e")) a->init = v;
    else if (!strcmp(f, "-o")) a->out_dir = v;
    else if (!strcmp(f, "-b")) a->B = flag_int(f, v, 1, 1 << 20);
    else if (!strcmp(f, "-t")) a->T = flag_int(f, v, 1, 1 << 20);
    else if (!strcmp(f, "-d")) {
        long long d;
        if (!parse_ll(v, &d) || d < 1) fatal("flag -d: expected a positive token count, got '%s'", v);
        a->tokens_per_step = d;
    }
    else if (!strcmp(f, "-x")) a->steps = flag_int(f, v, 1, 100000000);
    else if (!strcmp(f, "-l")) a->lr = flag_float(f, v, 0.0f, 10.0f);
    else if (!strcmp(f, "-u")) a->warmup = flag_int(f, v, 0, 100000000);
    else if (!strcmp(f, "-q")) a->final_frac = flag_float(f, v, 0.0f, 1.0f);
    else if (!strcmp(f, "-c")) a->weight_decay = flag_float(f, v, 0.0f, 10.0f);
    else if (!strcmp(f, "-gc")) a->grad_clip = flag_float(f, v, 0.0f, 1e6f);
    else return 0;
    return 1;
}

// ZeRO++: the bit width of -qw and -qg (8 only: int8 codes), the group size of -hp.
static void set_zeropp_flag(TrainArgs *a, const char *f, const char *v) {
    if (!strcmp(f, "-hp")) { a->hp_group = flag_int(f, v, 1, 1 << 20); return; }
    int bits = flag_int(f, v, 1, 64);
    if (bits != 8) fatal("flag %s: %d-bit quantization is not supported (8: int8 codes, one fp32 scale per block of %d)", f, bits,
                         ZERO3_QUANT_BLOCK);
    if (!strcmp(f, "-qw")) a->quant_weights = bits;
    else a->quant_grads = bits;
}

// ZeRO and its variants: stage, prefetch, HSDP, resharding, recompute, persistence, units,
// clipping. Returns 0 when f is none of them.
static int set_zero_flag(TrainArgs *a, const char *f, const char *v) {
    if (!strcmp(f, "-z")) a->stage = flag_int(f, v, 0, 3);
    else if (!strcmp(f, "-pd")) a->prefetch_depth = flag_int(f, v, 0, 64);
    else if (!strcmp(f, "-hs")) a->shard_group = flag_int(f, v, 1, 1 << 20);
    else if (!strcmp(f, "-ra")) a->reshard_after_forward = flag_int(f, v, 0, 1);
    else if (!strcmp(f, "-rc")) a->recompute = flag_int(f, v, 0, 2);
    else if (!strcmp(f, "-pt")) {
        long long n;
        if (!parse_ll(v, &n) || n < 0) fatal("flag -pt: expected a parameter count >= 0, got '%s'", v);
        a->persist_threshold = n;
    }
    else if (!strcmp(f, "-wrap")) a->wrap = !strcmp(v, "half") ? GPT2_WRAP_HALF : flag_int(f, v, 1, GPT2_WRAP_MAX);
    else if (!strcmp(f, "-qw") || !strcmp(f, "-qg") || !strcmp(f, "-hp")) set_zeropp_flag(a, f, v);
    else if (!strcmp(f, "-clip")) {
        if (strcmp(v, "global") && strcmp(v, "local")) fatal("flag -clip: expected global or local, got '%s'", v);
        a->clip_local = !strcmp(v, "local");
    }
    else return 0;
    return 1;
}

// What the run does besides training: validation, samples, checkpoints, resume, seed, trace.
// Returns 0 when f is none of them.
static int set_output_flag(TrainArgs *a, const char *f, const char *v) {
    if (!strcmp(f, "-v")) a->val_every = flag_int(f, v, 0, 100000000);
    else if (!strcmp(f, "-m")) a->val_batches = flag_int(f, v, 1, 1000000);
    else if (!strcmp(f, "-s")) a->sample_every = flag_int(f, v, 0, 100000000);
    else if (!strcmp(f, "-g")) a->gen_tokens = flag_int(f, v, 1, 1 << 20);
    else if (!strcmp(f, "-n")) a->ckpt_every = flag_int(f, v, 0, 100000000);
    else if (!strcmp(f, "-y")) a->resume = flag_int(f, v, 0, 1);
    else if (!strcmp(f, "-f")) a->fresh = flag_int(f, v, 0, 1);
    else if (!strcmp(f, "-S")) {
        long long s;
        if (!parse_ll(v, &s) || s < 0) fatal("flag -S: expected a non-negative integer seed, got '%s'", v);
        a->seed = (unsigned long long)s;
    }
    else if (!strcmp(f, "-tr")) {
        if (!*v) fatal("flag -tr: expected a file name");
        a->trace_path = v;
    }
    else return 0;
    return 1;
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

// -link / -linkx GBPS[,LATENCY]: both positive; one error line naming the flag otherwise.
static void flag_link(const char *flag, const char *v, double *gbps, double *latency_s) {
    char bw[64];
    const char *comma = strchr(v, ',');
    size_t n = comma ? (size_t)(comma - v) : strlen(v);
    if (n >= sizeof bw) fatal("flag %s: expected GB/s[,latency] like 25GB/s,10us, got '%s'", flag, v);
    memcpy(bw, v, n);
    bw[n] = '\0';
    if (!parse_gbps(bw, gbps))
        fatal("flag %s: bandwidth '%s' is not a number of GB/s (25, 25GB/s, 500MB/s, 200Gbit/s)", flag, bw);
    if (!(*gbps > 0.0) || *gbps > 1e6) fatal("flag %s: bandwidth %s must be above 0 and at most 1e6 GB/s", flag, bw);
    *latency_s = 0.0;
    if (!comma) return;
    if (!parse_latency(comma + 1, latency_s))
        fatal("flag %s: latency '%s' is not a time with its unit (500ns, 10us, 1ms, 0.01s)", flag, comma + 1);
    if (!(*latency_s > 0.0) || *latency_s > 10.0)
        fatal("flag %s: latency %s must be above 0 and at most 10 s (leave it out for none)", flag, comma + 1);
}

// The planner (-plan N) and its links and compute rate. Returns 0 when f is none of them.
static int set_plan_flag(TrainArgs *a, const char *f, const char *v) {
    if (!strcmp(f, "-plan")) a->plan_world = flag_int(f, v, 1, 1 << 24);
    else if (!strcmp(f, "-link")) { flag_link(f, v, &a->link_gbps, &a->link_latency_s); a->links_emulated = 1; }
    else if (!strcmp(f, "-linkx")) { flag_link(f, v, &a->link_x_gbps, &a->link_x_latency_s); a->links_emulated = 1; }
    else if (!strcmp(f, "-bw")) a->link_gbps = flag_float(f, v, 1e-6f, 1e6f);
    else if (!strcmp(f, "-bwx")) a->link_x_gbps = flag_float(f, v, 1e-6f, 1e6f);
    else if (!strcmp(f, "-rpn")) a->ranks_per_node = flag_int(f, v, 1, 1 << 24);
    else if (!strcmp(f, "-tf")) a->tflops = flag_float(f, v, 1e-9f, 1e9f);
    else return 0;
    return 1;
}

// ZeRO++ is built on ZeRO-3's gathers and reduce-scatters: each flag needs -z 3, and -hp's groups
// would duplicate HSDP's (under -hs every gather already stays inside its group).
static void args_check_zeropp(const TrainArgs *a) {
    const char *flag = a->quant_weights ? "-qw" : a->hp_group ? "-hp" : a->quant_grads ? "-qg" : NULL;
    if (!flag || a->plan_world) return;
    if (a->stage != 3) fatal("flag %s: ZeRO++ builds on ZeRO-3's gathers and reductions (-z 3); got -z %d", flag, a->stage);
    if (a->hp_group && a->shard_group)
        fatal("flag -hp: with HSDP (-hs) every gather already stays inside its shard group; use one of the two");
}

// Flags that contradict each other or the build: one error line each.
static void args_check(const TrainArgs *a) {
    if (!a->plan_world) {   // a parameter count describes a model to plan for, not one to train
        double n;
        char err[256];
        struct stat st;   // a path that exists is a model file (checked later, never opened here: a FIFO would block)
        if (stat(a->init, &st) != 0 && parse_param_count(a->init, &n, err, sizeof err) == 1)
            fatal("flag -e: %s is a parameter count: only the planner (-plan N) takes one; train a descriptor "
                  "like d12 or a model file", a->init);
    }
    if (a->ddp_only && a->stage != 0) fatal("flag -z: this binary is the DDP build (make DDP=1), fixed at stage 0; got -z %d", a->stage);
    if (a->ckpt_every > 0 && !a->out_dir) fatal("flag -n: checkpoints need an output directory (-o DIR)");
    if (a->resume && !a->out_dir) fatal("flag -y: resuming needs the output directory of the run (-o DIR)");
    // a variant with a stage where it means nothing is a mistake, not a no-op
    if (a->shard_group && a->stage == 0) fatal("flag -hs: HSDP shards the model state within groups; at -z 0 (DDP) nothing is sharded");
    if (!a->reshard_after_forward && a->stage != 3)
        fatal("flag -ra 0: only ZeRO-3 reshards params after the forward (-z 3); at -z %d they stay whole", a->stage);
    if (a->persist_threshold && a->stage == 0) fatal("flag -pt: at -z 0 (DDP) every unit is replicated already");
    if (a->recompute == 2 && a->wrap == GPT2_WRAP_HALF)
        fatal("flag -rc 2 with -wrap half: the naive recompute gathers one unit per block; use -rc 1 (or -wrap 1)");
    if (a->resume && a->fresh) fatal("flags -y 1 and -f 1: resume, or start over, not both");
    if (a->links_emulated && a->link_x_gbps > 0.0 && !a->shard_group && !a->ranks_per_node)
        fatal("flag -linkx: links across nodes need nodes: give -rpn R (ranks per node) or HSDP groups (-hs G)");
    args_check_zeropp(a);
}

// Parses argv into a (defaults already set). Returns 1 if -h was given.
int args_parse(TrainArgs *a, int argc, char **argv) {
    for (int i = 1; i < argc; i++) {
        const char *f = argv[i];
        if (!strcmp(f, "-h") || !strcmp(f, "--help")) return 1;
        if (f[0] != '-') fatal("unexpected argument '%s' (flags start with '-'; -h lists them)", f);
        if (i + 1 >= argc) fatal("flag %s: missing its value", f);
        const char *v = argv[++i];
        if (!set_run_flag(a, f, v) && !set_zero_flag(a, f, v) && !set_output_flag(a, f, v) && !set_plan_flag(a, f, v))
            fatal("unknown flag %s (-h lists the flags)", f);
    }
    args_check(a);
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
// The checks a run and the planner share: the same error line whether -plan N or N ranks see it.

int args_check_world(TrainArgs *a, int N) {
    long long BT = (long long)a->B * a->T;   // 64-bit throughout: B, T <= 2^20 and N <= 2^24
    if (BT > INT_MAX)
        fatal("flags -b -t: B*T = %d*%d = %lld tokens per rank per micro-step is more than %d", a->B, a->T, BT, INT_MAX);
    long long per_micro = (long long)N * BT;
    if (a->tokens_per_step == 0) a->tokens_per_step = per_micro;
    if (a->tokens_per_step % per_micro != 0)
        fatal("flag -d: %lld tokens per step is not a multiple of N*B*T = %d*%d*%d = %lld", a->tokens_per_step, N, a->B, a->T, per_micro);
    if (a->tokens_per_step / per_micro > 1000000) fatal("flag -d: %lld tokens per step gives over 10^6 micro-steps", a->tokens_per_step);
    if (a->shard_group && N % a->shard_group != 0)
        fatal("flag -hs: the group size %d does not divide the %d ranks", a->shard_group, N);
    if (a->shard_group == N)
        fatal("flag -hs: one group of all %d ranks is plain sharding with nothing replicated, so -hs %d changes nothing; "
              "leave it out, or give a G below N that divides N", N, N);
    if (a->hp_group && N % a->hp_group != 0)
        fatal("flag -hp: the group size %d does not divide the %d ranks", a->hp_group, N);
    return (int)(a->tokens_per_step / per_micro);
}

void args_check_model(const TrainArgs *a, const GPT2Config *cfg) {
    if (a->wrap > 1 && cfg->num_layers % a->wrap != 0)
        fatal("flag -wrap: %d blocks per unit does not divide the model's %d blocks", a->wrap, cfg->num_layers);
    if (a->T > cfg->max_seq_len) fatal("flag -t: sequence length %d is larger than the model's maxT %d", a->T, cfg->max_seq_len);
}

int args_read(TrainArgs *a, int argc, char **argv, int ddp_only) {
    args_defaults(a, ddp_only);
    if (!args_parse(a, argc, argv)) return 0;
    args_usage(a, argv[0]);
    return 1;
}
