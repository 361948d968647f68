#!/usr/bin/env python3
"""Turns ONNX textual syntax (onnx.parser) into a binary .onnx model.

Lit tests keep their model as readable text beside the RUN and CHECK lines;
lines starting with '#' (lit's) are dropped before parsing. With --no-check
the model is written even when onnx.checker rejects it (for bad-input tests).
"""
import argparse
import sys

import onnx
import onnx.parser


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("input")
    ap.add_argument("-o", "--output", required=True)
    ap.add_argument("--no-check", action="store_true")
    args = ap.parse_args()
    with open(args.input) as f:
        text = "".join(l for l in f if not l.lstrip().startswith("#"))
    model = onnx.parser.parse_model(text)
    if not args.no_check:
        onnx.checker.check_model(model)
    onnx.save(model, args.output)


if __name__ == "__main__":
    sys.exit(main())
