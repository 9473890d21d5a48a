// zero3_observe.c: what the engine measures (zero3_observe.h): the collective ledger, the timeline
// and the theory. The hooks below reach zero3.c as one table, ZERO3_OBSERVER, installed through
// Zero3Config.observer; zero3.c calls one where each phase happens. Nothing here changes what the
// engine does, only what it writes down (into z->observe).
#include "zero3_observe.h"
#include <math.h>
#include <stdlib.h>
#include <string.h>

const char *const ZERO3_COLL_NAMES[ZERO3_COLL_KINDS] = {
    "fwd_gather", "bwd_gather", "reduce_scatter", "all_reduce", "step_gather", "norm", "replica_reduce",
    "hp_bwd_gather", "qg_intra", "qg_across",
};

// ------------------------------------------------------------------------------------------------
// What each kind of collective is: an all-reduce (a reduce-scatter, then an all-gather of the sums)
// or a single pass (all-gather, reduce-scatter, all-to-all). The one list the measured ledger, the
// theory and the planner's rings read.
int zero3_coll_all_reduces(Zero3Collective kind) {
    return kind == ZERO3_COLL_ALL_REDUCE || kind == ZERO3_COLL_REPLICA_REDUCE || kind == ZERO3_COLL_NORM;
}

// The ledger row a reduction of the policy (zero3_reduction_for) counts in: its first collective
// (qgZ's second hop, across node groups, is QG_ACROSS); ZERO3_COLL_KINDS for none.
Zero3Collective zero3_reduction_row(Zero3ReduceHow how) {
    switch (how) {
    case ZERO3_REDUCE_ALL_REDUCE: return ZERO3_COLL_ALL_REDUCE;
    case ZERO3_REDUCE_SCATTER: return ZERO3_COLL_REDUCE_SCATTER;
    case ZERO3_REDUCE_QUANTIZED: return ZERO3_COLL_QG_INTRA;
    default: return ZERO3_COLL_KINDS;
    }
}

// ------------------------------------------------------------------------------------------------
// The ledger, the measured side: every call the engine issued, counted by what the call handed the
// backend, with no cost model. A call on a buffer of F bytes over a group of n ranks leaves this
// rank's own part of it (F / n) where it is and obliges the rank to hand the rest to the others: a
// gather's shard to every other rank, a reduce-scatter's or an all-to-all's parts to their owners;
// an all-reduce does it twice (its parts out to be summed, then its sum out). Those are the bytes
// counted. The theory (below) prices the calls the policy says will be issued with zero3_ring_cost,
// and "measured = theory" holds because a ring sends each of these bytes exactly once.

// The ranks a collective of kind `kind` runs over: the shard group, ZeRO++'s node group or cross
// group, HSDP's replica group, or every rank (the norm, under HSDP too).
static int group_ranks(const Zero3 *z, Zero3Collective kind) {
    switch (kind) {
    case ZERO3_COLL_HP_GATHER: case ZERO3_COLL_QG_INTRA: return z->node_size;
    case ZERO3_COLL_QG_ACROSS: return z->nodes;
    case ZERO3_COLL_REPLICA_REDUCE: return z->replicas;
    case ZERO3_COLL_NORM: return z->be->world;
    default: return z->world;
    }
}

// The bytes of a call's buffer of F bytes that this rank hands to the other n - 1 ranks of its group.
static double handed_to_others(Zero3Collective kind, double F, int n) {
    const double others = F - F / n;
    return zero3_coll_all_reduces(kind) ? 2.0 * others : others;
}

// Counts one call of kind `kind` on a buffer of F bytes into the step's stats (its line: gathers,
// reductions, the scalar, across replicas) and ledger; returns the bytes counted.
static double ledger_count(Zero3 *z, Zero3Collective kind, size_t F) {
    Zero3Stats *s = &z->observe.stats;
    const double b = handed_to_others(kind, (double)F, group_ranks(z, kind));
    switch (kind) {
    case ZERO3_COLL_FWD_GATHER: case ZERO3_COLL_BWD_GATHER: case ZERO3_COLL_STEP_GATHER: case ZERO3_COLL_HP_GATHER:
        s->comm_gather_bytes += b; s->gathers++;
        break;
    case ZERO3_COLL_REDUCE_SCATTER: case ZERO3_COLL_ALL_REDUCE: case ZERO3_COLL_QG_INTRA: case ZERO3_COLL_QG_ACROSS:
        s->comm_reduce_bytes += b; s->reduces++;
        break;
    case ZERO3_COLL_REPLICA_REDUCE:
        s->comm_inter_bytes += b; s->reduces++;
        break;
    default:                          // the norm
        s->comm_scalar_bytes += b;
    }
    s->comm_bytes += b;
    s->ledger.row[kind].count += 1.0;
    s->ledger.row[kind].bytes += b;
    return b;
}

double zero3_ledger_bytes(const Zero3Ledger *l) {
    double total = 0.0;
    for (int k = 0; k < ZERO3_COLL_KINDS; k++) total += l->row[k].bytes;
    return total;
}

size_t zero3_peak_bytes(const Zero3 *z) { return z->resident.bytes + z->observe.stats.transient_peak; }

// ------------------------------------------------------------------------------------------------
// The timeline: with a backend that takes stamps, the engine writes down when each unit computes,
// when each collective moves, and when the compute side waits for one (the exposed communication).
// A unit's compute span runs from the end of its pre_forward / pre_backward to the next engine call.

static int timed(const Zero3 *z) { return z->be->stamp != NULL; }
static int stamp(Zero3 *z) { return z->be->stamp(z->be->ctx); }

// Appends an event; returns its index (the array may move: index it afresh after the next add).
static int event_add(Zero3 *z, Zero3EventType type, int unit, Zero3Collective coll) {
    Zero3Observe *o = &z->observe;
    if (o->nevents == o->events_cap) {
        o->events_cap = o->events_cap ? 2 * o->events_cap : 1024;
        o->events = realloc(o->events, (size_t)o->events_cap * sizeof(Zero3Event));
        if (!o->events) zero3_die("out of host memory");
    }
    Zero3Event *e = &o->events[o->nevents];
    memset(e, 0, sizeof(*e));
    e->type = type; e->unit = unit; e->coll = coll; e->micro = z->step.micro;
    e->stamp_begin = e->stamp_end = -1;
    return o->nevents++;
}

// The seconds of stamps 0..n-1, read from the backend into observe.stamp_seconds.
static void read_stamps(Zero3 *z, int n) {
    Zero3Observe *o = &z->observe;
    if (n > o->stamp_cap) {
        o->stamp_cap = n;
        o->stamp_seconds = realloc(o->stamp_seconds, (size_t)n * sizeof(double));
        if (!o->stamp_seconds) zero3_die("out of host memory");
    }
    z->be->stamps_read(z->be->ctx, o->stamp_seconds, n);
}

// ------------------------------------------------------------------------------------------------
// The hooks (zero3.h's Zero3Observer): the compute span first (the others close it), then in the
// order a step calls them.

static void observe_init(Zero3 *z) {
    z->observe.unit_exposed_s = calloc(ZERO3_MAX_UNITS, sizeof(double));
    if (!z->observe.unit_exposed_s) zero3_die("out of host memory");
    z->observe.open_span = z->observe.open_wait = -1;
}

static void observe_free(Zero3 *z) {
    free(z->observe.events);
    free(z->observe.stamp_seconds);
    free(z->observe.unit_exposed_s);
}

// An event whose two stamps the host takes itself (a compute span, a wait): opened with its begin
// stamp, its index kept in *open until the end stamp closes it.
static void span_open(Zero3 *z, int *open, Zero3EventType type, int unit, Zero3Collective kind) {
    if (!timed(z)) return;
    int i = event_add(z, type, unit, kind);
    z->observe.events[i].stamp_begin = stamp(z);
    *open = i;
}

static void span_close(Zero3 *z, int *open) {
    if (*open < 0) return;
    z->observe.events[*open].stamp_end = stamp(z);
    *open = -1;
}

static void observe_compute_begin(Zero3 *z, Zero3EventType type, int unit) {
    span_open(z, &z->observe.open_span, type, unit, ZERO3_COLL_KINDS);
}

static void observe_compute_end(Zero3 *z) { span_close(z, &z->observe.open_span); }

static void observe_step_begin(Zero3 *z) {
    Zero3Stats *s = &z->observe.stats;
    memset(s, 0, sizeof(*s));
    // a fresh timeline: the stamps of whatever ran since the last step are forgotten
    observe_compute_end(z);
    z->observe.nevents = 0;
    if (timed(z)) z->be->stamps_read(z->be->ctx, NULL, 0);
    for (int i = 0; i < z->pool.count; i++)   // buffers still held across steps (none expected)
        s->transient_bytes += z->pool.entry[i].used;
    s->transient_peak = s->transient_bytes;
}

static void observe_step_end(Zero3 *z) { z->observe.comm_bytes_total += z->observe.stats.comm_bytes; }

// The ledger's count, and the communication side of the collective: its transfer, with its bytes
// (the two stamps the backend took around the collective it started last).
// The units live now: every unit holding a gathered buffer (arriving, gathered or kept). Counted as
// each gather starts, the moment a unit joins them; a unit leaves only when freed, so that is the peak.
static void count_live_units(Zero3 *z) {
    Zero3Stats *s = &z->observe.stats;
    size_t params = 0;
    int units = 0;
    for (int u = 0; u < z->nunits; u++)
        if (z->units[u].params_gathered && z->units[u].param_state != ZERO3_PARAMS_RESIDENT) {
            params += z->units[u].numel;
            units++;
        }
    if (params > s->live_params_peak) s->live_params_peak = params;
    if (units > s->live_units_peak) s->live_units_peak = units;
}

static void observe_collective(Zero3 *z, int unit, Zero3Collective kind, size_t buffer_bytes) {
    double bytes = ledger_count(z, kind, buffer_bytes);
    if (kind == ZERO3_COLL_FWD_GATHER || kind == ZERO3_COLL_BWD_GATHER || kind == ZERO3_COLL_HP_GATHER) count_live_units(z);
    if (!timed(z)) return;
    int i = event_add(z, ZERO3_EV_COLLECTIVE, unit, kind);
    Zero3Event *e = &z->observe.events[i];
    e->bytes = bytes;
    z->be->comm_stamps(z->be->ctx, &e->stamp_begin, &e->stamp_end);
}

static void observe_wait_begin(Zero3 *z, int unit, Zero3Collective kind) {
    span_open(z, &z->observe.open_wait, ZERO3_EV_WAIT, unit, kind);
}

static void observe_wait_end(Zero3 *z) { span_close(z, &z->observe.open_wait); }

static void observe_norm_begin(Zero3 *z) { observe_wait_begin(z, -1, ZERO3_COLL_NORM); }

static void observe_norm_end(Zero3 *z) {
    observe_wait_end(z);
    observe_collective(z, -1, ZERO3_COLL_NORM, sizeof(double));
}

static void observe_transient_acquired(Zero3 *z, size_t bytes) {
    Zero3Stats *s = &z->observe.stats;
    s->transient_bytes += bytes;
    if (s->transient_bytes > s->transient_peak) s->transient_peak = s->transient_bytes;
}

static void observe_transient_released(Zero3 *z, size_t bytes) { z->observe.stats.transient_bytes -= bytes; }

const Zero3Observer ZERO3_OBSERVER = {
    .init = observe_init, .free = observe_free,
    .step_begin = observe_step_begin, .step_end = observe_step_end,
    .compute_begin = observe_compute_begin, .compute_end = observe_compute_end,
    .collective = observe_collective,
    .wait_begin = observe_wait_begin, .wait_end = observe_wait_end,
    .norm_begin = observe_norm_begin, .norm_end = observe_norm_end,
    .transient_acquired = observe_transient_acquired, .transient_released = observe_transient_released,
};

// What a trainer reads of the timeline (observe/zero3_observe.h): the stamps turned into seconds.
const Zero3Event *zero3_timeline_read(Zero3 *z, int *n) {
    Zero3Observe *o = &z->observe;
    *n = 0;
    if (!timed(z) || z->cfg.observer != &ZERO3_OBSERVER) return NULL;
    observe_compute_end(z);
    int nstamps = 0;
    for (int i = 0; i < o->nevents; i++) {
        if (o->events[i].stamp_begin + 1 > nstamps) nstamps = o->events[i].stamp_begin + 1;
        if (o->events[i].stamp_end + 1 > nstamps) nstamps = o->events[i].stamp_end + 1;
    }
    read_stamps(z, nstamps);
    o->stats.exposed_s = 0.0;
    for (int u = 0; u < z->nunits; u++) o->unit_exposed_s[u] = 0.0;
    for (int i = 0; i < o->nevents; i++) {
        Zero3Event *e = &o->events[i];
        e->t_begin = e->stamp_begin >= 0 ? o->stamp_seconds[e->stamp_begin] : 0.0;
        e->t_end = e->stamp_end >= 0 ? o->stamp_seconds[e->stamp_end] : e->t_begin;
        if (e->type != ZERO3_EV_WAIT) continue;
        double d = e->t_end > e->t_begin ? e->t_end - e->t_begin : 0.0;
        o->stats.exposed_s += d;
        if (e->unit >= 0) o->unit_exposed_s[e->unit] += d;
    }
    *n = o->nevents;
    return o->events;
}

// ------------------------------------------------------------------------------------------------
// Theory, from the same stage table: bytes of model state per rank for psi parameters on N ranks.
// Working params (p bytes), gradients (g bytes), and the optimizer state K: m and v (8 bytes) plus
// an fp32 master copy (4 bytes) when the working params are not fp32; each part is whole where the
// layout keeps it FULL and 1/N where SHARDED.
static double placed(Zero3Placement where, double bytes, double world) {
    return where == ZERO3_SHARDED ? bytes / world : bytes;
}

void zero3_theory_state_parts(int stage, double psi, int world, Zero3DType param_type, Zero3DType grad_type,
                              double parts[3]) {
    const Zero3StageLayout *L = &ZERO3_STAGE_LAYOUT[stage];
    double p = (double)zero3_dtype_size(param_type), g = (double)zero3_dtype_size(grad_type);
    double k = 8.0 + (param_type == ZERO3_F32 ? 0.0 : 4.0);
    double n = (double)world;
    parts[0] = placed(L->params, psi * p, n);
    parts[1] = placed(L->grads, psi * g, n);
    parts[2] = placed(L->optimizer, psi * k, n);
}

double zero3_theory_state_bytes(int stage, double psi, int world, Zero3DType param_type,
                                Zero3DType grad_type) {
    double parts[3];
    zero3_theory_state_parts(stage, psi, world, param_type, grad_type, parts);
    return parts[0] + parts[1] + parts[2];
}

double zero3_theory_run_state_bytes(const Zero3 *z) {
    double p = (double)zero3_dtype_size(z->cfg.param_type), g = (double)zero3_dtype_size(z->cfg.grad_type);
    double k = 8.0 + (z->resident.master_is_params ? 0.0 : 4.0), n = (double)z->world, total = 0.0;
    for (int u = 0; u < z->nunits; u++) {
        const Zero3Unit *U = &z->units[u];
        double psi = (double)U->numel;
        total += placed(U->layout.params, psi * p, n) + placed(U->layout.grads, psi * g, n) + placed(U->layout.optimizer, psi * k, n);
        if (z->cfg.hp_group && z->world > 1 && U->layout.params == ZERO3_SHARDED) total += psi * p / z->node_size;   // hpZ's secondary shard
    }
    return total;
}

// Ring-model bytes sent per rank per step at A = 1: the collective ledger's data rows for a bare
// parameter count (the norm's one number left out): DDP 2 units, stages 1-2 2 units, stage 3 3.
double zero3_theory_comm_bytes(int stage, double psi, int world, Zero3DType param_type,
                               Zero3DType grad_type) {
    Zero3Ledger l;
    zero3_theory_ledger_params(stage, psi, world, 1, 1, param_type, grad_type, &l);
    return zero3_ledger_bytes(&l) - l.row[ZERO3_COLL_NORM].bytes;
}

// The collective ledger in theory (observe/zero3_observe.h): what zero3.c's collectives will count. Which
// collective each unit gets is not worked out here: the theory asks the engine's own policy
// (zero3_gather_for, zero3_reduction_for, zero3_gathers_after_step) for every gather the passes
// make (fwd[u], bwd[u] per micro-step: recorded from the passes) and every micro-step's reduction,
// and prices each collective with the ring model (zero3_ring_cost) over its buffer and its group.
// Per unit of P elements (padded), p and g the bytes of a param and a gradient, G the node group's
// size and X = N / G the node groups, q(n) = n + 4 n / block the bytes of n quantized elements:
//   collective                 buffer          over         collective       buffer   over
//   gather of the shards       P p             N            quantized (qwZ)  q(P)     N
//   secondary gather (hpZ)     P p             G            step gather      P p      N
//   reduce-scatter             P g             N            all-reduce       P g      N
//   quantized reduction (qgZ)  q(P)            G, and for X > 1 X q(P / N) over X (two all-to-alls)
//   replica reduce (HSDP)      span g, the unit's optimizer span, all-reduced over R replica groups
//   norm                       one double all-reduced over every rank
static double quant_bytes(double n) { return n + n / ZERO3_QUANT_BLOCK * sizeof(float); }

// The ring model's bytes this rank sends in one collective of kind `kind` on a buffer of F bytes
// over n ranks.
static double ring_sent(Zero3Collective kind, double F, int n) {
    double sent, steps;
    zero3_ring_cost(zero3_coll_all_reduces(kind), F, n, &sent, &steps);
    return sent;
}

// How many of each collective one unit gets in a step of A micro-steps, by the policy: counts by
// ledger row (gathers, the step gather, the replica reduce) and by reduction (how).
typedef struct {
    double gathers[ZERO3_COLL_KINDS];   // by ledger row; [ZERO3_COLL_STEP_GATHER] after the step
    int gather_quantized;               // the shard gathers are qwZ's
    double reductions[ZERO3_REDUCE_QUANTIZED + 1];   // by Zero3ReduceHow
    double replica;                     // replica reduces
} TheoryCounts;

static TheoryCounts theory_counts(const Zero3UnitFacts *f, int A, int fwd, int bwd) {
    TheoryCounts c;
    memset(&c, 0, sizeof c);
    const Zero3Gather gf = zero3_gather_for(f, ZERO3_FOR_FORWARD, 0);
    const Zero3Gather gb = zero3_gather_for(f, ZERO3_FOR_BACKWARD, fwd > 0);   // the forward's gather freshened hpZ's shard
    if (gf.kind != ZERO3_COLL_KINDS) c.gathers[gf.kind] += A * fwd;
    if (gb.kind != ZERO3_COLL_KINDS) c.gathers[gb.kind] += A * bwd;
    c.gather_quantized = gf.how == ZERO3_GATHER_QUANTIZED;
    if (zero3_gathers_after_step(f)) c.gathers[ZERO3_COLL_STEP_GATHER] += 1;
    for (int k = 0; k < A; k++) {
        const Zero3Reduction r = zero3_reduction_for(f, k, A);
        c.reductions[r.how] += 1;
        c.replica += r.across_replicas;
    }
    return c;
}

// `count` collectives of kind `kind`, each on a buffer of F bytes over n ranks, into the ledger.
static void theory_add(Zero3Ledger *out, Zero3Collective kind, double count, double F, int n) {
    if (count == 0) return;
    out->row[kind].count += count;
    out->row[kind].bytes += count * ring_sent(kind, F, n);
}

// Prices one unit's counts into the ledger (the buffers and groups of the table above).
static void theory_unit(const Zero3UnitFacts *f, const TheoryCounts *c, double P, int G, Zero3DType pt,
                        Zero3DType gt, Zero3Ledger *out) {
    const int N = f->world, X = N / G;
    const double p = (double)zero3_dtype_size(pt), g = (double)zero3_dtype_size(gt);
    const double span = f->layout.optimizer == ZERO3_SHARDED ? P / N : P;
    theory_add(out, ZERO3_COLL_REPLICA_REDUCE, c->replica, span * g, f->replicas);
    const double gather = c->gather_quantized ? quant_bytes(P) : P * p;
    theory_add(out, ZERO3_COLL_FWD_GATHER, c->gathers[ZERO3_COLL_FWD_GATHER], gather, N);
    theory_add(out, ZERO3_COLL_BWD_GATHER, c->gathers[ZERO3_COLL_BWD_GATHER], gather, N);
    theory_add(out, ZERO3_COLL_HP_GATHER, c->gathers[ZERO3_COLL_HP_GATHER], P * p, G);
    theory_add(out, ZERO3_COLL_STEP_GATHER, c->gathers[ZERO3_COLL_STEP_GATHER], P * p, N);
    const Zero3ReduceHow whole[] = {ZERO3_REDUCE_ALL_REDUCE, ZERO3_REDUCE_SCATTER};   // the unit's gradient buffer
    for (int i = 0; i < 2; i++) theory_add(out, zero3_reduction_row(whole[i]), c->reductions[whole[i]], P * g, N);
    const double qg = c->reductions[ZERO3_REDUCE_QUANTIZED];
    theory_add(out, ZERO3_COLL_QG_INTRA, qg, quant_bytes(P), G);
    if (X > 1) theory_add(out, ZERO3_COLL_QG_ACROSS, qg, X * quant_bytes(P / N), X);
}

static void theory_ledger(const Zero3StageLayout *layouts, int world, int replicas, int A, Zero3DType pt, Zero3DType gt,
                          int nunits, const double *padded, const int *fwd, const int *bwd, const Zero3PlusPlus *pp,
                          Zero3Ledger *out) {
    memset(out, 0, sizeof(*out));
    const int G = pp->node_size > 0 ? pp->node_size : world;
    out->row[ZERO3_COLL_NORM].count = 1.0;
    out->row[ZERO3_COLL_NORM].bytes = ring_sent(ZERO3_COLL_NORM, sizeof(double), world * replicas);
    for (int u = 0; u < nunits; u++) {
        const Zero3UnitFacts f = {.layout = layouts[u], .world = world, .replicas = replicas,
                                  .quant_weights = pp->quant_weights, .hp_group = pp->hp_group,
                                  .quant_grads = pp->quant_grads};
        const TheoryCounts c = theory_counts(&f, A, fwd[u], bwd[u]);
        theory_unit(&f, &c, padded[u], G, pt, gt, out);
    }
}

void zero3_theory_ledger(const Zero3 *z, int stage, int micro_steps, Zero3DType param_type,
                         Zero3DType grad_type, const int *fwd_gathers, const int *bwd_gathers,
                         Zero3Ledger *out) {
    int n = z->nunits ? z->nunits : 1;
    double *padded = malloc((size_t)n * sizeof(double));
    Zero3StageLayout *layouts = malloc((size_t)n * sizeof(Zero3StageLayout));
    if (!padded || !layouts) zero3_die("out of host memory");
    for (int u = 0; u < z->nunits; u++) {
        padded[u] = (double)z->units[u].padded;
        layouts[u] = stage < 0 ? z->units[u].layout : ZERO3_STAGE_LAYOUT[stage];
    }
    Zero3PlusPlus pp = {0, 0, 0, 0};
    if (stage < 0) pp = (Zero3PlusPlus){z->cfg.quant_weights, z->cfg.hp_group, z->cfg.quant_grads, z->node_size};
    theory_ledger(layouts, z->world, z->replicas, micro_steps, param_type, grad_type, z->nunits, padded, fwd_gathers,
                  bwd_gathers, &pp, out);
    free(padded);
    free(layouts);
}

void zero3_theory_ledger_params(int stage, double nparams, int world, int replicas, int micro_steps,
                                Zero3DType param_type, Zero3DType grad_type, Zero3Ledger *out) {
    const int once = 1;
    const Zero3PlusPlus none = {0, 0, 0, 0};
    theory_ledger(&ZERO3_STAGE_LAYOUT[stage], world, replicas, micro_steps, param_type, grad_type, 1, &nparams, &once, &once, &none, out);
}

void zero3_theory_ledger_zeropp(const Zero3 *z, double nparams, int world, int micro_steps, Zero3DType param_type,
                                Zero3DType grad_type, const int *fwd_gathers, const int *bwd_gathers,
                                const Zero3PlusPlus *pp, Zero3Ledger *out) {
    const int once = 1, n = z ? z->nunits : 1;
    double *padded = malloc((size_t)n * sizeof(double));
    Zero3StageLayout *layouts = malloc((size_t)n * sizeof(Zero3StageLayout));
    if (!padded || !layouts) zero3_die("out of host memory");
    // under quantization a run pads each unit to whole blocks per shard (zero3_add_unit)
    double quantum = (pp->quant_weights || pp->quant_grads) ? (double)ZERO3_QUANT_BLOCK * world : 1.0;
    for (int u = 0; u < n; u++) {
        padded[u] = ceil((z ? (double)z->units[u].padded : nparams) / quantum) * quantum;
        layouts[u] = ZERO3_STAGE_LAYOUT[3];
    }
    theory_ledger(layouts, world, 1, micro_steps, param_type, grad_type, n, padded, z ? fwd_gathers : &once,
                  z ? bwd_gathers : &once, pp, out);
    free(padded);
    free(layouts);
}

// ------------------------------------------------------------------------------------------------
// The backward's prefetch (zero3_observe.h): pre starts the next d gathers in a unit's pre_backward,
// post starts them in its post_backward, after its compute, so while it computes one of them is
// not yet issued.

int zero3_theory_backward_ahead(int prefetch_depth, Zero3BackwardPrefetch bp) {
    if (prefetch_depth <= 0) return 0;
    return prefetch_depth - zero3_prefetch_after_compute(bp, ZERO3_FOR_BACKWARD);
}

int zero3_theory_backward_live(int prefetch_depth, Zero3BackwardPrefetch bp) {
    return 1 + zero3_theory_backward_ahead(prefetch_depth, bp);
}

Zero3BackwardOverlap zero3_theory_backward_overlap(int prefetch_depth, Zero3BackwardPrefetch bp) {
    if (zero3_theory_backward_ahead(prefetch_depth, bp) >= 1) return ZERO3_BWD_GATHER_BEHIND_COMPUTE;
    return prefetch_depth >= 1 ? ZERO3_BWD_GATHER_AFTER_COMPUTE : ZERO3_BWD_GATHER_WAITED;
}
