// RUN: %dtc-opt %s --pass-pipeline="builtin.module(dtc-build-training-step{micro-batches=2 optimizer=sgd momentum=0},func.func(canonicalize,cse),dtc-sharding-search{dp=2 zero=0},dtc-spmd-partition,func.func(dtc-accumulate-gradients))" | FileCheck %s
// RUN: %dtc-opt %s --pass-pipeline="builtin.module(dtc-build-training-step{micro-batches=2 optimizer=sgd momentum=0},func.func(canonicalize,cse),dtc-sharding-search{dp=2 zero=2},dtc-spmd-partition,func.func(dtc-accumulate-gradients))" | FileCheck %s --check-prefix=ZERO
// RUN: %dtc-opt %s --pass-pipeline="builtin.module(dtc-build-training-step{micro-batches=2 optimizer=sgd momentum=0},func.func(canonicalize,cse,dtc-accumulate-gradients))" | FileCheck %s --check-prefix=ONE
// RUN: %dtc-opt %s --pass-pipeline="builtin.module(dtc-build-training-step{micro-batches=2 optimizer=adamw},func.func(canonicalize,cse),dtc-sharding-search{dp=2 zero=1},dtc-spmd-partition,func.func(dtc-accumulate-gradients))" | FileCheck %s --check-prefix=ZERO1
// RUN: %dtc-opt %s --dtc-accumulate-gradients | FileCheck %s --check-prefix=NONE

// A step over two micro-batches of a data-parallel pair: the gradient is
// added to its accumulator before the all-reduce, which moves into the
// once-per-step part with the optimizer (one reduction per step, not per
// micro-batch). The accumulation and what comes before run per micro-batch.
// CHECK: "gradient accumulation: 20 ops run once per micro-batch, 4 once per step; 1 gradient all-reduces run once per step on the accumulated sums"
// CHECK: %[[W:.*]] = graph.parameter "w" : tensor<8x3xf32>
// CHECK: %[[ACC:.*]] = graph.parameter "w.grad_accumulator" {dtc.accumulator, dtc.zeros} : tensor<8x3xf32>
// CHECK: %[[G:.*]] = graph.matmul %arg0, %{{.*}} {dtc.weight_gradient, transpose_lhs = true} : (tensor<2x8xf32>, tensor<2x3xf32>) -> tensor<8x3xf32>
// CHECK-NOT: once_per_step
// CHECK: %[[SUM:.*]] = graph.add %[[ACC]], %[[G]] : (tensor<8x3xf32>, tensor<8x3xf32>) -> tensor<8x3xf32>
// CHECK-NEXT: %[[R:.*]] = mesh.all_reduce %[[SUM]] on @mesh mesh_axes = [0] {dtc.gradient_reduction, dtc.once_per_step}
// CHECK-NEXT: %[[MEAN:.*]] = graph.mul %[[R]], %{{.*}} {dtc.once_per_step}
// CHECK-NEXT: %[[STEP:.*]] = graph.mul %[[MEAN]], %arg2 {dtc.once_per_step}
// CHECK-NEXT: %[[NEW:.*]] = graph.sub %[[W]], %[[STEP]] {dtc.once_per_step}
// CHECK-NEXT: return %{{.*}}, %[[SUM]], %[[NEW]]

// With ZeRO the accumulator is a shard: the gradient is reduce-scattered
// into it every micro-batch (DeepSpeed's stage 2), nothing is deferred.
// ZERO: "gradient accumulation: {{.*}} once per step"
// ZERO-NOT: gradient all-reduces run once per step
// ZERO: graph.parameter "w.grad_accumulator" {dtc.accumulator, dtc.sharding = #graph.sharding<[0], []>, dtc.zeros} : tensor<4x3xf32>
// ZERO: %[[RS:.*]] = mesh.reduce_scatter
// ZERO-NEXT: graph.add %{{.*}}, %[[RS]]
// ZERO-NOT: mesh.all_reduce {{.*}}once_per_step

// ZeRO-1 splits the optimizer's state only (DeepSpeed's stage 1): the
// accumulator stays whole and the gradient is all-reduced once a step (not
// fused into a reduce-scatter: a ring reduce-scatter of a small gradient
// costs more latency than a tree all-reduce).
// ZERO1: "gradient accumulation: {{.*}}; 1 gradient all-reduces run once per step on the accumulated sums"
// ZERO1-DAG: graph.parameter "w.grad_accumulator" {dtc.accumulator, dtc.zeros} : tensor<8x3xf32>
// ZERO1-DAG: graph.parameter "w.adam_m" {dtc.sharding = #graph.sharding<[0], []>, dtc.zeros} : tensor<4x3xf32>
// ZERO1-NOT: mesh.reduce_scatter
// ZERO1: %[[SUM1:.*]] = graph.add %{{.*}}, %{{.*}} : (tensor<8x3xf32>, tensor<8x3xf32>) -> tensor<8x3xf32>
// ZERO1-NEXT: mesh.all_reduce %[[SUM1]] on @mesh mesh_axes = [0] {dtc.gradient_reduction, dtc.once_per_step} : tensor<8x3xf32>

// One device: only the split into the two parts.
// ONE: "gradient accumulation: 18 ops run once per micro-batch, 3 once per step"
// ONE: %[[SUM:.*]] = graph.add
// ONE-NEXT: graph.mul %[[SUM]], %{{.*}} {dtc.once_per_step}

// Without accumulators the pass changes nothing.
// NONE-NOT: once_per_step
// NONE-NOT: gradient accumulation
func.func @main(%x: tensor<4x8xf32> {graph.name = "x"}) -> (tensor<4x3xf32> {graph.name = "logits"}) {
  %w = graph.parameter "w" : tensor<8x3xf32>
  %y = graph.matmul %x, %w : (tensor<4x8xf32>, tensor<8x3xf32>) -> tensor<4x3xf32>
  return %y : tensor<4x3xf32>
}
