#!/usr/bin/env python3
"""Writes a hand-made two-stage pipeline plan (the compiler does not make
pipelines yet): on a mesh pp=2, rank 0 computes two micro-batches of
activations and sends each to rank 1 as soon as it has it; rank 1 receives
each and computes on it. Each stage's work per micro-batch is a kernel costed
at `--ms` milliseconds on an A100 (f32 matmul rate of the a100-80g preset).

    pipeline_plan.py OUT.dtcp [--ms 1]

Builds the plan with protoc's Python code for plan/plan.proto
(plan_proto.py), generated into a temporary folder.
"""
import argparse
import tempfile

import plan_proto


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("out")
    ap.add_argument("--ms", type=float, default=1.0)
    ap.add_argument("--true-costs", action="store_true",
                    help="cost each kernel as what it is (an elementwise pass over the "
                         "micro-batch) instead of --ms of A100 matmul")
    ap.add_argument("--drop-receive", action="store_true",
                    help="leave out rank 1's second receive (a plan that must be refused)")
    args = ap.parse_args()
    with tempfile.TemporaryDirectory() as tmp:
        pb = plan_proto.load(tmp)

        plan = pb.Plan()
        plan.format_version = 5
        plan.producer = "tests/tools/pipeline_plan.py"
        axis = plan.mesh.axes.add()
        axis.name, axis.size = "pp", 2
        shape = [1024, 1024]
        nbytes = 4 * shape[0] * shape[1]
        flops = args.ms * 1e-3 * 19.5e12 * 0.75
        for stage in range(2):
            plan.program_of_rank.append(stage)
            rank = plan.ranks.add()
            for b in range(4):  # two micro-batches in, two out
                buf = rank.buffers.add()
                buf.type.dtype = pb.F32
                buf.type.shape.extend(shape)
                buf.offset = b * nbytes
                buf.name = f"{'act' if b < 2 else 'out'}{b % 2}"
            rank.arena_bytes = 4 * nbytes

            def kernel(inputs, output):
                inst = rank.instructions.add()
                inst.inputs.extend(inputs)
                inst.outputs.append(output)
                e = inst.elementwise
                if inputs:
                    node = e.nodes.add()
                    node.op, node.dtype = pb.INPUT, pb.F32
                    node.args.append(0)
                    double = e.nodes.add()
                    double.op, double.dtype = pb.ADD, pb.F32
                    double.args.extend([0, 0])
                else:
                    node = e.nodes.add()
                    node.op, node.dtype, node.value = pb.CONSTANT, pb.F32, 1.0
                if args.true_costs:  # as the compiler costs an elementwise kernel
                    inst.cost.flops = shape[0] * shape[1]
                    inst.cost.bytes = (len(inputs) + 1) * nbytes
                    inst.cost.op_class = pb.OP_ELEMENTWISE
                else:
                    inst.cost.flops, inst.cost.bytes = flops, 2 * nbytes
                    inst.cost.op_class = pb.OP_MATMUL
                inst.cost.dtype = pb.F32

            for mb in range(2):
                if stage == 0:
                    kernel([], mb)
                    send = rank.instructions.add()
                    send.inputs.append(mb)
                    send.send.peer = 1
                elif not (args.drop_receive and mb == 1):
                    recv = rank.instructions.add()
                    recv.outputs.append(mb)
                    recv.recv.peer = 0
                if stage == 1:
                    kernel([mb], 2 + mb)
        with open(args.out, "wb") as f:
            f.write(plan.SerializeToString())


if __name__ == "__main__":
    main()
