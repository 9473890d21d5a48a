// host/zeropp.h: ZeRO++ seen from the trainer (docs/zeropp.md): what crosses node groups, and what
// quantization costs the weights. The mechanism is the engine's (zero3.c, "ZeRO++").
#pragma once
#include "../zero3.h"

#ifdef __cplusplus
extern "C" {
#endif

// The bytes of ledger l that cross nodes: qgZ's second hop and HSDP's all-reduce across replica
// groups always; the shard group's gathers and reductions (the norm's all-reduce among them) when the shard
// group spans nodes (world_across); hpZ's backward gathers and qgZ's first hop when the node group does (group_across:
// for a run, whose node groups are the nodes, 0; the planner's -qg without -hp, 1).
double zeropp_across_bytes(const Zero3Ledger *l, int world_across, int group_across);
// The startup report's ZeRO++ lines (rank 0): what is on, the node groups, the bytes of the run's
// theory ledger inside and across node groups.
void zeropp_report(const Zero3 *z, const Zero3Ledger *theory);
// Collective: every unit's fp32 master gathered and quantized as qwZ would, and rank 0 prints per
// tensor the largest and the RMS error |x - dequantize(quantize(x))| in units of its block's scale
// (<= 0.5 by construction: rounding to the nearest step).
void zeropp_report_quant_error(Zero3 *z);

#ifdef __cplusplus
}
#endif
