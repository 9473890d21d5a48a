#!/usr/bin/env python3
"""Rewrites CUDA's launch syntax for the CPU emulator: kernel<<<grid, block, smem, stream>>>(args)
becomes emu::launch(kernel, grid, block, smem, stream)(args). Usage: cu2cpp.py IN OUT"""
import re
import sys

LAUNCH = re.compile(r"([A-Za-z_][\w:]*(?:<[^<>;(){}]*>)?)\s*<<<(.*?)>>>", re.S)

def main():
    src, dst = sys.argv[1], sys.argv[2]
    text = open(src, encoding="utf-8").read()
    text = LAUNCH.sub(lambda m: "emu::launch(%s, %s)" % (m.group(1), m.group(2)), text)
    open(dst, "w", encoding="utf-8").write(text)

if __name__ == "__main__":
    main()
