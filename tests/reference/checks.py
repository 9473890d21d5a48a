"""
Checks of tests/reference/gpt2_reference.py's outputs against independent computations, one subcommand each;
tests/test_reference.sh drives them. Every check prints what it measured and exits non-zero on a
mismatch.

  make-tokens OUT V N SEED [BAD_AT]   random token file (token BAD_AT set to V, for the bad-input test)
  forward MODEL TOKENS DUMP           NumPy forward vs the dump: activations, loss, data order, lr, norm
  finite-diff MODEL DUMP [NAMES]      central differences of the NumPy loss vs the dump's gradients
  train MODEL DUMP                    NumPy replay of every training step vs train_* and final.*
  init MODEL                          the random init has GPT-2's distribution
  zero-lnf MODEL_IN MODEL_OUT         copy of a model with lnfw = lnfb = 0
  zero-lnf-dump MODEL DUMP            the hand-checkable case: loss ln(V), zero logits, lnf grads
  to-bf16 MODEL_IN MODEL_OUT          version-5 (bf16) copy of an fp32 model file
  same-model A B                      two model files hold the same values (A may be bf16)
  reader-summary DUMP C_OUTPUT        tests/unit/test_dump_reader.c's printout agrees with this reading
  corrupt DUMP OUTDIR                 writes corrupted copies OUTDIR/<case>.dump; prints case keyword
"""

import math
import os
import struct
import sys

import numpy as np

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import numpy_gpt2 as ng  # noqa: E402

failures = []


def check(ok, message):
    print(("ok    " if ok else "FAIL  ") + message)
    if not ok:
        failures.append(message)


def relative_error(got, want):
    """max |got - want| over max |want|: the error on the scale of the tensor."""
    got, want = np.asarray(got, dtype=np.float64), np.asarray(want, dtype=np.float64)
    scale = max(float(np.abs(want).max()) if want.size else 0.0, 1e-30)
    return float(np.abs(got - want).max()) / scale if want.size else 0.0


def batch(header, records, step):
    window = records["step_tokens"][step].astype(np.int64)
    B, T = header["B"], header["T"]
    return window[:-1].reshape(B, T), window[1:].reshape(B, T)


# ----------------------------------------------------------------------------- subcommands


def cmd_make_tokens(out, V, n, seed, bad_at=None):
    tokens = np.random.default_rng(int(seed)).integers(0, int(V), int(n))
    if bad_at is not None:
        tokens[int(bad_at)] = int(V)
    ng.write_tokens(out, tokens)


def cmd_forward(model_path, tokens_path, dump_path):
    cfg, P = ng.read_model(model_path)
    header, records, order = ng.read_dump(dump_path)
    B, T, S = header["B"], header["T"], header["nsteps"]
    for key in ("L", "C", "NH", "V", "Vp", "maxT"):
        check(header[key] == cfg[key], "header %s = %d matches the model file" % (key, header[key]))

    # data order: step s reads window (s mod W) of the token file, W = (ntok-1) // (B*T)
    tokens = ng.read_tokens(tokens_path)
    windows = (len(tokens) - 1) // (B * T)
    expected = np.stack([tokens[(s % windows) * B * T:(s % windows) * B * T + B * T + 1] for s in range(S)])
    check(records["step_tokens"].shape == (S, B * T + 1) and
          np.array_equal(records["step_tokens"], expected),
          "step_tokens follow the data order (W=%d windows, %d steps)" % (windows, S))
    inputs, targets = batch(header, records, 0)
    check(np.array_equal(records["inputs"], inputs) and np.array_equal(records["targets"], targets),
          "inputs/targets are step 0's window, targets shifted by one")

    # every activation against the NumPy forward
    loss, acts = ng.forward(cfg, P, inputs, targets)
    worst = 0.0
    for name, value in acts.items():
        got = records[name]
        if got.shape != np.shape(value):
            check(False, "%s has shape %s, NumPy %s" % (name, got.shape, np.shape(value)))
            continue
        err = relative_error(got, value)
        worst = max(worst, err)
        if err > 1e-6:
            check(False, "%s differs from NumPy: relative error %.2e" % (name, err))
    check(worst <= 1e-6, "all %d activations match NumPy (worst relative error %.2e)" % (len(acts), worst))
    check(abs(float(records["loss"]) - loss) <= 1e-6 * abs(loss),
          "loss %.9f matches NumPy %.9f" % (float(records["loss"]), loss))
    check(abs(float(records["train_losses"][0]) - float(records["loss"])) == 0.0,
          "train_losses[0] is the dumped loss")

    # the gradient norm is over all 16 tensors before clipping; the lr follows the schedule
    grads = [records["grad." + name].astype(np.float64) for name in P]
    norm = math.sqrt(sum(float((g * g).sum()) for g in grads))
    got_norm = float(records["train_grad_norms"][0])
    check(abs(got_norm - norm) <= 1e-6 * norm, "grad norm %.9f = |dumped grads| %.9f" % (got_norm, norm))
    check(all(records["grad." + name].shape == P[name].shape for name in P),
          "the 16 grad.* records have the parameter shapes")
    # every gradient entry against the NumPy backward pass
    _, G = ng.forward_backward(cfg, P, inputs, targets)
    errors = {name: relative_error(records["grad." + name], G[name]) for name in P}
    worst = max(errors, key=errors.get)
    check(errors[worst] <= 1e-6, "all 16 gradients match the NumPy backward (worst: %s, relative error %.2e)"
          % (worst, errors[worst]))
    check(not np.any(records["grad.wte"][cfg["V"]:]), "grad.wte padded rows are zero")
    lrs = [ng.lr_schedule(s, header["lr"], header["warmup"], header["final_frac"], S) for s in range(S)]
    check(relative_error(records["train_lrs"], lrs) <= 1e-6,
          "train_lrs follow the schedule (lr %g warmup %d final %g, %d steps)"
          % (header["lr"], header["warmup"], header["final_frac"], S))


def cmd_finite_diff(model_path, dump_path, only=None):
    """only: comma-separated tensor names to check (default all 16)."""
    cfg, P = ng.read_model(model_path)
    header, records, _ = ng.read_dump(dump_path)
    inputs, targets = batch(header, records, 0)
    rng = np.random.default_rng(0)
    h = 1e-5
    worst = 0.0
    checked = 0
    names = only.split(",") if only else list(P)
    for name in names:
        p = P[name]
        grad = records["grad." + name].astype(np.float64)
        picks = [np.unravel_index(np.argmax(np.abs(grad)), grad.shape),
                 tuple(int(rng.integers(0, n)) for n in grad.shape)]
        if name == "wte":  # a row the batch uses as input (both tied paths), and a padded row
            picks.append((int(inputs[0, 0]), int(rng.integers(0, cfg["C"]))))
            if cfg["Vp"] > cfg["V"]:
                picks.append((cfg["Vp"] - 1, 0))
        for index in picks:
            original = p[index]
            p[index] = original + h
            up, _ = ng.forward(cfg, P, inputs, targets)
            p[index] = original - h
            down, _ = ng.forward(cfg, P, inputs, targets)
            p[index] = original
            numeric = (up - down) / (2 * h)
            err = abs(numeric - grad[index])
            worst = max(worst, err / (1e-6 + abs(numeric)))
            checked += 1
            if err > 1e-8 + 1e-5 * abs(numeric):
                check(False, "grad.%s%s: dump %.9e, finite difference %.9e" % (name, index, grad[index], numeric))
    check(worst <= 1e-4 or not failures,
          "%d gradient entries match central differences (worst error %.2e relative to 1e-6 + |g|)"
          % (checked, worst))


def cmd_train(model_path, dump_path):
    """Replays all training steps in NumPy (its own backward and AdamW) from the model file and the
    dumped step_tokens; compares every step's loss, grad norm and lr, and the final parameters.
    Then shows the comparison is sharp enough to see a wrong update order or missing clipping."""
    cfg, P = ng.read_model(model_path)
    header, records, _ = ng.read_dump(dump_path)
    S = header["nsteps"]
    batches = [batch(header, records, s) for s in range(S)]
    hyper = dict(lr=header["lr"], warmup=header["warmup"], final_frac=header["final_frac"],
                 wd=header["weight_decay"], clip=header["grad_clip"])
    losses, norms, lrs, final = ng.train(cfg, P, batches, **hyper)
    check(relative_error(records["train_losses"], losses) <= 2e-7,
          "%d train losses match the NumPy replay (relative error %.2e; last %.6f)"
          % (S, relative_error(records["train_losses"], losses), losses[-1]))
    check(relative_error(records["train_grad_norms"], norms) <= 1e-6,
          "%d grad norms match (relative error %.2e)" % (S, relative_error(records["train_grad_norms"], norms)))
    check(relative_error(records["train_lrs"], lrs) <= 1e-6, "%d learning rates match" % S)
    errors = {name: relative_error(records["final." + name], final[name]) for name in P}
    worst = max(errors, key=errors.get)
    check(errors[worst] <= 1e-6, "final parameters match after %d steps (worst: %s, relative error %.2e)"
          % (S, worst, errors[worst]))
    clipped = [s for s in range(S) if hyper["clip"] > 0 and norms[s] > hyper["clip"]]
    variants = []
    if hyper["lr"] * hyper["wd"] >= 1e-2:  # a large lr*wd makes the order of decay and Adam visible
        variants.append("decay-last")
    if clipped and S > 1:                  # Adam's first step is scale-free: clipping shows from step 2
        variants.append("no-clip")
    for order in variants:
        _, _, _, other = ng.train(cfg, P, batches, order=order, **hyper)
        err = max(relative_error(records["final." + name], other[name]) for name in P)
        check(err > 1e-4, "a '%s' replay is told apart (final parameters differ by %.2e)" % (order, err))


def cmd_init(model_path):
    """The random init's distribution: N(0, 0.02) matrices and embeddings, N(0, 0.02/sqrt(2L))
    residual projections, zero biases and padded wte rows, layernorm weights 1."""
    cfg, P = ng.read_model(model_path)
    residual = 0.02 / math.sqrt(2 * cfg["L"])
    stds = {"wte": 0.02, "wpe": 0.02, "qkvw": 0.02, "fcw": 0.02, "attprojw": residual, "fcprojw": residual}
    for name, want in stds.items():
        values = P[name][:cfg["V"]] if name == "wte" else P[name]
        got = values.std()
        check(abs(got / want - 1) < 0.05 and abs(values.mean()) < 0.1 * want,
              "%s ~ N(0, %.5f): mean %.1e std %.5f (%d values)" % (name, want, values.mean(), got, values.size))
    check(not P["wte"][cfg["V"]:].any(), "wte rows V..Vp-1 are zero")
    ones = [name for name in ("ln1w", "ln2w", "lnfw") if not np.all(P[name] == 1)]
    zeros = [name for name in ("ln1b", "ln2b", "lnfb", "qkvb", "attprojb", "fcb", "fcprojb") if P[name].any()]
    check(not ones and not zeros, "layernorm weights are 1, biases 0 %s" % ((ones + zeros) or ""))


def cmd_zero_lnf(model_in, model_out):
    cfg, P = ng.read_model(model_in)
    P["lnfw"][:] = 0.0
    P["lnfb"][:] = 0.0
    ng.write_model(model_out, cfg, P)


def cmd_zero_lnf_dump(model_path, dump_path):
    """With lnfw = lnfb = 0 the final layernorm outputs 0, so every logit is 0, the softmax is
    uniform and the loss is ln(V) exactly. Gradients stop at the final layernorm (it multiplies by
    lnfw = 0), so only lnfw and lnfb get any: with dlnf = (mean_v wte[v] - wte[target]) / (B*T),
    grad.lnfb = sum over positions of dlnf, grad.lnfw = sum of dlnf * xhat (the normalized input)."""
    cfg, P = ng.read_model(model_path)
    header, records, _ = ng.read_dump(dump_path)
    V, BT = cfg["V"], header["B"] * header["T"]
    loss = float(records["loss"])
    check(abs(loss - math.log(V)) <= 1e-6, "loss %.9f = ln(V=%d) = %.9f" % (loss, V, math.log(V)))
    check(not np.any(records["logits"]), "every logit is exactly 0")
    nonzero = [name for name in P if name not in ("lnfw", "lnfb") and np.any(records["grad." + name])]
    check(not nonzero, "every gradient but lnfw/lnfb is exactly 0 %s" % (nonzero or ""))
    inputs, targets = batch(header, records, 0)
    _, acts = ng.forward(cfg, P, inputs, targets)
    x = acts["residual3.%d" % (cfg["L"] - 1)]
    xhat = ng.layernorm(x, np.ones(cfg["C"]), np.zeros(cfg["C"]))
    wte = P["wte"][:V]
    dlnf = (wte.mean(axis=0) - wte[targets]) / BT  # (B,T,C)
    want_b = dlnf.sum(axis=(0, 1))
    want_w = (dlnf * xhat).sum(axis=(0, 1))
    err_b = relative_error(records["grad.lnfb"], want_b)
    err_w = relative_error(records["grad.lnfw"], want_w)
    check(err_b <= 1e-6, "grad.lnfb = sum (mean wte - wte[target])/BT (relative error %.2e)" % err_b)
    check(err_w <= 1e-6, "grad.lnfw = sum dlnf * xhat (relative error %.2e)" % err_w)


def cmd_to_bf16(model_in, model_out):
    cfg, P = ng.read_model(model_in)
    ng.write_model(model_out, cfg, P, version=5)


def cmd_same_model(path_a, path_b):
    cfg_a, A = ng.read_model(path_a)
    cfg_b, B = ng.read_model(path_b)
    check(cfg_a == cfg_b, "same shape %s" % cfg_a)
    check(all(np.array_equal(A[name], B[name]) for name in A), "same values in all 16 tensors")


def cmd_reader_summary(dump_path, c_output):
    header, records, order = ng.read_dump(dump_path)
    with open(c_output) as f:
        lines = [line.split() for line in f]
    head = lines[0]
    want = [header[k] for k in HEADER_ORDER]
    check(head[0] == "header" and [int(x) for x in head[1:]] == want, "C header fields %s" % head[1:])
    hyper = [float(np.float32(x)) for x in lines[1][1:]]
    check(hyper == [header[k] for k in ng.HYPER_FIELDS], "C hyper-parameters %s" % lines[1][1:])
    rows = lines[2:]
    check(len(rows) == len(order), "C read %d records, Python %d" % (len(rows), len(order)))
    mismatched = []
    for row, name in zip(rows, order):
        data = records[name]
        flat = data.astype(np.float64).ravel()
        dtype = 0 if data.dtype.kind == "f" else 1
        dims = list(data.shape) + [0] * (4 - data.ndim)
        meta_ok = (row[1] == name and [int(x) for x in row[2:8]] == [dtype, data.ndim] + dims
                   and int(row[8]) == flat.size)
        # C adds in order, NumPy pairwise: both within n*eps*sum|x| of the exact sum
        total, total_abs = flat.sum(), np.abs(flat).sum()
        tolerance = 1e-9 * total_abs + 1e-300
        sums_ok = abs(float(row[9]) - total) <= tolerance and abs(float(row[10]) - total_abs) <= tolerance
        ends_ok = flat.size == 0 or (float(row[11]) == flat[0] and float(row[12]) == flat[-1])
        if not (meta_ok and sums_ok and ends_ok):
            mismatched.append(name)
    check(not mismatched, "C and Python agree on every record's name, shape, sum, |sum|, first, last %s"
          % (mismatched or ""))


HEADER_ORDER = ["B", "T", "L", "C", "NH", "V", "Vp", "maxT", "nsteps", "num_records", "warmup",
                "seed", "compute_bits"]


def cmd_corrupt(dump_path, outdir):
    """Writes one corrupted copy per case; prints 'case keyword' lines: the reader's message for
    OUTDIR/case.dump must contain keyword."""
    raw = bytearray(open(dump_path, "rb").read())
    first = 1024                         # first record: name at +0, dtype +64, ndim +68, dims +72
    n0 = int(np.prod(struct.unpack("<4i", raw[first + 72:first + 88])[:struct.unpack("<i", raw[first + 68:first + 72])[0]]))
    second = first + 88 + 4 * n0
    cases = {}

    def case(name, keyword, data):
        with open(os.path.join(outdir, name + ".dump"), "wb") as f:
            f.write(bytes(data))
        cases[name] = keyword

    def patched(offset, fmt, *values):
        data = bytearray(raw)
        struct.pack_into(fmt, data, offset, *values)
        return data

    case("magic", "bad magic", patched(0, "<i", 12345))
    case("version", "version", patched(4, "<i", 2))
    case("empty", "too short", b"")
    case("truncated", "truncated", raw[:-10])
    case("trailing", "trailing", raw + b"\0")
    case("many_records", "truncated", patched(44, "<i", 2 ** 31 - 1))
    case("header_field", "invalid", patched(8, "<i", 0))  # B = 0
    case("dims_overflow", "overflow", patched(first + 68, "<5i", 4, *([2 ** 31 - 1] * 4)))
    case("dims_too_big", "truncated", patched(first + 68, "<5i", 1, 2 ** 31 - 1, 0, 0, 0))
    case("dims_negative", "negative", patched(first + 72, "<i", -3))
    case("dims_unused", "unused", patched(first + 68, "<5i", 1, n0, 0, 7, 0))
    case("dtype", "dtype", patched(first + 64, "<i", 9))
    case("ndim", "ndim", patched(first + 68, "<i", 5))
    case("name_unterminated", "name", patched(first, "<64s", b"A" * 64))
    case("name_duplicate", "twice", patched(second, "<64s", bytes(raw[first:first + 64])))
    for name, keyword in cases.items():
        print("%s %s" % (name, keyword))


COMMANDS = {
    "make-tokens": cmd_make_tokens, "forward": cmd_forward, "finite-diff": cmd_finite_diff,
    "train": cmd_train, "zero-lnf": cmd_zero_lnf, "zero-lnf-dump": cmd_zero_lnf_dump,
    "init": cmd_init, "to-bf16": cmd_to_bf16, "same-model": cmd_same_model, "reader-summary": cmd_reader_summary,
    "corrupt": cmd_corrupt,
}

if __name__ == "__main__":
    if len(sys.argv) < 2 or sys.argv[1] not in COMMANDS:
        sys.exit("usage: checks.py {%s} ARGS..." % "|".join(COMMANDS))
    COMMANDS[sys.argv[1]](*sys.argv[2:])
    if failures:
        print("%d check(s) failed" % len(failures))
        sys.exit(1)
