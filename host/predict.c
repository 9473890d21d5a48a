// host/predict.c: the planner's time model set beside the run that it models (see predict.h).
#include "predict.h"

void predict_links(RunPrediction *p, const TrainArgs *a, const Zero3Backend *be) {
    memset(p, 0, sizeof *p);
    p->rank = be->rank;
    plan_links(a, &p->links);
    if (!a->links_emulated) return;
    // -linkx's nodes were checked against the ranks with the other flags (args_validate)
    char err[512] = "";
    if (!be->emulate_links)
        set_err(err, sizeof err, "flag -link%s: this trainer cannot hold its collectives for an emulated link (its "
                "collectives run on the GPU's communication stream); the CPU trainer emulates links, and -bw/-bwx give "
                "the prediction real links", a->link_x.gbps > 0.0 && a->link.gbps <= 0.0 ? "x" : "");
    else if (be->emulate_links(be->ctx, &p->links, err, sizeof err) != 0) {
        char why[512];
        snprintf(why, sizeof why, "flag -link: %s", err);
        snprintf(err, sizeof err, "%s", why);
    }
    agree_or_exit(be, err);
    p->emulated = 1;
}

// The ring seconds of one collective of unit u's full buffer (F bytes) over rank 0's shard ring.
static double unit_ring_s(const RunPrediction *p, const Zero3 *z, int all_reduce, double F) {
    double sent, steps;
    zero3_ring_cost(all_reduce, F, z->world, &sent, &steps);
    return zero3_link_seconds(zero3_links_ring(&p->links, 0, 1, z->world), sent, steps);
}

void predict_configure(RunPrediction *p, const TrainArgs *a, const Zero3 *z, const Zero3Ledger *ledger, int A,
                       int edge_unit, int first_step, int steps, double flops_per_step) {
    PlanStepInput *in = &p->in;
    const Zero3UnitFacts stage = {.layout = ZERO3_STAGE_LAYOUT[a->stage], .world = z->world, .replicas = z->replicas,
                                  .quant_grads = z->cfg.quant_grads};   // a unit of the run's stage
    in->micro_steps = A;
    in->reduces_every_micro_step = zero3_reduces_every_micro_step(&stage);
    in->prefetch = a->prefetch_depth >= 1;
    in->bwd_overlap = zero3_theory_backward_overlap(a->prefetch_depth, (Zero3BackwardPrefetch)a->backward_prefetch);
    plan_collective_seconds(ledger, &p->links, z->world, z->replicas, z->be->world, in->coll_s);
    for (int k = 0; k < ZERO3_COLL_KINDS; k++)
        p->kind_link[k] = plan_kind_ring(&p->links, k, z->world, z->replicas, z->be->world, &p->kind_steps[k]);
    // the edge unit: gathered first in each forward where its params are sharded, reduced last in
    // each backward that reduces (all-reduced where its optimizer state is whole)
    const Zero3Unit *U = &z->units[edge_unit];
    const Zero3UnitFacts edge = zero3_unit_facts(z, edge_unit);
    if (zero3_gather_for(&edge, ZERO3_FOR_FORWARD, 0).kind != ZERO3_COLL_KINDS)
        in->edge_gather_s = unit_ring_s(p, z, 0, (double)U->padded * zero3_dtype_size(z->cfg.param_type));
    in->edge_reduce_s = unit_ring_s(p, z, plan_reduction_all_reduces(&edge),
                                    (double)U->padded * zero3_dtype_size(z->cfg.grad_type));
    p->flops_per_step = flops_per_step;
    p->first_step = first_step;
    int after = steps - first_step - 1;   // timed steps after the left-out one
    p->calib_steps = after >= 3 ? 2 : after >= 1 ? 1 : 0;
}

static void describe_link(const Zero3Link *l, char *buf, size_t n) {
    if (l->gbps <= 0.0) { snprintf(buf, n, "unlimited"); return; }
    if (l->latency_s > 0.0) snprintf(buf, n, "%g GB/s + %g us per ring step", l->gbps, l->latency_s * 1e6);
    else snprintf(buf, n, "%g GB/s", l->gbps);
}

void predict_describe_links(const RunPrediction *p, int world, char *buf, size_t n) {
    char in[96], x[96];
    describe_link(&p->links.inside, in, sizeof in);
    describe_link(&p->links.across, x, sizeof x);
    const char *how = p->emulated ? "emulated: each collective held for the ring model's time"
                                  : p->links.inside.gbps > 0.0 ? "on paper (-bw/-bwx): for the prediction only"
                                                               : "none given: the machine's own (-link G[,LAT] emulates one)";
    const int nodes = p->links.node_ranks;
    if (nodes > 0 && nodes < world) snprintf(buf, n, "%s inside nodes of %d ranks, %s across (%s)", in, nodes, x, how);
    else snprintf(buf, n, "%s (%s)", in, how);
}

// What one step's timeline shows, added to `sums`.
static void sums_add(TimeSums *sums, const Zero3Event *ev, int n, double step_s, double exposed_s) {
    for (int i = 0; i < n; i++) {
        const double d = ev[i].t_end - ev[i].t_begin;
        if (ev[i].type == ZERO3_EV_FORWARD) sums->fwd_s += d;
        else if (ev[i].type == ZERO3_EV_BACKWARD) sums->bwd_s += d;
        else if (ev[i].type == ZERO3_EV_COLLECTIVE) sums->comm_s += d;
    }
    sums->compute_s += step_s - exposed_s;   // as log.csv's compute_ms: the step less its waits
    sums->exposed_s += exposed_s;
    sums->step_s += step_s;
    sums->steps++;
}

// The ring time of one collective on the timeline (its ledger bytes, its kind's ring).
static double event_ring_s(const RunPrediction *p, const Zero3Event *e) {
    return zero3_link_seconds(p->kind_link[e->coll], e->bytes, p->kind_steps[e->coll]);
}

// The collective a wait waits for: the latest one issued before it for the same unit and kind
// (else the same unit); -1 if none.
static int waited_collective(const Zero3Event *ev, int i) {
    int same_unit = -1;
    for (int j = i - 1; j >= 0; j--) {
        if (ev[j].type != ZERO3_EV_COLLECTIVE || ev[j].unit != ev[i].unit) continue;
        if (ev[j].coll == ev[i].coll) return j;
        if (same_unit < 0) same_unit = j;
    }
    return same_unit;
}

// Replays one step's timeline over the links: the compute side runs its spans (and the gaps between
// them) as measured; each collective starts when issued and the stream is free and takes its ring
// time; a wait lasts until its collective is done; the norm (a blocking all-reduce) takes its ring
// time where it was waited for. Adds the replayed step to p->replay.
static void replay_step(RunPrediction *p, const Zero3Event *ev, int n, double t0, double t1) {
    double clock = 0.0, real = t0, stream = 0.0, exposed = 0.0, comm = 0.0, compute = 0.0;
    double *done = (double *)xcalloc((size_t)n + 1, sizeof(double));
    for (int i = 0; i < n; i++) {
        const Zero3Event *e = &ev[i];
        if (e->type == ZERO3_EV_COLLECTIVE) {
            if (e->coll == ZERO3_COLL_NORM) continue;   // replayed at its wait
            const double d = event_ring_s(p, e), start = clock > stream ? clock : stream;
            done[i] = stream = start + d;
            comm += d;
            continue;
        }
        const double gap = e->t_begin > real ? e->t_begin - real : 0.0;   // the loop's own work between spans
        clock += gap;
        compute += gap;
        real = e->t_end > real ? e->t_end : real;
        const double before = clock;
        if (e->type != ZERO3_EV_WAIT) { clock += e->t_end - e->t_begin; compute += e->t_end - e->t_begin; continue; }
        if (e->coll == ZERO3_COLL_NORM) {
            const double d = p->in.coll_s[ZERO3_COLL_NORM];   // one per step
            clock = (clock > stream ? clock : stream) + d;
            stream = clock;
            comm += d;
        } else {
            const int j = waited_collective(ev, i);
            if (j >= 0 && done[j] > clock) clock = done[j];
        }
        exposed += clock - before;
    }
    const double tail = t1 > real ? t1 - real : 0.0;   // after the last span: the step's loss all-reduce
    free(done);
    p->replay.compute_s += compute + tail;
    p->replay.comm_s += comm;
    p->replay.exposed_s += exposed;
    p->replay.step_s += clock + tail;
    p->replay.steps++;
}

static void print_time_line(const char *what, double compute, double comm, double exposed, double step) {
    printf("time: %-9s compute %9.1f ms | comm %9.1f ms | exposed %9.1f ms | step %9.1f ms\n", what, compute * 1e3,
           comm * 1e3, exposed * 1e3, step * 1e3);
}

// The calibration is complete: the model's compute from it, and its answer.
static void predict_now(RunPrediction *p) {
    const TimeSums *c = &p->calib;
    PlanStepInput *in = &p->in;
    in->fwd_s = c->fwd_s / c->steps;
    in->bwd_s = c->bwd_s / c->steps;
    in->other_s = c->compute_s / c->steps - in->fwd_s - in->bwd_s;
    if (in->other_s < 0.0) in->other_s = 0.0;
    p->predicted = plan_predict_step(in);
    p->have_prediction = 1;
    if (p->rank != 0) return;
    const double compute = c->compute_s / c->steps;
    const int first = p->calib_steps > 0 ? p->first_step + 2 : p->first_step + 1;   // 1-based, as the step lines
    char steps[48];   // "step 2" or "steps 2-3"
    if (c->steps > 1) snprintf(steps, sizeof steps, "steps %d-%d", first, first + c->steps - 1);
    else snprintf(steps, sizeof steps, "step %d", first);
    printf("time model for this run: compute %.1f ms per step measured on %s, %.3g GFLOP/s per rank"
           " (forward %.0f%%, backward %.0f%%, the rest %.0f%%)\n", compute * 1e3, steps, p->flops_per_step / compute / 1e9,
           100 * in->fwd_s / compute, 100 * in->bwd_s / compute, 100 * in->other_s / compute);
    const PlanStepTime *t = &p->predicted;
    const TimeSums *r = &p->replay;
    print_time_line("planner", t->compute_s, t->comm_s, t->exposed_s, t->step_s);
    print_time_line("replay", r->compute_s / r->steps, r->comm_s / r->steps, r->exposed_s / r->steps, r->step_s / r->steps);
    fflush(stdout);
}

void predict_step(RunPrediction *p, int step, const Zero3Event *ev, int n, double t0, double t1, double exposed_s) {
    if (!ev) return;
    const double step_s = t1 - t0;
    if (step == p->first_step && p->calib_steps > 0) return;   // left out
    if (!p->have_prediction) {
        sums_add(&p->calib, ev, n, step_s, exposed_s);
        replay_step(p, ev, n, t0, t1);
        if (p->calib.steps == (p->calib_steps > 0 ? p->calib_steps : 1)) predict_now(p);
        return;
    }
    sums_add(&p->measured, ev, n, step_s, exposed_s);
}

void predict_report(const RunPrediction *p) {
    if (p->rank != 0 || !p->have_prediction) return;
    const TimeSums *m = p->measured.steps ? &p->measured : &p->calib, *r = &p->replay;
    const int first = p->first_step + 1 + (p->measured.steps ? p->calib_steps : 0) + (p->calib_steps > 0);   // 1-based
    const PlanStepTime *t = &p->predicted;
    printf("time model vs this run (rank 0; measured: the mean of step%s %d-%d%s):\n", m->steps > 1 ? "s" : "", first,
           first + m->steps - 1, p->measured.steps ? "" : ", the calibration steps themselves");
    print_time_line("planner", t->compute_s, t->comm_s, t->exposed_s, t->step_s);
    const double rk = 1.0 / r->steps, k = 1.0 / m->steps;
    print_time_line("replay", r->compute_s * rk, r->comm_s * rk, r->exposed_s * rk, r->step_s * rk);
    print_time_line("measured", m->compute_s * k, m->comm_s * k, m->exposed_s * k, m->step_s * k);
    printf("time: measured step against planner %+.1f%%, against replay %+.1f%%\n", 100.0 * (m->step_s * k / t->step_s - 1.0),
           100.0 * (m->step_s * k / (r->step_s * rk) - 1.0));
    fflush(stdout);
}
