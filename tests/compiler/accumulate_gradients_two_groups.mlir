// RUN: %dtc-opt %s --pass-pipeline="builtin.module(func.func(dtc-accumulate-gradients))" | FileCheck %s

// A gradient partial over two groups, as a layer norm's scale gradient is
// under sequence parallelism (its rows split over dp by the batch and over
// tp by the sequence): two all-reduces in a row, then a reshape, into the
// accumulator. Both move after the sum, once a step (in the order they
// were in), so that no reduction runs per micro-batch.
// CHECK: "gradient accumulation: {{.*}}; 2 gradient all-reduces run once per step on the accumulated sums"
// CHECK: %[[ACC:.*]] = graph.parameter "g.grad_accumulator"
// CHECK: %[[P:.*]] = graph.reduce_sum %arg0
// CHECK-NOT: mesh.all_reduce
// CHECK: %[[R:.*]] = graph.reshape %[[P]]
// CHECK-NEXT: %[[SUM:.*]] = graph.add %[[ACC]], %[[R]]
// CHECK-NEXT: %[[TP:.*]] = mesh.all_reduce %[[SUM]] on @mesh mesh_axes = [1] {{{.*}}dtc.once_per_step{{.*}}}
// CHECK-NEXT: %[[DP:.*]] = mesh.all_reduce %[[TP]] on @mesh mesh_axes = [0] {{{.*}}dtc.once_per_step{{.*}}}
// CHECK-NEXT: graph.mul %[[DP]], {{.*}}dtc.once_per_step
// CHECK: return %[[SUM]]
mesh.mesh @mesh(shape = 2x2)
func.func @main(%x: tensor<4x8xf32>, %lr: tensor<f32>) -> (tensor<8xf32>, tensor<8xf32>) {
  %g = graph.parameter "g" : tensor<8xf32>
  %acc = graph.parameter "g.grad_accumulator" {dtc.accumulator, dtc.zeros} : tensor<8xf32>
  %p = graph.reduce_sum %x {axes = array<i64: 0>, keepdims = true} : (tensor<4x8xf32>) -> tensor<1x8xf32>
  %tp = mesh.all_reduce %p on @mesh mesh_axes = [1] {dtc.gradient_reduction} : tensor<1x8xf32> -> tensor<1x8xf32>
  %dp = mesh.all_reduce %tp on @mesh mesh_axes = [0] {dtc.gradient_reduction} : tensor<1x8xf32> -> tensor<1x8xf32>
  %r = graph.reshape %dp : (tensor<1x8xf32>) -> tensor<8xf32>
  %sum = graph.add %acc, %r : (tensor<8xf32>, tensor<8xf32>) -> tensor<8xf32>
  %step = graph.mul %sum, %lr : (tensor<8xf32>, tensor<f32>) -> tensor<8xf32>
  %new = graph.sub %g, %step : (tensor<8xf32>, tensor<8xf32>) -> tensor<8xf32>
  return %sum, %new : tensor<8xf32>, tensor<8xf32>
}
