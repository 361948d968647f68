// RUN: %dtc-opt %s --pass-pipeline="builtin.module(dtc-build-training-step{loss=mse optimizer=sgd momentum=0 model-outputs=false micro-batches=2},func.func(canonicalize,cse,dtc-accumulate-gradients),dtc-pipeline-split{stages=2 schedule=gpipe})" | FileCheck %s
// RUN: not %dtc-opt %s --pass-pipeline="builtin.module(dtc-build-training-step{loss=mse micro-batches=2},dtc-pipeline-split{stages=8})" 2>&1 | FileCheck %s --check-prefix=TOO-MANY
// RUN: not %dtc-opt %s --pass-pipeline="builtin.module(dtc-pipeline-split{stages=2})" 2>&1 | FileCheck %s --check-prefix=INFERENCE
// RUN: not %dtc-opt %s --pass-pipeline="builtin.module(dtc-build-training-step{loss=mse},dtc-pipeline-split{stages=2 schedule=zigzag})" 2>&1 | FileCheck %s --check-prefix=SCHEDULE

// Two tanh layers trained with MSE over two micro-batches, cut into two
// stages between them (where the FLOPs even out).
// CHECK: module attributes {dtc.pipeline = {micro_batches = 2 : i64, schedule = "gpipe", stages = 2 : i64, virtual_stages = 1 : i64}}

// Stage 0: the first layer; its output goes to stage 1 in the forward and
// the gradient comes back in the backward. The weight's gradient reads the
// step input x, copied in the forward: by the time the backward runs, x
// holds a later micro-batch. The update runs once per step.
// CHECK-LABEL: func.func @stage0(
// CHECK-SAME: dtc.outputs = array<i64: 1, 3>
// CHECK-SAME: dtc.stage = 0
// CHECK: %[[X:.*]] = graph.copy %arg0 {dtc.pipeline_forward}
// CHECK: %[[W1:.*]] = graph.parameter "w1"
// CHECK: %[[A:.*]] = graph.matmul %arg0, %[[W1]] {dtc.pipeline_forward}
// CHECK-NEXT: %[[B:.*]] = graph.tanh %[[A]] {dtc.pipeline_forward}
// CHECK-NEXT: graph.send %[[B]] to stage 1 {dtc.pipeline_forward}
// CHECK-NEXT: %[[G:.*]] = graph.recv from stage 1 : tensor<4x8xf32>
// CHECK-NEXT: graph.matmul %[[X]], %[[G]] {dtc.weight_gradient, transpose_lhs = true}
// CHECK: graph.sub %[[W1]], %{{.*}} {dtc.once_per_step}
// CHECK-NOT: graph.send
// CHECK: return

// Stage 1: the second layer and the loss (result 0 of the step); the
// gradient of stage 0's tanh is made here, from the cut value it already
// has, and sent back.
// CHECK-LABEL: func.func @stage1(
// CHECK-SAME: dtc.outputs = array<i64: 0, 2, 4>
// CHECK-SAME: dtc.stage = 1
// CHECK: %[[H:.*]] = graph.recv from stage 0 {dtc.pipeline_forward}
// CHECK: graph.matmul %[[H]], %{{.*}} {dtc.pipeline_forward}
// CHECK: graph.reduce_mean {{.*}}dtc.pipeline_forward
// CHECK: graph.mul %[[H]], %[[H]] :
// CHECK: graph.send %{{.*}} to stage 0 : tensor<4x8xf32>
// CHECK-NOT: graph.recv
// CHECK: return

// TOO-MANY: error: --pp 8: the model can be cut into at most {{[0-9]+}} pipeline stages
// INFERENCE: error: pipeline stages split a training step: --pp needs --train
// SCHEDULE: error: --schedule must be gpipe, 1f1b or interleaved, got 'zigzag'
func.func @main(%x: tensor<4x8xf32> {graph.name = "x"}) -> (tensor<4x8xf32> {graph.name = "y"}) {
  %w1 = graph.parameter "w1" : tensor<8x8xf32>
  %a = graph.matmul %x, %w1 : (tensor<4x8xf32>, tensor<8x8xf32>) -> tensor<4x8xf32>
  %b = graph.tanh %a : (tensor<4x8xf32>) -> tensor<4x8xf32>
  %w2 = graph.parameter "w2" : tensor<8x8xf32>
  %c = graph.matmul %b, %w2 : (tensor<4x8xf32>, tensor<8x8xf32>) -> tensor<4x8xf32>
  %d = graph.tanh %c : (tensor<4x8xf32>) -> tensor<4x8xf32>
  return %d : tensor<4x8xf32>
}
