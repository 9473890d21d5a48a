// host/plan.h: the planner (-plan N): ZeRO's memory and communication for N ranks, on paper.
#pragma once
#include "train.h"

#ifdef __cplusplus
extern "C" {
#endif

// Prints (rank 0) the plan for a->plan_world ranks and the model of -e (a descriptor, a model
// file's header, or a bare parameter count); reads no data and allocates no model. Returns the
// exit status; a bad -e is one error line on every rank (fatal).
int plan_main(const TrainArgs *a, const TrainBuild *build);

#ifdef __cplusplus
}
#endif
