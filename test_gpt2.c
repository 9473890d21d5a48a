// test_gpt2.c: the CPU trainer against the PyTorch reference dump (dev/gpt2_reference.py).
//
//   ./test_gpt2 [dump] [model]                 (defaults: dev/ref/tiny.dump dev/ref/tiny_model.bin)
//   mpirun -np N ./test_gpt2 ...               N = 1..4
//
// For every ZeRO stage (only 0 in the DDP build) and for A = 1 and 2 micro-steps, on N ranks:
//  - step 0's forward: every layer's activations, the logits and the loss, each rank's rows against
//    the same rows of the reference;
//  - step 0's gradients: each rank's owned gradient slice against the same elements of the reference
//    (under ZeRO-3 no rank has more than its slice), and the global norm;
//  - the losses, gradient norms and LRs of the reference's training steps.
// The reference computes in float64, so the errors printed are this trainer's own fp32 error.
#define TESTING
#include "train_gpt2_zero3.c"
#include "dump.h"

// Elementwise check: |got - ref| <= tol * (|ref| + rms(ref)). The rms term keeps elements near zero
// (where fp32 cancellation leaves absolute, not relative, error) from failing a correct result,
// while still failing anything that is wrong by more than a hair of the tensor's scale.
typedef struct { double worst; char worst_name[64]; int failures; } Tally;

static double rms_of(const float *x, size_t n, size_t stride_rows, size_t row_len, size_t used) {
    double s = 0.0;
    size_t count = 0;
    for (size_t r = 0; r < n; r++)
        for (size_t i = 0; i < used; i++) { double v = x[r * stride_rows + i]; s += v * v; count++; }
    (void)row_len;
    return count ? sqrt(s / count) : 0.0;
}

// Compares rows x cols of got (row stride gs) against ref (row stride rs).
static void check_rows(Tally *t, const char *name, const float *got, size_t gs, const float *ref, size_t rs,
                       size_t rows, size_t cols, double tol) {
    double scale = rms_of(ref, rows, rs, rs, cols);
    double worst = 0.0;
    size_t bad = 0, first_r = 0, first_c = 0;
    for (size_t r = 0; r < rows; r++)
        for (size_t c = 0; c < cols; c++) {
            double g = got[r * gs + c], e = ref[r * rs + c];
            double err = fabs(g - e) / (fabs(e) + scale + 1e-30);
            if (!(err <= tol)) { if (!bad) { first_r = r; first_c = c; } bad++; }
            if (err > worst || err != err) worst = err != err ? INFINITY : err;
        }
    if (worst > t->worst) { t->worst = worst; snprintf(t->worst_name, sizeof t->worst_name, "%s", name); }
    if (bad) {
        t->failures++;
        fprintf(stderr, "rank %d: MISMATCH %s: %zu of %zu elements beyond tol %.1e (worst %.3e); first at [%zu,%zu]: %.9g vs ref %.9g\n",
                g_proc.rank, name, bad, rows * cols, tol, worst, first_r, first_c, got[first_r * gs + first_c],
                ref[first_r * rs + first_c]);
    }
}

static void check_scalar(Tally *t, const char *name, double got, double ref, double tol) {
    double err = fabs(got - ref) / (fabs(ref) + 1e-30);
    if (err > t->worst) { t->worst = err; snprintf(t->worst_name, sizeof t->worst_name, "%s", name); }
    if (!(err <= tol)) {
        t->failures++;
        if (g_proc.rank == 0) fprintf(stderr, "MISMATCH %s: %.9g vs ref %.9g (rel %.3e > %.1e)\n", name, got, ref, err, tol);
    }
}

static const DumpRecord *need(const Dump *d, const char *name) {
    const DumpRecord *r = dump_find(d, name);
    if (!r) fatal("dump: record %s missing", name);
    return r;
}

// Gradient check through the file mapping: every piece of this rank's owned slice is compared with
// the same elements of grad.<kind> in the reference.
typedef struct { const Dump *dump; const GPT2Config *cfg; const float *grads; size_t base; Tally *t; double tol; } GradArg;
static void check_grad_piece(const GPT2Piece *p, void *varg) {
    GradArg *a = varg;
    char name[64];
    snprintf(name, sizeof name, "grad.%s", GPT2_KIND_NAMES[p->kind]);
    const DumpRecord *r = need(a->dump, name);
    size_t kind_start = gpt2_file_offset(a->cfg, p->kind, 0);
    size_t idx = p->file_elem - kind_start;
    if (idx + p->count > r->numel) fatal("dump: %s smaller than the model's tensor", name);
    // the reference scale for this tensor (whole tensor, so that every rank uses the same one)
    double s = 0.0;
    for (size_t i = 0; i < r->numel; i++) s += (double)r->f[i] * r->f[i];
    double scale = sqrt(s / r->numel);
    double worst = 0.0;
    size_t bad = 0, first = 0;
    const float *got = a->grads + (p->unit_pos - a->base);
    for (size_t i = 0; i < p->count; i++) {
        double g = got[i], e = r->f[idx + i];
        double err = fabs(g - e) / (fabs(e) + scale + 1e-30);
        if (!(err <= a->tol)) { if (!bad) first = i; bad++; }
        if (err > worst || err != err) worst = err != err ? INFINITY : err;
    }
    if (worst > a->t->worst) { a->t->worst = worst; snprintf(a->t->worst_name, sizeof a->t->worst_name, "%s", name); }
    if (bad) {
        a->t->failures++;
        fprintf(stderr, "rank %d: MISMATCH %s (layer %d): %zu of %zu beyond tol (worst %.3e); first %.9g vs ref %.9g\n",
                g_proc.rank, name, p->layer, bad, p->count, worst, got[first], r->f[idx + first]);
    }
}

// Activations of step 0 (A = 1): this rank's rows [row0, row0 + b) of every recorded tensor.
static void check_activations(Tally *t, const Dump *d, Model *m, int row0, double tol) {
    const GPT2Config *c = &m->cfg;
    size_t BT0 = (size_t)row0 * m->T, bT = (size_t)m->B * m->T, C = c->channels;
    struct { const char *name; int which; size_t width; } acts[] = {
        {"ln1", A_LN1, C}, {"qkv", A_QKV, 3 * C}, {"atty", A_ATTY, C}, {"residual2", A_RESIDUAL2, C},
        {"ln2", A_LN2, C}, {"fch", A_FCH, 4 * C}, {"fch_gelu", A_FCH_GELU, 4 * C}, {"residual3", A_RESIDUAL3, C}};
    char name[64];
    for (int l = 0; l < c->num_layers; l++)
        for (size_t k = 0; k < sizeof acts / sizeof acts[0]; k++) {
            snprintf(name, sizeof name, "%s.%d", acts[k].name, l);
            const DumpRecord *r = need(d, name);
            check_rows(t, name, m->layer_acts[l][acts[k].which], acts[k].width, r->f + BT0 * acts[k].width,
                       acts[k].width, bT, acts[k].width, tol);
        }
    check_rows(t, "lnf", m->acts[A_LNF], C, need(d, "lnf")->f + BT0 * C, C, bT, C, tol);
    size_t V = c->vocab_size, Vp = c->padded_vocab_size;
    check_rows(t, "logits", m->acts[A_LOGITS], Vp, need(d, "logits")->f + BT0 * V, V, bT, V, tol);
}

typedef struct { double act, grad, loss; } Tolerances;

// One configuration: stage, A micro-steps, on all ranks of the backend. Returns failures.
static int run_case(const Zero3Backend *be, const Dump *d, const char *model_path, int stage, int A,
                    int prefetch, const Tolerances *tol) {
    int N = be->world, r = be->rank;
    int B = d->B, T = d->T, b = B / (N * A);
    Tally t = {0};
    Zero3 z;
    Zero3Config zc = {stage, prefetch, TRAIN_ALIGN, ZERO3_F32, ZERO3_F32};
    zero3_init(&z, be, &zc);
    GPT2Config cfg;
    char err[512];
    int elem_bytes;
    FILE *f = fopen(model_path, "rb");
    if (!f) fatal("cannot open %s", model_path);
    if (gpt2_read_header(f, model_path, &cfg, &elem_bytes, err, sizeof err)) fatal("%s", err);
    if (cfg.num_layers != d->L || cfg.channels != d->C || cfg.vocab_size != d->V) fatal("dump and model shapes differ");
    gpt2_register_units(&cfg, &z);
    zero3_allocate(&z);
    if (gpt2_load_owned(&cfg, &z, f, model_path, elem_bytes)) fatal("read failed: %s", model_path);
    fclose(f);
    zero3_publish_params(&z);
    Model *m = model_create(&cfg, &z, b, T);

    TrainArgs hp;
    args_defaults(&hp);
    hp.lr = d->lr; hp.warmup = d->warmup; hp.final_frac = d->final_frac; hp.steps = d->nsteps;
    const DumpRecord *step_tokens = need(d, "step_tokens");
    const float *ref_losses = need(d, "train_losses")->f, *ref_norms = need(d, "train_grad_norms")->f,
                *ref_lrs = need(d, "train_lrs")->f;
    int *inputs = xmalloc((size_t)b * T * sizeof(int)), *targets = xmalloc((size_t)b * T * sizeof(int));
    double max_loss_err = 0.0;
    for (int s = 0; s < d->nsteps; s++) {
        const int32_t *tok = step_tokens->i + (size_t)s * (B * T + 1);
        zero3_step_begin(&z);
        double loss_sum = 0.0;
        for (int k = 0; k < A; k++) {
            // the data-order contract inside one step: micro-step k on rank r takes window k*N + r,
            // i.e. rows (k*N + r)*b .. of the step's contiguous batch
            int row0 = (k * N + r) * b;
            for (int i = 0; i < b * T; i++) { inputs[i] = tok[row0 * T + i]; targets[i] = tok[row0 * T + i + 1]; }
            zero3_micro_begin(&z, k, A, ZERO3_PASS_TRAIN);
            loss_sum += model_forward(m, inputs, targets, 1);
            if (s == 0 && A == 1) check_activations(&t, d, m, row0, tol->act);
            model_backward(m, 1.0f / (B * T));
        }
        double loss = be->all_reduce_scalar(be->ctx, loss_sum) / (N * A);
        double norm = zero3_grad_norm(&z);
        if (s == 0) {
            check_scalar(&t, "loss", loss, need(d, "loss")->f[0], tol->loss);
            for (int u = 0; u < z.nunits; u++) {
                GradArg ga = {d, &cfg, zero3_owned_grads(&z, u), zero3_owned_begin(&z, u), &t, tol->grad};
                gpt2_for_each_piece(&cfg, &z, u, zero3_owned_begin(&z, u), z.units[u].shard, check_grad_piece, &ga);
            }
        }
        char name[64];
        snprintf(name, sizeof name, "train_loss[%d]", s);
        check_scalar(&t, name, loss, ref_losses[s], tol->loss);
        double lerr = fabs(loss - ref_losses[s]) / fabs(ref_losses[s]);
        if (lerr > max_loss_err) max_loss_err = lerr;
        snprintf(name, sizeof name, "grad_norm[%d]", s);
        check_scalar(&t, name, norm, ref_norms[s], tol->grad);
        float lr = lr_at(&hp, s);
        snprintf(name, sizeof name, "lr[%d]", s);
        check_scalar(&t, name, lr, ref_lrs[s], 1e-6);
        float clip = 1.0f;
        if (d->grad_clip > 0 && d->grad_clip / (norm + 1e-6) < 1.0) clip = (float)(d->grad_clip / (norm + 1e-6));
        zero3_optimizer_step(&z, lr, d->beta1, d->beta2, d->eps, d->weight_decay, clip, s + 1);
        zero3_check_idle(&z);
    }
    int failures = (int)be->all_reduce_scalar(be->ctx, t.failures);
    double worst = t.worst;   // this rank's; rank 0 prints its own
    if (r == 0)
        printf("  stage %d  N=%d  A=%d  b=%-2d prefetch %d: %s  (worst rel err %.2e in %s; train losses max rel diff %.2e)\n",
               stage, N, A, b, prefetch, failures ? "FAIL" : "ok", worst, t.worst_name, max_loss_err);
    free(inputs);
    free(targets);
    model_free(m);
    zero3_free(&z);
    return failures;
}

int main(int argc, char **argv) {
    Zero3Backend be;
    backend_cpu_init(&be, &argc, &argv);
    const char *dump_path = argc > 1 ? argv[1] : "dev/ref/tiny.dump";
    const char *model_path = argc > 2 ? argv[2] : "dev/ref/tiny_model.bin";
    Dump d;
    char err[512];
    if (dump_open(&d, dump_path, err, sizeof err)) fatal("%s (make dumps creates it)", err);
    // fp32 against a float64 reference (measured figures in the README's testing section)
    Tolerances tol = {1e-5, 5e-5, 1e-5};   // activations, gradients (and norm), losses
    if (g_proc.rank == 0)
        printf("test_gpt2: %s (L=%d C=%d NH=%d V=%d B=%d T=%d, %d steps, reference in float%d) on %d rank(s)\n",
               dump_path, d.L, d.C, d.NH, d.V, d.B, d.T, d.nsteps, d.compute_bits, be.world);
    int failures = 0, cases = 0;
#ifdef ZERO3_DDP_ONLY
    int stages[] = {0};
#else
    int stages[] = {0, 1, 2, 3};
#endif
    const char *only = getenv("TEST_STAGES");   // e.g. TEST_STAGES=3 to debug one stage
    for (size_t i = 0; i < sizeof stages / sizeof stages[0]; i++)
        for (int A = 1; A <= 2; A++) {
            if (d.B % (be.world * A) != 0) continue;   // the batch must split into N*A equal parts
            if (only && !strchr(only, '0' + stages[i])) continue;
            int prefetch = (stages[i] == 3 && A == 2) ? 2 : 1;
            failures += run_case(&be, &d, model_path, stages[i], A, prefetch, &tol) ? 1 : 0;
            cases++;
        }
    if (g_proc.rank == 0) printf("test_gpt2: %d of %d cases passed on %d rank(s)\n", cases - failures, cases, be.world);
    dump_free(&d);
    backend_cpu_finish();
    return failures ? 1 : 0;
}
