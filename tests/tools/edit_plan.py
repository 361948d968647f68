#!/usr/bin/env python3
"""Rewrites a plan file the way another dtc (or a damaged file) might have
written it, for bad-input tests, with protoc's Python code for plan.proto.

    edit_plan.py IN.dtcp OUT.dtcp --clear-roles

--clear-roles: every input's role back to MODEL_INPUT (a training plan whose
labels and optimizer scalars the runtime cannot recognise).
"""
import argparse
import sys
import tempfile

import plan_proto


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("input")
    ap.add_argument("output")
    ap.add_argument("--clear-roles", action="store_true")
    args = ap.parse_args()
    with tempfile.TemporaryDirectory() as tmp:
        pb = plan_proto.load(tmp)

        plan = pb.Plan()
        with open(args.input, "rb") as f:
            plan.ParseFromString(f.read())
        if args.clear_roles:
            for t in plan.inputs:
                t.role = pb.MODEL_INPUT
        with open(args.output, "wb") as f:
            f.write(plan.SerializeToString())


if __name__ == "__main__":
    sys.exit(main())
