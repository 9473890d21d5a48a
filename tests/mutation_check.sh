#!/usr/bin/env bash
# tests/mutation_check.sh: plants one-line bugs, one at a time, and checks that the test suite catches
# each: the suite keeps its teeth as the code changes. Every mutation is a realistic slip in the code
# users run (a clip branch, a loss scale, a per-rank norm, a decay mask, a GELU constant, a prefetch
# off by one, a data window, a lost RNG on resume, a dropped accumulation, a wrong data position in a
# checkpoint, a unit's gradients released without their reduction) with the test that must fail on it. Each runs in a scratch copy of the repository
# (tracked files plus the generated data/ and tests/reference/dumps/), so the checkout is never touched. The copies
# start from one built copy (every make target the chosen mutations name, built once from the
# unmutated code): the mutated file is newer than its objects, so make rebuilds what it reaches.
#
#   bash tests/mutation_check.sh            all 96 mutations (nightly: `make mutations`; the run prints its time)
#   bash tests/mutation_check.sh 3 6        only mutations 3 and 6 (CI: tests/test_mutations.sh runs 1-11 and 45)
#   bash tests/mutation_check.sh --dry-run  only check that every mutation's text is in the code once
# Ends with "N of M mutations caught (P%) in Ts"; a mutation whose text is not found once is an ERROR
# (the code moved: fix the table), never a kill. Exit 0 when there is no ERROR and all chosen are
# caught, or, for the whole table, at least 95% (docs/testing.md explains each survivor).
set -uo pipefail
cd "$(dirname "$0")/.." || exit 1
root=$PWD
export OMPI_ALLOW_RUN_AS_ROOT=1 OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1 OMPI_MCA_rmaps_base_oversubscribe=1 OMP_NUM_THREADS=1
PY=/usr/bin/python3; [ -x "$PY" ] || PY=python3
make -s dumps >/dev/null || { echo "mutation_check: make dumps failed" >&2; exit 1; }
CLIP="tests/reference/dumps/clip.dump tests/reference/dumps/clip_model.bin"
SMALL="tests/reference/dumps/small.dump tests/reference/dumps/small_model.bin"
# the engine's unit tests (build targets, then the command)
ENGINE_T="build/test_engine_layout build/test_engine_schedule build/test_pass_order build/test_engine_contract build/test_stop_path"
ENGINE="build/test_engine_layout && build/test_engine_schedule && build/test_pass_order && build/test_engine_contract && build/test_stop_path"
# the CPU kernels against PyTorch float64 (tests/test_cpu_kernels.sh's check, built without make)
KERNELS="mkdir -p build && $PY tests/unit/cpu_kernels_ref.py build/mut_ref.bin >/dev/null && gcc -O3 -march=native -fopenmp -std=gnu11 -o build/mut_tck tests/unit/test_cpu_kernels.c -lm && build/mut_tck build/mut_ref.bin"

# id | file | the exact text | its replacement | make targets | the test that must fail (no field holds a |)
MUTATIONS=(
"1|host/train.c|return coef < 1.0 ? (float)coef : 1.0f;|return coef > 1.0 ? (float)coef : 1.0f;|test_gpt2|TEST_STAGES=3 ./test_gpt2 $CLIP"
"2|host/train.c|float dloss = 1.0f / ((float)a->B * a->T * A * N);|float dloss = 1.0f / ((float)a->B * a->T * A);|test_gpt2|TEST_STAGES=3 mpirun -np 2 ./test_gpt2 $CLIP"
"3|zero3.c|double total = z->be->all_reduce_scalar(z->be->ctx, local);|double total = local;|test_gpt2|TEST_STAGES=3 mpirun -np 2 ./test_gpt2 $CLIP"
"4|zero3.c|T->decay ? weight_decay : 0.0f|weight_decay|build/test_engine_layout|build/test_engine_layout"
"5|cpu/kernels.h|ck_tanh_sech2(GELU_SCALE * (x + 0.044715f * x * x * x), &th, NULL);|ck_tanh_sech2(GELU_SCALE * (x + 0.04476f * x * x * x), &th, NULL);||$KERNELS"
"6|zero3.c|int pos = z->schedule.pos + k;|int pos = z->schedule.pos + k + 1;|build/test_engine_schedule|build/test_engine_schedule"
"7|host/train.c|((long long)step * A + k) * N + r|((long long)step * A + k) * N|test_gpt2|TEST_STAGES=0 mpirun -np 2 ./test_gpt2 $CLIP"
"8|host/train.c|tr->sample.rng = m.sample_rng;|(void)m.sample_rng;|train_gpt2_zero3|bash tests/test_checkpoint.sh"
"9|zero3.c|if (grads_sharded(z, u) && z->step.micro > 0)|if (0)|test_gpt2|TEST_STAGES=3 mpirun -np 2 ./test_gpt2 $CLIP"
"10|host/checkpoint.c|w[M_DATA_WINDOW] = m->data_window;|w[M_DATA_WINDOW] = m->data_window + 1;|train_gpt2_zero3|bash tests/test_checkpoint.sh"
"11|host/passes.c|zero3_post_backward(z, u_head);|zero3_release(z, u_head);|build/test_pass_order|build/test_pass_order"
# 12-44: slips planted file by file, from the code, each run against the part of the suite that covers
# its file (the engine's unit tests, the kernels' check, test_gpt2, or the file's test script). 18, 29
# and 35 survived their first tests; the tests named here were written to catch them (docs/testing.md);
# 33 is equivalent (the value it changes is checked from the file's word and then never read).
"12|zero3.c|u->padded = round_up(offset, shard_quantum(z) * (size_t)z->world);|u->padded = round_up(offset, shard_quantum(z));|$ENGINE_T|$ENGINE"
"13|zero3.c|u->layout = u->persistent ? ZERO3_STAGE_LAYOUT[0] : z->layout;|u->layout = u->persistent ? ZERO3_STAGE_LAYOUT[1] : z->layout;|$ENGINE_T|$ENGINE"
"14|zero3.c|if (grads_sharded(z, z->inflight.unit[0])) pool_release(z, U->grads_buffer);|if (0) pool_release(z, U->grads_buffer);|train_gpt2_zero3|bash tests/test_long_run.sh"
"15|zero3.c|*count = optimizer_sharded(z, u) ? U->shard : U->padded;|*count = U->shard;|test_gpt2|TEST_STAGES=0 mpirun -np 2 ./test_gpt2 $CLIP"
"16|zero3.c|z->step.grads_complete = 0;|(void)0;|train_gpt2_zero3|bash tests/test_long_run.sh"
"17|zero3.c|    if (z->replica == 0)\n|    if (1)\n|train_gpt2_zero3|bash tests/test_variants.sh"
"18|zero3.c|if (U->param_state == ZERO3_PARAMS_GATHERING) gather_finish(z, u);\n        free_gathered(z, U);|free_gathered(z, U);|$ENGINE_T|$ENGINE"
"19|observe/zero3_observe.c|return zero3_coll_all_reduces(kind) ? 2.0 * others : others;|return others;|train_gpt2_zero3|bash tests/test_time.sh"
"20|observe/zero3_observe.c|if (e->type != ZERO3_EV_WAIT) continue;|if (e->type == ZERO3_EV_COLLECTIVE) continue;|$ENGINE_T|$ENGINE"
"21|observe/zero3_observe.c|out->row[ZERO3_COLL_NORM].bytes = ring_sent(ZERO3_COLL_NORM, sizeof(double), world * replicas);|out->row[ZERO3_COLL_NORM].bytes = ring_sent(ZERO3_COLL_NORM, sizeof(float), world * replicas);|train_gpt2_zero3|bash tests/test_time.sh"
"22|observe/zero3_observe.c|parts[1] = placed(L->grads, psi * g, n);|parts[1] = placed(L->params, psi * g, n);|train_gpt2_zero3|bash tests/test_boundaries.sh"
"23|observe/zero3_observe.c|void observe_transient_released(Zero3 *z, size_t bytes) { z->observe.stats.transient_bytes -= bytes; }|void observe_transient_released(Zero3 *z, size_t bytes) { (void)bytes; }|$ENGINE_T|$ENGINE"
"24|proc/proc.c|return ts.tv_sec + ts.tv_nsec * 1e-9;|return ts.tv_sec + ts.tv_nsec * 1e-6;|$ENGINE_T|$ENGINE"
"25|proc/proc.c|    if (x->rank == 0) {\n        va_list ap;|    if (x->rank == 1) {\n        va_list ap;|train_gpt2_zero3|bash tests/test_bad_inputs.sh"
"26|host/dataloader.h|return (size_t)(w % ld->nwindows) * ld->B * ld->T + (size_t)b * ld->T;|return (size_t)(w % ld->nwindows) * ld->T + (size_t)b * ld->T;|test_gpt2|TEST_STAGES=0 mpirun -np 2 ./test_gpt2 $CLIP"
"27|host/dataloader.h|targets[(size_t)b * T + t] = tok[t + 1];|targets[(size_t)b * T + t] = tok[t];|test_gpt2|./test_gpt2 $SMALL"
"28|host/evaluate.c|loader_window(&tr->data.val, (long long)j * N + r, tr->data.inputs, tr->data.targets);|loader_window(&tr->data.val, (long long)j + r, tr->data.inputs, tr->data.targets);|train_gpt2_zero3|bash tests/test_boundaries.sh"
"29|host/tokens.h|if (header[0] != TOKENS_MAGIC) {|if (header[0] == 0) {|train_gpt2_zero3|bash tests/test_bad_inputs.sh"
"30|host/tokenizer.h|t->bytes[pos + len] = '\\0';\n        pos += 1 + len;|t->bytes[pos + len] = '\\0';\n        pos += len;|train_gpt2_zero3|bash tests/test_tokenizer.sh"
"31|host/export.c|int elem = version == 3 ? 4 : 2;|int elem = version == 3 ? 4 : 4;|train_gpt2_zero3|bash tests/test_export.sh"
"32|host/export.c|size_t S = z->units[u].shard, begin = zero3_owned_begin(z, u);|size_t S = z->units[u].shard, begin = 0;|train_gpt2_zero3|bash tests/test_export.sh"
"33|host/checkpoint.c|m->data_window = w[M_DATA_WINDOW];|m->data_window = w[M_DATA_WINDOW] - 1;|train_gpt2_zero3|bash tests/test_checkpoint.sh"
"34|host/fileio.c|    int rc = fsync(fd);\n    close(fd);|    int rc = fsync(fd);|train_gpt2_zero3|bash tests/test_long_run.sh"
"35|host/gpt2.c|case W_ATTPROJW: case W_FCPROJW: return 0.02f / sqrtf(2.0f * c->num_layers);|case W_ATTPROJW: case W_FCPROJW: return 0.02f;|train_gpt2_zero3|bash tests/test_boundaries.sh"
"36|host/trace.c|double ts = us(t, e->t_begin), dur = (e->t_end - e->t_begin) * 1e6;|double ts = us(t, e->t_begin), dur = (e->t_end - e->t_begin) * 2e6;|train_gpt2_zero3|bash tests/test_boundaries.sh"
"37|cpu/gpt2_cpu.c|residual_forward(l_residual3, l_residual2, l_fcproj, B * T * C));|residual_forward(l_residual3, residual, l_fcproj, B * T * C));|test_gpt2|./test_gpt2 $SMALL"
"38|cpu/kernels.h|const float eps = 1e-5f;|const float eps = 1e-6f;||$KERNELS"
"39|cpu/kernels.h|for (int t2 = 0; t2 <= t; t2++) p[t2] *= scale;|for (int t2 = 0; t2 < t; t2++) p[t2] *= scale;||$KERNELS"
"40|cpu/kernels.h|dx[i] += s * (dy[i] * weight[i] - mean_dnorm - norm * mean_dnorm_norm);|dx[i] += s * (dy[i] * weight[i] - mean_dnorm);||$KERNELS"
"41|cpu/kernels.h|return (p - indicator) * dloss;|return (p - indicator);||$KERNELS"
"42|cpu/backend_cpu.c|1.0f - powf(beta1, (float)t), 1.0f - powf(beta2, (float)t)};|1.0f - powf(beta1, (float)t), 1.0f - powf(beta1, (float)t)};|test_gpt2|TEST_STAGES=3 mpirun -np 2 ./test_gpt2 $CLIP"
"43|cpu/adamw.c|float p = master[i] * decay;|float p = master[i];|$ENGINE_T|$ENGINE"
"44|host/passes.c|p->compute->lm_head_backward(p->state, &emb, &demb, dloss);|p->compute->lm_head_backward(p->state, &emb, &demb, 1.0f);|test_gpt2|TEST_STAGES=3 mpirun -np 2 ./test_gpt2 $CLIP"
"45|zero3.c|    zero3_finish_reductions(z);\n    drop_unused_prefetches(z);\n    schedule_close_recording(z);|    drop_unused_prefetches(z);\n    schedule_close_recording(z);|build/test_stop_path|build/test_stop_path"
# 46-59: the figures a user reads (docs/testing.md, "Printed figures"): the sample, the per-unit
# summary, the time model's calibration and lines, the planner at the edges of its flags
"46|host/evaluate.c|if (pos < T) tr->data.inputs[pos++] = next;|if (pos < T - 1) tr->data.inputs[pos++] = next;|train_gpt2_zero3 build/test_sampler|bash tests/test_samples.sh"
"47|host/evaluate.c|memmove(tr->data.inputs, tr->data.inputs + 1, (T - 1) * sizeof(int));|memmove(tr->data.inputs, tr->data.inputs + 1, (T - 2) * sizeof(int));|train_gpt2_zero3 build/test_sampler|bash tests/test_samples.sh"
"48|host/common.h|{ cdf += probs[i]; if (coin < cdf) return i; }|{ if (coin < cdf) return i; cdf += probs[i]; }|train_gpt2_zero3 build/test_sampler|bash tests/test_samples.sh"
"49|host/train.c|tr->sample.rng = a->seed ^ 0x5DEECE66Dull;|tr->sample.rng = a->seed;|train_gpt2_zero3 build/test_sampler|bash tests/test_samples.sh"
"50|observe/zero3_observe.c|if (e->unit >= 0) o->unit_exposed_s[e->unit] += d;|if (e->unit > 0) o->unit_exposed_s[e->unit] += d;|train_gpt2_zero3|bash tests/test_summaries.sh"
"51|host/report.c|tr->measure.norm_exposed_sum += tr->z.observe.stats.exposed_s - units;|tr->measure.norm_exposed_sum += tr->z.observe.stats.exposed_s;|train_gpt2_zero3|bash tests/test_summaries.sh"
"52|host/report.c|if (step > tr->start_step) {   // as for ms/step|if (step >= tr->start_step) {   // as for ms/step|train_gpt2_zero3|bash tests/test_summaries.sh"
"53|host/predict.c|sums->compute_s += step_s - exposed_s;|sums->compute_s += step_s;|train_gpt2_zero3|bash tests/test_summaries.sh"
"54|host/predict.c|in->other_s = c->compute_s / c->steps - in->fwd_s - in->bwd_s;|in->other_s = c->compute_s / c->steps;|train_gpt2_zero3|bash tests/test_summaries.sh"
"55|zero3.h|return sent_bytes / (link->gbps * 1e9) + steps * link->latency_s;|return sent_bytes / (link->gbps * 1e9) + link->latency_s;|train_gpt2_zero3|bash tests/test_summaries.sh"
"56|host/plan.c|print_memory(p->psi, p->G, ZERO3_F32, ZERO3_F32,|print_memory(p->psi, p->N, ZERO3_F32, ZERO3_F32,|train_gpt2_zero3|bash tests/test_planner_table.sh"
"57|host/plan.c|double across = zeropp_across_bytes(&l, N > rpn, pp.node_size > rpn);|double across = zeropp_across_bytes(&l, N >= rpn, pp.node_size > rpn);|train_gpt2_zero3|bash tests/test_planner_table.sh"
"58|host/zeropp.c|if (group_across) b += l->row[ZERO3_COLL_HP_GATHER].bytes + l->row[ZERO3_COLL_QG_INTRA].bytes;|if (group_across) b += l->row[ZERO3_COLL_HP_GATHER].bytes;|train_gpt2_zero3|bash tests/test_planner_table.sh"
"59|host/plan.c|double secondary = G > 0 && N > 1 ? psi|double secondary = G > 0 ? psi|train_gpt2_zero3|bash tests/test_flags.sh"
"60|zero3.c|while (z->inflight.count > 0) retire_oldest_reduction(z);|while (z->inflight.count > 1) retire_oldest_reduction(z);|build/test_stop_path|build/test_stop_path"
"61|host/report.c|size_t reserved = z->pool.bytes, held = z->observe.stats.transient_peak;|size_t reserved = z->pool.bytes, held = z->observe.stats.transient_bytes;|train_gpt2_zero3|bash tests/test_summaries.sh"
"62|zero3.c|        z->pool.bytes += bytes;|        z->pool.bytes += bytes + z->pool.entry[0].capacity;|build/test_engine_schedule|build/test_engine_schedule"
"63|host/peak.c|    const int moved = !mpi_sums(grad_type, r->one_machine);|    const int moved = !mpi_sums(grad_type, 0);|train_gpt2_zero3|bash tests/test_peak.sh"
"64|host/peak.c|m[n++] = (PeakMoment){.emb_p = 1, .emb_g = 1, .head_p = keep|m[n++] = (PeakMoment){.emb_p = 1, .emb_g = 0, .head_p = keep|train_gpt2_zero3|bash tests/test_peak.sh"
"65|host/train.c|    mallopt(M_MMAP_THRESHOLD, HEAP_OWN_MAPPING);|    (void)0;|train_gpt2_zero3|bash tests/test_peak.sh"
# 66-72: the watchdog's clock, the ring at a node boundary, the stop path at the last step, the peak
# under -bp post and the scripts' rules (docs/testing.md, "Edges"): each against a figure of its own
"66|cpu/backend_cpu.c|now_seconds() > deadline_of(o) + WAIT_GRACE_S|now_seconds() > o->ready + WAIT_GRACE_S|train_gpt2_zero3|bash tests/test_edges.sh"
"67|cpu/backend_cpu.c|sleep_until(b, fmin(until, deadline_of(o)));|sleep_until(b, until);|train_gpt2_zero3|bash tests/test_edges.sh"
"68|zero3.h|for (int k = 1; k < n; k++)\n        if ((first + k * stride) / links->node_ranks != node)|for (int k = 1; k <= n; k++)\n        if ((first + k * stride) / links->node_ranks != node)|train_gpt2_zero3|bash tests/test_edges.sh"
"69|host/stop.c|int status = step + 1 < tr->args.steps ? trainer_stop_status(tr) : 0;|int status = trainer_stop_status(tr);|train_gpt2_zero3|bash tests/test_edges.sh"
"70|host/peak.c|const int db = zero3_theory_backward_ahead(d, r->backward_prefetch);|const int db = d;|train_gpt2_zero3|bash tests/test_peak.sh"
"71|scripts/args.sh|[ \"\${ck% *}\" -lt \"\${ck#* }\" ]|[ \"\${ck% *}\" -le \"\${ck#* }\" ]|train_gpt2_zero3|bash tests/test_script_rules.sh"
"72|scripts/cluster.sh|  R=1; G=0|  R=1; G=1|train_gpt2_zero3|bash tests/test_script_rules.sh"
# 73-77: the time model's edges, each against a figure of its own (tests/test_edges.sh): the replay's
# collectives on one stream, the emulated link's start at the last rank's arrival
"73|host/predict.c|const double d = event_ring_s(p, e), start = clock > stream ? clock : stream;|const double d = event_ring_s(p, e), start = clock;|train_gpt2_zero3|bash tests/test_edges.sh"
"74|cpu/backend_cpu.c|const double until = clock[0] + seconds;|const double until = o->ready + seconds;|train_gpt2_zero3|bash tests/test_edges.sh"
# the stop path at a step's edges (signals raised at known points): a stop check that skips the first
# micro-step boundary, a first signal taken for the second
"75|host/train.c|if (k > 0 && trainer_stop_requested(tr)) return k;|if (k > 1 && trainer_stop_requested(tr)) return k;|train_gpt2_zero3|bash tests/test_edges.sh"
"76|host/stop.c|    if (g_stop_signal) {   // the second one|    if (g_stop_signal >= 0) {   // the second one|train_gpt2_zero3|bash tests/test_edges.sh"
# the engine's -bp post prefetching before the unit's compute, as pre: the measured peaks (test_peak)
"77|zero3.c|    if (!prefetch_after_compute(z, phase)) prefetch(z);|    prefetch(z);|train_gpt2_zero3|bash tests/test_peak.sh"
"81|zero3_offload.c|    o->slot[i].dirty = 1;   // AdamW changed it|    o->slot[i].dirty = 0;   // AdamW changed it|train_gpt2_zero3|bash tests/test_offload.sh"
"82|zero3_offload.c|int rc = transfer(o->fd, op, buf, bytes, o->record_at[u]);|int rc = transfer(o->fd, op, buf, bytes, o->record_at[u > 0 ? u - 1 : 0]);|train_gpt2_zero3|bash tests/test_offload.sh"
"83|zero3_offload.c|    else if (op == IO_READ && record_checksum(buf, bytes) != o->checksum[u])|    else if (0)|train_gpt2_zero3|bash tests/test_offload.sh"
# 88: -oo host on the GPU trainer: the compute stream no longer waits for the params' copies back from
# the host AdamW, so the next forward may read the params of the step before (the emulator's streams
# run that copy late), and -oo host's losses part from the run's without it
"88|gpu/backend_nccl.cuh|    cudaCheck(cudaStreamWaitEvent(g->compute, H->params_back, 0));|    (void)H->params_back;|train_gpt2_zero3|bash tests/test_emu_train.sh"
# 91: -oo host's early copies: a unit's gradients leave for the host during the backward without
# waiting for its reduce-scatter (the emulator's streams run that copy first), so the host AdamW
# updates with the gradients before the reduction, and -oo host's model parts from the run's without it
"91|gpu/backend_nccl.cuh|            cudaCheck(cudaStreamWaitEvent(H->out, H->grads_final, 0));|            (void)H->grads_final;|train_gpt2_zero3|bash tests/test_emu_train.sh"
# 89: -oo host's pipeline: the host AdamW on a piece after waiting for the event of the piece before
# it, so it may read the piece's staging before its gradients landed (the emulator's streams run
# that copy late): the gradients of the step before, or none, and -oo host's model parts from the
# run's without it
"89|gpu/backend_nccl.cuh|        cudaCheck(cudaEventSynchronize(H->piece_out[p]));|        cudaCheck(cudaEventSynchronize(H->piece_out[p > 0 ? p - 1 : 0]));|train_gpt2_zero3|bash tests/test_emu_train.sh"
"84|zero3_offload.c|        o->stream_fills = !z->resident.master_is_params;|        o->stream_fills = 1;|train_gpt2_zero3|bash tests/test_offload.sh"
# 90: the stream's look-ahead one unit short: give(k) reads unit k+S-2 (read already) in place of
# k+S-1, so a later unit's AdamW runs on the slot's old record, and -oo disk's losses leave the run's without it
"90|zero3_offload.c|    stream_read(o, u + o->nslots - 1);   // into unit u-1's slot|    stream_read(o, u + o->nslots - 2);   // into unit u-1's slot|train_gpt2_zero3|bash tests/test_offload.sh"
# 104: the stage table's row 1 copied from row 2: ZeRO-1 shards the gradients too, so it trains as
# ZeRO-2 (the same losses, the same bytes) but holds 4 + 12/N bytes a parameter, not 8 + 8/N
# (test_exercises: exercise 2's measured states against DDP's)
"104|zero3.c|    {ZERO3_FULL,    ZERO3_FULL,    ZERO3_SHARDED},   // 1: optimizer state sharded|    {ZERO3_FULL,    ZERO3_SHARDED, ZERO3_SHARDED},   // 1: optimizer state sharded|train_gpt2_zero3|bash tests/test_exercises.sh"
# 105: the planner's deepest fitting model one block too deep (the depth kept before its peak is
# compared with the budget; test_exercises: capacity's one-rank depth against the closed form)
"105|host/plan.c|        if (b > limit) break;\n        best = L;|        best = L;\n        if (b > limit) break;|train_gpt2_zero3|bash tests/test_exercises.sh"
# 106-108: what the lessons rely on. 106: the planner forgets the backward gathers -bp post -pd 1
# waits on in full, so its verdict says "hidden" while its own exposed time doubles; 107: the trace's
# waits read from the rank that waited most (a rank waiting for a slower one's core, not for the
# link); 108: lessons_bp.sh counts the first block's backward gather as hideable (it follows the
# final layernorm's with next to no compute between)
"106|host/plan.c|    t.bwd_waited_s = after ? A * bg : 0.0;|    t.bwd_waited_s = 0.0;|train_gpt2_zero3|bash tests/test_time.sh"
"107|scripts/lessons.sh|    per_step = [min(parts.get((k, s, r), 0.0) for r in ranks) for s in steps]|    per_step = [max(parts.get((k, s, r), 0.0) for r in ranks) for s in steps]|train_gpt2_zero3|bash tests/test_lessons.sh"
"108|scripts/lessons_bp.sh|    return [w for waits in passes.values() for w in waits[2:]]|    return [w for waits in passes.values() for w in waits[1:]]|train_gpt2_zero3|bash tests/test_lessons.sh"
# -ua 1: a unit's AdamW before its reduce-scatter completes; at the first micro-step, before its gradients are whole
"102|zero3.c|    wait_for(z, z->inflight.handle[0], z->inflight.unit[0], z->inflight.kind[0]);\n    announce_final_grads(z, z->inflight.unit[0]);\n    update_unit_in_backward(z, z->inflight.unit[0]);|    update_unit_in_backward(z, z->inflight.unit[0]);\n    wait_for(z, z->inflight.handle[0], z->inflight.unit[0], z->inflight.kind[0]);\n    announce_final_grads(z, z->inflight.unit[0]);|train_gpt2_zero3|bash tests/test_inbackward.sh"
"103|zero3.c|if (z->step.micro != z->step.micro_steps - 1) return;   // not final|if (z->step.micro != 0) return;   // not final|train_gpt2_zero3|bash tests/test_inbackward.sh"
# 109: stage3_max_live_parameters translated as if every live unit were a block (the embedding, the
# largest, forgotten): -pd deeper than the bound allows, and the run's live parameters over it
"109|scripts/translate_config.py|        largest = max(unit, t.model.embedding)|        largest = unit|train_gpt2_zero3|bash tests/test_translate.sh"
# 110: the engine's count of live parameters takes each unit's shard for the unit: the closing
# "live params:" line halves on 2 ranks, and the unbound run no longer shows the bound's effect
"110|observe/zero3_observe.c|            params += z->units[u].numel;|            params += z->units[u].shard;|train_gpt2_zero3|bash tests/test_translate.sh"
# 100-101: one meaning of peak: the engine's buffers written in log.csv's process column, and rank 0's
# figure gathered for every rank (tests/peak_ranks.py: each rank against the plan's for that rank)
"100|host/outdir.c|r->comm, tr->z.resident.bytes, r->process_peak,|r->comm, tr->z.resident.bytes, (long long)r->engine_peak,|train_gpt2_zero3|bash tests/test_peak.sh"
"101|host/train.c|be->all_reduce_scalar(be->ctx, be->rank == r ? (double)mine : 0.0)|be->all_reduce_scalar(be->ctx, be->rank == 0 ? (double)mine : 0.0)|train_gpt2_zero3|bash tests/test_peak.sh"
# 111: the fp32 pack's 8 x 8 transpose sends one k's row to the wrong place (the panels of A and of W^T)
"111|cpu/kernels.h|_mm256_storeu_ps(out + 1 * (size_t)dst_w, _mm256_permute2f128_ps(u1, u5, 0x20));|_mm256_storeu_ps(out + 1 * (size_t)dst_w, _mm256_permute2f128_ps(u2, u6, 0x20));||$KERNELS"
)

# apply_mutation FILE OLD NEW: OLD (\n a newline, \\ a backslash) must occur exactly once in FILE
apply_mutation() {
  OLD="$2" NEW="$3" "$PY" - "$1" <<'PY'
import os, sys
unescape = lambda t: t.replace("\\n", "\n").replace("\\\\", "\\")
p = sys.argv[1]; s = open(p).read(); old, new = unescape(os.environ["OLD"]), unescape(os.environ["NEW"])
if s.count(old) != 1: sys.exit(f"mutation_check: the text to mutate occurs {s.count(old)} times in {p}")
open(p, "w").write(s.replace(old, new))
PY
}

# --dry-run: only check that every mutation's text is found once in the checkout
if [ "${1:-}" = "--dry-run" ]; then
  bad=0
  for m in "${MUTATIONS[@]}"; do
    IFS='|' read -r id file old new targets test <<<"$m"
    bars=${m//[^|]/}
    [ ${#bars} -eq 5 ] || { echo "ERROR $id: the row has ${#bars} bars where it needs 5 (a | inside a field)"; bad=1; continue; }
    cp "$file" "$root/build/.mutation_probe" 2>/dev/null || { mkdir -p build && cp "$file" build/.mutation_probe; }
    apply_mutation build/.mutation_probe "$old" "$new" || { echo "ERROR $id $file"; bad=1; }
  done
  rm -f build/.mutation_probe
  echo "${#MUTATIONS[@]} mutations, every text found once: $([ $bad -eq 0 ] && echo yes || echo no)"
  exit $bad
fi

# copy_repo DIR: a copy of the repository (tracked files, the generated data and reference dumps)
copy_repo() { (git ls-files -z | xargs -0 tar -cf - data/tinyshakespeare tests/reference/dumps 2>/dev/null) | tar -xf - -C "$1"; }
# copy_built DIR: a copy of the built copy, mtimes to the nanosecond (posix tar), so that make sees
# its objects up to date; the reference dumps (155 MB, read only) are hard links
copy_built() {
  tar --format=posix -cf - --exclude=./tests/reference/dumps -C "$built" . | tar -xf - -C "$1" && cp -al "$built/tests/reference/dumps" "$1/tests/reference/"
}
chosen() { [ $# -eq 1 ] || [[ " ${*:2} " == *" $1 "* ]]; }   # ID CHOSEN...: is ID chosen (none given: all)

# The built copy: every make target the chosen mutations name, from the unmutated code
built=$(mktemp -d "${TMPDIR:-/tmp}/mutation_built.XXXXXX")
trap 'rm -rf "$built"' EXIT
copy_repo "$built"
all_targets=()
for m in "${MUTATIONS[@]}"; do
  IFS='|' read -r id file old new targets test <<<"$m"
  chosen "$id" "$@" && all_targets+=($targets)
done
if [ ${#all_targets[@]} -gt 0 ] && ! ( cd "$built" && make -s -j"$(nproc 2>/dev/null || echo 2)" $(printf '%s\n' "${all_targets[@]}" | sort -u) ) >"$built/build.log" 2>&1; then
  tail -20 "$built/build.log"; echo "mutation_check: the unmutated code does not build" >&2; exit 1
fi

# The control: every test used below passes on the unmutated code (else "caught" would mean nothing).
control=$(mktemp -d "${TMPDIR:-/tmp}/mutation.XXXXXX")
copy_built "$control"
declare -A seen
for m in "${MUTATIONS[@]}"; do
  IFS='|' read -r id file old new targets test <<<"$m"
  chosen "$id" "$@" || continue
  [ -n "${seen[$test]:-}" ] && continue
  seen[$test]=1
  if ! ( cd "$control" && { [ -z "$targets" ] || make -s $targets >/dev/null 2>&1; } && eval "$test" ) >"$control/out.log" 2>&1; then
    tail -20 "$control/out.log"; echo "mutation_check: the unmutated code fails: $test" >&2; rm -rf "$control"; exit 1
  fi
done
rm -rf "$control"
echo "control: every test passes on the unmutated code"

caught=0; total=0; missed=(); errors=()
run_start=$(date +%s)
for m in "${MUTATIONS[@]}"; do
  IFS='|' read -r id file old new targets test <<<"$m"
  chosen "$id" "$@" || continue
  total=$((total + 1))
  scratch=$(mktemp -d "${TMPDIR:-/tmp}/mutation.XXXXXX")
  copy_built "$scratch"
  if ! apply_mutation "$scratch/$file" "$old" "$new"; then
    errors+=("$id"); printf 'ERROR   %-3s %-18s the text to mutate is not in the file once (the code moved?)\n' "$id" "$file"
    rm -rf "$scratch"; continue
  fi
  start=$(date +%s)
  # a mutation that does not build is not a caught bug: the build must succeed, the test must fail
  if ! ( cd "$scratch" && { [ -z "$targets" ] || make -s $targets; } ) >"$scratch/build.log" 2>&1; then
    tail -5 "$scratch/build.log"; missed+=("$id (does not build)"); rm -rf "$scratch"; continue
  fi
  ( cd "$scratch" && eval "$test" ) >"$scratch/out.log" 2>&1
  rc=$?
  if [ $rc -ne 0 ]; then
    caught=$((caught + 1))
    printf 'caught  %-3s %-18s %-60.60s (%ds)\n' "$id" "$file" "$new" $(( $(date +%s) - start ))
  else
    missed+=("$id"); printf 'MISSED  %-3s %-18s %-60.60s\n' "$id" "$file" "$new"
  fi
  rm -rf "$scratch"
done
applied=$((total - ${#errors[@]}))
echo "$caught of $applied mutations caught ($(( applied ? 100 * caught / applied : 0 ))%) in $(( $(date +%s) - run_start ))s${missed:+; missed: ${missed[*]}}${errors:+; ERROR (not applied): ${errors[*]}}"
# all of them: at least 95% caught (docs/testing.md explains each survivor); a chosen few: every one
if [ $# -eq 0 ]; then [ ${#errors[@]} -eq 0 ] && [ $((100 * caught)) -ge $((95 * applied)) ]
else [ ${#errors[@]} -eq 0 ] && [ "$caught" -eq "$applied" ]; fi
