// host/predict.h: the planner's time model set beside the run that it models (predict.c).
//
// Every run prints, once its first steps have measured its compute, what the time model
// (plan_predict_step) predicts for this very configuration: compute, communication, exposed
// communication and step time per step, over the links in force (-link/-linkx, emulated by the
// backend; else -bw/-bwx, on paper; else unlimited). At the end it prints the measured values of the
// steps after those beside it. docs/time.md shows the lines and the validation table they make.
//
//   step 0            left out (it records the prefetch schedule, fills the buffer pool)
//   calibration       the next steps (up to 2): compute per step, split into forwards, backwards
//                     and the rest, from rank 0's timeline: the model's only measured input
//   measurement       every later step: compute, communication (the transfers' durations on the
//                     communication lane), exposed communication (the waits), step time
//
// Two predictions are printed. "planner" is plan_predict_step, the -plan table's model: a pass's
// collectives hide behind any of the pass's compute. "replay" drops that assumption: it replays a
// calibration step's own timeline (each compute span as measured, each collective issued where it
// was issued) on one communication stream whose every collective takes its ring time over the
// links, and each wait lasting until the collective it waits for is done in that replay.
#pragma once
#include "cli.h"
#include "plan.h"

#ifdef __cplusplus
extern "C" {
#endif

// Sums over steps of what a step's timeline shows (seconds).
typedef struct {
    double fwd_s, bwd_s, compute_s, comm_s, exposed_s, step_s;
    int steps;
} TimeSums;

typedef struct {
    Zero3Links links;          // the links in force (all unlimited when none were given)
    int emulated;              // the backend holds the collectives for them (-link, -linkx)
    PlanStepInput in;          // this run for the time model; compute filled by the calibration
    double flops_per_step;     // model FLOPs per step per rank, for the measured rate
    int first_step;            // the run's first step (0, or the resumed one): left out
    int calib_steps;           // steps after it that calibrate the compute
    TimeSums calib, measured;
    PlanStepTime predicted;    // the planner's model
    TimeSums replay;           // the calibration steps replayed over the links (compute_s, comm_s, exposed_s, step_s)
    int have_prediction;
    double kind_steps[ZERO3_COLL_KINDS];          // ring steps of one collective of each kind (rank 0's ring)
    const Zero3Link *kind_link[ZERO3_COLL_KINDS];  // ... and the link it runs at
    int rank;
} RunPrediction;

// The links of the flags: the backend emulates -link/-linkx (one error line, every rank, when it
// cannot or when -linkx has no ring to cross). Call after the engine made its groups (zero3_init).
void predict_links(RunPrediction *p, const TrainArgs *a, const Zero3Backend *be);
// This run's configuration for the time model: its collective ledger in theory (per step), its
// micro-steps, the unit every forward gathers first and every backward reduces last.
void predict_configure(RunPrediction *p, const TrainArgs *a, const Zero3 *z, const Zero3Ledger *ledger, int A,
                       int edge_unit, int first_step, int steps, double flops_per_step);
// One line on the links, for the startup report.
void predict_describe_links(const RunPrediction *p, int world, char *buf, size_t n);
// A step's timeline (zero3_timeline_read) and its time: calibrates or measures; prints the
// prediction once calibrated (rank 0).
// t0, t1: the step's start and end (seconds, the timeline's clock).
void predict_step(RunPrediction *p, int step, const Zero3Event *ev, int n, double t0, double t1, double exposed_s);
// At the end (rank 0): the prediction and the measured means beside it.
void predict_report(const RunPrediction *p);

#ifdef __cplusplus
}
#endif
