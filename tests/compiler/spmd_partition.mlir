// RUN: %dtc-opt %s --dtc-spmd-partition --split-input-file --verify-diagnostics | FileCheck %s

// Data parallel: the batch split over the mesh flows through the forward;
// the mean loss is an all-reduced sum divided by the ranks, the weight
// gradient (batch is its matmul's reduction) is all-reduced.
// CHECK-LABEL: func.func @main
// CHECK-SAME: (%arg0: tensor<2x16xf32> {dtc.sharding = [array<i64: 0>, array<i64>]}, %arg1: tensor<2x4xf32>
// CHECK: graph.parameter "w" : tensor<16x4xf32>
// CHECK: graph.matmul %arg0, %0 : (tensor<2x16xf32>, tensor<16x4xf32>) -> tensor<2x4xf32>
// CHECK: %[[MEAN:.*]] = graph.reduce_mean {{.*}} -> tensor<f32>
// CHECK: %[[SUM:.*]] = mesh.all_reduce %[[MEAN]] on @mesh mesh_axes = [0] : tensor<f32> -> tensor<f32>
// CHECK: %[[FOUR:.*]] = graph.constant dense<4.000000e+00> : tensor<f32>
// CHECK: %[[LOSS:.*]] = graph.div %[[SUM]], %[[FOUR]]
// CHECK: %[[GW:.*]] = graph.matmul %arg0, {{.*}} {transpose_lhs = true} : (tensor<2x16xf32>, tensor<2x4xf32>) -> tensor<16x4xf32>
// CHECK: %[[GWS:.*]] = mesh.all_reduce %[[GW]] on @mesh mesh_axes = [0] : tensor<16x4xf32> -> tensor<16x4xf32>
// CHECK: return %[[LOSS]], %[[GWS]]
module {
  mesh.mesh @mesh(shape = 4)
  func.func @main(%x: tensor<8x16xf32> {dtc.sharding = [array<i64: 0>, array<i64>]}, %y: tensor<8x4xf32> {dtc.sharding = [array<i64: 0>, array<i64>]}) -> (tensor<f32>, tensor<16x4xf32>) {
    %w = graph.parameter "w" : tensor<16x4xf32>
    %h = graph.matmul %x, %w : (tensor<8x16xf32>, tensor<16x4xf32>) -> tensor<8x4xf32>
    %d = graph.sub %h, %y : (tensor<8x4xf32>, tensor<8x4xf32>) -> tensor<8x4xf32>
    %sq = graph.mul %d, %d : (tensor<8x4xf32>, tensor<8x4xf32>) -> tensor<8x4xf32>
    %loss = graph.reduce_mean %sq {axes = array<i64: 0, 1>, keepdims = false} : (tensor<8x4xf32>) -> tensor<f32>
    %gw = graph.matmul %x, %d {transpose_lhs = true} : (tensor<8x16xf32>, tensor<8x4xf32>) -> tensor<16x4xf32>
    return %loss, %gw : tensor<f32>, tensor<16x4xf32>
  }
}

// -----

// A 2-D mesh; a softmax cannot split its axis, so the columns split over
// axis 1 are gathered first; rows stay split over axis 0 until the result,
// which every rank holds whole. A splat constant is cut locally; a
// reshape carries the row split into its merged dim.
// CHECK-LABEL: func.func @main
// CHECK-SAME: (%arg0: tensor<4x3x8xf32>
// CHECK: %[[G:.*]] = mesh.all_gather %arg0 on @mesh mesh_axes = [1] gather_axis = 2 : tensor<4x3x8xf32> -> tensor<4x3x16xf32>
// CHECK: %[[S:.*]] = graph.softmax %[[G]] {axis = 2 : i64} : (tensor<4x3x16xf32>) -> tensor<4x3x16xf32>
// CHECK: graph.constant dense<2.000000e+00> : tensor<4x3x16xf32>
// CHECK: %[[R:.*]] = graph.reshape {{.*}} : (tensor<4x3x16xf32>) -> tensor<12x16xf32>
// CHECK: mesh.all_gather %[[R]] on @mesh mesh_axes = [0] gather_axis = 0 : tensor<12x16xf32> -> tensor<24x16xf32>
module {
  mesh.mesh @mesh(shape = 2x2)
  func.func @main(%x: tensor<8x3x16xf32> {dtc.sharding = [array<i64: 0>, array<i64>, array<i64: 1>]}) -> tensor<24x16xf32> {
    %s = graph.softmax %x {axis = 2 : i64} : (tensor<8x3x16xf32>) -> tensor<8x3x16xf32>
    %two = graph.constant dense<2.0> : tensor<8x3x16xf32>
    %m = graph.mul %s, %two : (tensor<8x3x16xf32>, tensor<8x3x16xf32>) -> tensor<8x3x16xf32>
    %r = graph.reshape %m : (tensor<8x3x16xf32>) -> tensor<24x16xf32>
    return %r : tensor<24x16xf32>
  }
}

// -----

module {
  mesh.mesh @mesh(shape = 4)
  // expected-error @+1 {{dim 0 of size 6 cannot be split into 4 equal parts}}
  func.func @main(%x: tensor<6x2xf32> {dtc.sharding = [array<i64: 0>, array<i64>]}) -> tensor<6x2xf32> {
    return %x : tensor<6x2xf32>
  }
}
