// RUN: %dtc-opt %s --pass-pipeline="builtin.module(dtc-build-training-step{loss=mse optimizer=sgd momentum=0 model-outputs=false micro-batches=2},func.func(canonicalize,cse),dtc-sharding-search{devices=2 pp=0 stage-cuts=flops},dtc-spmd-partition,func.func(dtc-accumulate-gradients),dtc-pipeline-split{stages=0})" | FileCheck %s

// stage-cuts=flops: the cost model would cut after the second matmul,
// where no tied weight crosses (stage_cuts.mlir tests its cuts).

// One weight read by both layers (tied, as a GPT-2's embedding and head
// are): it lives on the stage of its earliest reader, which sends it to
// the other stage in the forward of each micro-batch; the other stage's
// part of its gradient comes back in the backward, and stage 0 sums,
// accumulates and applies it (its update is stage 0's alone).

// CHECK-LABEL: module attributes {dtc.cluster = {{.*}}, dtc.pipeline = {micro_batches = 2 : i64, schedule = "1f1b", stages = 2 : i64, virtual_stages = 1 : i64}}
// CHECK: func.func @stage0(
// CHECK-SAME: dtc.updates = "w"
// CHECK: %[[W:.*]] = graph.parameter "w" : tensor<8x8xf32>
// CHECK: graph.send %[[W]] to stage 1 {dtc.pipeline_forward} : tensor<8x8xf32>
// CHECK: graph.recv from stage 1 : tensor<8x8xf32>
// CHECK: func.func @stage1(
// CHECK-NOT: dtc.updates = "w"
// CHECK-NOT: graph.parameter "w"
// CHECK: graph.recv from stage 0 {dtc.pipeline_forward} : tensor<8x8xf32>
// CHECK: graph.send %{{.*}} to stage 0 : tensor<8x8xf32>
func.func @main(%x: tensor<4x8xf32> {graph.name = "x"}) -> (tensor<4x8xf32> {graph.name = "y"}) {
  %w = graph.parameter "w" : tensor<8x8xf32>
  %a = graph.matmul %x, %w : (tensor<4x8xf32>, tensor<8x8xf32>) -> tensor<4x8xf32>
  %b = graph.tanh %a : (tensor<4x8xf32>) -> tensor<4x8xf32>
  %c = graph.matmul %b, %w : (tensor<4x8xf32>, tensor<8x8xf32>) -> tensor<4x8xf32>
  %d = graph.tanh %c : (tensor<4x8xf32>) -> tensor<4x8xf32>
  return %d : tensor<4x8xf32>
}
