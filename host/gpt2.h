// host/gpt2.h: GPT-2's shape and parameter layout, shared by both trainers: the llm.c model-file
// header, the 16 parameter tensors in file order, how they group into ZeRO units, typed views of a
// gathered unit (named tensor pointers, as llm.c's ParameterTensors), and the mapping between a
// unit's flat coordinates and the file, used to initialize, load and export each rank's own slices.
#pragma once
#include <stdio.h>
#include "common.h"
#include "../zero3.h"

#ifdef __cplusplus
extern "C" {
#endif

typedef struct {
    int max_seq_len;        // maxT
    int vocab_size;         // V
    int padded_vocab_size;  // Vp: V rounded up to 128 (rows V..Vp-1 are zero)
    int num_layers;         // L
    int num_heads;          // NH
    int channels;           // C
    // how the blocks group into ZeRO units (-wrap; FSDP's auto-wrap policy): 0 or 1 one unit per
    // block, K > 1 K consecutive blocks per unit, GPT2_WRAP_HALF each block's attention and MLP as
    // two units. Not part of the model file: the same weights under any granularity.
    int wrap;
} GPT2Config;
#define GPT2_WRAP_HALF (-2)
#define GPT2_WRAP_MAX (ZERO3_MAX_TENSORS / BLK_NUM)   // blocks per unit: a unit holds at most ZERO3_MAX_TENSORS

#define GPT2_MODEL_MAGIC 20240326
#define GPT2_NUM_KINDS 16
// The 16 parameter tensors in llm.c file order; per-layer ones are stacked over L in the file.
enum { W_WTE, W_WPE, W_LN1W, W_LN1B, W_QKVW, W_QKVB, W_ATTPROJW, W_ATTPROJB, W_LN2W, W_LN2B,
       W_FCW, W_FCB, W_FCPROJW, W_FCPROJB, W_LNFW, W_LNFB };
static const char *const GPT2_KIND_NAMES[GPT2_NUM_KINDS] = {
    "wte", "wpe", "ln1w", "ln1b", "qkvw", "qkvb", "attprojw", "attprojb",
    "ln2w", "ln2b", "fcw", "fcb", "fcprojw", "fcprojb", "lnfw", "lnfb"};
// weight decay applies to the six matrices only (contract)
static const int GPT2_KIND_DECAY[GPT2_NUM_KINDS] = {1, 1, 0, 0, 1, 0, 1, 0, 0, 0, 1, 0, 1, 0, 0, 0};

// Units: 0 = embedding (wte, wpe), then the block units, then the head (lnf). By default one unit per
// block, its 12 tensors ln1w..fcprojb (tensor i is kind W_LN1W + i); with -wrap K, K blocks per unit
// (12 K tensors, block by block); with -wrap half, two units per block: attention (ln1w..attprojb)
// and MLP (ln2w..fcprojb), 6 tensors each.
enum { EMB_WTE = 0, EMB_WPE = 1 };
enum { BLK_LN1W, BLK_LN1B, BLK_QKVW, BLK_QKVB, BLK_ATTPROJW, BLK_ATTPROJB, BLK_LN2W, BLK_LN2B,
       BLK_FCW, BLK_FCB, BLK_FCPROJW, BLK_FCPROJB, BLK_NUM };
enum { HEAD_LNFW = 0, HEAD_LNFB = 1 };
static inline int gpt2_blocks_per_unit(const GPT2Config *c) { return c->wrap > 1 ? c->wrap : 1; }
static inline int gpt2_units_per_block(const GPT2Config *c) { return c->wrap == GPT2_WRAP_HALF ? 2 : 1; }
static inline int gpt2_block_units(const GPT2Config *c) {
    return c->num_layers / gpt2_blocks_per_unit(c) * gpt2_units_per_block(c);
}
static inline int gpt2_num_units(const GPT2Config *c) { return gpt2_block_units(c) + 2; }
static inline int gpt2_unit_emb(const GPT2Config *c) { (void)c; return 0; }
// the (first) unit holding block l; with -wrap half its MLP unit is the next one
static inline int gpt2_unit_block(const GPT2Config *c, int l) {
    return 1 + l / gpt2_blocks_per_unit(c) * gpt2_units_per_block(c);
}
static inline int gpt2_unit_head(const GPT2Config *c) { return gpt2_block_units(c) + 1; }
// block l's place among the blocks of its unit: 0 for the first (its unit is gathered before it),
// blocks_per_unit - 1 for the last (released after it)
static inline int gpt2_block_in_unit(const GPT2Config *c, int l) { return l % gpt2_blocks_per_unit(c); }

// ------------------------------------------------------------------------------------------------
// Typed views of a unit: its tensors by name, made once per gather (host/passes.c), so that kernel
// calls read `matmul_forward(l_qkv, l_ln1, w.qkvw, w.qkvb, ...)`. A view of the gradient buffer has
// the same shape. The pointers are into the engine's memory (device memory on the GPU).
//
// UnitTensor: C sees a plain void *, which converts to the CPU kernels' float *. C++ (the CUDA
// trainer) sees a one-pointer struct with the same layout that converts to any T *, so the same
// view hands its kernels floatX * without a cast at every call.
#ifdef __cplusplus
}  // the wrapper is C++ (a template), outside the C-linkage block
struct UnitTensor {
    void *p;
    template <typename T> operator T *() const { return (T *)p; }
};
extern "C" {
#else
typedef void *UnitTensor;
#endif

typedef struct { UnitTensor wte, wpe; } GPT2EmbedParams;                     // the embedding unit
typedef struct {                                                               // one block unit
    UnitTensor ln1w, ln1b, qkvw, qkvb, attprojw, attprojb, ln2w, ln2b, fcw, fcb, fcprojw, fcprojb;
} GPT2BlockParams;
typedef struct { UnitTensor lnfw, lnfb; } GPT2HeadParams;                     // the final layernorm

// The views of unit memory `base` whose elements are of type t (param_type for gathered params,
// grad_type for gradient buffers).
GPT2EmbedParams gpt2_embed_view(const Zero3 *z, const GPT2Config *c, void *base, Zero3DType t);
// base: the unit holding block l; with -wrap half, base the attention unit and mlp_base the MLP
// unit (else mlp_base is ignored).
GPT2BlockParams gpt2_block_view(const Zero3 *z, const GPT2Config *c, int l, void *base, void *mlp_base, Zero3DType t);
GPT2HeadParams gpt2_head_view(const Zero3 *z, const GPT2Config *c, void *base, Zero3DType t);

// ------------------------------------------------------------------------------------------------
// Shapes and the file layout

size_t gpt2_kind_numel(const GPT2Config *c, int kind);        // one layer's slice of a tensor kind
int gpt2_kind_is_per_layer(int kind);
size_t gpt2_file_offset(const GPT2Config *c, int kind, int layer);   // elements after the header
size_t gpt2_num_parameters(const GPT2Config *c);
void gpt2_unit_tensor(const GPT2Config *c, int u, int i, int *kind, int *layer);  // tensor i of unit u
void gpt2_tensor_unit(const GPT2Config *c, int kind, int layer, int *u, int *i);  // ... and back
int gpt2_unit_ntensors(const GPT2Config *c, int u);
// The granularity (GPT2Config.wrap) that lays out nunits units of `block_tensors` tensors each (the
// first block unit's) for a model of L blocks, or -1 when none does (a checkpoint's layout).
int gpt2_wrap_of_layout(int L, int nunits, int block_tensors);
// Describes the units to the engine. Tensor offsets inside a unit are aligned to the engine's align.
void gpt2_register_units(const GPT2Config *c, Zero3 *z);

// A piece of this rank's owned slice of unit u that lies inside one tensor: `count` elements at
// `unit_pos` (unit coordinates) that are elements `file_elem`.. of the model file's parameters.
typedef struct { int unit, kind, layer; size_t unit_pos, file_elem, count; } GPT2Piece;
// Calls fn for every piece of the slice [begin, begin+count) of unit u (padding is skipped).
void gpt2_for_each_piece(const GPT2Config *c, const Zero3 *z, int u, size_t begin, size_t count,
                         void (*fn)(const GPT2Piece *, void *), void *arg);

// ------------------------------------------------------------------------------------------------
// The model file header: 256 int32 (magic 20240326, version 3 = fp32 / 5 = bf16, maxT, V, L, NH, C, Vp).

const char *gpt2_config_problem(const GPT2Config *c);   // NULL, or what is out of bounds
// Reads and validates the header of an llm.c model file. On success returns 0 and sets *cfg,
// *elem_bytes (4 or 2). On failure returns -1 with a message in err.
int gpt2_read_header(FILE *f, const char *path, GPT2Config *cfg, int *elem_bytes, char *err, size_t errlen);
void gpt2_write_header(int32_t h[256], const GPT2Config *c, int version);
// GPT-2 configs by depth (llm.c's "dN" descriptors), or a custom small one "dLcChHtT"
// (e.g. d2c64h2t64 = 2 layers, 64 channels, 2 heads, maxT 64). Returns 0 on success.
int gpt2_config_from_descriptor(const char *s, GPT2Config *c);

// ------------------------------------------------------------------------------------------------
// Filling this rank's master slices: from a seed, or from a model file (each rank reads only the
// bytes of its own slices). Staged through host memory, then copied into the engine's memory.
void gpt2_init_random(const GPT2Config *c, Zero3 *z, uint64_t seed);
// From an open model file already validated by gpt2_read_header. Returns 0, or -1 when a read fails.
int gpt2_load_owned(const GPT2Config *c, Zero3 *z, FILE *f, const char *path, int elem_bytes);
// Checks that every weight of this rank's owned slices (in the engine's master) is finite. Returns
// 0, or -1 with a message naming `path`, the tensor, the layer and the element of the first bad one.
int gpt2_check_finite_owned(const GPT2Config *c, const Zero3 *z, const char *path, char *err, size_t errlen);

#ifdef __cplusplus
}
#endif
