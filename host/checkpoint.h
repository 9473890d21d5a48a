// host/checkpoint.h: sharded training-state checkpoints with exact resume and resharding. Host code,
// compiled once (checkpoint.c) and linked into both trainers. The file format and the recovery
// procedure are in docs/CHECKPOINT_FORMAT.md; the llm.c model export is host/export.h.
//
// A checkpoint is a directory OUT/ckpt_<step>_g<generation>/ holding
//   meta.bin           rank 0: the run (step, N, stage, model shape, batch, data position, sampling
//                      RNG, seed, hyperparameters) and the unit layout (tensor offsets per unit)
//   shard_<r>.bin      rank r: for every unit, its owned slice [r*S, (r+1)*S) of the fp32 master
//                      weights, AdamW m and v, each with a checksum
// and the text file OUT/latest names the newest complete one. Every file is written under a temp
// name, fsynced and renamed; `latest` is replaced last, after every rank's files are complete, so a
// crash at any moment leaves the previous checkpoint whole and pointed to.
//
// Resharding: a unit's tensor offsets do not depend on N (only the unit's tail padding does), and
// the layout is stored in meta.bin, so each new rank maps the unit range it owns now onto the old
// ranks' files, tensor by tensor, and reads just those files. A different N, stage or even tensor
// alignment works; a different model shape is refused.
//
// Device memory: the engine's buffers live on the device in the GPU trainer. Every access here goes
// through the backend's copy_to_host / copy_to_device (memcpy on the CPU).
//
// Every collective is the backend's all_reduce_scalar (a barrier that also agrees on a number), so
// the code is the same over MPI and NCCL.
#pragma once
#include "common.h"
#include "gpt2.h"
#include "cli.h"   // TrainArgs and the table of flags: which ones meta.bin records
#include "fileio.h"   // OutputFiles: the rule every file written follows

#ifdef __cplusplus
extern "C" {
#endif

#define CKPT_META_MAGIC 20250610
#define CKPT_SHARD_MAGIC 20250611
#define CKPT_VERSION 1
#define CKPT_CHUNK 65536        // floats streamed per read/write (bounds host staging memory)
#define CKPT_MAX_WORLD (1 << 20)
#define CKPT_MAX_UNITS (2 * 1024 + 2)

// ------------------------------------------------------------------------------------------------
// What a checkpoint says about the run (meta.bin), and the unit layout it was written with.

typedef struct {
    long long padded;                      // P: the unit's flat size (a multiple of world)
    int ntensors;
    long long offset[ZERO3_MAX_TENSORS];   // tensor i starts at offset[i] in unit coordinates
    long long numel[ZERO3_MAX_TENSORS];
} CkptUnit;

typedef struct {
    int step;                  // completed steps: training continues at this step index
    int world, align;          // world: the ranks the state is sharded over (the shard files)
    int ranks;                 // the data-parallel ranks N (HSDP: world x replicas; 0 in old files = world)
    GPT2Config cfg;
    TrainArgs run;             // the run's flags: those the table records (cli.c, .recorded) are in meta.bin
    int A;                     // micro-steps per step
    long long data_window;     // the next training window (step*A*N, docs/DESIGN.md "data order")
    uint64_t sample_rng;       // the sampling RNG state after this step
    long long generation;      // counts checkpoints written into this output directory
    int nunits;
    CkptUnit *units;           // nunits (owned by the meta; ckpt_meta_free)
} CkptMeta;

// meta.bin is a sequence of little-endian int64 words: this fixed header, then the layout (per
// unit: padded, ntensors, then offset and numel of each tensor), then one checksum word.
enum { M_MAGIC, M_VERSION, M_HEADER_WORDS, M_STEP, M_WORLD, M_STAGE, M_ALIGN, M_MAXT, M_V, M_VP, M_L,
       M_NH, M_C, M_B, M_T, M_A, M_TOKENS_PER_STEP, M_DATA_WINDOW, M_SAMPLE_RNG, M_SEED, M_GENERATION,
       M_TOTAL_STEPS, M_WARMUP, M_LR, M_FINAL_FRAC, M_WEIGHT_DECAY, M_GRAD_CLIP, M_NUNITS,
       M_LAYOUT_WORDS, M_RANKS, M_PRECISION, M_FIXED_WORDS = 32 };
// shard_<r>.bin: this fixed header, then 3 checksums per unit (master, m, v), then a checksum of
// the header words, then the data: for each unit, master[S], m[S], v[S] as fp32.
enum { S_MAGIC, S_VERSION, S_HEADER_WORDS, S_RANK, S_WORLD, S_STEP, S_GENERATION, S_NUNITS,
       S_TOTAL_SHARD, S_FIXED_WORDS = 16 };
enum { CKPT_MASTER, CKPT_M, CKPT_V, CKPT_NARRAYS };
static const char *const CKPT_ARRAY_NAMES[CKPT_NARRAYS] = {"master weights", "AdamW m", "AdamW v"};

#define CKPT_NAME_MAX 64
#define CKPT_HASH_INIT 0xcbf29ce484222325ull

// ---- saving and resuming (collective: every rank calls them; they die on every rank on failure)
// Saves the training state as checkpoint `m->step`. The meta fields other than generation and
// layout are filled by the caller. Writes `name` (the new directory's name); `latest` still names
// the old checkpoint if anything fails.
void ckpt_save(OutputFiles *files, const char *out_dir, CkptMeta *m, Zero3 *z, char *name);   // files: the run's (fileio.h)
// Loads the checkpoint `latest` names into this rank's engine state (before zero3_publish_params).
// m receives the run fields (its units are freed).
void ckpt_load_latest(const char *out_dir, const GPT2Config *cfg, Zero3 *z, CkptMeta *m, char *name);

// ---- the readers underneath (each validates what it reads; tests/fuzz drives them directly)
// Reads OUT/latest into name. 0 on success, 1 when there is no such file, -1 (message) when it is bad.
int ckpt_read_latest(const char *out_dir, char *name, char *err, size_t errlen);
// Reads and validates meta.bin on its own terms (magic, version, size, checksum, ranges, layout).
// 0 on success (m->units allocated), or -1 with a message.
int ckpt_meta_read(const char *path, CkptMeta *m, char *err, size_t errlen);
// Can this model (already laid out in z) take the checkpoint's state? Only the shape matters:
// N, stage and alignment may differ (resharding). 0, or -1 with a message.
int ckpt_meta_check_model(const CkptMeta *m, const GPT2Config *c, const Zero3 *z, const char *path,
                          char *err, size_t errlen);
// Fills this rank's master, m and v (the ranges its stage keeps) from the checkpoint in ckpt_dir,
// written on m->world ranks with m's layout (maybe another granularity: tensors are matched by
// kind and layer); c is the model z was laid out for. Padding is zeroed. 0, or -1 with a message.
int ckpt_read_state(const char *ckpt_dir, const CkptMeta *m, const GPT2Config *c, Zero3 *z, char *err, size_t errlen);
void ckpt_meta_free(CkptMeta *m);
// A resume whose flags differ from the checkpoint's recorded ones: one warning line each (stderr),
// saying what the change means (the table of flags' .on_resume, cli.c).
void ckpt_warn_changes(const CkptMeta *m, const TrainArgs *a);
// FNV-1a over 32-bit words: any single changed word changes the result (each step is a bijection).
uint64_t ckpt_hash(uint64_t h, const void *data, size_t bytes);

#ifdef __cplusplus
}
#endif
