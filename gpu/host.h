// gpu/host.h: the boundary between the GPU trainer's two halves.
//
// The shared host code (train_loop.h, checkpoint.h, gpt2.h, dump.h...) is C, and C that C++ does not
// accept (void* converts implicitly), so it is compiled as C: gpu/train_host.c and gpu/test_host.c
// include it. The model functions and the NCCL backend are CUDA C++ (train_gpt2_zero3.cu). This
// header is what both sides see, with C linkage: the model API the train loop calls, the copies
// between engine buffers and the host, and the few facts about GPT-2's layout the CUDA side needs
// (gpt2.h's, restated here; gpu/train_host.c checks at compile time that they agree).
#pragma once
#include <stddef.h>
#include <stdint.h>
#include "../common.h"
#ifdef __cplusplus
extern "C" {
#endif
#include "../zero3.h"

// GPT-2's shape (gpt2.h's GPT2Config, field for field)
typedef struct {
    int max_seq_len, vocab_size, padded_vocab_size, num_layers, num_heads, channels;
} GpuShape;

// Units: 0 = embedding (wte, wpe), 1..L = blocks, L+1 = head (lnf); tensor i of a block is the
// i-th of ln1w..fcprojb, as gpt2.h numbers them.
enum { GPU_EMB_WTE = 0, GPU_EMB_WPE = 1 };
enum { GPU_BLK_LN1W, GPU_BLK_LN1B, GPU_BLK_QKVW, GPU_BLK_QKVB, GPU_BLK_ATTPROJW, GPU_BLK_ATTPROJB, GPU_BLK_LN2W,
       GPU_BLK_LN2B, GPU_BLK_FCW, GPU_BLK_FCB, GPU_BLK_FCPROJW, GPU_BLK_FCPROJB, GPU_BLK_NUM };
enum { GPU_HEAD_LNFW = 0, GPU_HEAD_LNFB = 1 };
static inline int gpu_unit_emb(void) { return 0; }
static inline int gpu_unit_block(int l) { return 1 + l; }
static inline int gpu_unit_head(const GpuShape* s) { return s->num_layers + 1; }

// ---- implemented in train_gpt2_zero3.cu ----
typedef struct Model Model;
Model* gpu_model_create(const GpuShape* shape, Zero3* z, int B, int T);   // model_create's body
float model_forward(Model* m, const int* inputs, const int* targets, int training);
void model_backward(Model* m, float dloss);
void model_probs(Model* m, int b, int t, float* probs);
void model_free(Model* m);
void model_describe(char* buf, size_t n);
double model_step_flops_fraction(double flops_per_s);
// Per-step hooks for the train loop (train_loop.h calls them when TRAIN_HAS_STEP_HOOKS is defined):
// an NVTX range around each step, and text for the step line (the GPU memory in use).
void model_step_begin(int step);
void model_step_end(void);
void model_step_note(char* buf, size_t n);
// synchronous copies between device buffers (the engine's) and host memory
void gpu_copy_to_host(void* dst, const void* src, size_t bytes);
void gpu_copy_to_device(void* dst, const void* src, size_t bytes);
// n elements of type t on the device, as host floats
void gpu_to_host_floats(float* out, const void* device, size_t n, Zero3DType t);
// for tests: activation `name` ("ln1", "qkv", "atty", "residual2", "ln2", "fch", "fch_gelu",
// "residual3" of `layer`; "lnf", "logits") of the last forward, all (B*T) rows as host floats;
// returns the row length (logits: Vp), 0 for an unknown name. out: B*T*width floats.
size_t gpu_model_activation(Model* m, const char* name, int layer, float* out);
const char* gpu_precision_name(void);

// ---- implemented in gpu/train_host.c and gpu/test_host.c (C) ----
// The host process state (rank, world, error hooks) of the CUDA side, handed to the C side: each
// translation unit has its own copy of common.h's g_proc.
int gpu_train_main(int argc, char** argv, const Zero3Backend* be, ProcessInfo proc);
int gpu_test_main(int argc, char** argv, const Zero3Backend* be, ProcessInfo proc);

#ifdef __cplusplus
}
#endif
