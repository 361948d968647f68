// RUN: %dtc-opt %s --dtc-power-sgd | FileCheck %s
// RUN: %dtc-opt %s --dtc-power-sgd=rank=1 | FileCheck %s --check-prefix=RANK1
// RUN: not %dtc-opt %s --dtc-power-sgd=rank=0 2>&1 | FileCheck %s --check-prefix=BAD

// A 16x32 weight gradient's all-reduce over 4 ranks becomes PowerSGD's
// two all-reduces of rank-2 factors (16x2 and 32x2: 384 B, not 2 KiB),
// with this rank's error feedback and the warm-started Q as new
// zero-initialised parameters the step updates; a bias (rank 1) and a
// 4x4 matrix (its factors would save less than half) stay as they are.
// CHECK-LABEL: func.func @main
// CHECK-SAME: tensor<16x32xf32> {dtc.updates = "powersgd.0.error", graph.name = "powersgd.0.error.new"}, tensor<32x2xf32> {dtc.updates = "powersgd.0.q", graph.name = "powersgd.0.q.new"})
// CHECK-SAME: "gradient compression: PowerSGD rank 2: 1 weight gradients' all-reduces sent as two factors each (384 B instead of 2.0 KiB), with error feedback; the others as computed"
// CHECK: %[[E:.*]] = graph.parameter "powersgd.0.error" {dtc.zeros} : tensor<16x32xf32>
// CHECK: %[[Q:.*]] = graph.parameter "powersgd.0.q" {dtc.zeros} : tensor<32x2xf32>
// CHECK: %[[M:.*]] = graph.add %{{.*}}, %[[E]] {dtc.once_per_step}
// The first step's Q: sines of the indices, where Q is still zero.
// CHECK: %[[START:.*]] = graph.sin
// CHECK: %[[UNSET:.*]] = graph.equal
// CHECK: %[[WARM:.*]] = graph.where %[[UNSET]], %[[START]], %[[Q]]
// CHECK: %[[P:.*]] = graph.matmul %[[M]], %[[WARM]] {dtc.once_per_step} : (tensor<16x32xf32>, tensor<32x2xf32>) -> tensor<16x2xf32>
// CHECK: %[[PS:.*]] = mesh.all_reduce %[[P]] on @mesh mesh_axes = [0] {dtc.gradient_reduction, dtc.once_per_step} : tensor<16x2xf32>
// Gram-Schmidt: the second column less its part along the first.
// CHECK: %[[C0:.*]] = graph.slice %[[PS]] {{.*}}offsets = array<i64: 0, 0>, sizes = array<i64: 16, 1>
// CHECK: %[[P0:.*]] = graph.div %[[C0]],
// CHECK: %[[C1:.*]] = graph.slice %[[PS]] {{.*}}offsets = array<i64: 0, 1>, sizes = array<i64: 16, 1>
// CHECK: graph.sub %[[C1]],
// CHECK: %[[PO:.*]] = graph.concat %[[P0]], %{{.*}} {axis = 1 : i64, dtc.once_per_step}
// CHECK: %[[QL:.*]] = graph.matmul %[[M]], %[[PO]] {dtc.once_per_step, transpose_lhs = true} : (tensor<16x32xf32>, tensor<16x2xf32>) -> tensor<32x2xf32>
// CHECK: %[[QS:.*]] = mesh.all_reduce %[[QL]] on @mesh mesh_axes = [0] {dtc.gradient_reduction, dtc.once_per_step} : tensor<32x2xf32>
// CHECK: %[[APPROX:.*]] = graph.matmul %[[PO]], %[[QS]] {dtc.once_per_step, transpose_rhs = true}
// Error feedback: what this rank's quarter of the sum left out.
// CHECK: %[[QUARTER:.*]] = graph.constant dense<2.500000e-01>
// CHECK: %[[SHARE:.*]] = graph.mul %[[APPROX]], %[[QUARTER]]
// CHECK: %[[NEWE:.*]] = graph.sub %[[M]], %[[SHARE]]
// CHECK: %[[G:.*]] = graph.reshape %[[APPROX]]
// CHECK: %[[B:.*]] = mesh.all_reduce %arg1
// CHECK: %[[S:.*]] = mesh.all_reduce %arg2
// CHECK: return %[[G]], %[[B]], %[[S]], %[[NEWE]], %[[QS]]
// With rank 1 the 4x4 one's factors are half its bytes too.
// RANK1: PowerSGD rank 1: 2 weight gradients' all-reduces sent as two factors each (224 B instead of 2.1 KiB)
// RANK1-NOT: graph.concat
// BAD: PowerSGD's rank must be at least 1, got 0
module {
  mesh.mesh @mesh(shape = 4)
  func.func @main(%g: tensor<16x32xf32>, %b: tensor<32xf32>, %s: tensor<4x4xf32>)
      -> (tensor<16x32xf32> {graph.name = "w.grad"}, tensor<32xf32>, tensor<4x4xf32>)
      attributes {dtc.training = {}} {
    %0 = mesh.all_reduce %g on @mesh mesh_axes = [0] {dtc.gradient_reduction, dtc.once_per_step} : tensor<16x32xf32> -> tensor<16x32xf32>
    %1 = mesh.all_reduce %b on @mesh mesh_axes = [0] {dtc.gradient_reduction} : tensor<32xf32> -> tensor<32xf32>
    %2 = mesh.all_reduce %s on @mesh mesh_axes = [0] {dtc.gradient_reduction} : tensor<4x4xf32> -> tensor<4x4xf32>
    return %0, %1, %2 : tensor<16x32xf32>, tensor<32xf32>, tensor<4x4xf32>
  }
}
