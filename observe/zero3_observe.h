// zero3_observe.h: what the engine measures, kept apart from what it does (zero3_observe.c).
//
// zero3.c is the ZeRO mechanism; this is the instrument panel beside it:
//   the ledger    every collective the engine issues, counted by what it is for, with the bytes of
//                 its buffer this rank hands the other ranks (no cost model: the theory prices the
//                 same collectives with zero3_ring_cost, and a ring sends exactly those bytes)
//                 (Zero3Stats, Zero3Ledger);
//   the timeline  when each unit computes, when each collective moves, and when the compute side
//                 waits for one: the exposed communication (Zero3Event, zero3_timeline_read);
//   the theory    the same ledger and the model-state bytes worked out from the stage table alone,
//                 to set beside what the engine counted (zero3_theory_*).
// The mechanism reports to it through a table of hooks, one where a phase happens (zero3.h's
// Zero3Observer: a collective issued, a wait begun and ended, the caller's compute begun and ended).
// ZERO3_OBSERVER is that table: whoever builds an engine hands it in as Zero3Config.observer, the
// way the backend is handed in, and reads the figures here. The arrow runs one way: this file uses
// the engine (zero3.h); zero3.c knows only the table's type and the measurement types zero3.h declares.
#pragma once
#include "../zero3.h"

#ifdef __cplusplus
extern "C" {
#endif

// The hooks that fill z->observe: install as Zero3Config.observer (NULL: nothing is measured).
extern const Zero3Observer ZERO3_OBSERVER;

extern const char *const ZERO3_COLL_NAMES[ZERO3_COLL_KINDS];   // "fwd_gather", ...
// 1 for the kinds that all-reduce (all_reduce, replica_reduce, norm: zero3_ring_cost's all_reduce),
// 0 for one pass (the gathers, the reduce-scatter, qgZ's all-to-alls).
int zero3_coll_all_reduces(Zero3Collective kind);
// The ledger row of a reduction the policy answers (zero3_reduction_for): all_reduce,
// reduce_scatter, qg_intra (qgZ's first hop); ZERO3_COLL_KINDS for ZERO3_REDUCE_NONE.
Zero3Collective zero3_reduction_row(Zero3ReduceHow how);

// ---- what a trainer reads ----------------------------------------------------------------------
// The timeline of the step so far: reads the stamps (once per step, after the step's work) into
// the events' seconds, sums the waits into observe.stats.exposed_s and observe.unit_exposed_s.
// Returns the events (*n of them); NULL when the backend takes no stamps or ZERO3_OBSERVER is not
// the engine's observer.
const Zero3Event *zero3_timeline_read(Zero3 *z, int *n);
size_t zero3_peak_bytes(const Zero3 *z);   // resident + transient peak of this step

// ---- the theory --------------------------------------------------------------------------------
// Model-state bytes per rank that stage `stage` holds for `nparams` parameters on `world` ranks,
// in theory (no padding): working params + grads + (master if separate) + m + v.
double zero3_theory_state_bytes(int stage, double nparams, int world, Zero3DType param_type,
                                Zero3DType grad_type);
// The same in its three parts: parts[0] working params, parts[1] gradients, parts[2] the optimizer
// state (m, v, and the fp32 master when the params are not fp32); each whole or 1/world by the stage.
void zero3_theory_state_parts(int stage, double nparams, int world, Zero3DType param_type, Zero3DType grad_type,
                              double parts[3]);
// This run's model-state bytes per rank in theory (no padding), from every unit's own layout (a
// persistent unit whole, the rest per the stage, sharded over the shard group).
double zero3_theory_run_state_bytes(const Zero3 *z);
// Communication per step in theory, bytes this rank sends (ring model), for ONE micro-step and
// without the norm's 16 bytes: 2 units of traffic for stages 0-2, 3 for stage 3.
double zero3_theory_comm_bytes(int stage, double nparams, int world, Zero3DType param_type,
                               Zero3DType grad_type);
// The collective ledger in theory, for a step of A micro-steps: what the engine will count. Which
// collective each unit gets is the engine's own policy (zero3.h: zero3_gather_for,
// zero3_reduction_for, zero3_gathers_after_step), asked for each of the fwd_gathers[u] gathers of
// unit u in every micro-step's forward and bwd_gathers[u] in its backward (the passes know how
// often: gpt2_gathers_per_pass records them) and for each micro-step's reduction; this prices the
// answers under the ring model.
// Uses the units of z (their padded sizes for z's world) and HSDP's replica groups (replica_reduce:
// each unit's reduced span all-reduced across them). stage 0..3: every unit as that stage lays it
// out (the what-if table); stage -1: this run, each unit's own layout (persistent units DDP's row).
void zero3_theory_ledger(const Zero3 *z, int stage, int micro_steps, Zero3DType param_type,
                         Zero3DType grad_type, const int *fwd_gathers, const int *bwd_gathers,
                         Zero3Ledger *out);
// The same for a bare parameter count, as one unit gathered once per pass (bytes only: the counts
// depend on how the model is cut into units), sharded over `world` ranks in each of `replicas` groups.
void zero3_theory_ledger_params(int stage, double nparams, int world, int replicas, int micro_steps,
                                Zero3DType param_type, Zero3DType grad_type, Zero3Ledger *out);
double zero3_ledger_bytes(const Zero3Ledger *l);   // sum of the rows
// The backward's prefetch in theory (zero3.h's Zero3BackwardPrefetch, -bp) at prefetch depth d, for
// a unit computing its gradients between two others that are gathered for the backward:
//   zero3_theory_backward_ahead  the units after it whose gathers are in flight or done meanwhile:
//                                pre d (started before its compute), post d - 1 (its own post_backward
//                                starts the d-th), 0 at d = 0;
//   zero3_theory_backward_live   the gathered units live meanwhile: itself + ahead (pre d + 1, post d);
//   zero3_theory_backward_overlap how its successor's gather meets the link and the compute (the
//                                planner's time model reads it).
typedef enum {
    ZERO3_BWD_GATHER_WAITED,         // no prefetch: issued when needed, behind the reduction issued
                                     // just before it on the link, both waited for
    ZERO3_BWD_GATHER_AFTER_COMPUTE,  // post at depth 1: issued once the unit before has computed, ahead of
                                     // its reduction: the gather waited for, the reduction behind compute
    ZERO3_BWD_GATHER_BEHIND_COMPUTE, // in flight while the unit before computes: hidden when that compute
                                     // covers it and the reduction ahead of it on the link
} Zero3BackwardOverlap;
int zero3_theory_backward_ahead(int prefetch_depth, Zero3BackwardPrefetch bp);
int zero3_theory_backward_live(int prefetch_depth, Zero3BackwardPrefetch bp);
Zero3BackwardOverlap zero3_theory_backward_overlap(int prefetch_depth, Zero3BackwardPrefetch bp);
// ZeRO++'s settings, for the theory: Zero3Config's three (quant_weights, hp_group, quant_grads) and
// node_size, the node group's size G (0: the whole shard group).
typedef struct { int quant_weights, hp_group, quant_grads, node_size; } Zero3PlusPlus;
// The ledger of ZeRO-3 with ZeRO++'s ideas as pp says, on `world` ranks: for z's units (laid out
// for that world; padded to whole quantization blocks where pp quantizes), or, with z NULL, for a
// bare parameter count as one unit gathered once per pass (the planner's what-if).
void zero3_theory_ledger_zeropp(const Zero3 *z, double nparams, int world, int micro_steps, Zero3DType param_type,
                                Zero3DType grad_type, const int *fwd_gathers, const int *bwd_gathers,
                                const Zero3PlusPlus *pp, Zero3Ledger *out);

#ifdef __cplusplus
}
#endif
