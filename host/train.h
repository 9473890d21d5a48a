// host/train.h: the training program both trainers run (train.c): a trainer's main fills its
// backend and build description (its compute table among it) and calls train_main.
#pragma once
#include "../zero3.h"
#include "cli.h"
#include "passes.h"

#ifdef __cplusplus
extern "C" {
#endif

// What a trainer binary is, beyond its backend: the engine's data types and alignment for its
// kernels, whether it is the DDP build, the model.bin version it exports, and its math: the
// compute table the passes call (cpu/gpt2_cpu.c, gpu/gpt2_gpu.cuh).
typedef struct {
    Zero3DType param_type, grad_type;   // working params / gradients
    int align;                          // tensor alignment in elements
    int ddp_only;                       // built with DDP=1: fixed at stage 0
    int export_version;                 // model.bin at the end of a run: 3 fp32, 5 bf16
    const GPT2Compute *compute;         // the per-unit math on this binary's device
    const GPT2Compute *compute_bf16;    // -p bf16's math, bf16 params and gradients (NULL: none in this build)
    int state_in_host_memory;           // the engine's buffers are host memory: -oo disk streams them (the CPU's)
} TrainBuild;

// What the flags must agree with (cli.h): the DDP build's stage, and the one precision of a build
// with no second compute table (the GPU's), which -p then only confirms.
ArgsBuild train_args_build(const TrainBuild *b);

// The LR at step s (0-based) under the flags' schedule (docs/DESIGN.md section 3).
float lr_at(const TrainArgs *a, int s);

// ---- the trainer as a library: what train_main runs, for tests that check the very step code
// users run (tests/test_checks.h) instead of a copy of it.
typedef struct Trainer Trainer;
// For flags parsed by args_read (cli.h): output folder, model, data, resume, params published.
Trainer *trainer_create(const TrainArgs *args, const Zero3Backend *be, const TrainBuild *build);
// One optimizer step (0-based): A micro-steps of forward and backward, the global norm, clipping,
// AdamW. *loss = the mean loss over all N*A*B*T tokens; *norm = the norm before clipping, *clip =
// the coefficient the gradients were scaled by (1 when not clipped). Returns the micro-steps run:
// A, or fewer when a stop signal gave the step up between two of them (then nothing changed).
int trainer_step(Trainer *tr, int step, float lr, float *loss, float *norm, float *clip);
// This rank's micro-batch k of step `step` (the data order of the contract) into the trainer's
// (B,T) inputs and targets.
void trainer_load_batch(Trainer *tr, int step, int k);
void trainer_destroy(Trainer *tr);
Zero3 *trainer_engine(Trainer *tr);
GPT2Passes *trainer_model(Trainer *tr);
const TrainArgs *trainer_args(const Trainer *tr);
int trainer_micro_steps(const Trainer *tr);   // A
const int *trainer_inputs(const Trainer *tr);
const int *trainer_targets(const Trainer *tr);

// Parses the flags, trains, writes the outputs. Returns the exit status (errors exit on every rank).
int train_main(int argc, char **argv, const Zero3Backend *be, const TrainBuild *build);

#ifdef __cplusplus
}
#endif
