// train_loop.h: the training driver both trainers share: setup, the step loop (micro-steps, global
// norm, clipping, AdamW through the engine), validation, sampling, logging and the startup report.
//
// The including trainer defines, before including this file:
//   TRAIN_PARAM_TYPE, TRAIN_GRAD_TYPE     Zero3DType of working params / gradients
//   TRAIN_ALIGN                           tensor alignment in elements
//   typedef struct Model Model; and
//   Model *model_create(const GPT2Config *cfg, Zero3 *z, int B, int T);
//   float  model_forward(Model *m, const int *inputs, const int *targets, int training);
//            // inputs/targets: host (B,T); returns the mean loss over this rank's B*T tokens.
//            // training = 1 keeps the embedding gathered for the LM-head backward; targets may be
//            // NULL (no loss; used by sampling)
//   void   model_backward(Model *m, float dloss);   // dloss = d(step loss)/d(each token's loss)
//   void   model_probs(Model *m, int b, int t, float *probs);   // softmax row (V) after a forward
//   void   model_free(Model *m);
//   void   model_describe(char *buf, size_t n);    // device line for the startup report
//   double model_step_flops_fraction(double flops_per_s);  // MFU (0..1), or <0 when not applicable
#pragma once
#include "cli.h"
#include "common.h"
#include "dataloader.h"
#include "gpt2.h"
#include "tokenizer.h"
#include "zero3.h"
#include <sys/stat.h>

typedef struct {
    TrainArgs args;
    GPT2Config cfg;
    Zero3 z;
    const Zero3Backend *be;
    Model *model;
    DataLoader train, val;
    int A;                 // micro-steps per step
    int *inputs, *targets; // (B,T) host
    FILE *log;
    Tokenizer tok;
    int have_tok;
    uint64_t sample_rng;
} Trainer;

// LR at step s (contract): warmup lr*(s+1)/W for s < W, then cosine from lr down to F*lr over the
// remaining steps: at s = W the full lr, at the last step (S-1) exactly F*lr.
static float lr_at(const TrainArgs *a, int s) {
    if (s < a->warmup) return a->lr * (float)(s + 1) / (float)a->warmup;
    int decay_steps = a->steps - 1 - a->warmup;
    if (decay_steps <= 0) return a->lr;
    double progress = (double)(s - a->warmup) / (double)decay_steps;
    double cosine = 0.5 * (1.0 + cos(M_PI * progress));   // 1 -> 0
    return (float)(a->lr * (a->final_frac + (1.0 - a->final_frac) * cosine));
}

static void format_bytes(char *buf, size_t n, double bytes) {
    const char *unit[] = {"B", "KiB", "MiB", "GiB", "TiB"};
    int i = 0;
    while (bytes >= 1024.0 && i < 4) { bytes /= 1024.0; i++; }
    snprintf(buf, n, "%.2f %s", bytes, unit[i]);
}

// ------------------------------------------------------------------------------------------------
// Setup

static void trainer_load_model(Trainer *tr) {
    const TrainArgs *a = &tr->args;
    Zero3 *z = &tr->z;
    if (a->init[0] == 'd' && gpt2_config_from_descriptor(a->init, &tr->cfg) == 0) {
        gpt2_register_units(&tr->cfg, z);
        zero3_allocate(z);
        gpt2_init_random(&tr->cfg, z, a->seed);
        return;
    }
    FILE *f = fopen(a->init, "rb");
    if (!f) fatal("flag -e: cannot open model file %s (%s); or give a descriptor like d12", a->init, strerror(errno));
    char err[512];
    int elem_bytes;
    if (gpt2_read_header(f, a->init, &tr->cfg, &elem_bytes, err, sizeof err)) fatal("%s", err);
    gpt2_register_units(&tr->cfg, z);
    zero3_allocate(z);
    if (gpt2_load_owned(&tr->cfg, z, f, a->init, elem_bytes)) fatal_local("model file %s: read failed", a->init);
    fclose(f);
}

static void trainer_setup(Trainer *tr, const Zero3Backend *be) {
    TrainArgs *a = &tr->args;
    tr->be = be;
    int N = be->world;
    // the tokens per step give the number of micro-steps
    long long per_micro = (long long)N * a->B * a->T;
    if (a->tokens_per_step == 0) a->tokens_per_step = per_micro;
    if (a->tokens_per_step % per_micro != 0)
        fatal("flag -d: %lld tokens per step is not a multiple of N*B*T = %d*%d*%d = %lld", a->tokens_per_step,
              N, a->B, a->T, per_micro);
    if (a->tokens_per_step / per_micro > 1000000) fatal("flag -d: %lld tokens per step gives over 10^6 micro-steps", a->tokens_per_step);
    tr->A = (int)(a->tokens_per_step / per_micro);

    Zero3Config zc = {a->stage, a->prefetch_depth, TRAIN_ALIGN, TRAIN_PARAM_TYPE, TRAIN_GRAD_TYPE};
    zero3_init(&tr->z, be, &zc);
    trainer_load_model(tr);
    if (a->T > tr->cfg.max_seq_len)
        fatal("flag -t: sequence length %d is larger than the model's maxT %d", a->T, tr->cfg.max_seq_len);

    char err[512];
    if (loader_open(&tr->train, a->train_path, a->B, a->T, tr->cfg.vocab_size, err, sizeof err)) fatal("flag -i: %s", err);
    if (loader_open(&tr->val, a->val_path, a->B, a->T, tr->cfg.vocab_size, err, sizeof err)) fatal("flag -j: %s", err);
    // the tokenizer is optional: without it samples print token ids
    const char *tok_path = "data/tinyshakespeare/gpt2_tokenizer.bin";
    tr->have_tok = (tokenizer_init(&tr->tok, tok_path, err, sizeof err) == 0);

    tr->inputs = xmalloc((size_t)a->B * a->T * sizeof(int));
    tr->targets = xmalloc((size_t)a->B * a->T * sizeof(int));
    tr->sample_rng = a->seed ^ 0x5DEECE66Dull;
}

static void trainer_publish(Trainer *tr) {
    zero3_publish_params(&tr->z);
    tr->model = model_create(&tr->cfg, &tr->z, tr->args.B, tr->args.T);
}

static void trainer_report(Trainer *tr) {
    if (tr->be->rank != 0) return;
    const TrainArgs *a = &tr->args;
    const GPT2Config *c = &tr->cfg;
    const Zero3 *z = &tr->z;
    int N = tr->be->world;
    char dev[256];
    model_describe(dev, sizeof dev);
    printf("+-------------------------------------------------------------------------\n");
    printf("| GPT-2 ZeRO trainer   %s\n", dev);
    printf("| model    %s: L=%d C=%d NH=%d V=%d (Vp %d) maxT=%d, %zu parameters\n", a->init, c->num_layers,
           c->channels, c->num_heads, c->vocab_size, c->padded_vocab_size, c->max_seq_len, z->total_numel);
    printf("| ranks    N=%d, ZeRO stage %d%s, prefetch depth %d, %d units\n", N, a->stage,
           a->stage == 0 ? " (DDP)" : "", a->prefetch_depth, z->nunits);
    printf("| batch    B=%d T=%d, %lld tokens/step = %d ranks x %d micro-steps x %d x %d\n", a->B, a->T,
           a->tokens_per_step, N, tr->A, a->B, a->T);
    printf("| optim    AdamW lr %g warmup %d final %g wd %g clip %g, %d steps\n", a->lr, a->warmup,
           a->final_frac, a->weight_decay, a->grad_clip, a->steps);
    printf("| data     train %s (%zu tokens), val %s (%zu tokens)\n", a->train_path, tr->train.ntok,
           a->val_path, tr->val.ntok);
    printf("+-------------------------------------------------------------------------\n");
    printf("| model-state memory per rank (params + grads + optimizer), %zu params, N=%d\n", z->total_numel, N);
    printf("|   stage        theory        comm/step (theory)\n");
    const char *names[4] = {"0 DDP ", "1     ", "2     ", "3     "};
    for (int s = 0; s <= 3; s++) {
        char mem[32], comm[32];
        format_bytes(mem, sizeof mem, zero3_theory_state_bytes(s, (double)z->total_numel, N, z->cfg.param_type, z->cfg.grad_type));
        format_bytes(comm, sizeof comm, zero3_theory_comm_bytes(s, (double)z->total_numel, N, z->cfg.param_type, z->cfg.grad_type));
        printf("|   %s  %12s  %12s%s\n", names[s], mem, comm, s == a->stage ? "   <- this run" : "");
    }
    char res[32], pool[32];
    format_bytes(res, sizeof res, (double)z->resident_bytes);
    printf("|   this run holds %s of model state (padded units) + gathered units/grad buffers (see peak)\n", res);
    (void)pool;
    printf("+-------------------------------------------------------------------------\n");
    fflush(stdout);
}

static void trainer_open_log(Trainer *tr) {
    const char *dir = tr->args.out_dir;
    if (!dir || tr->be->rank != 0) return;
    if (mkdir(dir, 0755) != 0 && errno != EEXIST) fatal("flag -o: cannot create directory %s (%s)", dir, strerror(errno));
    char path[4096];
    snprintf(path, sizeof path, "%s/log.csv", dir);
    tr->log = fopen(path, tr->args.resume ? "a" : "w");
    if (!tr->log) fatal("flag -o: cannot write %s (%s)", path, strerror(errno));
    if (!tr->args.resume)
        fprintf(tr->log, "step,train_loss,val_loss,lr,grad_norm,ms,tokens_per_s,comm_bytes,mem_states_bytes,mem_peak_bytes\n");
}

// ------------------------------------------------------------------------------------------------
// Evaluation and sampling

// Validation: batch j on rank r reads window j*N + r of the val file; the loss is the mean over all
// m*N windows (contract).
static float trainer_validate(Trainer *tr) {
    int N = tr->be->world, r = tr->be->rank;
    double sum = 0.0;
    for (int j = 0; j < tr->args.val_batches; j++) {
        loader_window(&tr->val, (long long)j * N + r, tr->inputs, tr->targets);
        zero3_micro_begin(&tr->z, 0, 1, ZERO3_PASS_FORWARD);
        sum += model_forward(tr->model, tr->inputs, tr->targets, 0);
    }
    return (float)(tr->be->all_reduce_scalar(tr->be->ctx, sum) / ((double)tr->args.val_batches * N));
}

// Samples gen_tokens tokens after an EOT. Every rank runs the same forward passes (under ZeRO-3 no
// rank holds the whole model) with the same RNG, so they all pick the same tokens; rank 0 prints.
static void trainer_sample(Trainer *tr) {
    int B = tr->args.B, T = tr->args.T, V = tr->cfg.vocab_size;
    float *probs = xmalloc((size_t)V * sizeof(float));
    for (int i = 0; i < B * T; i++) tr->inputs[i] = 50256 % V;
    if (tr->be->rank == 0) printf("---- sample\n");
    int pos = 1;   // tokens in the context window (the first is the EOT)
    for (int g = 0; g < tr->args.gen_tokens; g++) {
        zero3_micro_begin(&tr->z, 0, 1, ZERO3_PASS_FORWARD);
        model_forward(tr->model, tr->inputs, NULL, 0);
        model_probs(tr->model, 0, pos - 1, probs);
        float coin = random_f32(&tr->sample_rng), cdf = 0.0f;
        int next = V - 1;
        for (int i = 0; i < V; i++) { cdf += probs[i]; if (coin < cdf) { next = i; break; } }
        if (tr->be->rank == 0) {
            if (tr->have_tok) tokenizer_print(&tr->tok, (uint32_t)next, stdout);
            else printf("%d ", next);
            fflush(stdout);
        }
        if (pos < T) tr->inputs[pos++] = next;
        else {   // slide the window
            memmove(tr->inputs, tr->inputs + 1, (T - 1) * sizeof(int));
            tr->inputs[T - 1] = next;
        }
    }
    if (tr->be->rank == 0) printf("\n----\n");
    free(probs);
}

// ------------------------------------------------------------------------------------------------
// One optimizer step: A micro-steps of forward + backward (the engine gathers, releases and reduces
// per unit), then the global norm, the clip coefficient and AdamW on this rank's shard. Returns the
// step's mean loss over all N*A*B*T tokens and sets *norm.
static float trainer_step(Trainer *tr, int step, float lr, float *norm) {
    const TrainArgs *a = &tr->args;
    int N = tr->be->world, r = tr->be->rank, A = tr->A;
    float dloss = 1.0f / ((float)a->B * a->T * A * N);   // the step loss is the mean over all tokens
    double loss_sum = 0.0;
    zero3_step_begin(&tr->z);
    for (int k = 0; k < A; k++) {
        // data order (contract): rank r at step s, micro-step k reads window (s*A + k)*N + r
        loader_window(&tr->train, ((long long)step * A + k) * N + r, tr->inputs, tr->targets);
        zero3_micro_begin(&tr->z, k, A, ZERO3_PASS_TRAIN);
        loss_sum += model_forward(tr->model, tr->inputs, tr->targets, 1);
        model_backward(tr->model, dloss);
    }
    double gnorm = zero3_grad_norm(&tr->z);
    // clip like torch.nn.utils.clip_grad_norm_: scale by G/(norm+1e-6) when that is below 1
    float clip = 1.0f;
    if (a->grad_clip > 0.0f) {
        double coef = a->grad_clip / (gnorm + 1e-6);
        if (coef < 1.0) clip = (float)coef;
    }
    zero3_optimizer_step(&tr->z, lr, 0.9f, 0.95f, 1e-8f, a->weight_decay, clip, step + 1);
    zero3_check_idle(&tr->z);
    *norm = (float)gnorm;
    return (float)(tr->be->all_reduce_scalar(tr->be->ctx, loss_sum) / ((double)A * N));
}

static void trainer_free(Trainer *tr) {
    model_free(tr->model);
    zero3_free(&tr->z);
    loader_close(&tr->train);
    loader_close(&tr->val);
    if (tr->have_tok) tokenizer_free(&tr->tok);
    free(tr->inputs);
    free(tr->targets);
    if (tr->log) fclose(tr->log);
}

static int train_main(int argc, char **argv, const Zero3Backend *be) {
    Trainer tr;
    memset(&tr, 0, sizeof tr);
    args_defaults(&tr.args);
    if (args_parse(&tr.args, argc, argv)) { args_usage(argv[0]); return 0; }
    trainer_setup(&tr, be);
    trainer_publish(&tr);
    trainer_report(&tr);
    trainer_open_log(&tr);
    const TrainArgs *a = &tr.args;
    double tokens = (double)a->tokens_per_step, total_ms = 0.0;
    for (int step = 0; step < a->steps; step++) {
        float lr = lr_at(a, step), norm;
        double t0 = now_seconds();
        float loss = trainer_step(&tr, step, lr, &norm);
        double ms = (now_seconds() - t0) * 1000.0;
        if (!isfinite(loss) || !isfinite(norm))
            fatal("step %d: loss %g, grad norm %g is not finite; stopping (the last checkpoint is intact)", step, loss, norm);
        if (step > 0) total_ms += ms;   // the first step warms caches and the buffer pool
        float val = NAN;
        if (a->val_every > 0 && ((step + 1) % a->val_every == 0 || step == a->steps - 1)) val = trainer_validate(&tr);
        if (tr.be->rank == 0) {
            double avg_ms = step > 0 ? total_ms / step : ms;
            double eta = avg_ms * (a->steps - 1 - step) / 1000.0;
            char sent[32], peak[32];
            format_bytes(sent, sizeof sent, tr.z.stats.comm_bytes);
            format_bytes(peak, sizeof peak, (double)zero3_peak_bytes(&tr.z));
            double mfu = model_step_flops_fraction(6.0 * (double)tr.z.total_numel * tokens / (ms / 1000.0) / tr.be->world);
            printf("step %*d/%d | loss %.6f", (int)log10(a->steps) + 1, step + 1, a->steps, loss);
            if (!isnan(val)) printf(" | val %.6f", val);
            printf(" | lr %.2e | norm %.4f | %.1f ms | %.0f tok/s", lr, norm, ms, tokens / (ms / 1000.0));
            if (mfu >= 0) printf(" | MFU %.1f%%", 100.0 * mfu);
            printf(" | sent %s | peak %s | ETA %dm%02ds\n", sent, peak, (int)eta / 60, (int)eta % 60);
            fflush(stdout);
            if (tr.log) {
                fprintf(tr.log, "%d,%.9g,", step, loss);
                if (!isnan(val)) fprintf(tr.log, "%.9g", val);
                fprintf(tr.log, ",%.9g,%.9g,%.3f,%.1f,%.0f,%zu,%zu\n", lr, norm, ms, tokens / (ms / 1000.0),
                        tr.z.stats.comm_bytes, tr.z.resident_bytes, zero3_peak_bytes(&tr.z));
                fflush(tr.log);
            }
        }
        if (a->sample_every > 0 && ((step + 1) % a->sample_every == 0 || step == a->steps - 1)) trainer_sample(&tr);
    }
    trainer_free(&tr);
    return 0;
}
