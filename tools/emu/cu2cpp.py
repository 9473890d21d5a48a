#!/usr/bin/env python3
"""Rewrites CUDA's launch syntax for the CPU emulator: kernel<<<grid, block, smem, stream>>>(args)
becomes emu::launch(kernel, grid, block, smem, stream)(args). Usage: cu2cpp.py IN OUT [IN OUT ...]
(OUT may be IN: the file is rewritten in place; one process for a whole tree)"""
import re
import sys

LAUNCH = re.compile(r"([A-Za-z_][\w:]*(?:<[^<>;(){}]*>)?)\s*<<<(.*?)>>>", re.S)

def rewrite(src, dst):
    text = open(src, encoding="utf-8").read()
    text = LAUNCH.sub(lambda m: "emu::launch(%s, %s)" % (m.group(1), m.group(2)), text)
    open(dst, "w", encoding="utf-8").write(text)

def main():
    args = sys.argv[1:]
    if not args or len(args) % 2:
        sys.exit("usage: cu2cpp.py IN OUT [IN OUT ...]")
    for src, dst in zip(args[::2], args[1::2]):
        rewrite(src, dst)

if __name__ == "__main__":
    main()
