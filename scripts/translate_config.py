#!/usr/bin/env python3
"""A DeepSpeed config or FSDP's arguments, as this trainer's flags, for one GPT-2.

    scripts/translate_config.py --model M CONFIG.json              a DeepSpeed config (JSON)
    scripts/translate_config.py --model M --fsdp 'KEY=VALUE,...'   FSDP's arguments
  options: --ranks N (the run's ranks, default 1: for -d and the command's mpirun),
           --seq-len T (the run's -t, default 64: for -d), --ranks-per-node R (HYBRID_SHARD's groups)

The model M is a descriptor the trainer takes (d12, d48, d2c64h2t64: L layers, C channels, NH heads,
maxT) or one of the names 124M (d12), 350M (d24), 774M (d36), 1.5B (d48) and 7.5B (d36c4096h32t1024,
7.46e9 parameters: C = 4096 with heads of 128, the depth that comes nearest 7.5e9). Sizes given in
parameters are turned into this trainer's units from GPT-2's shapes, unpadded, as host/gpt2.c cuts
the model: a block unit (K blocks with -wrap K) holds K * (12 C^2 + 13 C) parameters, the embedding
unit V C + maxT C (wte and wpe, V = 50257), the final layernorm 2 C.

FSDP's arguments are one comma-separated list of KEY=VALUE, as FSDP (or FSDP2's fully_shard) names
them; an enum may carry its class (BackwardPrefetch.BACKWARD_PRE), booleans are True/False:
    sharding_strategy   FULL_SHARD | SHARD_GRAD_OP | NO_SHARD | HYBRID_SHARD | _HYBRID_SHARD_ZERO2
    backward_prefetch   BACKWARD_PRE | BACKWARD_POST | None
    forward_prefetch, limit_all_gathers, use_orig_params, sync_module_states, reshard_after_forward,
    activation_checkpointing, cpu_offload   True | False
    auto_wrap_policy    transformer (one unit a block) | size:N (size_based_auto_wrap_policy's
                        min_num_params) | none (the root only)
    mixed_precision     bf16 | fp16 | fp32 (MixedPrecision's param_dtype)

Prints one line per knob (what it maps to), one line per knob with no equivalent here (why), then
`flags:` and `command:`. A bad input (an unreadable file, bad JSON, an unknown stage or key, a
missing model) is one line on stderr and exit status 2.
"""
import argparse
import json
import math
import re
import sys

VOCAB = 50257
DEPTHS = {6: (384, 6), 12: (768, 12), 24: (1024, 16), 36: (1280, 20), 48: (1600, 25)}   # host/gpt2.c's dN
NAMES = {"124M": "d12", "350M": "d24", "774M": "d36", "1.5B": "d48", "7.5B": "d36c4096h32t1024"}
PD_MAX = 64        # -pd's range
WRAP_MAX = 8       # -wrap K: K divides L, K <= 8


class BadInput(Exception):
    """One line for stderr: the input named, and what is wrong with it."""


# ---- the model: GPT-2's shapes --------------------------------------------------------------------

class Model:
    def __init__(self, spec):
        self.spec = NAMES.get(spec, spec)
        m = re.fullmatch(r"d(\d+)(?:c(\d+)h(\d+)t(\d+))?", self.spec)
        if not m:
            raise BadInput(f"--model: '{spec}' is neither a descriptor like d12 or d2c64h2t64 nor one of {', '.join(NAMES)}")
        self.L = int(m.group(1))
        if m.group(2):
            self.C, self.NH, self.T = int(m.group(2)), int(m.group(3)), int(m.group(4))
        else:
            self.C, self.NH = DEPTHS.get(self.L, (64 * self.L, self.L))
            self.T = 1024
        if self.L < 1 or self.C < 1 or self.NH < 1 or self.T < 1 or self.C % self.NH:
            raise BadInput(f"--model: '{spec}' is not a GPT-2 (L, C, NH, maxT positive, NH divides C)")
        self.block = 12 * self.C * self.C + 13 * self.C
        self.embedding = VOCAB * self.C + self.T * self.C
        self.head = 2 * self.C
        self.total = self.L * self.block + self.embedding + self.head

    def describe(self):
        return (f"model {self.spec}: GPT-2 L={self.L} C={self.C} NH={self.NH} maxT={self.T}, {self.total:,} parameters; "
                f"units from GPT-2's shapes (unpadded): a block {self.block:,}, the embedding {self.embedding:,}, "
                f"the final layernorm {self.head:,}")

    def units_below(self, threshold, wrap=1):
        """The units with fewer than `threshold` parameters (what -pt keeps replicated)."""
        units = [("the final layernorm", self.head), ("the embedding", self.embedding), (f"each block unit", wrap * self.block)]
        return [name for name, n in units if n < threshold]

    def wraps(self):
        """The K that -wrap K takes for this model: K divides L, K <= 8."""
        return [k for k in range(1, WRAP_MAX + 1) if self.L % k == 0]


# ---- the translation: flags in order, and the lines that say why ----------------------------------

class Translation:
    def __init__(self, model, args):
        self.model, self.args = model, args
        self.flags = {}     # flag -> value, in the order set
        self.lines = []     # "knob -> flag" lines
        self.none = []      # "knob: why there is no equivalent" lines
        self.stage = 3      # the ZeRO stage chosen so far
        self.reshard = True  # -ra 1: a unit is freed after its forward
        self.wrap = 1       # -wrap K: blocks per unit

    def set(self, knob, flag, value, why=""):
        self.flags[flag] = str(value)
        self.lines.append(f"  {knob:<44} -> {flag} {value}" + (f"   ({why})" if why else ""))

    def same(self, knob, why):
        self.lines.append(f"  {knob:<44} -> no flag: {why}")

    def missing(self, knob, why):
        self.none.append(f"  {knob}: {why}")

    def command(self):
        flags = " ".join(f"{k} {v}" for k, v in self.flags.items())
        launch = f"mpirun -np {self.args.ranks} " if self.args.ranks > 1 else ""
        return flags, f"{launch}./train_gpt2_zero3 -e {self.model.spec} {flags}".rstrip()

    def print(self, source):
        print(self.model.describe())
        print(f"{source}:")
        print("\n".join(self.lines) if self.lines else "  (nothing to translate)")
        if self.none:
            print("no equivalent here:")
            print("\n".join(self.none))
        flags, cmd = self.command()
        print(f"flags: {flags}")
        print(f"command: {cmd}")


def blocks_text(model, n, wrap=1):
    return f"{n / (wrap * model.block):.2f} of a {'block' if wrap == 1 else f'{wrap}-block'} unit"


def prefetch_depth(t, knob, bucket, max_live):
    """-pd from a prefetch bucket and a bound on the live gathered parameters (both in parameters)."""
    unit = t.wrap * t.model.block
    pd = max(1, min(PD_MAX, math.ceil(bucket / unit))) if bucket > 0 else 0
    why = f"{bucket:,.0f} = {blocks_text(t.model, bucket, t.wrap)}: the units the bucket reaches into"
    if max_live is not None:
        live = int(max_live // unit)   # whole units that fit; -bp pre holds 1 + P of them
        if live < 1:
            t.missing("stage3_max_live_parameters", f"{max_live:,.0f} is under one unit ({unit:,}): this engine "
                      "gathers whole units, at least one at a time; -wrap finer units is the way down")
        elif pd > live - 1:
            pd = live - 1
            why += f"; stage3_max_live_parameters {max_live:,.0f} holds {live} units, so 1 + P <= {live}"
        else:
            why += f"; stage3_max_live_parameters {max_live:,.0f} ({live} units) does not bind"
    t.set(knob, "-pd", pd, why)


# ---- DeepSpeed -----------------------------------------------------------------------------------

ZERO_KEYS = {
    "stage", "reduce_bucket_size", "allgather_bucket_size", "stage3_prefetch_bucket_size", "stage3_max_live_parameters",
    "stage3_max_reuse_distance", "stage3_param_persistence_threshold", "contiguous_gradients", "overlap_comm",
    "reduce_scatter", "allgather_partitions", "offload_optimizer", "offload_param", "zero_hpz_partition_size",
    "zero_quantized_weights", "zero_quantized_gradients", "sub_group_size", "round_robin_gradients",
    "stage3_gather_16bit_weights_on_model_save", "stage3_gather_fp16_weights_on_model_save", "mics_shard_size",
    "elastic_checkpoint", "ignore_unused_parameters", "load_from_fp32_weights", "cpu_offload", "memory_efficient_linear",
}
# Hugging Face's Trainer fills "auto" from the model's hidden size C (transformers' deepspeed integration)
AUTO = {"reduce_bucket_size": lambda C: C * C, "stage3_prefetch_bucket_size": lambda C: int(0.9 * C * C),
        "stage3_param_persistence_threshold": lambda C: 10 * C}
# DeepSpeed's defaults, where a knob is left out
DEFAULTS = {"reduce_bucket_size": 5e8, "stage3_prefetch_bucket_size": 5e7, "stage3_max_live_parameters": 1e9,
            "stage3_param_persistence_threshold": 1e5}
ALWAYS = {
    "contiguous_gradients": "each unit's gradients are one flat buffer already",
    "overlap_comm": "reductions (and prefetched gathers) always run beside the compute, on a communication thread or stream",
    "reduce_scatter": "sharded gradients are always reduce-scattered, one collective a unit",
    "allgather_partitions": "sharded params are always all-gathered, one collective a unit",
    "round_robin_gradients": "each unit's gradient shard is reduced into its owner's slice directly",
    "ignore_unused_parameters": "every GPT-2 parameter is used in every step",
    "load_from_fp32_weights": "checkpoints hold the fp32 master; a resume reads it",
    "elastic_checkpoint": "a checkpoint resumes on any number of ranks and any stage already",
}


def size_value(t, zero, key):
    """A size knob in parameters: its number, "auto" (Hugging Face's rule), or DeepSpeed's default."""
    v = zero.get(key, DEFAULTS.get(key))
    if v == "auto":
        n = AUTO[key](t.model.C)
        return n, f"{key} auto = {n:,}"
    if isinstance(v, bool) or not isinstance(v, (int, float)) or v < 0:
        raise BadInput(f"zero_optimization.{key}: expected a number of parameters or \"auto\", got {json.dumps(v)}")
    return v, f"{key} {v:g}" + ("" if key in zero else " (DeepSpeed's default)")


def deepspeed_stage(t, zero):
    stage = zero.get("stage", 0)
    if isinstance(stage, bool) or stage not in (0, 1, 2, 3):
        raise BadInput(f"zero_optimization.stage: {json.dumps(stage)} is not a ZeRO stage (0, 1, 2, 3)")
    t.stage = stage
    t.set(f"stage {stage}", "-z", stage)
    if stage == 3:
        t.missing("DeepSpeed's gather granularity", "DeepSpeed fetches each submodule's params as the trace reaches it; "
                  "here a unit is one block (-wrap K: K blocks), fetched whole")


def deepspeed_stage3(t, zero):
    if t.stage != 3:
        for key in ("stage3_prefetch_bucket_size", "stage3_max_live_parameters", "stage3_param_persistence_threshold"):
            if key in zero:
                t.missing(key, f"DeepSpeed reads it at stage 3 only; at -z {t.stage} params stay whole")
        return
    bucket, bucket_text = size_value(t, zero, "stage3_prefetch_bucket_size")
    live, live_text = size_value(t, zero, "stage3_max_live_parameters")
    prefetch_depth(t, bucket_text, bucket, live)
    threshold, text = size_value(t, zero, "stage3_param_persistence_threshold")
    below = t.model.units_below(threshold, t.wrap)
    t.set(text, "-pt", int(threshold), f"units under it stay replicated: {', '.join(below) if below else 'none of this model'}")
    if "stage3_max_reuse_distance" in zero:
        t.missing("stage3_max_reuse_distance", "a unit is freed after each use (-ra 1) or kept from its forward to its "
                  "backward (-ra 0); no distance in between")


def deepspeed_buckets(t, zero):
    if t.stage >= 1 or "reduce_bucket_size" in zero:
        n, text = size_value(t, zero, "reduce_bucket_size")
        t.missing(text, f"= {blocks_text(t.model, n, t.wrap)}; each unit's gradients are reduced as one collective when its "
                  "backward ends: the unit is the bucket, and -wrap K sets its size")
    if "allgather_bucket_size" in zero:
        t.missing(f"allgather_bucket_size {zero['allgather_bucket_size']}", "stages 1-2 all-gather the updated params unit by "
                  "unit, 16 in flight: the unit is the bucket")


def deepspeed_zeropp(t, zero):
    hpz, qw, qg = zero.get("zero_hpz_partition_size", 1), zero.get("zero_quantized_weights"), zero.get("zero_quantized_gradients")
    if (hpz not in (0, 1) or qw or qg) and t.stage != 3:
        t.missing("ZeRO++ (zero_hpz_partition_size, zero_quantized_*)", f"builds on ZeRO-3's gathers; at -z {t.stage} there are none")
        return
    if not isinstance(hpz, int) or isinstance(hpz, bool) or hpz < 0:
        raise BadInput(f"zero_optimization.zero_hpz_partition_size: expected a group size, got {json.dumps(hpz)}")
    if hpz > 1:
        t.set(f"zero_hpz_partition_size {hpz}", "-hp", hpz, "a secondary shard in groups of G ranks; G must divide N")
    if qw:
        t.set("zero_quantized_weights true", "-qw", 8, "int8 blocks of 256 with an fp32 scale each")
    if qg:
        t.set("zero_quantized_gradients true", "-qg", 8, "int8 gradients in two all-to-all hops")
    if zero.get("mics_shard_size", -1) not in (-1, 0):
        t.set(f"mics_shard_size {zero['mics_shard_size']}", "-hs", zero["mics_shard_size"], "MiCS shards within groups and "
              "replicates across them: HSDP")


def deepspeed_offload(t, zero):
    for key in ("offload_optimizer", "offload_param", "cpu_offload"):
        v = zero.get(key)
        device = v.get("device", "none") if isinstance(v, dict) else ("cpu" if v else "none")
        if device not in ("none", None):
            t.missing(f"{key} ({device})", "no offload: the model state stays where the shard computes (on the CPU "
                      "trainer it is host memory already)")
    if "sub_group_size" in zero:
        t.missing(f"sub_group_size {zero['sub_group_size']:g}" if isinstance(zero["sub_group_size"], (int, float)) else
                  "sub_group_size", "AdamW steps the whole shard in one call; sub-groups bound offloaded optimizer memory")
    for key in ("stage3_gather_16bit_weights_on_model_save", "stage3_gather_fp16_weights_on_model_save"):
        if key in zero:
            t.missing(key, "a run with -o always writes the whole model (model.bin) at its end")


def deepspeed_top(t, cfg):
    """The sections beside zero_optimization: precision, the batch, clipping, the optimizer."""
    if (cfg.get("bf16") or {}).get("enabled") is True:
        t.set("bf16.enabled true", "-p", "bf16")
    if (cfg.get("fp16") or {}).get("enabled") is True:
        t.missing("fp16.enabled true", "no fp16 with loss scaling here; -p bf16 is the nearest (same bytes, no scaler)")
    B = cfg.get("train_micro_batch_size_per_gpu")
    if B is not None:
        t.set(f"train_micro_batch_size_per_gpu {B}", "-b", B)
    A = cfg.get("gradient_accumulation_steps", 1)
    if A != "auto" and A > 1:
        d = t.args.ranks * (B or 4) * t.args.seq_len * A
        t.set(f"gradient_accumulation_steps {A}", "-d", d, f"tokens per step = N {t.args.ranks} x B x T {t.args.seq_len} x A")
    if "gradient_clipping" in cfg:
        t.set(f"gradient_clipping {cfg['gradient_clipping']}", "-gc", cfg["gradient_clipping"])
    opt = cfg.get("optimizer") or {}
    if opt and str(opt.get("type", "")).lower() not in ("adamw", "adam"):
        t.missing(f"optimizer {opt.get('type')}", "the trainer's optimizer is AdamW")
    params = opt.get("params") or {}
    if "lr" in params:
        t.set(f"optimizer.params.lr {params['lr']}", "-l", params["lr"])
    if "weight_decay" in params:
        t.set(f"optimizer.params.weight_decay {params['weight_decay']}", "-c", params["weight_decay"], "on the six matrices")
    for key in ("betas", "eps"):
        if key in params:
            t.missing(f"optimizer.params.{key}", "AdamW's betas (0.9, 0.95) and eps 1e-8 are fixed here")


def translate_deepspeed(t, cfg):
    zero = cfg.get("zero_optimization")
    if not isinstance(zero, dict):
        raise BadInput("the config has no zero_optimization section (an object)")
    unknown = sorted(set(zero) - ZERO_KEYS)
    if unknown:
        raise BadInput(f"zero_optimization.{unknown[0]}: not a DeepSpeed ZeRO knob this translator knows")
    deepspeed_stage(t, zero)
    deepspeed_top(t, cfg)
    deepspeed_stage3(t, zero)
    deepspeed_zeropp(t, zero)
    for key, why in ALWAYS.items():
        if key in zero:
            t.same(f"{key} {json.dumps(zero[key])}", why)
    deepspeed_buckets(t, zero)
    deepspeed_offload(t, zero)


def read_json(path):
    try:
        with open(path, encoding="utf-8") as f:
            text = f.read()
    except (OSError, UnicodeDecodeError) as e:
        raise BadInput(f"{path}: cannot read it ({e.strerror if isinstance(e, OSError) else 'not UTF-8 text'})")
    try:
        cfg = json.loads(text)
    except json.JSONDecodeError as e:
        raise BadInput(f"{path}: not JSON: {e.msg} at line {e.lineno} column {e.colno}")
    if not isinstance(cfg, dict):
        raise BadInput(f"{path}: a DeepSpeed config is a JSON object, this is a {type(cfg).__name__}")
    return cfg


# ---- FSDP ----------------------------------------------------------------------------------------

FSDP_KEYS = {"sharding_strategy", "backward_prefetch", "forward_prefetch", "limit_all_gathers", "use_orig_params",
             "auto_wrap_policy", "mixed_precision", "cpu_offload", "sync_module_states", "reshard_after_forward",
             "activation_checkpointing"}
STRATEGIES = {"FULL_SHARD": (3, True, False), "SHARD_GRAD_OP": (3, False, False), "NO_SHARD": (0, True, False),
              "HYBRID_SHARD": (3, True, True), "_HYBRID_SHARD_ZERO2": (3, False, True)}   # -z, reshard after forward, HSDP


def parse_fsdp(text):
    pairs = {}
    for item in filter(None, (s.strip() for s in text.split(","))):
        key, eq, value = item.partition("=")
        key, value = key.strip(), value.strip()
        if not eq or not value:
            raise BadInput(f"--fsdp: '{item}' is not KEY=VALUE")
        if key not in FSDP_KEYS:
            raise BadInput(f"--fsdp: unknown key '{key}' (known: {', '.join(sorted(FSDP_KEYS))})")
        pairs[key] = value.split(".")[-1] if key in ("sharding_strategy", "backward_prefetch") else value
    return pairs


def fsdp_bool(pairs, key, default):
    v = pairs.get(key)
    if v is None:
        return default
    if v not in ("True", "False", "true", "false", "1", "0"):
        raise BadInput(f"--fsdp: {key}={v}: expected True or False")
    return v in ("True", "true", "1")


def fsdp_sharding(t, pairs):
    name = pairs.get("sharding_strategy", "FULL_SHARD")
    if name not in STRATEGIES:
        raise BadInput(f"--fsdp: sharding_strategy={name}: expected one of {', '.join(STRATEGIES)}")
    stage, reshard, hybrid = STRATEGIES[name]
    reshard = fsdp_bool(pairs, "reshard_after_forward", reshard)
    t.stage, t.reshard = stage, reshard
    t.set(f"sharding_strategy {name}", "-z", stage)
    if stage == 3 and not reshard:
        t.set("params kept from forward to backward", "-ra", 0, "SHARD_GRAD_OP / reshard_after_forward=False")
    if hybrid:
        if not t.args.ranks_per_node:
            raise BadInput(f"--fsdp: sharding_strategy={name} shards within a node: give --ranks-per-node R")
        t.set(f"{name}'s node groups", "-hs", t.args.ranks_per_node, "shard inside groups of R ranks, replicate across")


def fsdp_wrap(t, pairs):
    policy = pairs.get("auto_wrap_policy", "transformer")
    L, block = t.model.L, t.model.block
    if policy == "transformer":
        t.wrap = 1
        t.set("auto_wrap_policy transformer (a block a unit)", "-wrap", 1)
        return
    m = re.fullmatch(r"size:([0-9.eE+]+)", policy)
    if policy != "none" and not m:
        raise BadInput(f"--fsdp: auto_wrap_policy={policy}: expected transformer, size:N or none")
    want = math.inf if policy == "none" else math.ceil(float(m.group(1)) / block)
    fits = [k for k in t.model.wraps() if k >= want]
    t.wrap = fits[0] if fits else t.model.wraps()[-1]
    why = f"{t.wrap} block{'s' if t.wrap > 1 else ''} a unit, {t.wrap * block:,} parameters"
    if not fits:
        need = "" if policy == "none" else f"a unit of {want} blocks (more than the model's {L}) would be needed, so "
        why += f"; {need}FSDP keeps the whole model in the root's one unit; -wrap {t.wrap} is the coarsest here " \
               f"(K divides L, K <= {WRAP_MAX})"
    t.set(f"auto_wrap_policy {policy}", "-wrap", t.wrap, why)


def fsdp_prefetch(t, pairs):
    gathers_in_backward = t.stage == 3 and t.reshard
    bp = pairs.get("backward_prefetch", "BACKWARD_PRE")
    if bp not in ("BACKWARD_PRE", "BACKWARD_POST", "None"):
        raise BadInput(f"--fsdp: backward_prefetch={bp}: expected BACKWARD_PRE, BACKWARD_POST or None")
    limit = fsdp_bool(pairs, "limit_all_gathers", True)
    forward = fsdp_bool(pairs, "forward_prefetch", False)
    if bp == "None" and not forward:
        t.set("backward_prefetch None, forward_prefetch False", "-pd", 0, "nothing gathered ahead")
        return
    t.set(f"limit_all_gathers {limit}", "-pd", 1, "one unit gathered ahead of the one computing" +
          ("" if limit else "; FSDP leaves it unbounded, here -pd P bounds it always (up to 64)"))
    if bp == "None":
        t.missing("backward_prefetch None (with forward_prefetch)", "-pd prefetches both passes or neither")
    elif not gathers_in_backward:
        t.same(f"backward_prefetch {bp}", f"at -z {t.stage}{' -ra 0' if t.stage == 3 else ''} the backward gathers nothing")
    else:
        t.set(f"backward_prefetch {bp}", "-bp", "pre" if bp == "BACKWARD_PRE" else "post")
    if forward:
        t.same("forward_prefetch True", "the forward gathers ahead whenever -pd >= 1")


def fsdp_rest(t, pairs):
    mp = pairs.get("mixed_precision", "fp32")
    if mp not in ("bf16", "fp16", "fp32"):
        raise BadInput(f"--fsdp: mixed_precision={mp}: expected bf16, fp16 or fp32")
    if mp == "bf16":
        t.set("mixed_precision bf16", "-p", "bf16")
    elif mp == "fp16":
        t.missing("mixed_precision fp16", "no fp16 with loss scaling here; -p bf16 is the nearest")
    if fsdp_bool(pairs, "activation_checkpointing", False):
        t.set("activation_checkpointing True", "-rc", 1, "recompute inside the backward's gather: no extra bytes")
    if fsdp_bool(pairs, "use_orig_params", False):
        t.missing("use_orig_params True", "the optimizer works on flat unit shards (decay by tensor, -c); there are no "
                  "per-tensor parameter objects to hand to param groups or LoRA")
    if fsdp_bool(pairs, "cpu_offload", False):
        t.missing("cpu_offload True", "no offload: the model state stays where the shard computes")
    if "sync_module_states" in pairs:
        t.same(f"sync_module_states {pairs['sync_module_states']}", "every rank builds the same init from the seed (-S) "
               "or reads its slice of the model file")


def translate_fsdp(t, text):
    pairs = parse_fsdp(text)
    fsdp_sharding(t, pairs)
    fsdp_wrap(t, pairs)
    fsdp_prefetch(t, pairs)
    fsdp_rest(t, pairs)


# ---- the command line ----------------------------------------------------------------------------

class Parser(argparse.ArgumentParser):
    def error(self, message):
        raise BadInput(message)


def main(argv):
    ap = Parser(description="A DeepSpeed config or FSDP's arguments as train_gpt2_zero3's flags.")
    ap.add_argument("config", nargs="?", help="a DeepSpeed config (JSON)")
    ap.add_argument("--fsdp", help="FSDP's arguments, KEY=VALUE,...")
    ap.add_argument("--model", help="d12, d2c64h2t64, 124M, 7.5B, ...")
    ap.add_argument("--ranks", type=int, default=1)
    ap.add_argument("--seq-len", type=int, default=64)
    ap.add_argument("--ranks-per-node", type=int, default=0)
    args = ap.parse_args(argv)
    if not args.model:
        raise BadInput("--model: missing: the translation needs the model's unit sizes (d12, 124M, 7.5B, ...)")
    if (args.config is None) == (args.fsdp is None):
        raise BadInput("give one of a DeepSpeed config file or --fsdp 'KEY=VALUE,...'")
    if args.ranks < 1 or args.seq_len < 1 or args.ranks_per_node < 0:
        raise BadInput("--ranks and --seq-len must be positive, --ranks-per-node not negative")
    t = Translation(Model(args.model), args)
    if args.fsdp is not None:
        translate_fsdp(t, args.fsdp)
        t.print(f"fsdp {args.fsdp}")
    else:
        translate_deepspeed(t, read_json(args.config))
        t.print(f"deepspeed {args.config}")
    return 0


if __name__ == "__main__":
    try:
        sys.exit(main(sys.argv[1:]))
    except BadInput as e:
        print(f"error: {e}", file=sys.stderr)
        sys.exit(2)
