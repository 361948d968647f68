// RUN: %dtc-opt %s --split-input-file --dtc-build-training-step="precision=bf16 skip-nonfinite=true" --canonicalize --cse --dtc-keep-bf16-weights | FileCheck %s
// RUN: %dtc-opt %s --split-input-file --pass-pipeline="builtin.module(dtc-build-training-step{loss=mse precision=bf16 model-outputs=false},func.func(canonicalize,cse),dtc-sharding-search{dp=2 zero=1},func.func(dtc-keep-bf16-weights),dtc-spmd-partition)" | FileCheck %s --check-prefix=ZERO
// RUN: %dtc-opt %s --split-input-file --pass-pipeline="builtin.module(dtc-build-training-step{loss=mse optimizer=sgd momentum=0 model-outputs=false micro-batches=2 precision=bf16},func.func(canonicalize,cse),dtc-sharding-search{mesh=1 pp=2 stage-cuts=flops},dtc-spmd-partition,func.func(dtc-accumulate-gradients),func.func(dtc-keep-bf16-weights),dtc-pipeline-split{stages=2})" | FileCheck %s --check-prefix=STAGES

// The weight's casts become its bf16 copy, a parameter `cast_of` it, which
// the step's last op writes from the updated weight (after the skip of a
// non-finite step); its result goes after the other updates, before the
// gradient squares. A frozen weight's copy is made at load and never
// written. The optimizer still reads the f32 weight.
// CHECK-LABEL: func.func @main
// CHECK-SAME: tensor<8x3xf32> {dtc.updates = "w", graph.name = "w.new"}, tensor<8x3xbf16> {dtc.updates = "w.bf16", graph.name = "w.bf16.new"}, tensor<f32> {graph.name = "gradient_squares"})
// CHECK-SAME: training: 2 weights (27 values) kept in bf16 between steps beside their f32 master copies
// CHECK: %[[W:.*]] = graph.parameter "w" : tensor<8x3xf32>
// CHECK-NEXT: %[[WB:.*]] = graph.parameter "w.bf16" {cast_of = "w"} : tensor<8x3xbf16>
// CHECK: %[[B:.*]] = graph.parameter "b" {frozen = "a test"} : tensor<3xf32>
// CHECK-NEXT: %[[BB:.*]] = graph.parameter "b.bf16" {cast_of = "b"} : tensor<3xbf16>
// CHECK-NOT: graph.cast %[[W]]
// CHECK-NOT: graph.cast %[[B]]
// CHECK: %[[Y:.*]] = graph.matmul %{{.*}}, %[[WB]] : (tensor<4x8xbf16>, tensor<8x3xbf16>) -> tensor<4x3xbf16>
// CHECK-NEXT: graph.add %[[Y]], %[[BB]]
// CHECK: %[[STEP:.*]] = graph.sub %[[W]], %{{.*}} : (tensor<8x3xf32>, tensor<8x3xf32>) -> tensor<8x3xf32>
// CHECK-NEXT: %[[NEW:.*]] = graph.where %{{.*}}, %[[STEP]], %[[W]]
// CHECK-NEXT: %[[COPY:.*]] = graph.cast %[[NEW]] : (tensor<8x3xf32>) -> tensor<8x3xbf16>
// CHECK-NEXT: return %{{.*}}, %{{.*}}, %{{.*}}, %[[NEW]], %[[COPY]], %{{.*}} :
func.func @main(%x: tensor<4x8xf32> {graph.name = "x"}) -> (tensor<4x3xf32> {graph.name = "logits"}) {
  %w = graph.parameter "w" : tensor<8x3xf32>
  %b = graph.parameter "b" {frozen = "a test"} : tensor<3xf32>
  %y = graph.matmul %x, %w : (tensor<4x8xf32>, tensor<8x3xf32>) -> tensor<4x3xf32>
  %z = graph.add %y, %b : (tensor<4x3xf32>, tensor<3xf32>) -> tensor<4x3xf32>
  return %z : tensor<4x3xf32>
}

// -----

// Pipeline stages: a weight goes where its copy is read first, and its
// stage updates both. A weight tied across stages sends its copy, in
// bf16, where it sent the f32 weight to be cast; its gradient comes back
// in f32 and the stage that holds it writes both. (Two stages pinned;
// stage-cuts=flops: the cut pipeline_tied.mlir has.)
// STAGES: func.func @stage0(%arg0: tensor<4x8xf32> {graph.name = "x"}, %arg1: tensor<4x8xf32>
// STAGES-SAME: tensor<8x8xf32> {dtc.updates = "w", graph.name = "w.new"}, tensor<8x8xbf16> {dtc.updates = "w.bf16", graph.name = "w.bf16.new"}
// STAGES: graph.parameter "w" : tensor<8x8xf32>
// STAGES-NEXT: %[[WB:.*]] = graph.parameter "w.bf16" {cast_of = "w"} : tensor<8x8xbf16>
// STAGES-NEXT: graph.send %[[WB]] to stage 1 {dtc.pipeline_forward} : tensor<8x8xbf16>
// STAGES: graph.recv from stage 1 : tensor<8x8xf32>
// STAGES: %[[COPY:.*]] = graph.cast %{{.*}} {dtc.once_per_step} : (tensor<8x8xf32>) -> tensor<8x8xbf16>
// STAGES-NEXT: return %{{.*}}, %{{.*}}, %[[COPY]] :
// STAGES: func.func @stage1(
// STAGES-NOT: graph.parameter
// STAGES: graph.recv from stage 0 {dtc.pipeline_forward} : tensor<8x8xbf16>
// STAGES-NOT: graph.cast %{{.*}} : (tensor<8x8xf32>) -> tensor<8x8xbf16>
// STAGES: graph.send %{{.*}} to stage 0 : tensor<8x8xf32>
func.func @main(%x: tensor<4x8xf32> {graph.name = "x"}) -> (tensor<4x8xf32> {graph.name = "y"}) {
  %w = graph.parameter "w" : tensor<8x8xf32>
  %a = graph.matmul %x, %w : (tensor<4x8xf32>, tensor<8x8xf32>) -> tensor<4x8xf32>
  %b = graph.tanh %a : (tensor<4x8xf32>) -> tensor<4x8xf32>
  %c = graph.matmul %b, %w : (tensor<4x8xf32>, tensor<8x8xf32>) -> tensor<4x8xf32>
  %d = graph.tanh %c : (tensor<4x8xf32>) -> tensor<4x8xf32>
  return %d : tensor<4x8xf32>
}

// -----

// Between the search and the partitioner, under ZeRO-1: the update runs on
// shards over dp, so the f32 master is split as it is, while the copy the
// forward reads stays whole, made by gathering the update's bf16 cast
// (not the f32 update).
// ZERO: training: 1 weights (4.1 k values) kept in bf16 between steps beside their f32 master copies: the optimizer writes both, and the step casts none; 1 masters split as their updates are (ZeRO), their copies gathered in bf16
// ZERO: graph.parameter "w" {dtc.sharding = #graph.sharding<[0], []>} : tensor<32x64xf32>
// ZERO-NEXT: %[[WB:.*]] = graph.parameter "w.bf16" {cast_of = "w"} : tensor<64x64xbf16>
// ZERO: graph.matmul %{{.*}}, %[[WB]] {{.*}}: (tensor<2x64xbf16>, tensor<64x64xbf16>)
// ZERO-NOT: mesh.all_gather %{{.*}} : tensor<32x64xf32>
// ZERO: %[[COPY:.*]] = mesh.all_gather %{{.*}} on @mesh mesh_axes = [0] gather_axis = 0 : tensor<32x64xbf16> -> tensor<64x64xbf16>
// ZERO-NEXT: return %{{.*}}, %[[COPY]] :
func.func @main(%x: tensor<4x64xf32> {graph.name = "x"}) -> (tensor<4x64xf32> {graph.name = "logits"}) {
  %w = graph.parameter "w" : tensor<64x64xf32>
  %y = graph.matmul %x, %w : (tensor<4x64xf32>, tensor<64x64xf32>) -> tensor<4x64xf32>
  return %y : tensor<4x64xf32>
}
