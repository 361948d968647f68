// RUN: %dtc-opt %s --dtc-fuse-norm-gradients | FileCheck %s

// A bias's sum made before the gradient op (it reads dy alone) moves after
// it with what reads it; a product also read elsewhere stays, and so does
// its sum (the scale's gradient then apart, and the bias's with it).
// CHECK-LABEL: func.func @sums_first
// CHECK-NEXT: %[[DX:.*]], %{{.*}}, %{{.*}}, %[[P:.*]]:2 = graph.layer_norm_backward %arg0, %arg1, %arg2 {axis = 1 : i64, bias_gradient, scale_gradient} : {{.*}} -> (tensor<64x8xf32>, tensor<64x1xf32>, tensor<64x1xf32>, tensor<8x8xf32>, tensor<8x8xf32>)
// CHECK-NEXT: %[[B:.*]] = graph.reduce_sum %[[P]]#1 {axes = array<i64: 0>} : (tensor<8x8xf32>) -> tensor<1x8xf32>
// CHECK-NEXT: %[[BV:.*]] = graph.reshape %[[B]] : (tensor<1x8xf32>) -> tensor<8xf32>
// CHECK-NEXT: %[[S:.*]] = graph.reduce_sum %[[P]]#0 {axes = array<i64: 0>} : (tensor<8x8xf32>) -> tensor<1x8xf32>
// CHECK-NEXT: %[[SV:.*]] = graph.reshape %[[S]] : (tensor<1x8xf32>) -> tensor<8xf32>
// CHECK-NEXT: return %[[DX]], %[[SV]], %[[BV]]
// CHECK-LABEL: func.func @product_kept
// CHECK-NOT: fusion
// CHECK: graph.reduce_sum %arg2
// CHECK: graph.layer_norm_backward %arg0, %arg1, %arg2 {axis = 1 : i64} :
// CHECK: graph.reduce_sum
func.func @sums_first(%x: tensor<64x8xf32>, %s: tensor<8xf32>, %dy: tensor<64x8xf32>) -> (tensor<64x8xf32>, tensor<8xf32>, tensor<8xf32>) {
  %db = graph.reduce_sum %dy {axes = array<i64: 0>} : (tensor<64x8xf32>) -> tensor<1x8xf32>
  %dbv = graph.reshape %db : (tensor<1x8xf32>) -> tensor<8xf32>
  %dx, %mean, %rstd = graph.layer_norm_backward %x, %s, %dy {axis = 1 : i64} : (tensor<64x8xf32>, tensor<8xf32>, tensor<64x8xf32>) -> (tensor<64x8xf32>, tensor<64x1xf32>, tensor<64x1xf32>)
  %c = graph.sub %x, %mean : (tensor<64x8xf32>, tensor<64x1xf32>) -> tensor<64x8xf32>
  %xh = graph.mul %c, %rstd : (tensor<64x8xf32>, tensor<64x1xf32>) -> tensor<64x8xf32>
  %p = graph.mul %xh, %dy : (tensor<64x8xf32>, tensor<64x8xf32>) -> tensor<64x8xf32>
  %ds = graph.reduce_sum %p {axes = array<i64: 0>} : (tensor<64x8xf32>) -> tensor<1x8xf32>
  %dsv = graph.reshape %ds : (tensor<1x8xf32>) -> tensor<8xf32>
  return %dx, %dsv, %dbv : tensor<64x8xf32>, tensor<8xf32>, tensor<8xf32>
}
func.func @product_kept(%x: tensor<64x8xf32>, %s: tensor<8xf32>, %dy: tensor<64x8xf32>) -> (tensor<64x8xf32>, tensor<8xf32>, tensor<8xf32>, tensor<64x8xf32>) {
  %db = graph.reduce_sum %dy {axes = array<i64: 0>} : (tensor<64x8xf32>) -> tensor<1x8xf32>
  %dbv = graph.reshape %db : (tensor<1x8xf32>) -> tensor<8xf32>
  %dx, %mean, %rstd = graph.layer_norm_backward %x, %s, %dy {axis = 1 : i64} : (tensor<64x8xf32>, tensor<8xf32>, tensor<64x8xf32>) -> (tensor<64x8xf32>, tensor<64x1xf32>, tensor<64x1xf32>)
  %c = graph.sub %x, %mean : (tensor<64x8xf32>, tensor<64x1xf32>) -> tensor<64x8xf32>
  %xh = graph.mul %c, %rstd : (tensor<64x8xf32>, tensor<64x1xf32>) -> tensor<64x8xf32>
  %p = graph.mul %xh, %dy : (tensor<64x8xf32>, tensor<64x8xf32>) -> tensor<64x8xf32>
  %ds = graph.reduce_sum %p {axes = array<i64: 0>} : (tensor<64x8xf32>) -> tensor<1x8xf32>
  %dsv = graph.reshape %ds : (tensor<1x8xf32>) -> tensor<8xf32>
  return %dx, %dsv, %dbv, %p : tensor<64x8xf32>, tensor<8xf32>, tensor<8xf32>, tensor<64x8xf32>
}
