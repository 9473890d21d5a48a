// host/zeropp.c: ZeRO++ seen from the trainer (zeropp.h).
#include "zeropp.h"
#include "common.h"
#include "../observe/zero3_observe.h"

double zeropp_across_bytes(const Zero3Ledger *l, int world_across, int group_across) {
    // the collectives over the whole shard group (the norm's all-reduce among them): across nodes when it spans them
    static const Zero3Collective world_kinds[] = {ZERO3_COLL_FWD_GATHER, ZERO3_COLL_BWD_GATHER, ZERO3_COLL_REDUCE_SCATTER,
                                                  ZERO3_COLL_ALL_REDUCE, ZERO3_COLL_STEP_GATHER, ZERO3_COLL_NORM};
    double b = l->row[ZERO3_COLL_REPLICA_REDUCE].bytes + l->row[ZERO3_COLL_QG_ACROSS].bytes;
    if (world_across)
        for (size_t k = 0; k < sizeof world_kinds / sizeof world_kinds[0]; k++) b += l->row[world_kinds[k]].bytes;
    if (group_across) b += l->row[ZERO3_COLL_HP_GATHER].bytes + l->row[ZERO3_COLL_QG_INTRA].bytes;
    return b;
}

void zeropp_report(const Zero3 *z, const Zero3Ledger *theory) {
    const Zero3Config *c = &z->cfg;
    if (z->be->rank != 0 || !(c->quant_weights || c->hp_group || c->quant_grads)) return;
    printf("| ZeRO++   qwZ %s, hpZ %s, qgZ %s; %d node group%s of %d rank%s\n",
           c->quant_weights ? "int8 weight gathers" : "off", c->hp_group ? "secondary shard in the node group" : "off",
           c->quant_grads ? "int8 gradient all-to-all, two hops" : "off", z->nodes, z->nodes > 1 ? "s" : "", z->node_size,
           z->node_size > 1 ? "s" : "");
    double total = zero3_ledger_bytes(theory), across = zeropp_across_bytes(theory, z->nodes > 1, 0);
    printf("|   blocks of %d elements, one fp32 scale each; sent per step in theory %.0f bytes = %.0f inside node "
           "groups + %.0f across\n", ZERO3_QUANT_BLOCK, total, total - across, across);
}

// Per tensor of one unit (host copy `x` of its P fp32 values): the quantization error of each
// element in units of its block's scale, its maximum and RMS over the tensor.
static void unit_quant_error(const Zero3Unit *U, const float *x) {
    size_t nblocks = U->padded / ZERO3_QUANT_BLOCK;
    float *scale = (float *)xmalloc(nblocks * sizeof(float));
    for (size_t b = 0; b < nblocks; b++) {
        float amax = 0.0f;
        for (size_t i = b * ZERO3_QUANT_BLOCK; i < (b + 1) * ZERO3_QUANT_BLOCK; i++) amax = fmaxf(amax, fabsf(x[i]));
        scale[b] = zero3_quant_scale(amax);
    }
    for (int t = 0; t < U->ntensors; t++) {
        const Zero3Tensor *T = &U->tensors[t];
        double worst = 0.0, sq = 0.0;
        for (size_t i = T->offset; i < T->offset + T->numel; i++) {
            float s = scale[i / ZERO3_QUANT_BLOCK];
            if (s == 0.0f) continue;   // an all-zero block is exact
            double e = fabs((double)x[i] - (double)zero3_quant_code(x[i], s) * s) / s;
            if (e > worst) worst = e;
            sq += e * e;
        }
        printf("  %-10s %-14s %10zu  %8.4f  %8.4f\n", U->name, T->name, T->numel, worst, sqrt(sq / (double)T->numel));
    }
    free(scale);
}

void zeropp_report_quant_error(Zero3 *z) {
    const Zero3Backend *be = z->be;
    if (be->rank == 0)
        printf("quantization error of the final weights, int8 blocks of %d (|x - q(x)| / block scale; <= 0.5):\n"
               "  unit       tensor              numel       max       rms\n", ZERO3_QUANT_BLOCK);
    for (int u = 0; u < z->nunits; u++) {
        const Zero3Unit *U = &z->units[u];
        if (U->layout.params != ZERO3_SHARDED) continue;   // never gathered: never quantized
        size_t bytes = U->padded * sizeof(float), own = zero3_owned_begin(z, u);
        float *full = (float *)be->alloc(be->ctx, bytes), *host = (float *)xmalloc(bytes);
        // the owned master through the host (it may be in host memory: -oo host), then gathered in place
        be->copy_to_host(be->ctx, host, zero3_owned_master(z, u), U->shard * sizeof(float));
        be->copy_to_device(be->ctx, full + own, host, U->shard * sizeof(float));
        be->wait(be->ctx, be->all_gather_start(be->ctx, full + own, full, U->shard, ZERO3_F32));
        be->copy_to_host(be->ctx, host, full, bytes);
        be->free(be->ctx, full);
        if (be->rank == 0) unit_quant_error(U, host);
        free(host);
    }
    if (be->rank == 0) fflush(stdout);
}
