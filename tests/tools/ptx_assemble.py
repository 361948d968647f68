#!/usr/bin/env python3
"""Assembles every PTX text in an MLIR file (dtc-kernels-to-ptx's `dtc.ptx`
attributes: `sm_80 = "..."`), or every NAME.<chip>.ptx file of a folder
(`dtc plan PLAN --ptx DIR`), with ptxas for its chip.

    python3 tests/tools/ptx_assemble.py --ptxas PTXAS FILE.mlir|DIR

Prints `assembled N kernels: sm_80 N, sm_90 N` and exits 0, or names the
kernel ptxas refused (its message) and exits 1. No file: exit 1 too.
"""
import argparse
import collections
import os
import re
import subprocess
import sys
import tempfile


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--ptxas", required=True)
    ap.add_argument("mlir")
    args = ap.parse_args()
    if os.path.isdir(args.mlir):
        texts = [(re.search(r"\.(sm_[0-9]+)\.ptx$", name).group(1),
                  open(os.path.join(args.mlir, name)).read())
                 for name in sorted(os.listdir(args.mlir)) if name.endswith(".ptx")]
    else:
        text = open(args.mlir).read()
        texts = [(m.group(1), re.sub(r"\\([0-9A-Fa-f]{2})", lambda e: chr(int(e.group(1), 16)),
                                     m.group(2)))
                 for m in re.finditer(r'(sm_[0-9]+) = "((?:[^"\\]|\\.)*)"', text)]
    found = collections.Counter()
    with tempfile.TemporaryDirectory() as tmp:
        for i, (chip, ptx) in enumerate(texts):
            path = os.path.join(tmp, f"k{i}.ptx")
            open(path, "w").write(ptx.rstrip("\0") + "\n")
            run = subprocess.run([args.ptxas, f"-arch={chip}", path, "-o", path + ".cubin"],
                                 capture_output=True, text=True)
            if run.returncode != 0:
                entry = re.search(r"\.entry\s+(\w+)", ptx)
                sys.exit(f"ptxas -arch={chip} refused {entry.group(1) if entry else 'a kernel'}: "
                         f"{run.stderr.strip()}")
            found[chip] += 1
    if not found:
        sys.exit("no PTX in " + args.mlir)
    print(f"assembled {sum(found.values())} kernels: " +
          ", ".join(f"{chip} {n}" for chip, n in sorted(found.items())))


if __name__ == "__main__":
    main()
