#!/usr/bin/env python3
"""Rewrites a plan file the way another dtc (or a damaged file) might have
written it, for bad-input tests, with protoc's Python code for plan.proto.

    edit_plan.py IN.dtcp OUT.dtcp --clear-roles

--clear-roles: every input's role back to MODEL_INPUT (a training plan whose
labels and optimizer scalars the runtime cannot recognise).
--servers N: a parameter-server plan's server count (its programs and ranks
unchanged). --block-rows R: its first server tensor a block of R rows.
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
    ap.add_argument("--servers", type=int)
    ap.add_argument("--block-rows", type=int)
    args = ap.parse_args()
    with tempfile.TemporaryDirectory() as tmp:
        pb = plan_proto.load(tmp)

        plan = pb.Plan()
        with open(args.input, "rb") as f:
            plan.ParseFromString(f.read())
        if args.clear_roles:
            for t in plan.inputs:
                t.role = pb.MODEL_INPUT
        if args.servers is not None:
            plan.training.parameter_servers.servers = args.servers
        if args.block_rows is not None:
            plan.training.parameter_servers.tensors[0].rows = args.block_rows
        with open(args.output, "wb") as f:
            f.write(plan.SerializeToString())


if __name__ == "__main__":
    sys.exit(main())
