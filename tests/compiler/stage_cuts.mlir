// RUN: %dtc-opt %s --pass-pipeline="builtin.module(dtc-build-training-step{loss=mse optimizer=sgd momentum=0 model-outputs=false micro-batches=2},func.func(canonicalize,cse),dtc-sharding-search{pp=2},dtc-spmd-partition,func.func(dtc-accumulate-gradients),dtc-pipeline-split{stages=2})" | FileCheck %s
// RUN: %dtc-opt %s --pass-pipeline="builtin.module(dtc-build-training-step{loss=mse optimizer=sgd momentum=0 model-outputs=false micro-batches=2},func.func(canonicalize,cse),dtc-sharding-search{pp=2 stage-cuts=flops},dtc-spmd-partition,func.func(dtc-accumulate-gradients),dtc-pipeline-split{stages=2})" | FileCheck %s --check-prefix=FLOPS
// RUN: not %dtc-opt %s --pass-pipeline="builtin.module(dtc-build-training-step{loss=mse optimizer=sgd momentum=0 model-outputs=false micro-batches=2},dtc-sharding-search{pp=2 stage-cuts=layers})" 2>&1 | FileCheck %s --check-prefix=BAD

// Where two pipeline stages end (compiler/StageCuts.h). Four layers whose
// third ends in three softmaxes: no FLOPs, but on the cost model each
// is a pass over memory that takes about as long as a matmul (unlike a
// chain of elementwise ops, which would be fused into one pass). Evening
// out FLOPs cuts after the second layer, leaving stage 1 the softmaxes
// and two layers; the cost model's dynamic program cuts after the third
// layer, before the chain, where the two stages' predicted times are
// closest, and dtc-pipeline-split cuts there (the op marked
// dtc.stage_end), where its own FLOP count would not.

// CHECK: func.func @stage0(
// CHECK-SAME: pipeline stages predicted at {{.*}} a step: cut by the cost model, where the FLOP-even cut's costliest stage takes
// CHECK-COUNT-3: graph.matmul {{.*}}dtc.pipeline_forward
// CHECK: %[[END:.*]] = graph.tanh {{.*}}dtc.stage_end
// CHECK-NEXT: graph.send %[[END]] to stage 1
// CHECK: func.func @stage1(
// CHECK: graph.recv from stage 0
// CHECK-NEXT: graph.softmax
// CHECK-NEXT: graph.softmax
// CHECK-NEXT: graph.softmax
// CHECK-NEXT: graph.parameter "w4"

// FLOPS: func.func @stage0(
// FLOPS-SAME: a step: cut to even out forward FLOPs
// FLOPS-COUNT-2: graph.matmul {{.*}}dtc.pipeline_forward
// FLOPS-NOT: dtc.stage_end
// FLOPS: %[[END:.*]] = graph.tanh
// FLOPS-NEXT: graph.send %[[END]] to stage 1
// FLOPS: func.func @stage1(
// FLOPS: graph.recv from stage 0
// FLOPS-NEXT: graph.parameter "w3"

// BAD: stage-cuts takes costs or flops, got 'layers'
func.func @main(%x: tensor<64x64xf32> {graph.name = "x"}) -> (tensor<64x64xf32> {graph.name = "y"}) {
  %w1 = graph.parameter "w1" : tensor<64x64xf32>
  %a1 = graph.matmul %x, %w1 : (tensor<64x64xf32>, tensor<64x64xf32>) -> tensor<64x64xf32>
  %b1 = graph.tanh %a1 : (tensor<64x64xf32>) -> tensor<64x64xf32>
  %w2 = graph.parameter "w2" : tensor<64x64xf32>
  %a2 = graph.matmul %b1, %w2 : (tensor<64x64xf32>, tensor<64x64xf32>) -> tensor<64x64xf32>
  %b2 = graph.tanh %a2 : (tensor<64x64xf32>) -> tensor<64x64xf32>
  %w3 = graph.parameter "w3" : tensor<64x64xf32>
  %a3 = graph.matmul %b2, %w3 : (tensor<64x64xf32>, tensor<64x64xf32>) -> tensor<64x64xf32>
  %b3 = graph.tanh %a3 : (tensor<64x64xf32>) -> tensor<64x64xf32>
  %c3 = graph.softmax %b3 {axis = 1 : i64} : (tensor<64x64xf32>) -> tensor<64x64xf32>
  %d3 = graph.softmax %c3 {axis = 1 : i64} : (tensor<64x64xf32>) -> tensor<64x64xf32>
  %e3 = graph.softmax %d3 {axis = 1 : i64} : (tensor<64x64xf32>) -> tensor<64x64xf32>
  %w4 = graph.parameter "w4" : tensor<64x64xf32>
  %a4 = graph.matmul %e3, %w4 : (tensor<64x64xf32>, tensor<64x64xf32>) -> tensor<64x64xf32>
  %b4 = graph.tanh %a4 : (tensor<64x64xf32>) -> tensor<64x64xf32>
  return %b4 : tensor<64x64xf32>
}
