// gpu/train_host.c: the C half of the GPU trainer (see gpu/host.h): the shared train loop
// (train_loop.h), compiled as C, driving the model functions of train_gpt2_zero3.cu.
#include "host_glue.h"

// gpu/host.h restates gpt2.h's layout for the CUDA side: the two must agree
#define SAME(a, b) ((int)(a) == (int)(b))
_Static_assert(SAME(GPU_EMB_WTE, EMB_WTE) && SAME(GPU_EMB_WPE, EMB_WPE), "embedding tensor order");
_Static_assert(SAME(GPU_BLK_LN1W, BLK_LN1W) && SAME(GPU_BLK_LN1B, BLK_LN1B) && SAME(GPU_BLK_QKVW, BLK_QKVW) &&
               SAME(GPU_BLK_QKVB, BLK_QKVB) && SAME(GPU_BLK_ATTPROJW, BLK_ATTPROJW) &&
               SAME(GPU_BLK_ATTPROJB, BLK_ATTPROJB) && SAME(GPU_BLK_LN2W, BLK_LN2W) && SAME(GPU_BLK_LN2B, BLK_LN2B) &&
               SAME(GPU_BLK_FCW, BLK_FCW) && SAME(GPU_BLK_FCB, BLK_FCB) && SAME(GPU_BLK_FCPROJW, BLK_FCPROJW) &&
               SAME(GPU_BLK_FCPROJB, BLK_FCPROJB) && SAME(GPU_BLK_NUM, BLK_NUM), "block tensor order");
_Static_assert(SAME(GPU_HEAD_LNFW, HEAD_LNFW) && SAME(GPU_HEAD_LNFB, HEAD_LNFB), "head tensor order");
_Static_assert(sizeof(GpuShape) == sizeof(GPT2Config), "GpuShape mirrors GPT2Config");

Model* model_create(const GPT2Config* cfg, Zero3* z, int B, int T) {
    GpuShape s = {cfg->max_seq_len, cfg->vocab_size, cfg->padded_vocab_size, cfg->num_layers, cfg->num_heads,
                  cfg->channels};
    if (gpt2_unit_emb(cfg) != gpu_unit_emb() || gpt2_unit_block(cfg, 0) != gpu_unit_block(0) ||
        gpt2_unit_head(cfg) != gpu_unit_head(&s))
        fatal_local("gpu/host.h and gpt2.h number the units differently");
    return gpu_model_create(&s, z, B, T);
}

void gpu_init_random(const GPT2Config* c, Zero3* z, uint64_t seed) {
    for (int u = 0; u < z->nunits; u++) {
        const size_t S = z->units[u].shard, begin = zero3_owned_begin(z, u);
        float* host = xcalloc(S, sizeof(float));
        InitArg a = {c, host, begin, seed};
        gpt2_for_each_piece(c, z, u, begin, S, init_piece, &a);
        gpu_copy_to_device(zero3_owned_master(z, u), host, S * sizeof(float));
        free(host);
    }
}

int gpu_load_owned(const GPT2Config* c, Zero3* z, FILE* f, const char* path, int elem_bytes) {
    for (int u = 0; u < z->nunits; u++) {
        const size_t S = z->units[u].shard, begin = zero3_owned_begin(z, u);
        float* host = xcalloc(S, sizeof(float));
        LoadArg a = {f, path, elem_bytes, host, begin, 0};
        gpt2_for_each_piece(c, z, u, begin, S, load_piece, &a);
        if (!a.failed) gpu_copy_to_device(zero3_owned_master(z, u), host, S * sizeof(float));
        free(host);
        if (a.failed) return -1;
    }
    return 0;
}

int gpu_train_main(int argc, char** argv, const Zero3Backend* be, ProcessInfo proc) {
    g_proc = proc;
    return train_main(argc, argv, be);
}
