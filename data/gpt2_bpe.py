"""
GPT-2's byte-level BPE tokenizer, written out from first principles (stdlib; `regex` if present).

This is the fallback that data/tinyshakespeare.py uses when tiktoken is not installed, and it
must give exactly the tokens tiktoken's `gpt2` encoding gives (tests/test_tokenizer.sh checks
it, token for token, against js-tiktoken on the whole of tinyshakespeare and on a Unicode
stress text, with the pre-tokenizer on `regex` and on the standard `re`).

How GPT-2 turns text into token ids:
  1. Pre-tokenize: a regex cuts the text into "words" (a letter run with its leading space, a
     digit run, a punctuation run, whitespace). BPE never merges across two words.
  2. Bytes to symbols: each word's UTF-8 bytes become printable unicode characters through a
     fixed one-to-one map (bytes_to_unicode), so the vocabulary can be stored as JSON strings.
  3. Merge: start from one symbol per byte; repeatedly take the adjacent pair whose merge has the
     lowest rank in vocab.bpe (learned earliest) and merge it everywhere in the word, until no
     adjacent pair has a merge.
  4. Look up: each final symbol string is a key of encoder.json, whose value is the token id.

Usage as a script (writes one token id per line to stdout; used by the tests):
    /usr/bin/python3 data/gpt2_bpe.py --vocab DIR FILE
"""

import hashlib
import json
import os
import sys
import unicodedata

# GPT-2's pre-tokenizer. \p{L} letters, \p{N} numbers; "\s+(?!\S)" takes a whitespace run but
# leaves its last space to start the next word, so " the" stays one word after several spaces.
GPT2_SPLIT_PATTERN = r"""'s|'t|'re|'ve|'m|'ll|'d| ?\p{L}+| ?\p{N}+| ?[^\s\p{L}\p{N}]+|\s+(?!\S)|\s+"""

# Unicode's White_Space property: what `regex` (and tiktoken) mean by \s. Python's own `re` \s is
# str.isspace(), which also takes U+001C..U+001F, so the fallback below spells the class out.
UNICODE_WHITE_SPACE = [(0x09, 0x0D), (0x20, 0x20), (0x85, 0x85), (0xA0, 0xA0), (0x1680, 0x1680),
                       (0x2000, 0x200A), (0x2028, 0x2029), (0x202F, 0x202F), (0x205F, 0x205F),
                       (0x3000, 0x3000)]

EOT_TEXT = "<|endoftext|>"
EOT_ID = 50256
GPT2_VOCAB_SIZE = 50257

# The two files of OpenAI's GPT-2 release (the same hashes tiktoken checks for `gpt2`).
GPT2_FILES_SHA256 = {
    "encoder.json": "196139668be63f3b5d6574427317ae82f612a97c5d1cdaf36ed2256dbf636783",
    "vocab.bpe": "1ce1664773c50f3e0cc8842619a93edc4624525b728b188a9e0be33b7726adc5",
}


class VocabError(Exception):
    """A vocabulary file that is missing, corrupt or not GPT-2's. The message names the file."""


def bytes_to_unicode():
    """
    Returns {byte value 0..255: one unicode character}, GPT-2's reversible byte map.
    Printable Latin-1 bytes map to themselves; the other 68 (control characters, space, ...)
    are moved to code points 256, 257, ... in byte order, so no symbol is whitespace or control.
    """
    printable = (list(range(ord("!"), ord("~") + 1)) +
                 list(range(ord("\xa1"), ord("\xac") + 1)) +
                 list(range(ord("\xae"), ord("\xff") + 1)))
    byte_to_char = {}
    next_free = 256
    for b in range(256):
        if b in printable:
            byte_to_char[b] = chr(b)
        else:
            byte_to_char[b] = chr(next_free)
            next_free += 1
    return byte_to_char


def code_point_ranges(is_member):
    """Returns [(first, last)] runs of the code points c for which is_member(chr(c)) holds."""
    ranges = []
    for c in range(0x110000):
        if is_member(chr(c)):
            if ranges and ranges[-1][1] == c - 1:
                ranges[-1] = (ranges[-1][0], c)
            else:
                ranges.append((c, c))
    return ranges


def class_body(ranges):
    """[(first, last)] -> the inside of a regex character class, e.g. "\\U00000041-\\U0000005a"."""
    return "".join(f"\\U{a:08x}-\\U{b:08x}" for a, b in ranges)


def compile_split_pattern():
    """
    Returns (backend name, compiled GPT-2 pre-tokenizer). Uses the `regex` module when it is
    installed; otherwise (some GPU machines only have PyTorch) the same pattern for the standard
    `re`, with \p{L}, \p{N} and \s written out as explicit classes from unicodedata. The two agree
    except on characters newer than Python's Unicode tables. GPT2_BPE_SPLITTER=re|regex forces one.
    """
    choice = os.environ.get("GPT2_BPE_SPLITTER", "auto")
    if choice != "re":
        try:
            import regex
            return "regex", regex.compile(GPT2_SPLIT_PATTERN)
        except ImportError:
            if choice == "regex":
                raise
    import re
    space = class_body(UNICODE_WHITE_SPACE)
    letter = class_body(code_point_ranges(lambda ch: unicodedata.category(ch)[0] == "L"))
    number = class_body(code_point_ranges(lambda ch: unicodedata.category(ch)[0] == "N"))
    pattern = (f"'s|'t|'re|'ve|'m|'ll|'d| ?[{letter}]+| ?[{number}]+| ?[^{space}{letter}{number}]+"
               f"|[{space}]+(?![^{space}])|[{space}]+")
    return "re", re.compile(pattern)


def sha256_of_file(path):
    h = hashlib.sha256()
    with open(path, "rb") as f:
        for chunk in iter(lambda: f.read(1 << 20), b""):
            h.update(chunk)
    return h.hexdigest()


def verify_gpt2_file(path):
    """Raises VocabError unless `path` exists and has the sha256 of GPT-2's file of that name."""
    name = os.path.basename(path)
    if not os.path.isfile(path):
        raise VocabError(f"{path}: missing (need GPT-2's {name})")
    got = sha256_of_file(path)
    want = GPT2_FILES_SHA256[name]
    if got != want:
        raise VocabError(f"{path}: sha256 {got} is not GPT-2's {name} ({want}); "
                         f"the file is corrupt, truncated or a different vocabulary")


class GPT2BPE:
    """GPT-2 byte-level BPE: encode text to ids (ordinary text, no special tokens), ids to bytes."""

    def __init__(self, encoder, merges):
        # encoder: {symbol string: token id}, 50,257 entries including "<|endoftext|>"
        # merges:  [(left symbol, right symbol)], in rank order (index = rank)
        self.encoder = encoder
        self.merge_rank = {pair: rank for rank, pair in enumerate(merges)}
        self.byte_to_char = bytes_to_unicode()
        self.char_to_byte = {c: b for b, c in self.byte_to_char.items()}
        self.splitter_backend, self.splitter = compile_split_pattern()
        self.word_cache = {}  # word (as symbols) -> its token ids; text repeats words a lot
        self.id_to_bytes = [b""] * len(encoder)
        for symbols, token_id in encoder.items():
            if token_id == EOT_ID:
                # the special token decodes to its literal text, as tiktoken's decode_bytes does
                self.id_to_bytes[token_id] = EOT_TEXT.encode("utf-8")
            else:
                self.id_to_bytes[token_id] = bytes(self.char_to_byte[c] for c in symbols)

    @classmethod
    def from_dir(cls, vocab_dir):
        """Loads DIR/encoder.json and DIR/vocab.bpe after checking both are GPT-2's (sha256)."""
        encoder_path = os.path.join(vocab_dir, "encoder.json")
        merges_path = os.path.join(vocab_dir, "vocab.bpe")
        verify_gpt2_file(encoder_path)
        verify_gpt2_file(merges_path)
        with open(encoder_path, "r", encoding="utf-8") as f:
            encoder = json.load(f)
        with open(merges_path, "r", encoding="utf-8") as f:
            lines = f.read().split("\n")
        # first line is "#version: 0.2", the last is empty; the rest are "left right"
        merges = [tuple(line.split(" ")) for line in lines[1:] if line]
        bpe = cls(encoder, merges)
        bpe.check_consistent()
        return bpe

    def check_consistent(self):
        """The hash already vouches for the files; this states what the code relies on."""
        assert len(self.encoder) == GPT2_VOCAB_SIZE
        assert sorted(self.encoder.values()) == list(range(GPT2_VOCAB_SIZE))
        assert self.encoder[EOT_TEXT] == EOT_ID
        assert len(self.merge_rank) == GPT2_VOCAB_SIZE - 256 - 1  # 256 bytes + merges + EOT

    def bpe_word(self, word):
        """
        word: one pre-tokenized word as a string of byte symbols (len >= 1).
        Returns the list of token ids for it, merging lowest-rank pairs first.
        """
        cached = self.word_cache.get(word)
        if cached is not None:
            return cached
        symbols = list(word)
        while len(symbols) > 1:
            # the adjacent pair that was learned first (lowest rank) merges next
            pairs = zip(symbols, symbols[1:])
            best = min(pairs, key=lambda p: self.merge_rank.get(p, float("inf")))
            if best not in self.merge_rank:
                break
            # merge every occurrence of that pair, left to right
            merged = []
            i = 0
            while i < len(symbols):
                if i + 1 < len(symbols) and (symbols[i], symbols[i + 1]) == best:
                    merged.append(symbols[i] + symbols[i + 1])
                    i += 2
                else:
                    merged.append(symbols[i])
                    i += 1
            symbols = merged
        ids = [self.encoder[s] for s in symbols]
        self.word_cache[word] = ids
        return ids

    def encode(self, text):
        """text (str) -> list of token ids. "<|endoftext|>" in text is ordinary text here."""
        ids = []
        for word in self.splitter.findall(text):
            symbols = "".join(self.byte_to_char[b] for b in word.encode("utf-8"))
            ids.extend(self.bpe_word(symbols))
        return ids

    def token_bytes(self, token_id):
        """The raw bytes of one token (a token can be part of a UTF-8 character)."""
        return self.id_to_bytes[token_id]

    def decode_bytes(self, ids):
        return b"".join(self.id_to_bytes[i] for i in ids)


def main(argv):
    import argparse
    parser = argparse.ArgumentParser(description="Encode a UTF-8 file with GPT-2 BPE; "
                                     "prints one token id per line.")
    parser.add_argument("--vocab", required=True, help="folder with encoder.json and vocab.bpe")
    parser.add_argument("file", help="UTF-8 text file to encode")
    args = parser.parse_args(argv)
    try:
        bpe = GPT2BPE.from_dir(args.vocab)
        with open(args.file, "rb") as f:
            text = f.read().decode("utf-8")
    except (VocabError, OSError, UnicodeDecodeError) as e:
        print(f"gpt2_bpe.py: error: {e}", file=sys.stderr)
        return 1
    sys.stdout.write("\n".join(map(str, bpe.encode(text))) + "\n")
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
