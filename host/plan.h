// host/plan.h: the planner (-plan N): ZeRO's memory and communication for N ranks, on paper.
#pragma once
#include "cli.h"
#include "../observe/zero3_observe.h"   // Zero3BackwardOverlap

#ifdef __cplusplus
extern "C" {
#endif

// Prints (rank 0) the plan for a->plan_world ranks and the model of -e (a descriptor, a model
// file's header, or a bare parameter count); reads no data and allocates no model. Returns the
// exit status; a bad -e is one error line on every rank (fatal). align: the trainer's tensor
// alignment in elements (its units are laid out as a run would lay them out).
int plan_main(const TrainArgs *a, int align);

// A run's plan against this machine's memory, at startup before the model state is allocated: the
// peak per rank on paper (host/peak.h, less what -oo / -op move out, plus their staging slots; the
// GPU trainer: only -oo host's state is in host memory) times the ranks on this machine (Open MPI's
// OMPI_COMM_WORLD_LOCAL_SIZE, else all `world`), against MemAvailable in /proc/meminfo: what the
// kernel can hand out now without swapping (page cache it can drop counted in, memory other
// processes hold counted out), which MemTotal is not; MemTotal where the kernel has no MemAvailable.
// Over it: one line with the plan's figures, on every rank (fatal). ZERO3_MEM_CHECK=0 skips it (the
// plan's peak is an estimate; a run that knows better may start anyway); ZERO3_MEMINFO=FILE reads
// FILE instead of /proc/meminfo (a test hook: a planted limit).
void plan_check_machine(const TrainArgs *a, const GPT2Config *cfg, int world);
// The figures it holds against the machine: the peak per rank in host memory (the CPU trainer's
// whole peak; the GPU trainer's -oo host state), and the peak without offload, what offload moves
// out and the staging slots it adds (bytes); and the engine's own buffers at their most (model state,
// gathered units, gradient buffers: what log.csv's mem_engine_peak_bytes counts). For rank `rank`
// of the world (rank 0 holds MPI's copies: host/peak.c).
typedef struct { double per_rank, without, out, slots, engine; } PlanRunPeak;
PlanRunPeak plan_run_peak(const TrainArgs *a, const GPT2Config *cfg, int world, int rank);

// ---- the time model: one step on paper -----------------------------------------------------------
// What it takes: the compute of a step, split into the passes that can hide communication, and the
// ring time of each kind of collective (zero3_link_seconds over the ledger's bytes and steps).
typedef struct {
    int micro_steps;                   // A
    int reduces_every_micro_step;      // the policy reduces every micro-step's gradients (grads SHARDED:
                                       // zero3_reduces_every_micro_step); else the last one only
    int prefetch;                      // forward gathers issued ahead of use (-pd >= 1); 0: each one waited on in full
    Zero3BackwardOverlap bwd_overlap;  // the backward's gathers (-pd with -bp): zero3_theory_backward_overlap
    double fwd_s, bwd_s, other_s;      // compute per step: the forwards, the backwards, the rest (AdamW, the loop)
    double coll_s[ZERO3_COLL_KINDS];   // ring seconds per step of each kind of collective
    double edge_gather_s;              // per micro-step: the first unit's gather, which nothing can hide
    double edge_reduce_s;              // per reducing micro-step: the last unit's reduction, likewise
} PlanStepInput;

// What it answers, per step.
typedef struct {
    double compute_s, comm_s, exposed_s, step_s;
    double fwd_over_s, bwd_over_s;     // the passes' communication beyond their compute (0: prefetch hides it)
    double bwd_waited_s;               // backward gathers waited on in full though the compute could cover them (-bp post at -pd 1)
} PlanStepTime;

// The model: in each micro-step the forward's gathers run behind the forward's compute and the
// backward's gathers and reductions behind the backward's, on one communication stream (a pipeline
// of two stages: what is exposed is the first unit's gather or the last unit's reduction, or the
// communication beyond the compute, whichever is more); without prefetch every gather is waited on
// in full, and -bp post at -pd 1 waits on every backward gather in full while the reductions stay
// behind the compute. The gathers after AdamW, the all-reduce across replica groups and the norm have nothing
// to hide behind. step = compute + exposed.
PlanStepTime plan_predict_step(const PlanStepInput *in);

// The reduction policy's answer the time model reads, for a unit laid out as f says: 1 when the last
// micro-step's reduction is an all-reduce (zero3_reduction_for, zero3_coll_all_reduces; whether every
// micro-step reduces is zero3_reduces_every_micro_step).
int plan_reduction_all_reduces(const Zero3UnitFacts *f);

// The links the flags describe for `world` ranks: -link (or -bw) inside a node, -linkx (or -bwx)
// across nodes (default: the same as inside), nodes of -rpn ranks, else the -hs groups, else one.
void plan_links(const TrainArgs *a, Zero3Links *links);
// Rank 0's ring for collectives of kind `kind` in a run whose shard groups hold `shard` ranks,
// `replicas` groups, `world` ranks: its link, and the ring steps of one collective (*steps).
const Zero3Link *plan_kind_ring(const Zero3Links *links, int kind, int shard, int replicas, int world, double *steps);
// The ring seconds per step of each kind of collective in `ledger` for a run whose shard groups
// hold `shard` ranks, `replicas` groups, `world` ranks (rank 0's rings).
void plan_collective_seconds(const Zero3Ledger *ledger, const Zero3Links *links, int shard, int replicas,
                             int world, double *coll_s);

#ifdef __cplusplus
}
#endif
