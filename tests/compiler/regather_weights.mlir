// RUN: %dtc-opt %s --dtc-regather-weights | FileCheck %s
// RUN: %dtc-opt %s --dtc-regather-weights | %dtc-opt --dtc-regather-weights | FileCheck %s --check-prefix=AGAIN

// A ZeRO-3 weight (split over the two data-parallel ranks) is gathered
// whole for the forward's matmul; the backward reads it again (the input's
// gradient, dy w^T). The backward's read gets its own all-gather, made
// just before it: the gathered weight does not live from the forward to
// the backward. What only the forward reads is left alone.
// CHECK: "weights gathered for the forward are gathered again for the backward: 1 ops repeated instead of keeping 1 gathered weights (256 B per device)"
// CHECK: %[[W:.*]] = graph.parameter "w"
// CHECK-NEXT: %[[G:.*]] = mesh.all_gather %[[W]] on @mesh mesh_axes = [0] gather_axis = 0 :
// CHECK-NEXT: graph.matmul %arg0, %[[G]] :
// CHECK: %[[G2:.*]] = mesh.all_gather %[[W]] on @mesh mesh_axes = [0] gather_axis = 0 {dtc.recompute}
// CHECK-NEXT: graph.matmul %{{.*}}, %[[G2]] {transpose_rhs = true}
// CHECK-NOT: %[[G]]
// CHECK: return

// Run again, nothing is left to do: still one copy.
// AGAIN: {dtc.recompute}
// AGAIN-NOT: {dtc.recompute}
mesh.mesh @mesh(shape = 2)
func.func @main(%x: tensor<2x8xf32>, %dy: tensor<2x8xf32>) -> (tensor<f32>, tensor<2x8xf32>) attributes {dtc.training = {}} {
  %w = graph.parameter "w" : tensor<4x8xf32>
  %g = mesh.all_gather %w on @mesh mesh_axes = [0] gather_axis = 0 : tensor<4x8xf32> -> tensor<8x8xf32>
  %y = graph.matmul %x, %g : (tensor<2x8xf32>, tensor<8x8xf32>) -> tensor<2x8xf32>
  %l = graph.reduce_sum %y {axes = array<i64: 0, 1>, keepdims = false} : (tensor<2x8xf32>) -> tensor<f32>
  %dx = graph.matmul %dy, %g {transpose_rhs = true} : (tensor<2x8xf32>, tensor<8x8xf32>) -> tensor<2x8xf32>
  return %l, %dx : tensor<f32>, tensor<2x8xf32>
}
