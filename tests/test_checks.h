// tests/test_checks.h: the checks of test_gpt2.c (CPU trainer) and test_gpt2.cu (GPU trainer) against the
// PyTorch reference dump (tests/reference/gpt2_reference.py), written once for both. For every ZeRO stage (only 0
// in the DDP build) and for A = 1 and 2 micro-steps, on all ranks of the backend:
//  - step 0's forward: every layer's activations, the logits and the loss, each rank's rows against
//    the same rows of the reference;
//  - step 0's gradients: each rank's owned gradient slice against the same elements of the reference
//    (under ZeRO-3 no rank has more than its slice), and the global norm;
//  - the losses, gradient norms and LRs of the reference's training steps.
//
// Elementwise bound: |got - ref| <= tol * (|ref| + rms(ref)). The rms term keeps elements near zero
// (where cancellation leaves absolute, not relative, error) from failing a correct result, while
// still failing anything that is wrong by more than a hair of the tensor's scale. Gradients also get
// a per-tensor normwise bound (||got - ref|| / ||ref||), which the BF16 build relies on (test_gpt2.cu
// says why); a trainer that needs none passes INFINITY.
//
// The including test hands test_main its backend and its trainer's build description, whose compute
// table (host/passes.h) reads the activations of the last forward (`activation`): B*T rows of the
// build's param_type elements (both trainers keep activations in the working-param type).
// Engine and model buffers are read through the backend's copy_to_host, so device memory is fine.
#pragma once
#include "dump.h"
#include "../host/passes.h"
#include "../host/train.h"

static const Zero3Backend *g_test_be;   // the backend under test (copies from its memory)
static const TrainBuild *g_test_build;   // the trainer binary's data types and alignment

// the per-layer activations the dump records, by its names, with their width in units of C, in the
// order of GPT2Activation (GPT2_ACT_LN1 ...)
static const struct { const char *name; int width_in_C; } TEST_LAYER_ACTS[GPT2_LAYER_ACTS] = {
    {"ln1", 1}, {"qkv", 3}, {"atty", 1}, {"residual2", 1}, {"ln2", 1}, {"fch", 4}, {"fch_gelu", 4}, {"residual3", 1}};

// per element of activations, of gradients; per tensor of gradients; the global gradient norm; the
// step-0 loss; the losses of the later training steps
typedef struct { double act, grad, grad_normwise, grad_norm, loss, train_loss; } Tolerances;

// worst errors seen, per kind, for the report line
typedef struct { double worst; char worst_name[64]; int failures; double act, grad, grad_normwise; } Tally;

static void tally_worst(Tally *t, const char *name, double err) {
    if (err > t->worst) { t->worst = err; snprintf(t->worst_name, sizeof t->worst_name, "%s", name); }
}

// rms over `rows` rows (stride `stride`) of their first `used` elements
static double rms_rows(const float *x, size_t rows, size_t stride, size_t used) {
    double s = 0.0;
    for (size_t r = 0; r < rows; r++)
        for (size_t i = 0; i < used; i++) { double v = x[r * stride + i]; s += v * v; }
    return rows * used > 0 ? sqrt(s / (double)(rows * used)) : 0.0;
}

// Compares rows x cols of got (row stride gs) against ref (row stride rs).
static void check_rows(Tally *t, const char *name, const float *got, size_t gs, const float *ref, size_t rs,
                       size_t rows, size_t cols, double tol) {
    double scale = rms_rows(ref, rows, rs, cols);
    double worst = 0.0;
    size_t bad = 0, first_r = 0, first_c = 0;
    for (size_t r = 0; r < rows; r++)
        for (size_t c = 0; c < cols; c++) {
            double g = got[r * gs + c], e = ref[r * rs + c];
            double err = fabs(g - e) / (fabs(e) + scale + 1e-30);
            if (!(err <= tol)) { if (!bad) { first_r = r; first_c = c; } bad++; }
            if (err > worst || err != err) worst = err != err ? INFINITY : err;
        }
    tally_worst(t, name, worst);
    if (worst > t->act) t->act = worst;
    if (bad) {
        t->failures++;
        fprintf(stderr, "rank %d: MISMATCH %s: %zu of %zu elements beyond tol %.1e (worst %.3e); first at [%zu,%zu]: %.9g vs ref %.9g\n",
                g_test_be->rank, name, bad, rows * cols, tol, worst, first_r, first_c, got[first_r * gs + first_c],
                ref[first_r * rs + first_c]);
    }
}

static void check_scalar(Tally *t, const char *name, double got, double ref, double tol) {
    double err = fabs(got - ref) / (fabs(ref) + 1e-30);
    tally_worst(t, name, err);
    if (!(err <= tol)) {
        t->failures++;
        if (g_test_be->rank == 0) fprintf(stderr, "MISMATCH %s: %.9g vs ref %.9g (rel %.3e > %.1e)\n", name, got, ref, err, tol);
    }
}

static const DumpRecord *need(const Dump *d, const char *name) {
    const DumpRecord *r = dump_find(d, name);
    if (!r) fatal("dump: record %s missing", name);
    return r;
}

// Gradient check through the file mapping: every piece of this rank's owned slice (as host floats)
// against the same elements of grad.<kind> in the reference.
typedef struct { const Dump *dump; const GPT2Config *cfg; const float *grads; size_t base; Tally *t; const Tolerances *tol; } GradArg;
static void check_grad_piece(const GPT2Piece *p, void *varg) {
    GradArg *a = (GradArg *)varg;
    char name[64];
    snprintf(name, sizeof name, "grad.%s", GPT2_KIND_NAMES[p->kind]);
    const DumpRecord *r = need(a->dump, name);
    size_t idx = p->file_elem - gpt2_file_offset(a->cfg, p->kind, 0);
    if (idx + p->count > r->numel) fatal("dump: %s smaller than the model's tensor", name);
    // the reference scale for this tensor (whole tensor, so that every rank uses the same one)
    double s = 0.0;
    for (size_t i = 0; i < r->numel; i++) s += (double)r->f[i] * r->f[i];
    double scale = sqrt(s / r->numel), worst = 0.0, diff2 = 0.0, ref2 = 0.0;
    size_t bad = 0, first = 0;
    const float *got = a->grads + (p->unit_pos - a->base);
    for (size_t i = 0; i < p->count; i++) {
        double g = got[i], e = r->f[idx + i];
        double err = fabs(g - e) / (fabs(e) + scale + 1e-30);
        if (!(err <= a->tol->grad)) { if (!bad) first = i; bad++; }
        if (err > worst || err != err) worst = err != err ? INFINITY : err;
        diff2 += (g - e) * (g - e);
        ref2 += e * e;
    }
    // normwise over this rank's piece; a piece of exact zeros (an all-zero gradient) has 0
    const double normwise = ref2 > 0.0 ? sqrt(diff2 / ref2) : sqrt(diff2);
    tally_worst(a->t, name, worst);
    if (worst > a->t->grad) a->t->grad = worst;
    if (!(normwise <= a->t->grad_normwise)) a->t->grad_normwise = normwise;
    if (bad) {
        a->t->failures++;
        fprintf(stderr, "rank %d: MISMATCH %s (layer %d): %zu of %zu beyond tol (worst %.3e); first %.9g vs ref %.9g\n",
                g_test_be->rank, name, p->layer, bad, p->count, worst, got[first], r->f[idx + first]);
    }
    if (!(normwise <= a->tol->grad_normwise)) {
        a->t->failures++;
        fprintf(stderr, "rank %d: MISMATCH %s (layer %d): normwise error %.3e beyond %.1e\n", g_test_be->rank, name, p->layer,
                normwise, a->tol->grad_normwise);
    }
}

// n elements of type t from an engine or model buffer (host or device memory) as host floats
static void to_host_floats(float *out, const void *src, size_t n, Zero3DType t) {
    if (t == ZERO3_F32) { g_test_be->copy_to_host(g_test_be->ctx, out, src, n * sizeof(float)); return; }
    uint16_t *bits = (uint16_t *)xmalloc(n * sizeof(uint16_t));
    g_test_be->copy_to_host(g_test_be->ctx, bits, src, n * sizeof(uint16_t));
    for (size_t i = 0; i < n; i++) out[i] = bf16_to_f32(bits[i]);
    free(bits);
}

// Activations of step 0 (A = 1): this rank's rows [row0, row0 + b) of every recorded tensor.
static void check_activations(Tally *t, const Dump *d, GPT2Passes *passes, const GPT2Config *c, int b, int T, int row0, double tol) {
    size_t BT0 = (size_t)row0 * T, bT = (size_t)b * T, C = c->channels, Vp = c->padded_vocab_size, V = c->vocab_size;
    float *got = (float *)xmalloc(bT * (Vp > 4 * C ? Vp : 4 * C) * sizeof(float));
    char name[64];
    const GPT2Compute *compute = passes->compute;
    for (int l = 0; l < c->num_layers; l++)
        for (int k = 0; k < GPT2_LAYER_ACTS; k++) {
            snprintf(name, sizeof name, "%s.%d", TEST_LAYER_ACTS[k].name, l);
            size_t width = TEST_LAYER_ACTS[k].width_in_C * C;
            to_host_floats(got, compute->activation(passes->state, (GPT2Activation)k, l), bT * width, g_test_build->param_type);
            const DumpRecord *r = need(d, name);
            check_rows(t, name, got, width, r->f + BT0 * width, width, bT, width, tol);
        }
    to_host_floats(got, compute->activation(passes->state, GPT2_ACT_LNF, 0), bT * C, g_test_build->param_type);
    check_rows(t, "lnf", got, C, need(d, "lnf")->f + BT0 * C, C, bT, C, tol);
    to_host_floats(got, compute->activation(passes->state, GPT2_ACT_LOGITS, 0), bT * Vp, g_test_build->param_type);
    check_rows(t, "logits", got, Vp, need(d, "logits")->f + BT0 * V, V, bT, V, tol);
    free(got);
}

// The trainer under test, made by the very function train_main uses, from the flags a user would
// give for the reference's run: its model file and tokens, the batch split over N ranks and A
// micro-steps, the reference's schedule, clip threshold and weight decay, no validation.
static Trainer *make_trainer(const Zero3Backend *be, const Dump *d, const char *model_path, const char *tokens_path,
                             int stage, int A, int prefetch) {
    char v[16][32];
    int b = d->B / (be->world * A);
    snprintf(v[0], 32, "%d", b);
    snprintf(v[1], 32, "%d", d->T);
    snprintf(v[2], 32, "%d", d->B * d->T);
    snprintf(v[3], 32, "%d", d->nsteps);
    snprintf(v[4], 32, "%.9g", d->lr);
    snprintf(v[5], 32, "%d", d->warmup);
    snprintf(v[6], 32, "%.9g", d->final_frac);
    snprintf(v[7], 32, "%.9g", d->weight_decay);
    snprintf(v[8], 32, "%.9g", d->grad_clip);
    snprintf(v[9], 32, "%d", stage);
    snprintf(v[10], 32, "%d", prefetch);
    const char *argv[] = {"test", "-e", model_path, "-i", tokens_path, "-j", tokens_path, "-b", v[0], "-t", v[1],
                          "-d", v[2], "-x", v[3], "-l", v[4], "-u", v[5], "-q", v[6], "-c", v[7], "-gc", v[8],
                          "-z", v[9], "-pd", v[10], "-v", "0"};
    TrainArgs args;
    if (args_read(&args, (int)(sizeof argv / sizeof argv[0]), (char **)argv, train_args_build(g_test_build))) return NULL;
    return trainer_create(&args, be, g_test_build);
}

// The tokens this rank reads for micro-step k of step s must be rows (k*N + r)*b.. of the step's
// batch in the reference: the data-order contract, checked rather than assumed.
static void check_tokens(Tally *t, const Dump *d, Trainer *tr, int s, int k) {
    const int N = g_test_be->world, r = g_test_be->rank, A = trainer_micro_steps(tr), b = d->B / (N * A), T = d->T;
    const int32_t *tok = need(d, "step_tokens")->i + (size_t)s * (d->B * T + 1);
    const int row0 = (k * N + r) * b;
    trainer_load_batch(tr, s, k);
    const int *in = trainer_inputs(tr), *tg = trainer_targets(tr);
    for (int i = 0; i < b * T; i++)
        if (in[i] != tok[row0 * T + i] || tg[i] != tok[row0 * T + i + 1]) {
            t->failures++;
            fprintf(stderr, "rank %d: MISMATCH tokens of step %d micro-step %d at %d: the token file is not the dump's\n",
                    g_test_be->rank, s, k, i);
            return;
        }
}

// One configuration: stage, A micro-steps, on all ranks of the backend, through the trainer's own
// trainer_step (host/train.c): the step users run, not a copy of it. Returns failures.
// describe = 1: rank 0 first prints the device line of the trainer's compute.
static int run_case(const Zero3Backend *be, const Dump *d, const char *model_path, const char *tokens_path, int stage,
                    int A, int prefetch, const Tolerances *tol, int describe) {
    int N = be->world, r = be->rank;
    int B = d->B, T = d->T, b = B / (N * A);
    Tally t;
    memset(&t, 0, sizeof t);
    Trainer *tr = make_trainer(be, d, model_path, tokens_path, stage, A, prefetch);
    Zero3 *z = trainer_engine(tr);
    GPT2Passes *passes = trainer_model(tr);
    if (describe && r == 0) {
        char dev[512];
        passes->compute->describe(passes->state, dev, sizeof dev);
        printf("  %s\n", dev);
    }
    const GPT2Config *cfg = &passes->cfg;
    if (cfg->num_layers != d->L || cfg->channels != d->C || cfg->vocab_size != d->V) fatal("dump and model shapes differ");
    if (d->beta1 != 0.9f || d->beta2 != 0.95f || d->eps != 1e-8f) fatal("dump: AdamW betas/eps differ from the contract's");
    const float *ref_losses = need(d, "train_losses")->f, *ref_norms = need(d, "train_grad_norms")->f,
                *ref_lrs = need(d, "train_lrs")->f;
    // step 0's activations: a forward of step 0's batch before training (A = 1: the reference's rows)
    if (A == 1) {
        check_tokens(&t, d, tr, 0, 0);
        zero3_micro_begin(z, 0, 1, ZERO3_PASS_FORWARD);
        gpt2_pass_forward(passes, trainer_inputs(tr), trainer_targets(tr), 0);
        check_activations(&t, d, passes, cfg, b, T, r * b, tol->act);
    }
    double max_loss_err = 0.0;
    int clipped = 0;
    for (int s = 0; s < d->nsteps; s++) {
        for (int k = 0; k < A; k++) check_tokens(&t, d, tr, s, k);
        float lr = lr_at(trainer_args(tr), s), norm, clip;
        float loss;
        trainer_step(tr, s, lr, &loss, &norm, &clip);
        char name[64];
        if (s == 0) {
            check_scalar(&t, "loss", loss, need(d, "loss")->f[0], tol->loss);
            // the reduced gradients of step 0 are still in the engine after its update
            for (int u = 0; u < z->nunits; u++) {
                float *grads = (float *)xmalloc(z->units[u].shard * sizeof(float));
                to_host_floats(grads, zero3_owned_grads(z, u), z->units[u].shard, g_test_build->grad_type);
                GradArg ga = {d, cfg, grads, zero3_owned_begin(z, u), &t, tol};
                gpt2_for_each_piece(cfg, z, u, zero3_owned_begin(z, u), z->units[u].shard, check_grad_piece, &ga);
                free(grads);
            }
        }
        snprintf(name, sizeof name, "train_loss[%d]", s);
        check_scalar(&t, name, loss, ref_losses[s], s == 0 ? tol->loss : tol->train_loss);
        double lerr = fabs(loss - ref_losses[s]) / fabs(ref_losses[s]);
        if (lerr > max_loss_err) max_loss_err = lerr;
        snprintf(name, sizeof name, "grad_norm[%d]", s);
        check_scalar(&t, name, norm, ref_norms[s], tol->grad_norm);
        snprintf(name, sizeof name, "lr[%d]", s);
        check_scalar(&t, name, lr, ref_lrs[s], 1e-6);
        // the clip coefficient the step applied, against the one the reference's norm implies
        double ref_clip = (d->grad_clip > 0 && d->grad_clip / (ref_norms[s] + 1e-6) < 1.0) ? d->grad_clip / (ref_norms[s] + 1e-6) : 1.0;
        snprintf(name, sizeof name, "clip[%d]", s);
        check_scalar(&t, name, clip, ref_clip, tol->grad_norm);
        clipped += ref_clip < 1.0;
    }
    int failures = (int)be->all_reduce_scalar(be->ctx, t.failures);
    if (r == 0)   // rank 0's own worst errors
        printf("  stage %d  N=%d  A=%d  b=%-2d prefetch %d: %s  (worst: activations %.1e, gradients %.1e, normwise %.1e; "
               "overall %.2e in %s; train losses max rel diff %.2e; %d of %d steps clipped)\n", stage, N, A, b, prefetch,
               failures ? "FAIL" : "ok", t.act, t.grad, t.grad_normwise, t.worst, t.worst_name, max_loss_err, clipped, d->nsteps);
    fflush(stdout);
    trainer_destroy(tr);
    return failures;
}

// The whole test: argv[1] dump, argv[2] model, argv[3] the token file the reference trained on
// (defaults: the tiny reference, and the dump's NAME_tokens.bin), every stage and A.
// TEST_STAGES=3 (say) runs only the stages it names. Returns the exit status.
static int test_main(const char *prog, int argc, char **argv, const Zero3Backend *be, const TrainBuild *build,
                     const Tolerances *tol) {
    g_test_be = be;
    g_test_build = build;
    const char *dump_path = argc > 1 ? argv[1] : "tests/reference/dumps/tiny.dump";
    const char *model_path = argc > 2 ? argv[2] : "tests/reference/dumps/tiny_model.bin";
    // the token file beside the dump: tests/reference/dumps/NAME.dump -> tests/reference/dumps/NAME_tokens.bin (make dumps)
    char tokens_default[4096];
    snprintf(tokens_default, sizeof tokens_default, "%.*s_tokens.bin",
             (int)(strlen(dump_path) > 5 && !strcmp(dump_path + strlen(dump_path) - 5, ".dump") ? strlen(dump_path) - 5
                                                                                                : strlen(dump_path)), dump_path);
    const char *tokens_path = argc > 3 ? argv[3] : tokens_default;
    Dump d;
    char err[512];
    if (dump_open(&d, dump_path, err, sizeof err)) fatal("%s (make dumps creates it)", err);
    if (g_test_be->rank == 0) {   // (the device line comes with the first case: the compute describes it)
        printf("%s: %s (L=%d C=%d NH=%d V=%d B=%d T=%d, %d steps, reference in float%d) on %d rank(s)\n", prog,
               dump_path, d.L, d.C, d.NH, d.V, d.B, d.T, d.nsteps, d.compute_bits, be->world);
        printf("  tolerances: activations %.0e, gradients %.0e and normwise %.0e, grad norm %.0e, loss %.0e, "
               "later train losses %.0e\n", tol->act, tol->grad, tol->grad_normwise, tol->grad_norm, tol->loss, tol->train_loss);
    }
    int failures = 0, cases = 0;
    int stages[] = {0, 1, 2, 3};
    const size_t nstages = build->ddp_only ? 1 : 4;   // the DDP build runs stage 0 only
    const char *only = getenv("TEST_STAGES");   // e.g. TEST_STAGES=3 to debug one stage
    for (size_t i = 0; i < nstages; i++)
        for (int A = 1; A <= 2; A++) {
            if (d.B % (be->world * A) != 0) continue;   // the batch must split into N*A equal parts
            if (only && !strchr(only, '0' + stages[i])) continue;
            int prefetch = (stages[i] == 3 && A == 2) ? 2 : 1;
            failures += run_case(be, &d, model_path, tokens_path, stages[i], A, prefetch, tol, cases == 0) ? 1 : 0;
            cases++;
        }
    if (g_test_be->rank == 0) printf("%s: %d of %d cases passed on %d rank(s)\n", prog, cases - failures, cases, be->world);
    dump_free(&d);
    return failures ? 1 : 0;
}
