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
// The trainer drives one training step as the textbook pseudocode reads (host/passes.c does exactly
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
// That is the real order: AdamW after the whole backward, because global clipping scales every
// unit's update by the norm of all of them. Without clipping (-gc 0) the textbook's stage-3 order
// is exact too, and -ua 1 runs it: each unit's shard updated as soon as its gradients are final.
//
//   zero3_step_begin(z);
//   zero3_update_in_backward(z, lr, ..., t);         // arms it: no clip coefficient to wait for
//   for each micro-step k: the forward and backward above, and in the last one's backward:
//     for each unit u, reversed: ...; zero3_post_backward(z, u);
//                                       // u's reduce-scatter completes -> AdamW on u's shard now
//   norm = zero3_grad_norm(z);                       // only reported: nothing waits for it
//   zero3_optimizer_step(z, ...);                    // every unit updated already: the step's end
//
// A step may also be given up between two micro-steps (a stop signal): zero3_step_abandon(z) puts
// every unit back at rest, and the model and optimizer state stay those of the last whole step.
//
// pre_forward = gather for the forward (wait for it, then prefetch the next units); post_forward =
// release (or, -ra 0, keep for the backward); pre_backward = gather for the backward + a gradient
// buffer (and the prefetch of the next units, -bp pre: FSDP's BACKWARD_PRE); post_backward = reduce
// the gradients, release (-bp post: release, prefetch, then reduce). The building blocks (zero3_gather, told its
// phase; zero3_release, zero3_grads, zero3_reduce_grads) are public too, for a unit used across
// phases (GPT-2's tied embedding: see host/passes.c). Each verb moves a unit through the states of
// the two tables of section 2 (its params: SHARDED, GATHERING, GATHERED, KEPT, or RESIDENT; its
// gradients: IDLE, ACCUMULATING, REDUCING), each machine through one checked setter; which
// collective a gather or a reduction issues is the policy's answer (zero3_gather_for,
// zero3_reduction_for: one definition, which the theory asks too).
//
// Prefetch follows a schedule the engine records itself: the first pass of each kind writes down
// the order in which units are gathered (RECORDING), and later passes gather ahead along it
// (RECORDED; FSDP2 records the forward order and replays it reversed for the backward). A departure
// makes it UNRECORDED: no prefetch, and the next pass records. So the engine knows nothing of GPT-2.
//
// Where the optimizer state lives between steps is a placement beside the stage table, not a stage:
// in memory (the resident buffers), in the backend's host memory (ZERO3_IN_HOST, -oo host: a GPU's
// pinned host memory, AdamW run there by the backend's host_adamw), or on disk
// (Zero3Config.optimizer_medium = ZERO3_ON_DISK, -oo disk), where zero3_optimizer_step streams it
// unit by unit through zero3_offload.c; at stage 3 the params shard too (params_medium, -op disk),
// read before each gather. zero3_offload.h draws the picture; zero3_optimizer_medium is the one
// place that decides the optimizer's. The numbers are the same; only the memory that holds them changes.
//
// zero3.c holds no MPI and no CUDA: collectives, memory and shard math come from a Zero3Backend that
// the trainer supplies (cpu/backend_cpu.c: MPI + C loops; gpu/backend_nccl.cuh: NCCL + CUDA kernels).
//
// ZeRO++ (docs/zeropp.md; Zero3Config's quant_weights, hp_group, quant_grads) changes two building
// blocks and nothing else: how a unit is gathered (int8 blocks, or from the node group's secondary
// shards in the backward) and how its gradients are reduced (two quantized all-to-all hops), each
// idea a small function in zero3.c's "ZeRO++" section, one call from the gather and the reduction.
//
// zero3.c is the lifecycle alone, in the order a step runs it: the phase verbs, the unit's state
// machines, the gather and release, the reductions, the step's end (norm, optimizer), then init and
// allocation, the pool, the schedule, one rank's special case and ZeRO++. What the engine measures
// lives beside it in observe/zero3_observe.c (declared in observe/zero3_observe.h): the collective
// ledger, the timeline of compute, transfers and waits, and the theory to compare them with. It
// reaches the engine as a second table, a Zero3Observer handed in through Zero3Config.observer like
// the backend: the mechanism calls one hook of it where a phase happens (a collective issued, a wait,
// a compute span) and never reads anything back, so a NULL observer (nothing measured) trains
// bitwise the same.
//
// This file, in the same order: 1 the stage table, 2 the unit's two state machines, 3 the API (the
// verbs first), 4 the policy, 5 the configuration, 6 the backend seam, 7 the measurement's types,
// 8 the engine's state, 9 ZeRO++'s quantization, 10 the link costs.
#pragma once
#include <math.h>
#include <stddef.h>
#include <stdint.h>
#include "zero3_offload.h"   // where the optimizer shard lives (Zero3Medium)

// zero3.c is C (compiled by gcc and linked); C++ callers (the CUDA trainer) see C linkage.
#ifdef __cplusplus
extern "C" {
#endif

// ================================================================================================
// 1. The stage table as data: where each part of the model state lives (the table above).
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

// ================================================================================================
// 2. A unit's two state machines: what it holds, and how it moves. The verbs below move a unit
// through them; the one coupling is -ra 0's KEPT (the params wait for the gradients' hand-over).

// A unit's params, as FSDP2's ShardedState (_fsdp_param.py): one state names every case, by the
// memory it holds. Every change of state goes through one function (zero3.c's set_params_state),
// which in check mode (ZERO3_CHECK_STEPS) stops on a move the table below does not list (zero3.c's
// PARAM_MOVES holds it as data).
//
//   state      | memory it holds, besides the resident buffers       | moves to
//   -----------+------------------------------------------------------+----------------------------
//   RESIDENT   | params FULL (stages 0-2, persistent units): the unit  | - (never moves)
//              | lives whole in params_full for the run                |
//   SHARDED    | this rank's slice in params_shard (-op disk: its      | GATHERING; GATHERED (one rank)
//              |   record in the params file); nothing else            |
//   GATHERING  | + a pool buffer (params_gathered) an all-gather is    | GATHERED
//              |   filling (gather_handle; qwZ: gather_packed too)     |
//   GATHERED   | + params_gathered holds the full unit; `holders`      | SHARDED (freed); KEPT
//              |   callers use it                                      |
//   KEPT       | + params_gathered, held past its forward for this     | GATHERED (its gradients
//              |   micro-step's backward (-ra 0), whatever the holders |   handed over)
typedef enum {
    ZERO3_PARAMS_RESIDENT,
    ZERO3_PARAMS_SHARDED,
    ZERO3_PARAMS_GATHERING,
    ZERO3_PARAMS_GATHERED,
    ZERO3_PARAMS_KEPT,
    ZERO3_PARAMS_STATES
} Zero3ParamState;

// A unit's gradients during one micro-step: the second resource a unit holds, with a life of its
// own (a unit may accumulate while its params are SHARDED: a tied embedding). Every change goes
// through one function too (zero3.c's set_grads_state, checked against GRAD_MOVES like the params).
//   state        | memory it holds                                     | moves to
//   -------------+-----------------------------------------------------+-------------------------
//   IDLE         | nothing for this micro-step (grads FULL: the        | ACCUMULATING
//                |   resident buffer waits)                            |
//   ACCUMULATING | grads_buffer: the full-size buffer the backward     | REDUCING; IDLE (no
//                |   adds into (a pool buffer where grads are SHARDED) |   collective in flight)
//   REDUCING     | grads_buffer, read by the reduction in flight: it   | IDLE
//                |   may not be touched                                |
// Where the two couple (-ra 0): the gradients leaving ACCUMULATING (zero3_reduce_grads) move KEPT
// params to GATHERED; zero3.c's "KEPT" part holds both sides of it, and no gradient move sets a
// params state.
typedef enum {
    ZERO3_GRADS_IDLE,
    ZERO3_GRADS_ACCUMULATING,
    ZERO3_GRADS_REDUCING,
    ZERO3_GRADS_STATES
} Zero3GradState;

// The moves the tables above list (1) or not (0): the data both setters check in check mode.
int zero3_params_move_listed(Zero3ParamState from, Zero3ParamState to);
int zero3_grads_move_listed(Zero3GradState from, Zero3GradState to);

// The phase a gather serves: the caller says it (zero3_gather's argument); the engine remembers none.
typedef enum { ZERO3_FOR_FORWARD = 0, ZERO3_FOR_BACKWARD = 1 } Zero3Phase;

// The kind of pass a micro-step runs (each kind records its own prefetch schedule).
typedef enum { ZERO3_PASS_TRAIN = 0, ZERO3_PASS_FORWARD = 1, ZERO3_NUM_PASSES = 2 } Zero3Pass;

// ================================================================================================
// 3. The API: the step's verbs (the pseudocode above), their building blocks, then building the
// layout and loading the params. The types they name are defined further down.
typedef struct Zero3 Zero3;                  // the engine (section 8)
typedef struct Zero3Config Zero3Config;      // what the trainer asks for (section 5)
typedef struct Zero3Backend Zero3Backend;    // the device and transport (section 6)
typedef struct Zero3Observer Zero3Observer;  // what measures the engine (section 7)
typedef struct Zero3Links Zero3Links;        // the ring model's links (section 10)

// ---- the step: phase verbs ----------------------------------------------------------------------
typedef struct {
    void *params;   // the full unit's working params
    void *grads;    // the full unit's gradient buffer, to accumulate (+=) into
} Zero3UnitBuffers;

void zero3_step_begin(Zero3 *z);
void zero3_micro_begin(Zero3 *z, int micro, int micro_steps, Zero3Pass pass);
// A step given up between two micro-steps (a stop signal): every unit back at rest, its partial
// gradients left for the next zero3_step_begin to zero; params and optimizer state are the last
// whole step's.
void zero3_step_abandon(Zero3 *z);
void *zero3_pre_forward(Zero3 *z, int u);              // gather; the params to compute with
void zero3_post_forward(Zero3 *z, int u);              // release
Zero3UnitBuffers zero3_pre_backward(Zero3 *z, int u);  // gather + gradient buffer
void zero3_post_backward(Zero3 *z, int u);             // reduce the gradients, release
double zero3_grad_norm(Zero3 *z);        // global L2 norm of the reduced gradients, same on all ranks
double zero3_local_grad_norm(Zero3 *z);  // the norm of this rank's slice only: the clipping pitfall
void zero3_optimizer_step(Zero3 *z, float lr, float beta1, float beta2, float eps,
                          float weight_decay, float grad_scale, int t);
// -ua 1, after zero3_step_begin: this step's AdamW (grad_scale 1: no clipping) runs inside the
// backward, each unit's once its last micro-step's reduction completes; zero3_optimizer_step then
// runs no AdamW, only the step's end (stages 1-2's gathers of the updated params). Bitwise the
// update of zero3_optimizer_step. The optimizer state and params in memory, no HSDP (zero3.c says why).
void zero3_update_in_backward(Zero3 *z, float lr, float beta1, float beta2, float eps, float weight_decay, int t);
// After the whole pass, every unit must be released and every reduction finished: the cheap part of
// zero3_check_step_end's invariant, checked after every step whatever ZERO3_CHECK_STEPS says.
void zero3_check_released(const Zero3 *z);
// The invariant at the end of a step (after zero3_optimizer_step's gathers), checked there when the
// environment sets ZERO3_CHECK_STEPS=1 or the build defines ZERO3_CHECK_STEPS (tests do both): no
// collective in flight (the engine's and the backend's handles), every pool buffer returned, every
// unit at rest as its layout says (params SHARDED or RESIDENT, grads IDLE, no holder). A broken
// invariant stops with zero3_die. (The process's part, its open files, the trainer checks.)
void zero3_check_step_end(Zero3 *z);

// ---- the building blocks of the verbs ----------------------------------------------------------
// The full unit's working params, ready to compute with, gathered for `phase` (the collective the
// policy gives that phase: a backward's may come from hpZ's node group).
void *zero3_gather(Zero3 *z, int u, Zero3Phase phase);
void zero3_release(Zero3 *z, int u);
void *zero3_grads(Zero3 *z, int u);      // the full unit's gradient buffer to accumulate (+=) into
void zero3_reduce_grads(Zero3 *z, int u);
void zero3_finish_reductions(Zero3 *z);  // waits for every reduction in flight

// The reduced gradient slice this rank owns for unit u ([r*S, (r+1)*S) in unit coordinates),
// valid after zero3_finish_reductions (used by tests to compare against a reference).
const void *zero3_owned_grads(const Zero3 *z, int u);

// ---- building the layout -----------------------------------------------------------------------
void zero3_init(Zero3 *z, const Zero3Backend *be, const Zero3Config *cfg);
// Adds a unit of ntensors tensors; returns its id. Call before zero3_allocate.
int zero3_add_unit(Zero3 *z, const char *name, int ntensors, const char *const *names,
                   const size_t *numels, const int *decay);
// Fixes the padding and allocates the resident buffers for the stage.
void zero3_allocate(Zero3 *z);
void zero3_free(Zero3 *z);
// The store `what` on disk (cfg.optimizer_medium, cfg.params_medium ZERO3_ON_DISK): after
// zero3_allocate, its file in dir reserved and its I/O thread started; nothing where that medium is
// memory. 0, or -1 with err (nothing left on disk); before any use of the state it holds.
int zero3_offload_start(Zero3 *z, Zero3Store what, const char *dir, char *err, size_t errlen);

// ---- parameters: initialization and loading ----------------------------------------------------
// Each rank fills the master copy of the slice it owns, in unit coordinates [r*S, (r+1)*S):
// zero3_owned_master(z, u) points at element r*S of unit u (fp32, S elements, zero padding beyond
// the tensors). After filling every unit, zero3_publish_params spreads the values to where the stage
// needs them (all-gather where params are FULL, cast to the working dtype).
float *zero3_owned_master(Zero3 *z, int u);
void zero3_publish_params(Zero3 *z);
// Where the optimizer state lives: the configured placement as the backend holds it (ZERO3_IN_HOST
// is ZERO3_IN_MEMORY where the backend has no host_alloc: its memory is the host's). The one question
// the allocation, the optimizer step and the publication ask. Its buffers are the backend's memory
// or host memory accordingly: a caller reaches them through copy_to_host / copy_to_device, never a
// collective.
Zero3Medium zero3_optimizer_medium(const Zero3 *z);
size_t zero3_owned_begin(const Zero3 *z, int u);   // r*S
// The AdamW moments of the owned slice (S elements each), for checkpoints.
float *zero3_owned_m(Zero3 *z, int u);
float *zero3_owned_v(Zero3 *z, int u);
// The range of unit u (unit coordinates) this rank's optimizer state covers: its owned slice, or the
// whole unit where the optimizer is FULL (DDP, a persistent unit).
void zero3_optimizer_range(const Zero3 *z, int u, size_t *begin, size_t *count);

// ---- about the layout ----------------------------------------------------------------------------
int zero3_persistent_units(const Zero3 *z);   // units kept replicated by the persistence threshold

// zero3.c and observe/zero3_observe.c stop on a broken invariant (or no host memory) with this line.
void zero3_die(const char *msg);

// ================================================================================================
// 4. The policy: which gather and which reduction a unit gets, and the collectives it issues.
// A step's collectives by what they are for.
typedef enum {
    ZERO3_COLL_FWD_GATHER,      // params SHARDED: a unit all-gathered for the forward
    ZERO3_COLL_BWD_GATHER,      // params SHARDED: gathered again for the backward
    ZERO3_COLL_REDUCE_SCATTER,  // gradients reduce-scattered (optimizer SHARDED)
    ZERO3_COLL_ALL_REDUCE,      // gradients all-reduced (optimizer FULL: DDP)
    ZERO3_COLL_STEP_GATHER,     // params FULL, optimizer SHARDED: the updated params all-gathered
    ZERO3_COLL_NORM,            // the global gradient norm: one number all-reduced
    ZERO3_COLL_REPLICA_REDUCE,  // HSDP: the reduced gradients all-reduced across the replica groups
    ZERO3_COLL_HP_GATHER,       // hpZ: a backward gather inside the node group, from the secondary shards
    ZERO3_COLL_QG_INTRA,        // qgZ: quantized gradients all-to-all inside the node group
    ZERO3_COLL_QG_ACROSS,       // qgZ: the node sums, requantized, all-to-all across node groups
    ZERO3_COLL_KINDS
} Zero3Collective;

// One definition, read by the engine when it issues a collective and by the theory
// (observe/zero3_observe.c) when it counts what the engine will issue: a change of policy is one edit here.
// The facts a decision reads: the unit's placements and the groups it is sharded over, from a run
// (zero3_unit_facts) or from a what-if (the theory's other stage, other world).
typedef struct {
    Zero3StageLayout layout;   // the unit's row of the stage table (DDP's if persistent)
    int world;                 // ranks in the shard group
    int replicas;              // HSDP's replica groups (1: none)
    int quant_weights, hp_group, quant_grads;   // ZeRO++, as Zero3Config has them
} Zero3UnitFacts;

// How a unit's params arrive for one gather, and the ledger's row of the collective (ZERO3_COLL_KINDS
// when none is issued).
typedef enum {
    ZERO3_GATHER_NONE,        // params FULL: the resident unit, nothing gathered
    ZERO3_GATHER_IN_PLACE,    // one rank: the shard is the unit
    ZERO3_GATHER_SHARDS,      // every rank's shard all-gathered (fwd_gather, bwd_gather)
    ZERO3_GATHER_QUANTIZED,   // qwZ: every shard's int8 codes and scales all-gathered, then dequantized
                              // (one rank: quantized in place, no collective)
    ZERO3_GATHER_SECONDARY,   // hpZ: the node group's secondary shards all-gathered (hp_bwd_gather)
} Zero3GatherHow;
typedef struct { Zero3GatherHow how; Zero3Collective kind; } Zero3Gather;

// How a unit's gradients of one micro-step are reduced.
typedef enum {
    ZERO3_REDUCE_NONE,         // no collective now: they accumulate where they are (grads FULL before
                               // the last micro-step; one rank, where a shard is the unit)
    ZERO3_REDUCE_ALL_REDUCE,   // the full buffer all-reduced (optimizer FULL: DDP)
    ZERO3_REDUCE_SCATTER,      // reduce-scattered into the owned slice
    ZERO3_REDUCE_QUANTIZED,    // qgZ: two quantized all-to-all hops, inside the node group, then across
} Zero3ReduceHow;
typedef struct {
    Zero3ReduceHow how;
    int across_replicas;   // HSDP: after this micro-step, the step's end all-reduces the unit's reduced
                           // span across the replica groups (replica_reduce)
} Zero3Reduction;

// The gather a unit gets in `phase`; secondary_fresh: hpZ's secondary shard holds this step's params.
Zero3UnitFacts zero3_unit_facts(const Zero3 *z, int u);   // what the policy reads of unit u in this run
Zero3Gather zero3_gather_for(const Zero3UnitFacts *f, Zero3Phase phase, int secondary_fresh);
// The reduction a unit's gradients get at micro-step `micro` of `micro_steps`.
Zero3Reduction zero3_reduction_for(const Zero3UnitFacts *f, int micro, int micro_steps);
// 1 when the unit's gradients get a collective at every micro-step, not only the last (sharded grads).
int zero3_reduces_every_micro_step(const Zero3UnitFacts *f);
// 1 when the unit's params are all-gathered after the optimizer step (params FULL, optimizer SHARDED).
int zero3_gathers_after_step(const Zero3UnitFacts *f);

// ================================================================================================
// 5. The configuration: the element types, when the backward prefetches, the stage and its variants.
// ZERO3_I8: raw bytes (ZeRO++'s int8 codes with their scales), only ever all-gathered or exchanged.
typedef enum { ZERO3_F32 = 0, ZERO3_BF16 = 1, ZERO3_I8 = 2 } Zero3DType;
static inline size_t zero3_dtype_size(Zero3DType t) { return t == ZERO3_BF16 ? 2 : t == ZERO3_I8 ? 1 : 4; }

// Where the backward's prefetch starts the next units' gathers (FSDP's backward_prefetch; -bp):
//   PRE   in pre_backward, once this unit's params are there: before its gradient compute, so the next
//         gathers move while it computes (prefetch_depth + 1 gathered units live during it);
//   POST  in post_backward, after its gradient compute, once its params are freed and before its
//         gradients' reduction starts: while a unit computes, prefetch_depth gathered units are live
//         (one fewer) and prefetch_depth - 1 gathers are on their way (at depth 1 none: each next
//         gather is waited on whole).
// Forward gathers (and -rc 2's recompute gathers) prefetch when they are made, under either.
typedef enum { ZERO3_BACKWARD_PRE = 0, ZERO3_BACKWARD_POST = 1 } Zero3BackwardPrefetch;
// The rule, one definition for the engine and the theory (zero3_theory_backward_ahead): 1 when a
// gather for `phase` leaves its prefetch to the unit's post_backward (POST, a backward gather).
int zero3_prefetch_after_compute(Zero3BackwardPrefetch bp, Zero3Phase phase);

struct Zero3Config {
    int stage;              // 0..3
    int prefetch_depth;     // units gathered ahead of use (params SHARDED); 0 = none
    Zero3BackwardPrefetch backward_prefetch;   // when the backward gathers ahead (above); 0 = PRE
    int align;              // tensor offsets and shard sizes are multiples of this many elements
    Zero3DType param_type;  // working parameters (what is gathered and computed with)
    Zero3DType grad_type;   // gradients (what is reduced)
    // the variants (docs/DESIGN.md: FSDP's and DeepSpeed's knobs); the plain stages: all 0 but
    // reshard_after_forward, which is 1 (FSDP's default)
    size_t persist_threshold;       // units with fewer parameters stay replicated (DeepSpeed's
                                    // stage3_param_persistence_threshold); 0 = none
    int reshard_after_forward;      // FSDP's: 1 frees a unit after its forward; 0 keeps it gathered
                                    // until its backward (-ra 0), which then needs no gather
    int shard_group;                // HSDP: shard within groups of this many ranks; 0 = all ranks
    // ZeRO++ (docs/zeropp.md), stage 3's params; all 0 = exact ZeRO-3
    int quant_weights;              // qwZ: the params all-gather moves int8 codes and block scales
    int hp_group;                   // hpZ: a secondary shard inside node groups of this many ranks;
                                    // the backward gathers from the node group only
    int quant_grads;                // qgZ: gradients reduced by quantized all-to-all, in the node group
                                    // (-hp's, else the whole shard group), then across node groups
    // where this rank's optimizer state (fp32 master where separate, m, v) lives between steps
    // (zero3_offload.h): ZERO3_IN_MEMORY (the resident buffers), ZERO3_IN_HOST (resident buffers in
    // the backend's host memory, updated there: zero3_optimizer_medium) or ZERO3_ON_DISK (a file,
    // streamed unit by unit during the optimizer step; the trainer calls zero3_offload_start, naming
    // its folder, after zero3_allocate)
    Zero3Medium optimizer_medium;
    // where the params shard (the units whose params are SHARDED: stage 3) lives between its gathers:
    // ZERO3_IN_MEMORY (params_shard) or ZERO3_ON_DISK (a file, read before each gather, streamed in
    // the optimizer step; zero3_offload_start with ZERO3_STORE_PARAMS)
    Zero3Medium params_medium;
    // the unit-sized slots each file on disk stages in memory (at least 3; 0: 3). Past 3 the I/O of a
    // step's last units and of the next step's first runs under the forward and backward
    int offload_slots;
    void (*fail)(const char *msg);  // an I/O fault's one line: ends every rank (never returns); NULL: exit(1)
    const Zero3Observer *observer;  // what measures the engine (observe/zero3_observe.h's ZERO3_OBSERVER);
                                    // NULL = nothing measured, z->observe stays zero
};

// ================================================================================================
// 6. The backend seam: everything device- or transport-specific, as a table of functions.
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

// The backend: everything device- or transport-specific. Counts are elements of the given dtype.
// Asynchronous collectives return an opaque handle; `wait` makes later work (host code on the CPU,
// the compute stream on the GPU) see the result. A buffer handed to a collective must not be
// reused before its handle has been waited on.
struct Zero3Backend {
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
    // ZeRO++ (optional; docs/zeropp.md). make_node_groups(G), called once at init, splits the shard
    // group into node groups of G consecutive ranks and cross groups (the ranks with the same place
    // in their node group). node_all_gather_start is all_gather_start inside the node group;
    // all_to_all_start exchanges `bytes` with every peer of the node group (across = 0) or the cross
    // group (across = 1): send + i*bytes goes to peer i, recv + i*bytes arrives from peer i.
    void (*make_node_groups)(void *ctx, int group_size);
    void *(*node_all_gather_start)(void *ctx, const void *shard, void *full, size_t n, Zero3DType t);
    void *(*all_to_all_start)(void *ctx, const void *send, void *recv, size_t bytes, int across);
    // quantize: n elements of src (type t; n a multiple of ZERO3_QUANT_BLOCK) into a packed span
    // (zero3_quant_bytes(n) bytes, above); dequantize: the packed span's n values into dst (type t),
    // written, or added to what dst holds when accumulate is 1 (the sum taken in fp32)
    void (*quantize)(void *ctx, const void *src, Zero3DType t, size_t n, void *packed);
    void (*dequantize)(void *ctx, const void *packed, size_t n, void *dst, Zero3DType t, int accumulate);
    // shard math
    // The sum of squares for the global norm, without a host round trip per span: sum_squares_add
    // queues the sum of one span, sum_squares_total returns the sum of every span queued since the
    // last call (one read-back per step on a GPU). Local to this rank and deterministic.
    void (*sum_squares_add)(void *ctx, const void *x, size_t n, Zero3DType t);
    double (*sum_squares_total)(void *ctx);
    void (*add)(void *ctx, void *dst, const void *src, size_t n, Zero3DType t); // dst += src
    void (*copy)(void *ctx, void *dst, const void *src, size_t bytes);   // after queued work (a device copy)
    void (*cast_from_f32)(void *ctx, void *dst, Zero3DType t, const float *src, size_t n);
    // AdamW on all of a step's segments (Zero3AdamSegment, above) in one call, one kernel launch on
    // a GPU: grads in grad_type scaled by grad_scale (the clip coefficient); writes master, m, v
    // and, where params != master, the working params in param_type. segs is only read during the
    // call (a GPU backend keeps its own copy on the device).
    void (*adamw)(void *ctx, const Zero3AdamSegment *segs, int nsegs, Zero3DType grad_type,
                  Zero3DType param_type, float lr, float beta1, float beta2, float eps, float grad_scale, int t);
    // The optimizer state in host memory (optional: Zero3Config.optimizer_medium = ZERO3_IN_HOST,
    // -oo host, ZeRO-Offload's placement). Where the backend's memory is not the host's (a GPU's):
    // host_alloc gives zeroed, pinned host memory for the fp32 master (where separate from the
    // params), m and v, and host_free takes it back; host_adamw is adamw on segments whose m, v and
    // separate master are that memory while grad and params stay in alloc's (it brings the gradients
    // to the host, runs the host AdamW there and sends the params back, before it returns).
    // NULL where alloc's memory is host memory already (the CPU's): the state then stays in it.
    void *(*host_alloc)(void *ctx, size_t bytes);
    void (*host_free)(void *ctx, void *ptr);
    void (*host_adamw)(void *ctx, const Zero3AdamSegment *segs, int nsegs, Zero3DType grad_type,
                       Zero3DType param_type, float lr, float beta1, float beta2, float eps, float grad_scale, int t);
    // Optional, with host_adamw: a unit's gradient shard (grads, bytes, in alloc's memory) is final
    // for this step, its last reduction done and nothing to reduce it further; the backend may start
    // its copy to the host now, under the rest of the backward, where host_adamw would make it.
    void (*grads_final)(void *ctx, const void *grads, size_t bytes);
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
    // emulated links (optional: NULL where the backend cannot hold its collectives honestly). From
    // this call on, each collective ends no sooner than the ring model's time over `links`
    // (zero3_links_ring, zero3_ring_cost, zero3_link_seconds) after the moment every rank of its
    // ring could start it; the data it moves is unchanged. Returns 0, or -1 with err saying why not.
    int (*emulate_links)(void *ctx, const Zero3Links *links, char *err, size_t errlen);
    // the collective handles started and not yet waited on (optional: for zero3_check_step_end)
    int (*collectives_in_flight)(void *ctx);
    // the watchdog (optional). collective_timeout: from this call on, a collective not complete
    // timeout_s seconds after it started ends every rank with one error line naming it, its unit
    // (label), the step (at_step) and its peers' nodes; a shorter stall is reported when it ends.
    // label: the unit the collectives started from here on belong to (NULL: none, e.g. a scalar).
    // at_step: the step they belong to (1-based; 0, before the first, until it is called).
    // stop_source: what the backend's interruptible waits (an emulated link's hold) ask, to end early
    // once a stop signal arrived (returns nonzero then).
    // node_name: the host name of a rank's node (NULL where unknown).
    void (*collective_timeout)(void *ctx, double timeout_s);
    void (*label)(void *ctx, const char *unit);
    void (*at_step)(void *ctx, int step);
    void (*stop_source)(void *ctx, int (*stop_requested)(void));
    const char *(*node_name)(void *ctx, int rank);
};

// ================================================================================================
// 7. The measurement's types: what the engine's observer writes down, and where Zero3 keeps it
// (z->observe). Types only: Zero3 holds the state and Zero3Observer (below) names the hooks; the
// observer that fills them is observe/zero3_observe.c (observe/zero3_observe.h says what a trainer
// reads). They live here, not beside the observer, so that the engine includes nothing above it.
//   the ledger    every collective the engine issues (section 4's Zero3Collective), counted by what
//                 it is for, with the bytes this rank sends under the ring cost model (Zero3Stats,
//                 Zero3Ledger);
//   the timeline  when each unit computes, when each collective moves, and when the compute side
//                 waits for one: the exposed communication (Zero3Event).
// ---- the collective ledger ---------------------------------------------------------------------
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
    size_t live_params_peak;    // the most parameters gathered or arriving at once this step (the units'
    int live_units_peak;        // numel), and the most units: what -pd bounds, DeepSpeed's max_live_parameters
    int gathers, reduces;       // collectives issued this step
    Zero3Ledger ledger;         // the same collectives, by kind
    double exposed_s;           // time the compute side waited on collectives (zero3_timeline_read)
} Zero3Stats;

// ---- the timeline ------------------------------------------------------------------------------
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

// The measurement state inside Zero3 (z->observe), written by the observer alone; the engine's
// mechanism never reads it. All zero when no observer is installed.
typedef struct {
    Zero3Stats stats;          // this step's ledger and transient memory (reset by zero3_step_begin)
    double comm_bytes_total;   // stats.comm_bytes summed over every step so far
    double *unit_exposed_s;    // per unit: time waited on its collectives this step
    // the step's timeline (when the backend has stamps): events, the compute span and wait now open
    Zero3Event *events;
    int nevents, events_cap;
    int open_span;             // index of the open FORWARD/BACKWARD/OPTIMIZER event, -1 none
    int open_wait;             // index of the open WAIT event, -1 none
    double *stamp_seconds;     // zero3_timeline_read's seconds of every stamp (stamp_cap long)
    int stamp_cap;
} Zero3Observe;

// ---- the observer ------------------------------------------------------------------------------
// The observer: what the engine reports, one hook where each phase happens. The hooks write into
// z->observe (the types above) and change nothing the mechanism reads. observe/zero3_observe.c's
// ZERO3_OBSERVER is the one the trainers install; a test may install its own, or none.
struct Zero3Observer {
    void (*init)(Zero3 *z);        // zero3_init: the per-unit figures, no span open
    void (*free)(Zero3 *z);        // zero3_free
    void (*step_begin)(Zero3 *z);  // a fresh ledger and timeline; counts the buffers still held
    void (*step_end)(Zero3 *z);    // the optimizer step is done: the step's bytes into the total
    // The caller's compute on unit `unit` (-1 none) begins (end of a pre_forward / pre_backward /
    // the optimizer's start) and ends: every public entry point ends the compute span that is open.
    void (*compute_begin)(Zero3 *z, Zero3EventType type, int unit);
    void (*compute_end)(Zero3 *z);
    // A collective was just started (after its *_start), on a buffer of `buffer_bytes`: the full
    // unit for a gather or a reduction, the reduced span across replicas, the number for the norm.
    void (*collective)(Zero3 *z, int unit, Zero3Collective kind, size_t buffer_bytes);
    // The compute side waits for a collective of unit `unit` (-1 none) between these two.
    void (*wait_begin)(Zero3 *z, int unit, Zero3Collective kind);
    void (*wait_end)(Zero3 *z);
    // The norm's all-reduce of one number, a blocking collective: all of it is a wait.
    void (*norm_begin)(Zero3 *z);
    void (*norm_end)(Zero3 *z);
    // A transient buffer of `bytes` (a gathered unit, a full gradient buffer) taken from / given
    // back to the pool.
    void (*transient_acquired)(Zero3 *z, size_t bytes);
    void (*transient_released)(Zero3 *z, size_t bytes);
};

// ================================================================================================
// 8. The engine's state: the units (their tables' states, section 2), the resident buffers, the
// pool, the schedule. After the measurement's types because Zero3 holds them (z->observe).
#define ZERO3_MAX_TENSORS 96   // tensors in one unit (the trainer groups a few layers' tensors)
#define ZERO3_MAX_UNITS 2100   // units in one model (a deep model split finely)
#define ZERO3_MAX_POOL 64      // cached transient buffers (gathered params, full grads)
#define ZERO3_MAX_INFLIGHT 8   // outstanding reduce collectives
#define ZERO3_GATHER_BATCH 16  // stages 1-2: post-step all-gathers in flight at once

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
    size_t secondary_offset;  // hpZ: where its secondary shard (P / G elements) starts in params_secondary
    // per-step runtime state (the tables above)
    Zero3ParamState param_state;
    int holders;           // GATHERED, KEPT: zero3_gather calls not yet released
    void *params_gathered; // GATHERING, GATHERED, KEPT: the pool buffer holding the full unit
    void *gather_handle;   // GATHERING: the all-gather in flight
    Zero3Gather gather;    // GATHERING: which gather it is (the policy's answer; its ledger row)
    void *gather_packed;   // GATHERING under qwZ: every rank's quantized shard, arriving
    int secondary_fresh;   // hpZ: this rank's secondary shard holds the params of this step
    Zero3GradState grad_state;
    void *grads_buffer;    // ACCUMULATING, REDUCING: the full-size gradient buffer of this micro-step
    int updated;           // -ua 1: this step's AdamW has run on the unit (inside the backward)
} Zero3Unit;

typedef struct {
    void *ptr;
    size_t capacity;  // bytes
    size_t used;      // bytes asked for by the current holder, 0 when free
} Zero3PoolEntry;

// What one kind of pass's schedule is good for:
//   UNRECORDED  nothing usable (at first; after a departure; after a pass too long to write down):
//               no prefetch, and the next pass of this kind records
//   RECORDING   the pass now running writes its gathers down
//   RECORDED    a whole pass was written down: passes of this kind replay it, gathering ahead
typedef enum { ZERO3_SCHEDULE_UNRECORDED = 0, ZERO3_SCHEDULE_RECORDING, ZERO3_SCHEDULE_RECORDED } Zero3ScheduleMode;

// The order in which one kind of pass gathers units, recorded during its first run.
typedef struct {
    int *order;      // unit ids
    unsigned char *backward;   // per position: the Zero3Phase the gather was for
    int len;
    Zero3ScheduleMode mode;
} Zero3PassOrder;

// ---- the engine's state, grouped by what it is ---------------------------------------------------
// The model's size, summed over the units by zero3_allocate.
typedef struct {
    size_t numel;              // real parameters in the model
    size_t padded;             // sum of P
    size_t shard;              // sum of S
    size_t persistent_numel;   // parameters in persistent units
} Zero3Totals;

// The resident model state: one flat allocation each, held for the whole run; NULL where no unit's
// layout keeps that part.
typedef struct {
    void *params_full;         // P of every unit whose params are FULL, param_type
    void *params_shard;        // S of every unit whose params are SHARDED, param_type
    float *master;             // fp32 master when params are not fp32: each unit's optimizer span
    float *adam_m, *adam_v;    // each unit's optimizer span: P where FULL, S where SHARDED
    void *grads_full;          // P of every unit whose grads are FULL, grad_type
    void *grads_shard;         // S of every unit whose grads are SHARDED, grad_type
    void *params_secondary;    // hpZ: P / G of every unit whose params are SHARDED, param_type
    size_t grads_full_numel, grads_shard_numel, optim_numel;   // lengths (elements) of the above
    size_t bytes;              // bytes of every buffer above in the backend's memory (alloc's)
    size_t host_bytes;         // bytes of those in its host memory (host_alloc's: -oo host's master, m, v)
    int master_is_params;      // fp32 working params double as the master copy (master stays NULL)
} Zero3Resident;

// AdamW's arguments for a step whose update runs inside the backward (zero3_update_in_backward).
typedef struct {
    float lr, beta1, beta2, eps, weight_decay;
    int t;
} Zero3AdamWArgs;

// Where the step is: the micro-step, which the reductions consult.
typedef struct {
    int micro, micro_steps;    // the micro-step now running, of how many in this step
    int grads_complete;        // this step's gradients are reduced (and all-reduced across replicas)
    int update_in_backward;    // -ua 1: this step's AdamW runs unit by unit inside the backward
    Zero3AdamWArgs adamw;      // ... with these arguments
    int check_steps;           // ZERO3_CHECK_STEPS=1: every params move against the table, each step's end
                               // against zero3_check_step_end (and the trainer's open files)
    int checked_steps;         // steps whose end zero3_check_step_end has checked
} Zero3StepState;

// The prefetch schedule: the recorded order of each pass kind, and where the current pass is in it.
typedef struct {
    Zero3PassOrder pass_order[ZERO3_NUM_PASSES];
    Zero3Pass pass;            // the kind of the pass now running
    int pos;                   // next position of pass_order[pass] (replaying)
} Zero3Schedule;

// Transient buffers (gathered units, full gradient buffers), cached like a caching allocator:
// allocated on first need, reused after.
typedef struct {
    Zero3PoolEntry entry[ZERO3_MAX_POOL];
    int count;
    size_t bytes;              // what the pool really holds: the sum of the capacities
} Zero3Pool;

// Gradient reductions in flight, oldest first: their handles, units and ledger rows.
typedef struct {
    void *handle[ZERO3_MAX_INFLIGHT];
    int unit[ZERO3_MAX_INFLIGHT];
    Zero3Collective kind[ZERO3_MAX_INFLIGHT];
    int count;
} Zero3Inflight;

// The optimizer step's segments, one per (unit, tensor) piece of the optimizer span: rebuilt each
// step into segs (capacity: the tensors of every unit), handed to be->adamw at once.
typedef struct {
    Zero3AdamSegment *segs;
    int cap;
    int count;   // the segments of the last step (what its be->adamw call updated)
} Zero3AdamWork;

struct Zero3 {
    Zero3Config cfg;
    Zero3StageLayout layout;   // ZERO3_STAGE_LAYOUT[cfg.stage] (a persistent unit uses row 0)
    const Zero3Backend *be;
    int rank, world;           // in the shard group (the whole world unless HSDP)
    int replica, replicas;     // HSDP: this rank's replica group and their number (else 0, 1)
    int node_rank, node_size, nodes;   // ZeRO++: place in the node group, its size, the number of
                                       // node groups in the shard group (else rank, world, 1)
    int nunits;
    Zero3Unit *units;          // nunits
    Zero3Totals totals;        // the model's size
    Zero3Resident resident;    // params, grads, master, m, v: what the stage keeps for the run
    Zero3StepState step;       // the micro-step now, and whether its gradients are complete
    Zero3Schedule schedule;    // prefetch: the recorded gather orders
    Zero3Pool pool;            // transient buffers
    Zero3Inflight inflight;    // reductions in flight
    Zero3AdamWork adam;        // the optimizer step's segments
    Zero3Offload *offload;     // ZERO3_ON_DISK: the optimizer state's file and slots; NULL in memory
    Zero3Offload *params_offload;   // params_medium ZERO3_ON_DISK: the params shard's file and slots
    Zero3Observe observe;      // measurement only, written by cfg.observer: the ledger, the timeline
};

// ================================================================================================
// 9. ZeRO++'s block quantization.
// ---- ZeRO++'s block quantization (docs/zeropp.md), the one definition both backends use ----------
// A span of n elements (n a multiple of the block) is quantized block by block, symmetric int8: each
// block of ZERO3_QUANT_BLOCK elements gets one fp32 scale, amax / 127, and each element the code
// round(x / scale) in [-127, 127], so |x - code * scale| <= scale / 2. A quantized span ("packed")
// is its n codes followed by its n / ZERO3_QUANT_BLOCK scales: zero3_quant_bytes(n) bytes. Blocks
// start at multiples of the block in unit coordinates (a unit's shard is a whole number of blocks:
// zero3_add_unit pads for it), so the quantized model does not depend on the number of ranks.
#define ZERO3_QUANT_BLOCK 256
#define ZERO3_QUANT_MAX 127
#ifdef __CUDACC__
#define ZERO3_HOST_DEVICE __host__ __device__
#else
#define ZERO3_HOST_DEVICE
#endif
static inline size_t zero3_quant_bytes(size_t n) { return n + n / ZERO3_QUANT_BLOCK * sizeof(float); }
static inline ZERO3_HOST_DEVICE float zero3_quant_scale(float amax) { return amax / (float)ZERO3_QUANT_MAX; }
// x's code under `scale` (0 for an all-zero block); rintf rounds half to even on both devices
static inline ZERO3_HOST_DEVICE signed char zero3_quant_code(float x, float scale) {
    if (scale == 0.0f) return 0;
    float q = rintf(x / scale);
    q = q > ZERO3_QUANT_MAX ? ZERO3_QUANT_MAX : q < -ZERO3_QUANT_MAX ? -ZERO3_QUANT_MAX : q;
    return (signed char)q;
}

// ================================================================================================
// 10. The link costs: the ring model's time.
// Links: the ring model's time. The backend table takes them (emulate_links: a slow network on one
// machine); the planner and the measurement use the same three formulas.
// A link: the GB/s each rank sends over it and the latency of one ring step (a hop). gbps <= 0 is an
// unlimited link (no time at all); a collective's time is that of its ring's slowest link.
typedef struct {
    double gbps;        // GB/s (1e9 bytes per second) each rank sends; <= 0: unlimited
    double latency_s;   // seconds per ring step
} Zero3Link;

// The links of a cluster: nodes of node_ranks consecutive ranks (0: every rank on one node), links
// `inside` a node and `across` nodes. A ring that spans ranks of two nodes runs at `across`.
struct Zero3Links {
    Zero3Link inside, across;
    int node_ranks;
};

// The link a ring over the n ranks first, first + stride, ... runs at: `across` when they are not
// all on one node, else `inside`.
static inline const Zero3Link *zero3_links_ring(const Zero3Links *links, int first, int stride, int n) {
    if (links->node_ranks <= 0) return &links->inside;
    const int node = first / links->node_ranks;
    for (int k = 1; k < n; k++)
        if ((first + k * stride) / links->node_ranks != node) return &links->across;
    return &links->inside;
}
// The hops that leave node 0 (ranks 0 .. node_ranks-1) in `rings` rings of one kind, ring j over the
// n ranks j*spacing, j*spacing + stride, ...: each member sends its ring-model bytes to the next
// (the last to the first), so a node's NIC carries, per collective, one rank's sent bytes for each
// hop out of it. A ring inside the node has none; one spread over M nodes, one out of each of them.
static inline int zero3_ring_hops_out_of_node0(int node_ranks, int rings, int spacing, int stride, int n) {
    int hops = 0;
    for (int j = 0; j < rings && n > 1; j++)
        for (int i = 0; i < n; i++) {
            const int from = j * spacing + i * stride, to = j * spacing + ((i + 1) % n) * stride;
            hops += from / node_ranks == 0 && to / node_ranks != 0;
        }
    return hops;
}
// A ring collective over n ranks on a buffer of F bytes (the full buffer: the gathered unit, the
// reduced gradients): the bytes each rank sends and the ring steps it takes. An all-gather or a
// reduce-scatter sends (N-1)/N * F in N-1 steps; an all-reduce (all_reduce = 1: a reduce-scatter
// then an all-gather) twice both. The one definition: the theory, the planner, the time model and
// the emulated links price with it; the measured ledger counts the calls and applies no model.
static inline void zero3_ring_cost(int all_reduce, double F, int n, double *sent_bytes, double *steps) {
    const double times = all_reduce ? 2.0 : 1.0;
    *sent_bytes = n > 1 ? times * (n - 1.0) / n * F : 0.0;
    *steps = n > 1 ? times * (n - 1.0) : 0.0;
}
// The seconds a link needs for `sent_bytes` in `steps` ring steps: sent / rate + steps * latency.
static inline double zero3_link_seconds(const Zero3Link *link, double sent_bytes, double steps) {
    if (link->gbps <= 0.0) return 0.0;
    return sent_bytes / (link->gbps * 1e9) + steps * link->latency_s;
}

#ifdef __cplusplus
}
#endif
