"""The sample a run prints, against an independent model: the NumPy GPT-2 (tests/reference) and the
sampler redone by hand.

The trainer loads the V=1024 reference model (tests/reference/dumps/small_model.bin), runs one step at learning
rate 0 (the model is unchanged: AdamW moves by lr times its update) and samples -g tokens after an
EOT with T = 8, so the window slides after 7 tokens. Without a tokenizer in its working directory it
prints token ids. For every printed token this script computes, in float64, the next-token
distribution of the NumPy forward over the same context (positions 0..pos-1 of the window; the
model is causal, so the EOTs after them do not matter), draws the coin the trainer's RNG gives
(xorshift*, seeded with seed ^ 0x5DEECE66D, written here with Python integers) and picks the first
token whose cumulative probability exceeds it. Every token must agree, on 1 rank and on 2 ranks
(stage 3: no rank holds the whole model), for three seeds; a sampler that reads the wrong position,
drops the context's last token, slides the window wrongly or draws its coin differently gives other
tokens within a few. The first token's distribution is printed with the margin between each coin
and the nearest cumulative boundary (float32 against float64 cannot flip a draw with a margin far
above 1e-6).

  /usr/bin/python3 tests/sample_oracle.py --binary ./train_gpt2_zero3
"""
import argparse
import os
import subprocess
import sys
import tempfile

import numpy as np

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "reference"))
import numpy_gpt2 as ref  # noqa: E402

M64 = (1 << 64) - 1
T, GEN, EOT = 8, 12, 50256


def coins(seed, n):
    s = seed ^ 0x5DEECE66D
    for _ in range(n):
        s ^= s >> 12
        s ^= (s << 25) & M64
        s ^= s >> 27
        yield (((s * 0x2545F4914F6CDD1D) & M64) >> 32 >> 8) / 16777216.0


def next_token_probs(cfg, P, context):
    window = np.full((1, T), EOT % cfg["V"], dtype=np.int64)
    window[0, :len(context)] = context
    _, acts = ref.forward(cfg, P, window, np.zeros((1, T), dtype=np.int64))
    logits = acts["logits"][0, len(context) - 1]
    e = np.exp(logits - logits.max())
    return e / e.sum()


def expected_sample(cfg, P, seed):
    context, tokens, margins, first = [EOT % cfg["V"]], [], [], None
    for coin in coins(seed, GEN):
        p = next_token_probs(cfg, P, context)
        cdf = np.cumsum(p)
        tok = int(np.searchsorted(cdf, coin, side="right"))
        tok = min(tok, cfg["V"] - 1)
        margins.append(float(np.min(np.abs(cdf - coin))))
        if first is None:
            first = (p, coin, tok)
        tokens.append(tok)
        context = (context + [tok])[-T:] if len(context) == T else context + [tok]
    return tokens, min(margins), first


def printed_sample(binary, ranks, seed, root):
    cmd = [binary, "-e", f"{root}/tests/reference/dumps/small_model.bin", "-i", f"{root}/tests/reference/dumps/small_tokens.bin",
           "-j", f"{root}/tests/reference/dumps/small_tokens.bin", "-b", "1", "-t", str(T), "-x", "1", "-l", "0",
           "-v", "0", "-s", "1", "-g", str(GEN), "-z", "3", "-S", str(seed)]
    if ranks > 1:
        cmd = ["mpirun", "-np", str(ranks)] + cmd
    with tempfile.TemporaryDirectory() as cwd:   # no tokenizer here: the sample prints token ids
        out = subprocess.run(cmd, cwd=cwd, capture_output=True, text=True, timeout=120)
    if out.returncode != 0:
        sys.exit(f"sample oracle: {' '.join(cmd)} failed:\n{out.stderr[-2000:]}")
    lines = out.stdout.splitlines()
    at = lines.index("---- sample")
    return [int(t) for t in lines[at + 1].split()]


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--binary", default="./train_gpt2_zero3")
    args = ap.parse_args()
    root = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
    binary = os.path.abspath(args.binary)
    cfg, P = ref.read_model(f"{root}/tests/reference/dumps/small_model.bin")
    bad = 0
    for seed in (1337, 7, 2024):
        want, margin, (p, coin, tok) = expected_sample(cfg, P, seed)
        top = np.argsort(p)[::-1][:3]
        print(f"seed {seed}: first token's distribution (NumPy float64): "
              + ", ".join(f"p[{i}] = {p[i]:.5f}" for i in top)
              + f"; coin {coin:.6f} -> token {tok}; smallest coin-to-boundary margin {margin:.1e}")
        for ranks in (1, 2):
            got = printed_sample(binary, ranks, seed, root)
            ok = got == want
            bad += not ok
            print(f"  {ranks} rank{'s' if ranks > 1 else ' '}: printed {' '.join(map(str, got))}  "
                  f"{'= the reference' if ok else 'DIFFERS from the reference ' + ' '.join(map(str, want))}")
    if bad:
        sys.exit(f"sample oracle: {bad} samples differ from the NumPy reference")
    print("sample oracle: every printed token is the reference's draw")


if __name__ == "__main__":
    main()
