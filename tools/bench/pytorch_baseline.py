#!/usr/bin/env python3
"""tools/bench/pytorch_baseline.py: the yardstick for the GPU trainer's speed. GPT-2 in plain PyTorch,
trained with AdamW on random tokens for a few steps, in the configurations one would otherwise use:

  eager     bf16 autocast, fp32 weights, fused AdamW (what a PyTorch user writes first)
  compile   the same under torch.compile
  fsdp2     FSDP2 (torch.distributed.fsdp.fully_shard) on one rank, bf16 params/fp32 reduce,
            each block a unit: the PyTorch counterpart of this project's ZeRO-3 on one GPU

Each mode prints one line, `baseline MODE: N tok/s, M ms/step, peak P MiB, loss L`, timed over the
steps after the warm-up ones, or `baseline MODE: SKIP (why)` when this PyTorch lacks it (torch 1.13
has neither torch.compile nor fully_shard). scripts/gpu_check.sh runs it with the trainer's B and T
and prints the ratios. On a CPU it runs with tiny sizes, which tests the script, not the speed:

  python3 tools/bench/pytorch_baseline.py --preset d12 -B 16 -T 1024 --device cuda      (GPT-2 124M)
  python3 tools/bench/pytorch_baseline.py --preset tiny -B 2 -T 32 --device cpu --steps 3
"""
import argparse
import math
import os
import time

import torch
import torch.nn as nn
import torch.nn.functional as F

PRESETS = {  # layers, channels, heads, vocabulary (GPT-2's 50257, padded to a multiple of 128 as the trainer does)
    "d12": (12, 768, 12, 50304),
    "tiny": (2, 64, 2, 512),
}


def causal_attention(q, k, v):
    """softmax(q k^T / sqrt(d), causal) v: fused (flash) attention in torch >= 2.0, written out before."""
    if hasattr(F, "scaled_dot_product_attention"):
        return F.scaled_dot_product_attention(q, k, v, is_causal=True)
    T = q.shape[-2]
    att = (q @ k.transpose(-2, -1)) / math.sqrt(q.shape[-1])
    att = att.masked_fill(torch.ones(T, T, dtype=torch.bool, device=q.device).triu(1), float("-inf"))
    return att.softmax(dim=-1) @ v


class Block(nn.Module):
    """One transformer block: pre-LayerNorm attention and MLP, each added to the residual stream."""

    def __init__(self, C, NH):
        super().__init__()
        self.NH = NH
        self.ln1 = nn.LayerNorm(C)
        self.qkv = nn.Linear(C, 3 * C)
        self.proj = nn.Linear(C, C)
        self.ln2 = nn.LayerNorm(C)
        self.fc = nn.Linear(C, 4 * C)
        self.fcproj = nn.Linear(4 * C, C)

    def forward(self, x):
        B, T, C = x.shape
        q, k, v = self.qkv(self.ln1(x)).split(C, dim=2)
        q, k, v = (t.view(B, T, self.NH, C // self.NH).transpose(1, 2) for t in (q, k, v))
        y = causal_attention(q, k, v)
        x = x + self.proj(y.transpose(1, 2).reshape(B, T, C))
        return x + self.fcproj(F.gelu(self.fc(self.ln2(x)), approximate="tanh"))


class GPT2(nn.Module):
    """GPT-2: token + position embeddings, L blocks, final LayerNorm, LM head tied to the embedding."""

    def __init__(self, L, C, NH, V, max_T):
        super().__init__()
        self.wte = nn.Embedding(V, C)
        self.wpe = nn.Embedding(max_T, C)
        self.blocks = nn.ModuleList(Block(C, NH) for _ in range(L))
        self.lnf = nn.LayerNorm(C)
        for name, p in self.named_parameters():  # GPT-2's initialization (scaled residual projections)
            if p.dim() == 2:
                std = 0.02 / math.sqrt(2 * L) if name.endswith("proj.weight") else 0.02
                nn.init.normal_(p, 0.0, std)

    def forward(self, idx, targets):
        T = idx.shape[1]
        x = self.wte(idx) + self.wpe(torch.arange(T, device=idx.device))
        for block in self.blocks:
            x = block(x)
        logits = F.linear(self.lnf(x), self.wte.weight)
        return F.cross_entropy(logits.float().view(-1, logits.shape[-1]), targets.view(-1))


def make_optimizer(model, device):
    # fused AdamW on CUDA (one kernel for all tensors), as a fast PyTorch setup would use
    kwargs = {"lr": 1e-4, "betas": (0.9, 0.95), "weight_decay": 0.1}
    if device.type == "cuda":
        kwargs["fused"] = True
    try:
        return torch.optim.AdamW(model.parameters(), **kwargs)
    except (TypeError, RuntimeError):  # old torch, or a model whose parameters fused AdamW rejects
        kwargs.pop("fused", None)
        return torch.optim.AdamW(model.parameters(), **kwargs)


def time_training(model, opt, args, device, autocast):
    """Trains args.warmup + args.steps steps; returns (tokens/s, ms/step, peak MiB, last loss)."""
    V = PRESETS[args.preset][3]
    g = torch.Generator().manual_seed(1337)
    x = torch.randint(0, 50257 if V > 50257 else V, (args.B, args.T), generator=g).to(device)
    y = torch.roll(x, -1, dims=1)
    if device.type == "cuda":
        torch.cuda.reset_peak_memory_stats(device)
    times = []
    for step in range(args.warmup + args.steps):
        t0 = time.perf_counter()
        if autocast:
            with torch.autocast(device_type=device.type, dtype=torch.bfloat16):
                loss = model(x, y)
        else:
            loss = model(x, y)
        loss.backward()
        opt.step()
        opt.zero_grad(set_to_none=True)
        last = loss.item()  # waits for the step, as the trainer's loss print does
        if step >= args.warmup:
            times.append(time.perf_counter() - t0)
    ms = 1e3 * sum(times) / len(times)
    peak = torch.cuda.max_memory_allocated(device) / 2**20 if device.type == "cuda" else float("nan")
    return args.B * args.T / (ms / 1e3), ms, peak, last


def build(args, device):
    L, C, NH, V = PRESETS[args.preset]
    torch.manual_seed(1337)
    return GPT2(L, C, NH, V, max(args.T, 1024 if args.preset == "d12" else args.T)).to(device)


def run_eager(args, device):
    model = build(args, device)
    return time_training(model, make_optimizer(model, device), args, device, autocast=True)


def run_compile(args, device):
    if not hasattr(torch, "compile"):
        raise NotImplementedError("torch %s has no torch.compile" % torch.__version__)
    model = build(args, device)
    opt = make_optimizer(model, device)
    return time_training(torch.compile(model), opt, args, device, autocast=True)


def find_fully_shard():
    # an old torch may fail to even import its distributed packages (1.13 under Python 3.11 raises
    # ValueError from a dataclass): any failure means "no FSDP2 here"
    try:
        from torch.distributed.fsdp import MixedPrecisionPolicy, fully_shard  # torch >= 2.6
        return fully_shard, MixedPrecisionPolicy
    except Exception:
        pass
    try:
        from torch.distributed._composable.fsdp import MixedPrecisionPolicy, fully_shard  # torch 2.4, 2.5
        return fully_shard, MixedPrecisionPolicy
    except Exception:
        raise NotImplementedError("torch %s has no FSDP2 fully_shard" % torch.__version__)


def run_fsdp2(args, device):
    fully_shard, MixedPrecisionPolicy = find_fully_shard()
    import torch.distributed as dist

    os.environ.setdefault("MASTER_ADDR", "127.0.0.1")
    os.environ.setdefault("MASTER_PORT", "29517")
    started = not dist.is_initialized()
    if started:
        dist.init_process_group("nccl" if device.type == "cuda" else "gloo", rank=0, world_size=1)
    try:
        model = build(args, device)
        # bf16 compute and communication of parameters, fp32 gradient reduction: the mixed precision
        # of this project's BF16 build (bf16 working params and grads, fp32 master in the optimizer)
        mp = MixedPrecisionPolicy(param_dtype=torch.bfloat16, reduce_dtype=torch.float32)
        for block in model.blocks:
            fully_shard(block, mp_policy=mp)
        fully_shard(model, mp_policy=mp)
        return time_training(model, make_optimizer(model, device), args, device, autocast=False)
    finally:
        if started:
            dist.destroy_process_group()


MODES = {"eager": run_eager, "compile": run_compile, "fsdp2": run_fsdp2}


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--preset", choices=sorted(PRESETS), default="d12")
    ap.add_argument("-B", type=int, default=16)
    ap.add_argument("-T", type=int, default=1024)
    ap.add_argument("--steps", type=int, default=10, help="timed steps (after the warm-up)")
    ap.add_argument("--warmup", type=int, default=3, help="untimed first steps (compilation, allocator)")
    ap.add_argument("--device", default="cuda" if torch.cuda.is_available() else "cpu")
    ap.add_argument("--modes", default="eager,compile,fsdp2")
    args = ap.parse_args()
    device = torch.device(args.device)
    if device.type == "cuda":
        torch.backends.cuda.matmul.allow_tf32 = True
        torch.backends.cudnn.allow_tf32 = True
    print("baseline: torch %s on %s, preset %s, B=%d T=%d, %d timed steps after %d" %
          (torch.__version__, torch.cuda.get_device_name(device) if device.type == "cuda" else "cpu",
           args.preset, args.B, args.T, args.steps, args.warmup), flush=True)
    failed = 0
    for mode in args.modes.split(","):
        try:
            tok_s, ms, peak, loss = MODES[mode](args, device)
            print("baseline %s: %.0f tok/s, %.1f ms/step, peak %.0f MiB, loss %.4f" % (mode, tok_s, ms, peak, loss),
                  flush=True)
        except NotImplementedError as e:
            print("baseline %s: SKIP (%s)" % (mode, e), flush=True)
        except Exception as e:  # one mode failing (e.g. compile without a C compiler) must not hide the others
            print("baseline %s: FAIL (%s: %s)" % (mode, type(e).__name__, str(e).splitlines()[0] if str(e) else ""),
                  flush=True)
            failed += 1
        if device.type == "cuda":
            torch.cuda.empty_cache()
    return 1 if failed else 0


if __name__ == "__main__":
    raise SystemExit(main())
