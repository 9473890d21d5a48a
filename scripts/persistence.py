#!/usr/bin/env python3
"""The persistence threshold per unit (this engine's -pt) against per tensor (DeepSpeed's
stage3_param_persistence_threshold), for GPT-2's real tensor shapes at ZeRO stage 3.

  scripts/persistence.py [--model d12] [--threshold 1e5] [--ranks 4] [--precision fp32|bf16] [--log LOG.csv]

Here a unit with fewer than N parameters stays replicated (DDP's row of the stage table), and every
other unit is gathered whole, as one flat buffer. DeepSpeed replicates each parameter tensor with
fewer than N elements, so the small tensors of a sharded block (its biases and layernorms) are kept
on every rank and the block's gather carries only its matrices. What that would change, per
training step of one micro-step, is counted here from the shapes (V padded to 50304, as the
trainer lays out wte; the tensors' alignment padding left out):

  - the gathers a step issues: forward, every sharded unit once and the tied embedding again for
    the LM head; backward, every sharded unit but the embedding (held from the LM head);
  - the bytes each rank sends for those gathers (as the ledger counts them: (N-1)/N of each gathered
    unit's buffer on the ring), and the replicated parameters each rank then holds beside its shards;
  - with --log, the log.csv of a run of the same model on the same ranks at -z 3 -pt N, one micro-step a step: its
    comm_bytes must be this script's count for the per-unit engine (gathers, reduce-scatters, the
    persistent units' all-reduces, the norm; within 1% for padding), and its step time bounds what
    the per-tensor bytes could save: the collectives are the same, so at most the byte fraction of
    the step (a collective's latency stays).

The reduce-scatters are left as they are: a replicated tensor's gradients are still summed over the
ranks (an all-reduce, the same buffer bytes).
"""
import os
import re
import sys

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import plotlib  # noqa: E402

VOCAB_PADDED = 50304            # the trainer's wte rows (GPT-2's 50257 rounded up to a multiple of 128)
DEPTHS = {6: (384, 6), 12: (768, 12), 24: (1024, 16), 36: (1280, 20), 48: (1600, 25)}   # the trainer's dN


def model(spec):
    """GPT-2's units for a descriptor (dN, dLcChHtT), each [(tensor, numel)], in the trainer's order."""
    m = re.fullmatch(r"d(\d+)(?:c(\d+)h(\d+)t(\d+))?", spec)
    if not m or int(m.group(1)) < 1:
        raise plotlib.InputError(f"--model: '{spec}' is not a descriptor like d12 or d2c64h2t64")
    L = int(m.group(1))
    if m.group(2):
        C, NH, T = int(m.group(2)), int(m.group(3)), int(m.group(4))
    else:
        C, NH = DEPTHS.get(L, (64 * L, L))
        T = 1024
    if C < 1 or NH < 1 or T < 1 or C % NH:
        raise plotlib.InputError(f"--model: '{spec}' is not a GPT-2 (C, NH, maxT positive, NH divides C)")
    block = [("ln_1.w", C), ("ln_1.b", C), ("qkv.w", 3 * C * C), ("qkv.b", 3 * C), ("attn_proj.w", C * C),
             ("attn_proj.b", C), ("ln_2.w", C), ("ln_2.b", C), ("fc.w", 4 * C * C), ("fc.b", 4 * C),
             ("fc_proj.w", 4 * C * C), ("fc_proj.b", C)]
    units = [("embedding", [("wte", VOCAB_PADDED * C), ("wpe", T * C)])]
    units += [(f"block{l}", block) for l in range(L)]
    units += [("head", [("ln_f.w", C), ("ln_f.b", C)])]
    return units, L, C


def numel(tensors):
    return sum(n for _, n in tensors)


def gathered(units, per_tensor, threshold):
    """Each unit's gathered parameters under one semantics (0: replicated, never gathered)."""
    out = {}
    for name, tensors in units:
        if per_tensor:
            out[name] = sum(n for _, n in tensors if n >= threshold)
        else:
            out[name] = 0 if numel(tensors) < threshold else numel(tensors)
    return out


def step_gathers(units, sizes):
    """The gathers of one training step and their parameters: forward every sharded unit, the tied
    embedding a second time; backward every sharded unit but the embedding."""
    # two each: a block or the head in its forward and its backward, the embedding in its forward
    # and the LM head's
    sharded = [sizes[name] for name, _ in units if sizes[name]]
    return 2 * len(sharded), 2 * sum(sharded)


def main():
    ap = plotlib.ArgumentParser(prog="persistence.py")
    ap.add_argument("--model", default="d12")
    ap.add_argument("--threshold", default="1e5")
    ap.add_argument("--ranks", type=int, default=4)
    ap.add_argument("--precision", choices=("fp32", "bf16"), default="fp32")
    ap.add_argument("--log", default=None)
    a = ap.parse_args()
    try:
        threshold = float(a.threshold)
    except ValueError:
        raise plotlib.InputError(f"--threshold: '{a.threshold}' is not a number of parameters")
    if not (0 <= threshold <= 1e16):
        raise plotlib.InputError(f"--threshold: {a.threshold} is not a number of parameters in [0, 1e16]")
    if not 2 <= a.ranks <= 1 << 24:
        raise plotlib.InputError(f"--ranks: {a.ranks} is not a number of ranks in [2, 16777216] (one rank gathers nothing)")
    units, L, C = model(a.model)
    # the bytes a rank sends on the ring for a buffer of one parameter: (N-1)/N of its bytes
    pbytes = (2 if a.precision == "bf16" else 4) * (a.ranks - 1) / a.ranks
    total = sum(numel(t) for _, t in units)
    unit_sizes, tensor_sizes = gathered(units, False, threshold), gathered(units, True, threshold)
    print(f"GPT-2 {a.model}: L={L} C={C}, {total:,} parameters; threshold {threshold:,.0f} parameters; ZeRO-3 on "
          f"{a.ranks} ranks, {a.precision}, one micro-step a step")
    print("unit            parameters  its tensors under the threshold (per tensor: replicated inside the sharded unit)")
    seen = set()
    for name, tensors in units:
        kind = "block (x%d)" % L if name.startswith("block") else name
        if kind in seen:
            continue
        seen.add(kind)
        small = [(t, n) for t, n in tensors if n < threshold]
        what = "none" if not small else f"{len(small)} of {len(tensors)}: {', '.join(t for t, _ in small)} = {numel(small):,}"
        whole = "; the whole unit is under it (per unit: replicated too)" if numel(tensors) < threshold else ""
        print(f"  {kind:<14}{numel(tensors):>11,}  {what}{whole}")
    (gu, pu), (gt, pt) = step_gathers(units, unit_sizes), step_gathers(units, tensor_sizes)
    rep_u, rep_t = total - sum(unit_sizes.values()), total - sum(tensor_sizes.values())
    print(f"{'':<30}{'per unit (here, -pt)':>22}{'per tensor (DeepSpeed)':>24}{'saved':>22}")
    print(f"  {'gathers a step':<28}{gu:>22,}{gt:>24,}{gu - gt:>22,}")
    print(f"  {'gather bytes a rank sends':<28}{pu * pbytes:>22,.0f}{pt * pbytes:>24,.0f}"
          f"{f'{(pu - pt) * pbytes:,.0f} ({100.0 * (pu - pt) / pu if pu else 0:.3f}%)':>22}")
    print(f"  {'replicated parameters':<28}{rep_u:>22,}{rep_t:>24,}{f'{rep_t - rep_u:,} more a rank':>22}")
    if a.log:
        measured(a.log, units, unit_sizes, pbytes, (a.ranks - 1) / a.ranks, (pu - pt) * pbytes)
    return 0


def measured(path, units, sizes, pbytes, ring, saved_bytes):
    """The per-unit engine's bytes a step against the run's log, and the step time's bound."""
    rows = plotlib.read_log(path, ["ms", "comm_bytes", "exposed_comm_ms"])
    last = rows[-1]
    count, gparams = step_gathers(units, sizes)
    # every unit's gradients reduce-scattered, a persistent unit's all-reduced (twice the ring's bytes);
    # the norm: one double all-reduced
    scattered = sum(numel(t) for name, t in units if sizes[name])
    all_reduced = sum(numel(t) for name, t in units if not sizes[name])
    expect = round(gparams * pbytes + scattered * pbytes + 2 * all_reduced * pbytes + 2 * 8 * ring)
    if abs(last["comm_bytes"] - expect) > 0.01 * expect:
        raise plotlib.InputError(f"{path}: {last['comm_bytes']:,.0f} comm bytes a step, where this model at -z 3 with this "
                                 f"threshold as -pt and one micro-step sends {expect:,} (another model, ranks, stage, "
                                 "precision, -pt or -d?)")
    frac = saved_bytes / last["comm_bytes"]
    print(f"measured ({path}, its last step): {last['ms']:,.1f} ms, {last['comm_bytes']:,.0f} comm bytes "
          f"(this count: {expect:,}), {last['exposed_comm_ms']:,.1f} ms exposed")
    print(f"  per tensor: the same collectives, {100.0 * frac:.3f}% fewer of the step's bytes: at most "
          f"{frac * last['ms']:.2f} ms of the {last['ms']:,.1f} ms step ({100.0 * frac:.3f}%), "
          f"{frac * last['exposed_comm_ms']:.2f} ms of the exposed time if it shrank with the bytes")


if __name__ == "__main__":
    plotlib.run(main)
