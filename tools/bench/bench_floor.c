/*
tools/bench/bench_floor.c: the CPU training step's physical floor, phase by phase, and the measured
step against it. scripts/bench_cpu.sh --floor runs it (measuring the phases first); by hand:

    make bench_floor
    ./build/bench_floor -L 12 -C 768 -NH 12 -V 50257 -Vp 50304 -B 8 -T 64 -p bf16 -P 124475904   # the floor
    ./build/bench_floor ... -ms MATMUL,ATTENTION,ELEMENTWISE,LOGITS,OTHER,STEP   # against it (the phase clock's ms)
    ./build/bench_floor ... --counts         # the FLOPs and bytes only (tests/test_roofline.sh checks them)

One rank (no collectives). Machine figures, measured here with OMP_NUM_THREADS threads (default all
cores), on the wall clock, or with BENCH_CLOCK=cpu on this process's CPU time (one thread: a loaded
machine's wall clock counts the other programs' turns; bench_peak.h says why not several threads):
    peak fp32    12 chains of 512-bit VFMADD231PS a thread (tools/bench/bench_peak.h)
    peak bf16    the same with VDPBF16PS (0 without AVX512_BF16: then the bf16 matmuls count at the fp32 peak)
    bandwidth    the faster of two STREAM-style passes over 64 MiB arrays (well past any cache):
                 the triad a[i] = b[i] + s*c[i], 16 bytes an element (two reads, one write, and the read
                 of a's line that a write to it costs first: write-allocate, which STREAM leaves out),
                 and an update in place a[i] = a[i]*s + b[i], 12 bytes (two reads, one write to a line
                 just read), the pattern of AdamW and of every gradient accumulated in place. A floor
                 a phase beats is none: AdamW's passes run faster than the triad counted as STREAM
                 counts it (12 bytes)

The floor of a phase is max(FLOPs / peak, bytes / bandwidth): the roofline, since inside one pass
the loads stream while the arithmetic runs. The step's floor is the sum over the phases, since they
run one after another (a phase's output is the next one's input). FLOPs and bytes are counted in
phase_counts below, once, from the shapes; bytes are what a phase must move to and from memory at
the least (every input read once, every output written once, scratch a fused kernel would keep in
cache not counted), so a phase above its floor moves more than it must or computes below the peak.
*/
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include "bench_peak.h"

// the phases of cpu/gpt2_cpu.c's phase clock; "optimizer" is its "other": the step less the four
// compute phases, which on one rank is the gradient norm, AdamW and the engine's bookkeeping
typedef enum { F_MATMUL, F_ATTENTION, F_ELEMENTWISE, F_LOGITS, F_OPTIMIZER, F_PHASES } FloorPhase;
static const char *const FLOOR_NAMES[F_PHASES] = {"matmul", "attention", "elementwise", "logits+loss", "norm+adamw"};

typedef struct {
    double L, C, NH, V, Vp, B, T, P;   // layers, channels, heads, vocab, padded vocab, batch, time, parameters
    int bf16;                          // -p bf16: bf16 params and grads (2 bytes), fp32 master, m, v
} Shape;
typedef struct { double flops, bytes; } Cost;

// Non-matmul arithmetic, counted per element as fp32 operations (an exp as ck_exp's 10 multiply-adds:
// cpu/kernels.h). These phases sit far below the peak's ridge, so the counts only have to be about right.
#define EXP_FLOPS 10.0
#define SOFTMAX_FLOPS (4.0 + EXP_FLOPS)     // max, subtract, exp, sum, scale
#define LN_FWD_FLOPS 7.0                    // mean 1, variance 2, normalize 2, weight and bias 2
#define LN_BWD_FLOPS 15.0                   // normalized 2, w*dout 1, two means 4, dinp 5, dw 2, db 1
#define GELU_FWD_FLOPS (11.0 + EXP_FLOPS)   // cubic 4, scale 1, tanh from exp 3, x/2 (1 + tanh) 3
#define GELU_BWD_FLOPS (19.0 + EXP_FLOPS)   // tanh and sech^2 from exp 7, du/dx 4, the sum 6, dinp += 2
#define ADAMW_FLOPS 14.0                    // m 3, v 4, bias corrections 2, sqrt + divide 2, decay and step 3

// one linear layer (C -> OC, bias or not), forward and backward: 2 flops a multiply-add
static void linear_cost(Cost *c, const Shape *s, double in, double out, int bias) {
    const double BT = s->B * s->T, act = 4.0, wb = s->bf16 ? 2.0 : 4.0;
    c->flops += 2 * BT * in * out;                       // forward: out = inp W^T (+ b)
    c->flops += 2 * BT * in * out;                       // backward: dinp += dout W
    c->flops += 2 * BT * in * out;                       // backward: dW += dout^T inp
    if (bias) c->flops += BT * out;                      // backward: db += the column sums of dout
    c->bytes += BT * in * act + BT * out * act;          // forward: read inp, write out
    c->bytes += in * out * wb + (bias ? out * wb : 0);   // forward: read W, b
    c->bytes += BT * out * act + BT * in * act;          // backward: read dout, read inp again
    c->bytes += in * out * wb + BT * in * act;           // backward: read W again, write dinp
    c->bytes += 2 * (in * out + (bias ? out : 0)) * wb;  // backward: dW, db read and written (they accumulate)
}

// FLOPs and bytes of each phase of one training step (one micro-step of B x T on this rank)
static void phase_counts(const Shape *s, Cost cost[F_PHASES]) {
    memset(cost, 0, F_PHASES * sizeof(Cost));
    const double BT = s->B * s->T, C = s->C, L = s->L, NH = s->NH, T = s->T;
    const double act = 4.0, wb = s->bf16 ? 2.0 : 4.0;
    const double pairs = s->B * NH * T * (T + 1) / 2;    // causal (query, key) pairs over every head
    const double hs = C / NH;
    for (int l = 0; l < (int)L; l++) {
        linear_cost(&cost[F_MATMUL], s, C, 3 * C, 1);    // qkv
        linear_cost(&cost[F_MATMUL], s, C, C, 1);        // attention projection
        linear_cost(&cost[F_MATMUL], s, C, 4 * C, 1);    // fc
        linear_cost(&cost[F_MATMUL], s, 4 * C, C, 1);    // fc projection
    }
    linear_cost(&cost[F_MATMUL], s, C, s->Vp, 0);        // the tied LM head (wte^T), every padded column

    Cost *a = &cost[F_ATTENTION];
    a->flops += L * pairs * (2 * hs + 2 * hs);           // forward: q.k and att @ v
    a->flops += L * pairs * SOFTMAX_FLOPS;               // forward: the causal softmax
    a->flops += L * pairs * 4 * (2 * hs);                // backward: datt, dq, dk, dv
    a->flops += L * pairs * 5;                           // backward: the softmax's (dot 2, the rest 3)
    a->bytes += L * (BT * 3 * C + s->B * NH * T * T + BT * C) * act;        // forward: read qkv, write att, write y
    a->bytes += L * (BT * C + BT * 3 * C + s->B * NH * T * T + BT * 3 * C) * act;   // backward: read dy, qkv, att; write dqkv

    Cost *e = &cost[F_ELEMENTWISE];
    const double ln_fwd = BT * C * 2 * act + 2 * C * wb + BT * 2 * act;   // read x, write y, read w, b, write mean, rstd
    const double ln_bwd = BT * C * 4 * act + C * wb + BT * 2 * act + 4 * C * wb;   // read dy, x; dx read+write; w; mean, rstd; dw, db
    e->flops += (2 * L + 1) * BT * C * (LN_FWD_FLOPS + LN_BWD_FLOPS);   // ln1, ln2 a layer and the final one
    e->bytes += (2 * L + 1) * (ln_fwd + ln_bwd);
    e->flops += L * 2 * BT * C;                          // the two residual adds a layer (their backward is the
    e->bytes += L * 2 * 3 * BT * C * act;                //   layernorm's +=): read two, write one
    e->flops += L * BT * 4 * C * (GELU_FWD_FLOPS + GELU_BWD_FLOPS);
    e->bytes += L * BT * 4 * C * (2 + 3) * act;          // forward: read x, write y; backward: read x, dy, write dx
    e->flops += BT * C + 2 * BT * C;                     // embedding: wte + wpe; backward: dwte +=, dwpe +=
    e->bytes += BT * C * (2 * wb + act);                 // forward: read a wte row and a wpe row, write x
    e->bytes += BT * C * (act + 2 * wb + 2 * wb);        // backward: read dx, dwte and dwpe rows read and written

    Cost *g = &cost[F_LOGITS];
    g->flops += BT * s->V * SOFTMAX_FLOPS + BT * EXP_FLOPS;   // softmax over the vocabulary, the loss's log
    g->flops += BT * s->V * 2;                           // dlogits = (p - onehot) * dloss
    g->bytes += BT * s->Vp * act * 2;                    // read the logits, write dlogits: once each

    Cost *o = &cost[F_OPTIMIZER];
    o->flops += 2 * s->P;                                // the gradient norm's sum of squares
    o->bytes += s->P * wb;                               //   reads every gradient once
    o->flops += s->P * ADAMW_FLOPS;
    o->bytes += s->P * (s->bf16 ? 2 + 12 + 12 + 2 : 16 + 12);   // bf16: read grad, read+write master, m, v, write
                                                                //   the bf16 param; fp32: read p, g, m, v, write p, m, v
}

// Memory bandwidth over `threads` threads, the best of `tries` of each pass (the file's top says which
// two and the bytes each moves): what the memory carried, in GB/s.
typedef struct { double triad, in_place; } Bandwidth;
static Bandwidth memory_gbs(int threads, int tries) {
    const size_t n = 16u << 20;   // floats an array: 64 MiB
    float *a = malloc(n * sizeof(float)), *b = malloc(n * sizeof(float)), *c = malloc(n * sizeof(float));
    if (!a || !b || !c) { fprintf(stderr, "error: bench_floor: cannot allocate the bandwidth passes' 192 MiB\n"); exit(1); }
    #pragma omp parallel for num_threads(threads) schedule(static)
    for (size_t i = 0; i < n; i++) { a[i] = 0.0f; b[i] = 1.0f; c[i] = 2.0f; }   // each thread touches its own pages
    Bandwidth best = {0.0, 0.0};
    const float scalar = 3.0f, half = 0.5f;
    for (int t = 0; t < tries; t++) {
        double t0 = peak_now(threads);
        #pragma omp parallel for num_threads(threads) schedule(static)
        for (size_t i = 0; i < n; i++) a[i] = b[i] + scalar * c[i];
        double t1 = peak_now(threads);
        #pragma omp parallel for num_threads(threads) schedule(static)
        for (size_t i = 0; i < n; i++) a[i] = a[i] * half + b[i];
        double t2 = peak_now(threads);
        double triad = 4.0 * n * sizeof(float) / (t1 - t0) * 1e-9, in_place = 3.0 * n * sizeof(float) / (t2 - t1) * 1e-9;
        if (triad > best.triad) best.triad = triad;
        if (in_place > best.in_place) best.in_place = in_place;
    }
    volatile float sink = a[n / 2];
    (void)sink;
    free(a); free(b); free(c);
    return best;
}

static double number(const char *flag, const char *text) {
    char *end;
    errno = 0;
    double v = strtod(text, &end);
    if (errno || end == text || *end || v < 0) {
        fprintf(stderr, "error: bench_floor: %s: expected a number >= 0, got '%s'\n", flag, text);
        exit(1);
    }
    return v;
}

static const char *USAGE = "usage: bench_floor -L N -C N -NH N -V N -Vp N -B N -T N -P PARAMS [-p fp32|bf16] "
                           "[-ms MATMUL,ATTENTION,ELEMENTWISE,LOGITS,OTHER,STEP] [--counts]";

int main(int argc, char **argv) {
    Shape s = {0};
    int counts_only = 0, have_ms = 0;
    double ms[F_PHASES + 1] = {0};   // the phases', then the step's
    struct { const char *flag; double *to; } dims[] = {{"-L", &s.L}, {"-C", &s.C}, {"-NH", &s.NH}, {"-V", &s.V},
        {"-Vp", &s.Vp}, {"-B", &s.B}, {"-T", &s.T}, {"-P", &s.P}};
    const int n_dims = sizeof dims / sizeof dims[0];
    for (int i = 1; i < argc; i++) {
        if (!strcmp(argv[i], "--counts")) { counts_only = 1; continue; }
        if (i + 1 >= argc) { fprintf(stderr, "error: bench_floor: %s: missing its value (%s)\n", argv[i], USAGE); return 1; }
        const char *flag = argv[i], *val = argv[++i];
        int known = 0;
        for (int d = 0; d < n_dims; d++)
            if (!strcmp(flag, dims[d].flag)) { *dims[d].to = number(flag, val); known = 1; }
        if (known) continue;
        if (!strcmp(flag, "-p")) {
            if (strcmp(val, "fp32") && strcmp(val, "bf16")) { fprintf(stderr, "error: bench_floor: -p: expected fp32 or bf16, got '%s'\n", val); return 1; }
            s.bf16 = !strcmp(val, "bf16");
        } else if (!strcmp(flag, "-ms")) {
            char *copy = strdup(val), *save = NULL, *tok = strtok_r(copy, ",", &save);
            int k = 0;
            for (; tok && k <= F_PHASES; k++, tok = strtok_r(NULL, ",", &save)) ms[k] = number("-ms", tok);
            if (k != F_PHASES + 1 || tok) { fprintf(stderr, "error: bench_floor: -ms: expected %d comma-separated ms (the phases, then the step), got '%s'\n", F_PHASES + 1, val); return 1; }
            free(copy);
            have_ms = 1;
        } else { fprintf(stderr, "error: bench_floor: %s: unknown flag (%s)\n", flag, USAGE); return 1; }
    }
    for (int d = 0; d < n_dims; d++)
        if (*dims[d].to < 1) { fprintf(stderr, "error: bench_floor: %s: missing or below 1 (%s)\n", dims[d].flag, USAGE); return 1; }
    if (s.Vp < s.V) { fprintf(stderr, "error: bench_floor: -Vp %.0f is below -V %.0f\n", s.Vp, s.V); return 1; }
    Cost cost[F_PHASES];
    phase_counts(&s, cost);
    if (counts_only) {
        for (int p = 0; p < F_PHASES; p++) printf("%-12s flops %.0f bytes %.0f\n", FLOOR_NAMES[p], cost[p].flops, cost[p].bytes);
        return 0;
    }
    const int threads = omp_get_max_threads();
    double fma = peak_gflops(PEAK_FP32_FMA, threads, 5), dp = peak_gflops(PEAK_BF16_DP, threads, 5);
    Bandwidth mem = memory_gbs(threads, 5);
    double bw = mem.triad > mem.in_place ? mem.triad : mem.in_place;
    double mm_peak = s.bf16 && dp > 0 ? dp : fma;
    printf("machine, %d threads: fp32 FMA %.1f GFLOP/s, VDPBF16PS %.1f GFLOP/s, memory %.2f GB/s (triad %.2f, in place %.2f); "
           "matmuls at the %s peak\n", threads, fma, dp, bw, mem.triad, mem.in_place, s.bf16 && dp > 0 ? "VDPBF16PS" : "fp32 FMA");
    if (fma <= 0) { fprintf(stderr, "error: bench_floor: this CPU has no 512-bit FMA to measure a peak with\n"); return 1; }
    printf("%-12s %9s %9s %10s %10s %9s %8s\n", "phase", "GFLOP", "MB", "floor ms", "bound", have_ms ? "ms" : "", have_ms ? "ratio" : "");
    double floor_sum = 0;
    for (int p = 0; p < F_PHASES; p++) {
        double peak = p == F_MATMUL ? mm_peak : fma;
        double compute_ms = cost[p].flops / (peak * 1e9) * 1e3, memory_ms = cost[p].bytes / (bw * 1e9) * 1e3;
        double floor_ms = compute_ms > memory_ms ? compute_ms : memory_ms;
        floor_sum += floor_ms;
        printf("%-12s %9.2f %9.1f %10.2f %10s", FLOOR_NAMES[p], cost[p].flops * 1e-9, cost[p].bytes * 1e-6, floor_ms,
               floor_ms <= 0 ? "-" : compute_ms > memory_ms ? "flops" : "bytes");
        if (have_ms && floor_ms > 0) printf(" %9.2f %8.2f", ms[p], ms[p] / floor_ms);
        else if (have_ms) printf(" %9.2f %8s", ms[p], "-");
        printf("\n");
    }
    printf("%-12s %9s %9s %10.2f %10s", "step", "", "", floor_sum, "sum");
    if (have_ms) printf(" %9.2f %8.2f", ms[F_PHASES], ms[F_PHASES] / floor_sum);
    printf("\n");
    return 0;
}
