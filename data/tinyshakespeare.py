"""
Downloads tinyshakespeare and GPT-2's BPE vocabulary, tokenizes the text with GPT-2's tokenizer,
and writes it in llm.c's data format, so llm.c and this project read the same files:

    DIR/tiny_shakespeare_val.bin     the first 32,768 tokens
    DIR/tiny_shakespeare_train.bin   the rest (305,260 tokens for the canonical input)
    DIR/gpt2_tokenizer.bin           GPT-2's 50,257 tokens as bytes, for decoding samples in C

Usage (runs under /usr/bin/python3; needs only the standard library, and `regex` if installed):
    /usr/bin/python3 data/tinyshakespeare.py                      # download what is missing
    /usr/bin/python3 data/tinyshakespeare.py --input ../shared/data/tinyshakespeare/input.txt \
                                             --vocab ../shared/data/gpt2     # offline (CI)

Options: --input FILE (a local text instead of the download), --vocab DIR (a folder holding
encoder.json and vocab.bpe), --out DIR (default data/tinyshakespeare), --encoder auto|tiktoken|own
(auto: tiktoken when it imports, else data/gpt2_bpe.py; both give the same tokens).

Local copies without flags: before downloading, the script looks in a cache folder laid out as
    CACHE/tinyshakespeare/input.txt   CACHE/gpt2/encoder.json   CACHE/gpt2/vocab.bpe
namely $ZERO3_DATA_CACHE when set, else ~/.cache/gpt2-zero3 (${XDG_CACHE_HOME}/gpt2-zero3). A
cached file is used only when its sha256 is the published one; it is copied into --out, where the
download would have gone, so later runs (and the tests) find it there.

Document convention (llm.c's dev/data/tinyshakespeare.py): each "\n\n"-separated section of the
text is one document; every document is preceded by the end-of-text token 50256, and keeps its
trailing "\n\n" (the last document has none, since the text does not end in a blank line).

Formats:
    tokens:    256 int32 header (magic 20240520, version 1, ntok), then ntok uint16, little-endian
    tokenizer: 256 uint32 header (magic 20240328, version 2, vocab size, EOT id), then for each
               token id: one uint8 length and that many raw bytes

Every failure prints one line on stderr and exits 1; outputs are written under temporary names
and renamed only once all three are complete, so a failed run leaves no partial file.
"""

import argparse
import array
import os
import struct
import sys
import time
import urllib.request

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from gpt2_bpe import (EOT_ID, EOT_TEXT, GPT2_FILES_SHA256, GPT2_SPLIT_PATTERN,  # noqa: E402
                      GPT2_VOCAB_SIZE, GPT2BPE, VocabError, sha256_of_file)

TEXT_URL = "https://raw.githubusercontent.com/karpathy/char-rnn/master/data/tinyshakespeare/input.txt"
VOCAB_URLS = {
    "encoder.json": "https://openaipublic.blob.core.windows.net/gpt-2/models/124M/encoder.json",
    "vocab.bpe": "https://openaipublic.blob.core.windows.net/gpt-2/models/124M/vocab.bpe",
}
# The canonical text (1,115,394 bytes) and the split llm.c gets from it with tiktoken.
CANONICAL_TEXT_SHA256 = "86c4e6aa9db7c042ec79f339dcb96d42b0075e16b8fc2e86bf0ca57e2dc565ed"
CANONICAL_VAL_TOKENS = 32768
CANONICAL_TRAIN_TOKENS = 305260

VAL_TOKENS = 32768  # the first 32,768 tokens (~10%) are the validation split, as in llm.c

TOKENS_MAGIC, TOKENS_VERSION = 20240520, 1
TOKENIZER_MAGIC, TOKENIZER_VERSION = 20240328, 2
HEADER_WORDS = 256

REPO_ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
DEFAULT_OUT = os.path.join(REPO_ROOT, "data", "tinyshakespeare")


class DataError(Exception):
    """A bad input, download or output; the message is the one line the user sees."""


# ----------------------------------------------------------------------------- files and downloads

def download(url, dest, want_sha256):
    """Fetches url into dest atomically and only if its sha256 is want_sha256: a failed,
    interrupted or wrong download leaves nothing at dest."""
    tmp = f"{dest}.tmp{os.getpid()}"
    print(f"downloading {url} to {dest}")
    try:
        with urllib.request.urlopen(url, timeout=60) as response, open(tmp, "wb") as f:
            while True:
                chunk = response.read(1 << 20)
                if not chunk:
                    break
                f.write(chunk)
        got_sha256 = sha256_of_file(tmp)
        if got_sha256 != want_sha256:
            remove_quietly(tmp)
            raise DataError(f"download of {url} has sha256 {got_sha256}, want {want_sha256} "
                            f"(incomplete or changed upstream); pass a good copy with --input/--vocab")
        os.replace(tmp, dest)
    except OSError as e:  # URLError, HTTPError, timeouts and disk errors are all OSErrors
        remove_quietly(tmp)
        raise DataError(f"could not download {url} to {dest} ({e}); "
                        f"pass local copies with --input FILE / --vocab DIR")


def remove_quietly(path):
    try:
        os.remove(path)
    except OSError:
        pass


def prepare_out_dir(out_dir):
    """Creates the output folder and proves it is writable before any work is done."""
    if os.path.exists(out_dir) and not os.path.isdir(out_dir):
        raise DataError(f"--out {out_dir}: exists and is not a folder")
    try:
        os.makedirs(out_dir, exist_ok=True)
        probe = os.path.join(out_dir, f".write_test{os.getpid()}")
        with open(probe, "wb"):
            pass
        os.remove(probe)
    except OSError as e:
        raise DataError(f"--out {out_dir}: cannot write there ({e.strerror or e})")


def cache_dirs():
    """The folders that may hold local copies of the downloads, in the order they are tried."""
    dirs = []
    if os.environ.get("ZERO3_DATA_CACHE"):
        dirs.append(os.environ["ZERO3_DATA_CACHE"])
    base = os.environ.get("XDG_CACHE_HOME") or os.path.join(os.path.expanduser("~"), ".cache")
    dirs.append(os.path.join(base, "gpt2-zero3"))
    return dirs


def copy_from_cache(relpath, dest, want_sha256):
    """Copies CACHE/relpath to dest (atomically) from the first cache folder whose copy has the
    published sha256. Returns True when it did."""
    for cache in cache_dirs():
        src = os.path.join(cache, relpath)
        if not os.path.isfile(src):
            continue
        if sha256_of_file(src) != want_sha256:
            print(f"ignoring {src}: its sha256 is not the published one", file=sys.stderr)
            continue
        tmp = f"{dest}.tmp{os.getpid()}"
        try:
            with open(src, "rb") as fin, open(tmp, "wb") as fout:
                fout.write(fin.read())
            os.replace(tmp, dest)
        except OSError as e:
            remove_quietly(tmp)
            raise DataError(f"cannot copy {src} to {dest} ({e.strerror or e})")
        print(f"using the local copy {src}")
        return True
    return False


def text_path_for(args):
    """The text to tokenize: --input as given, else the canonical file, downloaded once and cached."""
    if args.input is not None:
        return args.input
    cached = os.path.join(args.out, "tiny_shakespeare.txt")
    if not os.path.exists(cached) and not copy_from_cache(os.path.join("tinyshakespeare", "input.txt"), cached,
                                                          CANONICAL_TEXT_SHA256):
        download(TEXT_URL, cached, CANONICAL_TEXT_SHA256)
    elif sha256_of_file(cached) != CANONICAL_TEXT_SHA256:
        raise DataError(f"{cached}: does not match the canonical tinyshakespeare (sha256); "
                        f"delete it to download again")
    return cached


def vocab_dir_for(args):
    """The folder with encoder.json and vocab.bpe: --vocab as given, else downloaded into --out."""
    if args.vocab is not None:
        return args.vocab
    for name, url in VOCAB_URLS.items():
        path = os.path.join(args.out, name)
        if not os.path.exists(path) and not copy_from_cache(os.path.join("gpt2", name), path, GPT2_FILES_SHA256[name]):
            download(url, path, GPT2_FILES_SHA256[name])
    return args.out


def read_text(path):
    """path -> str. Reads bytes and decodes UTF-8 strictly, with no newline translation, so the
    tokens decode back to exactly the file's bytes."""
    try:
        with open(path, "rb") as f:
            raw = f.read()
    except OSError as e:
        raise DataError(f"--input {path}: cannot read ({e.strerror or e})")
    if len(raw) == 0:
        raise DataError(f"--input {path}: the file is empty")
    try:
        return raw.decode("utf-8")
    except UnicodeDecodeError as e:
        raise DataError(f"--input {path}: not valid UTF-8 at byte {e.start} of {len(raw)} "
                        f"(truncated or not a text file?)")


# ----------------------------------------------------------------------------- tokenizing

def make_encoder(choice, bpe):
    """Returns (name, encode) where encode(str) -> list of ids for ordinary text (no specials)."""
    if choice in ("auto", "tiktoken"):
        try:
            import tiktoken
        except ImportError:
            if choice == "tiktoken":
                raise DataError("--encoder tiktoken: the tiktoken module is not installed")
        else:
            # Build tiktoken's gpt2 encoding from the verified local files rather than
            # tiktoken.get_encoding("gpt2"), which would download them again. For GPT-2 a
            # token's merge rank is its id, so the ranks are just id -> bytes inverted.
            ranks = {bpe.token_bytes(i): i for i in range(GPT2_VOCAB_SIZE) if i != EOT_ID}
            try:
                enc = tiktoken.Encoding(name="gpt2_local", pat_str=GPT2_SPLIT_PATTERN,
                                        mergeable_ranks=ranks, special_tokens={EOT_TEXT: EOT_ID},
                                        explicit_n_vocab=GPT2_VOCAB_SIZE)
                return "tiktoken", enc.encode_ordinary
            except (TypeError, ValueError, AttributeError, AssertionError) as e:
                # an API change in some tiktoken version; our encoder gives the same tokens
                if choice == "tiktoken":
                    raise DataError(f"--encoder tiktoken: cannot build the gpt2 encoding ({e})")
                print(f"note: tiktoken's Encoding API did not fit ({e}); using data/gpt2_bpe.py")
    return f"data/gpt2_bpe.py (pre-tokenizer on `{bpe.splitter_backend}`)", bpe.encode


def tokenize_documents(text, encode):
    """
    text -> list of ids: for each "\n\n"-separated document, EOT then its tokens.
    Same as llm.c's encode("<|endoftext|>" + text.replace("\n\n", "\n\n<|endoftext|>")) with
    the special token allowed: tiktoken cuts the text at each special token and BPE-encodes the
    pieces between them separately, and those pieces are exactly these documents.
    One difference, on purpose: a literal "<|endoftext|>" inside the text stays text here,
    where llm.c would read it as a document break (tinyshakespeare has none).
    """
    documents = text.split("\n\n")
    tokens = []
    for i, doc in enumerate(documents):
        is_last = i == len(documents) - 1
        tokens.append(EOT_ID)
        tokens.extend(encode(doc if is_last else doc + "\n\n"))
    return tokens


def split_val_train(tokens, text_path, text_sha256):
    """Splits off the first VAL_TOKENS; on the canonical text, insists on llm.c's exact counts."""
    if len(tokens) <= VAL_TOKENS:
        raise DataError(f"--input {text_path}: gives only {len(tokens):,} tokens, need more than "
                        f"{VAL_TOKENS:,} (the validation split); is the file truncated?")
    val, train = tokens[:VAL_TOKENS], tokens[VAL_TOKENS:]
    if text_sha256 == CANONICAL_TEXT_SHA256 and \
            (len(val), len(train)) != (CANONICAL_VAL_TOKENS, CANONICAL_TRAIN_TOKENS):
        raise DataError(f"internal error: canonical tinyshakespeare gave {len(val):,} val + "
                        f"{len(train):,} train tokens, llm.c gets {CANONICAL_VAL_TOKENS:,} + "
                        f"{CANONICAL_TRAIN_TOKENS:,}; the tokenizer is wrong")
    return val, train


# ----------------------------------------------------------------------------- output formats

def little_endian(arr):
    """array -> bytes in little-endian order, whatever this machine's order is."""
    if sys.byteorder == "big":
        arr = array.array(arr.typecode, arr)
        arr.byteswap()
    return arr.tobytes()


def token_file_bytes(tokens):
    """tokens (list of ids < 65536) -> the llm.c token file: int32 header, then uint16 ids."""
    header = array.array("i", [0] * HEADER_WORDS)
    header[0], header[1], header[2] = TOKENS_MAGIC, TOKENS_VERSION, len(tokens)
    body = array.array("H", tokens)  # raises OverflowError if an id does not fit uint16
    return little_endian(header) + little_endian(body)


def tokenizer_file_bytes(bpe):
    """GPT-2's vocabulary -> the llm.c tokenizer file: uint32 header, then (uint8 len, bytes)."""
    header = array.array("I", [0] * HEADER_WORDS)
    header[0], header[1] = TOKENIZER_MAGIC, TOKENIZER_VERSION
    header[2], header[3] = GPT2_VOCAB_SIZE, EOT_ID
    parts = [little_endian(header)]
    for token_id in range(GPT2_VOCAB_SIZE):
        b = bpe.token_bytes(token_id)
        assert 0 < len(b) < 256, f"token {token_id} is {len(b)} bytes, does not fit a uint8 length"
        parts.append(struct.pack("<B", len(b)) + b)
    return b"".join(parts)


def write_all_or_nothing(files):
    """files: {path: bytes}. Writes each to a temporary name, then renames them all, so either
    every file is complete or (on any error) none of the temporaries is left behind. A file that
    already holds exactly these bytes is left alone (its time stamp too: make sees nothing new)."""
    temps = {}
    try:
        for path, data in files.items():
            if os.path.isfile(path) and os.path.getsize(path) == len(data):
                with open(path, "rb") as f:
                    if f.read() == data:
                        continue
            tmp = os.path.join(os.path.dirname(path), f".{os.path.basename(path)}.tmp{os.getpid()}")
            temps[path] = tmp
            with open(tmp, "wb") as f:
                f.write(data)
        for path, tmp in temps.items():
            os.replace(tmp, path)
    except OSError as e:
        for tmp in temps.values():
            remove_quietly(tmp)
        raise DataError(f"--out {os.path.dirname(path)}: cannot write {os.path.basename(path)} "
                        f"({e.strerror or e})")


# ----------------------------------------------------------------------------- main

def run(args):
    prepare_out_dir(args.out)
    text_path = text_path_for(args)
    vocab_dir = vocab_dir_for(args)
    try:
        bpe = GPT2BPE.from_dir(vocab_dir)
    except VocabError as e:
        raise DataError(f"--vocab {e}" if args.vocab is not None else str(e))
    except (OSError, ValueError) as e:
        raise DataError(f"--vocab {vocab_dir}: cannot load GPT-2's vocabulary ({e})")
    text = read_text(text_path)
    text_sha256 = sha256_of_file(text_path)

    encoder_name, encode = make_encoder(args.encoder, bpe)
    t0 = time.time()
    tokens = tokenize_documents(text, encode)
    seconds = time.time() - t0
    print(f"tokenized {len(text.encode('utf-8')):,} bytes into {len(tokens):,} tokens "
          f"in {seconds:.2f} s with {encoder_name}")
    val, train = split_val_train(tokens, text_path, text_sha256)

    out = {
        os.path.join(args.out, "tiny_shakespeare_val.bin"): token_file_bytes(val),
        os.path.join(args.out, "tiny_shakespeare_train.bin"): token_file_bytes(train),
        os.path.join(args.out, "gpt2_tokenizer.bin"): tokenizer_file_bytes(bpe),
    }
    write_all_or_nothing(out)
    names = list(out)
    print(f"writing {len(val):,} tokens to {names[0]}")
    print(f"writing {len(train):,} tokens to {names[1]}")
    print(f"writing {GPT2_VOCAB_SIZE:,} token strings to {names[2]}")


def main():
    parser = argparse.ArgumentParser(description="Tokenize tinyshakespeare with GPT-2 BPE "
                                     "into llm.c's data format.")
    parser.add_argument("--input", metavar="FILE", help="local UTF-8 text instead of downloading")
    parser.add_argument("--vocab", metavar="DIR", help="folder with GPT-2's encoder.json, vocab.bpe")
    parser.add_argument("--out", metavar="DIR", default=DEFAULT_OUT,
                        help="output folder (default: data/tinyshakespeare)")
    parser.add_argument("--encoder", choices=["auto", "tiktoken", "own"], default="auto",
                        help="auto: tiktoken if installed, else data/gpt2_bpe.py")
    args = parser.parse_args()
    try:
        run(args)
    except DataError as e:
        print(f"tinyshakespeare.py: error: {e}", file=sys.stderr)
        sys.exit(1)


if __name__ == "__main__":
    main()
