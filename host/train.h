// host/train.h: the training program both trainers run (train.c): a trainer's main fills its
// backend and build description and calls train_main.
#pragma once
#include "../zero3.h"
#include "cli.h"

#ifdef __cplusplus
extern "C" {
#endif

// What a trainer binary is, beyond its backend: the engine's data types and alignment for its
// kernels, whether it is the DDP build, and the model.bin version it exports.
typedef struct {
    Zero3DType param_type, grad_type;   // working params / gradients
    int align;                          // tensor alignment in elements
    int ddp_only;                       // built with DDP=1: fixed at stage 0
    int export_version;                 // model.bin at the end of a run: 3 fp32, 5 bf16
} TrainBuild;

// The LR at step s (0-based) under the flags' schedule (docs/DESIGN.md section 3).
float lr_at(const TrainArgs *a, int s);

// Parses the flags, trains, writes the outputs. Returns the exit status (errors exit on every rank).
int train_main(int argc, char **argv, const Zero3Backend *be, const TrainBuild *build);

#ifdef __cplusplus
}
#endif
