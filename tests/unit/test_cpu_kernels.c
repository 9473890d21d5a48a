/*
Checks every kernel of cpu/kernels.h against PyTorch (float64 autograd) reference values.

    /usr/bin/python3 tests/unit/cpu_kernels_ref.py /tmp/ref.bin
    gcc -O3 -march=native -fopenmp -o /tmp/test_cpu_kernels tests/unit/test_cpu_kernels.c -lm
    /tmp/test_cpu_kernels /tmp/ref.bin

(tests/test_cpu_kernels.sh does all three.) For each case of shapes in the file and each kernel:
- forward outputs and backward gradients: EVERY element must satisfy
      |got - expected| <= TOL * (|expected| + rms(expected))
  i.e. relative error TOL, or absolute error TOL times the tensor's typical size where the element
  itself is small (sums that cancel). TOL is 2e-5. fp32 rounding gives 1e-7 to 4e-6 at these shapes
  (the largest in attention_backward: 64-term dot products, then the softmax backward subtracts two
  of them), and indexing or math bugs give 1e-3 and up, so the margin is wide on both sides.
- backward kernels accumulate: gradients start at zero, the kernel runs twice, and the result after
  the first call must match the reference and after the second twice the reference.
- outputs a kernel should overwrite start as NaN, and attention's scratch (dpreatt, datt) is NaN
  before every call: a kernel that reads an element before writing it produces NaN and fails.
- 16 guard floats before and after every output buffer must be untouched (no stray writes).
- determinism: everything runs with 1, 2 and 3 OpenMP threads and the results must be bitwise equal.
Prints, per case, the number of checks and the worst error (in units of the formula above), a line
for every failure (-v: for every check), and exits non-zero after the first case with a failure.
*/
#include <math.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <omp.h>
#include "../../cpu/kernels.h"

#define REF_MAGIC 20251130
#define REF_VERSION 1
#define TOL 2e-5
#define GUARD 16

// ------------------------------------------------------------------------------------------------
// the reference file

typedef struct {
    char name[48];
    int dtype;        // 0 float32, 1 int32
    int ndim, shape[4];
    size_t n;         // number of elements
    void *data;
} Tensor;

static Tensor *tensors;
static int n_tensors;

static void die(const char *msg, const char *detail) {
    fprintf(stderr, "test_cpu_kernels: %s%s\n", msg, detail ? detail : "");
    exit(1);
}

static void load_reference(const char *path) {
    FILE *f = fopen(path, "rb");
    if (!f) die("cannot open reference file ", path);
    int header[4];
    if (fread(header, sizeof(int), 4, f) != 4) die("reference file too short: ", path);
    if (header[0] != REF_MAGIC) die("bad magic number (not a cpu_kernels_ref.py file): ", path);
    if (header[1] != REF_VERSION) die("unsupported reference file version: ", path);
    if (header[2] <= 0 || header[2] > 100000) die("implausible tensor count in ", path);
    n_tensors = header[2];
    tensors = calloc(n_tensors, sizeof(Tensor));
    for (int i = 0; i < n_tensors; i++) {
        Tensor *t = &tensors[i];
        if (fread(t->name, 1, 48, f) != 48 || fread(&t->dtype, sizeof(int), 1, f) != 1 ||
            fread(&t->ndim, sizeof(int), 1, f) != 1 || fread(t->shape, sizeof(int), 4, f) != 4)
            die("truncated tensor header in ", path);
        t->name[47] = '\0';
        if ((t->dtype != 0 && t->dtype != 1) || t->ndim < 0 || t->ndim > 4) die("corrupt tensor header in ", path);
        t->n = 1;
        for (int d = 0; d < 4; d++) {
            if (t->shape[d] < 0) die("negative dimension in ", path);
            t->n *= (size_t)t->shape[d];
        }
        t->data = malloc(t->n * 4 + 1);
        if (!t->data) die("out of memory reading ", path);
        if (fread(t->data, 4, t->n, f) != t->n) die("truncated tensor data in ", path);
    }
    fclose(f);
}

static const Tensor *find(const char *cs, const char *field, int dtype) {
    char name[96];
    snprintf(name, sizeof(name), "%s.%s", cs, field);
    for (int i = 0; i < n_tensors; i++)
        if (strcmp(tensors[i].name, name) == 0) {
            if (tensors[i].dtype != dtype) die("wrong dtype for tensor ", name);
            return &tensors[i];
        }
    die("reference file lacks tensor ", name);
    return NULL;
}
static const float *ref(const char *cs, const char *field) { return find(cs, field, 0)->data; }
static const int *ref_int(const char *cs, const char *field) { return find(cs, field, 1)->data; }
static size_t ref_n(const char *cs, const char *field) { return find(cs, field, 0)->n; }

// ------------------------------------------------------------------------------------------------
// output buffers with guards

static const uint32_t GUARD_BITS = 0x7fc0dead;   // a NaN with a payload nobody writes by accident

typedef struct { float *base; float *data; size_t n; } Buffer;

static Buffer buffer_new(size_t n, float fill) {
    Buffer b = {malloc((n + 2 * GUARD) * sizeof(float)), NULL, n};
    if (!b.base) die("out of memory", NULL);
    b.data = b.base + GUARD;
    for (size_t i = 0; i < GUARD; i++) {
        memcpy(&b.base[i], &GUARD_BITS, 4);
        memcpy(&b.data[n + i], &GUARD_BITS, 4);
    }
    for (size_t i = 0; i < n; i++) b.data[i] = fill;
    return b;
}
static void buffer_fill(Buffer *b, float fill) { for (size_t i = 0; i < b->n; i++) b->data[i] = fill; }
static int guards_intact(const Buffer *b) {
    for (size_t i = 0; i < GUARD; i++)
        if (memcmp(&b->base[i], &GUARD_BITS, 4) || memcmp(&b->data[b->n + i], &GUARD_BITS, 4)) return 0;
    return 1;
}

// ------------------------------------------------------------------------------------------------
// results: each kernel run records what it produced and what that should equal (mult * reference)

#define MAX_RESULTS 40
typedef struct {
    char name[64];
    float *got;             // a copy of the output
    const float *expected;  // reference values, times mult
    float mult;             // 1, or 2 after two calls of a backward
    size_t n;
    int guards_ok;
} Result;
typedef struct { Result r[MAX_RESULTS]; int n; } Results;

// records a copy of b, which should equal mult * expected; call 2 of a backward gets ", 2 calls"
static void record(Results *rs, const char *name, int call, const Buffer *b, const float *expected) {
    if (rs->n == MAX_RESULTS) die("too many results", NULL);
    Result *r = &rs->r[rs->n++];
    snprintf(r->name, sizeof(r->name), "%s%s", name, call == 2 ? ", 2 calls" : "");
    r->got = malloc(b->n * sizeof(float));
    if (!r->got) die("out of memory", NULL);
    memcpy(r->got, b->data, b->n * sizeof(float));
    r->expected = expected;
    r->mult = (float)call;
    r->n = b->n;
    r->guards_ok = guards_intact(b);
}

static void results_free(Results *rs) {
    for (int i = 0; i < rs->n; i++) free(rs->r[i].got);
    rs->n = 0;
}

static int verbose;

// compares one result with its reference; prints a line if it fails (or -v); returns 1 if it passes
// and stores its worst error in *worst_out
static int check(const char *cs, const Result *r, double *worst_out) {
    double sum_sq = 0.0;
    for (size_t i = 0; i < r->n; i++) { double e = (double)r->mult * r->expected[i]; sum_sq += e * e; }
    double rms = r->n ? sqrt(sum_sq / r->n) : 0.0;
    double worst = 0.0, worst_abs = 0.0;
    size_t worst_i = 0;
    int bad = 0;
    for (size_t i = 0; i < r->n; i++) {
        double e = (double)r->mult * r->expected[i], g = r->got[i];
        double err = fabs(g - e) / (fabs(e) + rms + 1e-30);
        if (!(err <= TOL)) bad = 1;       // also catches NaN
        if (isnan(worst)) continue;          // the first NaN is the one reported
        if (isnan(err) || err > worst) { worst = err; worst_i = i; }
        if (fabs(g - e) > worst_abs) worst_abs = fabs(g - e);
    }
    int pass = !bad && r->guards_ok;
    *worst_out = worst;
    if (pass && !verbose) return 1;
    printf("  %-4s %-8s %-40s n=%-8zu max err %.2e (tol %.0e), max abs %.2e\n", pass ? "ok" : "FAIL", cs,
           r->name, r->n, worst, TOL, worst_abs);
    if (bad)
        printf("       worst element %zu: got %.9g expected %.9g\n", worst_i, r->got[worst_i],
               (double)r->mult * r->expected[worst_i]);
    if (!r->guards_ok) printf("       the kernel wrote outside its output buffer\n");
    return pass;
}

// ------------------------------------------------------------------------------------------------
// one function per kernel pair: run forward and backward (twice) on the reference inputs

typedef struct { int B, T, C, NH, OC, V, Vp, maxT; } Config;

static void run_encoder(const char *cs, const Config *c, Results *rs) {
    int B = c->B, T = c->T, C = c->C;
    const int *inp = ref_int(cs, "encoder.inp");
    Buffer out = buffer_new((size_t)B * T * C, NAN);
    encoder_forward(out.data, inp, ref(cs, "encoder.wte"), ref(cs, "encoder.wpe"), B, T, C);
    record(rs, "encoder_forward out", 1, &out, ref(cs, "encoder.out"));
    Buffer dwte = buffer_new((size_t)c->Vp * C, 0), dwpe = buffer_new((size_t)c->maxT * C, 0);
    for (int call = 1; call <= 2; call++) {
        encoder_backward(dwte.data, dwpe.data, ref(cs, "encoder.dout"), inp, B, T, C);
        record(rs, "encoder_backward dwte", call, &dwte, ref(cs, "encoder.dwte"));
        record(rs, "encoder_backward dwpe", call, &dwpe, ref(cs, "encoder.dwpe"));
    }
    free(out.base); free(dwte.base); free(dwpe.base);
}

static void run_layernorm(const char *cs, const Config *c, Results *rs) {
    int B = c->B, T = c->T, C = c->C;
    const float *inp = ref(cs, "layernorm.inp"), *weight = ref(cs, "layernorm.weight");
    Buffer out = buffer_new((size_t)B * T * C, NAN);
    Buffer mean = buffer_new((size_t)B * T, NAN), rstd = buffer_new((size_t)B * T, NAN);
    layernorm_forward(out.data, mean.data, rstd.data, inp, weight, ref(cs, "layernorm.bias"), B, T, C);
    record(rs, "layernorm_forward out", 1, &out, ref(cs, "layernorm.out"));
    record(rs, "layernorm_forward mean", 1, &mean, ref(cs, "layernorm.mean"));
    record(rs, "layernorm_forward rstd", 1, &rstd, ref(cs, "layernorm.rstd"));
    Buffer dinp = buffer_new((size_t)B * T * C, 0), dweight = buffer_new(C, 0), dbias = buffer_new(C, 0);
    for (int call = 1; call <= 2; call++) {
        // the backward is given the reference mean/rstd, so it is tested on its own
        layernorm_backward(dinp.data, dweight.data, dbias.data, ref(cs, "layernorm.dout"), inp, weight,
                           ref(cs, "layernorm.mean"), ref(cs, "layernorm.rstd"), B, T, C);
        record(rs, "layernorm_backward dinp", call, &dinp, ref(cs, "layernorm.dinp"));
        record(rs, "layernorm_backward dweight", call, &dweight, ref(cs, "layernorm.dweight"));
        record(rs, "layernorm_backward dbias", call, &dbias, ref(cs, "layernorm.dbias"));
    }
    free(out.base); free(mean.base); free(rstd.base); free(dinp.base); free(dweight.base); free(dbias.base);
}

static void run_matmul(const char *cs, const Config *c, Results *rs) {
    int B = c->B, T = c->T, C = c->C, OC = c->OC;
    const float *inp = ref(cs, "matmul.inp"), *weight = ref(cs, "matmul.weight");
    Buffer out = buffer_new((size_t)B * T * OC, NAN);
    matmul_forward(out.data, inp, weight, ref(cs, "matmul.bias"), B, T, C, OC);
    record(rs, "matmul_forward out", 1, &out, ref(cs, "matmul.out"));
    buffer_fill(&out, NAN);
    matmul_forward(out.data, inp, weight, NULL, B, T, C, OC);
    record(rs, "matmul_forward out, bias NULL", 1, &out, ref(cs, "matmul.out_nobias"));
    Buffer dinp = buffer_new((size_t)B * T * C, 0), dweight = buffer_new((size_t)OC * C, 0), dbias = buffer_new(OC, 0);
    for (int call = 1; call <= 2; call++) {
        matmul_backward(dinp.data, GRAD_ADD, dweight.data, dbias.data, ref(cs, "matmul.dout"), inp, weight, B, T, C, OC);
        record(rs, "matmul_backward dinp", call, &dinp, ref(cs, "matmul.dinp"));
        record(rs, "matmul_backward dweight", call, &dweight, ref(cs, "matmul.dweight"));
        record(rs, "matmul_backward dbias", call, &dbias, ref(cs, "matmul.dbias"));
    }
    // dbias NULL: the other two gradients are unchanged; dinp written over NaN (GRAD_WRITE must not read it)
    buffer_fill(&dinp, NAN); buffer_fill(&dweight, 0);
    matmul_backward(dinp.data, GRAD_WRITE, dweight.data, NULL, ref(cs, "matmul.dout"), inp, weight, B, T, C, OC);
    record(rs, "matmul_backward dinp written, dbias NULL", 1, &dinp, ref(cs, "matmul.dinp"));
    record(rs, "matmul_backward dweight, dbias NULL", 1, &dweight, ref(cs, "matmul.dweight"));
    free(out.base); free(dinp.base); free(dweight.base); free(dbias.base);
}

static void run_attention(const char *cs, const Config *c, Results *rs) {
    int B = c->B, T = c->T, C = c->C, NH = c->NH;
    size_t n_att = (size_t)B * NH * T * T;
    const float *inp = ref(cs, "attention.inp");
    Buffer out = buffer_new((size_t)B * T * C, NAN), preatt = buffer_new(n_att, NAN), att = buffer_new(n_att, NAN);
    attention_forward(out.data, preatt.data, att.data, inp, B, T, C, NH);
    record(rs, "attention_forward out", 1, &out, ref(cs, "attention.out"));
    record(rs, "attention_forward preatt", 1, &preatt, ref(cs, "attention.preatt"));
    record(rs, "attention_forward att", 1, &att, ref(cs, "attention.att"));
    Buffer dinp = buffer_new((size_t)B * T * 3 * C, 0), dpreatt = buffer_new(n_att, NAN), datt = buffer_new(n_att, NAN);
    for (int call = 1; call <= 2; call++) {
        buffer_fill(&dpreatt, NAN);   // scratch: whatever is in it must not matter
        buffer_fill(&datt, NAN);
        attention_backward(dinp.data, GRAD_ADD, dpreatt.data, datt.data, ref(cs, "attention.dout"), inp,
                           ref(cs, "attention.att"), B, T, C, NH);
        record(rs, "attention_backward dinp", call, &dinp, ref(cs, "attention.dinp"));
    }
    buffer_fill(&dinp, NAN);   // written over: every element of q, k and v once
    attention_backward(dinp.data, GRAD_WRITE, dpreatt.data, datt.data, ref(cs, "attention.dout"), inp,
                       ref(cs, "attention.att"), B, T, C, NH);
    record(rs, "attention_backward dinp written", 1, &dinp, ref(cs, "attention.dinp"));
    if (!guards_intact(&dpreatt) || !guards_intact(&datt)) {
        Result *r = &rs->r[rs->n - 1];
        r->guards_ok = 0;   // a stray write into the scratch guards fails the dinp check
    }
    free(out.base); free(preatt.base); free(att.base); free(dinp.base); free(dpreatt.base); free(datt.base);
}

static void run_gelu(const char *cs, const Config *c, Results *rs) {
    int N = (int)ref_n(cs, "gelu.inp");
    (void)c;
    Buffer out = buffer_new(N, NAN), dinp = buffer_new(N, 0);
    gelu_forward(out.data, ref(cs, "gelu.inp"), N);
    record(rs, "gelu_forward out", 1, &out, ref(cs, "gelu.out"));
    for (int call = 1; call <= 2; call++) {
        gelu_backward(dinp.data, GRAD_ADD, ref(cs, "gelu.inp"), ref(cs, "gelu.dout"), N);
        record(rs, "gelu_backward dinp", call, &dinp, ref(cs, "gelu.dinp"));
    }
    buffer_fill(&dinp, NAN);   // written over: what was there must not matter
    gelu_backward(dinp.data, GRAD_WRITE, ref(cs, "gelu.inp"), ref(cs, "gelu.dout"), N);
    record(rs, "gelu_backward dinp written", 1, &dinp, ref(cs, "gelu.dinp"));
    free(out.base); free(dinp.base);
}

static void run_residual(const char *cs, const Config *c, Results *rs) {
    int N = (int)ref_n(cs, "residual.inp1");
    (void)c;
    Buffer out = buffer_new(N, NAN), dinp1 = buffer_new(N, 0), dinp2 = buffer_new(N, 0);
    residual_forward(out.data, ref(cs, "residual.inp1"), ref(cs, "residual.inp2"), N);
    record(rs, "residual_forward out", 1, &out, ref(cs, "residual.out"));
    for (int call = 1; call <= 2; call++) {
        residual_backward(dinp1.data, dinp2.data, ref(cs, "residual.dout"), N);
        record(rs, "residual_backward dinp1", call, &dinp1, ref(cs, "residual.dinp1"));
        record(rs, "residual_backward dinp2", call, &dinp2, ref(cs, "residual.dinp2"));
    }
    free(out.base); free(dinp1.base); free(dinp2.base);
}

static void run_softmax_crossentropy(const char *cs, const Config *c, Results *rs) {
    int B = c->B, T = c->T, V = c->V, Vp = c->Vp;
    const int *targets = ref_int(cs, "softmax.targets");
    Buffer probs = buffer_new((size_t)B * T * Vp, NAN), losses = buffer_new((size_t)B * T, NAN);
    softmax_forward(probs.data, ref(cs, "softmax.logits"), B, T, V, Vp);
    record(rs, "softmax_forward probs", 1, &probs, ref(cs, "softmax.probs"));
    // the cross-entropy kernels get the reference probs, so each is tested on its own; the padded
    // columns hold garbage, which the kernels must not use (dlogits there must stay 0)
    Buffer probs_in = buffer_new((size_t)B * T * Vp, 0);
    memcpy(probs_in.data, ref(cs, "softmax.probs"), (size_t)B * T * Vp * sizeof(float));
    for (size_t bt = 0; bt < (size_t)B * T; bt++)
        for (int i = V; i < Vp; i++) probs_in.data[bt * Vp + i] = 7.0f;
    crossentropy_forward(losses.data, probs_in.data, targets, B, T, Vp);
    record(rs, "crossentropy_forward losses", 1, &losses, ref(cs, "softmax.losses"));
    Buffer dlogits = buffer_new((size_t)B * T * Vp, 0);
    for (int call = 1; call <= 2; call++) {
        crossentropy_softmax_backward(dlogits.data, GRAD_ADD, ref(cs, "softmax.dlosses"), probs_in.data, targets, B, T, V, Vp);
        record(rs, "crossentropy_softmax_backward dlogits", call, &dlogits, ref(cs, "softmax.dlogits"));
    }
    buffer_fill(&dlogits, NAN);   // written over, the padded columns too (to the reference's 0)
    crossentropy_softmax_backward(dlogits.data, GRAD_WRITE, ref(cs, "softmax.dlosses"), probs_in.data, targets, B, T, V, Vp);
    record(rs, "crossentropy_softmax_backward dlogits written", 1, &dlogits, ref(cs, "softmax.dlogits"));
    free(probs.base); free(probs_in.base); free(losses.base); free(dlogits.base);
}

// The attention a head at a time (where att_head_fits) against the row blocks: the same bits, for
// the forward's three outputs and the backward's dinp, added into a random one and written over NaN.
// Random inputs: T=300 with hs=32 runs sums over more than one depth block (MM_DEPTH_BLOCK).
static float att_random(unsigned *state) { *state = *state * 1664525u + 1013904223u; return (float)(*state >> 8) / 16777216.0f - 0.5f; }
static int check_attention_paths(void) {
    const int shapes[][4] = {{2, 64, 128, 2}, {1, 300, 64, 2}, {3, 7, 72, 3}, {1, 1, 16, 2}};   // B, T, C, NH
    for (size_t si = 0; si < sizeof(shapes) / sizeof(shapes[0]); si++) {
        int B = shapes[si][0], T = shapes[si][1], C = shapes[si][2], NH = shapes[si][3];
        if (!att_head_fits(T, C / NH)) { printf("attention paths: T=%d hs=%d does not fit a head's panels\n", T, C / NH); return 1; }
        size_t n_qkv = (size_t)B * T * 3 * C, n_out = (size_t)B * T * C, n_att = (size_t)B * NH * T * T;
        float *qkv = malloc(n_qkv * 4), *dout = malloc(n_out * 4), *dinit = malloc(n_qkv * 4);
        float *out[2], *preatt[2], *att[2], *dadd[2], *dwrite[2], *scratch = malloc(2 * n_att * 4);
        if (!qkv || !dout || !dinit || !scratch) die("out of memory", NULL);
        unsigned st = 12345u + (unsigned)si;
        for (size_t i = 0; i < n_qkv; i++) { qkv[i] = 4.0f * att_random(&st); dinit[i] = att_random(&st); }
        for (size_t i = 0; i < n_out; i++) dout[i] = att_random(&st);
        for (int path = 0; path < 2; path++) {
            out[path] = malloc(n_out * 4); preatt[path] = malloc(n_att * 4); att[path] = malloc(n_att * 4);
            dadd[path] = malloc(n_qkv * 4); dwrite[path] = malloc(n_qkv * 4);
            if (!out[path] || !preatt[path] || !att[path] || !dadd[path] || !dwrite[path]) die("out of memory", NULL);
            for (size_t i = 0; i < n_att; i++) preatt[path][i] = att[path][i] = NAN;
            memcpy(dadd[path], dinit, n_qkv * 4);
            for (size_t i = 0; i < n_qkv; i++) dwrite[path][i] = NAN;
            for (size_t i = 0; i < 2 * n_att; i++) scratch[i] = NAN;
            if (path == 0) {
                attention_forward(out[0], preatt[0], att[0], qkv, B, T, C, NH);
                attention_backward(dadd[0], GRAD_ADD, scratch, scratch + n_att, dout, qkv, att[0], B, T, C, NH);
                attention_backward(dwrite[0], GRAD_WRITE, scratch, scratch + n_att, dout, qkv, att[0], B, T, C, NH);
            } else {
                attention_forward_rows(out[1], preatt[1], att[1], qkv, B, T, C, NH);
                attention_backward_rows(dadd[1], GRAD_ADD, scratch, scratch + n_att, dout, qkv, att[1], B, T, C, NH);
                attention_backward_rows(dwrite[1], GRAD_WRITE, scratch, scratch + n_att, dout, qkv, att[1], B, T, C, NH);
            }
        }
        const char *differs = memcmp(out[0], out[1], n_out * 4) ? "out" : memcmp(preatt[0], preatt[1], n_att * 4) ? "preatt"
                            : memcmp(att[0], att[1], n_att * 4) ? "att" : memcmp(dadd[0], dadd[1], n_qkv * 4) ? "dinp added"
                            : memcmp(dwrite[0], dwrite[1], n_qkv * 4) ? "dinp written" : NULL;
        if (differs) {
            printf("  FAIL attention B=%d T=%d C=%d NH=%d: %s a head at a time differs from the row blocks'\n", B, T, C, NH, differs);
            return 1;
        }
        for (int path = 0; path < 2; path++) { free(out[path]); free(preatt[path]); free(att[path]); free(dadd[path]); free(dwrite[path]); }
        free(qkv); free(dout); free(dinit); free(scratch);
    }
    printf("attention a head at a time: bitwise the row blocks' on %zu shapes (T up to 300: sums past one depth block)\n",
           sizeof(shapes) / sizeof(shapes[0]));
    return 0;
}

typedef void (*RunFn)(const char *, const Config *, Results *);

// ------------------------------------------------------------------------------------------------
// GELU where its constants matter. The cases above bound the error relative to the tensor's scale,
// where a constant off in its 3rd digit moves the result by about the tolerance. Here: x on a fine
// grid over [-3, 3], where tanh has not saturated and the cubic term is large, against the formula
// in double, with the error relative to |ref| + 0.05 (small outputs count, as at x = -2, where
// gelu(-2) = -0.045 moves by 0.2x any relative change of 0.044715). The kernel's own error is
// ~4e-6 there (fp32 cancellation in 1 + tanh u); a constant wrong by 0.1% errs by ~2e-4.
#define GELU_TOL 1e-5
static int check_gelu_targeted(void) {
    enum { N = 6 * 128 + 1 };
    float x[N], out[N], dout[N], dinp[N];
    for (int i = 0; i < N; i++) { x[i] = -3.0f + (float)i / 128.0f; dout[i] = 1.0f; dinp[i] = 0.0f; }
    gelu_forward(out, x, N);
    gelu_backward(dinp, GRAD_ADD, x, dout, N);
    double worst_f = 0.0, worst_b = 0.0;
    for (int i = 0; i < N; i++) {
        double xd = x[i], c = 0.044715, k = sqrt(2.0 / M_PI);
        double u = k * (xd + c * xd * xd * xd), th = tanh(u);
        double f = 0.5 * xd * (1.0 + th);
        double df = 0.5 * (1.0 + th) + 0.5 * xd * (1.0 - th * th) * k * (1.0 + 3.0 * c * xd * xd);
        double ef = fabs(out[i] - f) / (fabs(f) + 0.05), eb = fabs(dinp[i] - df) / (fabs(df) + 0.05);
        if (ef > worst_f) worst_f = ef;
        if (eb > worst_b) worst_b = eb;
    }
    int ok = worst_f <= GELU_TOL && worst_b <= GELU_TOL;
    printf("gelu targeted: %d points in [-3, 3], worst error forward %.2e, backward %.2e (tolerance %.0e): %s\n", N,
           worst_f, worst_b, GELU_TOL, ok ? "ok" : "FAIL");
    return ok ? 0 : 1;
}

// Layernorm where its epsilon matters: rows of variance 1e-7 .. 1e-3 (a nearly constant residual
// stream), where 1e-5 is a large part of var + eps, against the formula in double with eps = 1e-5,
// the value the contract (PyTorch's nn.LayerNorm) fixes. An eps of 1e-6 errs there by up to 3x.
static int check_layernorm_eps(void) {
    enum { C = 64, ROWS = 5 };
    float x[ROWS * C], w[C], b[C], out[ROWS * C], mean[ROWS], rstd[ROWS];
    for (int c = 0; c < C; c++) { w[c] = 1.0f; b[c] = 0.0f; }
    double worst = 0.0;
    for (int r = 0; r < ROWS; r++) {
        double spread = sqrt(1e-7 * pow(10.0, r));   // std of the row: variance 1e-7 .. 1e-3
        for (int c = 0; c < C; c++) x[r * C + c] = (float)(0.5 + spread * ((c % 2) ? 1.0 : -1.0));
    }
    layernorm_forward(out, mean, rstd, x, w, b, 1, ROWS, C);
    for (int r = 0; r < ROWS; r++) {
        double m = 0.0, v = 0.0;
        for (int c = 0; c < C; c++) m += x[r * C + c];
        m /= C;
        for (int c = 0; c < C; c++) v += (x[r * C + c] - m) * (x[r * C + c] - m);
        v /= C;
        for (int c = 0; c < C; c++) {
            double want = (x[r * C + c] - m) / sqrt(v + 1e-5), err = fabs(out[r * C + c] - want) / (fabs(want) + 1e-3);
            if (err > worst) worst = err;
        }
    }
    int ok = worst <= 1e-3;
    printf("layernorm eps: rows of variance 1e-7 .. 1e-3, worst error %.2e against eps = 1e-5 in double: %s\n", worst,
           ok ? "ok" : "FAIL");
    return ok ? 0 : 1;
}

// ------------------------------------------------------------------------------------------------

int main(int argc, char **argv) {
    if (argc == 3 && strcmp(argv[1], "-v") == 0) { verbose = 1; argv++; argc--; }
    if (argc != 2) {
        fprintf(stderr, "usage: %s [-v] REFERENCE.bin   (made by tests/unit/cpu_kernels_ref.py)\n", argv[0]);
        return 1;
    }
    load_reference(argv[1]);
    const char *cases[] = {"tiny", "awkward", "bigger", "d12"};
    const RunFn kernels[] = {run_encoder, run_layernorm, run_matmul, run_attention, run_gelu, run_residual,
                             run_softmax_crossentropy};
    const int thread_counts[] = {1, 2, 3};
    int failures = 0, checks = 0;
    for (size_t ci = 0; ci < sizeof(cases) / sizeof(cases[0]); ci++) {
        const char *cs = cases[ci];
        const Tensor *cfg_t = find(cs, "config", 1);
        if (cfg_t->n != 8) die("config tensor must have 8 entries in case ", cs);
        const int *v = cfg_t->data;
        Config cfg = {v[0], v[1], v[2], v[3], v[4], v[5], v[6], v[7]};
        int case_checks = 0;
        double case_worst = 0.0;
        char worst_name[64] = "";
        for (size_t k = 0; k < sizeof(kernels) / sizeof(kernels[0]); k++) {
            Results first = {.n = 0}, again = {.n = 0};
            omp_set_num_threads(thread_counts[0]);
            kernels[k](cs, &cfg, &first);
            for (int i = 0; i < first.n; i++) {
                double worst;
                case_checks++;
                if (!check(cs, &first.r[i], &worst)) failures++;
                if (worst > case_worst) {
                    case_worst = worst;
                    snprintf(worst_name, sizeof(worst_name), "%s", first.r[i].name);
                }
            }
            // the same run on other thread counts must give the same bits
            for (size_t tc = 1; tc < sizeof(thread_counts) / sizeof(thread_counts[0]); tc++) {
                omp_set_num_threads(thread_counts[tc]);
                kernels[k](cs, &cfg, &again);
                for (int i = 0; i < first.n; i++) {
                    if (memcmp(first.r[i].got, again.r[i].got, first.r[i].n * sizeof(float)) != 0) {
                        printf("  FAIL %-8s %-40s differs between 1 and %d threads\n", cs, first.r[i].name,
                               thread_counts[tc]);
                        failures++;
                    }
                }
                results_free(&again);
            }
            results_free(&first);
        }
        checks += case_checks;
        printf("case %-8s B=%d T=%d C=%d NH=%d OC=%d V=%d Vp=%d: %d checks, worst error %.2e (%s)\n", cs, cfg.B, cfg.T,
               cfg.C, cfg.NH, cfg.OC, cfg.V, cfg.Vp, case_checks, case_worst, worst_name);
        if (failures) {
            printf("test_cpu_kernels: %d of %d checks FAILED (case %s)\n", failures, checks, cs);
            return 1;
        }
    }
    if (check_gelu_targeted()) return 1;
    if (check_layernorm_eps()) return 1;
    if (check_attention_paths()) return 1;
    printf("test_cpu_kernels: all %d checks passed (tolerance %.0e), bitwise identical on 1, 2 and 3 threads\n",
           checks, TOL);
    return 0;
}
