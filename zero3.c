// zero3.c: the ZeRO engine. zero3.h draws the picture; this file is the mechanism, in the order a
// step runs it:
//   1. the step as the trainer drives it: the phase verbs (pre/post forward/backward), the norm and
//      the optimizer step, each a few calls of the parts below;
//   2. a unit's two state machines (params, gradients): their tables of moves, their one setter
//      each, and -ra 0's KEPT, where the two couple;
//   3. the gather and the release the verbs call, with the prefetch;
//   4. the gradients: their buffer, their reduction, the reductions in flight;
//   5. the step's end: the gradients completed, the norm's sum, AdamW's segments, the post-step gathers;
//   6. the checks; 7. the policy (which gather and which reduction); 8. the layout, where each
//      unit's pieces live, publishing the params; 9. the transient pool; 10. the prefetch schedule;
//   11. one rank, where a shard is the whole unit; 12. ZeRO++. The exact ZeRO-3 path reads without
//      the last two: each is one call from the mechanism.
// What the engine measures is not here: each phase reports to the observer handed in
// (z->cfg.observer, zero3.h's Zero3Observer), a compute span at a verb's edges, a collective where
// it is issued (issued()), a wait where it is waited (wait_for()). No MPI, no CUDA: every
// collective, allocation and shard-math loop goes through z->be.
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

void zero3_die(const char *msg) {
    fprintf(stderr, "zero3: internal error: %s\n", msg);
    abort();
}

// One phase reported to the observer, if one is installed: OBSERVE(z, collective, u, kind, bytes)
// calls z->cfg.observer->collective(z, u, kind, bytes). Nothing comes back.
#define OBSERVE(z, hook, ...) \
    do { if ((z)->cfg.observer) (z)->cfg.observer->hook((z), ##__VA_ARGS__); } while (0)

// A collective of unit u just started (its handle): reported, on a buffer of `bytes`, and handed on.
static void *issued(Zero3 *z, void *handle, int u, Zero3Collective kind, size_t bytes) {
    OBSERVE(z, collective, u, kind, bytes);
    return handle;
}

// The placements of unit u, by question: its stage's row of the table, or DDP's row for a unit kept
// replicated by the persistence threshold.
static int params_sharded(const Zero3 *z, int u) { return z->units[u].layout.params == ZERO3_SHARDED; }
static int grads_sharded(const Zero3 *z, int u) { return z->units[u].layout.grads == ZERO3_SHARDED; }
static int optimizer_sharded(const Zero3 *z, int u) { return z->units[u].layout.optimizer == ZERO3_SHARDED; }

// The parts below that the verbs call, in the order they are defined.
static void keep_for_backward(Zero3 *z, Zero3Unit *U);
static void prefetch(Zero3 *z);
static int prefetch_after_compute(const Zero3 *z, Zero3Phase phase);
static void drop_unused_prefetches(Zero3 *z);
static void *grads_open(Zero3 *z, int u);
static void finish_gradients(Zero3 *z);
static double owned_sum_squares(Zero3 *z);
static int build_adam_segments(Zero3 *z, int first, int end, float weight_decay);
static void updated_params_gather(Zero3 *z);
static void update_unit_in_backward(Zero3 *z, int u);
static void schedule_start(Zero3 *z, Zero3Pass pass);
static void schedule_close_recording(Zero3 *z);
static void zeropp_params_changed(Zero3 *z);

// ================================================================================================
// 1. The step, as zero3.h's pseudocode drives it

void zero3_step_begin(Zero3 *z) {
    OBSERVE(z, step_begin);
    z->step.grads_complete = 0;
    z->step.update_in_backward = 0;
    for (int u = 0; u < z->nunits; u++) z->units[u].updated = 0;
    // state on disk: the optimizer step's first units are read under this step's forward and backward
    if (z->offload) zero3_offload_read_ahead(z->offload);
    // gradients accumulate over the micro-steps of one step: start them at zero
    const Zero3Backend *be = z->be;
    size_t gbytes = zero3_dtype_size(z->cfg.grad_type);
    if (z->resident.grads_full) be->zero(be->ctx, z->resident.grads_full, z->resident.grads_full_numel * gbytes);
    if (z->resident.grads_shard) be->zero(be->ctx, z->resident.grads_shard, z->resident.grads_shard_numel * gbytes);
}

void zero3_micro_begin(Zero3 *z, int micro, int micro_steps, Zero3Pass pass) {
    // the previous micro-step's last reductions still read their gradient buffers; the units
    // start a new accumulation now, so let those finish first
    OBSERVE(z, compute_end);
    zero3_finish_reductions(z);
    drop_unused_prefetches(z);
    z->step.micro = micro;
    z->step.micro_steps = micro_steps;
    schedule_start(z, pass);
}

// The step ends here, before its norm and update: the reductions in flight finish (their buffers
// go back to the pool), units gathered ahead return theirs, and the recording of the micro-step
// that ran whole is kept. Nothing reads the partial gradients: zero3_step_begin zeros them.
void zero3_step_abandon(Zero3 *z) {
    OBSERVE(z, compute_end);
    zero3_finish_reductions(z);
    drop_unused_prefetches(z);
    schedule_close_recording(z);
}

// ---- the phase verbs: one line before the compute, one after --------------------------------------
// (Every public entry ends the caller's compute span first: zero3_gather, zero3_release and
// zero3_reduce_grads do, so the verbs built on them need not.)

void *zero3_pre_forward(Zero3 *z, int u) {
    void *p = zero3_gather(z, u, ZERO3_FOR_FORWARD);
    OBSERVE(z, compute_begin, ZERO3_EV_FORWARD, u);
    return p;
}

// Release, or (-ra 0, a training pass) keep the unit gathered for its backward.
void zero3_post_forward(Zero3 *z, int u) {
    keep_for_backward(z, &z->units[u]);
    zero3_release(z, u);
}

Zero3UnitBuffers zero3_pre_backward(Zero3 *z, int u) {
    Zero3UnitBuffers b;
    b.params = zero3_gather(z, u, ZERO3_FOR_BACKWARD);
    b.grads = grads_open(z, u);
    OBSERVE(z, compute_begin, ZERO3_EV_BACKWARD, u);
    return b;
}

// -bp post (FSDP's BACKWARD_POST): the unit's params are freed first, so their buffer can take the
// next gather; the next units' gathers start, ahead of this unit's reduction on the link.
void zero3_post_backward(Zero3 *z, int u) {
    if (prefetch_after_compute(z, ZERO3_FOR_BACKWARD)) {
        zero3_release(z, u);
        prefetch(z);
        zero3_reduce_grads(z, u);
        return;
    }
    zero3_reduce_grads(z, u);
    zero3_release(z, u);
}

// ---- the norm and the optimizer step ------------------------------------------------------------

// Global gradient norm: one all-reduce of one number gives every rank the same norm. A per-rank
// norm would give every rank a different clipping coefficient, and the replicas would drift apart.
double zero3_grad_norm(Zero3 *z) {
    OBSERVE(z, compute_end);
    finish_gradients(z);
    double local = owned_sum_squares(z);
    OBSERVE(z, norm_begin);
    double total = z->be->all_reduce_scalar(z->be->ctx, local);   // one number, summed over every rank
    OBSERVE(z, norm_end);
    return sqrt(total);
}

// The norm of this rank's own slice only: the clipping pitfall, on purpose (-clip local).
double zero3_local_grad_norm(Zero3 *z) {
    OBSERVE(z, compute_end);
    finish_gradients(z);
    return sqrt(owned_sum_squares(z));
}

// The stores on disk, in the order the step streams them: the optimizer state's, the params'.
static int stores_on_disk(Zero3 *z, Zero3Offload **stores) {
    int n = 0;
    if (z->offload) stores[n++] = z->offload;
    if (z->params_offload) stores[n++] = z->params_offload;
    return n;
}

// AdamW on the local optimizer span: every segment in one backend call (one launch on a GPU). No
// communication, except the all-gather of updated params where params are FULL but the optimizer
// SHARDED.
void zero3_optimizer_step(Zero3 *z, float lr, float beta1, float beta2, float eps,
                          float weight_decay, float grad_scale, int t) {
    const Zero3Backend *be = z->be;
    OBSERVE(z, compute_end);
    finish_gradients(z);
    drop_unused_prefetches(z);
    if (z->step.update_in_backward) {
        // AdamW ran unit by unit inside the backward (zero3_update_in_backward): every unit's, once
        for (int u = 0; u < z->nunits; u++)
            if (!z->units[u].updated) zero3_die("zero3_optimizer_step: a unit's AdamW did not run inside the backward");
        z->step.update_in_backward = 0;
        zeropp_params_changed(z);
        updated_params_gather(z);
        OBSERVE(z, step_end);
        if (z->step.check_steps) zero3_check_step_end(z);
        return;
    }
    OBSERVE(z, compute_begin, ZERO3_EV_OPTIMIZER, -1);
    Zero3Offload *disk[2];
    const int ndisk = stores_on_disk(z, disk);
    if (ndisk) {
        // state on disk: unit by unit through the streams (zero3_offload.h), each store's beside the
        // other's, the same AdamW on the same segments, each unit's pointing into its slots
        for (int i = 0; i < ndisk; i++) zero3_offload_stream_begin(disk[i]);
        for (int u = 0; u < z->nunits; u++) {
            for (int i = 0; i < ndisk; i++) zero3_offload_take(disk[i], u);
            int nsegs = build_adam_segments(z, u, u + 1, weight_decay);
            be->adamw(be->ctx, z->adam.segs, nsegs, z->cfg.grad_type, z->cfg.param_type, lr, beta1, beta2, eps,
                      grad_scale, t);
            for (int i = 0; i < ndisk; i++) zero3_offload_give(disk[i], u);
        }
        // nothing waited for: the last units' write-backs run on under the next forward
        z->adam.count = 0;   // no segment outlives its slot
    } else {
        // in memory, or in host memory (-oo host: the backend's host_adamw brings the gradients to
        // the state and the params back; the clip coefficient, from the norm above, is its grad_scale)
        int nsegs = z->adam.count = build_adam_segments(z, 0, z->nunits, weight_decay);
        void (*adamw)(void *, const Zero3AdamSegment *, int, Zero3DType, Zero3DType, float, float, float, float, float,
                      int) = zero3_optimizer_medium(z) == ZERO3_IN_HOST ? be->host_adamw : be->adamw;
        adamw(be->ctx, z->adam.segs, nsegs, z->cfg.grad_type, z->cfg.param_type, lr, beta1, beta2, eps, grad_scale, t);
    }
    OBSERVE(z, compute_end);
    zeropp_params_changed(z);
    updated_params_gather(z);
    OBSERVE(z, step_end);
    if (z->step.check_steps) zero3_check_step_end(z);
}

// -ua 1: this step's AdamW moves into the backward. Exact only where a unit's update needs nothing
// but its own gradients: no clip coefficient (it needs the norm of every unit's), the state in
// memory (on disk it streams in unit order, in host memory the backend's host_adamw takes the
// step's gradients at once), and no HSDP (a unit's gradients are final only after the step's
// all-reduce across the replicas). Each update runs where the unit's last micro-step's reduction
// completes (update_unit_in_backward), with the segments zero3_optimizer_step would give it, so
// the parameters are bitwise those of the update after the backward.
void zero3_update_in_backward(Zero3 *z, float lr, float beta1, float beta2, float eps, float weight_decay, int t) {
    if (zero3_optimizer_medium(z) != ZERO3_IN_MEMORY || z->params_offload)
        zero3_die("zero3_update_in_backward with the optimizer state or the params outside memory");
    if (z->replicas > 1) zero3_die("zero3_update_in_backward under HSDP (the replicas all-reduce at the step's end)");
    z->step.update_in_backward = 1;
    z->step.adamw = (Zero3AdamWArgs){lr, beta1, beta2, eps, weight_decay, t};
}

// Unit u's gradients are final (its last micro-step's reduction done): under -ua 1, its AdamW now.
static void update_unit_in_backward(Zero3 *z, int u) {
    Zero3Unit *U = &z->units[u];
    if (!z->step.update_in_backward) return;
    if (z->step.micro != z->step.micro_steps - 1) return;   // not final: a later micro-step adds to them
    if (U->updated) zero3_die("a unit's gradients final twice in one step");
    const Zero3Backend *be = z->be;
    const Zero3AdamWArgs *h = &z->step.adamw;
    OBSERVE(z, compute_begin, ZERO3_EV_OPTIMIZER, u);
    int nsegs = build_adam_segments(z, u, u + 1, h->weight_decay);
    be->adamw(be->ctx, z->adam.segs, nsegs, z->cfg.grad_type, z->cfg.param_type, h->lr, h->beta1, h->beta2, h->eps,
              1.0f, h->t);
    OBSERVE(z, compute_end);
    z->adam.count = 0;   // the segments are rebuilt for each unit
    U->updated = 1;
}

// ================================================================================================
// 2. A unit's two state machines (zero3.h's tables): the moves each state may make, the one setter
// of each machine, and the two questions the verbs ask of the params. In check mode a move the
// table does not list stops the setter.

static const unsigned char PARAM_MOVES[ZERO3_PARAMS_STATES][ZERO3_PARAMS_STATES] = {
    //                 RESIDENT SHARDED GATHERING GATHERED KEPT
    [ZERO3_PARAMS_RESIDENT]  = {0, 0, 0, 0, 0},
    [ZERO3_PARAMS_SHARDED]   = {0, 0, 1, 1, 0},
    [ZERO3_PARAMS_GATHERING] = {0, 0, 0, 1, 0},
    [ZERO3_PARAMS_GATHERED]  = {0, 1, 0, 0, 1},
    [ZERO3_PARAMS_KEPT]      = {0, 0, 0, 1, 0},
};
static const char *const PARAM_STATE_NAMES[ZERO3_PARAMS_STATES] = {"RESIDENT", "SHARDED", "GATHERING", "GATHERED", "KEPT"};

static const unsigned char GRAD_MOVES[ZERO3_GRADS_STATES][ZERO3_GRADS_STATES] = {
    //                      IDLE ACCUMULATING REDUCING
    [ZERO3_GRADS_IDLE]         = {0, 1, 0},
    [ZERO3_GRADS_ACCUMULATING] = {1, 0, 1},
    [ZERO3_GRADS_REDUCING]     = {1, 0, 0},
};
static const char *const GRAD_STATE_NAMES[ZERO3_GRADS_STATES] = {"IDLE", "ACCUMULATING", "REDUCING"};

int zero3_params_move_listed(Zero3ParamState from, Zero3ParamState to) { return PARAM_MOVES[from][to]; }
int zero3_grads_move_listed(Zero3GradState from, Zero3GradState to) { return GRAD_MOVES[from][to]; }

static void die_on_move(const Zero3Unit *U, const char *what, const char *from, const char *to) {
    char msg[160];
    snprintf(msg, sizeof msg, "unit %s: %s %s -> %s is not a move of the state table", U->name, what, from, to);
    zero3_die(msg);
}

// Every change of a unit's params state.
static void set_params_state(const Zero3 *z, Zero3Unit *U, Zero3ParamState to) {
    if (z->step.check_steps && !PARAM_MOVES[U->param_state][to])
        die_on_move(U, "params", PARAM_STATE_NAMES[U->param_state], PARAM_STATE_NAMES[to]);
    U->param_state = to;
}

// Every change of a unit's gradients state.
static void set_grads_state(const Zero3 *z, Zero3Unit *U, Zero3GradState to) {
    if (z->step.check_steps && !GRAD_MOVES[U->grad_state][to])
        die_on_move(U, "grads", GRAD_STATE_NAMES[U->grad_state], GRAD_STATE_NAMES[to]);
    U->grad_state = to;
}

// A unit's states at its birth, the only write besides the setters': its params at rest where its
// layout keeps them, its gradients IDLE.
static void states_at_birth(Zero3Unit *U) {
    U->param_state = U->layout.params == ZERO3_SHARDED ? ZERO3_PARAMS_SHARDED : ZERO3_PARAMS_RESIDENT;
    U->grad_state = ZERO3_GRADS_IDLE;
}

// The full unit may go back to the pool: gathered, and no caller holds it (a KEPT unit waits for
// its gradients to be handed over first).
static int may_free(const Zero3Unit *U) { return U->param_state == ZERO3_PARAMS_GATHERED && U->holders == 0; }
// Someone will still read the unit's gathered params: a caller holds them, or its backward is to come.
static int busy(const Zero3Unit *U) { return U->holders > 0 || U->param_state == ZERO3_PARAMS_KEPT; }

static void free_gathered(Zero3 *z, Zero3Unit *U);

// ---- KEPT (-ra 0, FSDP's reshard_after_forward = False): where the two machines couple ----------
// In a training pass a unit stays gathered from its forward to its backward (GATHERED -> KEPT), which
// then needs no second all-gather; once its gradients are handed over (zero3_reduce_grads) it is done
// with its params (KEPT -> GATHERED), and freed if no caller holds them.
static void keep_for_backward(Zero3 *z, Zero3Unit *U) {
    if (!z->cfg.reshard_after_forward && z->schedule.pass == ZERO3_PASS_TRAIN && U->param_state == ZERO3_PARAMS_GATHERED)
        set_params_state(z, U, ZERO3_PARAMS_KEPT);
}

// KEPT -> GATHERED: the gradients were handed over; freed now if no caller holds the unit.
static void release_kept(Zero3 *z, Zero3Unit *U) {
    if (U->param_state != ZERO3_PARAMS_KEPT) return;
    set_params_state(z, U, ZERO3_PARAMS_GATHERED);
    if (may_free(U)) free_gathered(z, U);
}

// ================================================================================================
// 3. Gather and release

static void label_unit(const Zero3 *z, int u);
static void *owned_params(Zero3 *z, int u);
static char *at(void *base, size_t elements, Zero3DType t);
static void *resident_params(Zero3 *z, int u);
static void *pool_acquire(Zero3 *z, size_t bytes);
static void pool_release(Zero3 *z, void *ptr);
static void schedule_note_gather(Zero3 *z, int u, Zero3Phase phase);
static void solo_gather(Zero3 *z, int u);
static int solo_shard_in_place(Zero3 *z, const Zero3Unit *U);
static void *zeropp_gather_start(Zero3 *z, int u);
static void zeropp_gather_finish(Zero3 *z, Zero3Unit *U);

// be->wait for a collective of unit u (-1 none). The compute side stops here: what it waits is the
// exposed communication, on the timeline.
static void wait_for(Zero3 *z, void *handle, int u, Zero3Collective kind) {
    OBSERVE(z, wait_begin, u, kind);
    z->be->wait(z->be->ctx, handle);
    OBSERVE(z, wait_end);
}

// The shard unit u's gather sends: the resident one, or (-op disk) its record read from the file now
// into the store's slot, valid until that slot's next request: every caller copies or quantizes it
// before it returns, so no slot is held while the gather runs.
static const void *gather_source(Zero3 *z, int u) {
    if (z->params_offload && params_sharded(z, u)) return zero3_offload_read(z->params_offload, u);
    return owned_params(z, u);
}

// The input of unit u's all-gather of shards: the resident shard, or (on disk) the record copied into
// this rank's own place in the gathered buffer, which the all-gather then fills in place.
static const void *gather_input(Zero3 *z, int u) {
    const Zero3Unit *U = &z->units[u];
    if (!z->params_offload) return owned_params(z, u);
    void *mine = at(U->params_gathered, zero3_owned_begin(z, u), z->cfg.param_type);
    z->be->copy(z->be->ctx, mine, gather_source(z, u), U->shard * zero3_dtype_size(z->cfg.param_type));
    return mine;
}

// SHARDED -> GATHERING: the gather the policy gives unit u for `phase` starts into a pool buffer:
// shard by shard, or one of ZeRO++'s (quantized, from the node group's secondary shards). On one
// rank the shard is the unit (solo_gather).
static void gather_start(Zero3 *z, int u, Zero3Phase phase) {
    Zero3Unit *U = &z->units[u];
    const Zero3Backend *be = z->be;
    const Zero3UnitFacts facts = zero3_unit_facts(z, u);
    U->gather = zero3_gather_for(&facts, phase, U->secondary_fresh);
    label_unit(z, u);
    if (U->gather.how == ZERO3_GATHER_IN_PLACE) {
        solo_gather(z, u);
        return;
    }
    size_t full_bytes = U->padded * zero3_dtype_size(z->cfg.param_type);
    U->params_gathered = pool_acquire(z, full_bytes);
    if (U->gather.how == ZERO3_GATHER_SHARDS)
        U->gather_handle = issued(z, be->all_gather_start(be->ctx, gather_input(z, u), U->params_gathered, U->shard, z->cfg.param_type),
                                  u, U->gather.kind, full_bytes);
    else
        U->gather_handle = zeropp_gather_start(z, u);
    set_params_state(z, U, ZERO3_PARAMS_GATHERING);
}

// GATHERING -> GATHERED: waits for the gather (and lets ZeRO++ finish its own).
static void gather_finish(Zero3 *z, int u) {
    Zero3Unit *U = &z->units[u];
    if (U->gather_handle) wait_for(z, U->gather_handle, u, U->gather.kind);
    U->gather_handle = NULL;
    zeropp_gather_finish(z, U);
    set_params_state(z, U, ZERO3_PARAMS_GATHERED);
}

void *zero3_gather(Zero3 *z, int u, Zero3Phase phase) {
    Zero3Unit *U = &z->units[u];
    OBSERVE(z, compute_end);
    if (U->param_state == ZERO3_PARAMS_RESIDENT)   // params FULL: nothing to gather
        return resident_params(z, u);
    schedule_note_gather(z, u, phase);
    if (U->param_state == ZERO3_PARAMS_SHARDED) gather_start(z, u, phase);   // not prefetched: now
    if (U->param_state == ZERO3_PARAMS_GATHERING) gather_finish(z, u);
    U->holders++;
    if (!prefetch_after_compute(z, phase)) prefetch(z);   // while the caller computes on u, the next units arrive
    return U->params_gathered;
}

// GATHERED -> SHARDED: the full unit's memory returns to the pool.
static void free_gathered(Zero3 *z, Zero3Unit *U) {
    if (!solo_shard_in_place(z, U)) pool_release(z, U->params_gathered);
    U->params_gathered = NULL;
    set_params_state(z, U, ZERO3_PARAMS_SHARDED);
}

// Once the last holder lets go the unit is freed, unless it is KEPT for its backward (no reshard
// after forward): then its gradients' hand-over frees it.
void zero3_release(Zero3 *z, int u) {
    Zero3Unit *U = &z->units[u];
    OBSERVE(z, compute_end);
    if (U->param_state == ZERO3_PARAMS_RESIDENT) return;
    if (U->holders <= 0 || (U->param_state != ZERO3_PARAMS_GATHERED && U->param_state != ZERO3_PARAMS_KEPT))
        zero3_die("zero3_release of a unit that is not gathered");
    U->holders--;
    if (may_free(U)) free_gathered(z, U);
}

// Starts the all-gathers of the next prefetch_depth units of the recorded schedule that are still
// SHARDED. Bounding the depth bounds memory (FSDP's limit_all_gathers, DeepSpeed's
// stage3_max_live_parameters).
static void prefetch(Zero3 *z) {
    const Zero3PassOrder *s = &z->schedule.pass_order[z->schedule.pass];
    if (s->mode != ZERO3_SCHEDULE_RECORDED) return;
    for (int k = 0; k < z->cfg.prefetch_depth; k++) {
        int pos = z->schedule.pos + k;
        if (pos >= s->len) break;
        if (z->units[s->order[pos]].param_state == ZERO3_PARAMS_SHARDED)
            gather_start(z, s->order[pos], (Zero3Phase)s->backward[pos]);
    }
}

// The prefetch rule (zero3.h): under -bp post a backward gather leaves the prefetch to its unit's
// post_backward, after the unit's gradient compute; every other gather prefetches at once.
int zero3_prefetch_after_compute(Zero3BackwardPrefetch bp, Zero3Phase phase) {
    return phase == ZERO3_FOR_BACKWARD && bp == ZERO3_BACKWARD_POST;
}
static int prefetch_after_compute(const Zero3 *z, Zero3Phase phase) {
    return zero3_prefetch_after_compute(z->cfg.backward_prefetch, phase);
}

// A unit gathered ahead of use that no pass then asked for (only after a departure from the
// schedule): its buffer goes back to the pool, so stale params can never be used after an update.
static void drop_unused_prefetches(Zero3 *z) {
    for (int u = 0; u < z->nunits; u++) {
        Zero3Unit *U = &z->units[u];
        if (busy(U) || (U->param_state != ZERO3_PARAMS_GATHERING && U->param_state != ZERO3_PARAMS_GATHERED))
            continue;
        if (U->param_state == ZERO3_PARAMS_GATHERING) gather_finish(z, u);
        free_gathered(z, U);
    }
}

// ================================================================================================
// 4. The gradients: the buffer the backward adds into, its reduction, the reductions in flight

static void *grads_span(Zero3 *z, int u);
static void *solo_grads_in_place(Zero3 *z, int u);
static void zeropp_reduce(Zero3 *z, int u);

// The full-size buffer this micro-step's gradients of unit u are added into. Grads FULL: the
// resident buffer (it accumulates over micro-steps); SHARDED: a fresh zeroed one (on one rank the
// shard itself).
static void *grads_buffer_for(Zero3 *z, int u) {
    const Zero3Unit *U = &z->units[u];
    void *in_place = solo_grads_in_place(z, u);
    if (in_place) return in_place;
    if (!grads_sharded(z, u)) return at(z->resident.grads_full, U->grads_offset, z->cfg.grad_type);
    size_t bytes = U->padded * zero3_dtype_size(z->cfg.grad_type);
    void *buffer = pool_acquire(z, bytes);
    z->be->zero(z->be->ctx, buffer, bytes);
    return buffer;
}

// IDLE -> ACCUMULATING, once per micro-step: later calls add into the same buffer.
static void *grads_open(Zero3 *z, int u) {
    Zero3Unit *U = &z->units[u];
    if (U->grad_state == ZERO3_GRADS_REDUCING) zero3_die("zero3_grads of a unit whose reduction is in flight");
    if (U->grad_state == ZERO3_GRADS_IDLE) {
        U->grads_buffer = grads_buffer_for(z, u);
        set_grads_state(z, U, ZERO3_GRADS_ACCUMULATING);
    }
    return U->grads_buffer;
}

void *zero3_grads(Zero3 *z, int u) {
    OBSERVE(z, compute_end);
    void *g = grads_open(z, u);
    OBSERVE(z, compute_begin, ZERO3_EV_BACKWARD, u);   // the caller computes gradients of u now
    return g;
}

// REDUCING -> IDLE for the oldest reduction in flight; a pool gradient buffer returns to the pool.
// -oo host: a unit's gradient shard is final once the last micro-step's reduce-scatter is done,
// where nothing reduces it further (HSDP's replicas all-reduce it at the step's end): the backend may
// send it to the host under the rest of the backward (Zero3Backend.grads_final).
static void announce_final_grads(Zero3 *z, int u) {
    const Zero3Backend *be = z->be;
    if (!be->grads_final || zero3_optimizer_medium(z) != ZERO3_IN_HOST || !grads_sharded(z, u) || z->replicas > 1 ||
        z->step.micro != z->step.micro_steps - 1)
        return;
    const Zero3Unit *U = &z->units[u];
    be->grads_final(be->ctx, at(z->resident.grads_shard, U->grads_offset, z->cfg.grad_type),
                    U->shard * zero3_dtype_size(z->cfg.grad_type));
}

static void retire_oldest_reduction(Zero3 *z) {
    wait_for(z, z->inflight.handle[0], z->inflight.unit[0], z->inflight.kind[0]);
    announce_final_grads(z, z->inflight.unit[0]);
    update_unit_in_backward(z, z->inflight.unit[0]);
    Zero3Unit *U = &z->units[z->inflight.unit[0]];
    if (grads_sharded(z, z->inflight.unit[0])) pool_release(z, U->grads_buffer);
    U->grads_buffer = NULL;
    set_grads_state(z, U, ZERO3_GRADS_IDLE);
    z->inflight.count--;
    memmove(z->inflight.handle, z->inflight.handle + 1, z->inflight.count * sizeof(void *));
    memmove(z->inflight.unit, z->inflight.unit + 1, z->inflight.count * sizeof(int));
    memmove(z->inflight.kind, z->inflight.kind + 1, z->inflight.count * sizeof(Zero3Collective));
}

// ACCUMULATING -> IDLE at once, for a reduction that needs no collective in flight: none at this
// micro-step (the gradients accumulate where the optimizer reads them), or qgZ's (finished before
// it returns).
static void grads_reduced_now(Zero3 *z, Zero3Unit *U) {
    U->grads_buffer = NULL;
    set_grads_state(z, U, ZERO3_GRADS_IDLE);
    update_unit_in_backward(z, (int)(U - z->units));
}

// ACCUMULATING -> REDUCING: unit u's reduction started (its handle), until retire_oldest_reduction
// waits for it. A few stay in flight so they overlap the backward of the next units; where grads are
// SHARDED the full buffer goes back as soon as the reduce-scatter is done with it, which bounds the
// live gradient buffers to two (this one and the one being computed next).
static void reduction_in_flight(Zero3 *z, Zero3Unit *U, void *handle, Zero3Collective kind) {
    const int u = (int)(U - z->units);
    set_grads_state(z, U, ZERO3_GRADS_REDUCING);
    if (z->inflight.count == ZERO3_MAX_INFLIGHT) retire_oldest_reduction(z);
    z->inflight.handle[z->inflight.count] = handle;
    z->inflight.unit[z->inflight.count] = u;
    z->inflight.kind[z->inflight.count] = kind;
    z->inflight.count++;
    if (grads_sharded(z, u))
        while (z->inflight.count > 1) retire_oldest_reduction(z);
}

// Hands unit u's gradients of this micro-step to the reduction the policy gives it
// (zero3_reduction_for).
static void reduce(Zero3 *z, int u) {
    Zero3Unit *U = &z->units[u];
    const Zero3Backend *be = z->be;
    Zero3DType gt = z->cfg.grad_type;
    size_t full_bytes = U->padded * zero3_dtype_size(gt);
    const Zero3UnitFacts facts = zero3_unit_facts(z, u);
    switch (zero3_reduction_for(&facts, z->step.micro, z->step.micro_steps).how) {
    case ZERO3_REDUCE_NONE:        // they accumulate where they are, where the optimizer reads them
        grads_reduced_now(z, U);
        return;
    case ZERO3_REDUCE_QUANTIZED:   // qgZ: reduced before it returns, into the shard
        zeropp_reduce(z, u);
        pool_release(z, U->grads_buffer);
        grads_reduced_now(z, U);
        return;
    case ZERO3_REDUCE_ALL_REDUCE:
        reduction_in_flight(z, U, issued(z, be->all_reduce_start(be->ctx, U->grads_buffer, U->padded, gt), u,
                                         ZERO3_COLL_ALL_REDUCE, full_bytes), ZERO3_COLL_ALL_REDUCE);
        return;
    case ZERO3_REDUCE_SCATTER:
        // Grads SHARDED accumulate without a second shard buffer: each rank adds what its shard
        // holds so far to its own slice of this micro-step's gradients. The reduce-scatter sums that
        // slice over ranks, and only the owner added anything to it, so the result is old shard +
        // new sum.
        if (grads_sharded(z, u) && z->step.micro > 0)
            be->add(be->ctx, at(U->grads_buffer, zero3_owned_begin(z, u), gt), grads_span(z, u),
                    U->shard, gt);
        reduction_in_flight(z, U, issued(z, be->reduce_scatter_start(be->ctx, U->grads_buffer, grads_span(z, u), U->shard, gt), u,
                                         ZERO3_COLL_REDUCE_SCATTER, full_bytes), ZERO3_COLL_REDUCE_SCATTER);
        return;
    }
}

// ACCUMULATING -> REDUCING (or IDLE): the gradients handed over, and then (-ra 0) the params they
// kept gathered let go.
void zero3_reduce_grads(Zero3 *z, int u) {
    Zero3Unit *U = &z->units[u];
    OBSERVE(z, compute_end);
    if (U->grad_state != ZERO3_GRADS_ACCUMULATING) zero3_die("zero3_reduce_grads before zero3_grads");
    label_unit(z, u);
    reduce(z, u);
    release_kept(z, U);
}

void zero3_finish_reductions(Zero3 *z) {
    while (z->inflight.count > 0) retire_oldest_reduction(z);
}

// ================================================================================================
// 5. The step's end: the gradients complete, the norm's sum, AdamW's segments, the post-step gathers

static void optimizer_span(const Zero3 *z, int u, size_t *begin, size_t *count);
static float *master_span(Zero3 *z, int u);
static float *moment_span(Zero3 *z, int u, int array);

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
            for (int i = 0; i < n; i++) wait_for(z, handles[i], units[i], kind);
            n = 0;
        }
    }
}

// HSDP: every replica group reduced its own micro-batches; all-reduce each unit's reduced gradients
// (the optimizer span) across the replicas, so they all hold the gradient of the whole batch. Once
// per step, after the last micro-step (the shard accumulates inside each group before that).
static void *start_replica_all_reduce(Zero3 *z, int u) {
    const Zero3UnitFacts facts = zero3_unit_facts(z, u);
    if (!zero3_reduction_for(&facts, z->step.micro_steps - 1, z->step.micro_steps).across_replicas) return NULL;
    size_t begin, count;
    optimizer_span(z, u, &begin, &count);
    label_unit(z, u);
    return issued(z, z->be->replica_all_reduce_start(z->be->ctx, grads_span(z, u), count, z->cfg.grad_type), u,
                  ZERO3_COLL_REPLICA_REDUCE, count * zero3_dtype_size(z->cfg.grad_type));
}

// The step's gradients, complete: every reduction finished (and, under HSDP, all-reduced across the
// replicas). Idempotent within a step.
static void finish_gradients(Zero3 *z) {
    zero3_finish_reductions(z);
    schedule_close_recording(z);
    if (z->step.grads_complete) return;
    for_units_batched(z, start_replica_all_reduce, ZERO3_COLL_REPLICA_REDUCE);
    z->step.grads_complete = 1;
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

// The optimizer step's work as segments: the local optimizer span of every unit, cut tensor by
// tensor so that weight decay applies exactly to the matrices even where a shard boundary cuts
// through a tensor; the padding between and after tensors is skipped. Units first..end-1 (all of
// them in memory, one at a time from its slot on disk). Returns their number.
static int build_adam_segments(Zero3 *z, int first, int end, float weight_decay) {
    const size_t gsize = zero3_dtype_size(z->cfg.grad_type), psize = zero3_dtype_size(z->cfg.param_type);
    int nsegs = 0;
    for (int u = first; u < end; u++) {
        Zero3Unit *U = &z->units[u];
        size_t span_begin, span_count;
        optimizer_span(z, u, &span_begin, &span_count);
        size_t span_end = span_begin + span_count;
        float *master = master_span(z, u);
        float *m = moment_span(z, u, ZERO3_OFFLOAD_M);
        float *v = moment_span(z, u, ZERO3_OFFLOAD_V);
        char *grads = grads_span(z, u);
        // the working params of the optimizer span (the master itself when params are fp32)
        char *params = z->resident.master_is_params ? (char *)master
                       : optimizer_sharded(z, u) ? (char *)owned_params(z, u)
                                                 : (char *)resident_params(z, u);
        for (int i = 0; i < U->ntensors; i++) {
            const Zero3Tensor *T = &U->tensors[i];
            size_t lo = T->offset > span_begin ? T->offset : span_begin;
            size_t hi = T->offset + T->numel < span_end ? T->offset + T->numel : span_end;
            if (lo >= hi) continue;
            size_t k = lo - span_begin;   // index inside the span
            z->adam.segs[nsegs++] = (Zero3AdamSegment){
                .master = master + k, .m = m + k, .v = v + k, .grad = grads + k * gsize,
                .params = params + k * psize, .n = hi - lo,
                .weight_decay = T->decay ? weight_decay : 0.0f,
            };
        }
    }
    return nsegs;
}

// Params FULL with the optimizer SHARDED (stages 1-2): every rank updated its slice; gather them so
// all ranks hold the new full params.
static void *start_updated_params_gather(Zero3 *z, int u) {
    const Zero3UnitFacts facts = zero3_unit_facts(z, u);
    if (!zero3_gathers_after_step(&facts)) return NULL;
    const Zero3Unit *U = &z->units[u];
    label_unit(z, u);
    return issued(z, z->be->all_gather_start(z->be->ctx, owned_params(z, u), resident_params(z, u), U->shard, z->cfg.param_type),
                  u, ZERO3_COLL_STEP_GATHER, U->padded * zero3_dtype_size(z->cfg.param_type));
}

static void updated_params_gather(Zero3 *z) { for_units_batched(z, start_updated_params_gather, ZERO3_COLL_STEP_GATHER); }

// ================================================================================================
// 6. The checks

// A unit's params at rest: where its layout keeps them between passes (SHARDED, or RESIDENT when
// FULL), nothing gathered.
static int params_at_rest(const Zero3 *z, int u) {
    return z->units[u].param_state == (params_sharded(z, u) ? ZERO3_PARAMS_SHARDED : ZERO3_PARAMS_RESIDENT);
}

// One unit at rest between steps: its params where its layout keeps them (SHARDED, or RESIDENT
// when FULL), no holder, nothing gathered or kept, no gradient buffer open.
static const char *unit_unrest(const Zero3 *z, int u) {
    const Zero3Unit *U = &z->units[u];
    if (!params_at_rest(z, u)) return params_sharded(z, u) ? "params not SHARDED" : "params not RESIDENT";
    if (busy(U)) return "params still held";
    if (U->params_gathered || U->gather_handle) return "a gathered buffer or gather handle kept";
    if (U->grad_state != ZERO3_GRADS_IDLE || U->grads_buffer) return "grads not IDLE";
    return NULL;
}

// Every unit at rest and no reduction in flight (what: "step end" or the pass), else the engine dies
// naming the first unit that is not. The one definition of "at rest" both checks below use.
static void check_units_at_rest(const Zero3 *z, const char *what) {
    char msg[160];
    for (int u = 0; u < z->nunits; u++) {
        const char *why = unit_unrest(z, u);
        if (why) { snprintf(msg, sizeof msg, "%s: unit %s: %s", what, z->units[u].name, why); zero3_die(msg); }
    }
    if (z->inflight.count) { snprintf(msg, sizeof msg, "%s: reductions still in flight", what); zero3_die(msg); }
}

void zero3_check_released(const Zero3 *z) { check_units_at_rest(z, "after the pass"); }

void zero3_check_step_end(Zero3 *z) {
    char msg[160];
    check_units_at_rest(z, "step end");
    int backend_handles = z->be->collectives_in_flight ? z->be->collectives_in_flight(z->be->ctx) : 0;
    if (backend_handles) {
        snprintf(msg, sizeof msg, "step end: %d collective handles never waited on", backend_handles);
        zero3_die(msg);
    }
    for (int i = 0; i < z->pool.count; i++)
        if (z->pool.entry[i].used) zero3_die("step end: a pool buffer not returned");
    if (z->observe.stats.transient_bytes) zero3_die("step end: transient bytes still counted live");
    z->step.checked_steps++;
}

// ================================================================================================
// 7. The policy (zero3.h): which gather and which reduction a unit gets. The mechanism above asks
// these functions before it issues a collective, and the theory asks the same ones.

Zero3UnitFacts zero3_unit_facts(const Zero3 *z, int u) {
    return (Zero3UnitFacts){.layout = z->units[u].layout, .world = z->world, .replicas = z->replicas,
                            .quant_weights = z->cfg.quant_weights, .hp_group = z->cfg.hp_group,
                            .quant_grads = z->cfg.quant_grads};
}

// Params SHARDED are gathered for each phase: from the node group's secondary shards for a backward
// once a full gather this step left them (hpZ), quantized under qwZ, else shard by shard.
Zero3Gather zero3_gather_for(const Zero3UnitFacts *f, Zero3Phase phase, int secondary_fresh) {
    const Zero3Collective none = ZERO3_COLL_KINDS;
    const Zero3Collective shards = phase == ZERO3_FOR_BACKWARD ? ZERO3_COLL_BWD_GATHER : ZERO3_COLL_FWD_GATHER;
    if (f->layout.params != ZERO3_SHARDED) return (Zero3Gather){ZERO3_GATHER_NONE, none};
    if (f->world == 1)
        return (Zero3Gather){f->quant_weights ? ZERO3_GATHER_QUANTIZED : ZERO3_GATHER_IN_PLACE, none};
    if (f->hp_group > 0 && phase == ZERO3_FOR_BACKWARD && secondary_fresh)
        return (Zero3Gather){ZERO3_GATHER_SECONDARY, ZERO3_COLL_HP_GATHER};
    return (Zero3Gather){f->quant_weights ? ZERO3_GATHER_QUANTIZED : ZERO3_GATHER_SHARDS, shards};
}

// Grads SHARDED reduce every micro-step (the full buffer is not kept), under qgZ in two quantized
// hops; grads FULL accumulate locally and reduce once, at the last micro-step: all-reduce where the
// optimizer is FULL (DDP), reduce-scatter into the owned slice where it is SHARDED. Under HSDP the
// step's end then all-reduces every reduced span across the replica groups.
Zero3Reduction zero3_reduction_for(const Zero3UnitFacts *f, int micro, int micro_steps) {
    const int last = micro == micro_steps - 1;
    Zero3Reduction r = {ZERO3_REDUCE_NONE, last && f->replicas > 1};
    if (f->world == 1) return r;
    if (f->layout.grads == ZERO3_SHARDED) r.how = f->quant_grads ? ZERO3_REDUCE_QUANTIZED : ZERO3_REDUCE_SCATTER;
    else if (last) r.how = f->layout.optimizer == ZERO3_FULL ? ZERO3_REDUCE_ALL_REDUCE : ZERO3_REDUCE_SCATTER;
    return r;
}

// Micro-step 0 of 2 is not the last: only gradients reduced every micro-step get a collective there.
int zero3_reduces_every_micro_step(const Zero3UnitFacts *f) {
    return zero3_reduction_for(f, 0, 2).how != ZERO3_REDUCE_NONE;
}

// Params FULL with the optimizer SHARDED (stages 1-2): each rank updated its slice, all need them all.
int zero3_gathers_after_step(const Zero3UnitFacts *f) {
    return f->layout.params == ZERO3_FULL && f->layout.optimizer == ZERO3_SHARDED && f->world > 1;
}

// ================================================================================================
// 8. The layout: init, the units, the resident buffers; where each unit's pieces live; the params

static size_t round_up(size_t x, size_t m) { return (x + m - 1) / m * m; }
static size_t shard_quantum(const Zero3 *z);
static void zeropp_init(Zero3 *z);
static size_t zeropp_allocate(Zero3 *z);

// Names unit u as the owner of the collectives started next, for the backend's watchdog (its
// timeout line says which unit a stalled collective was for).
static void label_unit(const Zero3 *z, int u) {
    if (z->be->label) z->be->label(z->be->ctx, z->units[u].name);
}

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
    z->node_rank = z->rank;
    z->node_size = z->world;
    z->nodes = 1;
    zeropp_init(z);
    z->layout = ZERO3_STAGE_LAYOUT[cfg->stage];
    if (cfg->align < 1) z->cfg.align = 1;
    if (cfg->prefetch_depth < 0) z->cfg.prefetch_depth = 0;
    if (cfg->backward_prefetch != ZERO3_BACKWARD_PRE && cfg->backward_prefetch != ZERO3_BACKWARD_POST)
        zero3_die("backward_prefetch is neither ZERO3_BACKWARD_PRE nor ZERO3_BACKWARD_POST");
    z->units = calloc(ZERO3_MAX_UNITS, sizeof(Zero3Unit));
    // a pass gathers each unit at most a few times (GPT-2's training pass: twice, plus the tied
    // embedding once more)
    for (int p = 0; p < ZERO3_NUM_PASSES; p++) {
        z->schedule.pass_order[p].order = calloc(3 * ZERO3_MAX_UNITS, sizeof(int));
        z->schedule.pass_order[p].backward = calloc(3 * ZERO3_MAX_UNITS, 1);
        if (!z->schedule.pass_order[p].order || !z->schedule.pass_order[p].backward) zero3_die("out of host memory");
    }
    if (!z->units) zero3_die("out of host memory");
    OBSERVE(z, init);
    // fp32 working params need no separate master copy: the params ARE the master weights
    z->resident.master_is_params = (cfg->param_type == ZERO3_F32);
#ifdef ZERO3_CHECK_STEPS
    z->step.check_steps = 1;
#else
    const char *check = getenv("ZERO3_CHECK_STEPS");
    z->step.check_steps = check && strcmp(check, "0") != 0;
#endif
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
    u->padded = round_up(offset, shard_quantum(z) * (size_t)z->world);
    u->shard = u->padded / (size_t)z->world;
    // a unit below the persistence threshold stays replicated: DDP's row of the table
    u->persistent = z->cfg.persist_threshold > 0 && u->numel < z->cfg.persist_threshold;
    u->layout = u->persistent ? ZERO3_STAGE_LAYOUT[0] : z->layout;
    states_at_birth(u);
    return z->nunits++;
}

// The placement as this backend holds it (zero3.h): host memory is the backend's own where it has
// no host memory of its own to give (the CPU's).
Zero3Medium zero3_optimizer_medium(const Zero3 *z) {
    if (z->cfg.optimizer_medium == ZERO3_IN_HOST && !z->be->host_alloc) return ZERO3_IN_MEMORY;
    return z->cfg.optimizer_medium;
}

// The fp32 master is in host memory (-oo host on a device; with fp32 params it is the params and
// stays where they are): what a collective or a kernel on the master must go around.
static int master_in_host(const Zero3 *z) {
    return zero3_optimizer_medium(z) == ZERO3_IN_HOST && !z->resident.master_is_params;
}

// One optimizer-state buffer of `numel` fp32 where the placement puts it: the backend's memory
// (counted in *device_bytes, the resident bytes) or its pinned host memory (resident.host_bytes).
static float *optimizer_buffer(Zero3 *z, size_t numel, size_t *device_bytes) {
    const Zero3Backend *be = z->be;
    const size_t bytes = numel * sizeof(float);
    if (zero3_optimizer_medium(z) == ZERO3_IN_HOST) {
        z->resident.host_bytes += bytes;
        return be->host_alloc(be->ctx, bytes);
    }
    *device_bytes += bytes;
    return be->alloc(be->ctx, bytes);
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
        z->totals.numel += U->numel;
        if (U->layout.params == ZERO3_SHARDED) { U->params_offset = params_shard; params_shard += U->shard; }
        else { U->params_offset = params_full; params_full += U->padded; }
        if (U->layout.grads == ZERO3_SHARDED) { U->grads_offset = grads_shard; grads_shard += U->shard; }
        else { U->grads_offset = grads_full; grads_full += U->padded; }
        U->optim_offset = optim;
        optim += U->layout.optimizer == ZERO3_SHARDED ? U->shard : U->padded;
        if (U->persistent) z->totals.persistent_numel += U->numel;
    }
    z->totals.padded = full;
    z->totals.shard = shard;
    z->resident.grads_full_numel = grads_full;
    z->resident.grads_shard_numel = grads_shard;
    z->resident.optim_numel = optim;
    size_t pbytes = zero3_dtype_size(z->cfg.param_type), gbytes = zero3_dtype_size(z->cfg.grad_type);
    size_t bytes = 0;
    if (params_shard && z->cfg.params_medium != ZERO3_ON_DISK) {   // on disk: the params store's file and slots
        z->resident.params_shard = be->alloc(be->ctx, params_shard * pbytes);
        bytes += params_shard * pbytes;
    }
    if (params_full) { z->resident.params_full = be->alloc(be->ctx, params_full * pbytes); bytes += params_full * pbytes; }
    bytes += zeropp_allocate(z);
    if (zero3_optimizer_medium(z) != ZERO3_ON_DISK) {   // on disk: zero3_offload_start's file and slots instead
        if (!z->resident.master_is_params) z->resident.master = optimizer_buffer(z, optim, &bytes);
        z->resident.adam_m = optimizer_buffer(z, optim, &bytes);
        z->resident.adam_v = optimizer_buffer(z, optim, &bytes);
    }
    if (grads_shard) { z->resident.grads_shard = be->alloc(be->ctx, grads_shard * gbytes); bytes += grads_shard * gbytes; }
    if (grads_full) { z->resident.grads_full = be->alloc(be->ctx, grads_full * gbytes); bytes += grads_full * gbytes; }
    z->resident.bytes = bytes;
    // at most one optimizer segment per tensor: a unit's optimizer span meets each tensor once
    for (int i = 0; i < z->nunits; i++) z->adam.cap += z->units[i].ntensors;
    z->adam.segs = calloc((size_t)z->adam.cap, sizeof(Zero3AdamSegment));
    if (!z->adam.segs) zero3_die("out of host memory");
}

int zero3_offload_start(Zero3 *z, Zero3Store what, const char *dir, char *err, size_t errlen) {
    const Zero3Medium medium = what == ZERO3_STORE_PARAMS ? z->cfg.params_medium : zero3_optimizer_medium(z);
    Zero3Offload **store = what == ZERO3_STORE_PARAMS ? &z->params_offload : &z->offload;
    if (medium != ZERO3_ON_DISK) return 0;
    *store = zero3_offload_open(z, what, dir, err, errlen);
    return *store ? 0 : -1;
}

void zero3_free(Zero3 *z) {
    const Zero3Backend *be = z->be;
    zero3_offload_close(z->offload);
    zero3_offload_close(z->params_offload);
    void *bufs[] = {z->resident.params_full, z->resident.params_shard, z->resident.grads_full, z->resident.grads_shard,
                    z->resident.params_secondary};
    for (size_t i = 0; i < sizeof(bufs) / sizeof(bufs[0]); i++)
        if (bufs[i]) be->free(be->ctx, bufs[i]);
    float *state[] = {z->resident.master, z->resident.adam_m, z->resident.adam_v};
    for (size_t i = 0; i < sizeof(state) / sizeof(state[0]); i++)
        if (state[i]) {
            if (zero3_optimizer_medium(z) == ZERO3_IN_HOST) be->host_free(be->ctx, state[i]);
            else be->free(be->ctx, state[i]);
        }
    for (int i = 0; i < z->pool.count; i++) be->free(be->ctx, z->pool.entry[i].ptr);
    free(z->units);
    for (int p = 0; p < ZERO3_NUM_PASSES; p++) { free(z->schedule.pass_order[p].order); free(z->schedule.pass_order[p].backward); }
    OBSERVE(z, free);
    free(z->adam.segs);
    memset(z, 0, sizeof(*z));
}

int zero3_persistent_units(const Zero3 *z) {
    int n = 0;
    for (int u = 0; u < z->nunits; u++) n += z->units[u].persistent;
    return n;
}

// ---- where each unit's pieces live. "Owned" = the slice [r*S, (r+1)*S) of the unit, in unit coordinates.

static char *at(void *base, size_t elements, Zero3DType t) {
    return (char *)base + elements * zero3_dtype_size(t);
}

size_t zero3_owned_begin(const Zero3 *z, int u) { return (size_t)z->rank * z->units[u].shard; }

// The working params of the owned slice (the input of all-gathers, the output of AdamW). Where the
// params shard is on disk (-op disk), the store's slot that holds the unit now (the cache brings it
// in, marked changed); a gather reads the file itself (gather_source).
static void *owned_params(Zero3 *z, int u) {
    const Zero3Unit *U = &z->units[u];
    if (params_sharded(z, u) && z->params_offload) return zero3_offload_array(z->params_offload, u, 0);
    if (params_sharded(z, u)) return at(z->resident.params_shard, U->params_offset, z->cfg.param_type);
    return at(z->resident.params_full, U->params_offset + zero3_owned_begin(z, u), z->cfg.param_type);
}

// The whole unit's working params where they are FULL (resident).
static void *resident_params(Zero3 *z, int u) { return at(z->resident.params_full, z->units[u].params_offset, z->cfg.param_type); }

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

// The optimizer state's placement decides where a span is: the resident buffers, or (on disk) the
// slot that holds the unit now (zero3_offload_array brings it in). The one place that asks.
static float *master_span(Zero3 *z, int u) {
    if (z->resident.master_is_params) {   // the fp32 params: the span starts where the optimizer span does
        if (!optimizer_sharded(z, u)) return (float *)resident_params(z, u);
        return (float *)owned_params(z, u);
    }
    if (z->offload) return zero3_offload_array(z->offload, u, ZERO3_OFFLOAD_MASTER);
    return z->resident.master + optimizer_offset(z, u);
}

// AdamW's m (array ZERO3_OFFLOAD_M) or v over unit u's optimizer span.
static float *moment_span(Zero3 *z, int u, int array) {
    if (z->offload) return zero3_offload_array(z->offload, u, array);
    return (array == ZERO3_OFFLOAD_M ? z->resident.adam_m : z->resident.adam_v) + optimizer_offset(z, u);
}

float *zero3_owned_master(Zero3 *z, int u) { return master_span(z, u) + owned_in_span(z, u); }
float *zero3_owned_m(Zero3 *z, int u) { return moment_span(z, u, ZERO3_OFFLOAD_M) + owned_in_span(z, u); }
float *zero3_owned_v(Zero3 *z, int u) { return moment_span(z, u, ZERO3_OFFLOAD_V) + owned_in_span(z, u); }

// The reduced gradients of the optimizer span of unit u: the shard buffer where grads are SHARDED;
// else the resident full buffer, from the unit's start (optimizer FULL) or its owned slice.
static void *grads_span(Zero3 *z, int u) {
    const Zero3Unit *U = &z->units[u];
    if (grads_sharded(z, u)) return at(z->resident.grads_shard, U->grads_offset, z->cfg.grad_type);
    size_t begin = optimizer_sharded(z, u) ? zero3_owned_begin(z, u) : 0;
    return at(z->resident.grads_full, U->grads_offset + begin, z->cfg.grad_type);
}

const void *zero3_owned_grads(const Zero3 *z, int u) {
    Zero3 *zz = (Zero3 *)z;
    return at(grads_span(zz, u), owned_in_span(z, u), z->cfg.grad_type);
}

// ---- the params, published --------------------------------------------------------------------

// DDP's full master of unit u: every rank's slice all-gathered into it. A collective works on the
// backend's memory, so a master in host memory (-oo host) is gathered in a scratch buffer of it.
static void gather_full_master(Zero3 *z, int u, float *master_full) {
    const Zero3Backend *be = z->be;
    const Zero3Unit *U = &z->units[u];
    const size_t own = zero3_owned_begin(z, u);
    float *full = master_in_host(z) ? be->alloc(be->ctx, U->padded * sizeof(float)) : master_full;
    if (full != master_full) be->copy_to_device(be->ctx, full + own, master_full + own, U->shard * sizeof(float));
    be->wait(be->ctx, be->all_gather_start(be->ctx, full + own, full, U->shard, ZERO3_F32));
    if (full == master_full) return;
    be->copy_to_host(be->ctx, master_full, full, U->padded * sizeof(float));
    be->free(be->ctx, full);
}

// The working params rounded from n fp32 of the master (bf16 runs), by the backend's cast; a master
// in host memory (-oo host) is first copied into a scratch buffer of the backend's memory.
static void params_from_master(Zero3 *z, void *params, const float *master, size_t n) {
    const Zero3Backend *be = z->be;
    if (!master_in_host(z)) {
        be->cast_from_f32(be->ctx, params, z->cfg.param_type, master, n);
        return;
    }
    float *scratch = be->alloc(be->ctx, n * sizeof(float));
    be->copy_to_device(be->ctx, scratch, master, n * sizeof(float));
    be->cast_from_f32(be->ctx, params, z->cfg.param_type, scratch, n);
    be->free(be->ctx, scratch);
}

void zero3_publish_params(Zero3 *z) {
    const Zero3Backend *be = z->be;
    zeropp_params_changed(z);
    for (int u = 0; u < z->nunits; u++) {
        Zero3Unit *U = &z->units[u];
        label_unit(z, u);
        if (!optimizer_sharded(z, u)) {
            // DDP keeps the full master on every rank: gather the fp32 slices, then cast everything
            float *master_full = master_span(z, u);
            gather_full_master(z, u, master_full);
            if (!z->resident.master_is_params) params_from_master(z, resident_params(z, u), master_full, U->padded);
            continue;
        }
        if (!z->resident.master_is_params) params_from_master(z, owned_params(z, u), master_span(z, u), U->shard);
        if (!params_sharded(z, u)) {
            void *full = resident_params(z, u);
            be->wait(be->ctx, be->all_gather_start(be->ctx, owned_params(z, u), full, U->shard,
                                                   z->cfg.param_type));
        }
    }
}

// ================================================================================================
// 9. The transient pool: gathered units and full-size gradient buffers. Like PyTorch's caching
// allocator, a released buffer is kept and handed to the next request it fits (best fit), so once
// the schedule is recorded and prefetching (the second step) nothing more is allocated. The observer
// counts what the holders ask for (the transient bytes: what ZeRO-3 needs live); `pool.bytes` is what
// the process really holds.

static void *pool_acquire(Zero3 *z, size_t bytes) {
    int best = -1;
    for (int i = 0; i < z->pool.count; i++) {
        Zero3PoolEntry *e = &z->pool.entry[i];
        if (e->used == 0 && e->capacity >= bytes && (best < 0 || e->capacity < z->pool.entry[best].capacity))
            best = i;
    }
    if (best < 0) {
        if (z->pool.count == ZERO3_MAX_POOL) zero3_die("transient pool exhausted");
        best = z->pool.count++;
        z->pool.entry[best].ptr = z->be->alloc(z->be->ctx, bytes);
        z->pool.entry[best].capacity = bytes;
        z->pool.bytes += bytes;
    }
    z->pool.entry[best].used = bytes;
    OBSERVE(z, transient_acquired, bytes);
    return z->pool.entry[best].ptr;
}

static void pool_release(Zero3 *z, void *ptr) {
    for (int i = 0; i < z->pool.count; i++) {
        if (z->pool.entry[i].ptr == ptr && z->pool.entry[i].used) {
            OBSERVE(z, transient_released, z->pool.entry[i].used);
            z->pool.entry[i].used = 0;
            return;
        }
    }
    zero3_die("pool_release of a buffer not in use");
}

// ================================================================================================
// 10. The prefetch schedule, recorded. The first pass of each kind (training, forward only) writes
// down the order of its gathers; later passes of that kind follow the recording and gather ahead
// along it. A pass that departs from the recording gets no more prefetch, and the next pass of its
// kind records afresh.

// RECORDING -> RECORDED: the pass now running was written down whole.
static void schedule_close_recording(Zero3 *z) {
    Zero3PassOrder *s = &z->schedule.pass_order[z->schedule.pass];
    if (s->mode == ZERO3_SCHEDULE_RECORDING) s->mode = ZERO3_SCHEDULE_RECORDED;
}

// A pass of kind `pass` starts: it replays its kind's recording, or (none usable) records one.
static void schedule_start(Zero3 *z, Zero3Pass pass) {
    schedule_close_recording(z);
    z->schedule.pass = pass;
    z->schedule.pos = 0;
    Zero3PassOrder *s = &z->schedule.pass_order[pass];
    if (s->mode == ZERO3_SCHEDULE_UNRECORDED) {
        s->len = 0;
        s->mode = ZERO3_SCHEDULE_RECORDING;
    }
}

// Notes that unit u is being gathered for `phase`: writes it down, or checks it against the recording.
static void schedule_note_gather(Zero3 *z, int u, Zero3Phase phase) {
    Zero3PassOrder *s = &z->schedule.pass_order[z->schedule.pass];
    switch (s->mode) {
    case ZERO3_SCHEDULE_RECORDING:
        if (s->len < 3 * ZERO3_MAX_UNITS) { s->backward[s->len] = (unsigned char)phase; s->order[s->len++] = u; }
        else s->mode = ZERO3_SCHEDULE_UNRECORDED;   // a pass this long is not recorded: it runs without prefetch
        return;
    case ZERO3_SCHEDULE_RECORDED:
        if (z->schedule.pos < s->len && s->order[z->schedule.pos] == u) { z->schedule.pos++; return; }
        s->mode = ZERO3_SCHEDULE_UNRECORDED;   // a departure: no prefetch for the rest of this pass, re-record the next
        return;
    case ZERO3_SCHEDULE_UNRECORDED:
        return;
    }
}

// ================================================================================================
// 11. One rank: a shard is the whole unit, so a gather or a reduction is the identity. The engine
// then issues no data collective at all and uses the shards in place (stage 3 holds what DDP holds).
// The policy says so (zero3_gather_for's IN_PLACE, zero3_reduction_for's NONE); these are the
// buffers it means.

static int solo(const Zero3 *z) { return z->world == 1; }

// SHARDED -> GATHERED in place: the gathered unit is the shard itself.
// On disk (-op disk) the shard is a record: read, and copied into a pool buffer, so no slot is held.
static void solo_gather(Zero3 *z, int u) {
    Zero3Unit *U = &z->units[u];
    if (z->params_offload) {
        const size_t bytes = U->shard * zero3_dtype_size(z->cfg.param_type);
        U->params_gathered = pool_acquire(z, bytes);
        z->be->copy(z->be->ctx, U->params_gathered, gather_source(z, u), bytes);
    } else {
        U->params_gathered = owned_params(z, u);
    }
    set_params_state(z, U, ZERO3_PARAMS_GATHERED);
}

// The gathered unit is the shard itself, not a pool buffer (nothing to give back).
static int solo_shard_in_place(Zero3 *z, const Zero3Unit *U) {
    return !z->params_offload && U->params_gathered == owned_params(z, (int)(U - z->units));
}

// Grads SHARDED on one rank: the shard accumulates in place, as grads FULL do. NULL elsewhere.
static void *solo_grads_in_place(Zero3 *z, int u) {
    return grads_sharded(z, u) && solo(z) ? grads_span(z, u) : NULL;
}

// ================================================================================================
// 12. ZeRO++ (docs/zeropp.md): the gather and the reduction, each idea one small function, reached
// from the mechanism through zeropp_init, zeropp_allocate, zeropp_params_changed,
// zeropp_gather_start, zeropp_gather_finish and zeropp_reduce. Each does nothing when its idea is
// off.

// ZeRO++'s three ideas, each on or off for the run.
static int qw(const Zero3 *z) { return z->cfg.quant_weights != 0; }   // quantized weight gathers
static int hp(const Zero3 *z) { return z->cfg.hp_group > 0; }         // secondary shard in the node group
static int qg(const Zero3 *z) { return z->cfg.quant_grads != 0; }     // quantized gradient reduction

static size_t gcd(size_t a, size_t b) { return b ? gcd(b, a % b) : a; }

// The granularity of a shard, in elements: the alignment, and under quantization (qwZ, qgZ) also a
// whole number of quantization blocks, so block boundaries fall at the same unit offsets for any N.
static size_t shard_quantum(const Zero3 *z) {
    size_t a = (size_t)z->cfg.align;
    if (qw(z) || qg(z)) a = a / gcd(a, ZERO3_QUANT_BLOCK) * ZERO3_QUANT_BLOCK;
    return a;
}

// ZeRO++'s node groups: G consecutive ranks of the shard group (hpZ's G, or the whole shard group
// for qgZ alone), and the cross groups of the ranks with the same place in theirs.
static void zeropp_init(Zero3 *z) {
    if (!(hp(z) || qg(z)) || z->world == 1) return;
    int G = hp(z) ? z->cfg.hp_group : z->world;
    if (z->world % G != 0 || !z->be->make_node_groups) zero3_die("the node group must divide the shard group");
    z->be->make_node_groups(z->be->ctx, G);
    z->node_size = G;
    z->node_rank = z->rank % G;
    z->nodes = z->world / G;
}

// hpZ: the params changed (published, or updated by AdamW): every secondary shard is stale.
static void hp_invalidate(Zero3 *z) {
    for (int u = 0; u < z->nunits; u++) z->units[u].secondary_fresh = 0;
}
static void zeropp_params_changed(Zero3 *z) { hp_invalidate(z); }

// hpZ: the secondary shards, P / G of every unit whose params are SHARDED, resident for the run
// (params / G more per rank than ZeRO-3). Returns their bytes.
static size_t hp_allocate_secondary(Zero3 *z) {
    if (!hp(z) || solo(z)) return 0;
    size_t n = 0;
    for (int u = 0; u < z->nunits; u++) {
        Zero3Unit *U = &z->units[u];
        if (U->layout.params != ZERO3_SHARDED) continue;
        U->secondary_offset = n;
        n += U->padded / (size_t)z->node_size;
    }
    if (n == 0) return 0;
    size_t bytes = n * zero3_dtype_size(z->cfg.param_type);
    z->resident.params_secondary = z->be->alloc(z->be->ctx, bytes);
    return bytes;
}
static size_t zeropp_allocate(Zero3 *z) { return hp_allocate_secondary(z); }

// qwZ: the forward (and, without hpZ, the backward) all-gather moves every shard block-quantized:
// int8 codes and one fp32 scale per block, about a quarter of fp32's bytes and half of bf16's. The
// master shard stays exact; only the copy the compute uses is quantized. U->gather_packed holds
// every rank's packed shard in rank order: this rank quantizes its own into place, the all-gather
// brings the others, and qw_dequantize (once it has arrived) fills the gathered buffer. On one rank
// there is nothing to send, but the compute still sees the quantized model, the same for any N.
static void *qw_gather_start(Zero3 *z, int u, Zero3Collective kind) {
    Zero3Unit *U = &z->units[u];
    const Zero3Backend *be = z->be;
    size_t packed = zero3_quant_bytes(U->shard);
    U->gather_packed = pool_acquire(z, packed * (size_t)z->world);
    char *mine = (char *)U->gather_packed + packed * (size_t)z->rank;
    be->quantize(be->ctx, gather_source(z, u), z->cfg.param_type, U->shard, mine);
    if (solo(z)) return NULL;
    return issued(z, be->all_gather_start(be->ctx, mine, U->gather_packed, packed, ZERO3_I8), u, kind,
                  packed * (size_t)z->world);
}

static void qw_dequantize(Zero3 *z, Zero3Unit *U) {
    const Zero3Backend *be = z->be;
    size_t packed = zero3_quant_bytes(U->shard);
    for (int r = 0; r < z->world; r++)
        be->dequantize(be->ctx, (char *)U->gather_packed + packed * (size_t)r, U->shard,
                       at(U->params_gathered, (size_t)r * U->shard, z->cfg.param_type), z->cfg.param_type, 0);
    pool_release(z, U->gather_packed);
    U->gather_packed = NULL;
}

// hpZ: every full gather leaves, besides the gathered unit, a secondary shard on each rank: the
// 1/G of the unit for its place in its node group, resident until the params change. A backward
// gather then all-gathers the secondary shards inside the node group (fast links) instead of the
// primary shards across every rank: the same bytes arrive, from nearer.
static void *secondary_shard(Zero3 *z, const Zero3Unit *U) {
    return at(z->resident.params_secondary, U->secondary_offset, z->cfg.param_type);
}

static void hp_keep_secondary(Zero3 *z, Zero3Unit *U) {
    size_t n = U->padded / (size_t)z->node_size;
    z->be->copy(z->be->ctx, secondary_shard(z, U), at(U->params_gathered, (size_t)z->node_rank * n, z->cfg.param_type),
                n * zero3_dtype_size(z->cfg.param_type));
    U->secondary_fresh = 1;
}

static void *hp_gather_start(Zero3 *z, int u) {
    Zero3Unit *U = &z->units[u];
    size_t n = U->padded / (size_t)z->node_size;
    return issued(z, z->be->node_all_gather_start(z->be->ctx, secondary_shard(z, U), U->params_gathered, n, z->cfg.param_type),
                  u, ZERO3_COLL_HP_GATHER, U->padded * zero3_dtype_size(z->cfg.param_type));
}

// The gather of unit u the policy made a ZeRO++ one (U->gather): from the node group's secondary
// shards (hpZ), or quantized (qwZ). Its handle.
static void *zeropp_gather_start(Zero3 *z, int u) {
    Zero3Unit *U = &z->units[u];
    if (U->gather.how == ZERO3_GATHER_SECONDARY) return hp_gather_start(z, u);
    return qw_gather_start(z, u, U->gather.kind);
}

// A gather arrived: qwZ dequantizes what came, and under hpZ a full gather keeps this rank's
// secondary shard of it.
static void zeropp_gather_finish(Zero3 *z, Zero3Unit *U) {
    if (U->gather_packed) qw_dequantize(z, U);
    if (hp(z) && !solo(z) && U->gather.how != ZERO3_GATHER_SECONDARY) hp_keep_secondary(z, U);
}

// qgZ: unit u's gradients of this micro-step reduced in two quantized hops, so that only a node
// group's partial sums cross between nodes. The shard group is X node groups of G ranks; rank
// x*G + l owns shard x*G + l.
//   hop 1, inside the node group: to its peer of place l' each rank sends, quantized, the shards of
//          every rank of place l' (x'*G + l' for each node x'): X shards. It receives the same
//          from its G peers and sums them in fp32: its node's partial sums of X shards.
//   hop 2, across node groups: each partial sum is requantized and sent to its owner (the rank of
//          place l in node x'), which sums the X arriving in fp32 into its gradient shard.
// With one node group (X = 1) hop 1 already gives the node's, the whole group's, sum: no hop 2.
// The adds land in the shard (zeroed at the step's start), so micro-steps accumulate there; the
// norm and AdamW read those fp32 sums. Each hop waits for its all-to-all: no overlap (simplicity).
static void qg_reduce(Zero3 *z, int u) {
    Zero3Unit *U = &z->units[u];
    const Zero3Backend *be = z->be;
    const Zero3DType gt = z->cfg.grad_type;
    const int G = z->node_size, X = z->nodes;
    const size_t S = U->shard, packed = zero3_quant_bytes(S);
    char *send = pool_acquire(z, packed * (size_t)z->world), *recv = pool_acquire(z, packed * (size_t)z->world);
    for (int peer = 0; peer < G; peer++)
        for (int x = 0; x < X; x++)
            be->quantize(be->ctx, at(U->grads_buffer, (size_t)(x * G + peer) * S, gt), gt, S, send + (size_t)(peer * X + x) * packed);
    void *hop = issued(z, be->all_to_all_start(be->ctx, send, recv, packed * (size_t)X, 0), u, ZERO3_COLL_QG_INTRA,
                       packed * (size_t)z->world);
    wait_for(z, hop, u, ZERO3_COLL_QG_INTRA);
    // the node's sums of the X shards of place l: straight into this rank's shard when X = 1
    void *node_sum = X == 1 ? grads_span(z, u) : pool_acquire(z, (size_t)X * S * sizeof(float));
    Zero3DType sum_type = X == 1 ? gt : ZERO3_F32;
    if (X > 1) be->zero(be->ctx, node_sum, (size_t)X * S * sizeof(float));
    for (int x = 0; x < X; x++)
        for (int peer = 0; peer < G; peer++)
            be->dequantize(be->ctx, recv + (size_t)(peer * X + x) * packed, S, at(node_sum, (size_t)x * S, sum_type), sum_type, 1);
    if (X > 1) {
        for (int x = 0; x < X; x++) be->quantize(be->ctx, at(node_sum, (size_t)x * S, ZERO3_F32), ZERO3_F32, S, send + (size_t)x * packed);
        hop = issued(z, be->all_to_all_start(be->ctx, send, recv, packed, 1), u, ZERO3_COLL_QG_ACROSS, packed * (size_t)X);
        wait_for(z, hop, u, ZERO3_COLL_QG_ACROSS);
        for (int x = 0; x < X; x++) be->dequantize(be->ctx, recv + (size_t)x * packed, S, grads_span(z, u), gt, 1);
        pool_release(z, node_sum);
    }
    pool_release(z, send);
    pool_release(z, recv);
}
static void zeropp_reduce(Zero3 *z, int u) { qg_reduce(z, u); }
