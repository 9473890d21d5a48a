#!/usr/bin/env python3
"""Writes a copy of an llm.c token file with every id taken modulo V, for reference dumps of models
with a small vocabulary (the multi-rank tests use V=1024: the same sharding logic, ~50x less LM-head
work than GPT-2's 50257). Usage: remap_tokens.py IN OUT V"""
import os, struct, sys

def main():
    if len(sys.argv) != 4:
        sys.exit("usage: remap_tokens.py IN OUT V")
    src, dst, V = sys.argv[1], sys.argv[2], int(sys.argv[3])
    with open(src, "rb") as f:
        data = f.read()
    if len(data) < 1024:
        sys.exit(f"remap_tokens.py: error: {src}: too short for the 1024-byte header")
    magic, version, ntok = struct.unpack_from("<3i", data)
    if magic != 20240520 or version != 1 or len(data) != 1024 + 2 * ntok:
        sys.exit(f"remap_tokens.py: error: {src}: not an llm.c token file (magic/version/size)")
    ids = struct.unpack_from(f"<{ntok}H", data, 1024)
    tmp = dst + ".tmp"
    with open(tmp, "wb") as f:
        f.write(data[:1024])
        f.write(struct.pack(f"<{ntok}H", *(i % V for i in ids)))
    os.replace(tmp, dst)

if __name__ == "__main__":
    main()
