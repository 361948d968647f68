// RUN: %dtc-opt %s --pass-pipeline="builtin.module(dtc-build-training-step{loss=mse optimizer=sgd momentum=0 model-outputs=false micro-batches=4},func.func(canonicalize,cse),dtc-sharding-search{pp=2 stage-cuts=flops},dtc-spmd-partition,func.func(dtc-accumulate-gradients),dtc-pipeline-split{stages=2 replicas=1,2})" | FileCheck %s
// RUN: not %dtc-opt %s --pass-pipeline="builtin.module(dtc-build-training-step{loss=mse optimizer=sgd momentum=0 model-outputs=false micro-batches=4},func.func(canonicalize,cse),dtc-sharding-search{pp=2},dtc-spmd-partition,func.func(dtc-accumulate-gradients),dtc-pipeline-split{stages=2 replicas=1,2,1})" 2>&1 | FileCheck %s --check-prefix=COUNT

// Stage replicas (dtc-pipeline-split's replicas): stage 1 on two copies
// of its mesh, each accumulating the gradients of its own micro-batches;
// each accumulated sum is summed over the two, once a step, on a mesh of
// every stage's replicas (@stages, one coordinate each), its group the
// stage's own coordinates (dtc.replicas = [first, count]), before the
// update reads it. Stage 0, on one copy, is left alone.

// CHECK: dtc.pipeline = {micro_batches = 4 : i64, replicas = array<i64: 1, 2>, schedule = "1f1b", stages = 2 : i64, virtual_stages = 1 : i64}
// CHECK: mesh.mesh @stages(shape = 3)
// CHECK-LABEL: func.func @stage0(
// CHECK-NOT: @stages
// CHECK-LABEL: func.func @stage1(
// CHECK: pipeline: stage 1 runs on 2 replicas of its mesh, each running 1 micro-batch in 2, 1 accumulated gradients summed over them once a step
// CHECK: %[[ALL:.*]] = mesh.all_reduce %[[SUM:[0-9]+]] on @stages mesh_axes = [0] {dtc.gradient_reduction, dtc.once_per_step, dtc.replicas = array<i64: 1, 2>}
// CHECK: graph.mul %[[ALL]]
// CHECK: return {{.*}}%[[SUM]],

// COUNT: --stage-replicas gives 3 counts for 2 stages: give one per stage
func.func @main(%x: tensor<64x64xf32> {graph.name = "x"}) -> (tensor<64x64xf32> {graph.name = "y"}) {
  %w1 = graph.parameter "w1" : tensor<64x64xf32>
  %a1 = graph.matmul %x, %w1 : (tensor<64x64xf32>, tensor<64x64xf32>) -> tensor<64x64xf32>
  %b1 = graph.tanh %a1 : (tensor<64x64xf32>) -> tensor<64x64xf32>
  %w2 = graph.parameter "w2" : tensor<64x64xf32>
  %a2 = graph.matmul %b1, %w2 : (tensor<64x64xf32>, tensor<64x64xf32>) -> tensor<64x64xf32>
  %b2 = graph.tanh %a2 : (tensor<64x64xf32>) -> tensor<64x64xf32>
  return %b2 : tensor<64x64xf32>
}
