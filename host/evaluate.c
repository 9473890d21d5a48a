// host/evaluate.c: what a run does with the model besides training it: validation on the val split
// (-v, -m) and sampling (-s, -g). Both run forward passes through the engine on every rank, and both
// stop at the next batch or token on a stop signal (stop.c).
#include "trainer.h"


// Validation: batch j on rank r reads window j*N + r of the val file; the loss is the mean over all
// m*N windows (contract). A stop signal ends it at the next batch on every rank (NaN: the step's
// log row has no val_loss); validation changes no state, so the resumed run is unaffected.
float trainer_validate(Trainer *tr) {
    int N = tr->be->world, r = tr->be->rank;
    double sum = 0.0;
    for (int j = 0; j < tr->args.val_batches; j++) {
        if (trainer_stop_requested(tr)) {
            if (r == 0) printf("validation cut short after %d of %d batches: stop requested\n", j, tr->args.val_batches);
            return NAN;
        }
        loader_window(&tr->data.val, (long long)j * N + r, tr->data.inputs, tr->data.targets);
        zero3_micro_begin(&tr->z, 0, 1, ZERO3_PASS_FORWARD);
        sum += gpt2_pass_forward(&tr->passes, tr->data.inputs, tr->data.targets, 0);
    }
    return (float)(tr->be->all_reduce_scalar(tr->be->ctx, sum) / ((double)tr->args.val_batches * N));
}

// A sample cut short by a stop signal: the RNG draws the tokens it did not sample (one draw each),
// so the checkpoint's RNG state is the one an uninterrupted run has after the whole sample.
static void trainer_sample_cut(Trainer *tr, int done) {
    for (int g = done; g < tr->args.gen_tokens; g++) random_u32(&tr->sample.rng);
    if (tr->be->rank == 0) printf("\n---- sample cut short after %d of %d tokens: stop requested\n", done, tr->args.gen_tokens);
}

// Samples gen_tokens tokens after an EOT. Every rank runs the same forward passes (under ZeRO-3 no
// rank holds the whole model) with the same RNG, so they all pick the same tokens; rank 0 prints.
// A stop signal ends it at the next token on every rank.
void trainer_sample(Trainer *tr) {
    int B = tr->args.B, T = tr->args.T, V = tr->cfg.vocab_size;
    float *probs = (float *)xmalloc((size_t)V * sizeof(float));
    for (int i = 0; i < B * T; i++) tr->data.inputs[i] = 50256 % V;
    if (tr->be->rank == 0) { printf("---- sample\n"); fflush(stdout); }   // seen at once, before the first token
    int pos = 1;   // tokens in the context window (the first is the EOT)
    for (int g = 0; g < tr->args.gen_tokens; g++) {
        if (trainer_stop_requested(tr)) { trainer_sample_cut(tr, g); free(probs); return; }
        zero3_micro_begin(&tr->z, 0, 1, ZERO3_PASS_FORWARD);
        gpt2_pass_forward(&tr->passes, tr->data.inputs, NULL, 0);
        tr->compute->probs(tr->compute_state, 0, pos - 1, probs);
        int next = sample_from(probs, V, random_f32(&tr->sample.rng));
        // every rank must have picked the same token (same weights, same RNG): one scalar says so
        char err[128] = "";
        if (tr->be->all_reduce_scalar(tr->be->ctx, next) != (double)next * tr->be->world)
            set_err(err, sizeof err, "sampling: the ranks picked different tokens (this rank %d)", next);
        agree_or_exit(tr->be, err);
        if (tr->be->rank == 0) {
            if (tr->sample.have_tok) tokenizer_print(&tr->sample.tok, (uint32_t)next, stdout);
            else printf("%d ", next);
            fflush(stdout);
        }
        if (pos < T) tr->data.inputs[pos++] = next;
        else {   // slide the window
            memmove(tr->data.inputs, tr->data.inputs + 1, (T - 1) * sizeof(int));
            tr->data.inputs[T - 1] = next;
        }
    }
    if (tr->be->rank == 0) printf("\n----\n");
    free(probs);
}

