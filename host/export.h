// host/export.h: the trained model written as an llm.c model file (version 3 fp32 or 5 bf16).
#pragma once
#include "gpt2.h"
#include "fileio.h"

#ifdef __cplusplus
extern "C" {
#endif

// Writes `path` (collective): rank 0 creates path.tmp with the header at its full size, every rank
// writes its owned slices at their file offsets, all agree, rank 0 renames. Dies on failure.
void model_export(OutputFiles *files, const char *path, const GPT2Config *cfg, Zero3 *z, int version);   // files: the run's (fileio.h)

#ifdef __cplusplus
}
#endif
