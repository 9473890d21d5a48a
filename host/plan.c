// host/plan.c: -plan N. The memory and communication of every ZeRO stage for N ranks and a model,
// without the model: from a descriptor (d12, d48, dLcChHtT) or a model file's header the units are
// laid out exactly as a run would (padding included) and the collective ledger counts them; from
// a bare parameter count (-e 7.5B) the whole model is one unit (bytes exact, counts not given).
// With link bandwidths and a compute rate it also estimates each stage's time per step.
#include "plan.h"
#include <sys/stat.h>
#include "gpt2.h"
#include "passes.h"
#include "peak.h"
#include "readfile.h"
#include "../observe/zero3_observe.h"
#include "zeropp.h"

static const char *STAGE_NAMES[4] = {"0 DDP", "1    ", "2    ", "3    "};

// Each stage's model state per rank in its three parts, GB, with "/N" where the stage shards a part:
// the notes' split (7.5B on 64 ranks, stage 0: 15 GB params + 15 GB grads + 90 GB optimizer state).
static void print_memory_split(double psi, int N, Zero3DType pt, Zero3DType gt) {
    printf("  split, GB per rank: params + grads + optimizer state (Adam m, v%s); /N: divided by the %d ranks sharding it\n",
           pt == ZERO3_F32 ? "" : " and the fp32 master", N);
    printf("  stage  %11s     %11s     %11s    %12s\n", "params", "grads", "optimizer", "total");
    for (int s = 0; s <= 3; s++) {
        double part[3], whole[3];
        zero3_theory_state_parts(s, psi, N, pt, gt, part);
        zero3_theory_state_parts(s, psi, 1, pt, gt, whole);
        printf("  %s", STAGE_NAMES[s]);
        for (int i = 0; i < 3; i++) printf("  %11.3f %-2s", part[i] / 1e9, part[i] != whole[i] ? "/N" : "");
        printf("  %12.3f\n", (part[0] + part[1] + part[2]) / 1e9);
    }
}

// The whole model's state (stage 0, one rank) in GiB, its four parts apart: the rough calculation of a
// model's training memory (7B: 13.04 + 13.04 + 26.08 + 52.15 GiB). Mixed precision only, where the
// optimizer state holds an fp32 master beside Adam's m and v (zero3_theory_state_parts: 4 + 8 bytes).
static void print_memory_gib(double psi, Zero3DType pt, Zero3DType gt) {
    double part[3];
    zero3_theory_state_parts(0, psi, 1, pt, gt, part);
    const double gib = 1073741824.0, master = psi * 4.0;
    printf("  the whole model's state in GiB (2^30 bytes), as DDP holds it on every rank:\n");
    printf("    params (bf16)        %10.2f\n", part[0] / gib);
    printf("    grads (bf16)         %10.2f\n", part[1] / gib);
    printf("    fp32 master          %10.2f\n", master / gib);
    printf("    Adam m, v (fp32)     %10.2f\n", (part[2] - master) / gib);
    printf("    total                %10.2f\n", (part[0] + part[1] + part[2]) / gib);
}

static void print_memory(double psi, int N, Zero3DType pt, Zero3DType gt, const char *what) {
    printf("model-state memory per rank, %s\n", what);
    printf("  stage              bytes           GB          GiB\n");
    for (int s = 0; s <= 3; s++) {
        double b = zero3_theory_state_bytes(s, psi, N, pt, gt);
        char digits[64], grouped[96];
        snprintf(digits, sizeof digits, "%.0f", b);
        int len = (int)strlen(digits), j = 0;
        for (int i = 0; i < len; i++) {   // 120000000000 -> 120,000,000,000
            grouped[j++] = digits[i];
            if ((len - 1 - i) % 3 == 0 && i != len - 1) grouped[j++] = ',';
        }
        grouped[j] = '\0';
        printf("  %s  %22s  %11.3f  %11.3f\n", STAGE_NAMES[s], grouped, b / 1e9, b / 1073741824.0);
    }
    print_memory_split(psi, N, pt, gt);
    if (pt != ZERO3_F32) print_memory_gib(psi, pt, gt);
}

// What the plan is about: the model (with its unit layout when it has one), the run's shape, and
// the collective ledger of every stage in both precisions.
typedef struct {
    TrainArgs args;            // the flags, -d filled in as a run fills it (args_validate)
    const TrainArgs *a;        // &args
    int N, A;                  // ranks (-plan N), micro-steps per step (from -d)
    int G, R;                  // the shard group (-hs G; else N) and the replica groups N/G
    long long tokens;          // tokens per step
    GPT2Config cfg;            // the model, when have_units
    int have_units;            // 0: a bare parameter count (the model as one unit)
    double psi;                // parameters
    Zero3 z;                   // the units laid out for N ranks (nothing allocated)
    int *fwd, *bwd;            // all-gathers per unit in one micro-step's forward, backward
    Zero3Ledger led[2][4];     // [fp32, mixed][stage]
} Plan;

// -e: a descriptor or a model file's header (the units known), or a bare parameter count.
static void plan_read_model(Plan *p) {
    const char *init = p->a->init;
    char err[512] = "";
    if (init[0] == 'd' && gpt2_config_from_descriptor(init, &p->cfg) == 0) { p->have_units = 1; return; }
    char why[128];
    FILE *f = open_regular_file(init, why, sizeof why);   // never blocks on a FIFO
    int elem_bytes;
    struct stat st;
    if (!f && stat(init, &st) == 0) fatal("flag -e: cannot open model file %s (%s)", init, why);
    if (f) {
        if (gpt2_read_header(f, init, &p->cfg, &elem_bytes, err, sizeof err)) { fclose(f); fatal("%s", err); }
        fclose(f);
        p->have_units = 1;
        return;
    }
    int rc = parse_param_count(init, &p->psi, err, sizeof err);
    if (rc < 0) fatal("%s", err);
    if (rc == 0) fatal("flag -e: cannot open model file %s (%s); give a descriptor like d12 or a parameter count like 7.5B",
                       init, strerror(errno));
}

// The run's shape, checked exactly as a run on N ranks checks it (args_validate, then against the
// model when it is known: -wrap, -t): A micro-steps from -d (tokens per step), else one; the shard
// group. The flags whose effect the plan does not show are accepted, as a run accepts them, and
// named on their own line (print_model).
static void plan_shape(Plan *p) {
    TrainArgs *a = &p->args;
    p->tokens = a->tokens_per_step;
    p->G = a->shard_group ? a->shard_group : p->N;
    p->R = p->N / p->G;
    if (p->have_units) args_check_model(a, &p->cfg);
    else if (a->mem_gib > 0.0) fatal("flag -mem: a bare parameter count (-e %s) has no shape to grow; plan a descriptor like "
                                     "d12 or a model file", a->init);
    else if (a->wrap) fatal("flag -wrap: a bare parameter count (-e %s) has no blocks to group into units; plan a descriptor "
                            "like d48 or a model file", a->init);
}

// The exact unit layout for N ranks (zero3_allocate is not called) and how often each unit is gathered.
static void no_groups(void *ctx, int group_size) { (void)ctx; (void)group_size; }

// The exact unit layout for N ranks (zero3_allocate is not called), in the run's -wrap granularity
// and -hs groups, and how often each unit is gathered under the run's -ra and -rc.
static void plan_layout(Plan *p, int align) {
    if (!p->have_units) return;
    const TrainArgs *a = p->a;
    Zero3Backend fake;
    memset(&fake, 0, sizeof fake);
    fake.rank = 0;
    fake.world = p->N;
    fake.make_groups = no_groups;   // nothing to split: no rank talks to another
    Zero3Config zc = {.stage = 3, .prefetch_depth = 1, .align = align, .param_type = ZERO3_F32, .grad_type = ZERO3_F32,
                      .reshard_after_forward = 1, .shard_group = a->shard_group, .observer = &ZERO3_OBSERVER};
    zero3_init(&p->z, &fake, &zc);
    p->cfg.wrap = a->wrap;
    gpt2_register_units(&p->cfg, &p->z);
    p->psi = (double)gpt2_num_parameters(&p->cfg);
    p->fwd = (int *)xmalloc((size_t)p->z.nunits * sizeof(int));
    p->bwd = (int *)xmalloc((size_t)p->z.nunits * sizeof(int));
    gpt2_gathers_per_pass(&p->cfg, !a->reshard_after_forward, a->recompute == GPT2_RECOMPUTE_OWN_GATHER, p->fwd, p->bwd);
}

// The collective ledger per stage, both precisions.
static void plan_ledgers(Plan *p) {
    for (int prec = 0; prec < 2; prec++) {
        Zero3DType t = prec ? ZERO3_BF16 : ZERO3_F32;
        for (int s = 0; s <= 3; s++) {
            if (p->have_units) zero3_theory_ledger(&p->z, s, p->A, t, t, p->fwd, p->bwd, &p->led[prec][s]);
            else zero3_theory_ledger_params(s, p->psi, p->G, p->R, p->A, t, t, &p->led[prec][s]);
        }
    }
}

static void print_model(const Plan *p) {
    const GPT2Config *c = &p->cfg;
    printf("plan: %s", p->a->init);
    if (p->have_units) printf(" (GPT-2 L=%d C=%d NH=%d V=%d maxT=%d: %.0f parameters in %d units)", c->num_layers, c->channels,
                              c->num_heads, c->vocab_size, c->max_seq_len, p->psi, p->z.nunits);
    else printf(" (%.0f parameters)", p->psi);
    printf(" on N=%d ranks; nothing allocated\n", p->N);
    const TrainArgs *a = p->a;
    args_print_plan_leaves_out(a);
    if (p->R > 1)
        printf("HSDP (-hs %d): the state sharded over groups of G=%d ranks, replicated across %d groups (memory /G, not /N; "
               "each step all-reduces the gradient shards across the groups)\n", p->G, p->G, p->R);
    char wrap[16];
    if (a->wrap == GPT2_WRAP_HALF) snprintf(wrap, sizeof wrap, "half");
    else snprintf(wrap, sizeof wrap, "%d", a->wrap ? a->wrap : 1);
    if (a->wrap || !a->reshard_after_forward || a->recompute)
        printf("variants: %d units (-wrap %s), -ra %d, -rc %d: the units and their gathers as a run lays them out\n",
               p->z.nunits, wrap, a->reshard_after_forward, a->recompute);
    print_memory(p->psi, p->G, ZERO3_F32, ZERO3_F32, "fp32 (this CPU trainer: params 4 + grads 4 + Adam m, v 8 = 16 bytes/param)");
    print_memory(p->psi, p->G, ZERO3_BF16, ZERO3_BF16,
                 "mixed precision (bf16 params 2 + grads 2, fp32 master + m + v 12 = 16 bytes/param: the usual accounting, and the GPU trainer)");
    printf("  (model state only: the peak table below adds the gathered units, gradient buffers and activations)\n");
}

static void print_communication(const Plan *p) {
    const int A = p->A;
    printf("communication per step, bytes each rank sends (ring model: all-gather and reduce-scatter move (N-1)/N of\n"
           "the buffer, all-reduce twice that), A=%d micro-step%s per step%s:\n", A, A > 1 ? "s" : "",
           A > 1 ? " (grads SHARDED, stages 2-3, reduce-scatter at every micro-step and stage 3 gathers at every one;"
                   " stages 0-1 reduce once per step)" : "");
    printf("  GB, mixed precision            fwd_gather  bwd_gather  reduce_sc.  all_reduce step_gather       total   x DDP   total fp32%s\n",
           p->R > 1 ? "   across groups" : "");
    double ddp = zero3_ledger_bytes(&p->led[1][0]);
    for (int s = 0; s <= 3; s++) {
        const Zero3Ledger *l = &p->led[1][s];
        printf("  %s                      ", STAGE_NAMES[s]);
        for (int k = 0; k < ZERO3_COLL_NORM; k++) printf("  %10.3f", l->row[k].bytes / 1e9);
        double total = zero3_ledger_bytes(l);
        printf("  %10.3f  %6.3f  %11.3f", total / 1e9, ddp > 0 ? total / ddp : 0.0, zero3_ledger_bytes(&p->led[0][s]) / 1e9);
        if (p->R > 1) printf("  %14.3f", l->row[ZERO3_COLL_REPLICA_REDUCE].bytes / 1e9);
        printf("\n");
        if (p->have_units) {
            printf("        collectives            ");
            for (int k = 0; k < ZERO3_COLL_NORM; k++) printf("  %10.0f", l->row[k].count);
            printf("   (+1 norm all-reduce)\n");
        }
    }
    if (!p->have_units) printf("  (a bare parameter count: the model as one unit gathered once per pass; counts depend on the units)\n");
}

static double positive(double x) { return x > 0.0 ? x : 0.0; }

PlanStepTime plan_predict_step(const PlanStepInput *in) {
    const double A = in->micro_steps, *c = in->coll_s;
    PlanStepTime t;
    memset(&t, 0, sizeof t);
    for (int k = 0; k < ZERO3_COLL_KINDS; k++) t.comm_s += c[k];
    t.compute_s = in->fwd_s + in->bwd_s + in->other_s;
    // one micro-step's forward: its gathers behind its compute
    const double f = in->fwd_s / A, fg = c[ZERO3_COLL_FWD_GATHER] / A;
    const double eg = in->edge_gather_s < fg ? in->edge_gather_s : fg;
    const double fwd_exposed = in->prefetch ? eg + positive(fg - eg - f) : fg;
    // one micro-step's backward: its gathers and, where it reduces, its reductions behind its compute
    const double b = in->bwd_s / A, bg = c[ZERO3_COLL_BWD_GATHER] / A;
    const double reducing = in->reduces_every_micro_step ? A : 1.0;   // grads FULL: the last micro-step reduces all
    const double red = (c[ZERO3_COLL_REDUCE_SCATTER] + c[ZERO3_COLL_ALL_REDUCE]) / reducing;
    const double er = in->edge_reduce_s < red ? in->edge_reduce_s : red;
    const int hides = in->bwd_overlap == ZERO3_BWD_GATHER_BEHIND_COMPUTE || bg == 0.0;
    const int after = !hides && in->bwd_overlap == ZERO3_BWD_GATHER_AFTER_COMPUTE;
    const double bwd_reducing = hides ? er + positive(bg + red - er - b) : after ? bg + er + positive(red - er - b) : bg + red;
    const double bwd_plain = hides ? positive(bg - b) : bg;
    t.bwd_waited_s = after ? A * bg : 0.0;
    t.fwd_over_s = A * positive(fg - f);
    t.bwd_over_s = reducing * positive(bg + red - b) + (A - reducing) * positive(bg - b);
    t.exposed_s = A * fwd_exposed + reducing * bwd_reducing + (A - reducing) * bwd_plain +
                  c[ZERO3_COLL_STEP_GATHER] + c[ZERO3_COLL_REPLICA_REDUCE] + c[ZERO3_COLL_NORM];
    t.step_s = t.compute_s + t.exposed_s;
    return t;
}

int plan_reduction_all_reduces(const Zero3UnitFacts *f) {
    const Zero3Collective row = zero3_reduction_row(zero3_reduction_for(f, 0, 1).how);
    return row != ZERO3_COLL_KINDS && zero3_coll_all_reduces(row);
}

void plan_links(const TrainArgs *a, Zero3Links *links) {
    memset(links, 0, sizeof *links);
    links->inside = a->link;
    links->across = a->link_x.gbps > 0.0 ? a->link_x : links->inside;
    links->node_ranks = a->ranks_per_node > 0 ? a->ranks_per_node : a->shard_group;
}

const Zero3Link *plan_kind_ring(const Zero3Links *links, int kind, int shard, int replicas, int world, double *steps) {
    // rank 0's ring for this kind: its shard group, its replica group, or every rank (the norm)
    int stride = 1, n = shard;
    if (kind == ZERO3_COLL_REPLICA_REDUCE) { stride = shard; n = replicas; }
    if (kind == ZERO3_COLL_NORM) n = world;
    double sent;
    zero3_ring_cost(zero3_coll_all_reduces((Zero3Collective)kind), 1.0, n, &sent, steps);   // the steps of one collective
    return zero3_links_ring(links, 0, stride, n);
}

void plan_collective_seconds(const Zero3Ledger *ledger, const Zero3Links *links, int shard, int replicas,
                             int world, double *coll_s) {
    for (int k = 0; k < ZERO3_COLL_KINDS; k++) {
        double steps;
        const Zero3Link *link = plan_kind_ring(links, k, shard, replicas, world, &steps);
        coll_s[k] = zero3_link_seconds(link, ledger->row[k].bytes, ledger->row[k].count * steps);
    }
}

// One stage's row of the time table: ring seconds per collective kind, how much of each pass's
// communication its compute can hide, what is left exposed (plan_predict_step).
static void print_stage_time(const Plan *p, int s, const Zero3Links *links, double compute, double edge_padded) {
    const int A = p->A, N = p->N;
    PlanStepInput in;
    memset(&in, 0, sizeof in);
    const Zero3UnitFacts f = {.layout = ZERO3_STAGE_LAYOUT[s], .world = p->G, .replicas = p->R};   // a unit of stage s
    in.micro_steps = A;
    in.reduces_every_micro_step = zero3_reduces_every_micro_step(&f);
    in.prefetch = p->a->prefetch_depth >= 1;
    in.bwd_overlap = zero3_theory_backward_overlap(p->a->prefetch_depth, (Zero3BackwardPrefetch)p->a->backward_prefetch);
    in.fwd_s = compute / 3.0;          // forward 2 psi, backward 4 psi FLOPs per token
    in.bwd_s = 2.0 * compute / 3.0;
    plan_collective_seconds(&p->led[1][s], links, p->G, p->R, N, in.coll_s);
    if (p->have_units && p->G > 1) {   // the embedding, in bf16: gathered first (stage 3), reduced last, in the shard group
        const Zero3Link *link = zero3_links_ring(links, 0, 1, p->G);
        double sent, steps;
        zero3_ring_cost(plan_reduction_all_reduces(&f), edge_padded * 2.0, p->G, &sent, &steps);
        in.edge_reduce_s = zero3_link_seconds(link, sent, steps);
        zero3_ring_cost(0, edge_padded * 2.0, p->G, &sent, &steps);
        in.edge_gather_s = zero3_gather_for(&f, ZERO3_FOR_FORWARD, 0).kind != ZERO3_COLL_KINDS ? zero3_link_seconds(link, sent, steps) : 0.0;
    }
    PlanStepTime t = plan_predict_step(&in);
    const double *c = in.coll_s;
    const double fcomm = c[ZERO3_COLL_FWD_GATHER];
    const double bcomm = c[ZERO3_COLL_BWD_GATHER] + c[ZERO3_COLL_REDUCE_SCATTER] + c[ZERO3_COLL_ALL_REDUCE];
    const double window = in.reduces_every_micro_step ? in.bwd_s : in.bwd_s / A;   // else reduced in the last micro-step only
    const double sg = c[ZERO3_COLL_STEP_GATHER];
    // the verdict names what the model leaves exposed beyond the first gather and the last reduction
    char verdict[96];
    if (t.fwd_over_s + t.bwd_over_s > 0.0) snprintf(verdict, sizeof verdict, "NOT hidden: communication-bound");
    else if (t.bwd_waited_s > 0.0)
        snprintf(verdict, sizeof verdict, "the backward gathers exposed (%.1f ms: -bp post -pd 1)%s", t.bwd_waited_s * 1e3,
                 sg > 0 ? ", and the gather after AdamW" : "");
    else snprintf(verdict, sizeof verdict, "%s", sg > 0 ? "hidden, but for the gather after AdamW" : "hidden (but for the first/last unit)");
    printf("  %s  %8.1f  %10.1f  %16.2f  %16.2f  %10.1f  %7.1f  %s\n", STAGE_NAMES[s], t.comm_s * 1e3, compute * 1e3,
           in.fwd_s > 0 ? fcomm / in.fwd_s : 0.0, window > 0 ? bcomm / window : 0.0, t.exposed_s * 1e3, t.step_s * 1e3, verdict);
}

// With link bandwidths (-bw/-link, -bwx/-linkx) and a compute rate (-tf): each stage's time per step.
static void print_time(const Plan *p) {
    const TrainArgs *a = p->a;
    const int N = p->N;
    if (a->link.gbps <= 0.0 || a->tflops <= 0.0) {
        printf("time: give -bw GB/s (per rank, inside a node), -tf TFLOP/s (per rank) [-bwx GB/s across nodes, -rpn ranks per node]"
               " for the time per step\n");
        return;
    }
    Zero3Links links;
    plan_links(a, &links);
    const Zero3Link *link = zero3_links_ring(&links, 0, 1, N);   // a ring across nodes runs at its slowest link
    const int across = link == &links.across && links.node_ranks > 0 && links.node_ranks < N;
    double compute = 6.0 * p->psi * (double)p->tokens / N / (a->tflops * 1e12);
    // one unit's collectives that nothing can hide: the first gather of each forward and the
    // last reduction of each backward (the embedding for GPT-2); unknown for a bare count
    double edge_padded = 0.0;
    if (p->have_units) edge_padded = (double)p->z.units[gpt2_unit_emb(&p->cfg)].padded;
    printf("time per step, mixed precision: %lld tokens per step (%d per rank per micro-step x %d), %.0f FLOPs per token (6 x params)"
           " at %g TFLOP/s per rank; ring links %g GB/s per rank", p->tokens, a->B * a->T, p->A, 6.0 * p->psi, a->tflops, link->gbps);
    if (link->latency_s > 0) printf(" + %g us per ring step", link->latency_s * 1e6);
    printf(" (%s)\n", across ? "across nodes: the slowest link of the ring" : "inside one node");
    printf("  stage   comm ms  compute ms  fwd comm/compute  bwd comm/compute  exposed ms  step ms  prefetch and overlap\n");
    for (int s = 0; s <= 3; s++) print_stage_time(p, s, &links, compute, edge_padded);
    printf("  (model: forward = 1/3 and backward = 2/3 of the compute; stage-3 forward gathers hide behind the forward, its\n"
           "   backward gathers and reduce-scatters behind the backward, with prefetch -pd >= 1; all-reduce and stage-1\n"
           "   reduce-scatter behind the last micro-step's backward; stages 1-2 gather the updated params after AdamW, exposed;\n"
           "   the first unit's gather and the last unit's reduction%s have nothing to hide behind; latency: one per ring step)\n",
           p->have_units ? " (GPT-2: the embedding)" : " (not counted for a bare parameter count)");
    if (a->backward_prefetch == ZERO3_BACKWARD_POST)
        printf("  (-bp post: a backward gather starts once the unit before has computed, so at -pd 1 each is waited on in\n"
               "   full, ahead of that unit's reduction; from -pd 2 the gathers ahead of it hide as -bp pre's do one depth lower)\n");
}

// ---- the peak per rank (host/peak.h): the terms of each stage at the run's -b -t -pd -ra -rc -wrap

static const char *const PRECISION_NAMES[2] = {"fp32", "bf16 (-p bf16)"};

// The peak's inputs for a run of flags a whose shard groups hold G ranks, R groups.
static PeakRun peak_run_of(const TrainArgs *a, const GPT2Config *cfg, int G, int R, int stage, int bf16) {
    PeakRun r = {.cfg = *cfg, .B = a->B, .T = a->T, .world = G, .replicas = R, .stage = stage, .prefetch_depth = a->prefetch_depth,
                 .reshard_after_forward = a->reshard_after_forward, .recompute = a->recompute,
                 .backward_prefetch = (Zero3BackwardPrefetch)a->backward_prefetch, .param_bytes = bf16 ? 2 : 4, .grad_bytes = bf16 ? 2 : 4,
                 .one_machine = a->ranks_per_node == 0 || a->ranks_per_node >= G * R};
    r.cfg.wrap = a->wrap;
    return r;
}
static PeakRun peak_run(const Plan *p, const GPT2Config *cfg, int stage, int bf16) {
    return peak_run_of(p->a, cfg, p->G, p->R, stage, bf16);
}

// The ranks whose peak is `want` (of the peaks per rank of one stage), as "0", "1, 3", or
// "1, 3, 5, 7, ... (512 ranks)"; every rank as "every rank".
static void rank_list(const double *peak, int N, double want, char *out, size_t n) {
    int count = 0, k = 0;
    for (int r = 0; r < N; r++) count += peak[r] == want;
    if (count == N) { snprintf(out, n, "every rank"); return; }
    out[0] = 0;
    for (int r = 0, listed = 0; r < N && k < (int)n; r++) {
        if (peak[r] != want) continue;
        if (listed++ == 4 && count > 5) { snprintf(out + k, n - (size_t)k, ", ... (%d ranks)", count); return; }
        k += snprintf(out + k, n - (size_t)k, "%s%d", listed > 1 ? ", " : "", r);
    }
}

// Each stage's peak for every rank: the process's (the table's peak, less the MPI scratch a rank
// does not hold: host/peak.c) and the engine's buffers (model state, gathered units, gradient
// buffers: log.csv's mem_engine_peak_bytes), one row per group of ranks with the same figures.
static void print_peak_ranks(const Plan *p, int bf16) {
    double *peak = (double *)xmalloc((size_t)p->N * sizeof(double));
    printf("  %s, per rank, MiB:\n  stage  %-30s %10s %10s\n", PRECISION_NAMES[bf16], "ranks", "process", "engine");
    for (int s = 0; s <= 3; s++) {
        double engine = 0.0;
        for (int r = 0; r < p->N; r++) {
            PeakRun run = peak_run(p, &p->cfg, s, bf16);
            run.rank = r;
            const PeakBytes b = peak_bytes(&run);
            peak[r] = b.total;
            engine = peak_engine_bytes(&b);   // the same on every rank (the shards' padding left out)
        }
        for (int r = 0; r < p->N; r++) {
            int first = 1;
            for (int q = 0; q < r; q++) first &= peak[q] != peak[r];
            if (!first) continue;
            char ranks[96];
            rank_list(peak, p->N, peak[r], ranks, sizeof ranks);
            printf("  %s  %-30s %10.2f %10.2f\n", STAGE_NAMES[s], ranks, peak[r] / 1048576.0, engine / 1048576.0);
        }
    }
    free(peak);
}

static void print_peak_table(const Plan *p, int bf16) {
    printf("  %s, MiB per rank:%s   (rank 0's; every rank's below)\n  stage", PRECISION_NAMES[bf16],
           bf16 && p->a->bf16 ? "   (this run's precision: -p bf16)" : "");
    for (int k = 0; k < PEAK_TERMS; k++) printf("  %13s", PEAK_TERM_NAMES[k]);
    printf("  %13s  busiest moment of the pool\n", "peak");
    for (int s = 0; s <= 3; s++) {
        const PeakRun r = peak_run(p, &p->cfg, s, bf16);
        const PeakBytes b = peak_bytes(&r);
        printf("  %s", STAGE_NAMES[s]);
        for (int k = 0; k < PEAK_TERMS; k++) printf("  %13.2f", b.bytes[k] / 1048576.0);
        printf("  %13.2f  %s\n", b.total / 1048576.0, b.moment);
    }
}

// Each stage's peak per rank in both precisions, term by term.
static void print_peak(const Plan *p) {
    if (!p->have_units) {
        printf("peak memory per rank: needs the model's shape for its activations and units (a descriptor like d12 or a model file)\n");
        return;
    }
    const TrainArgs *a = p->a;
    printf("peak memory per rank (host/peak.h): model state + gathered units + gradient buffers + the pool's fragmentation\n"
           "+ activations + MPI scratch, at -b %d -t %d -pd %d%s -ra %d -rc %d, on %d rank%s sharding the state\n", a->B, a->T,
           a->prefetch_depth, a->backward_prefetch == ZERO3_BACKWARD_POST ? " -bp post" : "", a->reshard_after_forward,
           a->recompute, p->G, p->G > 1 ? "s" : "");
    for (int bf16 = 0; bf16 < 2; bf16++) print_peak_table(p, bf16);
    for (int bf16 = 0; bf16 < 2; bf16++) print_peak_ranks(p, bf16);
    printf("  (activations: what the CPU trainer keeps for the backward, fp32 in both precisions; MPI scratch: a sum\n"
           "   receives its parts of a unit into one buffer of the unit's size on every rank; with -rpn across machines an\n"
           "   fp32 sum is Open MPI's, which copies the largest unit's gradients on rank 0, twice for a reduce-scatter on 3+\n"
           "   ranks, and on the other ranks of its binomial tree that have children (per rank, above); the process's\n"
           "   peak is the kernel's count, log.csv's mem_peak_bytes; the engine's, model state + gathered + gradients,\n"
           "   mem_engine_peak_bytes; stages 0-1 and one rank hold nothing in the pool: their buffers are the resident state)\n");
    if (a->quant_weights || a->hp_group || a->quant_grads)
        printf("  (exact ZeRO: the ZeRO++ flags' int8 buffers and hpZ's secondary shard are not in these figures)\n");
}

// ---- offload (-oo, -op): where a rank's shards live, on paper
//
//   a rank's part (as the stage shards it)   -oo none   -oo host              -oo disk               -op disk (-z 3)
//   params (-p bf16: the bf16 working copy)  memory     memory                memory                 a file, read before each gather
//   gradients                                memory     memory                memory                 memory
//   optimizer: master (-p bf16), m, v        memory     host memory (the      a file, streamed       (with -p fp32 the master is the
//                                                       CPU trainer: the      unit by unit through   params: it goes with them)
//                                                       same memory)          -os staging slots
//
// Per step on disk: -oo disk reads and writes the optimizer part once (the AdamW stream); -op disk reads
// the param shard at every gather (forward and backward, each micro-step) and writes it once after AdamW
// (with -p fp32, where it is the master, AdamW reads it too). One disk does both: time = bytes / -disk.
typedef struct {
    double out;            // bytes moved out of the memory that computes (to host memory or a file)
    double host;           // -oo host: the optimizer part in host memory
    double disk;           // the per-rank files' bytes (records rounded to 4 KiB blocks: at most 4 KiB a unit more)
    double slots;          // each file's -os staging slots, in memory (slot i as large as the largest unit i mod S)
    double read, write;    // I/O bytes per step
} PlanOffload;

// Stage s's placement for a rank whose shard group holds `world` ranks: psi parameters, `gathers` the
// gathers each parameter makes per step (A x (forward + backward)), `slot_params` the parameters the
// -os slots hold whole (peak_slot_elements; 0: unknown, a bare count, whose slots are then not counted).
static PlanOffload plan_offload(const TrainArgs *a, int s, double psi, int world, int bf16, double gathers, double slot_params) {
    PlanOffload o;
    memset(&o, 0, sizeof o);
    const Zero3DType t = bf16 ? ZERO3_BF16 : ZERO3_F32;
    double part[3];
    zero3_theory_state_parts(s, psi, world, t, t, part);
    const double opt_per_param = bf16 ? 12.0 : 8.0;   // fp32 master + m + v; with -p fp32, m + v (the master is the params)
    if (a->offload_opt == OFFLOAD_HOST) { o.out += part[2]; o.host = part[2]; }
    if (a->offload_opt == OFFLOAD_DISK) {
        o.out += part[2];
        o.disk += part[2];
        o.read += part[2];
        o.write += part[2];
        if (slot_params > 0.0) {
            const double span = ZERO3_STAGE_LAYOUT[s].optimizer == ZERO3_SHARDED ? slot_params / world : slot_params;
            o.slots = span * opt_per_param;
        }
    }
    if (a->offload_params == OFFLOAD_DISK && s == 3) {
        o.out += part[0];
        o.disk += part[0];
        o.read += part[0] * gathers + (bf16 ? 0.0 : part[0]);   // fp32: AdamW reads the master it updates
        o.write += part[0];
        if (slot_params > 0.0) o.slots += slot_params / world * (bf16 ? 2.0 : 4.0);   // its own slots
    }
    return o;
}

// Gathers per parameter per step: from the unit layout (each unit's forward and backward gathers,
// weighted by its size), else one forward and (with -ra 1) one backward gather, A times.
static double plan_gathers_per_param(const Plan *p) {
    if (!p->have_units) return p->A * (1.0 + (p->a->reshard_after_forward ? 1.0 : 0.0));
    double weighted = 0.0, total = 0.0;
    for (int u = 0; u < p->z.nunits; u++) {
        weighted += (double)p->z.units[u].numel * (p->fwd[u] + p->bwd[u]);
        total += (double)p->z.units[u].numel;
    }
    return total > 0.0 ? p->A * weighted / total : 0.0;
}

static int offload_given(const TrainArgs *a) { return a->offload_opt != OFFLOAD_NONE || a->offload_params != OFFLOAD_NONE; }

// A run's peak with its offload: the peak on paper less what left the memory, plus the slots.
static double peak_with_offload(const TrainArgs *a, const PeakRun *r, double gathers) {
    const PeakBytes b = peak_bytes(r);
    const PlanOffload o = plan_offload(a, r->stage, (double)gpt2_num_parameters(&r->cfg), r->world, r->param_bytes == 2,
                                       gathers, peak_slot_elements(&r->cfg, a->offload_slots));
    return b.total - o.out + o.slots;
}

static void offload_words(const TrainArgs *a, char *buf, size_t n) {
    char oo[128], op[128];
    args_flag_text(args_flag("-oo"), a, oo, sizeof oo);
    args_flag_text(args_flag("-op"), a, op, sizeof op);
    snprintf(buf, n, "-oo %s -op %s", oo, op);
}

// -oo / -op given: per stage, in the run's precision, the memory per rank with the offloaded state out
// of it (the peak when the model's shape is known, else the model state), host memory, the files, the
// I/O per step and its time at -disk GB/s.
static void print_offload(const Plan *p) {
    const TrainArgs *a = p->a;
    if (!offload_given(a)) {
        printf("offload: give -oo host|disk, -op disk for where the shards live, their files and the I/O per step\n");
        return;
    }
    const int bf16 = a->bf16;
    const double gathers = plan_gathers_per_param(p), slot_params = p->have_units ? peak_slot_elements(&p->cfg, a->offload_slots) : 0.0;
    char words[300];
    offload_words(a, words, sizeof words);
    printf("offload (%s), %s, per rank; I/O time at -disk %g GB/s a rank:\n", words, PRECISION_NAMES[bf16], a->disk_gbps);
    printf("  stage  %-20s %10s %11s %11s %11s %13s %13s %10s\n", p->have_units ? "peak GiB (without)" : "state GiB (without)",
           "out GiB", "host GiB", "slots GiB", "disk GB", "read GB/step", "write GB/step", "I/O s/step");
    for (int s = 0; s <= 3; s++) {
        const PlanOffload o = plan_offload(a, s, p->psi, p->G, bf16, gathers, slot_params);
        const Zero3DType t = bf16 ? ZERO3_BF16 : ZERO3_F32;
        double before = zero3_theory_state_bytes(s, p->psi, p->G, t, t);
        if (p->have_units) {
            const PeakRun r = peak_run(p, &p->cfg, s, bf16);
            before = peak_bytes(&r).total;
        }
        const double gib = 1073741824.0, after = before - o.out + o.slots;
        printf("  %s  %8.3f (%8.3f) %10.3f %11.3f %11.3f %9.3f %13.3f %13.3f %10.2f\n", STAGE_NAMES[s], after / gib, before / gib,
               o.out / gib, o.host / gib, o.slots / gib, o.disk / 1e9, o.read / 1e9, o.write / 1e9,
               (o.read + o.write) / (a->disk_gbps * 1e9));
    }
    printf("  (in parentheses: without offload. The optimizer part: %s, %g bytes a parameter, read and written\n"
           "   once a step; -op (stage 3 only): the %s param shard, %g bytes a parameter, read at each of its %.3g gathers\n"
           "   a step and written once%s; slots: %d for each file (-os), slot i the size of the largest unit i mod %d%s; records\n"
           "   round up to 4 KiB)\n",
           bf16 ? "fp32 master + m + v" : "m + v (the fp32 params are the master)", bf16 ? 12.0 : 8.0, bf16 ? "bf16" : "fp32",
           bf16 ? 2.0 : 4.0, gathers, bf16 ? "" : ", read once more by AdamW", a->offload_slots, a->offload_slots,
           p->have_units ? "" : " (a bare count: not counted)");
}

// The deepest model of cfg's width (L a multiple of -wrap K) whose peak (with -oo / -op: less the
// offloaded state, plus the slots) fits in `limit` bytes at stage s: its depth, 0 when one block does not fit; *peak its peak (of one block when none fits).
static int deepest_fitting(const Plan *p, int s, int bf16, double limit, double *peak) {
    GPT2Config c = p->cfg;
    const int K = p->a->wrap > 1 ? p->a->wrap : 1;
    int best = 0;
    for (int L = K; L <= 1024; L += K) {
        c.num_layers = L;
        const PeakRun r = peak_run(p, &c, s, bf16);
        const double b = offload_given(p->a) ? peak_with_offload(p->a, &r, plan_gathers_per_param(p)) : peak_bytes(&r).total;
        if (L == K) *peak = b;
        if (b > limit) break;
        best = L;
        *peak = b;
    }
    return best;
}

// -mem M: per stage and precision, the deepest GPT-2 at -e's width whose peak fits in M GiB.
static void print_fit(const Plan *p) {
    const TrainArgs *a = p->a;
    if (a->mem_gib <= 0.0) return;
    const GPT2Config *c = &p->cfg;
    printf("the deepest GPT-2 of -e's width (C=%d NH=%d maxT=%d: %d parameters beside its L blocks of %d) whose peak fits in\n"
           "%g GiB per rank, at the peak table's -b -t -pd -ra -rc -wrap%s:\n", c->channels, c->num_heads, c->max_seq_len,
           (int)((double)c->padded_vocab_size * c->channels + (double)c->max_seq_len * c->channels + 2.0 * c->channels),
           12 * c->channels * c->channels + 13 * c->channels, a->mem_gib,
           offload_given(a) ? " and the offload table's placement (-oo, -op)" : "");
    printf("  stage  %-36s  %s\n", PRECISION_NAMES[0], PRECISION_NAMES[1]);
    for (int s = 0; s <= 3; s++) {
        printf("  %s", STAGE_NAMES[s]);
        for (int bf16 = 0; bf16 < 2; bf16++) {
            double peak = 0.0;
            const int L = deepest_fitting(p, s, bf16, a->mem_gib * 1073741824.0, &peak);
            char cell[64];
            if (L == 0) snprintf(cell, sizeof cell, "none (one block peaks at %.3f GiB)", peak / 1073741824.0);
            else snprintf(cell, sizeof cell, "L=%-4d%s peak %.3f GiB", L, L == 1024 ? "+" : " ", peak / 1073741824.0);
            printf(bf16 ? "  %s" : "  %-36s", cell);
        }
        printf("\n");
    }
    if (a->hp_group)
        printf("  (not in these depths: -hp %d's secondary shard, the params / %d, %.2f bytes a parameter more at stage 3 in "
               "fp32, %.2f in bf16; nor the ZeRO++ int8 buffers: leave room for them)\n",
               a->hp_group, a->hp_group, 4.0 / a->hp_group, 2.0 / a->hp_group);
    else if (a->quant_weights || a->quant_grads)
        printf("  (not in these depths: the ZeRO++ int8 buffers of -qw / -qg: leave room for them)\n");
}

// Model state per rank at stage 3 under hpZ with groups of G, params p and grads g bytes each: the
// stage's state plus the secondary shard, params / G (none on one rank), as the run's theory counts it.
static double zeropp_state_bytes(double psi, int N, int G, Zero3DType pt, Zero3DType gt) {
    double secondary = G > 0 && N > 1 ? psi * (double)zero3_dtype_size(pt) / G : 0.0;
    return zero3_theory_state_bytes(3, psi, N, pt, gt) + secondary;
}

// The ZeRO++ flags given: the model state this run holds per rank, in both precisions.
static void print_zeropp_run(const Plan *p) {
    const TrainArgs *a = p->a;
    if (!a->quant_weights && !a->hp_group && !a->quant_grads) return;
    char flags[64] = "";
    if (a->quant_weights) strcat(flags, " -qw 8");
    if (a->hp_group) snprintf(flags + strlen(flags), sizeof flags - strlen(flags), " -hp %d", a->hp_group);
    if (a->quant_grads) strcat(flags, " -qg 8");
    printf("  this run (-z 3%s): model state %.0f bytes per rank in fp32 (this CPU trainer), %.0f in mixed precision\n",
           flags, zeropp_state_bytes(p->psi, p->N, a->hp_group, ZERO3_F32, ZERO3_F32),
           zeropp_state_bytes(p->psi, p->N, a->hp_group, ZERO3_BF16, ZERO3_BF16));
}

// ZeRO++ (docs/zeropp.md) on paper: stage 3 in mixed precision with each idea and all three, in
// hpZ's and qgZ's groups of G ranks (-hp G as given, else the node of -rpn R): bytes each rank sends
// per step, the part that crosses nodes, and the model-state memory per rank (hpZ keeps a
// secondary shard: params / G more).
static void print_zeropp(const Plan *p) {
    const int N = p->N, rpn = p->a->ranks_per_node > 0 && p->a->ranks_per_node < N ? p->a->ranks_per_node : N;
    const int G = p->a->hp_group ? p->a->hp_group : N % rpn == 0 ? rpn : N;
    static const struct { const char *name; int qw, hp, qg; } rows[] = {
        {"exact ZeRO-3", 0, 0, 0}, {"-qw 8", 8, 0, 0}, {"-hp G", 0, 1, 0}, {"-qg 8", 0, 0, 8},
        {"-qg 8 -hp G", 0, 1, 8}, {"-qw 8 -hp G -qg 8", 8, 1, 8}};
    printf("ZeRO++ (stage 3, mixed precision, %s G = %d of %d rank%s%s): GB each rank sends per step\n",
           p->a->hp_group ? "-hp groups" : "node groups", G, N, N > 1 ? "s" : "",
           !p->a->hp_group && rpn == N ? "; -rpn R sets the ranks per node" : "");
    printf("  flags                    total   across nodes  across vs exact  model state GB/rank\n");
    double exact_across = 0.0;
    for (size_t i = 0; i < sizeof rows / sizeof rows[0]; i++) {
        int hp = rows[i].hp;
        Zero3PlusPlus pp = {rows[i].qw, hp ? G : 0, rows[i].qg, hp ? G : N};
        Zero3Ledger l;
        zero3_theory_ledger_zeropp(p->have_units ? &p->z : NULL, p->psi, N, p->A, ZERO3_BF16, ZERO3_BF16, p->fwd, p->bwd, &pp, &l);
        double across = zeropp_across_bytes(&l, N > rpn, pp.node_size > rpn);
        if (i == 0) exact_across = across;
        double mem = zeropp_state_bytes(p->psi, N, hp ? G : 0, ZERO3_BF16, ZERO3_BF16);
        printf("  %-20s %10.3f  %13.3f  %15.3f  %19.3f\n", rows[i].name, zero3_ledger_bytes(&l) / 1e9, across / 1e9,
               exact_across > 0 ? across / exact_across : 0.0, mem / 1e9);
    }
    printf("  (qwZ: int8 codes + one fp32 scale per %d elements, %.4f bytes a parameter instead of 2; hpZ: backward gathers\n"
           "   inside the node; qgZ: int8 gradients all-to-all in the node group, node sums requantized across: -qg alone is\n"
           "   one hop over all ranks. Bytes under the ring model, as above)\n", ZERO3_QUANT_BLOCK, 1.0 + 4.0 / ZERO3_QUANT_BLOCK);
    print_zeropp_run(p);
}

int plan_main(const TrainArgs *a, int align) {
    Plan p;
    memset(&p, 0, sizeof p);
    p.args = *a;
    p.a = &p.args;
    p.N = a->plan_world;
    p.A = args_validate(&p.args, p.N);   // first, as a run validates before it reads the model
    plan_read_model(&p);
    plan_shape(&p);
    plan_layout(&p, align);
    if (p.have_units) args_check_offload_slots(p.a, p.z.nunits);
    if (proc_rank() == 0) {
        print_model(&p);
        plan_ledgers(&p);
        print_communication(&p);
        print_zeropp(&p);
        print_time(&p);
        print_peak(&p);
        print_offload(&p);
        print_fit(&p);
    }
    if (p.have_units) { free(p.fwd); free(p.bwd); zero3_free(&p.z); }
    fflush(stdout);
    return 0;
}

// ---- the startup check (plan.h): the plan against this machine's memory

// MemAvailable from a meminfo file, in bytes, else MemTotal (*which names the one read); 0: neither.
static double meminfo_bytes(const char *path, const char **which) {
    FILE *f = fopen(path, "r");
    if (!f) return 0.0;
    char line[256];
    double avail = 0.0, total = 0.0, kb;
    while (fgets(line, sizeof line, f)) {
        if (sscanf(line, "MemAvailable: %lf kB", &kb) == 1) avail = kb * 1024.0;
        else if (sscanf(line, "MemTotal: %lf kB", &kb) == 1) total = kb * 1024.0;
    }
    fclose(f);
    *which = avail > 0.0 ? "MemAvailable" : "MemTotal (this kernel has no MemAvailable)";
    return avail > 0.0 ? avail : total;
}

PlanRunPeak plan_run_peak(const TrainArgs *a, const GPT2Config *cfg, int world, int rank) {
    const int G = a->shard_group ? a->shard_group : world, R = world / G;
    GPT2Config c = *cfg;
    PeakRun r = peak_run_of(a, &c, G, R, a->stage, a->bf16);
    r.rank = rank;
    const PeakBytes b = peak_bytes(&r);
    const PlanOffload o = plan_offload(a, a->stage, (double)gpt2_num_parameters(cfg), G, a->bf16, 0.0,
                                       peak_slot_elements(&r.cfg, a->offload_slots));
    const int gpu = a->build.precision != ARGS_PRECISION_EITHER;   // the GPU trainer's peak is the GPU's
    return (PlanRunPeak){gpu ? o.host : b.total - o.out + o.slots, b.total, o.out, o.slots, peak_engine_bytes(&b)};
}

void plan_check_machine(const TrainArgs *a, const GPT2Config *cfg, int world) {
    const char *skip = getenv("ZERO3_MEM_CHECK");
    if (skip && !strcmp(skip, "0")) return;
    const char *fake = getenv("ZERO3_MEMINFO"), *path = fake && fake[0] ? fake : "/proc/meminfo", *which = "";
    const double have = meminfo_bytes(path, &which);
    if (have <= 0.0 || world < 1) return;   // no figure to hold the plan against (not Linux), or no ranks checked yet
    const PlanRunPeak p = plan_run_peak(a, cfg, world, 0);   // rank 0 holds the most
    const double per_rank = p.per_rank;
    const char *local = getenv("OMPI_COMM_WORLD_LOCAL_SIZE");
    const int here = local && atoi(local) > 0 ? atoi(local) : world;
    const double need = per_rank * here, gib = 1073741824.0;
    if (need <= have) return;
    char words[300];
    offload_words(a, words, sizeof words);
    fatal("memory: the plan needs %.2f GiB on this machine, more than its %s of %.2f GiB (%s): %d rank%s x %.2f GiB "
          "(-e %s -z %d -p %s %s: peak %.2f GiB, %.2f GiB of it moved out, %.2f GiB of staging slots); offload the "
          "optimizer state (-oo disk), shard over more ranks or machines, or set ZERO3_MEM_CHECK=0 to start anyway",
          need / gib, which, have / gib, path, here, here > 1 ? "s" : "", per_rank / gib, a->init, a->stage,
          a->bf16 ? "bf16" : "fp32", words, p.without / gib, p.out / gib, p.slots / gib);
}
