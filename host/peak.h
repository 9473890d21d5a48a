// host/peak.h: the peak memory of one rank, on paper (the planner's -plan N peak table and -mem M).
//
// A rank's memory is at its most somewhere in the backward, and is the sum of six terms, each worked
// out here from the model's shapes (GPT-2: L blocks of width C, NH heads, vocabulary Vp, maxT; the
// units as -wrap cuts them) and the run's flags, never from the code that allocates them:
//
//   term           what it is                                            bytes per rank
//   model state    params + grads + master, m, v, as the stage shards    16 psi (/N where sharded)
//   gathered       the units' full params held at the busiest moment     units x p
//   gradients      the full-size gradient buffers held then              units x g
//   fragmentation  what the buffer pool keeps beyond that moment: each   pool reserve - the two above
//                  size of buffer as many times as the step ever holds
//                  it at once (best fit hands a freed buffer to the next
//                  request of its size, so the pool never shrinks)
//   activations    what the CPU trainer keeps for the backward, fp32     4 B T (L per-layer + the rest)
//   MPI scratch    a sum's parts (bf16, and fp32 on one machine: an      the largest unit's gradients,
//                  all-to-all, each rank adding its own) in one buffer   once, on every rank; fp32
//                  grown to the largest unit; fp32 across machines:      across machines: 1 x (all-
//                  Open MPI's non-blocking reduction (libnbc) on a rank  reduce) or 2 x (a reduce-
//                  with children in its binomial tree (rank 0, the root, scatter on 3+ ranks) on rank
//                  the most) copies the whole unit it reduces            0, fewer elsewhere
//
// The busiest moment of ZeRO-3 (-ra 1) on a GPT-2 is the LM head's backward, where the tied
// embedding is held gathered with its full gradient buffer, or a block's backward: the embedding's
// gradient buffer (open from the LM head to the encoder), the block's params and gradients, the
// -pd units gathered ahead and the gradients of the unit above still being reduced. -ra 0 keeps
// every unit gathered from its forward to its backward. Stage 2 holds only the gradient buffers;
// stages 0-1 and one rank hold nothing in the pool (their buffers are the resident state).
#pragma once
#include "gpt2.h"

#ifdef __cplusplus
extern "C" {
#endif

typedef struct {
    GPT2Config cfg;                  // the model's shape, cfg.wrap the unit granularity
    int B, T;                        // -b -t
    int world;                       // ranks sharding the state (the shard group: -hs G, else N)
    int replicas;                    // HSDP's replica groups (N / G; 1 without -hs)
    int stage;                       // 0..3
    int prefetch_depth, reshard_after_forward, recompute;   // -pd -ra -rc
    Zero3BackwardPrefetch backward_prefetch;   // -bp pre|post: when a unit's backward gathers ahead
    int param_bytes, grad_bytes;     // 4 and 4 (fp32), 2 and 2 (-p bf16)
    int one_machine;                 // every rank on one machine (-rpn unset or >= N): who sums (proc/mpi_sum.h)
    int rank;                        // the rank whose peak it is (0 unless given: the root of MPI's reductions)
} PeakRun;

typedef enum { PEAK_STATE, PEAK_GATHERED, PEAK_GRADS, PEAK_FRAGMENTATION, PEAK_ACTIVATIONS, PEAK_SCRATCH, PEAK_TERMS } PeakTerm;
extern const char *const PEAK_TERM_NAMES[PEAK_TERMS];   // "model state", ...

typedef struct {
    double bytes[PEAK_TERMS];   // each term, bytes per rank
    double total;               // their sum
    const char *moment;         // where the pool holds the most: "LM head backward", ...
} PeakBytes;

// The peak of one rank of run r, term by term.
PeakBytes peak_bytes(const PeakRun *r);
// The engine's own buffers of a peak: model state, gathered units, gradient buffers (the pool's
// reserve beyond them, the activations and MPI's copies are the process's, not the engine's).
double peak_engine_bytes(const PeakBytes *b);
// The largest unit's parameters (the embedding, or a -wrap K unit of blocks): the size of each of the
// staging buffers a stream of units through memory holds (-oo disk).
double peak_largest_unit(const GPT2Config *c);
double peak_slot_elements(const GPT2Config *c, int slots);   // what -os slots hold, in elements
// The activations the CPU trainer keeps for the backward (fp32), with -rc recompute or without.
double peak_activation_bytes(const GPT2Config *c, int B, int T, int recompute);

#ifdef __cplusplus
}
#endif
