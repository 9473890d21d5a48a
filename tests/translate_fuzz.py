#!/usr/bin/env python3
"""scripts/translate_config.py over random and adversarial inputs: it never tracebacks, never hangs,
and every command it prints is accepted by the trainer.

    tests/translate_fuzz.py --trainer ./train_gpt2_zero3 [--count 300] [--seed 40]

The inputs, from a fixed seed: the example configs (docs/examples/deepspeed, tests/translate) with
values replaced by values of every JSON type and of none (1e400, NaN, "auto", 5000-digit integers,
lists, objects), keys dropped and added; raw texts (truncated JSON, random bytes, invalid UTF-8, deep
nesting, comments never closed, a BOM); FSDP argument strings built from its keys and odd values;
odd --ranks, --seq-len, --ranks-per-node and --model. Each call runs under a timeout and must end
with exit status 0 (a translation on stdout, nothing on stderr) or 2 (exactly one line on stderr,
starting "error: ", nothing on stdout); a traceback or any other status fails. Then every distinct
printed command is run as the trainer's planner (-plan N with the command's flags, the check a run
on N ranks makes of them) and must be accepted: the check is the trainer's, not the translator's.
Calls run side by side (most of a call's time is MPI starting up, not computing).
"""
import argparse
import concurrent.futures
import glob
import json
import os
import random
import shlex
import subprocess
import sys
import tempfile

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
TRANSLATOR = os.environ.get("TRANSLATE_CONFIG") or os.path.join(ROOT, "scripts", "translate_config.py")   # another copy to try
TIMEOUT_S = 60
MODELS = ["124M", "d2c64h2t64", "d6", "7.5B", "d4c128h4t64", "350M"]
RANKS = [1, 2, 3, 4, 8, 16]
ODD_NUMBERS = ["1e400", "-1e400", "NaN", "Infinity", "-0", "1e-400", "9" * 5000, "4.0", "2.5", "-3", "1e30", "0",
               "123456789012345678901234567890", "3.0e0"]
FSDP_KEYS = ["sharding_strategy", "backward_prefetch", "forward_prefetch", "limit_all_gathers", "use_orig_params",
             "auto_wrap_policy", "mixed_precision", "cpu_offload", "sync_module_states", "reshard_after_forward",
             "activation_checkpointing"]
FSDP_VALUES = ["FULL_SHARD", "ShardingStrategy.SHARD_GRAD_OP", "NO_SHARD", "HYBRID_SHARD", "_HYBRID_SHARD_ZERO2",
               "BACKWARD_PRE", "BackwardPrefetch.BACKWARD_POST", "None", "True", "False", "1", "0", "transformer",
               "none", "size:1e8", "size:1e400", "size:1e5.5", "size:1.5.3", "size:+", "size:0", "size:100",
               "bf16", "fp16", "fp32", "", "=", "x\ty", "\u00e9", "size:" + "9" * 400,
               "CPUOffload(offload_params=True)", "CPUOffload()", "CPUOffload(offload_params=maybe)", "CPUOffload("]


def examples():
    out = []
    for path in sorted(glob.glob(os.path.join(ROOT, "docs", "examples", "deepspeed", "*.json"))):
        with open(path) as f:
            out.append(json.load(f))
    for name in ("hf_zero3_auto.json", "ds_zero_infinity.json"):   # the offload blocks: cpu, and nvme for both
        with open(os.path.join(ROOT, "tests", "translate", name)) as f:
            out.append(json.load(f))
    return out


def odd_value(rng, depth=0):
    """A value of any JSON type, or a number JSON's writer cannot write (kept as a marker, put in as text)."""
    kind = rng.randrange(12)
    if kind == 0: return rng.choice([True, False, None])
    if kind == 1: return rng.randint(-3, 70)
    if kind == 2: return rng.choice([0.5, 2.5, 1e-4, -0.001, 1e9, 5e7, 3.0])
    if kind == 3: return "auto"
    if kind == 4: return rng.choice(["", "x", "AdamW", "cpu", "none", "3", "\n", "\u2028", "nvme", "/tmp", "/etc/hostname",
                                     "a folder with spaces", "disk:"])
    if kind == 5: return "__NUM__" + rng.choice(ODD_NUMBERS)
    if kind == 6 and depth < 3: return [odd_value(rng, depth + 1) for _ in range(rng.randrange(3))]
    if kind == 7 and depth < 3: return {rng.choice(["enabled", "device", "lr", "type", "params"]): odd_value(rng, depth + 1)}
    if kind == 8: return rng.randint(0, 3)
    if kind == 9: return rng.choice([1, 2, 4, 8])
    if kind == 10: return 10 ** rng.randrange(0, 40)
    return rng.choice([1e5, 1e8, 2e9, 7680])


def mutate(rng, cfg, depth=0):
    """cfg with some values replaced, some keys dropped, some added."""
    if not isinstance(cfg, dict):
        return cfg
    out = {}
    for k, v in cfg.items():
        r = rng.random()
        if r < 0.08:
            continue
        out[k] = odd_value(rng) if r < 0.18 else mutate(rng, v, depth + 1)
    if rng.random() < 0.2:
        out[rng.choice(["zero_optimization", "bf16", "fp16", "optimizer", "gradient_clipping", "train_batch_size",
                        "stage", "stage3_max_live_parameters", "zero_hpz_partition_size", "mics_shard_size",
                        "zero_quantized_weights", "scheduler", "unknown_key"])] = odd_value(rng)
    return out


def as_text(rng, cfg):
    text = json.dumps(cfg, indent=rng.choice([None, 2]))
    for n in ODD_NUMBERS:
        text = text.replace(json.dumps("__NUM__" + n), n)
    if rng.random() < 0.2:   # comments, as DeepSpeed's reader takes them
        text = text.replace("{", "{ // a comment\n", 1).replace(",", ", /* c */", 1) + "\n# the end\n"
    return text


def adversarial(rng, base):
    """Raw texts that are not JSON, or JSON no config is."""
    kind = rng.randrange(10)
    text = as_text(rng, base)
    if kind == 0: return text[:rng.randrange(len(text))].encode()
    if kind == 1: return bytes(rng.randrange(256) for _ in range(rng.randrange(200)))
    if kind == 2: return ("[" * rng.choice([63, 64, 65, 1000, 100000])).encode()
    if kind == 3: return ('{"zero_optimization": {"stage": 3}} /* never closed').encode()
    if kind == 4: return b"\xef\xbb\xbf" + text.encode()
    if kind == 5: return text.encode()[:-1] + b"\xff"
    if kind == 6: return json.dumps(rng.choice([[], 3, "x", None, [base]])).encode()
    if kind == 7: return ('{"zero_optimization": {"stage": 3, "stage": 3}}').encode()
    if kind == 8: return ('{"zero_optimization": {"stage": 3}, "x": "' + "a" * 100000 + '"}').encode()
    return ('{"zero_optimization": {"stage": 3}} // "' + "\\" * 10).encode()


def fsdp_text(rng):
    items = []
    for _ in range(rng.randrange(6)):
        key = rng.choice(FSDP_KEYS + ["limit_allgathers", ""])
        items.append(f"{key}={rng.choice(FSDP_VALUES)}" if rng.random() < 0.95 else key)
    return ",".join(items)


def cases(rng, count, folder):
    bases = examples()
    out = []
    for i in range(count):
        args = ["--model", rng.choice(MODELS)]
        if rng.random() < 0.6: args += ["--ranks", str(rng.choice(RANKS))]
        if rng.random() < 0.2: args += ["--seq-len", rng.choice(["32", "64", "1024", "2048", "0", "08"])]
        if rng.random() < 0.2: args += ["--ranks-per-node", str(rng.choice([0, 1, 2, 3, 4, 8]))]
        r = rng.random()
        if r < 0.25:
            args += ["--fsdp", fsdp_text(rng)]
        else:
            path = os.path.join(folder, f"c{i:03d}.json")
            with open(path, "wb") as f:
                f.write(adversarial(rng, rng.choice(bases)) if r < 0.45 else as_text(rng, mutate(rng, rng.choice(bases))).encode())
            args.append(path)
        out.append(args)
    return out


def translate(trainer, args):
    cmd = [sys.executable, TRANSLATOR] + args   # the trainer it checks with named as a user would: $ZERO3_TRAINER
    try:
        p = subprocess.run(cmd, stdin=subprocess.DEVNULL, capture_output=True, timeout=TIMEOUT_S,
                           env=dict(os.environ, ZERO3_TRAINER=trainer))
    except subprocess.TimeoutExpired:
        return args, None, "", f"still running after {TIMEOUT_S} s"
    return args, p.returncode, p.stdout.decode("utf-8", "replace"), p.stderr.decode("utf-8", "replace")


def problem(rc, out, err):
    """What is wrong with one call's ending, or None."""
    if rc is None: return err
    if "Traceback" in err: return "a traceback"
    if rc == 0:
        if err: return "exit 0 with stderr"
        if not any(l.startswith("command: ") for l in out.splitlines()): return "exit 0 without a command: line"
        return None
    if rc != 2: return f"exit status {rc}"
    if out: return "an error with a translation on stdout"
    lines = err.splitlines()
    if len(lines) != 1 or not lines[0].startswith("error: "): return f"{len(lines)} stderr lines, want one 'error: ' line"
    return None


def planned(trainer, command):
    """The command as the trainer's planner on its N ranks: the check a run makes of its flags."""
    words = shlex.split(command)
    n = "1"
    if words[0] == "mpirun":
        n, words = words[2], words[3:]
    p = subprocess.run([trainer, "-plan", n] + words[1:], stdin=subprocess.DEVNULL, capture_output=True, timeout=TIMEOUT_S,
                       env=dict(os.environ, OMP_NUM_THREADS="1"))
    return command, p.returncode, p.stderr.decode("utf-8", "replace").strip()


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--trainer", required=True)
    ap.add_argument("--count", type=int, default=300)
    ap.add_argument("--seed", type=int, default=40)
    ap.add_argument("--jobs", type=int, default=8)
    a = ap.parse_args()
    trainer = os.path.abspath(a.trainer)
    rng = random.Random(a.seed)
    failures, commands, refused, translated, refused_commands = [], set(), 0, 0, 0
    with tempfile.TemporaryDirectory() as folder, concurrent.futures.ThreadPoolExecutor(a.jobs) as pool:
        for args, rc, out, err in pool.map(lambda c: translate(trainer, c), cases(rng, a.count, folder)):
            why = problem(rc, out, err)
            if why:
                failures.append(f"{why}: translate_config.py {' '.join(map(shlex.quote, args))[:300]}\n{err[-800:]}")
            elif rc == 0:
                translated += 1
                commands.update(l[len("command: "):] for l in out.splitlines() if l.startswith("command: "))
            else:
                refused += 1
        for command, rc, err in pool.map(lambda c: planned(trainer, c), sorted(commands)):
            if rc != 0:
                refused_commands += 1
                failures.append(f"printed a command the trainer refuses: {command}\n{err}")
    for f in failures:
        print("FAIL " + f)
    print(f"  {a.count} inputs (seed {a.seed}): {translated} translated, {refused} refused with one error line, "
          f"{len(failures) - refused_commands} ended otherwise; {len(commands)} distinct commands printed, "
          f"{refused_commands} of them refused by -plan N")
    return 1 if failures else 0


if __name__ == "__main__":
    sys.exit(main())
