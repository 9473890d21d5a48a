// zero3.c: the ZeRO engine. See zero3.h for the picture; this file is the mechanism.
// No MPI, no CUDA: every collective, allocation and shard-math loop goes through z->be.
#include "zero3.h"
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

// zero3.h's stage table, as data. Every decision below reads these three placements; none reads
// the stage number.
const Zero3StageLayout ZERO3_STAGE_LAYOUT[4] = {
    //   params         grads          optimizer (master, m, v)
    {ZERO3_FULL,    ZERO3_FULL,    ZERO3_FULL},      // 0: DDP
    {ZERO3_FULL,    ZERO3_FULL,    ZERO3_SHARDED},   // 1: optimizer state sharded
    {ZERO3_FULL,    ZERO3_SHARDED, ZERO3_SHARDED},   // 2: + gradients
    {ZERO3_SHARDED, ZERO3_SHARDED, ZERO3_SHARDED},   // 3: + parameters
};

const char *const ZERO3_COLL_NAMES[ZERO3_COLL_KINDS] = {
    "fwd_gather", "bwd_gather", "reduce_scatter", "all_reduce", "step_gather", "norm", "replica_reduce",
};

static void zero3_die(const char *msg) {
    fprintf(stderr, "zero3: internal error: %s\n", msg);
    abort();
}

static size_t round_up(size_t x, size_t m) { return (x + m - 1) / m * m; }

// The placements of unit u, by question: its stage's row of the table, or DDP's row for a unit kept
// replicated by the persistence threshold.
static int params_sharded(const Zero3 *z, int u) { return z->units[u].layout.params == ZERO3_SHARDED; }
static int grads_sharded(const Zero3 *z, int u) { return z->units[u].layout.grads == ZERO3_SHARDED; }
static int optimizer_sharded(const Zero3 *z, int u) { return z->units[u].layout.optimizer == ZERO3_SHARDED; }
// One rank: a shard is the whole unit, so a gather or a reduction is the identity. The engine then
// issues no data collective at all and uses the shards in place (stage 3 holds what DDP holds).
static int solo(const Zero3 *z) { return z->world == 1; }

// ------------------------------------------------------------------------------------------------
// Layout

void zero3_init(Zero3 *z, const Zero3Backend *be, const Zero3Config *cfg) {
    memset(z, 0, sizeof(*z));
    z->cfg = *cfg;
    z->be = be;
    z->rank = be->rank;
    z->world = be->world;
    z->replicas = 1;
    if (cfg->stage < 0 || cfg->stage > 3) zero3_die("stage must be 0..3");
    // HSDP: shard within groups of G consecutive ranks, replicate across the N/G groups. From here
    // on the engine's world is the shard group; the backend runs gathers and reduce-scatters inside
    // it and all-reduces gradient shards across the replicas (ranks with the same rank % G).
    if (cfg->shard_group > 0 && cfg->shard_group != be->world) {
        if (be->world % cfg->shard_group != 0 || !be->make_groups) zero3_die("shard group must divide the ranks");
        be->make_groups(be->ctx, cfg->shard_group);
        z->world = cfg->shard_group;
        z->rank = be->rank % cfg->shard_group;
        z->replicas = be->world / cfg->shard_group;
        z->replica = be->rank / cfg->shard_group;
    }
    z->layout = ZERO3_STAGE_LAYOUT[cfg->stage];
    if (cfg->align < 1) z->cfg.align = 1;
    if (cfg->prefetch_depth < 0) z->cfg.prefetch_depth = 0;
    z->units = calloc(ZERO3_MAX_UNITS, sizeof(Zero3Unit));
    // a pass gathers each unit at most a few times (GPT-2's training pass: twice, plus the tied
    // embedding once more)
    for (int p = 0; p < ZERO3_NUM_PASSES; p++) {
        z->schedule[p].order = calloc(3 * ZERO3_MAX_UNITS, sizeof(int));
        z->schedule[p].backward = calloc(3 * ZERO3_MAX_UNITS, 1);
        if (!z->schedule[p].order || !z->schedule[p].backward) zero3_die("out of host memory");
    }
    z->unit_exposed_s = calloc(ZERO3_MAX_UNITS, sizeof(double));
    z->open_span = -1;
    if (!z->units || !z->unit_exposed_s) zero3_die("out of host memory");
    // fp32 working params need no separate master copy: the params ARE the master weights
    z->master_is_params = (cfg->param_type == ZERO3_F32);
}

int zero3_add_unit(Zero3 *z, const char *name, int ntensors, const char *const *names,
                   const size_t *numels, const int *decay) {
    if (z->nunits >= ZERO3_MAX_UNITS || ntensors < 1 || ntensors > ZERO3_MAX_TENSORS)
        zero3_die("too many units or tensors");
    Zero3Unit *u = &z->units[z->nunits];
    snprintf(u->name, sizeof(u->name), "%s", name);
    u->ntensors = ntensors;
    size_t offset = 0;
    for (int i = 0; i < ntensors; i++) {
        Zero3Tensor *t = &u->tensors[i];
        snprintf(t->name, sizeof(t->name), "%s", names[i]);
        // every tensor starts aligned, so a gathered unit can be used in place by vector loads
        t->offset = offset;
        t->numel = numels[i];
        t->decay = decay[i];
        offset = round_up(offset + numels[i], (size_t)z->cfg.align);
        u->numel += numels[i];
    }
    // The tensor offsets above do not depend on the world size; only the tail padding does, so a
    // unit's coordinates are the same on any number of ranks (checkpoints reshard by slicing).
    u->padded = round_up(offset, (size_t)z->cfg.align * (size_t)z->world);
    u->shard = u->padded / (size_t)z->world;
    // a unit below the persistence threshold stays replicated: DDP's row of the table
    u->persistent = z->cfg.persist_threshold > 0 && u->numel < z->cfg.persist_threshold;
    u->layout = u->persistent ? ZERO3_STAGE_LAYOUT[0] : z->layout;
    u->param_state = u->layout.params == ZERO3_SHARDED ? ZERO3_PARAMS_SHARDED : ZERO3_PARAMS_RESIDENT;
    u->grad_state = ZERO3_GRADS_IDLE;
    return z->nunits++;
}

// Allocates what the units' layouts keep resident. Each part (params, grads) has a FULL buffer (P
// elements per unit that keeps it whole) and a SHARDED one (S per unit that keeps a slice); the
// optimizer state (master, m, v) is one buffer with each unit's span, P or S long.
void zero3_allocate(Zero3 *z) {
    const Zero3Backend *be = z->be;
    size_t full = 0, shard = 0, params_full = 0, params_shard = 0, grads_full = 0, grads_shard = 0, optim = 0;
    for (int i = 0; i < z->nunits; i++) {
        Zero3Unit *U = &z->units[i];
        full += U->padded;
        shard += U->shard;
        z->total_numel += U->numel;
        if (U->layout.params == ZERO3_SHARDED) { U->params_offset = params_shard; params_shard += U->shard; }
        else { U->params_offset = params_full; params_full += U->padded; }
        if (U->layout.grads == ZERO3_SHARDED) { U->grads_offset = grads_shard; grads_shard += U->shard; }
        else { U->grads_offset = grads_full; grads_full += U->padded; }
        U->optim_offset = optim;
        optim += U->layout.optimizer == ZERO3_SHARDED ? U->shard : U->padded;
        if (U->persistent) z->persistent_numel += U->numel;
    }
    z->total_padded = full;
    z->total_shard = shard;
    z->grads_full_numel = grads_full;
    z->grads_shard_numel = grads_shard;
    z->optim_numel = optim;
    size_t pbytes = zero3_dtype_size(z->cfg.param_type), gbytes = zero3_dtype_size(z->cfg.grad_type);
    size_t bytes = 0;
    if (params_shard) { z->params_shard = be->alloc(be->ctx, params_shard * pbytes); bytes += params_shard * pbytes; }
    if (params_full) { z->params_full = be->alloc(be->ctx, params_full * pbytes); bytes += params_full * pbytes; }
    if (!z->master_is_params) {
        z->master = be->alloc(be->ctx, optim * sizeof(float));
        bytes += optim * sizeof(float);
    }
    z->adam_m = be->alloc(be->ctx, optim * sizeof(float));
    z->adam_v = be->alloc(be->ctx, optim * sizeof(float));
    bytes += 2 * optim * sizeof(float);
    if (grads_shard) { z->grads_shard = be->alloc(be->ctx, grads_shard * gbytes); bytes += grads_shard * gbytes; }
    if (grads_full) { z->grads_full = be->alloc(be->ctx, grads_full * gbytes); bytes += grads_full * gbytes; }
    z->resident_bytes = bytes;
    // at most one optimizer segment per tensor: a unit's optimizer span meets each tensor once
    for (int i = 0; i < z->nunits; i++) z->adam_segs_cap += z->units[i].ntensors;
    z->adam_segs = calloc((size_t)z->adam_segs_cap, sizeof(Zero3AdamSegment));
    if (!z->adam_segs) zero3_die("out of host memory");
}

void zero3_free(Zero3 *z) {
    const Zero3Backend *be = z->be;
    void *bufs[] = {z->params_full, z->params_shard, z->master, z->adam_m, z->adam_v,
                    z->grads_full, z->grads_shard};
    for (size_t i = 0; i < sizeof(bufs) / sizeof(bufs[0]); i++)
        if (bufs[i]) be->free(be->ctx, bufs[i]);
    for (int i = 0; i < z->pool_count; i++) be->free(be->ctx, z->pool[i].ptr);
    free(z->units);
    for (int p = 0; p < ZERO3_NUM_PASSES; p++) { free(z->schedule[p].order); free(z->schedule[p].backward); }
    free(z->events);
    free(z->stamp_seconds);
    free(z->unit_exposed_s);
    free(z->adam_segs);
    memset(z, 0, sizeof(*z));
}

// ------------------------------------------------------------------------------------------------
// Where each unit's pieces live. "Owned" = the slice [r*S, (r+1)*S) of the unit, in unit coordinates.

static char *at(void *base, size_t elements, Zero3DType t) {
    return (char *)base + elements * zero3_dtype_size(t);
}

size_t zero3_owned_begin(const Zero3 *z, int u) { return (size_t)z->rank * z->units[u].shard; }

// The working params of the owned slice (the input of all-gathers, the output of AdamW).
static void *owned_params(Zero3 *z, int u) {
    const Zero3Unit *U = &z->units[u];
    if (params_sharded(z, u)) return at(z->params_shard, U->params_offset, z->cfg.param_type);
    return at(z->params_full, U->params_offset + zero3_owned_begin(z, u), z->cfg.param_type);
}

// The whole unit's working params where they are FULL (resident).
static void *resident_params(Zero3 *z, int u) { return at(z->params_full, z->units[u].params_offset, z->cfg.param_type); }

// The optimizer's view of unit u: with the optimizer FULL (DDP) every rank updates the whole unit,
// SHARDED only its owned slice. Returns the first element, in unit coordinates, and the count.
static void optimizer_span(const Zero3 *z, int u, size_t *begin, size_t *count) {
    const Zero3Unit *U = &z->units[u];
    *begin = optimizer_sharded(z, u) ? zero3_owned_begin(z, u) : 0;
    *count = optimizer_sharded(z, u) ? U->shard : U->padded;
}

// Index of unit u's optimizer span in the flat optimizer-state buffers (master, m, v).
static size_t optimizer_offset(const Zero3 *z, int u) { return z->units[u].optim_offset; }

void zero3_optimizer_range(const Zero3 *z, int u, size_t *begin, size_t *count) { optimizer_span(z, u, begin, count); }

// Where the owned slice starts inside the optimizer span: r*S into a FULL span, 0 into a shard.
static size_t owned_in_span(const Zero3 *z, int u) { return optimizer_sharded(z, u) ? 0 : zero3_owned_begin(z, u); }

static float *master_span(Zero3 *z, int u) {
    if (z->master_is_params) {   // the fp32 params: the span starts where the optimizer span does
        if (!optimizer_sharded(z, u)) return (float *)resident_params(z, u);
        return (float *)owned_params(z, u);
    }
    return z->master + optimizer_offset(z, u);
}

float *zero3_owned_master(Zero3 *z, int u) { return master_span(z, u) + owned_in_span(z, u); }
float *zero3_owned_m(Zero3 *z, int u) { return z->adam_m + optimizer_offset(z, u) + owned_in_span(z, u); }
float *zero3_owned_v(Zero3 *z, int u) { return z->adam_v + optimizer_offset(z, u) + owned_in_span(z, u); }

// The reduced gradients of the optimizer span of unit u: the shard buffer where grads are SHARDED;
// else the resident full buffer, from the unit's start (optimizer FULL) or its owned slice.
static void *grads_span(Zero3 *z, int u) {
    const Zero3Unit *U = &z->units[u];
    if (grads_sharded(z, u)) return at(z->grads_shard, U->grads_offset, z->cfg.grad_type);
    size_t begin = optimizer_sharded(z, u) ? zero3_owned_begin(z, u) : 0;
    return at(z->grads_full, U->grads_offset + begin, z->cfg.grad_type);
}

const void *zero3_owned_grads(const Zero3 *z, int u) {
    Zero3 *zz = (Zero3 *)z;
    return at(grads_span(zz, u), owned_in_span(z, u), z->cfg.grad_type);
}

// ------------------------------------------------------------------------------------------------
// Accounting under the ring cost model: an all-gather or reduce-scatter of a full buffer of F bytes
// sends (N-1)/N * F from each rank; an all-reduce sends 2 (N-1)/N * F.

static double ring_fraction(const Zero3 *z) { return (double)(z->world - 1) / (double)z->world; }

static void ledger_add(Zero3 *z, Zero3Collective c, double bytes) {
    z->stats.ledger.row[c].count += 1.0;
    z->stats.ledger.row[c].bytes += bytes;
}
static double count_gather(Zero3 *z, size_t full_bytes, Zero3Collective kind) {
    double b = ring_fraction(z) * (double)full_bytes;
    z->stats.comm_bytes += b; z->stats.comm_gather_bytes += b; z->stats.gathers++;
    ledger_add(z, kind, b);
    return b;
}
static double count_reduce(Zero3 *z, size_t full_bytes, int all_reduce) {
    double b = (all_reduce ? 2.0 : 1.0) * ring_fraction(z) * (double)full_bytes;
    z->stats.comm_bytes += b; z->stats.comm_reduce_bytes += b; z->stats.reduces++;
    ledger_add(z, all_reduce ? ZERO3_COLL_ALL_REDUCE : ZERO3_COLL_REDUCE_SCATTER, b);
    return b;
}
static double count_scalar(Zero3 *z) {   // over every rank (under HSDP too)
    double n = (double)z->be->world, b = 2.0 * (n - 1.0) / n * sizeof(double);
    z->stats.comm_bytes += b; z->stats.comm_scalar_bytes += b;
    ledger_add(z, ZERO3_COLL_NORM, b);
    return b;
}

// ------------------------------------------------------------------------------------------------
// The timeline: with a backend that takes stamps, the engine writes down when each unit computes,
// when each collective moves, and when the compute side waits for one (the exposed communication).
// A unit's compute span runs from the end of its pre_forward / pre_backward to the next engine call.

static int timed(const Zero3 *z) { return z->be->stamp != NULL; }

static Zero3Event *event_add(Zero3 *z, Zero3EventType type, int unit, Zero3Collective coll) {
    if (z->nevents == z->events_cap) {
        z->events_cap = z->events_cap ? 2 * z->events_cap : 1024;
        z->events = realloc(z->events, (size_t)z->events_cap * sizeof(Zero3Event));
        if (!z->events) zero3_die("out of host memory");
    }
    Zero3Event *e = &z->events[z->nevents++];
    memset(e, 0, sizeof(*e));
    e->type = type; e->unit = unit; e->coll = coll; e->micro = z->micro;
    e->stamp_begin = e->stamp_end = -1;
    return e;
}

static void span_open(Zero3 *z, Zero3EventType type, int unit) {
    if (!timed(z)) return;
    Zero3Event *e = event_add(z, type, unit, ZERO3_COLL_KINDS);
    e->stamp_begin = z->be->stamp(z->be->ctx);
    z->open_span = z->nevents - 1;
}
// Every public entry point closes the compute span that is open: the caller's compute ended there.
static void span_close(Zero3 *z) {
    if (z->open_span < 0) return;
    z->events[z->open_span].stamp_end = z->be->stamp(z->be->ctx);
    z->open_span = -1;
}

// The communication side of the collective just started: its transfer, with its bytes.
static void note_collective(Zero3 *z, int unit, Zero3Collective coll, double bytes) {
    if (!timed(z)) return;
    Zero3Event *e = event_add(z, ZERO3_EV_COLLECTIVE, unit, coll);
    e->bytes = bytes;
    z->be->comm_stamps(z->be->ctx, &e->stamp_begin, &e->stamp_end);
}

// be->wait, timed: what the compute side waits here is exposed communication.
static void timed_wait(Zero3 *z, void *handle, int unit, Zero3Collective coll) {
    if (!timed(z)) { z->be->wait(z->be->ctx, handle); return; }
    Zero3Event *e = event_add(z, ZERO3_EV_WAIT, unit, coll);
    int index = z->nevents - 1;
    e->stamp_begin = z->be->stamp(z->be->ctx);
    z->be->wait(z->be->ctx, handle);
    z->events[index].stamp_end = z->be->stamp(z->be->ctx);
}

const Zero3Event *zero3_timeline_read(Zero3 *z, int *n) {
    *n = 0;
    if (!timed(z)) return NULL;
    span_close(z);
    int nstamps = 0;
    for (int i = 0; i < z->nevents; i++) {
        if (z->events[i].stamp_begin + 1 > nstamps) nstamps = z->events[i].stamp_begin + 1;
        if (z->events[i].stamp_end + 1 > nstamps) nstamps = z->events[i].stamp_end + 1;
    }
    if (nstamps > z->stamp_cap) {
        z->stamp_cap = nstamps;
        z->stamp_seconds = realloc(z->stamp_seconds, (size_t)nstamps * sizeof(double));
        if (!z->stamp_seconds) zero3_die("out of host memory");
    }
    z->be->stamps_read(z->be->ctx, z->stamp_seconds, nstamps);
    z->stats.exposed_s = 0.0;
    for (int u = 0; u < z->nunits; u++) z->unit_exposed_s[u] = 0.0;
    for (int i = 0; i < z->nevents; i++) {
        Zero3Event *e = &z->events[i];
        e->t_begin = e->stamp_begin >= 0 ? z->stamp_seconds[e->stamp_begin] : 0.0;
        e->t_end = e->stamp_end >= 0 ? z->stamp_seconds[e->stamp_end] : e->t_begin;
        if (e->type != ZERO3_EV_WAIT) continue;
        double d = e->t_end > e->t_begin ? e->t_end - e->t_begin : 0.0;
        z->stats.exposed_s += d;
        if (e->unit >= 0) z->unit_exposed_s[e->unit] += d;
    }
    *n = z->nevents;
    return z->events;
}

// ------------------------------------------------------------------------------------------------
// The transient pool: gathered units and full-size gradient buffers. Like PyTorch's caching
// allocator, a released buffer is kept and handed to the next request it fits (best fit), so after
// the first step nothing is allocated. `transient_bytes` counts what the holders asked for, which
// is what ZeRO-3 needs live; `pool_bytes` is what the process really holds.

static void *pool_acquire(Zero3 *z, size_t bytes) {
    int best = -1;
    for (int i = 0; i < z->pool_count; i++) {
        Zero3PoolEntry *e = &z->pool[i];
        if (e->used == 0 && e->capacity >= bytes && (best < 0 || e->capacity < z->pool[best].capacity))
            best = i;
    }
    if (best < 0) {
        if (z->pool_count == ZERO3_MAX_POOL) zero3_die("transient pool exhausted");
        best = z->pool_count++;
        z->pool[best].ptr = z->be->alloc(z->be->ctx, bytes);
        z->pool[best].capacity = bytes;
        z->pool_bytes += bytes;
    }
    z->pool[best].used = bytes;
    z->stats.transient_bytes += bytes;
    if (z->stats.transient_bytes > z->stats.transient_peak)
        z->stats.transient_peak = z->stats.transient_bytes;
    return z->pool[best].ptr;
}

static void pool_release(Zero3 *z, void *ptr) {
    for (int i = 0; i < z->pool_count; i++) {
        if (z->pool[i].ptr == ptr && z->pool[i].used) {
            z->stats.transient_bytes -= z->pool[i].used;
            z->pool[i].used = 0;
            return;
        }
    }
    zero3_die("pool_release of a buffer not in use");
}

// ------------------------------------------------------------------------------------------------
// Parameters

void zero3_publish_params(Zero3 *z) {
    const Zero3Backend *be = z->be;
    for (int u = 0; u < z->nunits; u++) {
        Zero3Unit *U = &z->units[u];
        if (!optimizer_sharded(z, u)) {
            // DDP keeps the full master on every rank: gather the fp32 slices, then cast everything
            float *master_full = master_span(z, u);
            be->wait(be->ctx, be->all_gather_start(be->ctx, master_full + zero3_owned_begin(z, u),
                                                   master_full, U->shard, ZERO3_F32));
            if (!z->master_is_params)
                be->cast_from_f32(be->ctx, resident_params(z, u), z->cfg.param_type, master_full, U->padded);
            continue;
        }
        if (!z->master_is_params)
            be->cast_from_f32(be->ctx, owned_params(z, u), z->cfg.param_type, master_span(z, u), U->shard);
        if (!params_sharded(z, u)) {
            void *full = resident_params(z, u);
            be->wait(be->ctx, be->all_gather_start(be->ctx, owned_params(z, u), full, U->shard,
                                                   z->cfg.param_type));
        }
    }
}

// ------------------------------------------------------------------------------------------------
// The prefetch schedule, recorded. The first pass of each kind (training, forward only) writes
// down the order of its gathers; later passes of that kind follow the recording and gather ahead
// along it. A pass that departs from the recording gets no more prefetch, and the next pass of its
// kind records afresh.

static void schedule_close_recording(Zero3 *z) {
    if (z->recording) z->schedule[z->pass].recorded = 1;
    z->recording = 0;
}

static void schedule_start(Zero3 *z, Zero3Pass pass) {
    schedule_close_recording(z);
    z->pass = pass;
    z->schedule_pos = 0;
    if (!z->schedule[pass].recorded) {
        z->schedule[pass].len = 0;
        z->recording = 1;
    }
}

// Notes that unit u is being gathered: writes it down, or checks it against the recording.
static void schedule_note_gather(Zero3 *z, int u) {
    Zero3Schedule *s = &z->schedule[z->pass];
    if (z->recording) {
        if (s->len < 3 * ZERO3_MAX_UNITS) { s->backward[s->len] = (unsigned char)z->in_backward; s->order[s->len++] = u; }
        else z->recording = 0;   // a pass this long is not recorded: it runs without prefetch
        return;
    }
    if (!s->recorded) return;
    if (z->schedule_pos < s->len && s->order[z->schedule_pos] == u) { z->schedule_pos++; return; }
    s->recorded = 0;   // a departure: no prefetch for the rest of this pass, re-record the next
}

// ------------------------------------------------------------------------------------------------
// The step

void zero3_step_begin(Zero3 *z) {
    memset(&z->stats, 0, sizeof(z->stats));
    z->grads_complete = 0;
    // a fresh timeline: the stamps of whatever ran since the last step are forgotten
    span_close(z);
    z->nevents = 0;
    if (timed(z)) z->be->stamps_read(z->be->ctx, NULL, 0);
    // gradients accumulate over the micro-steps of one step: start them at zero
    const Zero3Backend *be = z->be;
    size_t gbytes = zero3_dtype_size(z->cfg.grad_type);
    if (z->grads_full) be->zero(be->ctx, z->grads_full, z->grads_full_numel * gbytes);
    if (z->grads_shard) be->zero(be->ctx, z->grads_shard, z->grads_shard_numel * gbytes);
    for (int i = 0; i < z->pool_count; i++)   // buffers still held across steps (none expected)
        z->stats.transient_bytes += z->pool[i].used;
    z->stats.transient_peak = z->stats.transient_bytes;
}

// GATHERED -> SHARDED: the full unit's memory returns to the pool.
static void free_gathered(Zero3 *z, Zero3Unit *U) {
    if (!solo(z)) pool_release(z, U->params_gathered);   // one rank: the shard itself, not a pool buffer
    U->params_gathered = NULL;
    U->param_state = ZERO3_PARAMS_SHARDED;
    U->kept = 0;
}

// A unit gathered ahead of use that no pass then asked for (only after a departure from the
// schedule): its buffer goes back to the pool, so stale params can never be used after an update.
static void drop_unused_prefetches(Zero3 *z) {
    for (int u = 0; u < z->nunits; u++) {
        Zero3Unit *U = &z->units[u];
        if (U->holders || U->kept || (U->param_state != ZERO3_PARAMS_GATHERING && U->param_state != ZERO3_PARAMS_GATHERED))
            continue;
        if (U->gather_handle) timed_wait(z, U->gather_handle, u, ZERO3_COLL_FWD_GATHER);
        U->gather_handle = NULL;
        free_gathered(z, U);
    }
}

void zero3_micro_begin(Zero3 *z, int micro, int micro_steps, Zero3Pass pass) {
    // the previous micro-step's last reductions still read their gradient buffers; the units
    // start a new accumulation now, so let those finish first
    span_close(z);
    zero3_finish_reductions(z);
    drop_unused_prefetches(z);
    for (int u = 0; u < z->nunits; u++) z->units[u].backward_done = 0;
    z->in_backward = 0;
    z->micro = micro;
    z->micro_steps = micro_steps;
    schedule_start(z, pass);
}

// SHARDED -> GATHERING: the all-gather of unit u into a pool buffer starts (for the forward or the
// backward: the ledger's kind). On one rank the shard is the unit: SHARDED -> GATHERED in place.
static void gather_start(Zero3 *z, int u, int backward) {
    Zero3Unit *U = &z->units[u];
    const Zero3Backend *be = z->be;
    if (solo(z)) {
        U->params_gathered = owned_params(z, u);
        U->param_state = ZERO3_PARAMS_GATHERED;
        return;
    }
    size_t full_bytes = U->padded * zero3_dtype_size(z->cfg.param_type);
    Zero3Collective kind = backward ? ZERO3_COLL_BWD_GATHER : ZERO3_COLL_FWD_GATHER;
    U->params_gathered = pool_acquire(z, full_bytes);
    U->gather_handle = be->all_gather_start(be->ctx, owned_params(z, u), U->params_gathered,
                                            U->shard, z->cfg.param_type);
    U->param_state = ZERO3_PARAMS_GATHERING;
    note_collective(z, u, kind, count_gather(z, full_bytes, kind));
}

// Starts the all-gathers of the next prefetch_depth units of the recorded schedule that are still
// SHARDED. Bounding the depth bounds memory (FSDP's limit_all_gathers, DeepSpeed's
// stage3_max_live_parameters).
static void prefetch(Zero3 *z) {
    const Zero3Schedule *s = &z->schedule[z->pass];
    if (z->recording || !s->recorded) return;
    for (int k = 0; k < z->cfg.prefetch_depth; k++) {
        int pos = z->schedule_pos + k;
        if (pos >= s->len) break;
        if (z->units[s->order[pos]].param_state == ZERO3_PARAMS_SHARDED)
            gather_start(z, s->order[pos], s->backward[pos]);
    }
}

void *zero3_gather(Zero3 *z, int u) {
    Zero3Unit *U = &z->units[u];
    span_close(z);
    if (U->param_state == ZERO3_PARAMS_RESIDENT)   // params FULL: nothing to gather
        return resident_params(z, u);
    schedule_note_gather(z, u);
    if (U->param_state == ZERO3_PARAMS_SHARDED) gather_start(z, u, z->in_backward);   // not prefetched: now
    if (U->param_state == ZERO3_PARAMS_GATHERING) {                   // GATHERING -> GATHERED
        timed_wait(z, U->gather_handle, u, z->in_backward ? ZERO3_COLL_BWD_GATHER : ZERO3_COLL_FWD_GATHER);
        U->gather_handle = NULL;
        U->param_state = ZERO3_PARAMS_GATHERED;
    }
    U->holders++;
    prefetch(z);   // while the caller computes on u, the next units arrive
    return U->params_gathered;
}


// Once the last holder lets go the unit is freed, unless it is kept for its backward (no reshard
// after forward) and its gradients have not been handed over yet.
void zero3_release(Zero3 *z, int u) {
    Zero3Unit *U = &z->units[u];
    span_close(z);
    if (U->param_state == ZERO3_PARAMS_RESIDENT) return;
    if (U->holders <= 0 || U->param_state != ZERO3_PARAMS_GATHERED)
        zero3_die("zero3_release of a unit that is not gathered");
    if (--U->holders == 0 && !(U->kept && !U->backward_done)) free_gathered(z, U);
}

// IDLE -> ACCUMULATING: the full-size buffer this micro-step's gradients of unit u are added into.
// Grads FULL: the resident buffer (it accumulates over micro-steps); SHARDED: a fresh zeroed one,
// except on one rank, where the shard is the whole unit and accumulates in place, as grads FULL do.
static void *grads_open(Zero3 *z, int u) {
    Zero3Unit *U = &z->units[u];
    if (U->grad_state == ZERO3_GRADS_REDUCING) zero3_die("zero3_grads of a unit whose reduction is in flight");
    if (U->grad_state == ZERO3_GRADS_IDLE) {
        if (grads_sharded(z, u) && solo(z)) {
            U->grads_buffer = grads_span(z, u);
        } else if (grads_sharded(z, u)) {
            size_t bytes = U->padded * zero3_dtype_size(z->cfg.grad_type);
            U->grads_buffer = pool_acquire(z, bytes);
            z->be->zero(z->be->ctx, U->grads_buffer, bytes);
        } else {
            U->grads_buffer = at(z->grads_full, U->grads_offset, z->cfg.grad_type);
        }
        U->grad_state = ZERO3_GRADS_ACCUMULATING;
    }
    return U->grads_buffer;
}

void *zero3_grads(Zero3 *z, int u) {
    span_close(z);
    void *g = grads_open(z, u);
    z->in_backward = 1;
    span_open(z, ZERO3_EV_BACKWARD, u);   // the caller computes gradients of u now
    return g;
}

// REDUCING -> IDLE for the oldest reduction in flight; a pool gradient buffer returns to the pool.
static void retire_oldest_reduction(Zero3 *z) {
    timed_wait(z, z->inflight_handle[0], z->inflight_unit[0],
               optimizer_sharded(z, z->inflight_unit[0]) ? ZERO3_COLL_REDUCE_SCATTER : ZERO3_COLL_ALL_REDUCE);
    Zero3Unit *U = &z->units[z->inflight_unit[0]];
    if (grads_sharded(z, z->inflight_unit[0])) pool_release(z, U->grads_buffer);
    U->grads_buffer = NULL;
    U->grad_state = ZERO3_GRADS_IDLE;
    z->inflight_count--;
    memmove(z->inflight_handle, z->inflight_handle + 1, z->inflight_count * sizeof(void *));
    memmove(z->inflight_unit, z->inflight_unit + 1, z->inflight_count * sizeof(int));
}

// ACCUMULATING -> REDUCING: hands unit u's gradients of this micro-step to the collective the layout
// asks for. Grads FULL reduce once per step (the last micro-step), all-reduce when the optimizer is
// FULL (DDP), reduce-scatter into the owned slice otherwise; grads SHARDED reduce-scatter every
// micro-step into the shard, since the full buffer is not kept.
void zero3_reduce_grads(Zero3 *z, int u) {
    Zero3Unit *U = &z->units[u];
    const Zero3Backend *be = z->be;
    Zero3DType gt = z->cfg.grad_type;
    size_t full_bytes = U->padded * zero3_dtype_size(gt);
    span_close(z);
    if (U->grad_state != ZERO3_GRADS_ACCUMULATING) zero3_die("zero3_reduce_grads before zero3_grads");
    void *handle = NULL;
    if (solo(z)) {   // one rank: the gradients are already where the optimizer reads them
        U->grads_buffer = NULL;
        U->grad_state = ZERO3_GRADS_IDLE;
        U->backward_done = 1;
        if (U->kept && U->holders == 0) free_gathered(z, U);
        return;
    }
    if (!grads_sharded(z, u)) {
        // full gradients stay resident: accumulate locally, communicate once per step
        if (z->micro != z->micro_steps - 1) {
            U->grads_buffer = NULL;
            U->grad_state = ZERO3_GRADS_IDLE;
            U->backward_done = 1;
            return;
        }
        if (!optimizer_sharded(z, u)) {
            handle = be->all_reduce_start(be->ctx, U->grads_buffer, U->padded, gt);
            note_collective(z, u, ZERO3_COLL_ALL_REDUCE, count_reduce(z, full_bytes, 1));
        } else {
            handle = be->reduce_scatter_start(be->ctx, U->grads_buffer, grads_span(z, u), U->shard, gt);
            note_collective(z, u, ZERO3_COLL_REDUCE_SCATTER, count_reduce(z, full_bytes, 0));
        }
    } else {
        // Accumulation without a second shard buffer: each rank adds what its shard holds so far
        // to its own slice of this micro-step's gradients. The reduce-scatter sums that slice over
        // ranks, and only the owner added anything to it, so the result is old shard + new sum.
        if (z->micro > 0)
            be->add(be->ctx, at(U->grads_buffer, zero3_owned_begin(z, u), gt), grads_span(z, u),
                    U->shard, gt);
        handle = be->reduce_scatter_start(be->ctx, U->grads_buffer, grads_span(z, u), U->shard, gt);
        note_collective(z, u, ZERO3_COLL_REDUCE_SCATTER, count_reduce(z, full_bytes, 0));
    }
    U->grad_state = ZERO3_GRADS_REDUCING;
    U->backward_done = 1;
    if (U->kept && U->holders == 0) free_gathered(z, U);   // kept for a backward that needed no params
    // Keep a few reductions in flight so they overlap the backward of the next units.
    if (z->inflight_count == ZERO3_MAX_INFLIGHT) retire_oldest_reduction(z);
    z->inflight_handle[z->inflight_count] = handle;
    z->inflight_unit[z->inflight_count] = u;
    z->inflight_count++;
    // sharded grads free the full buffer as soon as the reduce-scatter is done with it: bound the
    // number of live gradient buffers to two (this one and the one being computed next)
    if (grads_sharded(z, u))
        while (z->inflight_count > 1) retire_oldest_reduction(z);
}

void zero3_finish_reductions(Zero3 *z) {
    while (z->inflight_count > 0) retire_oldest_reduction(z);
}

// ---- the phase verbs: one line before the compute, one after --------------------------------------

void *zero3_pre_forward(Zero3 *z, int u) {
    span_close(z);
    z->in_backward = 0;
    void *p = zero3_gather(z, u);
    span_open(z, ZERO3_EV_FORWARD, u);
    return p;
}

// FSDP's reshard_after_forward = False (-ra 0): in a training pass the unit stays gathered from its
// forward to its backward, which then needs no second all-gather.
void zero3_post_forward(Zero3 *z, int u) {
    Zero3Unit *U = &z->units[u];
    if (z->cfg.keep_params_until_backward && z->pass == ZERO3_PASS_TRAIN && U->param_state == ZERO3_PARAMS_GATHERED)
        U->kept = 1;
    zero3_release(z, u);
}

Zero3UnitBuffers zero3_pre_backward(Zero3 *z, int u) {
    Zero3UnitBuffers b;
    span_close(z);
    z->in_backward = 1;
    b.params = zero3_gather(z, u);
    b.grads = grads_open(z, u);
    span_open(z, ZERO3_EV_BACKWARD, u);
    return b;
}

void zero3_post_backward(Zero3 *z, int u) {
    zero3_reduce_grads(z, u);
    zero3_release(z, u);
}

static const char *param_state_name(Zero3ParamState s) {
    switch (s) {
    case ZERO3_PARAMS_RESIDENT: return "resident";
    case ZERO3_PARAMS_SHARDED: return "sharded";
    case ZERO3_PARAMS_GATHERING: return "gathering";
    default: return "gathered";
    }
}

void zero3_check_idle(const Zero3 *z) {
    for (int u = 0; u < z->nunits; u++) {
        const Zero3Unit *U = &z->units[u];
        int params_busy = U->holders || U->kept || U->param_state == ZERO3_PARAMS_GATHERING || U->param_state == ZERO3_PARAMS_GATHERED;
        if (params_busy || U->grad_state != ZERO3_GRADS_IDLE) {
            fprintf(stderr, "zero3: unit %s still busy (params %s, %d holders, grads %s)\n", U->name,
                    param_state_name(U->param_state), U->holders,
                    U->grad_state == ZERO3_GRADS_IDLE ? "idle" : U->grad_state == ZERO3_GRADS_REDUCING ? "reducing" : "accumulating");
            abort();
        }
    }
    if (z->inflight_count) zero3_die("reductions still in flight");
}

// Starts one collective for unit u and returns its handle, or NULL when u needs none.
typedef void *(*UnitCollective)(Zero3 *z, int u);

// Runs start on every unit, at most ZERO3_GATHER_BATCH collectives in flight at once, so a model of
// any depth fits the backends' handle tables, and waits for all of them.
static void for_units_batched(Zero3 *z, UnitCollective start, Zero3Collective kind) {
    void *handles[ZERO3_GATHER_BATCH];
    int units[ZERO3_GATHER_BATCH];
    int n = 0;
    for (int u = 0; u < z->nunits; u++) {
        void *h = start(z, u);
        if (h) { handles[n] = h; units[n++] = u; }
        if (n == ZERO3_GATHER_BATCH || (u == z->nunits - 1 && n > 0)) {
            for (int i = 0; i < n; i++) timed_wait(z, handles[i], units[i], kind);
            n = 0;
        }
    }
}

// HSDP: every replica group reduced its own micro-batches; all-reduce each unit's reduced gradients
// (the optimizer span) across the replicas, so they all hold the gradient of the whole batch. Once
// per step, after the last micro-step (the shard accumulates inside each group before that).
static void *start_replica_all_reduce(Zero3 *z, int u) {
    size_t begin, count;
    optimizer_span(z, u, &begin, &count);
    size_t bytes = count * zero3_dtype_size(z->cfg.grad_type);
    double sent = 2.0 * (double)(z->replicas - 1) / (double)z->replicas * (double)bytes;
    z->stats.comm_bytes += sent;
    z->stats.comm_inter_bytes += sent;
    z->stats.reduces++;
    ledger_add(z, ZERO3_COLL_REPLICA_REDUCE, sent);
    note_collective(z, u, ZERO3_COLL_REPLICA_REDUCE, sent);
    return z->be->replica_all_reduce_start(z->be->ctx, grads_span(z, u), count, z->cfg.grad_type);
}

// The step's gradients, complete: every reduction finished (and, under HSDP, all-reduced across the
// replicas). Idempotent within a step.
static void finish_gradients(Zero3 *z) {
    zero3_finish_reductions(z);
    schedule_close_recording(z);
    if (z->grads_complete) return;
    if (z->replicas > 1) for_units_batched(z, start_replica_all_reduce, ZERO3_COLL_REPLICA_REDUCE);
    z->grads_complete = 1;
}

// This rank's sum of squares over the gradient slices it owns: every parameter of the group counted
// once even where the layout keeps replicated gradients (grads FULL); the padding is zero. Under
// HSDP the replicas hold the same slices, so only replica 0 counts them.
static double owned_sum_squares(Zero3 *z) {
    const Zero3Backend *be = z->be;
    if (z->replica == 0)
        for (int u = 0; u < z->nunits; u++)
            be->sum_squares_add(be->ctx, zero3_owned_grads(z, u), z->units[u].shard, z->cfg.grad_type);
    return be->sum_squares_total(be->ctx);   // the one read-back of the step
}

// Global gradient norm: one all-reduce of one number gives every rank the same norm. A per-rank
// norm would give every rank a different clipping coefficient, and the replicas would drift apart.
double zero3_grad_norm(Zero3 *z) {
    span_close(z);
    finish_gradients(z);
    const Zero3Backend *be = z->be;
    double local = owned_sum_squares(z);
    double bytes = count_scalar(z);
    // a blocking collective: all of it is waited for (on the timeline, a wait from start to end)
    int wait_event = -1;
    if (timed(z)) {
        event_add(z, ZERO3_EV_WAIT, -1, ZERO3_COLL_NORM)->stamp_begin = be->stamp(be->ctx);
        wait_event = z->nevents - 1;
    }
    double total = be->all_reduce_scalar(be->ctx, local);   // one number, summed over every rank
    if (wait_event >= 0) {
        z->events[wait_event].stamp_end = be->stamp(be->ctx);
        note_collective(z, -1, ZERO3_COLL_NORM, bytes);
    }
    return sqrt(total);
}

// The norm of this rank's own slice only: the clipping pitfall, on purpose (-clip local).
double zero3_local_grad_norm(Zero3 *z) {
    span_close(z);
    finish_gradients(z);
    return sqrt(owned_sum_squares(z));
}

// Params FULL with the optimizer SHARDED (stages 1-2): every rank updated its slice; gather them so
// all ranks hold the new full params.
static void *start_updated_params_gather(Zero3 *z, int u) {
    if (params_sharded(z, u) || !optimizer_sharded(z, u) || solo(z)) return NULL;
    const Zero3Unit *U = &z->units[u];
    double b = count_gather(z, U->padded * zero3_dtype_size(z->cfg.param_type), ZERO3_COLL_STEP_GATHER);
    note_collective(z, u, ZERO3_COLL_STEP_GATHER, b);
    return z->be->all_gather_start(z->be->ctx, owned_params(z, u), resident_params(z, u), U->shard, z->cfg.param_type);
}

// The optimizer step's work as segments: the local optimizer span of every unit, cut tensor by
// tensor so that weight decay applies exactly to the matrices even where a shard boundary cuts
// through a tensor; the padding between and after tensors is skipped. Returns their number.
static int build_adam_segments(Zero3 *z, float weight_decay) {
    const size_t gsize = zero3_dtype_size(z->cfg.grad_type), psize = zero3_dtype_size(z->cfg.param_type);
    int nsegs = 0;
    for (int u = 0; u < z->nunits; u++) {
        Zero3Unit *U = &z->units[u];
        size_t span_begin, span_count;
        optimizer_span(z, u, &span_begin, &span_count);
        size_t span_end = span_begin + span_count;
        float *master = master_span(z, u);
        float *m = z->adam_m + optimizer_offset(z, u);
        float *v = z->adam_v + optimizer_offset(z, u);
        char *grads = grads_span(z, u);
        // the working params of the optimizer span (the master itself when params are fp32)
        char *params = z->master_is_params ? (char *)master
                       : optimizer_sharded(z, u) ? (char *)owned_params(z, u)
                                                 : (char *)resident_params(z, u);
        for (int i = 0; i < U->ntensors; i++) {
            const Zero3Tensor *T = &U->tensors[i];
            size_t lo = T->offset > span_begin ? T->offset : span_begin;
            size_t hi = T->offset + T->numel < span_end ? T->offset + T->numel : span_end;
            if (lo >= hi) continue;
            size_t k = lo - span_begin;   // index inside the span
            z->adam_segs[nsegs++] = (Zero3AdamSegment){
                .master = master + k, .m = m + k, .v = v + k, .grad = grads + k * gsize,
                .params = params + k * psize, .n = hi - lo,
                .weight_decay = T->decay ? weight_decay : 0.0f,
            };
        }
    }
    return nsegs;
}

// AdamW on the local optimizer span: every segment in one backend call (one launch on a GPU). No
// communication, except the all-gather of updated params where params are FULL but the optimizer
// SHARDED.
void zero3_optimizer_step(Zero3 *z, float lr, float beta1, float beta2, float eps,
                          float weight_decay, float grad_scale, int t) {
    const Zero3Backend *be = z->be;
    span_close(z);
    finish_gradients(z);
    drop_unused_prefetches(z);
    span_open(z, ZERO3_EV_OPTIMIZER, -1);
    int nsegs = build_adam_segments(z, weight_decay);
    be->adamw(be->ctx, z->adam_segs, nsegs, z->cfg.grad_type, z->cfg.param_type, lr, beta1, beta2, eps,
              grad_scale, t);
    span_close(z);
    for_units_batched(z, start_updated_params_gather, ZERO3_COLL_STEP_GATHER);
    z->comm_bytes_total += z->stats.comm_bytes;
}

size_t zero3_peak_bytes(const Zero3 *z) { return z->resident_bytes + z->stats.transient_peak; }

int zero3_persistent_units(const Zero3 *z) {
    int n = 0;
    for (int u = 0; u < z->nunits; u++) n += z->units[u].persistent;
    return n;
}

static double placed(Zero3Placement where, double bytes, double world);
double zero3_theory_run_state_bytes(const Zero3 *z) {
    double p = (double)zero3_dtype_size(z->cfg.param_type), g = (double)zero3_dtype_size(z->cfg.grad_type);
    double k = 8.0 + (z->master_is_params ? 0.0 : 4.0), n = (double)z->world, total = 0.0;
    for (int u = 0; u < z->nunits; u++) {
        const Zero3Unit *U = &z->units[u];
        double psi = (double)U->numel;
        total += placed(U->layout.params, psi * p, n) + placed(U->layout.grads, psi * g, n) + placed(U->layout.optimizer, psi * k, n);
    }
    return total;
}

// ------------------------------------------------------------------------------------------------
// Theory, from the same stage table: bytes of model state per rank for psi parameters on N ranks.
// Working params (p bytes), gradients (g bytes), and the optimizer state K: m and v (8 bytes) plus
// an fp32 master copy (4 bytes) when the working params are not fp32; each part is whole where the
// layout keeps it FULL and 1/N where SHARDED.
static double placed(Zero3Placement where, double bytes, double world) {
    return where == ZERO3_SHARDED ? bytes / world : bytes;
}

double zero3_theory_state_bytes(int stage, double psi, int world, Zero3DType param_type,
                                Zero3DType grad_type) {
    const Zero3StageLayout *L = &ZERO3_STAGE_LAYOUT[stage];
    double p = (double)zero3_dtype_size(param_type), g = (double)zero3_dtype_size(grad_type);
    double k = 8.0 + (param_type == ZERO3_F32 ? 0.0 : 4.0);
    double n = (double)world;
    return placed(L->params, psi * p, n) + placed(L->grads, psi * g, n) + placed(L->optimizer, psi * k, n);
}

// Ring-model bytes sent per rank per step at A = 1: the collective ledger's data rows for a bare
// parameter count (the norm's one number left out): DDP 2 units, stages 1-2 2 units, stage 3 3.
double zero3_theory_comm_bytes(int stage, double psi, int world, Zero3DType param_type,
                               Zero3DType grad_type) {
    Zero3Ledger l;
    zero3_theory_ledger_params(stage, psi, world, 1, param_type, grad_type, &l);
    return zero3_ledger_bytes(&l) - l.row[ZERO3_COLL_NORM].bytes;
}

// The collective ledger in theory (zero3.h): what zero3_reduce_grads, zero3_gather and
// gather_updated_params will count, from the same stage table, for A micro-steps. Per unit of P
// elements (padded), f = (N-1)/N, p and g the bytes of a param and a gradient:
//   fwd/bwd gathers  params SHARDED: A x gathers per pass x f P p
//   reduce-scatter   grads SHARDED: A x f P g (every micro-step); grads FULL, optimizer SHARDED: f P g
//   all-reduce       optimizer FULL (DDP): 2 f P g, once per step
//   step gather      params FULL, optimizer SHARDED: f P p, once per step
//   norm             one double all-reduced: 2 f 8
//   replica reduce   HSDP: each unit's optimizer span all-reduced across R replica groups, 2 (R-1)/R x span g
// Each unit has its own layout (a persistent unit DDP's row). The norm's all-reduce spans every rank.
static void theory_ledger(const Zero3StageLayout *layouts, int world, int replicas, int A, Zero3DType pt, Zero3DType gt,
                          int nunits, const double *padded, const int *fwd, const int *bwd, Zero3Ledger *out) {
    memset(out, 0, sizeof(*out));
    double f = (double)(world - 1) / (double)world, p = (double)zero3_dtype_size(pt), g = (double)zero3_dtype_size(gt);
    double ranks = (double)world * replicas, R = (double)replicas;
    out->row[ZERO3_COLL_NORM].count = 1.0;
    out->row[ZERO3_COLL_NORM].bytes = 2.0 * (ranks - 1.0) / ranks * sizeof(double);
    for (int u = 0; u < nunits; u++) {
        const Zero3StageLayout *L = &layouts[u];
        double P = padded[u];
        Zero3LedgerRow *r;
        if (replicas > 1) {
            double span = L->optimizer == ZERO3_SHARDED ? P / world : P;
            r = &out->row[ZERO3_COLL_REPLICA_REDUCE]; r->count += 1; r->bytes += 2.0 * (R - 1.0) / R * span * g;
        }
        if (world == 1) continue;   // one rank per group: no collective inside it
        if (L->params == ZERO3_SHARDED) {
            r = &out->row[ZERO3_COLL_FWD_GATHER]; r->count += A * fwd[u]; r->bytes += A * fwd[u] * f * P * p;
            r = &out->row[ZERO3_COLL_BWD_GATHER]; r->count += A * bwd[u]; r->bytes += A * bwd[u] * f * P * p;
        } else if (L->optimizer == ZERO3_SHARDED) {
            r = &out->row[ZERO3_COLL_STEP_GATHER]; r->count += 1; r->bytes += f * P * p;
        }
        if (L->optimizer == ZERO3_FULL) {
            r = &out->row[ZERO3_COLL_ALL_REDUCE]; r->count += 1; r->bytes += 2.0 * f * P * g;
        } else {
            double times = L->grads == ZERO3_SHARDED ? A : 1;
            r = &out->row[ZERO3_COLL_REDUCE_SCATTER]; r->count += times; r->bytes += times * f * P * g;
        }
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
    theory_ledger(layouts, z->world, stage < 0 ? z->replicas : 1, micro_steps, param_type, grad_type, z->nunits, padded, fwd_gathers,
                  bwd_gathers, out);
    free(padded);
    free(layouts);
}

void zero3_theory_ledger_params(int stage, double nparams, int world, int micro_steps,
                                Zero3DType param_type, Zero3DType grad_type, Zero3Ledger *out) {
    const int once = 1;
    theory_ledger(&ZERO3_STAGE_LAYOUT[stage], world, 1, micro_steps, param_type, grad_type, 1, &nparams, &once, &once, out);
}

double zero3_ledger_bytes(const Zero3Ledger *l) {
    double total = 0.0;
    for (int k = 0; k < ZERO3_COLL_KINDS; k++) total += l->row[k].bytes;
    return total;
}
