// host/cli.c: parsing and checking the flags (see cli.h).
#include "cli.h"
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
    printf("            attention and MLP as two units (the too-fine units of the notes' pitfall)   default 1\n");
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

// Parses argv into a (defaults already set). Returns 1 if -h was given.
int args_parse(TrainArgs *a, int argc, char **argv) {
    for (int i = 1; i < argc; i++) {
        const char *f = argv[i];
        if (!strcmp(f, "-h") || !strcmp(f, "--help")) return 1;
        if (f[0] != '-') fatal("unexpected argument '%s' (flags start with '-'; -h lists them)", f);
        if (i + 1 >= argc) fatal("flag %s: missing its value", f);
        const char *v = argv[++i];
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
        else if (!strcmp(f, "-z")) a->stage = flag_int(f, v, 0, 3);
        else if (!strcmp(f, "-pd")) a->prefetch_depth = flag_int(f, v, 0, 64);
        else if (!strcmp(f, "-hs")) a->shard_group = flag_int(f, v, 1, 1 << 20);
        else if (!strcmp(f, "-ra")) a->reshard_after_forward = flag_int(f, v, 0, 1);
        else if (!strcmp(f, "-rc")) a->recompute = flag_int(f, v, 0, 2);
        else if (!strcmp(f, "-pt")) {
            long long n;
            if (!parse_ll(v, &n) || n < 0) fatal("flag -pt: expected a parameter count >= 0, got '%s'", v);
            a->persist_threshold = n;
        }
        else if (!strcmp(f, "-wrap")) a->wrap = !strcmp(v, "half") ? GPT2_WRAP_HALF : flag_int(f, v, 1, ZERO3_MAX_TENSORS / 12);
        else if (!strcmp(f, "-clip")) {
            if (strcmp(v, "global") && strcmp(v, "local")) fatal("flag -clip: expected global or local, got '%s'", v);
            a->clip_local = !strcmp(v, "local");
        }
        else if (!strcmp(f, "-v")) a->val_every = flag_int(f, v, 0, 100000000);
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
        else if (!strcmp(f, "-plan")) a->plan_world = flag_int(f, v, 1, 1 << 24);
        else if (!strcmp(f, "-bw")) a->link_gbps = flag_float(f, v, 1e-6f, 1e6f);
        else if (!strcmp(f, "-bwx")) a->link_x_gbps = flag_float(f, v, 1e-6f, 1e6f);
        else if (!strcmp(f, "-rpn")) a->ranks_per_node = flag_int(f, v, 1, 1 << 24);
        else if (!strcmp(f, "-tf")) a->tflops = flag_float(f, v, 1e-9f, 1e9f);
        else fatal("unknown flag %s (-h lists the flags)", f);
    }
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
