// zero3.h: a device-agnostic ZeRO engine (stages 0-3), the heart of this project.
//
// The model is described to the engine as a list of *units*: groups of tensors that are gathered
// together (for GPT-2: the embedding, one unit per transformer block, the final layernorm). Each unit
// is one flat buffer with its tensors at fixed, aligned offsets, padded so that it divides into
// `world` equal shards. Rank r owns the contiguous slice [r*S, (r+1)*S) of every unit.
//
// What each rank keeps resident depends on the stage (docs/DESIGN.md section 2). zero3.c holds this
// table as data (ZERO3_STAGE_LAYOUT) and every decision consults it, never the stage number:
//
//   stage | params          | grads           | master, m, v | after a unit's backward | after step
//   ------+-----------------+-----------------+--------------+-------------------------+------------
//     0   | full            | full            | full         | all-reduce (last micro) | -
//     1   | full            | full            | 1/N          | reduce-scatter (last)   | all-gather params
//     2   | full            | 1/N             | 1/N          | reduce-scatter, free    | all-gather params
//     3   | 1/N             | 1/N             | 1/N          | reduce-scatter, free    | - (next forward gathers)
//
// The trainer drives one training step as the textbook pseudocode reads (host/model.c does exactly
// this for GPT-2; the four phase verbs are FSDP2's pre/post forward/backward):
//
//   zero3_step_begin(z);
//   for each micro-step k:
//     zero3_micro_begin(z, k, A, ZERO3_PASS_TRAIN);
//     forward:  for each unit u:        w = zero3_pre_forward(z, u);  ...compute...;  zero3_post_forward(z, u);
//     backward: for each unit u, reversed:
//                                       b = zero3_pre_backward(z, u); ...b.grads += ...; zero3_post_backward(z, u);
//   norm = zero3_grad_norm(z);                       // one all-reduce of one number
//   zero3_optimizer_step(z, lr, ..., clip_coef, t);  // AdamW on the local shard only
//
// pre_forward = gather (wait for it, then prefetch the next units); post_forward = release;
// pre_backward = gather + a gradient buffer; post_backward = reduce the gradients, release. The
// building blocks (zero3_gather, zero3_release, zero3_grads, zero3_reduce_grads) are public too, for
// a unit used across phases (GPT-2's tied embedding: see host/model.c).
//
// Prefetch follows a schedule the engine records itself: the first pass of each kind writes down
// the order in which units are gathered, and later passes gather ahead along it (FSDP2 records the
// forward order and replays it reversed for the backward). So the engine knows nothing of GPT-2.
//
// zero3.c holds no MPI and no CUDA: collectives, memory and shard math come from a Zero3Backend that
// the trainer supplies (cpu/backend_cpu.c: MPI + C loops; gpu/backend_nccl.cuh: NCCL + CUDA kernels).
#pragma once
#include <stddef.h>
#include <stdint.h>

// zero3.c is C (compiled by gcc and linked); C++ callers (the CUDA trainer) see C linkage.
#ifdef __cplusplus
extern "C" {
#endif

#define ZERO3_MAX_TENSORS 96   // tensors in one unit (GPT-2: 12 per block, up to 8 blocks a unit)
#define ZERO3_MAX_UNITS 2100   // GPT-2: up to 1024 blocks split in two, embedding, head
#define ZERO3_MAX_POOL 64      // cached transient buffers (gathered params, full grads)
#define ZERO3_MAX_INFLIGHT 8   // outstanding reduce collectives
#define ZERO3_GATHER_BATCH 16  // stages 1-2: post-step all-gathers in flight at once

typedef enum { ZERO3_F32 = 0, ZERO3_BF16 = 1 } Zero3DType;
static inline size_t zero3_dtype_size(Zero3DType t) { return t == ZERO3_BF16 ? 2 : 4; }

// One piece of the optimizer's work: n consecutive elements of one tensor inside this rank's
// optimizer span (a shard boundary may cut a tensor, so a piece may start or end mid-tensor).
// master, m, v are fp32; grad and params are in the adamw call's grad_type and param_type; params
// == master when the working params are the fp32 master itself. The decay mask is data: the
// weight decay of the piece's tensor, 0 for those that are not decayed (biases, layernorms).
typedef struct Zero3AdamSegment {
    float *master, *m, *v;
    const void *grad;
    void *params;
    size_t n;
    float weight_decay;
} Zero3AdamSegment;

// ----------------------------------------------------------------------------------------------
// The backend: everything device- or transport-specific. Counts are elements of the given dtype.
// Asynchronous collectives return an opaque handle; `wait` makes later work (host code on the CPU,
// the compute stream on the GPU) see the result. A buffer handed to a collective must not be
// reused before its handle has been waited on.
typedef struct Zero3Backend {
    void *ctx;
    int rank, world;
    // memory (device memory on the GPU)
    void *(*alloc)(void *ctx, size_t bytes);           // returns zeroed memory, never NULL (dies instead)
    void (*free)(void *ctx, void *ptr);
    void (*zero)(void *ctx, void *ptr, size_t bytes);
    // copies between the engine's memory and host memory (bytes; synchronous, after queued work):
    // how host code (loading, checkpoints, export, tests) reaches buffers that may be on a device
    void (*copy_to_host)(void *ctx, void *host_dst, const void *src, size_t bytes);
    void (*copy_to_device)(void *ctx, void *dst, const void *host_src, size_t bytes);
    // collectives (sum reductions)
    // all_gather: full[r*n .. (r+1)*n) = shard of rank r. In place when shard == full + rank*n.
    void *(*all_gather_start)(void *ctx, const void *shard, void *full, size_t n, Zero3DType t);
    // reduce_scatter: shard = (sum over ranks of full)[rank*n .. (rank+1)*n). In place when
    // shard == full + rank*n (the rest of full is then left undefined).
    void *(*reduce_scatter_start)(void *ctx, const void *full, void *shard, size_t n, Zero3DType t);
    void *(*all_reduce_start)(void *ctx, void *buf, size_t n, Zero3DType t);   // in place
    void (*wait)(void *ctx, void *handle);
    double (*all_reduce_scalar)(void *ctx, double x);                           // blocking sum
    // HSDP (optional; called once, at init, when the shard group is smaller than the world):
    // make_groups(G) splits the ranks into shard groups of G consecutive ranks, after which the
    // collectives above run inside this rank's shard group (all_reduce_scalar stays world-wide),
    // and replica_all_reduce_start sums over the ranks with the same rank % G (in place).
    void (*make_groups)(void *ctx, int group_size);
    void *(*replica_all_reduce_start)(void *ctx, void *buf, size_t n, Zero3DType t);
    // shard math
    // The sum of squares for the global norm, without a host round trip per span: sum_squares_add
    // queues the sum of one span, sum_squares_total returns the sum of every span queued since the
    // last call (one read-back per step on a GPU). Local to this rank and deterministic.
    void (*sum_squares_add)(void *ctx, const void *x, size_t n, Zero3DType t);
    double (*sum_squares_total)(void *ctx);
    void (*add)(void *ctx, void *dst, const void *src, size_t n, Zero3DType t); // dst += src
    void (*cast_from_f32)(void *ctx, void *dst, Zero3DType t, const float *src, size_t n);
    // AdamW on all of a step's segments (Zero3AdamSegment, above) in one call, one kernel launch on
    // a GPU: grads in grad_type scaled by grad_scale (the clip coefficient); writes master, m, v
    // and, where params != master, the working params in param_type. segs is only read during the
    // call (a GPU backend keeps its own copy on the device).
    void (*adamw)(void *ctx, const Zero3AdamSegment *segs, int nsegs, Zero3DType grad_type,
                  Zero3DType param_type, float lr, float beta1, float beta2, float eps, float grad_scale, int t);
    // time (optional: when `stamp` is NULL nothing is timed and the exposed communication reads 0).
    // A stamp is a point on this rank's timeline, kept by the backend under an index (0, 1, ...):
    //   stamp        marks "now" on the compute side: the host clock on the CPU, an event recorded on
    //                the compute stream on the GPU (so it is when the stream gets there, not the host);
    //   comm_stamps  the two stamps the last collective (a *_start or all_reduce_scalar) took on the
    //                communication side, when its transfer began and ended (the CPU's communication
    //                thread, events around it on the GPU's comm stream): valid once it has completed;
    //   stamps_read  fills seconds[0..n) with the times of stamps 0..n-1 (monotonic clock, comparable
    //                across ranks on one machine) once every one of them has happened, then forgets
    //                them all: the next stamp is index 0 again. seconds = NULL only forgets.
    int (*stamp)(void *ctx);
    void (*comm_stamps)(void *ctx, int *begin, int *end);
    void (*stamps_read)(void *ctx, double *seconds, int n);
} Zero3Backend;

// ----------------------------------------------------------------------------------------------
// The stage table as data: where each part of the model state lives.
typedef enum {
    ZERO3_FULL,     // every rank holds all of it
    ZERO3_SHARDED,  // every rank holds its 1/N slice
} Zero3Placement;

typedef struct {
    Zero3Placement params;     // the working parameters between uses
    Zero3Placement grads;      // the gradients between the backward and the optimizer
    Zero3Placement optimizer;  // fp32 master, AdamW m and v: what the optimizer updates
} Zero3StageLayout;

extern const Zero3StageLayout ZERO3_STAGE_LAYOUT[4];

// A unit's working parameters, as FSDP2's sharded/unsharded states: what memory each state holds.
typedef enum {
    ZERO3_PARAMS_RESIDENT,   // params FULL (stages 0-2): the full unit lives in params_full for the run
    ZERO3_PARAMS_SHARDED,    // params SHARDED: only this rank's slice, in params_shard; nothing else
    ZERO3_PARAMS_GATHERING,  // an all-gather into a pool buffer (params_gathered) is in flight
    ZERO3_PARAMS_GATHERED,   // params_gathered holds the full unit, ready to compute with
} Zero3ParamState;

// A unit's gradients during one micro-step.
typedef enum {
    ZERO3_GRADS_IDLE,          // no micro-step gradients in flight (grads FULL: the resident buffer waits)
    ZERO3_GRADS_ACCUMULATING,  // the backward is adding into the full-size buffer (grads_buffer)
    ZERO3_GRADS_REDUCING,      // its reduction is in flight; the buffer may not be touched
} Zero3GradState;

typedef struct {
    char name[32];
    size_t offset;   // in elements, from the start of the unit (aligned)
    size_t numel;
    int decay;       // weight decay applies to this tensor
} Zero3Tensor;

typedef struct {
    char name[32];
    int ntensors;
    Zero3Tensor tensors[ZERO3_MAX_TENSORS];
    size_t numel;          // real parameters (sum of tensor numels)
    size_t padded;         // P: the flat size, a multiple of world*align
    size_t shard;          // S = P / world
    Zero3StageLayout layout;  // where this unit's state lives: its stage's row, or DDP's if persistent
    int persistent;        // below the persistence threshold: kept replicated, never gathered
    size_t params_offset;  // where its params start in params_full (P) or params_shard (S)
    size_t grads_offset;   // where its grads start in grads_full (P) or grads_shard (S)
    size_t optim_offset;   // where its span starts in master, adam_m, adam_v (P or S long)
    // per-step runtime state
    Zero3ParamState param_state;
    void *params_gathered; // GATHERING/GATHERED: the pool buffer holding the full unit
    void *gather_handle;   // GATHERING: the all-gather in flight
    int holders;           // zero3_gather calls not yet released
    int kept;              // gathered in this pass's forward and kept for its backward (-ra 0)
    int backward_done;     // its gradients of this micro-step were handed to the engine
    Zero3GradState grad_state;
    void *grads_buffer;    // ACCUMULATING/REDUCING: the full-size gradient buffer of this micro-step
} Zero3Unit;

typedef enum { ZERO3_PASS_TRAIN = 0, ZERO3_PASS_FORWARD = 1, ZERO3_NUM_PASSES = 2 } Zero3Pass;

typedef struct {
    int stage;              // 0..3
    int prefetch_depth;     // units gathered ahead of use (params SHARDED); 0 = none
    int align;              // tensor offsets and shard sizes are multiples of this many elements
    Zero3DType param_type;  // working parameters (what is gathered and computed with)
    Zero3DType grad_type;   // gradients (what is reduced)
    // the variants (docs/DESIGN.md: FSDP's and DeepSpeed's knobs); all 0 = plain stages
    size_t persist_threshold;       // units with fewer parameters stay replicated (DeepSpeed's
                                    // stage3_param_persistence_threshold); 0 = none
    int keep_params_until_backward; // FSDP's reshard_after_forward = False: no gather in backward
    int shard_group;                // HSDP: shard within groups of this many ranks; 0 = all ranks
} Zero3Config;

typedef struct {
    void *ptr;
    size_t capacity;  // bytes
    size_t used;      // bytes asked for by the current holder, 0 when free
} Zero3PoolEntry;

// The collective ledger: a step's collectives by what they are for.
typedef enum {
    ZERO3_COLL_FWD_GATHER,      // params SHARDED: a unit all-gathered for the forward
    ZERO3_COLL_BWD_GATHER,      // params SHARDED: gathered again for the backward
    ZERO3_COLL_REDUCE_SCATTER,  // gradients reduce-scattered (optimizer SHARDED)
    ZERO3_COLL_ALL_REDUCE,      // gradients all-reduced (optimizer FULL: DDP)
    ZERO3_COLL_STEP_GATHER,     // params FULL, optimizer SHARDED: the updated params all-gathered
    ZERO3_COLL_NORM,            // the global gradient norm: one number all-reduced
    ZERO3_COLL_REPLICA_REDUCE,  // HSDP: the reduced gradients all-reduced across the replica groups
    ZERO3_COLL_KINDS
} Zero3Collective;
extern const char *const ZERO3_COLL_NAMES[ZERO3_COLL_KINDS];   // "fwd_gather", ...

typedef struct {
    double count;   // collectives
    double bytes;   // bytes this rank sends, ring model
} Zero3LedgerRow;
typedef struct { Zero3LedgerRow row[ZERO3_COLL_KINDS]; } Zero3Ledger;

typedef struct {
    // per step (reset by zero3_step_begin); bytes under the ring cost model
    double comm_bytes;          // everything this rank sent
    double comm_gather_bytes, comm_reduce_bytes, comm_scalar_bytes;
    double comm_inter_bytes;    // HSDP: the part sent across replica groups (the rest stays inside one)
    size_t transient_bytes;     // gathered units + full gradient buffers live now
    size_t transient_peak;      // their maximum this step
    int gathers, reduces;       // collectives issued this step
    Zero3Ledger ledger;         // the same collectives, by kind
    double exposed_s;           // time the compute side waited on collectives (zero3_timeline_read)
} Zero3Stats;

// The timeline of a step, as the engine saw it (zero3_timeline_read turns stamps into seconds).
typedef enum {
    ZERO3_EV_FORWARD,     // compute: a unit's forward (from its pre_forward to the next engine call)
    ZERO3_EV_BACKWARD,    // compute: a unit's backward
    ZERO3_EV_OPTIMIZER,   // compute: AdamW on the shard
    ZERO3_EV_WAIT,        // compute side waiting for a collective: the exposed communication
    ZERO3_EV_COLLECTIVE,  // communication side: one collective's transfer
} Zero3EventType;

typedef struct {
    Zero3EventType type;
    int unit;               // -1 for none (the norm, the optimizer)
    Zero3Collective coll;   // WAIT, COLLECTIVE: which one
    double bytes;           // COLLECTIVE: bytes this rank sends (ring model)
    int micro;              // the micro-step
    int stamp_begin, stamp_end;
    double t_begin, t_end;  // seconds, filled by zero3_timeline_read
} Zero3Event;

// The order in which one kind of pass gathers units, recorded during its first run.
typedef struct {
    int *order;      // unit ids
    unsigned char *backward;   // per position: 1 if the gather was for a backward (the ledger's kind)
    int len;
    int recorded;    // 1 once a whole pass was written down; prefetch follows it from then on
} Zero3Schedule;

typedef struct {
    Zero3Config cfg;
    Zero3StageLayout layout;   // ZERO3_STAGE_LAYOUT[cfg.stage] (a persistent unit uses row 0)
    const Zero3Backend *be;
    int rank, world;           // in the shard group (the whole world unless HSDP)
    int replica, replicas;     // HSDP: this rank's replica group and their number (else 0, 1)
    int nunits;
    Zero3Unit *units;          // nunits
    size_t total_numel;        // real parameters in the model
    size_t total_padded;       // sum of P
    size_t total_shard;        // sum of S
    size_t persistent_numel;   // parameters in persistent units
    size_t grads_full_numel, grads_shard_numel, optim_numel;   // sizes of the buffers below
    int grads_complete;        // this step's gradients are reduced (and all-reduced across replicas)
    int master_is_params;      // fp32 working params double as the master copy
    // resident model state (one flat allocation each; NULL where the layout keeps none)
    void *params_full;         // P of every unit whose params are FULL, param_type
    void *params_shard;        // S of every unit whose params are SHARDED, param_type
    float *master;             // fp32 master when params are not fp32: each unit's optimizer span
    float *adam_m, *adam_v;    // each unit's optimizer span: P where FULL, S where SHARDED
    void *grads_full;          // P of every unit whose grads are FULL, grad_type
    void *grads_shard;         // S of every unit whose grads are SHARDED, grad_type
    size_t resident_bytes;     // bytes of the buffers above
    // prefetch: the recorded schedule of each pass kind, and where the current pass is in it
    Zero3Schedule schedule[ZERO3_NUM_PASSES];
    Zero3Pass pass;
    int schedule_pos;          // next position of schedule[pass] (replaying)
    int recording;             // this pass writes schedule[pass] down
    int micro, micro_steps;
    // transient buffers, cached like a caching allocator: allocated on first need, reused after
    Zero3PoolEntry pool[ZERO3_MAX_POOL];
    int pool_count;
    size_t pool_bytes;
    // reductions in flight, oldest first
    void *inflight_handle[ZERO3_MAX_INFLIGHT];
    int inflight_unit[ZERO3_MAX_INFLIGHT];
    int inflight_count;
    Zero3Stats stats;
    double comm_bytes_total;
    int in_backward;           // the phase of the gathers now: set by pre_forward / pre_backward
    // the step's timeline (when the backend has stamps): events, and the compute span now open
    Zero3Event *events;
    int nevents, events_cap;
    int open_span;             // index of the open FORWARD/BACKWARD event, -1 none
    double *stamp_seconds;
    int stamp_cap;
    double *unit_exposed_s;    // per unit: time waited on its collectives this step
    // the optimizer step's segments, one per (unit, tensor) piece of the optimizer span: rebuilt
    // each step into this array (capacity: the tensors of every unit), handed to be->adamw at once
    Zero3AdamSegment *adam_segs;
    int adam_segs_cap;
} Zero3;

// ---- building the layout -----------------------------------------------------------------------
void zero3_init(Zero3 *z, const Zero3Backend *be, const Zero3Config *cfg);
// Adds a unit of ntensors tensors; returns its id. Call before zero3_allocate.
int zero3_add_unit(Zero3 *z, const char *name, int ntensors, const char *const *names,
                   const size_t *numels, const int *decay);
// Fixes the padding and allocates the resident buffers for the stage.
void zero3_allocate(Zero3 *z);
void zero3_free(Zero3 *z);

// ---- parameters: initialization and loading ----------------------------------------------------
// Each rank fills the master copy of the slice it owns, in unit coordinates [r*S, (r+1)*S):
// zero3_owned_master(z, u) points at element r*S of unit u (fp32, S elements, zero padding beyond
// the tensors). After filling every unit, zero3_publish_params spreads the values to where the stage
// needs them (all-gather where params are FULL, cast to the working dtype).
float *zero3_owned_master(Zero3 *z, int u);
void zero3_publish_params(Zero3 *z);
size_t zero3_owned_begin(const Zero3 *z, int u);   // r*S
// The AdamW moments of the owned slice (S elements each), for checkpoints.
float *zero3_owned_m(Zero3 *z, int u);
float *zero3_owned_v(Zero3 *z, int u);
// The range of unit u (unit coordinates) this rank's optimizer state covers: its owned slice, or the
// whole unit where the optimizer is FULL (DDP, a persistent unit).
void zero3_optimizer_range(const Zero3 *z, int u, size_t *begin, size_t *count);

// ---- the step: phase verbs ----------------------------------------------------------------------
typedef struct {
    void *params;   // the full unit's working params
    void *grads;    // the full unit's gradient buffer, to accumulate (+=) into
} Zero3UnitBuffers;

void zero3_step_begin(Zero3 *z);
void zero3_micro_begin(Zero3 *z, int micro, int micro_steps, Zero3Pass pass);
void *zero3_pre_forward(Zero3 *z, int u);              // gather; the params to compute with
void zero3_post_forward(Zero3 *z, int u);              // release
Zero3UnitBuffers zero3_pre_backward(Zero3 *z, int u);  // gather + gradient buffer
void zero3_post_backward(Zero3 *z, int u);             // reduce the gradients, release
double zero3_grad_norm(Zero3 *z);        // global L2 norm of the reduced gradients, same on all ranks
double zero3_local_grad_norm(Zero3 *z);  // the norm of this rank's slice only: the clipping pitfall
void zero3_optimizer_step(Zero3 *z, float lr, float beta1, float beta2, float eps,
                          float weight_decay, float grad_scale, int t);
// After the whole pass, every unit must be released and every reduction finished.
void zero3_check_idle(const Zero3 *z);

// ---- the building blocks of the verbs ----------------------------------------------------------
void *zero3_gather(Zero3 *z, int u);     // the full unit's working params, ready to compute with
void zero3_release(Zero3 *z, int u);
void *zero3_grads(Zero3 *z, int u);      // the full unit's gradient buffer to accumulate (+=) into
void zero3_reduce_grads(Zero3 *z, int u);
void zero3_finish_reductions(Zero3 *z);  // waits for every reduction in flight

// The reduced gradient slice this rank owns for unit u ([r*S, (r+1)*S) in unit coordinates),
// valid after zero3_finish_reductions (used by tests to compare against a reference).
const void *zero3_owned_grads(const Zero3 *z, int u);

// ---- accounting --------------------------------------------------------------------------------
// Model-state bytes per rank that stage `stage` holds for `nparams` parameters on `world` ranks,
// in theory (no padding): working params + grads + (master if separate) + m + v.
double zero3_theory_state_bytes(int stage, double nparams, int world, Zero3DType param_type,
                                Zero3DType grad_type);
// Communication per step in theory, bytes this rank sends (ring model), for ONE micro-step and
// without the norm's 16 bytes: 2 units of traffic for stages 0-2, 3 for stage 3.
double zero3_theory_comm_bytes(int stage, double nparams, int world, Zero3DType param_type,
                               Zero3DType grad_type);
// The collective ledger in theory, for a step of A micro-steps: what the engine will count.
// Grads SHARDED (stages 2-3) reduce-scatter every unit at every micro-step (A per unit); grads
// FULL (stages 0-1) accumulate locally and reduce once per step; params SHARDED gather unit u
// fwd_gathers[u] times in each micro-step's forward and bwd_gathers[u] times in its backward (the
// model knows how often: GPT-2's tied embedding is gathered twice in the forward, not in the
// backward); params FULL with a SHARDED optimizer gather each unit once after AdamW. On one rank
// no data collective is issued (gathers and reductions are the identity there): only the norm.
// Uses the units of z (their padded sizes for z's world). stage 0..3: every unit as that stage lays
// it out (the what-if table); stage -1: this run, each unit's own layout (persistent units DDP's
// row) and HSDP's replica groups (replica_reduce: each unit's reduced span all-reduced across them).
void zero3_theory_ledger(const Zero3 *z, int stage, int micro_steps, Zero3DType param_type,
                         Zero3DType grad_type, const int *fwd_gathers, const int *bwd_gathers,
                         Zero3Ledger *out);
// The same for a bare parameter count, as one unit gathered once per pass (bytes only: the counts
// depend on how the model is cut into units).
void zero3_theory_ledger_params(int stage, double nparams, int world, int micro_steps,
                                Zero3DType param_type, Zero3DType grad_type, Zero3Ledger *out);
double zero3_ledger_bytes(const Zero3Ledger *l);   // sum of the rows

// The timeline of the step so far: reads the stamps (once per step, after the step's work) into
// the events' seconds, sums the waits into stats.exposed_s and unit_exposed_s. Returns the events
// (*n of them); NULL when the backend takes no stamps.
const Zero3Event *zero3_timeline_read(Zero3 *z, int *n);
size_t zero3_peak_bytes(const Zero3 *z);   // resident + transient peak of this step
// This run's model-state bytes per rank in theory (no padding), from every unit's own layout (a
// persistent unit whole, the rest per the stage, sharded over the shard group).
double zero3_theory_run_state_bytes(const Zero3 *z);
int zero3_persistent_units(const Zero3 *z);   // units kept replicated by the persistence threshold

#ifdef __cplusplus
}
#endif
