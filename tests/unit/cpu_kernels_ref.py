"""
Reference values for the CPU kernels (cpu/kernels.h), computed by PyTorch in float64 with autograd.

    /usr/bin/python3 tests/unit/cpu_kernels_ref.py OUT.bin [--seed N]

For each test case (a set of shapes) it draws random inputs (float32 values, never all zeros),
computes every kernel's forward outputs in float64, then, with a random upstream gradient dout,
the gradients of sum(out * dout) with respect to the kernel's inputs and parameters. The C test
(tests/unit/test_cpu_kernels.c) feeds the same inputs to the C kernels and compares.

File format (little-endian), written to OUT.bin.tmp and renamed when complete:
    header: int32 magic 20251130, int32 version 1, int32 number of tensors, int32 0
    per tensor: char name[48] (NUL padded), int32 dtype (0 float32, 1 int32), int32 ndim,
                int32 shape[4] (unused dims 1), then the values, row-major
Tensor names are "<case>.<kernel>.<field>"; "<case>.config" is int32 [B, T, C, NH, OC, V, Vp, maxT].
"""
import argparse
import os
import struct
import sys

import numpy as np
import torch
import torch.nn.functional as F

MAGIC, VERSION = 20251130, 1

# name: (B, T, C, NH, OC, V, Vp). Awkward sizes on purpose: nothing is a multiple of the SIMD
# width or of the matmul tiles, and "bigger" and "d12" cross the matmul's depth and row blocks.
CASES = {
    "tiny":    (1, 1, 16, 2, 3, 5, 8),
    "awkward": (3, 7, 72, 3, 363, 101, 128),
    "bigger":  (2, 257, 288, 4, 1155, 1000, 1024),
    "d12":     (1, 150, 768, 12, 2304, 2000, 2048),
}


class Writer:
    def __init__(self):
        self.records = []

    def add(self, name, array):
        array = np.ascontiguousarray(array)
        if array.dtype.kind == "f":
            array, dtype = array.astype(np.float32), 0
        else:
            array, dtype = array.astype(np.int32), 1
        assert len(name) < 48 and array.ndim <= 4, name
        shape = list(array.shape) + [1] * (4 - array.ndim)
        header = struct.pack("<48sii4i", name.encode(), dtype, array.ndim, *shape)
        self.records.append(header + array.tobytes())

    def write(self, path):
        tmp = path + ".tmp"
        with open(tmp, "wb") as f:
            f.write(struct.pack("<4i", MAGIC, VERSION, len(self.records), 0))
            for r in self.records:
                f.write(r)
        os.replace(tmp, path)


def randn(gen, *shape, scale=1.0, shift=0.0):
    """float32-representable random values returned as float64 (so C and torch see the same numbers)"""
    x = torch.randn(*shape, generator=gen, dtype=torch.float64) * scale + shift
    return x.float().double()


def param(x):
    return x.clone().requires_grad_(True)


def backward(out, dout):
    """gradients of sum(out * dout), i.e. the kernel's backward for upstream gradient dout"""
    (out * dout).sum().backward()


def gelu_tanh(x):
    return 0.5 * x * (1.0 + torch.tanh(np.sqrt(2.0 / np.pi) * (x + 0.044715 * x ** 3)))


def make_case(w, case, dims, gen):
    B, T, C, NH, OC, V, Vp = dims
    maxT = T + 3   # wpe has more rows than are used: the unused ones must get no gradient
    w.add(f"{case}.config", np.array([B, T, C, NH, OC, V, Vp, maxT]))
    p = lambda kernel, field: f"{case}.{kernel}.{field}"

    # encoder: wte (Vp, C) incl. padding rows, wpe (maxT, C); tokens with repeats
    tokens = torch.randint(0, V, (B, T), generator=gen)
    if B * T > 1:
        tokens.view(-1)[1] = tokens.view(-1)[0]   # a repeated token: its gradient rows must add up
    wte, wpe = param(randn(gen, Vp, C)), param(randn(gen, maxT, C))
    out = wte[tokens] + wpe[:T].unsqueeze(0)
    dout = randn(gen, B, T, C)
    backward(out, dout)
    for name, x in [("inp", tokens), ("wte", wte), ("wpe", wpe), ("out", out), ("dout", dout),
                    ("dwte", wte.grad), ("dwpe", wpe.grad)]:
        w.add(p("encoder", name), x.detach().numpy())

    # layernorm: inputs off-centre and not unit scale, so mean and rstd matter
    x = param(randn(gen, B, T, C, scale=2.0, shift=0.5))
    weight, bias = param(randn(gen, C, shift=1.0)), param(randn(gen, C))
    out = F.layer_norm(x, (C,), weight, bias, eps=1e-5)
    mean = x.detach().mean(-1)
    rstd = 1.0 / torch.sqrt(x.detach().var(-1, unbiased=False) + 1e-5)
    dout = randn(gen, B, T, C)
    backward(out, dout)
    for name, t in [("inp", x), ("weight", weight), ("bias", bias), ("out", out), ("mean", mean), ("rstd", rstd),
                    ("dout", dout), ("dinp", x.grad), ("dweight", weight.grad), ("dbias", bias.grad)]:
        w.add(p("layernorm", name), t.detach().numpy())

    # matmul: out = x @ weight^T + bias; also without bias
    x = param(randn(gen, B, T, C))
    weight, bias = param(randn(gen, OC, C, scale=C ** -0.5)), param(randn(gen, OC))
    out = x @ weight.T + bias
    dout = randn(gen, B, T, OC)
    backward(out, dout)
    for name, t in [("inp", x), ("weight", weight), ("bias", bias), ("out", out), ("out_nobias", out - bias),
                    ("dout", dout), ("dinp", x.grad), ("dweight", weight.grad), ("dbias", bias.grad)]:
        w.add(p("matmul", name), t.detach().numpy())

    # causal self-attention on qkv (B, T, 3C)
    hs = C // NH
    qkv = param(randn(gen, B, T, 3 * C))
    q, k, v = qkv.split(C, dim=2)
    q, k, v = (t.reshape(B, T, NH, hs).transpose(1, 2) for t in (q, k, v))   # (B, NH, T, hs)
    causal = torch.tril(torch.ones(T, T, dtype=torch.bool))
    preatt = (q @ k.transpose(-2, -1)) / np.sqrt(hs)
    att = torch.softmax(preatt.masked_fill(~causal, float("-inf")), dim=-1)
    out = (att @ v).transpose(1, 2).reshape(B, T, C)
    dout = randn(gen, B, T, C)
    backward(out, dout)
    for name, t in [("inp", qkv), ("out", out), ("preatt", preatt.masked_fill(~causal, 0.0)), ("att", att),
                    ("dout", dout), ("dinp", qkv.grad)]:
        w.add(p("attention", name), t.detach().numpy())

    # gelu over a spread of inputs (tanh saturates both ways). The elementwise kernels get lengths that
    # are not a multiple of any SIMD width, so their ragged ends are tested too.
    N = B * T * 4 * C + 3
    x = param(randn(gen, N, scale=2.0))
    out = gelu_tanh(x)
    dout = randn(gen, N)
    backward(out, dout)
    for name, t in [("inp", x), ("out", out), ("dout", dout), ("dinp", x.grad)]:
        w.add(p("gelu", name), t.detach().numpy())

    # residual
    N = B * T * C + 1
    x1, x2 = param(randn(gen, N)), param(randn(gen, N))
    out = x1 + x2
    dout = randn(gen, N)
    backward(out, dout)
    for name, t in [("inp1", x1), ("inp2", x2), ("out", out), ("dout", dout), ("dinp1", x1.grad), ("dinp2", x2.grad)]:
        w.add(p("residual", name), t.detach().numpy())

    # softmax over the first V of Vp columns + cross-entropy. The padded logits are large garbage,
    # which must not leak into the probabilities.
    logits = param(randn(gen, B, T, Vp, scale=3.0))
    with torch.no_grad():
        logits[..., V:] = 50.0
    targets = torch.randint(0, V, (B, T), generator=gen)
    probs = torch.softmax(logits[..., :V], dim=-1)
    losses = -torch.log(probs.gather(-1, targets.unsqueeze(-1)).squeeze(-1))
    dlosses = randn(gen, B, T).abs() + 0.1   # like 1/(B*T), but unequal per token
    backward(losses, dlosses)
    probs_padded = torch.cat([probs, torch.zeros(B, T, Vp - V, dtype=torch.float64)], dim=-1)
    for name, t in [("logits", logits), ("targets", targets), ("probs", probs_padded), ("losses", losses),
                    ("dlosses", dlosses), ("dlogits", logits.grad)]:
        w.add(p("softmax", name), t.detach().numpy())


def main():
    ap = argparse.ArgumentParser(description=__doc__.strip().splitlines()[0])
    ap.add_argument("out", help="output file (.bin)")
    ap.add_argument("--seed", type=int, default=1337)
    args = ap.parse_args()
    if not os.path.isdir(os.path.dirname(os.path.abspath(args.out))):
        print(f"cpu_kernels_ref.py: output directory of {args.out} does not exist", file=sys.stderr)
        sys.exit(1)
    torch.set_num_threads(2)
    gen = torch.Generator().manual_seed(args.seed)
    w = Writer()
    for case, dims in CASES.items():
        B, T, C, NH, OC, V, Vp = dims
        assert C % NH == 0 and V <= Vp, case
        make_case(w, case, dims, gen)
    w.write(args.out)
    print(f"cpu_kernels_ref.py: wrote {len(w.records)} tensors for {len(CASES)} cases to {args.out}")


if __name__ == "__main__":
    main()
