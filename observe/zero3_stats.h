// zero3_stats.h: the measurement's types: what the engine's observer writes down, and where Zero3
// keeps it (z->observe). Types only, no functions: zero3.h includes this file so that Zero3 can hold
// the state and Zero3Observer (zero3.h) can name the kinds; the observer that fills them is
// observe/zero3_observe.c (observe/zero3_observe.h says what a trainer reads).
//   the ledger    every collective the engine issues, counted by what it is for, with the bytes
//                 this rank sends under the ring cost model (Zero3Stats, Zero3Ledger);
//   the timeline  when each unit computes, when each collective moves, and when the compute side
//                 waits for one: the exposed communication (Zero3Event).
#pragma once
#include <stddef.h>

// ---- the collective ledger ---------------------------------------------------------------------
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
