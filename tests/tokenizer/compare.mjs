// Independent check of the project's GPT-2 tokenization against js-tiktoken (a separate
// implementation with its own copy of GPT-2's ranks), used by tests/test_tokenizer.sh.
//
//   node compare.mjs --text input.txt --ours ids.txt [--dir data/tinyshakespeare]
//
//   --ours  our plain encoding of the whole text, one id per line (data/gpt2_bpe.py's output)
//   --dir   the folder data/tinyshakespeare.py wrote: the val/train token files and the tokenizer
//           (without --dir only check 1 runs: used for the Unicode stress text)
//
// Checks, each printing one line, and the first mismatch when there is one:
//   1. plain encoding of the whole text, token for token
//   2. the val and train .bin files (header and tokens) against llm.c's recipe, rebuilt here:
//      encode("<|endoftext|>" + text with "\n\n" -> "\n\n<|endoftext|>"), special allowed,
//      first 32,768 tokens val, the rest train
//   3. gpt2_tokenizer.bin: header, and every token's bytes against js-tiktoken's table
// Exit status 0 when all agree, 1 otherwise, 2 on bad arguments or unreadable files.

import fs from "node:fs";
import { Tiktoken } from "js-tiktoken/lite";
import gpt2 from "js-tiktoken/ranks/gpt2";

const VAL_TOKENS = 32768;
const EOT = "<|endoftext|>";
const EOT_ID = 50256;
const VOCAB = 50257;

function parseArgs(argv) {
  const args = {};
  for (let i = 0; i < argv.length; i += 2) {
    const key = argv[i].replace(/^--/, "");
    if (!["text", "ours", "dir"].includes(key) || i + 1 >= argv.length) {
      console.error(`compare.mjs: bad argument ${argv[i]}; usage: --text FILE --ours FILE [--dir DIR]`);
      process.exit(2);
    }
    args[key] = argv[i + 1];
  }
  for (const key of ["text", "ours"]) {
    if (!args[key]) {
      console.error(`compare.mjs: missing --${key}`);
      process.exit(2);
    }
  }
  return args;
}

function readOrDie(path) {
  try {
    return fs.readFileSync(path);
  } catch (e) {
    console.error(`compare.mjs: cannot read ${path}: ${e.message}`);
    process.exit(2);
  }
}

// a: ours, b: reference (arrays of ids). Returns null when equal, else a one-line description.
function firstMismatch(a, b, enc) {
  const n = Math.min(a.length, b.length);
  for (let i = 0; i < n; i++) {
    if (a[i] !== b[i]) {
      const show = (id) => JSON.stringify(enc.decode([id]));
      const from = Math.max(0, i - 5);
      const context = JSON.stringify(enc.decode(b.slice(from, i)));
      return `first mismatch at token ${i} (after ${context}): ours ${a[i]} ${show(a[i])}, ` +
             `js-tiktoken ${b[i]} ${show(b[i])}`;
    }
  }
  if (a.length !== b.length) {
    return `same first ${n} tokens, but ours has ${a.length} tokens and js-tiktoken ${b.length}`;
  }
  return null;
}

// llm.c token file -> { error } or { tokens } (header: 256 int32: magic, version, ntok)
function readTokenFile(path) {
  const buf = readOrDie(path);
  if (buf.length < 1024) return { error: `${path}: ${buf.length} bytes, shorter than the header` };
  const magic = buf.readInt32LE(0), version = buf.readInt32LE(4), ntok = buf.readInt32LE(8);
  if (magic !== 20240520 || version !== 1) {
    return { error: `${path}: header magic ${magic} version ${version}, want 20240520 version 1` };
  }
  if (buf.length !== 1024 + 2 * ntok) {
    return { error: `${path}: ${buf.length} bytes, header says ${ntok} tokens (${1024 + 2 * ntok})` };
  }
  const tokens = new Array(ntok);
  for (let i = 0; i < ntok; i++) tokens[i] = buf.readUInt16LE(1024 + 2 * i);
  return { tokens };
}

// llm.c tokenizer file vs js-tiktoken's id -> bytes table. Returns null or a description.
function checkTokenizerFile(path, enc) {
  const buf = readOrDie(path);
  if (buf.length < 1024) return `${path}: shorter than the header`;
  const [magic, version, vocab, eot] = [0, 4, 8, 12].map((o) => buf.readUInt32LE(o));
  if (magic !== 20240328 || version !== 2 || vocab !== VOCAB || eot !== EOT_ID) {
    return `${path}: header ${magic} ${version} ${vocab} ${eot}, want 20240328 2 ${VOCAB} ${EOT_ID}`;
  }
  // js-tiktoken keeps rank -> bytes in textMap and special id -> bytes in inverseSpecialTokens
  // (internal fields of the pinned version; their absence is reported, not silently passed)
  if (!(enc.textMap instanceof Map) || !enc.inverseSpecialTokens) {
    return "js-tiktoken no longer exposes textMap/inverseSpecialTokens; update this check";
  }
  let offset = 1024;
  for (let id = 0; id < VOCAB; id++) {
    if (offset >= buf.length) return `${path}: ends before token ${id}`;
    const len = buf[offset];
    const ours = buf.subarray(offset + 1, offset + 1 + len);
    const ref = enc.textMap.get(id) ?? enc.inverseSpecialTokens[id];
    if (ours.length !== len || !ref || Buffer.compare(ours, Buffer.from(ref)) !== 0) {
      return `${path}: token ${id} is ${JSON.stringify([...ours])}, ` +
             `js-tiktoken has ${JSON.stringify(ref ? [...ref] : null)}`;
    }
    offset += 1 + len;
  }
  if (offset !== buf.length) return `${path}: ${buf.length - offset} trailing bytes after the last token`;
  return null;
}

function main() {
  const args = parseArgs(process.argv.slice(2));
  const enc = new Tiktoken(gpt2);
  const text = readOrDie(args.text).toString("utf8");
  const ours = readOrDie(args.ours).toString("utf8").split("\n").filter((l) => l !== "").map(Number);
  let ok = true;
  const report = (name, problem) => {
    if (problem) ok = false;
    console.log(`${problem ? "FAIL" : "ok  "} ${name}${problem ? ": " + problem : ""}`);
  };

  // 1. plain encoding: special-token text (if any) counts as ordinary text, as in data/gpt2_bpe.py
  let t0 = Date.now();
  const plain = enc.encode(text, [], []);
  const plainMs = Date.now() - t0;
  report(`plain encoding, ${plain.length} tokens (js-tiktoken ${plainMs} ms)`,
         firstMismatch(ours, plain, enc));

  if (args.dir === undefined) process.exit(ok ? 0 : 1);

  // 2. llm.c's recipe, written the way llm.c writes it, against our .bin files
  t0 = Date.now();
  const docs = enc.encode(EOT + text.replaceAll("\n\n", "\n\n" + EOT), "all");
  const docsMs = Date.now() - t0;
  const splits = { val: docs.slice(0, VAL_TOKENS), train: docs.slice(VAL_TOKENS) };
  for (const [split, ref] of Object.entries(splits)) {
    const path = `${args.dir}/tiny_shakespeare_${split}.bin`;
    const file = readTokenFile(path);
    report(`${split} .bin, ${ref.length} tokens (js-tiktoken ${docsMs} ms for both)`,
           file.error ?? firstMismatch(file.tokens, ref, enc));
  }

  // 3. the decoding table
  report(`gpt2_tokenizer.bin, ${VOCAB} tokens`,
         checkTokenizerFile(`${args.dir}/gpt2_tokenizer.bin`, enc));

  process.exit(ok ? 0 : 1);
}

main();
