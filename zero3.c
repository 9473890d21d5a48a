// zero3.c: the ZeRO engine. See zero3.h for the picture; this file is the mechanism.
// No MPI, no CUDA: every collective, allocation and shard-math loop goes through z->be.
#include "zero3.h"
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

static void zero3_die(const char *msg) {
    fprintf(stderr, "zero3: internal error: %s\n", msg);
    abort();
}

static size_t round_up(size_t x, size_t m) { return (x + m - 1) / m * m; }

// ------------------------------------------------------------------------------------------------
// Layout

void zero3_init(Zero3 *z, const Zero3Backend *be, const Zero3Config *cfg) {
    memset(z, 0, sizeof(*z));
    z->cfg = *cfg;
    z->be = be;
    z->rank = be->rank;
    z->world = be->world;
    if (cfg->stage < 0 || cfg->stage > 3) zero3_die("stage must be 0..3");
    if (cfg->align < 1) z->cfg.align = 1;
    if (cfg->prefetch_depth < 0) z->cfg.prefetch_depth = 0;
    z->units = calloc(ZERO3_MAX_UNITS, sizeof(Zero3Unit));
    // a training pass gathers each unit at most twice (forward, backward) plus the tied embedding
    z->schedule = calloc(3 * ZERO3_MAX_UNITS, sizeof(int));
    if (!z->units || !z->schedule) zero3_die("out of host memory");
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
    return z->nunits++;
}

void zero3_allocate(Zero3 *z) {
    const Zero3Backend *be = z->be;
    size_t full = 0, shard = 0;
    for (int i = 0; i < z->nunits; i++) {
        z->units[i].full_offset = full;
        z->units[i].shard_offset = shard;
        full += z->units[i].padded;
        shard += z->units[i].shard;
        z->total_numel += z->units[i].numel;
    }
    z->total_padded = full;
    z->total_shard = shard;
    size_t pbytes = zero3_dtype_size(z->cfg.param_type), gbytes = zero3_dtype_size(z->cfg.grad_type);
    int stage = z->cfg.stage;
    size_t optimizer_numel = (stage == 0) ? full : shard;  // what AdamW updates on this rank
    size_t bytes = 0;
    if (stage <= 2) { z->params_full = be->alloc(be->ctx, full * pbytes); bytes += full * pbytes; }
    else { z->params_shard = be->alloc(be->ctx, shard * pbytes); bytes += shard * pbytes; }
    if (!z->master_is_params) {
        z->master = be->alloc(be->ctx, optimizer_numel * sizeof(float));
        bytes += optimizer_numel * sizeof(float);
    }
    z->adam_m = be->alloc(be->ctx, optimizer_numel * sizeof(float));
    z->adam_v = be->alloc(be->ctx, optimizer_numel * sizeof(float));
    bytes += 2 * optimizer_numel * sizeof(float);
    if (stage <= 1) { z->grads_full = be->alloc(be->ctx, full * gbytes); bytes += full * gbytes; }
    else { z->grads_shard = be->alloc(be->ctx, shard * gbytes); bytes += shard * gbytes; }
    z->resident_bytes = bytes;
}

void zero3_free(Zero3 *z) {
    const Zero3Backend *be = z->be;
    void *bufs[] = {z->params_full, z->params_shard, z->master, z->adam_m, z->adam_v,
                    z->grads_full, z->grads_shard};
    for (size_t i = 0; i < sizeof(bufs) / sizeof(bufs[0]); i++)
        if (bufs[i]) be->free(be->ctx, bufs[i]);
    for (int i = 0; i < z->pool_count; i++) be->free(be->ctx, z->pool[i].ptr);
    free(z->units);
    free(z->schedule);
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
    if (z->cfg.stage == 3) return at(z->params_shard, U->shard_offset, z->cfg.param_type);
    return at(z->params_full, U->full_offset + zero3_owned_begin(z, u), z->cfg.param_type);
}

// The optimizer's view of unit u: stage 0 updates the whole unit on every rank (DDP), the other
// stages only the owned slice. Returns the first element, in unit coordinates, and the count.
static void optimizer_span(const Zero3 *z, int u, size_t *begin, size_t *count) {
    const Zero3Unit *U = &z->units[u];
    *begin = (z->cfg.stage == 0) ? 0 : zero3_owned_begin(z, u);
    *count = (z->cfg.stage == 0) ? U->padded : U->shard;
}

// Index of unit u's optimizer span in the flat optimizer-state buffers (master, m, v).
static size_t optimizer_offset(const Zero3 *z, int u) {
    return (z->cfg.stage == 0) ? z->units[u].full_offset : z->units[u].shard_offset;
}

static float *master_span(Zero3 *z, int u) {
    if (z->master_is_params) {
        if (z->cfg.stage == 0) return (float *)at(z->params_full, z->units[u].full_offset, ZERO3_F32);
        return (float *)owned_params(z, u);
    }
    return z->master + optimizer_offset(z, u);
}

float *zero3_owned_master(Zero3 *z, int u) {
    // stage 0 keeps the full unit; the owned slice starts r*S into it
    return master_span(z, u) + (z->cfg.stage == 0 ? zero3_owned_begin(z, u) : 0);
}
float *zero3_owned_m(Zero3 *z, int u) {
    return z->adam_m + optimizer_offset(z, u) + (z->cfg.stage == 0 ? zero3_owned_begin(z, u) : 0);
}
float *zero3_owned_v(Zero3 *z, int u) {
    return z->adam_v + optimizer_offset(z, u) + (z->cfg.stage == 0 ? zero3_owned_begin(z, u) : 0);
}

// The reduced gradients of the optimizer span of unit u.
static void *grads_span(Zero3 *z, int u) {
    const Zero3Unit *U = &z->units[u];
    if (z->cfg.stage == 0) return at(z->grads_full, U->full_offset, z->cfg.grad_type);
    if (z->cfg.stage == 1)
        return at(z->grads_full, U->full_offset + zero3_owned_begin(z, u), z->cfg.grad_type);
    return at(z->grads_shard, U->shard_offset, z->cfg.grad_type);
}

const void *zero3_owned_grads(const Zero3 *z, int u) {
    Zero3 *zz = (Zero3 *)z;
    return at(grads_span(zz, u), z->cfg.stage == 0 ? zero3_owned_begin(z, u) : 0, z->cfg.grad_type);
}

// ------------------------------------------------------------------------------------------------
// Accounting under the ring cost model: an all-gather or reduce-scatter of a full buffer of F bytes
// sends (N-1)/N * F from each rank; an all-reduce sends 2 (N-1)/N * F.

static double ring_fraction(const Zero3 *z) { return (double)(z->world - 1) / (double)z->world; }

static void count_gather(Zero3 *z, size_t full_bytes) {
    double b = ring_fraction(z) * (double)full_bytes;
    z->stats.comm_bytes += b; z->stats.comm_gather_bytes += b; z->stats.gathers++;
}
static void count_reduce(Zero3 *z, size_t full_bytes, int all_reduce) {
    double b = (all_reduce ? 2.0 : 1.0) * ring_fraction(z) * (double)full_bytes;
    z->stats.comm_bytes += b; z->stats.comm_reduce_bytes += b; z->stats.reduces++;
}
static void count_scalar(Zero3 *z) {
    double b = 2.0 * ring_fraction(z) * sizeof(double);
    z->stats.comm_bytes += b; z->stats.comm_scalar_bytes += b;
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
        if (z->cfg.stage == 0) {
            // DDP keeps the full master on every rank: gather the fp32 slices, then cast everything
            float *master_full = master_span(z, u);
            be->wait(be->ctx, be->all_gather_start(be->ctx, master_full + zero3_owned_begin(z, u),
                                                   master_full, U->shard, ZERO3_F32));
            if (!z->master_is_params)
                be->cast_from_f32(be->ctx, at(z->params_full, U->full_offset, z->cfg.param_type),
                                  z->cfg.param_type, master_full, U->padded);
            continue;
        }
        if (!z->master_is_params)
            be->cast_from_f32(be->ctx, owned_params(z, u), z->cfg.param_type, master_span(z, u), U->shard);
        if (z->cfg.stage <= 2) {
            void *full = at(z->params_full, U->full_offset, z->cfg.param_type);
            be->wait(be->ctx, be->all_gather_start(be->ctx, owned_params(z, u), full, U->shard,
                                                   z->cfg.param_type));
        }
    }
}

// ------------------------------------------------------------------------------------------------
// The step

void zero3_step_begin(Zero3 *z) {
    memset(&z->stats, 0, sizeof(z->stats));
    // gradients accumulate over the micro-steps of one step: start them at zero
    const Zero3Backend *be = z->be;
    size_t gbytes = zero3_dtype_size(z->cfg.grad_type);
    if (z->grads_full) be->zero(be->ctx, z->grads_full, z->total_padded * gbytes);
    if (z->grads_shard) be->zero(be->ctx, z->grads_shard, z->total_shard * gbytes);
    for (int i = 0; i < z->pool_count; i++)   // buffers still held across steps (none expected)
        z->stats.transient_bytes += z->pool[i].used;
    z->stats.transient_peak = z->stats.transient_bytes;
}

// The order in which a pass gathers units: forward embedding, blocks, head, embedding again for the
// tied LM head; a training pass then goes back through head and blocks (the embedding stays gathered
// from the LM-head forward through its backward; the encoder backward needs only its gradients).
// Units are numbered embedding = 0, blocks 1..nunits-2, head = nunits-1.
static void build_schedule(Zero3 *z, Zero3Pass pass) {
    int n = 0, head = z->nunits - 1;
    z->schedule[n++] = 0;
    for (int u = 1; u < head; u++) z->schedule[n++] = u;
    if (head > 0) z->schedule[n++] = head;
    z->schedule[n++] = 0;
    if (pass == ZERO3_PASS_TRAIN) {
        if (head > 0) z->schedule[n++] = head;
        for (int u = head - 1; u >= 1; u--) z->schedule[n++] = u;
    }
    z->schedule_len = n;
    z->schedule_pos = 0;
}

void zero3_micro_begin(Zero3 *z, int micro, int micro_steps, Zero3Pass pass) {
    // the previous micro-step's last reductions still read their gradient buffers; the units
    // start a new accumulation now, so let those finish first
    zero3_finish_reductions(z);
    z->micro = micro;
    z->micro_steps = micro_steps;
    build_schedule(z, pass);
}

static void gather_start(Zero3 *z, int u) {
    Zero3Unit *U = &z->units[u];
    const Zero3Backend *be = z->be;
    size_t full_bytes = U->padded * zero3_dtype_size(z->cfg.param_type);
    U->params_gathered = pool_acquire(z, full_bytes);
    U->gather_handle = be->all_gather_start(be->ctx, owned_params(z, u), U->params_gathered,
                                            U->shard, z->cfg.param_type);
    count_gather(z, full_bytes);
}

// Starts the all-gathers of the next prefetch_depth units of the schedule that are neither gathered
// nor on their way. Bounding the depth bounds memory (FSDP's limit_all_gathers, DeepSpeed's
// stage3_max_live_parameters).
static void prefetch(Zero3 *z) {
    for (int k = 0; k < z->cfg.prefetch_depth; k++) {
        int pos = z->schedule_pos + k;
        if (pos >= z->schedule_len) break;
        Zero3Unit *U = &z->units[z->schedule[pos]];
        if (U->params_gathered == NULL) gather_start(z, z->schedule[pos]);
    }
}

void *zero3_gather(Zero3 *z, int u) {
    Zero3Unit *U = &z->units[u];
    if (z->cfg.stage <= 2)   // full params are resident: nothing to gather
        return at(z->params_full, U->full_offset, z->cfg.param_type);
    // follow the schedule (a call off the schedule simply gets no prefetch help)
    if (z->schedule_pos < z->schedule_len && z->schedule[z->schedule_pos] == u) z->schedule_pos++;
    if (U->params_gathered == NULL) gather_start(z, u);   // not prefetched: gather now
    if (U->gather_handle) {
        z->be->wait(z->be->ctx, U->gather_handle);
        U->gather_handle = NULL;
    }
    U->holders++;
    prefetch(z);   // while the caller computes on u, the next units arrive
    return U->params_gathered;
}

void zero3_release(Zero3 *z, int u) {
    Zero3Unit *U = &z->units[u];
    if (z->cfg.stage <= 2) return;
    if (U->holders <= 0) zero3_die("zero3_release of a unit that is not gathered");
    if (--U->holders == 0) {
        pool_release(z, U->params_gathered);
        U->params_gathered = NULL;
    }
}

void *zero3_grads(Zero3 *z, int u) {
    Zero3Unit *U = &z->units[u];
    if (z->cfg.stage <= 1) return at(z->grads_full, U->full_offset, z->cfg.grad_type);
    if (U->grads_buffer == NULL) {   // first touch this micro-step: a fresh zeroed full buffer
        size_t bytes = U->padded * zero3_dtype_size(z->cfg.grad_type);
        U->grads_buffer = pool_acquire(z, bytes);
        z->be->zero(z->be->ctx, U->grads_buffer, bytes);
    }
    return U->grads_buffer;
}

// Retires the oldest reduction in flight; its gradient buffer (stages 2-3) returns to the pool.
static void retire_oldest_reduction(Zero3 *z) {
    z->be->wait(z->be->ctx, z->inflight_handle[0]);
    int u = z->inflight_unit[0];
    if (z->cfg.stage >= 2) {
        pool_release(z, z->units[u].grads_buffer);
        z->units[u].grads_buffer = NULL;
    }
    z->inflight_count--;
    memmove(z->inflight_handle, z->inflight_handle + 1, z->inflight_count * sizeof(void *));
    memmove(z->inflight_unit, z->inflight_unit + 1, z->inflight_count * sizeof(int));
}

void zero3_reduce_grads(Zero3 *z, int u) {
    Zero3Unit *U = &z->units[u];
    const Zero3Backend *be = z->be;
    Zero3DType gt = z->cfg.grad_type;
    size_t full_bytes = U->padded * zero3_dtype_size(gt);
    int last_micro = (z->micro == z->micro_steps - 1);
    void *handle = NULL;
    if (z->cfg.stage <= 1) {
        // full gradients stay resident: accumulate locally, communicate once per step
        if (!last_micro) return;
        void *full = at(z->grads_full, U->full_offset, gt);
        if (z->cfg.stage == 0) {
            handle = be->all_reduce_start(be->ctx, full, U->padded, gt);
            count_reduce(z, full_bytes, 1);
        } else {
            handle = be->reduce_scatter_start(be->ctx, full, grads_span(z, u), U->shard, gt);
            count_reduce(z, full_bytes, 0);
        }
    } else {
        if (U->grads_buffer == NULL) zero3_die("zero3_reduce_grads before zero3_grads");
        // Accumulation without a second shard buffer: each rank adds what its shard holds so far
        // to its own slice of this micro-step's gradients. The reduce-scatter sums that slice over
        // ranks, and only the owner added anything to it, so the result is old shard + new sum.
        if (z->micro > 0)
            be->add(be->ctx, at(U->grads_buffer, zero3_owned_begin(z, u), gt), grads_span(z, u),
                    U->shard, gt);
        handle = be->reduce_scatter_start(be->ctx, U->grads_buffer, grads_span(z, u), U->shard, gt);
        count_reduce(z, full_bytes, 0);
    }
    // Keep a few reductions in flight so they overlap the backward of the next units.
    if (z->inflight_count == ZERO3_MAX_INFLIGHT) retire_oldest_reduction(z);
    z->inflight_handle[z->inflight_count] = handle;
    z->inflight_unit[z->inflight_count] = u;
    z->inflight_count++;
    // stages 2-3 free the full gradients as soon as the reduce-scatter is done with them: bound
    // the number of live gradient buffers to two (this one and the one being computed next)
    if (z->cfg.stage >= 2)
        while (z->inflight_count > 1) retire_oldest_reduction(z);
}

void zero3_finish_reductions(Zero3 *z) {
    while (z->inflight_count > 0) retire_oldest_reduction(z);
}

void zero3_check_idle(const Zero3 *z) {
    for (int u = 0; u < z->nunits; u++) {
        const Zero3Unit *U = &z->units[u];
        if (U->holders || U->gather_handle || U->grads_buffer) {
            fprintf(stderr, "zero3: unit %s still busy (holders %d, gather %s, grads %s)\n", U->name,
                    U->holders, U->gather_handle ? "in flight" : "-", U->grads_buffer ? "held" : "-");
            abort();
        }
        // a prefetched unit nobody asked for is a schedule bug, but harmless: drop it
    }
    if (z->inflight_count) zero3_die("reductions still in flight");
}

// Global gradient norm. Each rank sums the squares of the slice it owns, so every parameter is
// counted exactly once even where the stage keeps replicated gradients (stages 0-1); the padding is
// zero and adds nothing. One all-reduce of one number gives every rank the same norm: a per-rank
// norm would give every rank a different clipping coefficient, and the replicas would drift apart.
double zero3_grad_norm(Zero3 *z) {
    zero3_finish_reductions(z);
    double local = 0.0;
    for (int u = 0; u < z->nunits; u++)
        local += z->be->sum_squares(z->be->ctx, zero3_owned_grads(z, u), z->units[u].shard,
                                    z->cfg.grad_type);
    count_scalar(z);
    return sqrt(z->be->all_reduce_scalar(z->be->ctx, local));
}

// AdamW on the local optimizer span, tensor by tensor so that weight decay applies exactly to the
// matrices even where a shard boundary cuts through a tensor; the padding between and after tensors
// is skipped. No communication, except that stages 1-2 all-gather the updated params afterwards.
void zero3_optimizer_step(Zero3 *z, float lr, float beta1, float beta2, float eps,
                          float weight_decay, float grad_scale, int t) {
    const Zero3Backend *be = z->be;
    zero3_finish_reductions(z);
    for (int u = 0; u < z->nunits; u++) {
        Zero3Unit *U = &z->units[u];
        size_t span_begin, span_count;
        optimizer_span(z, u, &span_begin, &span_count);
        size_t span_end = span_begin + span_count;
        float *master = master_span(z, u);
        float *m = z->adam_m + optimizer_offset(z, u);
        float *v = z->adam_v + optimizer_offset(z, u);
        char *grads = grads_span(z, u);
        char *params = (z->master_is_params) ? (char *)master
                       : (z->cfg.stage == 0) ? at(z->params_full, U->full_offset, z->cfg.param_type)
                                             : (char *)owned_params(z, u);
        for (int i = 0; i < U->ntensors; i++) {
            const Zero3Tensor *T = &U->tensors[i];
            size_t lo = T->offset > span_begin ? T->offset : span_begin;
            size_t hi = T->offset + T->numel < span_end ? T->offset + T->numel : span_end;
            if (lo >= hi) continue;
            size_t k = lo - span_begin;   // index inside the span
            be->adamw(be->ctx, master + k, m + k, v + k, grads + k * zero3_dtype_size(z->cfg.grad_type),
                      z->cfg.grad_type, params + k * zero3_dtype_size(z->cfg.param_type),
                      z->cfg.param_type, hi - lo, lr, beta1, beta2, eps,
                      T->decay ? weight_decay : 0.0f, grad_scale, t);
        }
    }
    if (z->cfg.stage == 1 || z->cfg.stage == 2) {
        // every rank updated its slice; gather them so all ranks hold the new full params
        void *handles[ZERO3_MAX_UNITS];
        for (int u = 0; u < z->nunits; u++) {
            Zero3Unit *U = &z->units[u];
            size_t full_bytes = U->padded * zero3_dtype_size(z->cfg.param_type);
            handles[u] = be->all_gather_start(be->ctx, owned_params(z, u),
                                              at(z->params_full, U->full_offset, z->cfg.param_type),
                                              U->shard, z->cfg.param_type);
            count_gather(z, full_bytes);
        }
        for (int u = 0; u < z->nunits; u++) be->wait(be->ctx, handles[u]);
    }
    z->comm_bytes_total += z->stats.comm_bytes;
}

size_t zero3_peak_bytes(const Zero3 *z) { return z->resident_bytes + z->stats.transient_peak; }

// ------------------------------------------------------------------------------------------------
// Theory: bytes of model state per rank for psi parameters on N ranks. Working params (p bytes),
// gradients (g bytes), and the optimizer state K: m and v (8 bytes) plus an fp32 master copy
// (4 bytes) when the working params are not fp32. Stage 1 shards K, stage 2 also the gradients,
// stage 3 everything.
double zero3_theory_state_bytes(int stage, double psi, int world, Zero3DType param_type,
                                Zero3DType grad_type) {
    double p = (double)zero3_dtype_size(param_type), g = (double)zero3_dtype_size(grad_type);
    double k = 8.0 + (param_type == ZERO3_F32 ? 0.0 : 4.0);
    double n = (double)world;
    switch (stage) {
    case 0: return psi * (p + g + k);
    case 1: return psi * (p + g) + psi * k / n;
    case 2: return psi * p + psi * (g + k) / n;
    default: return psi * (p + g + k) / n;
    }
}

// Ring-model bytes sent per rank per step at A = 1: DDP all-reduces the gradients (2 (N-1)/N G);
// stages 1-2 reduce-scatter them and all-gather the params ((N-1)/N (G + P)); stage 3 gathers the
// params twice (forward, backward) and reduce-scatters once ((N-1)/N (2P + G)): 3 vs 2 units.
double zero3_theory_comm_bytes(int stage, double psi, int world, Zero3DType param_type,
                               Zero3DType grad_type) {
    double f = (double)(world - 1) / (double)world;
    double P = psi * (double)zero3_dtype_size(param_type), G = psi * (double)zero3_dtype_size(grad_type);
    switch (stage) {
    case 0: return 2.0 * f * G;
    case 1:
    case 2: return f * (G + P);
    default: return f * (2.0 * P + G);
    }
}
