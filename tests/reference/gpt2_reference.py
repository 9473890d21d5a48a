#!/usr/bin/env python3
"""
The PyTorch reference for the C/CUDA trainers: GPT-2 exactly as llm.c's train_gpt2.py / nanoGPT,
written as plain functions over a dict of parameter tensors so every activation can be dumped.

It does three things, in this order:
  1. builds a model (random GPT-2 init from --seed, or --load an llm.c model file) and, with
     --model-out, writes it in llm.c's fp32 format (version 3), the file the C trainers start from;
  2. runs forward + backward on step 0's batch and keeps every activation and parameter gradient;
  3. trains --steps steps under the project's training math (docs/DESIGN.md section 3) and records the
     loss, the gradient norm and the learning rate of each step.
With --dump-out it writes everything into the activation dump described in docs/DUMP_FORMAT.md.

Math runs in float64 by default, so the dump (stored as float32) is a near-exact reference and a C
fp32 implementation compared against it measures only its own rounding.

Examples:
  /usr/bin/python3 tests/reference/gpt2_reference.py --preset tiny          # tests/reference/dumps/tiny_model.bin + tiny.dump
  python3 tests/reference/gpt2_reference.py --preset d12 --device cuda      # GPT-2 124M shape, on the GPU machine
  /usr/bin/python3 tests/reference/gpt2_reference.py --L 2 --C 24 --NH 3 --V 200 --maxT 16 --B 2 --T 8 \\
      --tokens toks.bin --model-out m.bin --dump-out d.dump
Needs only torch (1.13 or 2.x), numpy and the standard library.
"""

import argparse
import math
import os
import sys

import numpy as np

# torch takes a second to import: it is imported by load_torch() only after every flag and input
# file has been checked, so a bad input fails at once.
torch = None
F = None


def load_torch():
    global torch, F
    import torch as torch_module
    import torch.nn.functional as functional
    torch, F = torch_module, functional

# -----------------------------------------------------------------------------
# File format constants (llm.c's, and this project's dump)

MODEL_MAGIC = 20240326
MODEL_VERSION_FP32 = 3
MODEL_VERSION_BF16 = 5
TOKENS_MAGIC = 20240520
TOKENS_VERSION = 1
DUMP_MAGIC = 20241129
DUMP_VERSION = 1
HEADER_INTS = 256          # every header in these formats is 256 int32 = 1024 bytes
DUMP_NAME_BYTES = 64
DUMP_MAX_DIMS = 4
DUMP_FLOAT32 = 0
DUMP_INT32 = 1

# GPT-2 constants
LAYERNORM_EPS = 1e-5
INIT_STD = 0.02            # every weight matrix and both embeddings, as llm.c's train_gpt2.py
WPE_STD = 0.02             # llm.c's train_gpt2.py inits wpe like every nn.Embedding (0.02);
                           # OpenAI's TF GPT-2 used 0.01. We follow llm.c.
VOCAB_PAD_MULTIPLE = 128

# Training-math constants (docs/DESIGN.md section 3)
ADAM_BETA1 = 0.9
ADAM_BETA2 = 0.95
ADAM_EPS = 1e-8
CLIP_EPS = 1e-6            # torch.nn.utils.clip_grad_norm_: coef = max_norm / (norm + 1e-6)

# The 16 parameter tensors in llm.c's file order. Shapes are functions of (L, C, Vp, maxT).
# Weights are stored (out_features, in_features) like nn.Linear.weight.
PARAM_SHAPES = [
    ("wte",      lambda L, C, Vp, maxT: (Vp, C)),
    ("wpe",      lambda L, C, Vp, maxT: (maxT, C)),
    ("ln1w",     lambda L, C, Vp, maxT: (L, C)),
    ("ln1b",     lambda L, C, Vp, maxT: (L, C)),
    ("qkvw",     lambda L, C, Vp, maxT: (L, 3 * C, C)),
    ("qkvb",     lambda L, C, Vp, maxT: (L, 3 * C)),
    ("attprojw", lambda L, C, Vp, maxT: (L, C, C)),
    ("attprojb", lambda L, C, Vp, maxT: (L, C)),
    ("ln2w",     lambda L, C, Vp, maxT: (L, C)),
    ("ln2b",     lambda L, C, Vp, maxT: (L, C)),
    ("fcw",      lambda L, C, Vp, maxT: (L, 4 * C, C)),
    ("fcb",      lambda L, C, Vp, maxT: (L, 4 * C)),
    ("fcprojw",  lambda L, C, Vp, maxT: (L, C, 4 * C)),
    ("fcprojb",  lambda L, C, Vp, maxT: (L, C)),
    ("lnfw",     lambda L, C, Vp, maxT: (C,)),
    ("lnfb",     lambda L, C, Vp, maxT: (C,)),
]
PARAM_NAMES = [name for name, _ in PARAM_SHAPES]
# Decoupled weight decay applies to these six matrices only (biases and layernorms are not decayed).
DECAYED_PARAMS = ("wte", "wpe", "qkvw", "attprojw", "fcw", "fcprojw")

PRESETS = {
    # small enough for CI on 2 cores, with the real GPT-2 vocabulary
    "tiny": dict(L=3, C=72, NH=3, V=50257, maxT=64, B=12, T=32, seed=1337,
                 tokens="data/tinyshakespeare/tiny_shakespeare_val.bin",
                 model_out="tests/reference/dumps/tiny_model.bin", dump_out="tests/reference/dumps/tiny.dump"),
    # GPT-2 124M, for the GPU machine
    "d12": dict(L=12, C=768, NH=12, V=50257, maxT=1024, B=4, T=64, seed=1337,
                tokens="data/tinyshakespeare/tiny_shakespeare_val.bin",
                model_out="tests/reference/dumps/d12_model.bin", dump_out="tests/reference/dumps/d12.dump"),
}


class InputError(Exception):
    """A bad flag or input file: reported as one line on stderr, exit status 1."""


# -----------------------------------------------------------------------------
# Model configuration

class Config:
    def __init__(self, L, C, NH, V, maxT, Vp=None):
        self.L, self.C, self.NH, self.V, self.maxT = L, C, NH, V, maxT
        # llm.c pads the vocabulary to a multiple of 128 for faster matmuls; rows V..Vp-1 are zero
        self.Vp = Vp if Vp is not None else \
            (V + VOCAB_PAD_MULTIPLE - 1) // VOCAB_PAD_MULTIPLE * VOCAB_PAD_MULTIPLE

    def param_shapes(self):
        """[(name, shape)] of the 16 tensors in file order."""
        return [(name, shape(self.L, self.C, self.Vp, self.maxT)) for name, shape in PARAM_SHAPES]

    def num_params(self):
        return sum(math.prod(shape) for _, shape in self.param_shapes())

    def __str__(self):
        return "L=%d C=%d NH=%d V=%d Vp=%d maxT=%d (%d parameters)" % (
            self.L, self.C, self.NH, self.V, self.Vp, self.maxT, self.num_params())


def check_config(cfg, where):
    """Rejects shapes the model cannot have; `where` names the source (flags or a file)."""
    for field in ("L", "C", "NH", "V", "maxT"):
        value = getattr(cfg, field)
        if value < 1:
            raise InputError("%s: %s must be >= 1, got %d" % (where, field, value))
    if cfg.C % cfg.NH != 0:
        raise InputError("%s: C=%d is not divisible by NH=%d" % (where, cfg.C, cfg.NH))
    if cfg.Vp < cfg.V:
        raise InputError("%s: padded vocab Vp=%d is smaller than V=%d" % (where, cfg.Vp, cfg.V))


# -----------------------------------------------------------------------------
# Parameters: random init, llm.c model file read / write

def init_params(cfg, seed):
    """GPT-2 init, in the order llm.c's train_gpt2.py draws it from one torch.Generator(seed):
    wte (the V real rows), wpe, then per layer qkvw, attprojw, fcw, fcprojw. Weights ~ N(0, 0.02),
    the two residual projections (attprojw, fcprojw) ~ N(0, 0.02/sqrt(2L)), biases 0, layernorm
    weights 1 and biases 0. Returns {name: float32 numpy array in file layout}."""
    gen = torch.Generator()
    gen.manual_seed(seed)
    params = {name: torch.zeros(shape, dtype=torch.float32) for name, shape in cfg.param_shapes()}
    for name in ("ln1w", "ln2w", "lnfw"):
        params[name].fill_(1.0)
    residual_std = INIT_STD / math.sqrt(2 * cfg.L)
    params["wte"][:cfg.V].normal_(0.0, INIT_STD, generator=gen)  # padded rows stay zero
    params["wpe"].normal_(0.0, WPE_STD, generator=gen)
    for l in range(cfg.L):
        params["qkvw"][l].normal_(0.0, INIT_STD, generator=gen)
        params["attprojw"][l].normal_(0.0, residual_std, generator=gen)
        params["fcw"][l].normal_(0.0, INIT_STD, generator=gen)
        params["fcprojw"][l].normal_(0.0, residual_std, generator=gen)
    return {name: t.numpy() for name, t in params.items()}


def read_header(path, f, magic, what):
    """Reads a 256-int32 header and checks its magic; returns it as a numpy int32 array."""
    raw = f.read(HEADER_INTS * 4)
    if len(raw) < HEADER_INTS * 4:
        raise InputError("%s: too short for a %s header (%d bytes)" % (path, what, len(raw)))
    header = np.frombuffer(raw, dtype="<i4")
    if header[0] != magic:
        raise InputError("%s: bad magic %d, expected %d (not a %s)" % (path, header[0], magic, what))
    return header


def load_model_file(path):
    """Reads an llm.c model file (version 3 fp32 or 5 bf16) -> (Config, {name: float32 array})."""
    try:
        file_bytes = os.path.getsize(path)
        with open(path, "rb") as f:
            header = read_header(path, f, MODEL_MAGIC, "llm.c model file")
            version = int(header[1])
            if version not in (MODEL_VERSION_FP32, MODEL_VERSION_BF16):
                raise InputError("%s: unsupported model version %d (3 = fp32, 5 = bf16 are readable)"
                                 % (path, version))
            maxT, V, L, NH, C, Vp = (int(x) for x in header[2:8])
            cfg = Config(L=L, C=C, NH=NH, V=V, maxT=maxT, Vp=Vp)
            check_config(cfg, path)
            bytes_per_value = 4 if version == MODEL_VERSION_FP32 else 2
            expected = HEADER_INTS * 4 + cfg.num_params() * bytes_per_value
            if file_bytes != expected:
                raise InputError("%s: file is %d bytes, but header (%s, version %d) needs exactly %d"
                                 % (path, file_bytes, cfg, version, expected))
            params = {}
            for name, shape in cfg.param_shapes():
                count = math.prod(shape)
                raw = f.read(count * bytes_per_value)
                if version == MODEL_VERSION_FP32:
                    values = np.frombuffer(raw, dtype="<f4").astype(np.float32)
                else:
                    # bf16 is the top half of an fp32: shift the 16 bits up to get the float exactly
                    values = (np.frombuffer(raw, dtype="<u2").astype(np.uint32) << 16).view(np.float32)
                params[name] = values.reshape(shape)
    except OSError as e:
        raise InputError("%s: cannot read model file: %s" % (path, e.strerror or e))
    return cfg, params


def model_file_bytes(cfg, params):
    """The llm.c fp32 (version 3) model file as bytes: header, then the 16 tensors in file order."""
    header = np.zeros(HEADER_INTS, dtype="<i4")
    header[0:8] = [MODEL_MAGIC, MODEL_VERSION_FP32, cfg.maxT, cfg.V, cfg.L, cfg.NH, cfg.C, cfg.Vp]
    chunks = [header.tobytes()]
    for name in PARAM_NAMES:
        chunks.append(params[name].astype("<f4").tobytes())
    return b"".join(chunks)


# -----------------------------------------------------------------------------
# Tokens and the data order

def load_tokens(path):
    """Reads an llm.c token file (256 int32 header: magic, version 1, ntok; then ntok uint16)."""
    try:
        file_bytes = os.path.getsize(path)
        with open(path, "rb") as f:
            header = read_header(path, f, TOKENS_MAGIC, "llm.c token file")
            if header[1] != TOKENS_VERSION:
                raise InputError("%s: unsupported token file version %d, expected %d"
                                 % (path, header[1], TOKENS_VERSION))
            ntok = int(header[2])
            expected = HEADER_INTS * 4 + 2 * ntok
            if ntok < 0 or file_bytes != expected:
                raise InputError("%s: header says %d tokens (%d bytes) but the file is %d bytes"
                                 % (path, ntok, expected, file_bytes))
            return np.frombuffer(f.read(), dtype="<u2").astype(np.int64)
    except OSError as e:
        raise InputError("%s: cannot read token file: %s" % (path, e.strerror or e))


def step_window(tokens, B, T, step):
    """The B*T+1 tokens that training step `step` uses (1 rank, no accumulation; docs/DESIGN.md
    'Data order'): with W = (ntok-1) // (B*T) windows, step s starts at token (s mod W) * B*T."""
    windows = (len(tokens) - 1) // (B * T)
    start = (step % windows) * B * T
    return tokens[start:start + B * T + 1]


# -----------------------------------------------------------------------------
# The GPT-2 forward pass, as plain functions. Shapes in comments: B batch, T time, C channels,
# NH heads, hs = C/NH head size, V vocabulary.

def layernorm(x, weight, bias):
    # x (B,T,C), weight/bias (C,) -> (B,T,C)
    return F.layer_norm(x, (x.size(-1),), weight, bias, eps=LAYERNORM_EPS)


def linear(x, weight, bias):
    # x (B,T,in), weight (out,in), bias (out,) or None -> (B,T,out)
    if MIXED["on"]:
        return bf16_linear().apply(x, weight, bias)
    out = torch.matmul(x, weight.t())
    return out if bias is None else out + bias


# --dtype bfloat16 (mixed precision, the trainer's -p bf16): the weights are bf16 values (rounded
# from an fp32 master kept by hand, in train), the activations float32. A linear layer's two
# operands are bf16 (its input is rounded as autocast does) and every sum is float32.
MIXED = {"on": False}


def to_bf16(t):
    # round to nearest even to bf16, held in float32 (torch's own conversion)
    return t.to(torch.bfloat16).to(torch.float32)


def bf16_linear():
    class BF16Linear(torch.autograd.Function):
        @staticmethod
        def forward(ctx, x, weight, bias):
            xb = to_bf16(x)
            ctx.save_for_backward(xb, weight)
            out = torch.matmul(xb, weight.t())
            return out if bias is None else out + bias

        @staticmethod
        def backward(ctx, g):
            xb, weight = ctx.saved_tensors
            gb = to_bf16(g)   # the output gradient is a bf16 operand of both products
            dx = torch.matmul(gb, weight)
            dw = torch.matmul(gb.reshape(-1, gb.shape[-1]).t(), xb.reshape(-1, xb.shape[-1]))
            db = None if ctx.needs_input_grad[2] is False else g.reshape(-1, g.shape[-1]).sum(0)
            return dx, dw, db
    return BF16Linear


def gelu_tanh(x):
    # GPT-2's GELU, the tanh approximation: 0.5 x (1 + tanh(sqrt(2/pi) (x + 0.044715 x^3)))
    return 0.5 * x * (1.0 + torch.tanh(math.sqrt(2.0 / math.pi) * (x + 0.044715 * x * x * x)))


def causal_attention(qkv, NH):
    # qkv (B,T,3C): q, k, v side by side, each split into NH heads of hs channels -> y (B,T,C)
    B, T, C3 = qkv.shape
    C = C3 // 3
    hs = C // NH
    q, k, v = qkv.split(C, dim=2)
    q = q.view(B, T, NH, hs).transpose(1, 2)  # (B,NH,T,hs)
    k = k.view(B, T, NH, hs).transpose(1, 2)
    v = v.view(B, T, NH, hs).transpose(1, 2)
    scores = torch.matmul(q, k.transpose(-2, -1)) * (1.0 / math.sqrt(hs))  # (B,NH,T,T)
    future = torch.ones(T, T, dtype=torch.bool, device=qkv.device).triu(diagonal=1)
    scores = scores.masked_fill(future, float("-inf"))  # a query sees only keys at or before it
    att = torch.softmax(scores, dim=-1)
    y = torch.matmul(att, v)  # (B,NH,T,hs)
    return y.transpose(1, 2).contiguous().view(B, T, C)


def forward(p, cfg, inputs, targets):
    """p: {name: tensor in file layout}; inputs, targets (B,T) int64.
    Returns (loss scalar, acts: {dump record name: tensor}) with the activations the dump holds."""
    B, T = inputs.shape
    acts = {}
    x = p["wte"][inputs] + p["wpe"][:T]  # (B,T,C)
    acts["encoded"] = x
    for l in range(cfg.L):
        ln1 = layernorm(x, p["ln1w"][l], p["ln1b"][l])
        qkv = linear(ln1, p["qkvw"][l], p["qkvb"][l])                        # (B,T,3C)
        atty = causal_attention(qkv, cfg.NH)                                  # (B,T,C)
        residual2 = x + linear(atty, p["attprojw"][l], p["attprojb"][l])
        ln2 = layernorm(residual2, p["ln2w"][l], p["ln2b"][l])
        fch = linear(ln2, p["fcw"][l], p["fcb"][l])                           # (B,T,4C)
        fch_gelu = gelu_tanh(fch)
        residual3 = residual2 + linear(fch_gelu, p["fcprojw"][l], p["fcprojb"][l])
        for name, value in (("ln1", ln1), ("qkv", qkv), ("atty", atty), ("residual2", residual2),
                            ("ln2", ln2), ("fch", fch), ("fch_gelu", fch_gelu),
                            ("residual3", residual3)):
            acts["%s.%d" % (name, l)] = value
        x = residual3
    lnf = layernorm(x, p["lnfw"], p["lnfb"])
    logits = linear(lnf, p["wte"][:cfg.V], None)  # tied LM head; padded rows are not classes
    losses = F.cross_entropy(logits.view(B * T, cfg.V), targets.view(B * T), reduction="none")
    loss = losses.mean()
    acts["lnf"] = lnf
    acts["logits"] = logits
    acts["losses"] = losses.view(B, T)
    acts["loss"] = loss
    return loss, acts


# -----------------------------------------------------------------------------
# Training math (docs/DESIGN.md section 3; written out in docs/DUMP_FORMAT.md)

def learning_rate(step, lr, warmup, final_frac, num_steps):
    """Linear warmup lr*(s+1)/W for s < W, then a cosine from lr down towards final_frac*lr:
    progress = (s-W) / max(1, S-W) in [0, 1), lr_s = F*lr + (lr - F*lr) * 0.5*(1 + cos(pi*progress))."""
    if step < warmup:
        return lr * (step + 1) / warmup
    progress = (step - warmup) / max(1, num_steps - warmup)
    min_lr = final_frac * lr
    return min_lr + (lr - min_lr) * 0.5 * (1.0 + math.cos(math.pi * progress))


def global_grad_norm(grads):
    # the L2 norm over all parameters together (wte counted once although it is used twice)
    return torch.sqrt(sum((g * g).sum() for g in grads.values()))


def clip_gradients(grads, norm, max_norm):
    """torch.nn.utils.clip_grad_norm_: scale by max_norm/(norm+1e-6) when that is below 1;
    max_norm 0 turns clipping off."""
    if max_norm <= 0:
        return
    coef = max_norm / (float(norm) + CLIP_EPS)
    if coef < 1.0:
        for g in grads.values():
            g.mul_(coef)


def adamw_update(params, grads, m, v, step, lr, weight_decay):
    """One AdamW step, in place. Per tensor: decoupled decay p -= lr*wd*p (matrices only) FIRST,
    then Adam with bias correction t = step+1: p -= lr * mhat / (sqrt(vhat) + eps)."""
    t = step + 1
    for name, p in params.items():
        g = grads[name]
        if name in DECAYED_PARAMS:
            p.sub_(lr * weight_decay * p)
        m[name].mul_(ADAM_BETA1).add_((1.0 - ADAM_BETA1) * g)
        v[name].mul_(ADAM_BETA2).add_((1.0 - ADAM_BETA2) * g * g)
        m_hat = m[name] / (1.0 - ADAM_BETA1 ** t)
        v_hat = v[name] / (1.0 - ADAM_BETA2 ** t)
        p.sub_(lr * m_hat / (torch.sqrt(v_hat) + ADAM_EPS))


def print_bf16_sensitivity(step, params, grads):
    """--dtype bfloat16: how much the loss moves when the working weights move by bf16 roundings
    (tests/test_bf16.sh derives its tolerance from these): sum_g2_ulp = sum of g^2 * ulp(w) and
    sum_g2 = sum of g^2 over every weight w (a bf16 value) and its gradient g; ulp(w) is the spacing
    of the bf16 values at w, 2^(e - 8) for |w| in [2^(e-1), 2^e), and 0 for w = 0."""
    g2_ulp, g2 = 0.0, 0.0
    with torch.no_grad():
        for name, w in params.items():
            g = grads[name].double()
            _, e = torch.frexp(w.detach().double())
            ulp = torch.where(w == 0, torch.zeros_like(g), torch.ldexp(torch.ones_like(g), e - 8))
            g2_ulp += float((g * g * ulp).sum())
            g2 += float((g * g).sum())
    print("bf16 sensitivity step %2d: sum_g2_ulp %.6e sum_g2 %.6e" % (step + 1, g2_ulp, g2), flush=True)


# -----------------------------------------------------------------------------
# ZeRO++ under --dtype bfloat16 (docs/zeropp.md), for tests/test_bf16.sh's derived bound.
#   --qw: qwZ's working weights, an independent implementation of the documented layout: the
#     tensors of a unit (embedding: wte wpe; each block: its 12; head: lnfw lnfb) side by side in one
#     flat buffer, each starting at a multiple of --align elements, zero padded to whole blocks of
#     256; per block scale = amax / 127 (fp32), code = round(x / scale) (half to even) in
#     [-127, 127], and the compute sees code * scale rounded to bf16. The master stays exact.
#   --qg N:G:A: qgZ's reduction over N ranks in node groups of G, A micro-steps, also its own
#     implementation of docs/zeropp.md: rank r's micro-step k is the batch's slice k N + r (the data
#     order), its gradient (rounded to bf16) quantized on the same blocks; in one node group each
#     rank's dequantized bundle added into the bf16 gradient in rank order, else summed in fp32 per
#     node, requantized, and each node's added in node order.
#   --zeropp-bound: per step, the variance of the loss difference that tests/test_bf16.sh's header
#     derives for a run with these flags, from per-element rms differences of the two masters.

QUANT_BLOCK, QUANT_MAX = 256, 127


def unit_layout(cfg, align):
    """[[(name, layer or None, offset, numel)] per unit, padded length] in the engine's unit order."""
    block = PARAM_NAMES[2:14]
    units = [[("wte", None), ("wpe", None)]] + [[(n, l) for n in block] for l in range(cfg.L)] + \
            [[("lnfw", None), ("lnfb", None)]]
    shapes = dict(cfg.param_shapes())
    layout = []
    for tensors in units:
        offset, placed = 0, []
        for name, layer in tensors:
            numel = math.prod(shapes[name][1:] if layer is not None else shapes[name])
            placed.append((name, layer, offset, numel))
            offset = (offset + numel + align - 1) // align * align
        layout.append((placed, (offset + QUANT_BLOCK - 1) // QUANT_BLOCK * QUANT_BLOCK))
    return layout


def to_flat(tensors, layout, dtype=None):
    """{name: tensor} -> one flat buffer of every unit side by side (padding 0), in dtype."""
    dtype = dtype or next(iter(tensors.values())).dtype
    parts = []
    for placed, padded in layout:
        flat = torch.zeros(padded, dtype=dtype)
        for name, layer, offset, numel in placed:
            t = tensors[name] if layer is None else tensors[name][layer]
            flat[offset:offset + numel] = t.detach().reshape(-1).to(dtype)
        parts.append(flat)
    return torch.cat(parts)


def from_flat(flat, layout, tensors):
    """Writes the flat buffer's values back into {name: tensor}, in place."""
    base = 0
    for placed, padded in layout:
        for name, layer, offset, numel in placed:
            t = tensors[name] if layer is None else tensors[name][layer]
            t.copy_(flat[base + offset:base + offset + numel].view(t.shape))
        base += padded


def block_absmax(flat):
    return flat.abs().view(-1, QUANT_BLOCK).amax(dim=1)


def block_quantize(flat):
    """qwZ's round trip of a float32 flat buffer: (dequantized values, each block's scale)."""
    x = flat.view(-1, QUANT_BLOCK)
    scale = x.abs().amax(dim=1, keepdim=True) / QUANT_MAX
    code = torch.where(scale > 0, torch.round(x / scale).clamp(-QUANT_MAX, QUANT_MAX), torch.zeros_like(x))
    return (code * scale).view(-1), scale.view(-1)


def quantize_working(params, layout):
    """--qw: the working weights (bf16 values) replaced by their block-quantized copy, rounded to bf16."""
    with torch.no_grad():
        dequantized, _ = block_quantize(to_flat(params, layout, torch.float32))
        from_flat(to_bf16(dequantized), layout, params)


def per_block(values):   # one value a block -> one a element
    return values.repeat_interleave(QUANT_BLOCK)


def bf16_ulp(x):
    # the spacing of the bf16 values at x: 2^(e - 8) for |x| in [2^(e-1), 2^e), 0 at x = 0
    _, e = torch.frexp(x)
    return torch.where(x == 0, torch.zeros_like(x), torch.ldexp(torch.ones_like(x), e - 8))


def block_amax_shift(D, x, amax):
    """Per block: how far the two runs' block amax may lie apart, and the chance that they differ.
    The amax of the other run lies in [amax - D at the max, max of |x| + D] give or take one
    rounding (ulp(amax)); it differs only if an element that may be the max rounds differently
    (chance D / ulp(x) each)."""
    ulp_amax = bf16_ulp(amax)
    at_max = (x.abs() == per_block(amax)).to(D.dtype)
    down = (D * at_max).view(-1, QUANT_BLOCK).amax(dim=1)
    up = (x.abs() + D).view(-1, QUANT_BLOCK).amax(dim=1) - amax
    damax = torch.maximum(down, up) + ulp_amax
    may_be_max = (x.abs() + D >= per_block(amax - damax)) & (bf16_ulp(x) > 0)
    flip = torch.where(may_be_max, D / bf16_ulp(x).clamp(min=1e-300), torch.zeros_like(D))
    return damax, flip.view(-1, QUANT_BLOCK).sum(dim=1).clamp(max=1.0)


def loss_difference_var(D, x, w, g, quantized):
    """The variance bound of sum g e, e the working weights' difference when the masters are D
    (rms, per element) apart; x the masters rounded to bf16, w the working weights (flat float64).
    Without qwZ sum g^2 (3 D ulp(x) + D^2), the header's; with it the step s = amax / 127 of x's
    block in place of ulp, and where the block's amax may differ (chance P, damax apart) the whole
    block rescaled by rel = damax / amax (correlated: one term a block) and re-rounded where it
    moved (rel |x| in place of D). The three parts' spreads add."""
    if not quantized:
        return float((g * g * (3 * D * bf16_ulp(x) + D * D)).sum())
    amax = block_absmax(x)
    s = per_block(amax / QUANT_MAX)
    own = float((g * g * (3 * D * s + D * D)).sum())
    damax, P = block_amax_shift(D, x, amax)
    rel = torch.where(amax > damax, damax / (amax - damax).clamp(min=1e-300), torch.ones_like(amax))
    rescaled = float((P * (rel * (g * w).view(-1, QUANT_BLOCK).sum(dim=1)) ** 2).sum())
    shift = x.abs() * per_block(rel)
    rerounded = float((per_block(P) * g * g * (3 * shift * s + shift * shift)).sum())
    return (math.sqrt(own) + math.sqrt(rescaled) + math.sqrt(rerounded)) ** 2


def slice_gradients(params, cfg, inputs, targets, parts):
    """The gradients each of `parts` equal slices of the batch's rows gives (slice j = rank j % N's
    micro-step j // N: its tokens' share of the step's mean loss), rounded to bf16."""
    b = inputs.shape[0] // parts
    names = list(params)
    grads = []
    for j in range(parts):
        loss, _ = forward(params, cfg, inputs[j * b:(j + 1) * b], targets[j * b:(j + 1) * b])
        g = torch.autograd.grad(loss * (b / inputs.shape[0]), [params[n] for n in names])
        grads.append({n: to_bf16(x) for n, x in zip(names, g)})
    return grads


def qg_reduce(slices, N, G, A):
    """--qg: the step's gradient (flat, bf16 values) from the ranks' micro-step gradients."""
    X = N // G
    shard = torch.zeros_like(slices[0])
    for k in range(A):
        ranks = [block_quantize(g)[0] for g in slices[k * N:(k + 1) * N]]
        if X == 1:
            for bundle in ranks:
                shard = to_bf16(shard + bundle)
            continue
        for x in range(X):
            node = torch.zeros_like(shard)
            for bundle in ranks[x * G:(x + 1) * G]:
                node = node + bundle
            shard = to_bf16(shard + block_quantize(node)[0])
    return shard


def crossing_var(d, s):
    """What rounding to a grid of step s adds to the difference of two values d (rms) apart against
    the grid, at a random place: 3 d s (beyond the difference itself, the header's 3 d s + d^2),
    and at most s^2 / 6 (two independent roundings)."""
    return torch.where(s > 0, torch.minimum(3 * d * s, s * s / 6), torch.zeros_like(d))


def qg_difference(slices, N, G, A, sigma_g):
    """qgZ's share of the two runs' gradient difference, per element (flat float64): its variance,
    and the chance that any code differs. A rank's partial gradient moves against its block's grid
    by 2 sigma_g of itself (its roundings and its block amax's): crossing_var, and its block
    scale's own sigma_g; a node sum (hop 2) moves by its bundles' spread more. The difference a
    value brings in passes through (the roundings of sigma_g, which gradient_error adds)."""
    X, u_b = N // G, 2.0 ** -8
    var, change = torch.zeros_like(slices[0]), torch.zeros_like(slices[0])
    for k in range(A):
        ranks = slices[k * N:(k + 1) * N]
        hop1 = []
        for g in ranks:
            d, s = 2 * sigma_g * g.abs(), per_block(block_absmax(g) / QUANT_MAX)
            hop1.append(crossing_var(d, s) + (sigma_g * g) ** 2)
            change += torch.where(s > 0, d / s.clamp(min=1e-300), torch.zeros_like(d))
        var += sum(hop1)
        for x in range(X if X > 1 else 0):
            node = sum(block_quantize(g)[0] for g in ranks[x * G:(x + 1) * G])
            d = sum(hop1[x * G:(x + 1) * G]).sqrt() + 2 * sigma_g * node.abs()
            s = per_block(block_absmax(node) / QUANT_MAX)
            var += crossing_var(d, s) + (sigma_g * node) ** 2
            change += torch.where(s > 0, d / s.clamp(min=1e-300), torch.zeros_like(d))
        partial = sum(block_quantize(g)[0].abs() for g in ranks)   # the bf16 adds into the shard
        var += (G if X == 1 else X) * (u_b * partial) ** 2 / 3
    return var, change.clamp(max=1.0)


class ZeroppBound:
    """--zeropp-bound: per element, D is the rms of master - the run's master (float64, flat); Mq,
    Vq the Adam-weighted sums of the gradient difference's variance (weights a_k^2, b_k); changed
    the chance that some qgZ code of the element has differed so far."""

    def __init__(self, layout, quantized, qg, roundings):
        self.layout, self.quantized, self.qg = layout, quantized, qg
        self.sigma_g = math.sqrt(roundings / 3) * 2.0 ** -8      # the header's relative spread
        self.D = self.Mq = self.Vq = self.changed = None
        self.flip = None

    def flat(self, tensors):
        return to_flat(tensors, self.layout, torch.float64)

    def loss_var(self, master, params, grads):
        """The variance bound of the loss difference at this step (grads: the loss's own)."""
        g = self.flat(grads)
        if self.D is None:
            self.D, self.Mq, self.Vq, self.changed = (torch.zeros_like(g) for _ in range(4))
        x = self.flat({n: to_bf16(t) for n, t in master.items()})
        return loss_difference_var(self.D, x, self.flat(params), g, self.quantized)

    def gradient_error(self, grads, slices, coef):
        """The variance of the run's clipped gradient - the reference's (grads: as AdamW gets them,
        before clipping), per element. Also kept: step 1's norm and the bound on its difference, and
        the mean square of step 1's change of sign(g) (flip)."""
        g = self.flat(grads)
        var = (self.sigma_g * g) ** 2
        self.flip = torch.zeros_like(g)
        norm = float(g.norm())
        if self.qg:
            qg_var, change = qg_difference([s.double() for s in slices], *self.qg, self.sigma_g)
            var = var + qg_var
        # the norm's difference while the weights are the same (step 1): first order, and the rest
        self.norm, self.dnorm = norm, 5 * float((g * g * var).sum().sqrt()) / norm + float(var.sum()) / norm
        if self.qg:
            norm_rel = float(qg_var.sum().sqrt()) / norm if coef < 1.0 else 0.0   # the clip coefficient's
            var = var + (norm_rel * g) ** 2
            self.changed = (self.changed + change).clamp(max=1.0)
            # a sign flip (2 lr) by Cantelli's chance; where g = 0, a step from 0 (lr) if a code differs
            self.flip = torch.where(g != 0, 4 * qg_var / (qg_var + g * g), change)
        return coef * coef * var

    def after_update(self, var, m, v, t, lr):
        """D grows by lr times the rms of the two runs' Adam steps' difference."""
        b1, b2 = ADAM_BETA1, ADAM_BETA2
        self.Mq = b1 * b1 * self.Mq + (1 - b1) ** 2 * var
        self.Vq = b2 * self.Vq + (1 - b2) * var
        if t == 1:   # lr sign(g): differs only where qgZ's error changes the sign
            du = self.flip.sqrt()
        else:
            root = (self.flat(v) / (1 - b2 ** t)).sqrt()
            u = (self.flat(m) / (1 - b1 ** t)).abs() / (root + ADAM_EPS)
            M, V = self.Mq.sqrt() / (1 - b1 ** t), (self.Vq / (1 - b2 ** t)).sqrt()
            cap = u + adam_ratio(t)
            # past first order: the cap, where some code may have differed, plus sigma_g's share
            far = cap * (self.changed.sqrt() + 2 * self.sigma_g)
            du = torch.where(2 * V < root, (M + u * V) / (root - V).clamp(min=1e-300), far)
            du = torch.minimum(torch.where(M == 0, torch.zeros_like(du), du), cap)
        self.D = self.D + lr * du


def adam_ratio(t):
    """A_t, the largest |m^ / sqrt(v^)| after t gradients: sqrt(sum_k a_k^2 / b_k), a_k and b_k
    gradient k's bias-corrected weights in m^ and v^ (Cauchy-Schwarz)."""
    b1, b2 = ADAM_BETA1, ADAM_BETA2
    a = [(1 - b1) * b1 ** (t - k) / (1 - b1 ** t) for k in range(1, t + 1)]
    b = [(1 - b2) * b2 ** (t - k) / (1 - b2 ** t) for k in range(1, t + 1)]
    return math.sqrt(sum(x * x / y for x, y in zip(a, b)))


def mixed_gradients(params, cfg, inputs, targets, args, layout):
    """--dtype bfloat16, after the step's backward: (the gradients, rounded to bf16 once; those
    AdamW gets, through --qg's reduction; the ranks' micro-step gradients, flat, or None)."""
    grads = {name: to_bf16(p.grad) for name, p in params.items()}
    if not args.qg:
        return grads, grads, None
    N, G, A = args.qg
    slices = [to_flat(g, layout, torch.float32) for g in slice_gradients(params, cfg, inputs, targets, N * A)]
    reduced = {name: torch.zeros_like(g) for name, g in grads.items()}
    from_flat(qg_reduce(slices, N, G, A), layout, reduced)
    return grads, reduced, slices


def train(params32, cfg, tokens, args, dtype, device):
    """Runs args.steps steps from the float32 parameters params32.
    Returns (records of step 0: [(name, numpy array)], per-step numpy arrays of tokens, losses,
    grad norms, learning rates, and the parameters after the last step)."""
    B, T = args.B, args.T
    mixed = dtype == torch.bfloat16
    MIXED["on"] = mixed   # (set for each run: a process may train several, tests/test_bf16.sh's)
    if mixed:
        dtype = torch.float32
    params = {name: torch.tensor(a, dtype=dtype, device=device, requires_grad=True)  # copies
              for name, a in params32.items()}
    master = {name: p.detach().clone() for name, p in params.items()} if mixed else params
    m = {name: torch.zeros_like(p) for name, p in params.items()}
    v = {name: torch.zeros_like(p) for name, p in params.items()}
    layout = unit_layout(cfg, args.align) if mixed else None
    bound = ZeroppBound(layout, args.qw, args.qg, args.roundings) if args.zeropp_bound else None
    step0_records = []
    step_tokens, losses, norms, lrs = [], [], [], []
    for step in range(args.steps):
        if mixed:   # the working copy: the fp32 master rounded to bf16 (under --qw, then quantized)
            with torch.no_grad():
                for name, p in params.items():
                    p.copy_(to_bf16(master[name]))
            if args.qw:
                quantize_working(params, layout)
        window = step_window(tokens, B, T, step)
        batch = torch.from_numpy(window).to(device)
        inputs, targets = batch[:-1].view(B, T), batch[1:].view(B, T)
        loss, acts = forward(params, cfg, inputs, targets)
        loss.backward()
        grads = {name: p.grad for name, p in params.items()}
        if mixed:   # bf16 gradients (summed in fp32 over the step's uses, rounded once)
            own, grads, slices = mixed_gradients(params, cfg, inputs, targets, args, layout)
            print_bf16_sensitivity(step, params, own)
        norm = global_grad_norm(grads)
        if bound:
            loss_var = bound.loss_var(master, params, own)
            grad_var = bound.gradient_error(grads, slices, min(1.0, args.clip / (float(norm) + CLIP_EPS))
                                            if args.clip > 0 else 1.0)
            print("zeropp bound step %2d: var %.6e norm %.9e dnorm %.3e" % (step + 1, loss_var, bound.norm,
                                                                            bound.dnorm), flush=True)
        if step == 0:
            step0_records = step0_dump_records(inputs, targets, acts, grads)
        del acts  # the (B,T,V) logits are large: free them before the optimizer allocates
        lr = learning_rate(step, args.lr, args.warmup, args.final_frac, args.steps)
        with torch.no_grad():
            clip_gradients(grads, norm, args.clip)
            adamw_update(master, grads, m, v, step, lr, args.wd)
            if bound:
                bound.after_update(grad_var, m, v, step + 1, lr)
        for p in params.values():
            p.grad = None
        step_tokens.append(window.astype(np.int32))
        losses.append(float(loss))
        norms.append(float(norm))
        lrs.append(lr)
        print("step %2d/%d: loss %.6f  grad_norm %.6f  lr %.6e" % (step + 1, args.steps, losses[-1],
                                                                   norms[-1], lr), flush=True)
    return (step0_records, np.stack(step_tokens), np.array(losses), np.array(norms), np.array(lrs),
            master)


# -----------------------------------------------------------------------------
# The activation dump (docs/DUMP_FORMAT.md)

def to_numpy_float32(t):
    return t.detach().to("cpu", torch.float32).numpy()


def step0_dump_records(inputs, targets, acts, grads):
    """[(name, numpy array)] for step 0: inputs, targets, every activation, the loss and the
    gradients of the 16 parameter tensors (before clipping), in dump order."""
    records = [("inputs", inputs.cpu().numpy().astype(np.int32)),
               ("targets", targets.cpu().numpy().astype(np.int32))]
    records += [(name, to_numpy_float32(value)) for name, value in acts.items()]
    records += [("grad." + name, to_numpy_float32(grads[name])) for name in PARAM_NAMES]
    return records


def float_bits(x):
    # the int32 whose bits are the float32 x, for storing floats in the int32 header
    return int(np.array([x], dtype="<f4").view("<i4")[0])


def dump_header(cfg, args, num_records, compute_bits):
    header = np.zeros(HEADER_INTS, dtype="<i4")
    header[0:16] = [DUMP_MAGIC, DUMP_VERSION, args.B, args.T, cfg.L, cfg.C, cfg.NH, cfg.V, cfg.Vp,
                    cfg.maxT, args.steps, num_records, args.warmup, args.seed, compute_bits, 0]
    header[16:23] = [float_bits(x) for x in (args.lr, args.final_frac, args.wd, args.clip,
                                             ADAM_BETA1, ADAM_BETA2, ADAM_EPS)]
    return header


def record_bytes(name, array):
    """One record: name (64 bytes, NUL padded), dtype, ndim, dims[4] (unused dims 0), then data."""
    encoded = name.encode("ascii")
    assert len(encoded) < DUMP_NAME_BYTES and array.ndim <= DUMP_MAX_DIMS
    if array.dtype == np.float32:
        dtype, data = DUMP_FLOAT32, array.astype("<f4")
    elif array.dtype == np.int32:
        dtype, data = DUMP_INT32, array.astype("<i4")
    else:
        raise AssertionError("record %s has dtype %s" % (name, array.dtype))
    dims = list(array.shape) + [0] * (DUMP_MAX_DIMS - array.ndim)
    meta = np.array([dtype, array.ndim] + dims, dtype="<i4")
    return encoded.ljust(DUMP_NAME_BYTES, b"\0") + meta.tobytes() + np.ascontiguousarray(data).tobytes()


def write_dump(f, header, records):
    f.write(header.tobytes())
    for name, array in records:
        f.write(record_bytes(name, array))


def write_atomically(path, write_fn):
    """Writes via a temporary name in the same directory, then renames: readers never see a
    partial file, and a failure leaves nothing behind."""
    tmp = "%s.tmp.%d" % (path, os.getpid())
    try:
        with open(tmp, "wb") as f:
            write_fn(f)
        os.replace(tmp, path)
    except BaseException as e:
        if os.path.exists(tmp):
            os.remove(tmp)
        if isinstance(e, OSError):
            raise InputError("%s: cannot write: %s" % (path, e.strerror or e))
        raise


# -----------------------------------------------------------------------------
# Command line

class OneLineParser(argparse.ArgumentParser):
    def error(self, message):
        # argparse prints usage plus the error; we want exactly one line
        raise InputError(message)


def parse_args(argv):
    parser = OneLineParser(description="PyTorch GPT-2 reference: model file + activation dump "
                           "(see docs/DUMP_FORMAT.md)", allow_abbrev=False)
    parser.add_argument("--preset", choices=sorted(PRESETS), help="tiny (CI) or d12 (GPT-2 124M)")
    shape = parser.add_argument_group("model shape (ignored with --load unless they conflict)")
    shape.add_argument("--L", type=int, help="layers")
    shape.add_argument("--C", type=int, help="channels")
    shape.add_argument("--NH", type=int, help="attention heads (C %% NH == 0)")
    shape.add_argument("--V", type=int, help="vocabulary size")
    shape.add_argument("--maxT", type=int, help="maximum sequence length (wpe rows)")
    parser.add_argument("--seed", type=int, help="random init seed (default 1337)")
    parser.add_argument("--load", help="start from this llm.c model file (version 3 or 5)")
    parser.add_argument("--B", type=int, help="batch size")
    parser.add_argument("--T", type=int, help="sequence length")
    parser.add_argument("--tokens", help="llm.c token file to train on")
    parser.add_argument("--model-out", help="write the initial model here (llm.c fp32, version 3)")
    parser.add_argument("--dump-out", help="write the activation dump here")
    parser.add_argument("--steps", type=int, default=10, help="training steps (default 10)")
    parser.add_argument("--lr", type=float, default=1e-3, help="peak learning rate (default 1e-3)")
    parser.add_argument("--warmup", type=int, default=2, help="warmup steps (default 2)")
    parser.add_argument("--final-frac", type=float, default=0.1, help="final lr / peak lr (default 0.1)")
    parser.add_argument("--wd", type=float, default=0.1, help="weight decay of the matrices (default 0.1)")
    parser.add_argument("--clip", type=float, default=1.0, help="max grad norm, 0 = off (default 1.0)")
    parser.add_argument("--dtype", choices=("float64", "float32", "bfloat16"), default="float64",
                        help="compute precision (default float64; bfloat16: bf16 weights and gradients from an "
                             "fp32 master, fp32 activations, as the trainer's -p bf16)")
    parser.add_argument("--qw", action="store_true",
                        help="with bfloat16: the working weights quantized as the trainer's -qw 8 (int8 blocks of 256)")
    parser.add_argument("--align", type=int, default=64,
                        help="with --qw: the element alignment of a tensor in its unit (default 64, the CPU trainer's)")
    parser.add_argument("--qg", metavar="N:G:A",
                        help="with bfloat16: gradients reduced as the trainer's -qg 8 over N ranks in node groups of G "
                             "(-hp G; G = N without it), A micro-steps")
    parser.add_argument("--zeropp-bound", action="store_true",
                        help="with bfloat16: print tests/test_bf16.sh's loss variance bound for a run with --qw/--qg's flags")
    parser.add_argument("--roundings", type=int, default=6,
                        help="with --zeropp-bound: R, the bf16 roundings of a gradient the runs do not share (default 6)")
    parser.add_argument("--device", default=None, help="cpu (default) or cuda[:N]; preset d12: cuda if present")
    args = parser.parse_args(argv)
    apply_preset(args)
    check_args(args)
    return args


def apply_preset(args):
    # a preset fills in what the flags left unset; explicit flags win
    if args.preset is not None:
        for key, value in PRESETS[args.preset].items():
            if getattr(args, key) is None:
                setattr(args, key, value)
    if args.seed is None:
        args.seed = 1337


def check_args(args):
    for flag in ("B", "T", "tokens"):
        if getattr(args, flag) is None:
            raise InputError("--%s is required (or use --preset tiny|d12)" % flag)
    if args.load is None:
        for flag in ("L", "C", "NH", "V", "maxT"):
            if getattr(args, flag) is None:
                raise InputError("--%s is required without --load (or use --preset tiny|d12)" % flag)
    for flag in ("B", "T", "steps"):
        if getattr(args, flag) < 1:
            raise InputError("--%s must be >= 1, got %d" % (flag, getattr(args, flag)))
    if args.warmup < 0:
        raise InputError("--warmup must be >= 0, got %d" % args.warmup)
    for flag in ("lr", "final_frac", "wd", "clip"):
        value = getattr(args, flag)
        if not math.isfinite(value) or value < 0:
            raise InputError("--%s must be a finite number >= 0, got %r"
                             % (flag.replace("_", "-"), value))
    if not 0 <= args.seed < 2 ** 31:
        raise InputError("--seed must be in [0, 2^31), got %d" % args.seed)  # an int32 in the dump
    check_zeropp_args(args)
    if args.device is not None and args.device.split(":")[0] not in ("cpu", "cuda"):
        raise InputError("--device must be cpu or cuda[:N], got %r" % args.device)


def check_zeropp_args(args):
    if (args.qw or args.qg or args.zeropp_bound) and args.dtype != "bfloat16":
        raise InputError("--qw, --qg and --zeropp-bound need --dtype bfloat16")
    if args.align < 1 or args.roundings < 0:
        raise InputError("--align must be >= 1 and --roundings >= 0")
    if args.qg is not None:
        try:
            N, G, A = (int(x) for x in args.qg.split(":"))
        except ValueError:
            raise InputError("--qg %r: expected N:G:A, three integers" % args.qg)
        if N < 1 or G < 1 or A < 1 or N % G or args.B % (N * A):
            raise InputError("--qg %s: want G dividing N and N*A dividing --B %d" % (args.qg, args.B))
        args.qg = (N, G, A) if N > 1 else None   # one rank reduces nothing


def build_model(args):
    """-> (Config, {name: float32 array} or None) from --load, or from the shape flags (the random
    init needs torch, so it happens later)."""
    if args.load is None:
        cfg = Config(L=args.L, C=args.C, NH=args.NH, V=args.V, maxT=args.maxT)
        check_config(cfg, "flags")
        return cfg, None
    cfg, params = load_model_file(args.load)
    for flag in ("L", "C", "NH", "V", "maxT"):
        given = getattr(args, flag)
        if given is not None and given != getattr(cfg, flag):
            raise InputError("--%s %d conflicts with %s, which has %s=%d"
                             % (flag, given, args.load, flag, getattr(cfg, flag)))
    return cfg, params


def check_data(args, cfg, tokens):
    """The batch must fit the model and the file: T <= maxT, enough tokens, ids < V."""
    if args.T > cfg.maxT:
        raise InputError("--T %d exceeds the model's maxT %d" % (args.T, cfg.maxT))
    need = args.B * args.T + 1
    if len(tokens) < need:
        raise InputError("%s: has %d tokens, need at least B*T+1 = %d"
                         % (args.tokens, len(tokens), need))
    for step in range(args.steps):
        window = step_window(tokens, args.B, args.T, step)
        bad = np.flatnonzero(window >= cfg.V)
        if bad.size:
            start = (step % ((len(tokens) - 1) // (args.B * args.T))) * args.B * args.T
            raise InputError("%s: token %d at position %d is >= V=%d"
                             % (args.tokens, window[bad[0]], start + bad[0], cfg.V))


def prepare_output_dir(path, flag):
    directory = os.path.dirname(path)
    if directory:
        try:
            os.makedirs(directory, exist_ok=True)
        except OSError as e:
            raise InputError("--%s %s: cannot create directory %s: %s"
                             % (flag, path, directory, e.strerror or e))


def choose_device(args):
    # default cpu; the d12 preset takes the GPU when there is one
    if args.device is None:
        use_gpu = args.preset == "d12" and torch.cuda.is_available()
        args.device = "cuda" if use_gpu else "cpu"
    if args.device.startswith("cuda") and not torch.cuda.is_available():
        raise InputError("--device %s: this PyTorch sees no CUDA device" % args.device)


def main(argv):
    args = parse_args(argv)
    cfg, params32 = build_model(args)
    tokens = load_tokens(args.tokens)
    check_data(args, cfg, tokens)
    for path, flag in ((args.model_out, "model-out"), (args.dump_out, "dump-out")):
        if path is not None:
            prepare_output_dir(path, flag)
    load_torch()
    choose_device(args)
    if params32 is None:
        params32 = init_params(cfg, args.seed)
    dtype = {"float64": torch.float64, "float32": torch.float32, "bfloat16": torch.bfloat16}[args.dtype]
    if args.device.startswith("cuda"):
        # exact float32 matmuls on the GPU: no TF32
        torch.backends.cuda.matmul.allow_tf32 = False
        torch.backends.cudnn.allow_tf32 = False
    print("gpt2_reference: torch %s, %s on %s, model %s%s" % (
        torch.__version__, args.dtype, args.device, cfg,
        ", from " + args.load if args.load else ", seed %d" % args.seed))
    print("batch B=%d T=%d from %s (%d tokens), %d steps, lr %g warmup %d final-frac %g wd %g clip %g"
          % (args.B, args.T, args.tokens, len(tokens), args.steps, args.lr, args.warmup,
             args.final_frac, args.wd, args.clip))

    records, step_tokens, losses, norms, lrs, final = train(params32, cfg, tokens, args, dtype, args.device)
    # the model file holds the initial weights, exactly the float32 values the reference started from
    if args.model_out is not None:
        write_atomically(args.model_out, lambda f: f.write(model_file_bytes(cfg, params32)))
        print("wrote %s" % args.model_out)
    if args.dump_out is not None:
        records += [("step_tokens", step_tokens.astype(np.int32)),
                    ("train_losses", losses.astype(np.float32)),
                    ("train_grad_norms", norms.astype(np.float32)),
                    ("train_lrs", lrs.astype(np.float32))]
        records += [("final." + name, to_numpy_float32(final[name])) for name in PARAM_NAMES]
        header = dump_header(cfg, args, len(records), 64 if dtype == torch.float64 else 32)
        write_atomically(args.dump_out, lambda f: write_dump(f, header, records))
        print("wrote %s (%d records)" % (args.dump_out, len(records)))
    return 0


if __name__ == "__main__":
    try:
        sys.exit(main(sys.argv[1:]))
    except InputError as e:
        print("gpt2_reference.py: error: %s" % e, file=sys.stderr)
        sys.exit(1)
    except (MemoryError, RuntimeError) as e:
        # torch reports a failed allocation (CPU or CUDA) as a RuntimeError; anything else is a bug
        if isinstance(e, RuntimeError) and "allocate" not in str(e) and "out of memory" not in str(e):
            raise
        print("gpt2_reference.py: error: out of memory: the model or batch is too large for this "
              "machine", file=sys.stderr)
        sys.exit(1)
