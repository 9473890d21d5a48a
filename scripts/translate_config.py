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
    activation_checkpointing   True | False
    cpu_offload         CPUOffload(offload_params=True) | CPUOffload(offload_params=False) | True | False
    auto_wrap_policy    transformer (one unit a block) | size:N (size_based_auto_wrap_policy's
                        min_num_params) | none (the root only)
    mixed_precision     bf16 | fp16 | fp32 (MixedPrecision's param_dtype)

The config is JSON with comments (// to the end of a line, /* ... */ and #, outside strings), as
DeepSpeed's reader (hjson) takes it; a key given twice is refused, as DeepSpeed refuses it. Only a
regular file of at most 1 MiB, nested at most 64 deep, is read (a FIFO, a device or a folder is
refused before anything is read from it). Every value is checked for its type; "auto" is resolved
as Hugging Face's Trainer resolves it (the sizes from the model's width) or, where it comes from
TrainingArguments (the batch, the learning rate, the precision), left to the trainer's default with a
line saying so; anywhere else it is refused. FSDP's keys left out take FSDP's own defaults (no
auto_wrap_policy wraps the root only; forward_prefetch False), listed under `assumed:`.

DeepSpeed's offload blocks: offload_optimizer device cpu -> -oo host, nvme -> -oo disk:NVME_PATH (no
nvme_path: -oo disk, the run's -o DIR/offload; the legacy cpu_offload true is device cpu);
offload_param device nvme -> -op disk:NVME_PATH (stage 3 only: at another stage the config is refused),
cpu has no flag (-op takes disk only). An nvme block's buffer_count -> -os (the slots each file
stages; the larger of the two blocks', at least 3). Their other knobs (pin_memory, buffer_size,
max_in_cpu, pipeline_read/write, fast_init, ratio; buffer_count for cpu) are type-checked and each gets a
line saying why it has no meaning here; an nvme_path that exists and is not a folder is refused. FSDP's
cpu_offload=CPUOffload(offload_params=True) -> -oo host, with a line for the parameter and gradient
shards, which stay where they compute.

Every command is checked by the trainer itself before it is printed: `train_gpt2_zero3 -plan N` with
the command's flags (the planner parses and checks flags exactly as a run on N ranks does), the
trainer found at --trainer, else $ZERO3_TRAINER, else ./train_gpt2_zero3 beside scripts/. A command
it refuses is never printed: the knob that made the flag and the trainer's line are the error.

Prints one line per knob (what it maps to), one line per knob with no equivalent here (why), then
`flags:` and `command:`. A bad input (an unreadable file, bad JSON, a wrong type, an unknown stage or
key, a missing model, a command the trainer refuses) is one line on stderr and exit status 2.
"""
import argparse
import json
import math
import os
import re
import shlex
import stat
import subprocess
import sys

VOCAB = 50257
DEPTHS = {6: (384, 6), 12: (768, 12), 24: (1024, 16), 36: (1280, 20), 48: (1600, 25)}   # host/gpt2.c's dN
NAMES = {"124M": "d12", "350M": "d24", "774M": "d36", "1.5B": "d48", "7.5B": "d36c4096h32t1024"}
PD_MAX = 64        # -pd's range
WRAP_MAX = 8       # -wrap K: K divides L, K <= 8
TRAINER_B, TRAINER_T = 4, 64   # the trainer's defaults for -b and -t
CONFIG_MAX_BYTES = 1 << 20     # a DeepSpeed config is a few KB; /dev/zero or a log is refused unread
CONFIG_MAX_DEPTH = 64          # DeepSpeed's configs nest 3 deep; deeper is refused before the JSON reader recurses
NUMBER_MAX = 1e300             # larger numbers are refused before arithmetic turns them into inf
CHECK_TIMEOUT_S = 60           # the trainer's check of a command (-plan N allocates nothing: well under a second)


class BadInput(Exception):
    """One line for stderr: the input named, and what is wrong with it."""


def show(v, limit=60):
    """A value from the config as one printable line: a number as typed (1e400, not inf), the rest as JSON ("2")."""
    text = v.text if isinstance(v, Num) else json.dumps(v)
    return text if len(text) <= limit else text[:limit] + "..."


def name_of(text, limit=1000):
    """A name the user typed (a file, a model, an FSDP key or value) as one printable line: as typed, or as a
    JSON string when it holds a line break or another unprintable character."""
    text = text if text.isprintable() else json.dumps(text)
    return text if len(text) <= limit else text[:limit] + "..."


class Num(float):
    """A JSON number with a fraction or exponent, and its text as typed (for messages: 1e400, NaN)."""
    def __new__(cls, text):
        n = float.__new__(cls, text)
        n.text = text
        return n


def number(key, v, what, integer=False):
    """A finite number (an integer when `integer`: 3.0 is 3, 2.5 is refused), one line naming the key otherwise."""
    if isinstance(v, bool) or not isinstance(v, (int, float)):
        raise BadInput(f"{key}: expected {what}, got {show(v)}")
    if not math.isfinite(v) or abs(v) > NUMBER_MAX:
        raise BadInput(f"{key}: {show(v)} is not a finite number within 1e300")
    if integer and isinstance(v, float):
        if v != math.floor(v):
            raise BadInput(f"{key}: expected {what}, got {show(v)}")
        return int(v)
    return v


def section(cfg, key, where=""):
    """An object of the config (empty when left out, or null), one line naming the key otherwise."""
    v = cfg.get(key)
    if v is None:
        return {}
    if not isinstance(v, dict):
        raise BadInput(f"{where}{key}: expected an object, got {show(v)}")
    return v


def boolean(key, v, auto=False):
    """true or false ("auto" too where Hugging Face fills it): one line naming the key otherwise."""
    if isinstance(v, bool) or (auto and v == "auto"):
        return v
    raise BadInput(f"{key}: expected true or false" + (' or "auto"' if auto else "") + f", got {show(v)}")


# ---- the model: GPT-2's shapes --------------------------------------------------------------------

class Model:
    def __init__(self, spec):
        self.spec = NAMES.get(spec, spec)
        m = re.fullmatch(r"d(\d+)(?:c(\d+)h(\d+)t(\d+))?", self.spec)
        if not m:
            raise BadInput(f"--model: '{name_of(spec)}' is neither a descriptor like d12 or d2c64h2t64 nor one of {', '.join(NAMES)}")
        self.L = int(m.group(1))
        if m.group(2):
            self.C, self.NH, self.T = int(m.group(2)), int(m.group(3)), int(m.group(4))
        else:
            self.C, self.NH = DEPTHS.get(self.L, (64 * self.L, self.L))
            self.T = 1024
        if self.L < 1 or self.C < 1 or self.NH < 1 or self.T < 1 or self.C % self.NH:
            raise BadInput(f"--model: '{name_of(spec)}' is not a GPT-2 (L, C, NH, maxT positive, NH divides C)")
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

    def block_tensors_below(self, threshold):
        """A block's tensors with fewer than `threshold` elements (what DeepSpeed's threshold, per tensor,
        keeps replicated inside it): their number and parameters."""
        C = self.C
        tensors = [C, C, 3 * C * C, 3 * C, C * C, C, C, C, 4 * C * C, 4 * C, 4 * C * C, C]   # ln_1 qkv attn_proj ln_2 fc fc_proj
        small = [n for n in tensors if n < threshold]
        return (len(small), sum(small)) if small else None

    def wraps(self):
        """The K that -wrap K takes for this model: K divides L, K <= 8."""
        return [k for k in range(1, WRAP_MAX + 1) if self.L % k == 0]


# ---- the translation: flags in order, and the lines that say why ----------------------------------

class Translation:
    def __init__(self, model, args):
        self.model, self.args = model, args
        self.flags = {}     # flag -> value, in the order set
        self.knobs = {}     # flag -> the knob it came from (for the trainer's refusal)
        self.lines = []     # "knob -> flag" lines
        self.none = []      # "knob: why there is no equivalent" lines
        self.assumed = []   # "knob value: the default taken" lines
        self.stage = 3      # the ZeRO stage chosen so far
        self.reshard = True  # -ra 1: a unit is freed after its forward
        self.wrap = 1       # -wrap K: blocks per unit

    def set(self, knob, flag, value, why=""):
        self.flags[flag] = str(value)
        self.knobs[flag] = knob
        self.lines.append(f"  {knob:<44} -> {flag} {value}" + (f"   ({why})" if why else ""))

    def same(self, knob, why):
        self.lines.append(f"  {knob:<44} -> no flag: {why}")

    def missing(self, knob, why):
        self.none.append(f"  {knob}: {why}")

    def assume(self, knob, why):
        self.assumed.append(f"  {knob}: {why}")

    def argv(self):
        """The command's flags after the trainer's name, as a list."""
        out = ["-e", self.model.spec]
        for k, v in self.flags.items():
            out += [k, v]
        return out

    def command(self):
        flags = " ".join(f"{k} {shlex.quote(v)}" for k, v in self.flags.items())   # a folder with a space stays one word
        launch = f"mpirun -np {self.args.ranks} " if self.args.ranks > 1 else ""
        return flags, f"{launch}./train_gpt2_zero3 -e {self.model.spec} {flags}".rstrip()

    def print(self, source):
        print(self.model.describe())
        print(f"{source}:")
        print("\n".join(self.lines) if self.lines else "  (nothing to translate)")
        if self.assumed:
            print("assumed:")
            print("\n".join(self.assumed))
        if self.none:
            print("no equivalent here:")
            print("\n".join(self.none))
        flags, cmd = self.command()
        print(f"flags: {flags}")
        print(f"command: {cmd}")


# ---- the trainer's check: -plan N with the command's flags, before anything is printed -----------

def trainer_path(args):
    if args.trainer:
        return args.trainer
    return os.environ.get("ZERO3_TRAINER") or os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "train_gpt2_zero3")


def refused_flag(line):
    """The flag a trainer's error line names: 'flag -l: ...' and 'flags -b -t: ...' give -l and -b."""
    m = re.match(r"flags? (-[A-Za-z]+)", line)
    return m.group(1) if m else None


def check_with_trainer(t):
    """The trainer's planner parses and checks the command's flags as a run on N ranks would: a refusal
    is the translation's error, naming the knob that made the flag."""
    trainer = trainer_path(t.args)
    if not os.path.isfile(trainer) or not os.access(trainer, os.X_OK):
        raise BadInput(f"--trainer: {name_of(trainer)} is not an executable file (make train_gpt2_zero3): every command is "
                       "checked by the trainer before it is printed")
    cmd = [trainer, "-plan", str(t.args.ranks)] + t.argv()
    env = dict(os.environ, OMP_NUM_THREADS="1")
    try:
        p = subprocess.run(cmd, stdin=subprocess.DEVNULL, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE,
                           timeout=CHECK_TIMEOUT_S, env=env)
    except subprocess.TimeoutExpired:
        raise BadInput(f"the trainer's check ({name_of(trainer)} -plan {t.args.ranks} ...) did not answer in {CHECK_TIMEOUT_S} s")
    except OSError as e:
        raise BadInput(f"--trainer: cannot run {name_of(trainer)} ({e.strerror})")
    if p.returncode == 0:
        return
    errors = [l[len("error: "):] for l in p.stderr.decode("utf-8", "replace").splitlines() if l.startswith("error: ")]
    line = errors[0] if errors else f"exit status {p.returncode} without an error line"
    flag = refused_flag(line)
    if flag in t.knobs:
        raise BadInput(f"{t.knobs[flag]} -> {flag} {t.flags[flag]}: the trainer refuses it: {line}")
    if flag == "-e":
        raise BadInput(f"--model {name_of(t.model.spec)}: the trainer refuses it: {line}")
    if flag == "-plan":
        raise BadInput(f"--ranks {t.args.ranks}: the trainer refuses it: {line}")
    raise BadInput(f"the trainer refuses the command: {line}")


def blocks_text(model, n, wrap=1):
    return f"{n / (wrap * model.block):.2f} of a {'block' if wrap == 1 else f'{wrap}-block'} unit"


def prefetch_depth(t, knob, bucket, max_live):
    """-pd from a prefetch bucket and a bound on the live gathered parameters (both in parameters)."""
    unit = t.wrap * t.model.block
    pd = max(1, min(PD_MAX, math.ceil(bucket / unit))) if bucket > 0 else 0
    why = f"{bucket:,.0f} = {blocks_text(t.model, bucket, t.wrap)}: the units the bucket reaches into"
    if max_live is not None:
        # live at once under -bp pre: the unit in use and the P ahead; one of them may be the largest
        # unit (the embedding, gathered for the encoder and again for the tied LM head), so
        # largest + P * unit <= max_live
        largest = max(unit, t.model.embedding)
        ahead = int((max_live - largest) // unit) if max_live >= largest else 0
        if max_live < unit:
            t.missing("stage3_max_live_parameters", f"{max_live:,.0f} is under one unit ({unit:,}): this engine "
                      "gathers whole units, at least one at a time; -wrap finer units is the way down")
        elif pd > ahead:
            pd = ahead
            why += (f"; stage3_max_live_parameters {max_live:,.0f} holds the largest unit ({largest:,}) and {ahead} "
                    f"more, so P <= {ahead}")
            if max_live < largest:
                why += " (the largest alone is over it: gathered when the compute needs it, as DeepSpeed does)"
        else:
            why += f"; stage3_max_live_parameters {max_live:,.0f} (the largest unit and {ahead} more) does not bind"
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
        if key not in AUTO:
            raise BadInput(f"zero_optimization.{key}: \"auto\" is not one Hugging Face fills (it fills "
                           f"{', '.join(sorted(AUTO))}); give a number of parameters")
        n = AUTO[key](t.model.C)
        return n, f"{key} auto = {n:,}"
    v = number(f"zero_optimization.{key}", v, "a number of parameters" + (' or "auto"' if key in AUTO else ""))
    if v < 0:
        raise BadInput(f"zero_optimization.{key}: {show(v)} is negative; expected a number of parameters")
    return v, f"{key} {show(v)}" + ("" if key in zero else " (DeepSpeed's default)")


def deepspeed_stage(t, zero):
    stage = zero.get("stage", 0)
    if isinstance(stage, bool) or not isinstance(stage, (int, float)) or stage not in (0, 1, 2, 3):
        raise BadInput(f"zero_optimization.stage: {show(stage)} is not a ZeRO stage (0, 1, 2, 3)")
    t.stage = int(stage)
    t.set(f"stage {t.stage}", "-z", t.stage)
    if t.stage == 3:
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
    small = t.model.block_tensors_below(threshold)
    if small and small[1] < t.model.block:
        t.missing("stage3_param_persistence_threshold per tensor",
                  f"DeepSpeed keeps each tensor under it replicated, here -pt keeps whole units: a block's {small[0]} tensors "
                  f"under it ({small[1]:,} parameters: biases, layernorms) stay sharded and are gathered with the block, "
                  f"{100.0 * small[1] / t.model.block:.2f}% of its bytes in the same one collective "
                  f"(scripts/persistence.py counts a step's)")
    if "stage3_max_reuse_distance" in zero:
        number("zero_optimization.stage3_max_reuse_distance", zero["stage3_max_reuse_distance"], "a number of parameters")
        t.missing("stage3_max_reuse_distance", "a unit is freed after each use (-ra 1) or kept from its forward to its "
                  "backward (-ra 0); no distance in between")


def deepspeed_buckets(t, zero):
    if t.stage >= 1 or "reduce_bucket_size" in zero:
        n, text = size_value(t, zero, "reduce_bucket_size")
        t.missing(text, f"= {blocks_text(t.model, n, t.wrap)}; each unit's gradients are reduced as one collective when its "
                  "backward ends: the unit is the bucket, and -wrap K sets its size")
    if "allgather_bucket_size" in zero:
        n = number("zero_optimization.allgather_bucket_size", zero["allgather_bucket_size"], "a number of parameters")
        t.missing(f"allgather_bucket_size {show(n)}", "stages 1-2 all-gather the updated params unit by unit, 16 in "
                  "flight: the unit is the bucket")


def deepspeed_zeropp(t, zero):
    hpz = number("zero_optimization.zero_hpz_partition_size", zero.get("zero_hpz_partition_size", 1), "a group size", True)
    qw = boolean("zero_optimization.zero_quantized_weights", zero.get("zero_quantized_weights", False))
    qg = boolean("zero_optimization.zero_quantized_gradients", zero.get("zero_quantized_gradients", False))
    mics = number("zero_optimization.mics_shard_size", zero.get("mics_shard_size", -1), "a group size", True)
    if hpz < 0:
        raise BadInput(f"zero_optimization.zero_hpz_partition_size: expected a group size, got {hpz}")
    if (hpz > 1 or qw or qg) and t.stage != 3:
        t.missing("ZeRO++ (zero_hpz_partition_size, zero_quantized_*)", f"builds on ZeRO-3's gathers; at -z {t.stage} there are none")
    else:
        if hpz > 1:
            t.set(f"zero_hpz_partition_size {hpz}", "-hp", hpz, "a secondary shard in groups of G ranks; G must divide N")
        if qw:
            t.set("zero_quantized_weights true", "-qw", 8, "int8 blocks of 256 with an fp32 scale each")
        if qg:
            t.set("zero_quantized_gradients true", "-qg", 8, "int8 gradients in two all-to-all hops")
    if mics not in (-1, 0):
        t.set(f"mics_shard_size {mics}", "-hs", mics, "MiCS shards within groups and replicates across them: HSDP")


# DeepSpeed's offload blocks (DeepSpeedZeroOffloadOptimizerConfig, DeepSpeedZeroOffloadParamConfig): the
# keys each takes, and for the knobs with no meaning here, why
OFFLOAD_KEYS = {
    "offload_optimizer": {"device", "nvme_path", "pin_memory", "buffer_count", "pipeline", "pipeline_read",
                          "pipeline_write", "fast_init", "ratio"},
    "offload_param": {"device", "nvme_path", "pin_memory", "buffer_count", "buffer_size", "max_in_cpu"},
}
OFFLOAD_KNOBS = {
    "pin_memory": "the GPU trainer's -oo host always pins the optimizer shard; the CPU trainer's memory is host memory, "
                  "and its disk slots are 4 KiB-aligned buffers for direct I/O",
    "buffer_count": "host memory needs no staging buffers (device cpu); for nvme it is -os, the slots each file stages",
    "buffer_size": "a slot is one unit's record: -wrap K sets its size",
    "max_in_cpu": "a parameter shard offloaded to disk is read just before its gather and never held in between",
    "pipeline": "the disk stream always overlaps the reads, the update and the write-backs",
    "pipeline_read": "the disk stream always reads the next unit while this one is updated",
    "pipeline_write": "the disk stream always writes the last unit back while this one is updated",
    "fast_init": "the state files are reserved whole at start (posix_fallocate) and filled from the init",
    "ratio": "the whole optimizer shard moves, or none of it",
}


def offload_block(t, zero, key):
    """One offload block: its device ("none" when left out), for nvme its nvme_path (None when left out) and its
    buffer_count (None when left out: deepspeed_offload makes it -os)."""
    block = section(zero, key, "zero_optimization.")
    where = f"zero_optimization.{key}"
    unknown = sorted(set(block) - OFFLOAD_KEYS[key])
    if unknown:
        raise BadInput(f"{where}.{name_of(unknown[0])}: not a key of DeepSpeed's {key} "
                       f"(it takes {', '.join(sorted(OFFLOAD_KEYS[key]))})")
    device = block.get("device", "none")
    if device is None:
        device = "none"
    if not isinstance(device, str) or device not in ("cpu", "nvme", "none"):
        raise BadInput(f"{where}.device: expected \"cpu\", \"nvme\" or \"none\", got {show(device)}")
    path = block.get("nvme_path")
    if path is not None:
        if not isinstance(path, str) or not path or not path.isprintable():
            raise BadInput(f"{where}.nvme_path: expected a folder name, got {show(path)}")
        if os.path.exists(path) and not os.path.isdir(path):
            raise BadInput(f"{where}.nvme_path: {name_of(path)} is not a folder")
    buffers = None
    for knob in sorted(set(block) - {"device", "nvme_path"}):
        v = block[knob]
        if knob in ("pin_memory", "pipeline", "pipeline_read", "pipeline_write", "fast_init"):
            boolean(f"{where}.{knob}", v)
        else:
            v = number(f"{where}.{knob}", v, "a number", integer=knob in ("buffer_count",))
        if knob == "buffer_count" and device == "nvme":
            if v < 1:
                raise BadInput(f"{where}.buffer_count: expected at least 1 buffer, got {show(v)}")
            buffers = int(v)
        elif device != "none":
            t.missing(f"{key}.{knob} {show(v)}", OFFLOAD_KNOBS[knob])
    if path is not None and device != "nvme":
        t.missing(f"{key}.nvme_path", f"DeepSpeed reads it for device nvme only; this block's device is {device}")
    return device, path, buffers


def offload_place(device, path):
    """-oo / -op's value for a DeepSpeed device: disk in nvme_path (else the run's -o DIR/offload)."""
    if device == "cpu":
        return "host"
    return f"disk:{path}" if path else "disk"


def deepspeed_offload(t, zero):
    device, path, buffers = offload_block(t, zero, "offload_optimizer")
    legacy = boolean("zero_optimization.cpu_offload", zero.get("cpu_offload", False))
    if legacy and device == "none":
        device = "cpu"
    if device != "none":
        knob = "cpu_offload true" if legacy and "offload_optimizer" not in zero else f"offload_optimizer.device {device}"
        why = ("the optimizer shard (fp32 master, m, v) in host memory, AdamW on the host (the CPU trainer's is there "
               "already)" if device == "cpu" else
               "the optimizer shard in a per-rank file, streamed unit by unit in the step" +
               ("" if path else "; no nvme_path: the run's -o DIR/offload"))
        t.set(knob, "-oo", offload_place(device, path), why)
    pdevice, ppath, pbuffers = offload_block(t, zero, "offload_param")
    if pdevice != "none" and t.stage != 3:
        raise BadInput(f"zero_optimization.offload_param: DeepSpeed offloads parameters at stage 3 only; this config is "
                       f"stage {t.stage}")
    if pdevice == "cpu":
        t.missing("offload_param.device cpu", "no parameters in host memory apart from the compute: -op takes disk only "
                  "(the CPU trainer's parameters are in host memory already)")
    elif pdevice == "nvme":
        t.set("offload_param.device nvme", "-op", offload_place(pdevice, ppath),
              "the parameter shard in a per-rank file, read just before its gather" + ("" if ppath else
              "; no nvme_path: the run's -o DIR/offload"))
    # DeepSpeed's buffers stage its NVMe reads and writes; here each file stages its units through -os
    # slots (at least 3: unit k+1 read, k updated, k-1 written back), one number for both files
    counts = {k: n for k, n in (("offload_optimizer", buffers), ("offload_param", pbuffers if pdevice == "nvme" else None))
              if n is not None}
    if counts:
        slots = max(3, max(counts.values()))
        knob = " and ".join(f"{k}.buffer_count {n}" for k, n in counts.items())
        t.set(knob, "-os", slots, "the unit-sized slots each file stages in memory" +
              (" (at least 3 here)" if slots > max(counts.values()) else "") +
              ("; one number for both files: the larger" if len(counts) > 1 else ""))
    if "sub_group_size" in zero:
        n = number("zero_optimization.sub_group_size", zero["sub_group_size"], "a number of parameters")
        t.missing(f"sub_group_size {show(n)}", "AdamW steps the whole shard in one call; sub-groups bound offloaded "
                  "optimizer memory")
    for key in ("stage3_gather_16bit_weights_on_model_save", "stage3_gather_fp16_weights_on_model_save"):
        if key in zero:
            boolean(f"zero_optimization.{key}", zero[key], auto=True)
            t.missing(key, "a run with -o always writes the whole model (model.bin) at its end")


FROM_TRAINING_ARGS = "Hugging Face fills it from TrainingArguments, which this translation does not see"


def deepspeed_precision(t, cfg):
    bf16 = boolean("bf16.enabled", section(cfg, "bf16").get("enabled", False), auto=True)
    fp16 = boolean("fp16.enabled", section(cfg, "fp16").get("enabled", False), auto=True)
    if bf16 is True and fp16 is True:
        raise BadInput("bf16.enabled and fp16.enabled: both true; DeepSpeed takes one precision")
    if bf16 is True:
        t.set("bf16.enabled true", "-p", "bf16")
    if fp16 is True:
        t.missing("fp16.enabled true", "no fp16 with loss scaling here; -p bf16 is the nearest (same bytes, no scaler)")
    if "auto" in (bf16, fp16) and True not in (bf16, fp16):
        t.assume("bf16/fp16.enabled auto", f"{FROM_TRAINING_ARGS} (--bf16, --fp16); left out: fp32, the trainer's default "
                 "(add -p bf16 for mixed precision)")


def deepspeed_batch(t, cfg):
    """The micro-batch (-b), and the accumulation as tokens per step (-d = N B T A)."""
    B = cfg.get("train_micro_batch_size_per_gpu")
    if B == "auto":
        t.assume("train_micro_batch_size_per_gpu auto", f"{FROM_TRAINING_ARGS}; left out: -b {TRAINER_B}, the trainer's default")
        B = None
    elif B is not None:
        B = number("train_micro_batch_size_per_gpu", B, 'a number of rows or "auto"', True)
        t.set(f"train_micro_batch_size_per_gpu {B}", "-b", B)
    A = cfg.get("gradient_accumulation_steps", 1)
    if A == "auto":
        t.assume("gradient_accumulation_steps auto", f"{FROM_TRAINING_ARGS}; left out: one micro-step a step")
        A = 1
    A = number("gradient_accumulation_steps", A, 'a positive number of micro-steps or "auto"', True)
    if A < 1:
        raise BadInput(f"gradient_accumulation_steps: {A} is not a positive number of micro-steps")
    rows = B if B is not None else TRAINER_B
    if t.args.seq_len is not None:
        t.set(f"--seq-len {t.args.seq_len}", "-t", t.args.seq_len)
    T = t.args.seq_len or TRAINER_T
    if A > 1:
        t.set(f"gradient_accumulation_steps {A}", "-d", t.args.ranks * rows * T * A, f"tokens per step = N {t.args.ranks} x B x "
              f"T {T} x A")
    total = cfg.get("train_batch_size")
    if total == "auto":
        t.assume("train_batch_size auto", f"{FROM_TRAINING_ARGS}; here it is N x B x A = {t.args.ranks * rows * A} rows")
    elif total is not None:
        total = number("train_batch_size", total, 'a number of rows or "auto"', True)
        if total != t.args.ranks * rows * A:
            raise BadInput(f"train_batch_size: {total} is not N {t.args.ranks} x train_micro_batch_size_per_gpu {rows} x "
                           f"gradient_accumulation_steps {A} = {t.args.ranks * rows * A}, as DeepSpeed requires")


def deepspeed_optimizer(t, cfg):
    clip = cfg.get("gradient_clipping")
    if clip == "auto":
        t.assume("gradient_clipping auto", f"{FROM_TRAINING_ARGS} (max_grad_norm, 1.0 by default); left out: -gc 1, the "
                 "trainer's default")
    elif clip is not None:
        clip = number("gradient_clipping", clip, 'a norm or "auto"')
        t.set(f"gradient_clipping {show(clip)}", "-gc", clip)
    opt = section(cfg, "optimizer")
    kind = opt.get("type", "AdamW")
    if not isinstance(kind, str):
        raise BadInput(f"optimizer.type: expected a name like \"AdamW\", got {show(kind)}")
    if kind.lower() not in ("adamw", "adam"):
        t.missing(f"optimizer {name_of(kind)}", "the trainer's optimizer is AdamW")
    params = section(opt, "params", "optimizer.")
    for key, flag, default, why in (("lr", "-l", "3e-4", ""), ("weight_decay", "-c", "0", "on the six matrices")):
        v = params.get(key)
        if v == "auto":
            t.assume(f"optimizer.params.{key} auto", f"{FROM_TRAINING_ARGS}; left out: {flag} {default}, the trainer's default")
        elif v is not None:
            v = number(f"optimizer.params.{key}", v, 'a number or "auto"')
            t.set(f"optimizer.params.{key} {show(v)}", flag, v, why)
    for key in ("betas", "eps"):
        if key in params:
            t.missing(f"optimizer.params.{key}", "AdamW's betas (0.9, 0.95) and eps 1e-8 are fixed here")
    if "scheduler" in cfg:
        kind = section(cfg, "scheduler").get("type")
        t.missing(f"scheduler {name_of(kind) if isinstance(kind, str) else '' if kind is None else show(kind)}".rstrip(), "not translated: the trainer's schedule is "
                  "-u W warmup steps, then cosine from -l to -q F times it")


def translate_deepspeed(t, cfg):
    zero = cfg.get("zero_optimization")
    if not isinstance(zero, dict):
        raise BadInput("zero_optimization: the config has no zero_optimization section (an object)" if zero is None else
                       f"zero_optimization: expected an object, got {show(zero)}")
    unknown = sorted(set(zero) - ZERO_KEYS)
    if unknown:
        raise BadInput(f"zero_optimization.{name_of(unknown[0])}: not a DeepSpeed ZeRO knob this translator knows")
    deepspeed_stage(t, zero)
    deepspeed_precision(t, cfg)
    deepspeed_batch(t, cfg)
    deepspeed_optimizer(t, cfg)
    deepspeed_stage3(t, zero)
    deepspeed_zeropp(t, zero)
    for key, why in ALWAYS.items():
        if key in zero:
            t.same(f"{key} {show(boolean('zero_optimization.' + key, zero[key]))}", why)
    deepspeed_buckets(t, zero)
    deepspeed_offload(t, zero)


def open_regular(path):
    """The file's bytes, at most CONFIG_MAX_BYTES: opened without blocking (a FIFO with no writer would wait
    forever in a plain open), then refused unless it is a regular file, and its size checked before reading."""
    name = name_of(path)
    try:
        fd = os.open(path, os.O_RDONLY | os.O_NONBLOCK | getattr(os, "O_NOCTTY", 0))
    except OSError as e:
        raise BadInput(f"{name}: cannot read it ({e.strerror})")
    try:
        st = os.fstat(fd)
        if not stat.S_ISREG(st.st_mode):
            kind = ("a folder" if stat.S_ISDIR(st.st_mode) else "a FIFO" if stat.S_ISFIFO(st.st_mode) else
                    "a device" if stat.S_ISCHR(st.st_mode) or stat.S_ISBLK(st.st_mode) else "a socket or other special file")
            raise BadInput(f"{name}: not a regular file ({kind}); give a DeepSpeed config file")
        if st.st_size > CONFIG_MAX_BYTES:
            raise BadInput(f"{name}: {st.st_size} bytes is more than a config's {CONFIG_MAX_BYTES} (1 MiB)")
        chunks, n = [], 0
        while n <= CONFIG_MAX_BYTES:   # the size checked again as read: a file may grow
            b = os.read(fd, CONFIG_MAX_BYTES + 1 - n)
            if not b:
                break
            chunks.append(b)
            n += len(b)
        if n > CONFIG_MAX_BYTES:
            raise BadInput(f"{name}: more than a config's {CONFIG_MAX_BYTES} bytes (1 MiB)")
        return b"".join(chunks)
    except OSError as e:
        raise BadInput(f"{name}: cannot read it ({e.strerror})")
    finally:
        os.close(fd)


def strip_comments(text, name):
    """JSON with comments as DeepSpeed's reader takes it: // and # to the end of the line and /* ... */
    outside strings become spaces (line numbers kept). Nesting deeper than CONFIG_MAX_DEPTH is refused here,
    before the JSON reader recurses into it."""
    out, i, n, depth, line = [], 0, len(text), 0, 1
    while i < n:
        c = text[i]
        if c == '"':                       # a string, escapes and all, copied as it is
            j = i + 1
            while j < n and text[j] != '"' and text[j] != "\n":
                j += 2 if text[j] == "\\" else 1
            out.append(text[i:j + 1])
            i = j + 1
            continue
        if c == "#" or text.startswith("//", i):
            j = text.find("\n", i)
            j = n if j < 0 else j
            out.append(" " * (j - i))
            i = j
            continue
        if text.startswith("/*", i):
            j = text.find("*/", i + 2)
            if j < 0:
                raise BadInput(f"{name}: not JSON: a /* comment that never ends, from line {line}")
            body = text[i:j + 2]
            out.append(re.sub(r"[^\n]", " ", body))
            line += body.count("\n")
            i = j + 2
            continue
        if c in "[{":
            depth += 1
            if depth > CONFIG_MAX_DEPTH:
                raise BadInput(f"{name}: nested deeper than {CONFIG_MAX_DEPTH} levels at line {line}; a DeepSpeed config "
                               "nests 3")
        elif c in "]}":
            depth -= 1
        elif c == "\n":
            line += 1
        out.append(c)
        i += 1
    return "".join(out)


def unique_keys(pairs):
    d = {}
    for k, v in pairs:
        if k in d:
            raise BadInput(f"{name_of(k)}: given twice in one object; DeepSpeed refuses a duplicate key")
        d[k] = v
    return d


def read_json(path):
    name = name_of(path)
    data = open_regular(path)
    try:
        text = data.decode("utf-8-sig")
    except UnicodeDecodeError:
        raise BadInput(f"{name}: cannot read it (not UTF-8 text)")
    text = strip_comments(text, name)
    try:
        cfg = json.loads(text, object_pairs_hook=unique_keys, parse_float=Num, parse_constant=Num)
    except json.JSONDecodeError as e:
        raise BadInput(f"{name}: not JSON: {e.msg} at line {e.lineno} column {e.colno}")
    except (ValueError, RecursionError) as e:   # an integer of more than 4300 digits; the depth is checked above
        raise BadInput(f"{name}: not JSON this translator reads: {str(e).splitlines()[0][:100]}")
    if not isinstance(cfg, dict):
        raise BadInput(f"{name}: a DeepSpeed config is a JSON object, this is a {type(cfg).__name__}")
    return cfg


# ---- FSDP ----------------------------------------------------------------------------------------

FSDP_KEYS = {"sharding_strategy", "backward_prefetch", "forward_prefetch", "limit_all_gathers", "use_orig_params",
             "auto_wrap_policy", "mixed_precision", "cpu_offload", "sync_module_states", "reshard_after_forward",
             "activation_checkpointing"}
STRATEGIES = {"FULL_SHARD": (3, True, False), "SHARD_GRAD_OP": (3, False, False), "NO_SHARD": (0, True, False),
              "HYBRID_SHARD": (3, True, True), "_HYBRID_SHARD_ZERO2": (3, False, True)}   # -z, reshard after forward, HSDP


# FSDP's defaults, for the keys not given (FullyShardedDataParallel's arguments)
FSDP_DEFAULTS = {
    "sharding_strategy": ("FULL_SHARD", "FSDP's default"),
    "auto_wrap_policy": ("none", "FSDP's default (no policy): the root module is the only unit"),
    "backward_prefetch": ("BACKWARD_PRE", "FSDP's default"),
    "forward_prefetch": ("False", "FSDP's default"),
    "limit_all_gathers": ("True", "FSDP's default"),
    "mixed_precision": ("fp32", "FSDP's default (no MixedPrecision): fp32 params and gradients"),
}
FSDP_TEXT_MAX = 4096   # a few keys; longer is not FSDP's arguments


def parse_fsdp(text):
    if len(text) > FSDP_TEXT_MAX:
        raise BadInput(f"--fsdp: {len(text)} characters is more than FSDP's arguments take ({FSDP_TEXT_MAX})")
    pairs = {}
    for item in filter(None, (s.strip() for s in text.split(","))):
        key, eq, value = item.partition("=")
        key, value = key.strip(), value.strip()
        if not eq or not value:
            raise BadInput(f"--fsdp: '{name_of(item)}' is not KEY=VALUE")
        if key not in FSDP_KEYS:
            raise BadInput(f"--fsdp: unknown key '{name_of(key)}' (known: {', '.join(sorted(FSDP_KEYS))})")
        if key in pairs:
            raise BadInput(f"--fsdp: {key} given twice")
        if not value.isprintable():
            raise BadInput(f"--fsdp: {key}={name_of(value)}: not a value FSDP takes")
        pairs[key] = value.split(".")[-1] if key in ("sharding_strategy", "backward_prefetch") else value
    return pairs


def fsdp_assumed(t, pairs):
    """One line for each key left out: the default taken, FSDP's own."""
    for key, (value, why) in FSDP_DEFAULTS.items():
        if key not in pairs:
            t.assume(f"{key}={value}", why)


def fsdp_bool(pairs, key, default):
    v = pairs.get(key)
    if v is None:
        return default
    if v not in ("True", "False", "true", "false", "1", "0"):
        raise BadInput(f"--fsdp: {key}={name_of(v)}: expected True or False")
    return v in ("True", "true", "1")


def fsdp_sharding(t, pairs):
    name = pairs.get("sharding_strategy", "FULL_SHARD")
    if name not in STRATEGIES:
        raise BadInput(f"--fsdp: sharding_strategy={name_of(name)}: expected one of {', '.join(STRATEGIES)}")
    stage, reshard, hybrid = STRATEGIES[name]
    reshard = fsdp_bool(pairs, "reshard_after_forward", reshard)
    t.stage, t.reshard = stage, reshard
    t.set(f"sharding_strategy {name}", "-z", stage)
    if stage == 3 and not reshard:
        t.set("params kept from forward to backward", "-ra", 0, "SHARD_GRAD_OP / reshard_after_forward=False")
    if hybrid:
        if not t.args.ranks_per_node:
            raise BadInput(f"--fsdp: sharding_strategy={name} shards within a node: give --ranks-per-node R")
        t.set(f"--ranks-per-node {t.args.ranks_per_node} ({name}'s node groups)", "-hs", t.args.ranks_per_node,
              "shard inside groups of R ranks, replicate across")


def fsdp_wrap(t, pairs):
    policy = pairs.get("auto_wrap_policy", "none")
    L, block = t.model.L, t.model.block
    if policy == "transformer":
        t.wrap = 1
        t.set("auto_wrap_policy transformer (a block a unit)", "-wrap", 1)
        return
    m = re.fullmatch(r"size:((?:[0-9]+\.?[0-9]*|\.[0-9]+)(?:[eE][+-]?[0-9]+)?)", policy)
    if policy != "none" and not m:
        raise BadInput(f"--fsdp: auto_wrap_policy={name_of(policy)}: expected transformer, size:N (N a number of parameters, "
                       "1e8 or 100000000) or none")
    size = float(m.group(1)) if m else math.inf
    if m and not (size <= NUMBER_MAX):
        raise BadInput(f"--fsdp: auto_wrap_policy={name_of(policy)}: {m.group(1)} is not a finite number within 1e300")
    want = math.inf if policy == "none" else math.ceil(size / block)
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
        raise BadInput(f"--fsdp: backward_prefetch={name_of(bp)}: expected BACKWARD_PRE, BACKWARD_POST or None")
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


def fsdp_offload(t, pairs):
    """cpu_offload: CPUOffload(offload_params=True) (or True), FSDP's one offload: the parameter and gradient
    shards kept on the CPU, the optimizer stepping there. Here: the optimizer shard in host memory."""
    v = pairs.get("cpu_offload", "False")
    m = re.fullmatch(r"CPUOffload\(\s*(?:offload_params\s*=\s*(True|False)\s*)?\)", v)
    if m:
        on = m.group(1) == "True"
    elif v in ("True", "False", "true", "false", "1", "0"):
        on = v in ("True", "true", "1")
    else:
        raise BadInput(f"--fsdp: cpu_offload={name_of(v)}: expected CPUOffload(offload_params=True|False), True or False")
    if not on:
        return
    t.set(f"cpu_offload {v}", "-oo", "host", "the optimizer shard (fp32 master, m, v) in host memory, AdamW on the host "
          "(the CPU trainer's is there already)")
    t.missing("cpu_offload: the parameter and gradient shards on the CPU", "-op takes disk only; on the GPU trainer they "
              "stay in GPU memory, on the CPU trainer they are in host memory already")


def fsdp_rest(t, pairs):
    mp = pairs.get("mixed_precision", "fp32")
    if mp not in ("bf16", "fp16", "fp32"):
        raise BadInput(f"--fsdp: mixed_precision={name_of(mp)}: expected bf16, fp16 or fp32")
    if mp == "bf16":
        t.set("mixed_precision bf16", "-p", "bf16")
    elif mp == "fp16":
        t.missing("mixed_precision fp16", "no fp16 with loss scaling here; -p bf16 is the nearest")
    if fsdp_bool(pairs, "activation_checkpointing", False):
        t.set("activation_checkpointing True", "-rc", 1, "recompute inside the backward's gather: no extra bytes")
    if fsdp_bool(pairs, "use_orig_params", False):
        t.missing("use_orig_params True", "the optimizer works on flat unit shards (decay by tensor, -c); there are no "
                  "per-tensor parameter objects to hand to param groups or LoRA")
    fsdp_offload(t, pairs)
    if "sync_module_states" in pairs:
        t.same(f"sync_module_states {pairs['sync_module_states']}", "every rank builds the same init from the seed (-S) "
               "or reads its slice of the model file")


def translate_fsdp(t, text):
    pairs = parse_fsdp(text)
    fsdp_sharding(t, pairs)
    fsdp_wrap(t, pairs)
    fsdp_prefetch(t, pairs)
    fsdp_rest(t, pairs)
    fsdp_assumed(t, pairs)


# ---- the command line ----------------------------------------------------------------------------

class Parser(argparse.ArgumentParser):
    def error(self, message):
        raise BadInput(message)


def main(argv):
    ap = Parser(description="A DeepSpeed config or FSDP's arguments as train_gpt2_zero3's flags.")
    ap.add_argument("config", nargs="?", help="a DeepSpeed config (JSON)")
    ap.add_argument("--fsdp", help="FSDP's arguments, KEY=VALUE,...")
    ap.add_argument("--model", help="d12, d2c64h2t64, 124M, 7.5B, ...")
    ap.add_argument("--ranks", type=decimal, default=1)
    ap.add_argument("--seq-len", type=decimal, default=None)
    ap.add_argument("--ranks-per-node", type=decimal, default=0)
    ap.add_argument("--trainer", help="the trainer that checks the command (default $ZERO3_TRAINER, else ./train_gpt2_zero3)")
    args = ap.parse_args(argv)
    if not args.model:
        raise BadInput("--model: missing: the translation needs the model's unit sizes (d12, 124M, 7.5B, ...)")
    if (args.config is None) == (args.fsdp is None):
        raise BadInput("give one of a DeepSpeed config file or --fsdp 'KEY=VALUE,...'")
    for name, v, lo, hi in (("--ranks", args.ranks, 1, RANKS_MAX), ("--seq-len", args.seq_len, 1, SEQ_MAX),
                            ("--ranks-per-node", args.ranks_per_node, 0, RANKS_MAX)):
        if v is not None and not lo <= v <= hi:
            raise BadInput(f"{name}: {v} is out of range [{lo}, {hi}]")
    t = Translation(Model(args.model), args)
    if args.fsdp is not None:
        translate_fsdp(t, args.fsdp)
        if args.seq_len is not None:
            t.set(f"--seq-len {args.seq_len}", "-t", args.seq_len)
        source = f"fsdp {name_of(args.fsdp)}"
    else:
        translate_deepspeed(t, read_json(args.config))
        source = f"deepspeed {name_of(args.config)}"
    check_with_trainer(t)   # nothing is printed before the trainer accepts the command
    t.print(source)
    return 0


RANKS_MAX, SEQ_MAX = 1 << 24, 1 << 20   # the trainer's -plan N and -t ranges


def decimal(text):
    """An integer option, in decimal whatever its leading zeros (08 is 8)."""
    if not re.fullmatch(r"[+-]?[0-9]{1,12}", text.strip()):
        raise argparse.ArgumentTypeError(f"expected an integer, got {name_of(text)}")
    return int(text.strip(), 10)


if __name__ == "__main__":
    try:
        sys.exit(main(sys.argv[1:]))
    except BadInput as e:
        print(f"error: {e}", file=sys.stderr)
        sys.exit(2)
    except BrokenPipeError:   # the reader (| head) went away: nothing more to say
        os.dup2(os.open(os.devnull, os.O_WRONLY), sys.stdout.fileno())
        sys.exit(1)
