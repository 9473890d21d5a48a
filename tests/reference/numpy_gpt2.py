"""
An independent GPT-2 in NumPy, float64, used only to check tests/reference/gpt2_reference.py.

It shares no code with the torch script: its own readers of the three file formats (llm.c model,
llm.c tokens, activation dump), its own layernorm / attention / GELU / cross-entropy written out
from the definitions, and its own AdamW. If both implementations agree, neither has a private bug.
"""

import math
import struct

import numpy as np

# ----------------------------------------------------------------------------- file readers


def read_model(path):
    """llm.c model file -> (cfg dict, {name: float64 array}) for versions 3 (fp32) and 5 (bf16)."""
    with open(path, "rb") as f:
        raw = f.read()
    header = struct.unpack("<256i", raw[:1024])
    assert header[0] == 20240326 and header[1] in (3, 5), "not an llm.c model file"
    maxT, V, L, NH, C, Vp = header[2:8]
    cfg = dict(maxT=maxT, V=V, L=L, NH=NH, C=C, Vp=Vp)
    sizes = [("wte", (Vp, C)), ("wpe", (maxT, C)), ("ln1w", (L, C)), ("ln1b", (L, C)),
             ("qkvw", (L, 3 * C, C)), ("qkvb", (L, 3 * C)), ("attprojw", (L, C, C)),
             ("attprojb", (L, C)), ("ln2w", (L, C)), ("ln2b", (L, C)), ("fcw", (L, 4 * C, C)),
             ("fcb", (L, 4 * C)), ("fcprojw", (L, C, 4 * C)), ("fcprojb", (L, C)),
             ("lnfw", (C,)), ("lnfb", (C,))]
    if header[1] == 3:
        values = np.frombuffer(raw, dtype="<f4", offset=1024).astype(np.float64)
    else:
        bits = np.frombuffer(raw, dtype="<u2", offset=1024).astype(np.uint32) << 16
        values = bits.view(np.float32).astype(np.float64)
    params, at = {}, 0
    for name, shape in sizes:
        n = int(np.prod(shape))
        params[name] = values[at:at + n].reshape(shape).copy()
        at += n
    assert at == values.size, "model file size does not match its header"
    return cfg, params


def write_model(path, cfg, params, version=3):
    """Writes a model file in llm.c's layout; version 5 rounds every value to bf16 (nearest even)."""
    header = np.zeros(256, dtype="<i4")
    header[:8] = [20240326, version, cfg["maxT"], cfg["V"], cfg["L"], cfg["NH"], cfg["C"], cfg["Vp"]]
    order = ["wte", "wpe", "ln1w", "ln1b", "qkvw", "qkvb", "attprojw", "attprojb", "ln2w", "ln2b",
             "fcw", "fcb", "fcprojw", "fcprojb", "lnfw", "lnfb"]
    flat = np.concatenate([params[name].ravel() for name in order]).astype("<f4")
    if version == 5:
        bits = flat.view("<u4").astype(np.uint64)
        rounded = (bits + 0x7FFF + ((bits >> 16) & 1)) >> 16  # round to nearest even
        body = rounded.astype("<u2").tobytes()
    else:
        body = flat.tobytes()
    with open(path, "wb") as f:
        f.write(header.tobytes() + body)


def read_tokens(path):
    with open(path, "rb") as f:
        raw = f.read()
    header = struct.unpack("<256i", raw[:1024])
    assert header[0] == 20240520 and header[1] == 1, "not an llm.c token file"
    tokens = np.frombuffer(raw, dtype="<u2", offset=1024).astype(np.int64)
    assert tokens.size == header[2]
    return tokens


def write_tokens(path, tokens):
    header = np.zeros(256, dtype="<i4")
    header[:3] = [20240520, 1, len(tokens)]
    with open(path, "wb") as f:
        f.write(header.tobytes() + np.asarray(tokens, dtype="<u2").tobytes())


HEADER_FIELDS = ["magic", "version", "B", "T", "L", "C", "NH", "V", "Vp", "maxT", "nsteps",
                 "num_records", "warmup", "seed", "compute_bits"]
HYPER_FIELDS = ["lr", "final_frac", "weight_decay", "grad_clip", "beta1", "beta2", "eps"]


def read_dump(path):
    """Activation dump -> (header dict, {name: array}, [names in file order])."""
    with open(path, "rb") as f:
        raw = f.read()
    ints = struct.unpack("<256i", raw[:1024])
    floats = struct.unpack("<256f", raw[:1024])
    header = {name: ints[k] for k, name in enumerate(HEADER_FIELDS)}
    header.update({name: floats[16 + k] for k, name in enumerate(HYPER_FIELDS)})
    assert header["magic"] == 20241129 and header["version"] == 1, "not a dump"
    records, order, at = {}, [], 1024
    for _ in range(header["num_records"]):
        name = raw[at:at + 64].split(b"\0")[0].decode("ascii")
        dtype, ndim, *dims = struct.unpack("<6i", raw[at + 64:at + 88])
        shape = tuple(dims[:ndim])
        n = int(np.prod(shape)) if ndim else 1
        kind = "<f4" if dtype == 0 else "<i4"
        records[name] = np.frombuffer(raw, dtype=kind, count=n, offset=at + 88).reshape(shape)
        order.append(name)
        at += 88 + 4 * n
    assert at == len(raw), "dump has trailing bytes"
    return header, records, order


# ----------------------------------------------------------------------------- the model


def layernorm(x, w, b, eps=1e-5):
    mu = x.mean(axis=-1, keepdims=True)
    var = ((x - mu) ** 2).mean(axis=-1, keepdims=True)  # biased variance, as in the GPT-2 paper
    return (x - mu) / np.sqrt(var + eps) * w + b


def gelu(x):
    return 0.5 * x * (1.0 + np.tanh(math.sqrt(2.0 / math.pi) * (x + 0.044715 * x ** 3)))


def attention(qkv, NH):
    """qkv (B,T,3C) -> (B,T,C), one head at a time, softmax written out with its max shift."""
    B, T, C3 = qkv.shape
    C = C3 // 3
    hs = C // NH
    out = np.zeros((B, T, C))
    causal = np.tril(np.ones((T, T), dtype=bool))
    for h in range(NH):
        q = qkv[:, :, 0 * C + h * hs:0 * C + (h + 1) * hs]
        k = qkv[:, :, 1 * C + h * hs:1 * C + (h + 1) * hs]
        v = qkv[:, :, 2 * C + h * hs:2 * C + (h + 1) * hs]
        scores = np.einsum("btd,bsd->bts", q, k) / math.sqrt(hs)
        scores = np.where(causal, scores, -np.inf)
        scores = scores - scores.max(axis=-1, keepdims=True)
        weights = np.exp(scores)
        weights /= weights.sum(axis=-1, keepdims=True)
        out[:, :, h * hs:(h + 1) * hs] = np.einsum("bts,bsd->btd", weights, v)
    return out


def forward(cfg, P, inputs, targets):
    """inputs, targets (B,T) ints -> (loss, {activation name: array}) in float64."""
    B, T = inputs.shape
    V, NH = cfg["V"], cfg["NH"]
    acts = {}
    x = P["wte"][inputs] + P["wpe"][np.arange(T)]
    acts["encoded"] = x
    for l in range(cfg["L"]):
        a = layernorm(x, P["ln1w"][l], P["ln1b"][l]); acts["ln1.%d" % l] = a
        qkv = a @ P["qkvw"][l].T + P["qkvb"][l]; acts["qkv.%d" % l] = qkv
        y = attention(qkv, NH); acts["atty.%d" % l] = y
        x = x + y @ P["attprojw"][l].T + P["attprojb"][l]; acts["residual2.%d" % l] = x
        a = layernorm(x, P["ln2w"][l], P["ln2b"][l]); acts["ln2.%d" % l] = a
        h = a @ P["fcw"][l].T + P["fcb"][l]; acts["fch.%d" % l] = h
        g = gelu(h); acts["fch_gelu.%d" % l] = g
        x = x + g @ P["fcprojw"][l].T + P["fcprojb"][l]; acts["residual3.%d" % l] = x
    lnf = layernorm(x, P["lnfw"], P["lnfb"]); acts["lnf"] = lnf
    logits = lnf @ P["wte"][:V].T; acts["logits"] = logits
    top = logits.max(axis=-1, keepdims=True)
    logsumexp = top[..., 0] + np.log(np.exp(logits - top).sum(axis=-1))
    losses = logsumexp - np.take_along_axis(logits, targets[..., None], axis=-1)[..., 0]
    acts["losses"] = losses
    acts["loss"] = losses.mean()
    return acts["loss"], acts


# ----------------------------------------------------------------------------- the backward pass
# Each function takes the gradient of the loss with respect to an op's output and returns the
# gradients with respect to its inputs, from the op's inputs (recomputing what it needs).


def layernorm_backward(dout, x, w, eps=1e-5):
    """-> dx, dw, db for out = xhat * w + b, xhat = (x - mean) * rstd."""
    mu = x.mean(axis=-1, keepdims=True)
    rstd = 1.0 / np.sqrt(((x - mu) ** 2).mean(axis=-1, keepdims=True) + eps)
    xhat = (x - mu) * rstd
    dxhat = dout * w
    dx = rstd * (dxhat - dxhat.mean(axis=-1, keepdims=True)
                 - xhat * (dxhat * xhat).mean(axis=-1, keepdims=True))
    return dx, (dout * xhat).sum(axis=(0, 1)), dout.sum(axis=(0, 1))


def linear_backward(dout, x, W):
    """-> dx, dW, db for out = x @ W.T + b; x (B,T,in), W (out,in)."""
    dW = dout.reshape(-1, dout.shape[-1]).T @ x.reshape(-1, x.shape[-1])
    return dout @ W, dW, dout.sum(axis=(0, 1))


def gelu_backward(dout, x):
    s = math.sqrt(2.0 / math.pi)
    t = np.tanh(s * (x + 0.044715 * x ** 3))
    return dout * (0.5 * (1.0 + t) + 0.5 * x * (1.0 - t * t) * s * (1.0 + 3 * 0.044715 * x * x))


def attention_backward(dy, qkv, NH):
    """-> dqkv (B,T,3C) for y = attention(qkv)."""
    B, T, C3 = qkv.shape
    C = C3 // 3
    hs = C // NH
    dqkv = np.zeros_like(qkv)
    causal = np.tril(np.ones((T, T), dtype=bool))
    for h in range(NH):
        cols = [slice(part * C + h * hs, part * C + (h + 1) * hs) for part in range(3)]
        q, k, v = (qkv[:, :, c] for c in cols)
        scores = np.where(causal, np.einsum("btd,bsd->bts", q, k) / math.sqrt(hs), -np.inf)
        weights = np.exp(scores - scores.max(axis=-1, keepdims=True))
        weights /= weights.sum(axis=-1, keepdims=True)
        dyh = dy[:, :, h * hs:(h + 1) * hs]
        dweights = np.einsum("btd,bsd->bts", dyh, v)
        dscores = weights * (dweights - (dweights * weights).sum(axis=-1, keepdims=True))
        dqkv[:, :, cols[0]] = np.einsum("bts,bsd->btd", dscores, k) / math.sqrt(hs)
        dqkv[:, :, cols[1]] = np.einsum("bts,btd->bsd", dscores, q) / math.sqrt(hs)
        dqkv[:, :, cols[2]] = np.einsum("bts,btd->bsd", weights, dyh)
    return dqkv


def forward_backward(cfg, P, inputs, targets):
    """-> (loss, {name: gradient of the mean loss}) with the forward's activations as the cache."""
    loss, acts = forward(cfg, P, inputs, targets)
    B, T = inputs.shape
    V = cfg["V"]
    G = {name: np.zeros_like(p) for name, p in P.items()}
    # mean cross-entropy: dlogits = (softmax - onehot) / (B*T)
    logits = acts["logits"]
    probs = np.exp(logits - logits.max(axis=-1, keepdims=True))
    probs /= probs.sum(axis=-1, keepdims=True)
    np.put_along_axis(probs, targets[..., None], np.take_along_axis(probs, targets[..., None], -1) - 1, -1)
    dlogits = probs / (B * T)
    # tied LM head, then the final layernorm
    G["wte"][:V] += dlogits.reshape(B * T, V).T @ acts["lnf"].reshape(B * T, -1)
    dx = dlogits @ P["wte"][:V]
    last = acts["residual3.%d" % (cfg["L"] - 1)]
    dx, G["lnfw"], G["lnfb"] = layernorm_backward(dx, last, P["lnfw"])
    for l in reversed(range(cfg["L"])):
        block_in = acts["residual3.%d" % (l - 1)] if l > 0 else acts["encoded"]
        # MLP: residual3 = residual2 + fcproj(gelu(fc(ln2(residual2))))
        dgelu, G["fcprojw"][l], G["fcprojb"][l] = linear_backward(dx, acts["fch_gelu.%d" % l], P["fcprojw"][l])
        dfch = gelu_backward(dgelu, acts["fch.%d" % l])
        dln2, G["fcw"][l], G["fcb"][l] = linear_backward(dfch, acts["ln2.%d" % l], P["fcw"][l])
        dres2, G["ln2w"][l], G["ln2b"][l] = layernorm_backward(dln2, acts["residual2.%d" % l], P["ln2w"][l])
        dx = dx + dres2
        # attention: residual2 = block_in + attproj(attention(qkv(ln1(block_in))))
        datty, G["attprojw"][l], G["attprojb"][l] = linear_backward(dx, acts["atty.%d" % l], P["attprojw"][l])
        dqkv = attention_backward(datty, acts["qkv.%d" % l], cfg["NH"])
        dln1, G["qkvw"][l], G["qkvb"][l] = linear_backward(dqkv, acts["ln1.%d" % l], P["qkvw"][l])
        din, G["ln1w"][l], G["ln1b"][l] = layernorm_backward(dln1, block_in, P["ln1w"][l])
        dx = dx + din
    np.add.at(G["wte"], inputs, dx)
    G["wpe"][:T] += dx.sum(axis=0)
    return loss, G


# ----------------------------------------------------------------------------- training


def lr_schedule(step, lr, warmup, final_frac, steps):
    """The documented schedule (docs/DUMP_FORMAT.md), written again from its text."""
    if step < warmup:
        return lr * (step + 1) / warmup
    ratio = (step - warmup) / max(1, steps - warmup)
    lo = lr * final_frac
    return lo + 0.5 * (lr - lo) * (1 + math.cos(math.pi * ratio))


DECAYED = {"wte", "wpe", "qkvw", "attprojw", "fcw", "fcprojw"}


def train(cfg, P, step_batches, lr, warmup, final_frac, wd, clip, order="decay-first"):
    """Replays the training loop; step_batches: [(inputs, targets)] per step.
    order: "decay-first" (the contract), or "decay-last" / "no-clip" to show a check can tell.
    -> (losses, grad norms before clipping, lrs, final parameters)."""
    P = {name: p.copy() for name, p in P.items()}
    m = {name: np.zeros_like(p) for name, p in P.items()}
    v = {name: np.zeros_like(p) for name, p in P.items()}
    losses, norms, lrs = [], [], []
    steps = len(step_batches)
    for step, (inputs, targets) in enumerate(step_batches):
        loss, G = forward_backward(cfg, P, inputs, targets)
        norm = math.sqrt(sum(float((g * g).sum()) for g in G.values()))
        scale = 1.0
        if clip > 0 and order != "no-clip" and clip / (norm + 1e-6) < 1.0:
            scale = clip / (norm + 1e-6)
        rate = lr_schedule(step, lr, warmup, final_frac, steps)
        t = step + 1
        for name, p in P.items():
            g = G[name] * scale
            m[name] = 0.9 * m[name] + 0.1 * g
            v[name] = 0.95 * v[name] + 0.05 * g * g
            update = rate * (m[name] / (1 - 0.9 ** t)) / (np.sqrt(v[name] / (1 - 0.95 ** t)) + 1e-8)
            decay = rate * wd if name in DECAYED else 0.0
            if order == "decay-last":
                P[name] = (p - update) * (1 - decay)
            else:
                P[name] = p - decay * p - update
        losses.append(loss)
        norms.append(norm)
        lrs.append(rate)
    return losses, norms, lrs, P
