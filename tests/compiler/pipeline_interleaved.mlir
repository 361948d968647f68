// RUN: %dtc-opt %s --pass-pipeline="builtin.module(dtc-build-training-step{loss=mse optimizer=sgd momentum=0 model-outputs=false micro-batches=2},func.func(canonicalize,cse,dtc-accumulate-gradients),dtc-pipeline-split{stages=2 schedule=interleaved virtual-stages=2})" | FileCheck %s
// RUN: not %dtc-opt %s --pass-pipeline="builtin.module(dtc-build-training-step{loss=mse micro-batches=3},dtc-pipeline-split{stages=2 schedule=interleaved virtual-stages=2})" 2>&1 | FileCheck %s --check-prefix=GROUPS
// RUN: not %dtc-opt %s --pass-pipeline="builtin.module(dtc-build-training-step{loss=mse micro-batches=2},dtc-pipeline-split{stages=2 schedule=interleaved virtual-stages=8})" 2>&1 | FileCheck %s --check-prefix=TOO-MANY
// RUN: not %dtc-opt %s --pass-pipeline="builtin.module(dtc-build-training-step{loss=mse micro-batches=2},dtc-pipeline-split{stages=2 schedule=1f1b virtual-stages=2})" 2>&1 | FileCheck %s --check-prefix=NOT-INTERLEAVED

// Four tanh layers over two micro-batches on two interleaved stages of two
// virtual stages each: the step is cut into four chunks, one layer each;
// stage 0 runs chunks 0 and 2 (its virtual stages 0 and 1), stage 1 chunks
// 1 and 3. Every op says which virtual stage it belongs to (dtc.chunk),
// every transfer its channel: sending virtual stage x 2 + receiving one.
// CHECK: module attributes {dtc.pipeline = {micro_batches = 2 : i64, schedule = "interleaved", stages = 2 : i64, virtual_stages = 2 : i64}}

// Stage 0: layer 1 (its virtual stage 0) sends to stage 1's virtual stage
// 0 on channel 0; layer 3 (virtual stage 1) receives from stage 1's
// virtual stage 0 on channel 1 and sends on to its virtual stage 1 on
// channel 3. Gradients come back on the same channels, from the last
// chunk first. The step input x, which layer 1's weight gradient reads in
// the backward, is copied in virtual stage 0's forward.
// CHECK-LABEL: func.func @stage0(
// CHECK-SAME: chunk 0 on stage 0: {{.*}}chunk 1 on stage 1: {{.*}}chunk 2 on stage 0: {{.*}}chunk 3 on stage 1:
// CHECK-SAME: dtc.stage = 0
// CHECK: %[[X:.*]] = graph.copy %arg0 {dtc.chunk = 0 : i64, dtc.pipeline_forward}
// CHECK: %[[W1:.*]] = graph.parameter "w1" {dtc.chunk = 0 : i64}
// CHECK: %[[A:.*]] = graph.matmul %arg0, %[[W1]] {dtc.chunk = 0 : i64, dtc.pipeline_forward}
// CHECK-NEXT: %[[B:.*]] = graph.tanh %[[A]] {dtc.chunk = 0 : i64, dtc.pipeline_forward}
// CHECK-NEXT: graph.send %[[B]] to stage 1 {dtc.channel = 0 : i64, dtc.chunk = 0 : i64, dtc.pipeline_forward}
// CHECK-NEXT: %[[D:.*]] = graph.recv from stage 1 {dtc.channel = 1 : i64, dtc.chunk = 1 : i64, dtc.pipeline_forward}
// CHECK: %[[W3:.*]] = graph.parameter "w3" {dtc.chunk = 1 : i64}
// CHECK: graph.matmul %[[D]], %[[W3]] {dtc.chunk = 1 : i64, dtc.pipeline_forward}
// CHECK: graph.send %{{.*}} to stage 1 {dtc.channel = 3 : i64, dtc.chunk = 1 : i64, dtc.pipeline_forward}
// CHECK: graph.recv from stage 1 {dtc.channel = 3 : i64, dtc.chunk = 1 : i64}
// CHECK: graph.send %{{.*}} to stage 1 {dtc.channel = 2 : i64, dtc.chunk = 1 : i64}
// CHECK: %[[G:.*]] = graph.recv from stage 1 {dtc.channel = 0 : i64, dtc.chunk = 0 : i64}
// CHECK-NEXT: graph.matmul %[[X]], %[[G]] {dtc.chunk = 0 : i64, dtc.weight_gradient, transpose_lhs = true}
// CHECK: graph.sub %[[W1]], %{{.*}} {dtc.chunk = 0 : i64, dtc.once_per_step}
// CHECK: return

// Stage 1: layers 2 and 4 and the loss (result 0), which reads the labels
// in its last virtual stage's forward.
// CHECK-LABEL: func.func @stage1(
// CHECK-SAME: dtc.outputs = array<i64: 0,
// CHECK: graph.recv from stage 0 {dtc.channel = 0 : i64, dtc.chunk = 0 : i64, dtc.pipeline_forward}
// CHECK: graph.send %{{.*}} to stage 0 {dtc.channel = 1 : i64, dtc.chunk = 0 : i64, dtc.pipeline_forward}
// CHECK: graph.recv from stage 0 {dtc.channel = 3 : i64, dtc.chunk = 1 : i64, dtc.pipeline_forward}
// CHECK: graph.sub %{{.*}}, %arg1 {dtc.chunk = 1 : i64, dtc.pipeline_forward}
// CHECK: graph.reduce_mean {{.*}}dtc.chunk = 1 : i64, dtc.pipeline_forward
// CHECK: graph.send %{{.*}} to stage 0 {dtc.channel = 3 : i64, dtc.chunk = 1 : i64}
// CHECK: graph.recv from stage 0 {dtc.channel = 2 : i64, dtc.chunk = 0 : i64}
// CHECK: graph.send %{{.*}} to stage 0 {dtc.channel = 0 : i64, dtc.chunk = 0 : i64}
// CHECK: return

// GROUPS: error: --pp 2 --schedule interleaved --virtual-stages 2: the interleaved schedule runs micro-batches in groups of the stage count: 3 micro-batches is not a multiple of 2 stages; use --micro-batches 4
// TOO-MANY: error: --pp 2 --virtual-stages 8: the model can be cut into at most {{[0-9]+}} pieces {{.*}}not 16; use fewer stages or virtual stages
// NOT-INTERLEAVED: error: --pp 2 --schedule 1f1b --virtual-stages 2: virtual stages need the interleaved schedule
func.func @main(%x: tensor<4x8xf32> {graph.name = "x"}) -> (tensor<4x8xf32> {graph.name = "y"}) {
  %w1 = graph.parameter "w1" : tensor<8x8xf32>
  %a = graph.matmul %x, %w1 : (tensor<4x8xf32>, tensor<8x8xf32>) -> tensor<4x8xf32>
  %b = graph.tanh %a : (tensor<4x8xf32>) -> tensor<4x8xf32>
  %w2 = graph.parameter "w2" : tensor<8x8xf32>
  %c = graph.matmul %b, %w2 : (tensor<4x8xf32>, tensor<8x8xf32>) -> tensor<4x8xf32>
  %d = graph.tanh %c : (tensor<4x8xf32>) -> tensor<4x8xf32>
  %w3 = graph.parameter "w3" : tensor<8x8xf32>
  %e = graph.matmul %d, %w3 : (tensor<4x8xf32>, tensor<8x8xf32>) -> tensor<4x8xf32>
  %f = graph.tanh %e : (tensor<4x8xf32>) -> tensor<4x8xf32>
  %w4 = graph.parameter "w4" : tensor<8x8xf32>
  %g = graph.matmul %f, %w4 : (tensor<4x8xf32>, tensor<8x8xf32>) -> tensor<4x8xf32>
  %h = graph.tanh %g : (tensor<4x8xf32>) -> tensor<4x8xf32>
  return %h : tensor<4x8xf32>
}
