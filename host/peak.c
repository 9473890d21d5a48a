// host/peak.c: the peak memory of one rank, on paper (peak.h has the table of terms). The buffer
// pool's part walks the moments of one training step in the order the passes visit the units
// (host/passes.c: the embedding, the blocks, the final layernorm, the embedding again for the tied
// LM head; then backward, the LM head, the final layernorm, the blocks top down, the encoder) and
// counts the full-size buffers each moment holds, by kind of unit. Unit sizes come from the shapes
// (padding to whole shards left out: at most N x the alignment, a few elements a unit).
#include "peak.h"
#include "../proc/mpi_sum.h"
#include "passes.h"
#include "../observe/zero3_observe.h"

const char *const PEAK_TERM_NAMES[PEAK_TERMS] = {"model state", "gathered", "gradients", "fragmentation", "activations",
                                                 "MPI scratch"};

// The model's units by kind, in elements: the embedding (wte + wpe), the final layernorm, and a
// block unit (-wrap K: K blocks; -wrap half: the larger half, the MLP).
typedef struct { double emb, head, block; int block_units, units_per_group; } PeakShapes;

static PeakShapes peak_shapes(const GPT2Config *c) {
    const double C = c->channels;
    PeakShapes s;
    s.emb = (double)c->padded_vocab_size * C + (double)c->max_seq_len * C;
    s.head = 2.0 * C;
    const double block = 12.0 * C * C + 13.0 * C;   // ln1, qkv, attproj, ln2, fc, fcproj with their biases
    s.block = c->wrap == GPT2_WRAP_HALF ? 8.0 * C * C + 7.0 * C : gpt2_blocks_per_unit(c) * block;
    s.units_per_group = gpt2_units_per_block(c);
    s.block_units = c->num_layers / gpt2_blocks_per_unit(c) * s.units_per_group;
    return s;
}

// One moment of the step: how many full-size buffers of each kind of unit it holds (params p and
// gradients g), and its name.
typedef struct { double emb_p, emb_g, head_p, head_g, block_p, block_g; const char *name; } PeakMoment;

static double moment_elements(const PeakMoment *m, const PeakShapes *s, int params, int grads) {
    return (params ? m->emb_p * s->emb + m->head_p * s->head + m->block_p * s->block : 0.0) +
           (grads ? m->emb_g * s->emb + m->head_g * s->head + m->block_g * s->block : 0.0);
}

static double at_most(double a, double b) { return a < b ? a : b; }

// The moments of ZeRO-3's step (stage 2: the same with no params in the pool). With -ra 1 each unit is
// gathered for its forward with the next -pd units in the order (blocks, then the final layernorm, then
// the embedding again), released after it, gathered again for its backward; the embedding's gradient
// buffer stays open from the LM head's backward to the encoder's, and one unit's reduction (the one
// above) is in flight beside the block being computed. With -ra 0 every unit stays gathered from its
// forward until its backward is done. In the backward, while a unit computes, the units whose gathers
// are on their way are the engine's prefetch rule under -bp (db: zero3_theory_backward_ahead, pre -pd,
// post -pd - 1). Returns the count written into m.
static int step_moments(const PeakRun *r, const PeakShapes *s, PeakMoment *m) {
    const int d = r->prefetch_depth, nu = s->units_per_group, groups = s->block_units / nu, keep = !r->reshard_after_forward;
    const int db = zero3_theory_backward_ahead(d, r->backward_prefetch);
    int n = 0;
    m[n++] = (PeakMoment){.emb_p = 1, .block_p = at_most(d, s->block_units), .name = "embedding forward"};
    for (int i = 0; i < groups; i++) {   // group i's forward: its units, the kept ones below, the next -pd ahead
        const double below = keep ? (double)i * nu : 0.0, ahead_blocks = at_most(d, s->block_units - (i + 1) * nu);
        const double ahead_rest = at_most(d - ahead_blocks, 2.0);   // the final layernorm, the embedding
        m[n++] = (PeakMoment){.emb_p = keep || ahead_rest >= 2, .head_p = ahead_rest >= 1,
                              .block_p = below + nu + ahead_blocks, .name = "block forward"};
    }
    m[n++] = (PeakMoment){.emb_p = keep || d >= 1, .head_p = 1, .block_p = keep ? s->block_units : 0,
                          .name = "final layernorm forward"};
    m[n++] = (PeakMoment){.emb_p = 1, .emb_g = 1, .head_p = keep, .block_p = keep ? s->block_units : 0,
                          .name = "LM head backward"};
    m[n++] = (PeakMoment){.emb_p = keep, .emb_g = 1, .head_p = 1, .head_g = 1,
                          .block_p = keep ? s->block_units : at_most(db, s->block_units), .name = "final layernorm backward"};
    for (int i = 0; i < groups; i++) {   // group i from the top: the units below still kept or the next -pd
        const double below = s->block_units - (i + 1) * nu;
        m[n++] = (PeakMoment){.emb_p = keep, .emb_g = 1, .head_g = i == 0, .block_p = nu + (keep ? below : at_most(db, below)),
                              .block_g = nu + (i > 0), .name = "block backward"};
    }
    m[n++] = (PeakMoment){.emb_p = keep, .emb_g = 1, .block_g = groups > 0, .name = "encoder backward"};
    return n;
}

// A block unit of run r, as the engine's policy reads it.
static Zero3UnitFacts peak_facts(const PeakRun *r) {
    return (Zero3UnitFacts){.layout = ZERO3_STAGE_LAYOUT[r->stage], .world = r->world, .replicas = r->replicas};
}

// The pool's part: the busiest moment (its params and gradients held) and the reserve, each kind of
// buffer as many times as any moment holds it (params and gradients of a unit are one size). The
// pool holds the gradients the policy reduces every micro-step (the others accumulate in the
// resident buffer) and the params it gathers.
static void pool_terms(const PeakRun *r, const PeakShapes *s, PeakBytes *out) {
    const Zero3UnitFacts f = peak_facts(r);
    if (!zero3_reduces_every_micro_step(&f)) return;   // every buffer resident, or the shard is the unit
    PeakMoment *m = (PeakMoment *)xmalloc((size_t)(2 * s->block_units + 8) * sizeof(PeakMoment));
    const int n = step_moments(r, s, m), params = zero3_gather_for(&f, ZERO3_FOR_FORWARD, 0).kind != ZERO3_COLL_KINDS;
    double most = -1.0, emb = 0.0, head = 0.0, block = 0.0;
    for (int i = 0; i < n; i++) {
        if (!params) m[i].emb_p = m[i].head_p = m[i].block_p = 0.0;
        double held = moment_elements(&m[i], s, 1, 1);
        if (held > most) {
            most = held;
            out->bytes[PEAK_GATHERED] = moment_elements(&m[i], s, 1, 0) * r->param_bytes;
            out->bytes[PEAK_GRADS] = moment_elements(&m[i], s, 0, 1) * r->grad_bytes;
            out->moment = m[i].name;
        }
        emb = fmax(emb, m[i].emb_p + m[i].emb_g);
        head = fmax(head, m[i].head_p + m[i].head_g);
        block = fmax(block, m[i].block_p + m[i].block_g);
    }
    const double reserve = (emb * s->emb + head * s->head + block * s->block) * r->grad_bytes;
    out->bytes[PEAK_FRAGMENTATION] = reserve - out->bytes[PEAK_GATHERED] - out->bytes[PEAK_GRADS];
    free(m);
}

// Per layer, per token (floats): ln1, qkv, atty, attproj, residual2, ln2, fch, fch_gelu, fcproj,
// residual3 (1 + 3 + 1 + 1 + 1 + 1 + 4 + 4 + 1 + 1 = 18 C), the two layernorms' mean and rstd (4), the
// attention probabilities (NH T). Once (floats per token): the embedding output, lnf (2 C), lnf's
// mean and rstd, the losses (3), logits and probs (2 Vp), the pre-softmax scores (NH T); the
// backward's scratch, shared by every layer: dresidual, dln, datty (3 C), dqkv (3 C), dfch,
// dfch_gelu (8 C), dpreatt, datt (2 NH T), dlogits (Vp), dlosses (1). With recompute a layer past
// the first keeps only its output (C): the backward recomputes the rest into the first layer's.
double peak_activation_bytes(const GPT2Config *c, int B, int T, int recompute) {
    const double C = c->channels, att = (double)c->num_heads * T, Vp = c->padded_vocab_size, L = c->num_layers;
    const double layer = 18.0 * C + 4.0 + att, kept = recompute ? layer + (L - 1.0) * C : L * layer;
    const double once = 2.0 * C + 3.0 + 2.0 * Vp + att, scratch = 14.0 * C + 2.0 * att + Vp + 1.0;
    return 4.0 * (double)B * T * (kept + once + scratch);
}

// fp32 across machines: Open MPI's non-blocking reductions (libnbc) sum on a binomial tree rooted at
// rank 0 of the group they run over: rank r takes from r + 1, r + 2, r + 4, ... below its lowest set
// bit (rank 0: all of them), and each copy of the unit is a buffer it receives a child's sums into.
// As measured on 2-4 ranks (Open MPI 4.1, its sums on one machine): a reduce-scatter (the policy's
// answer: zero3_reduction_for) keeps one copy on a rank with one child, two on a rank with more (the
// sums of two rounds), none on a leaf; an all-reduce one copy on a rank with children, and on 2 ranks
// one on both (each receives the other's unit). So rank 0 holds the most, and the ranks differ. Past
// 4 ranks the same rule is applied to the tree, not measured.
// bf16, and fp32 on one machine: MPI only moves the parts (an all-to-all); every rank receives its N
// parts of the unit into one buffer, the unit's size, and sums them itself: one copy at any N on every
// rank, the communication thread's buffer grown to the largest unit (which sums are MPI's:
// proc/mpi_sum.h). Under HSDP groups of one rank the shard is the unit, all-reduced across the
// replica groups; otherwise the unit is reduced inside the shard group of G consecutive ranks, and
// its shard then all-reduced across the groups.
static int tree_children(int rank, int n) {
    int kids = 0;
    for (int m = 1; m < n && (rank == 0 || m < (rank & -rank)); m <<= 1) kids += rank + m < n;
    return kids;
}

static double scratch_bytes(const PeakRun *r, const PeakShapes *s, Zero3DType grad_type) {
    if (r->world == 1 && r->replicas == 1) return 0.0;
    const Zero3UnitFacts f = peak_facts(r);
    const int scatter = zero3_reduction_for(&f, 0, 1).how == ZERO3_REDUCE_SCATTER;
    const int moved = !mpi_sums(grad_type, r->one_machine);
    const int n = r->world > 1 ? r->world : r->replicas, me = r->world > 1 ? r->rank % r->world : r->rank;
    const int kids = tree_children(me, n);
    const double copies = moved ? 1.0 : scatter ? fmin(kids, 2) : n == 2 || kids > 0;
    const double unit = fmax(s->emb, s->block) * r->grad_bytes;
    if (moved || r->world == 1 || r->replicas == 1) return copies * unit;
    // HSDP: then the shard is all-reduced across the replica groups (this rank's place in its own:
    // rank / G), one shard's copy where the tree gives one, after the group's reduction has freed its
    // copies (measured: -hs 2 on 4 ranks, ranks 1 and 3 hold half the embedding's gradients)
    const int across_kids = tree_children(r->rank / r->world, r->replicas);
    return fmax(copies * unit, r->replicas == 2 || across_kids > 0 ? unit / r->world : 0.0);
}

double peak_largest_unit(const GPT2Config *c) {
    const PeakShapes s = peak_shapes(c);
    return fmax(s.emb, fmax(s.block, s.head));
}

// The elements S staging slots of an offload file hold: slot i takes the units u = i mod S
// (zero3_offload.c), so it is the size of the largest of them; the units in order: the embedding,
// the block units (-wrap half: each the larger half), the final layernorm.
double peak_slot_elements(const GPT2Config *c, int slots) {
    const PeakShapes s = peak_shapes(c);
    const int n = s.block_units + 2;
    double total = 0.0;
    for (int i = 0; i < slots && i < n; i++) {
        double largest = 0.0;
        for (int u = i; u < n; u += slots) largest = fmax(largest, u == 0 ? s.emb : u == n - 1 ? s.head : s.block);
        total += largest;
    }
    return total;
}

double peak_engine_bytes(const PeakBytes *b) { return b->bytes[PEAK_STATE] + b->bytes[PEAK_GATHERED] + b->bytes[PEAK_GRADS]; }

PeakBytes peak_bytes(const PeakRun *r) {
    PeakBytes out;
    memset(&out, 0, sizeof out);
    out.moment = "none: every buffer is resident";
    const PeakShapes s = peak_shapes(&r->cfg);
    const double psi = (double)gpt2_num_parameters(&r->cfg);
    const Zero3DType pt = r->param_bytes == 2 ? ZERO3_BF16 : ZERO3_F32, gt = r->grad_bytes == 2 ? ZERO3_BF16 : ZERO3_F32;
    out.bytes[PEAK_STATE] = zero3_theory_state_bytes(r->stage, psi, r->world, pt, gt);
    pool_terms(r, &s, &out);
    out.bytes[PEAK_ACTIVATIONS] = peak_activation_bytes(&r->cfg, r->B, r->T, r->recompute);
    out.bytes[PEAK_SCRATCH] = scratch_bytes(r, &s, gt);
    for (int k = 0; k < PEAK_TERMS; k++) out.total += out.bytes[k];
    return out;
}
