// host/report.c: what a run says about itself: the startup report (the model, the ranks, memory
// and communication in theory, the collective ledger), the step line, each step's timeline
// (exposed communication per unit, the trace, the time model's measurement) and the end-of-run
// summary (the ledger measured against theory, the buffer pool, where the compute side waited).
#include "trainer.h"
#include "../observe/zero3_observe.h"
#include "zeropp.h"
#include "plan.h"   // plan_run_peak

void format_bytes(char *buf, size_t n, double bytes) {
    const char *unit[] = {"B", "KiB", "MiB", "GiB", "TiB"};
    int i = 0;
    while (bytes >= 1024.0 && i < 4) { bytes /= 1024.0; i++; }
    snprintf(buf, n, "%.2f %s", bytes, unit[i]);
}

// A long phase says what it is doing (rank 0; trainer.h).
void progress(const Trainer *tr, const char *fmt, ...) {
    if (tr->be->rank != 0) return;
    va_list ap;
    va_start(ap, fmt);
    vprintf(fmt, ap);
    va_end(ap);
    fflush(stdout);
}

// The variants of this run (README "Variants"), and this exact configuration on paper: model state
// from every unit's own layout, bytes per step with A micro-steps from the run's collective ledger
// (and, under HSDP, the part that crosses replica groups), activations with and without recompute.
// The measured figures are in the step line and log.csv; tests/variants.py holds them to these.
static void trainer_report_variants(const Trainer *tr) {
    const TrainArgs *a = &tr->args;
    const Zero3 *z = &tr->z;
    char buf[4][32];
    printf("| variants HSDP %s, reshard after forward %s, recompute %s, persistence threshold %lld (%d units, "
           "%zu params replicated), clip %s\n", a->shard_group ? "on" : "off", a->reshard_after_forward ? "yes" : "no (-ra 0)",
           a->recompute == 0 ? "off" : a->recompute == 1 ? "in the backward's gather" : "with its own gather (-rc 2)",
           a->persist_threshold, zero3_persistent_units(z), z->totals.persistent_numel, a->clip_local ? "LOCAL (the pitfall)" : "global");
    if (z->replicas > 1)
        printf("|   HSDP: %d shard groups of %d ranks; gathers and reduce-scatters inside a group, the gradient shards "
               "all-reduced across groups\n", z->replicas, z->world);
    // the run's collective ledger in theory (trainer_create): all of it, and the part across groups
    double comm = zero3_ledger_bytes(&tr->measure.ledger_theory), inter = tr->measure.ledger_theory.row[ZERO3_COLL_REPLICA_REDUCE].bytes;
    format_bytes(buf[0], sizeof buf[0], zero3_theory_run_state_bytes(z));
    format_bytes(buf[1], sizeof buf[1], comm);
    format_bytes(buf[2], sizeof buf[2], comm - inter);
    format_bytes(buf[3], sizeof buf[3], inter);
    printf("|   this run in theory: model state %s per rank; sent per step %s (A=%d micro-steps) = %s inside "
           "groups + %s across\n", buf[0], buf[1], tr->A, buf[2], buf[3]);
    printf("|   theory bytes: state %.0f comm %.0f inter %.0f\n", zero3_theory_run_state_bytes(z), comm, inter);
    zeropp_report(z, &tr->measure.ledger_theory);
    format_bytes(buf[0], sizeof buf[0], (double)tr->compute->activation_bytes(&tr->cfg, a->B, a->T, 0));
    format_bytes(buf[1], sizeof buf[1], (double)tr->compute->activation_bytes(&tr->cfg, a->B, a->T, 1));
    printf("|   activations per rank: %s without recompute, %s with (-rc 1/2)%s\n", buf[0], buf[1],
           a->recompute ? "   <- this run" : "");
}

// The data lines: both splits, or the training split alone under -v 0; a validation split shorter
// than one batch says how it is read.
static void report_data(const Trainer *tr) {
    const TrainArgs *a = &tr->args;
    const DataLoader *val = &tr->data.val;
    printf("| data     train %s (%zu tokens), ", a->train_path, tr->data.train.ntok);
    if (a->val_every <= 0) printf("val off (-v 0: %s is not read)\n", a->val_path);
    else printf("val %s (%zu tokens)\n", a->val_path, val->ntok);
    if (a->val_every > 0 && val->spread)
        printf("| val      %zu tokens, fewer than one batch (B*T+1 = %lld): each validation batch is B=%d rows of T=%d "
               "spread evenly over the split, its %zu targets in %lld predictions\n", val->ntok, (long long)a->B * a->T + 1,
               a->B, a->T, val->ntok - 1, (long long)a->B * a->T);
}

// The model state this run holds, in its parts: bytes a parameter of each (2 / 2 / 12 in mixed
// precision, 4 / 4 / 8 in fp32) and this stage's share of them (theory, padded units).
static void report_state_split(const Trainer *tr) {
    const Zero3 *z = &tr->z;
    const int fp32 = z->cfg.param_type == ZERO3_F32;
    double parts[3];
    char b[3][32];
    zero3_theory_state_parts(tr->args.stage, (double)z->totals.numel, tr->be->world, z->cfg.param_type, z->cfg.grad_type, parts);
    for (int i = 0; i < 3; i++) format_bytes(b[i], sizeof b[i], parts[i]);
    printf("|   split    params %s (%zu bytes a parameter) + grads %s (%zu) + optimizer %s (%d: %s)\n", b[0],
           zero3_dtype_size(z->cfg.param_type), b[1], zero3_dtype_size(z->cfg.grad_type), b[2], fp32 ? 8 : 12,
           fp32 ? "m, v; the fp32 params are the master" : "fp32 master, m, v");
}

// -oo host on a device (the backend's host memory): what left the device, against the plan's figure
// for it (the optimizer part of zero3_theory_state_parts, -plan's host column; unpadded, so a little
// below the padded units' bytes). "this run holds" above is the device's part alone.
static void report_host_state(const Trainer *tr) {
    const Zero3 *z = &tr->z;
    if (!z->resident.host_bytes) return;
    double parts[3];
    zero3_theory_state_parts(tr->args.stage, (double)z->totals.numel, z->world, z->cfg.param_type, z->cfg.grad_type, parts);
    char host[32];
    format_bytes(host, sizeof host, (double)z->resident.host_bytes);
    printf("|   -oo host: the optimizer shard in pinned host memory, %s: %zu bytes (%d a parameter; the plan's, unpadded: "
           "%.0f); device %zu bytes\n", host, z->resident.host_bytes, z->cfg.param_type == ZERO3_F32 ? 8 : 12, parts[2],
           z->resident.bytes);
}

// "| nodes    node1: ranks 0-1, node2: ranks 2-3": each node's ranks (a run of consecutive ranks as
// a range), when the backend knows its ranks' host names.
static int on_node(const Zero3Backend *be, int rank, const char *node) { return !strcmp(be->node_name(be->ctx, rank), node); }

static void report_nodes(const Zero3Backend *be) {
    if (!be->node_name || !be->node_name(be->ctx, 0)) return;
    char line[1024] = "";
    int k = 0, *said = (int *)xcalloc((size_t)be->world, sizeof(int));
    for (int r = 0; r < be->world; r++) {
        if (said[r]) continue;
        const char *node = be->node_name(be->ctx, r);
        int count = 0;
        for (int q = r; q < be->world; q++) count += on_node(be, q, node);
        k += snprintf(line + k, sizeof line - (size_t)k, "%s%s: rank%s", k ? ", " : "", node, count > 1 ? "s" : "");
        for (int q = r; q < be->world && k < (int)sizeof line; q++) {
            if (said[q] || !on_node(be, q, node)) continue;
            int last = q;
            while (last + 1 < be->world && on_node(be, last + 1, node)) last++;
            for (int i = q; i <= last; i++) said[i] = 1;
            k += last > q ? snprintf(line + k, sizeof line - (size_t)k, " %d-%d", q, last)
                          : snprintf(line + k, sizeof line - (size_t)k, " %d", q);
            q = last;
        }
        if (k >= (int)sizeof line) break;
    }
    free(said);
    printf("| nodes    %s\n", line);
}

void trainer_report(Trainer *tr) {
    if (tr->be->rank != 0) return;
    const TrainArgs *a = &tr->args;
    const GPT2Config *c = &tr->cfg;
    const Zero3 *z = &tr->z;
    int N = tr->be->world;
    char dev[256];
    tr->compute->describe(tr->compute_state, dev, sizeof dev);
    printf("+-------------------------------------------------------------------------\n");
    printf("| GPT-2 ZeRO trainer   %s\n", dev);
    printf("| model    %s: L=%d C=%d NH=%d V=%d (Vp %d) maxT=%d, %zu parameters\n", a->init, c->num_layers,
           c->channels, c->num_heads, c->vocab_size, c->padded_vocab_size, c->max_seq_len, z->totals.numel);
    printf("| ranks    N=%d, ZeRO stage %d%s, prefetch depth %d (backward: %s), %d units\n", N, a->stage,
           a->stage == 0 ? " (DDP)" : "", a->prefetch_depth, a->backward_prefetch == ZERO3_BACKWARD_POST ? "post" : "pre",
           z->nunits);
    report_nodes(tr->be);
    printf("| batch    B=%d T=%d, %lld tokens/step = %d ranks x %d micro-steps x %d x %d\n", a->B, a->T,
           a->tokens_per_step, N, tr->A, a->B, a->T);
    printf("| optim    AdamW lr %g warmup %d final %g wd %g clip %g, %d steps; %s\n", a->lr, a->warmup,
           a->final_frac, a->weight_decay, a->grad_clip, a->steps,
           a->update_in_backward ? "inside the backward, each unit's once its gradients are final (-ua 1)"
                                 : "after the backward, on every unit at once (-ua 0)");
    report_data(tr);
    char links[512];
    predict_describe_links(&tr->measure.predict, N, links, sizeof links);
    printf("| links    %s\n", links);
    printf("+-------------------------------------------------------------------------\n");
    printf("| model-state memory per rank (params + grads + optimizer), %zu params, N=%d\n", z->totals.numel, N);
    printf("|   stage        theory        comm/step (theory, A=%d micro-step%s)\n", tr->A, tr->A > 1 ? "s" : "");
    const char *names[4] = {"0 DDP ", "1     ", "2     ", "3     "};
    int *fwd = (int *)xmalloc((size_t)z->nunits * sizeof(int)), *bwd = (int *)xmalloc((size_t)z->nunits * sizeof(int));
    gpt2_gathers_per_pass(c, 0, 0, fwd, bwd);   // the plain stages of the table
    for (int s = 0; s <= 3; s++) {
        char mem[32], comm[32];
        Zero3Ledger l;
        zero3_theory_ledger(z, s, tr->A, z->cfg.param_type, z->cfg.grad_type, fwd, bwd, &l);
        format_bytes(mem, sizeof mem, zero3_theory_state_bytes(s, (double)z->totals.numel, N, z->cfg.param_type, z->cfg.grad_type));
        format_bytes(comm, sizeof comm, zero3_ledger_bytes(&l));
        printf("|   %s  %12s  %12s%s\n", names[s], mem, comm, s == a->stage ? "   <- this run" : "");
    }
    free(fwd);
    free(bwd);
    char res[32];
    format_bytes(res, sizeof res, (double)z->resident.bytes);
    printf("|   this run holds %s of model state (padded units) + gathered units/grad buffers (see peak)\n", res);
    report_host_state(tr);
    report_state_split(tr);
    trainer_report_variants(tr);
    printf("|   (comm: bytes each rank sends, ring model, with the padding; grads SHARDED reduce-scatter at every\n"
           "|    micro-step and stage 3 gathers at every one, stages 0-1 reduce once per step; -plan N for other N)\n");
    printf("+-------------------------------------------------------------------------\n");
    printf("| collective ledger per step, this run (theory: count, bytes each rank sends)\n");
    for (int k = 0; k < ZERO3_COLL_KINDS; k++) {
        const Zero3LedgerRow *row = &tr->measure.ledger_theory.row[k];
        if (row->count == 0) continue;
        char b[32];
        format_bytes(b, sizeof b, row->bytes);
        printf("|   %-15s %6.0f  %12s  (%.0f bytes)\n", ZERO3_COLL_NAMES[k], row->count, b, row->bytes);
    }
    printf("+-------------------------------------------------------------------------\n");
    fflush(stdout);
}

// The model FLOPs of one trained token, the numerator of MFU (recomputation is not counted: MFU, not
// HFU). The linear layers: 6 per parameter (2 forward, 4 backward; the tied LM head is wte, counted
// once, and the embeddings' few FLOPs are counted as if they were matmuls, as everyone does).
// Attention's two matmuls per layer, q k^T and p v, each 2*T*C per token over the full T x T matrix,
// forward and backward (x3): 12*L*T*C, halved because the mask makes half of it zeros that a fused
// kernel skips: 6*L*T*C. (PaLM's appendix counts 12*L*T*C; llm.c counts 6*L*T*C, as here.) For
// GPT-2 124M at T=1024: 6*124.4M + 6*12*1024*768 = 746M + 56.6M per token (attention 7%).
double model_flops_per_token(const Trainer *tr) {
    const GPT2Config *c = &tr->cfg;
    return 6.0 * (double)tr->z.totals.numel + 6.0 * c->num_layers * (double)tr->args.T * c->channels;
}

// The step's timeline: exposed communication per unit for the summary, the trace, the time model's
// measurement. Returns the step's exposed communication in ms.
double trainer_timeline(Trainer *tr, int step, double t0, double t1) {
    int n;
    const Zero3Event *ev = zero3_timeline_read(&tr->z, &n);
    if (!ev) return 0.0;
    if (step > tr->start_step) {   // as for ms/step, the first step (recording, warming) is left out
        double units = 0.0;
        for (int u = 0; u < tr->z.nunits; u++) { tr->measure.unit_exposed_sum[u] += tr->z.observe.unit_exposed_s[u]; units += tr->z.observe.unit_exposed_s[u]; }
        tr->measure.norm_exposed_sum += tr->z.observe.stats.exposed_s - units;
        tr->measure.timed_steps++;
    }
    trace_step(tr->measure.trace, &tr->z, ev, n, step, t0, t1);
    predict_step(&tr->measure.predict, step, ev, n, t0, t1, tr->z.observe.stats.exposed_s);
    return tr->z.observe.stats.exposed_s * 1e3;
}

// One row of the ledger as a reader says it: "6 collectives, 48,898,560 bytes in all" (the bytes are
// the row's total, not each collective's).
static void format_ledger_row(char *buf, size_t n, const Zero3LedgerRow *row) {
    char digits[32], grouped[48];
    snprintf(digits, sizeof digits, "%.0f", row->bytes);
    int len = (int)strlen(digits), j = 0;
    for (int i = 0; i < len; i++) {
        if (i > 0 && (len - i) % 3 == 0) grouped[j++] = ',';
        grouped[j++] = digits[i];
    }
    grouped[j] = 0;
    snprintf(buf, n, "%3.0f %-12s %15s bytes in all", row->count, row->count == 1 ? "collective," : "collectives,", grouped);
}

// Fragmentation, the fourth kind of memory beside model state, activations and transient buffers:
// what the engine's buffer pool reserves beyond the most bytes the last step held in it at once
// (a released buffer is kept for the next request it fits, so a smaller one can sit in a bigger one).
static void trainer_print_pool(const Trainer *tr) {
    const Zero3 *z = &tr->z;
    size_t reserved = z->pool.bytes, held = z->observe.stats.transient_peak;
    char r[32], h[32], f[32];
    format_bytes(r, sizeof r, (double)reserved);
    format_bytes(h, sizeof h, (double)held);
    format_bytes(f, sizeof f, reserved > held ? (double)(reserved - held) : 0.0);
    printf("buffer pool: %d buffers reserve %s; the last step held at most %s in them at once; fragmentation %s (%.1f%%)\n",
           z->pool.count, r, h, f, reserved > held ? 100.0 * (double)(reserved - held) / (double)reserved : 0.0);
}

// The gathered units live at once (stage 3): the prefetch depth's bound, 1 + P units under -bp pre
// (more where -ra 0 keeps them, or the tied embedding is held), in DeepSpeed's unit of
// stage3_max_live_parameters, parameters.
static void trainer_print_live_units(const Trainer *tr) {
    const Zero3Stats *s = &tr->z.observe.stats;
    if (s->live_units_peak == 0) return;
    printf("live params: the last step held at most %d gathered units at once, %zu parameters (rank 0, -pd %d)\n",
           s->live_units_peak, s->live_params_peak, tr->z.cfg.prefetch_depth);
}

// The run's memory as the kernel counts it (trainer_process_peak) over its steps, taken after the
// last one, before -o's last checkpoint and export (trainer_gather_peaks), for every rank: rank 0's
// in full, then each rank's, beside the plan's prediction for that rank on the CPU trainer (whose
// peak is all in host memory): the figure the startup check held against the machine. The ranks
// can differ: rank 0 holds the scalars, and across machines, as the root of Open MPI's fp32
// reductions, their copies of the units (host/peak.c's MPI scratch).
static void trainer_print_process_memory(const Trainer *tr) {
    if (!tr->measure.rank_peaks) return;
    const long long before = tr->measure.resident_before, run = tr->measure.rank_peaks[0], peak = run + before;
    if (run < 0) return;
    char p[32], b[32], d[32], planned[80] = "";
    format_bytes(p, sizeof p, (double)peak);
    format_bytes(b, sizeof b, (double)before);
    format_bytes(d, sizeof d, (double)run);
    const int cpu = tr->args.build.precision == ARGS_PRECISION_EITHER, N = tr->be->world;
    if (cpu) {
        char q[32];
        format_bytes(q, sizeof q, plan_run_peak(&tr->args, &tr->cfg, N, 0).per_rank);
        snprintf(planned, sizeof planned, "; the plan's %s", q);
    }
    printf("process memory (rank 0, the kernel's count): peak resident %s (VmHWM) - %s before the model state = %s "
           "(%lld bytes) the run's peak%s\n", p, b, d, run, planned);
    printf("process memory per rank (VmHWM - the resident set before the model state)%s:\n", cpu ? " | the plan's" : "");
    for (int r = 0; r < N; r++) {
        const long long got = tr->measure.rank_peaks[r];
        format_bytes(d, sizeof d, (double)got);
        printf("  rank %d  %s (%lld bytes)", r, got < 0 ? "unknown" : d, got);
        if (cpu) {
            const double want = plan_run_peak(&tr->args, &tr->cfg, N, r).per_rank;
            format_bytes(p, sizeof p, want);
            printf(" | %s (%.0f bytes, %+.1f%%)", p, want, got > 0 ? 100.0 * (want / (double)got - 1.0) : 0.0);
        }
        printf("\n");
    }
}

// -oo disk, -op disk (rank 0): what the offload moved over the run, both files together, read and
// written, and the rate while the I/O threads were inside pread/pwrite: bytes / I/O seconds, the
// disk's rate as this run saw it (the disk's own, measured by dd, is scripts/bench_offload.sh's).
// The last step's write-backs are waited for first: every step's I/O is counted.
static void trainer_print_offload_io(const Trainer *tr) {
    Zero3Offload *stores[2] = {tr->z.offload, tr->z.params_offload};
    Zero3OffloadStats st = {0};
    int any = 0;
    for (int i = 0; i < 2; i++) {
        if (!stores[i]) continue;
        zero3_offload_drain(stores[i]);
        const Zero3OffloadStats s = zero3_offload_stats(stores[i]);
        st.bytes_read += s.bytes_read;
        st.bytes_written += s.bytes_written;
        st.io_seconds += s.io_seconds;
        st.direct = any ? st.direct && s.direct : s.direct;
        any = 1;
    }
    if (!any) return;
    const double bytes = st.bytes_read + st.bytes_written;
    printf("offload I/O (rank 0, %s): %.3f GB read + %.3f GB written in %.3f s of I/O = %.3f GB/s\n",
           st.direct ? "direct" : "buffered", st.bytes_read / 1e9, st.bytes_written / 1e9, st.io_seconds,
           st.io_seconds > 0.0 ? bytes / st.io_seconds / 1e9 : 0.0);
}

// The bytes rank 0's node sent per step, as its kernel counts them, beside the ring model's: the
// ledger's bytes each rank sends (theory), times the hops of each kind's rings out of the node
// (zero3_ring_hops_out_of_node0: the shard groups' rings, the replica groups', every rank's for the
// norm, hpZ's node groups'). The wire adds TCP/IP's headers and acknowledgements and whatever else
// the node sent, and Open MPI's algorithms are not all rings (docs/cluster.md, "Bytes on the wire").
static void trainer_print_wire(const Trainer *tr) {
    const int K = tr->measure.wire_node_ranks, N = tr->be->world, shard = tr->z.world, replicas = tr->z.replicas;
    if (!K || tr->measure.wire_steps < 1) return;
    const int hp = tr->z.cfg.hp_group > 1 ? tr->z.cfg.hp_group : N;
    double model = 0.0;
    int modelled = 1;
    for (int k = 0; k < ZERO3_COLL_KINDS; k++) {
        const double bytes = tr->measure.ledger_theory.row[k].bytes;
        if (bytes <= 0.0) continue;
        int hops;
        switch ((Zero3Collective)k) {
        case ZERO3_COLL_NORM: hops = zero3_ring_hops_out_of_node0(K, 1, 0, 1, N); break;
        case ZERO3_COLL_REPLICA_REDUCE: hops = zero3_ring_hops_out_of_node0(K, shard, 1, shard, replicas); break;
        case ZERO3_COLL_HP_GATHER: hops = zero3_ring_hops_out_of_node0(K, N / hp, hp, 1, hp); break;
        case ZERO3_COLL_QG_INTRA: case ZERO3_COLL_QG_ACROSS: hops = 0; modelled = 0; break;   // all-to-all, no ring
        default: hops = zero3_ring_hops_out_of_node0(K, replicas, shard, 1, shard); break;   // the shard groups
        }
        model += bytes * hops;
    }
    const double wire = tr->measure.wire_sent / tr->measure.wire_steps;
    char w[32], m[32];
    format_bytes(w, sizeof w, wire);
    format_bytes(m, sizeof m, model);
    printf("wire (node %s, ranks 0-%d; the kernel's count on its interfaces, mean of %d steps): %s sent a step (%.0f bytes)",
           tr->be->node_name(tr->be->ctx, 0), K - 1, tr->measure.wire_steps, w, wire);
    if (!modelled) printf("; the ring model does not cover qgZ's all-to-all\n");
    else if (model > 0.0) printf(" | ring model: %s out of the node a step (%.0f bytes) | wire / model %.3fx\n", m, model, wire / model);
    else printf(" | ring model: none out of the node\n");
}

// At the end (rank 0): the last step's collectives against the theory, where the compute side
// waited, unit by unit, and the compute's own line (run_note).
void trainer_summary(const Trainer *tr) {
    if (tr->be->rank != 0) return;
    int issued = 0;   // every step issues at least the norm's all-reduce, so 0 means no step ran here
    for (int k = 0; k < ZERO3_COLL_KINDS; k++) issued += tr->measure.ledger_step.row[k].count;
    if (!issued) printf("collective ledger: no step ran in this run (it resumed at its last step)\n");
    int match = 1;
    if (issued) printf("collective ledger, last step (rank 0): measured | theory\n");
    for (int k = 0; k < ZERO3_COLL_KINDS; k++) {
        const Zero3LedgerRow *m = &tr->measure.ledger_step.row[k], *t = &tr->measure.ledger_theory.row[k];
        if (!issued || (m->count == 0 && t->count == 0)) continue;
        int same = m->count == t->count && fabs(m->bytes - t->bytes) <= 1e-9 * (t->bytes + 1.0);
        match &= same;
        char measured[96], theory[96];
        format_ledger_row(measured, sizeof measured, m);
        format_ledger_row(theory, sizeof theory, t);
        printf("  %-15s %s | %s  %s\n", ZERO3_COLL_NAMES[k], measured, theory, same ? "ok" : "DIFFERENT");
    }
    if (issued) printf("ledger: %s\n", match ? "measured = theory" : "measured != theory");
    trainer_print_pool(tr);
    trainer_print_live_units(tr);
    trainer_print_process_memory(tr);
    trainer_print_offload_io(tr);
    trainer_print_wire(tr);
    if (tr->z.step.checked_steps > 0)   // ZERO3_CHECK_STEPS=1
        printf("step-end invariant held at %d steps (%d pool buffers, %d open files)\n", tr->z.step.checked_steps,
               tr->z.pool.count, tr->measure.open_files);
    if (tr->measure.timed_steps > 0) {
        printf("exposed communication by unit (rank 0, mean ms per step over %d steps):", tr->measure.timed_steps);
        for (int u = 0; u < tr->z.nunits; u++) {
            if (u % 8 == 0) printf("\n ");
            printf(" %s %.2f", tr->z.units[u].name, 1e3 * tr->measure.unit_exposed_sum[u] / tr->measure.timed_steps);
        }
        printf("\n  norm %.2f\n", 1e3 * tr->measure.norm_exposed_sum / tr->measure.timed_steps);
    }
    char note[256] = "";
    tr->compute->run_note(tr->compute_state, note, sizeof note);   // what the device has to say (GPU: epilogue fallbacks)
    if (note[0]) printf("%s\n", note);
    fflush(stdout);
    predict_report(&tr->measure.predict);
}
// The step line on stdout (rank 0).
static void print_step_line(const Trainer *tr, const TrainLoop *loop, const StepResult *r) {
    const TrainArgs *a = &tr->args;
    const int step = r->step;
    const double ms = r->ms, tokens = loop->tokens, exposed_ms = r->exposed_ms;
    double avg_ms = step > tr->start_step ? loop->total_ms / (step - tr->start_step) : ms;
    double eta = avg_ms * (a->steps - 1 - step) / 1000.0;
    char sent[32], peak[32], engine[32];
    format_bytes(sent, sizeof sent, r->comm);
    format_bytes(peak, sizeof peak, (double)r->process_peak);
    format_bytes(engine, sizeof engine, (double)r->engine_peak);
    double mfu = tr->compute->flops_fraction(tr->compute_state, model_flops_per_token(tr) * tokens / (ms / 1000.0) / tr->be->world);
    printf("step %*d/%d | loss %.6f", (int)log10(a->steps) + 1, step + 1, a->steps, r->loss);
    if (!isnan(r->val)) printf(" | val %.6f", r->val);
    printf(" | lr %.2e | norm %.4f | %.1f ms | %.0f tok/s", r->lr, r->norm, ms, tokens / (ms / 1000.0));
    if (mfu >= 0) printf(" | MFU %.1f%%", 100.0 * mfu);
    char note[128] = "";
    tr->compute->step_note(tr->compute_state, note, sizeof note);
    printf(" | exposed comm %.1f ms (%.0f%%) | sent %s | peak %s process, %s engine%s | ETA %dm%02ds\n", exposed_ms,
           ms > 0 ? 100.0 * exposed_ms / ms : 0.0, sent, r->process_peak < 0 ? "unknown" : peak, engine, note,
           (int)eta / 60, (int)eta % 60);
    fflush(stdout);
}
void trainer_print_step(const Trainer *tr, const TrainLoop *loop, const StepResult *r) {
    if (tr->be->rank != 0) return;
    print_step_line(tr, loop, r);
    if (tr->clip_probe) clip_probe_print(tr->clip_probe);
}

