// RUN: %dtc-opt %s --pass-pipeline='builtin.module(func.func(dtc-channels-last))' | FileCheck %s

// conv -> relu -> max_pool -> conv -> global average: one transpose into
// NHWC at the start; the ReLU and the reduction run on NHWC data, and the
// transpose after the reduction moves only size-1 dims, so it is a reshape.
// CHECK-LABEL: func.func @chain
func.func @chain(%x: tensor<2x3x8x8xf32>, %w: tensor<4x3x3x3xf32>,
                 %w2: tensor<5x4x1x1xf32>) -> tensor<2x5x1x1xf32> {
  // CHECK: %[[T:.*]] = graph.transpose %arg0 {perm = array<i64: 0, 2, 3, 1>} : (tensor<2x3x8x8xf32>) -> tensor<2x8x8x3xf32>
  // CHECK: %[[C:.*]] = graph.conv2d %[[T]], %arg1 {channels_last{{.*}}} : (tensor<2x8x8x3xf32>, tensor<4x3x3x3xf32>) -> tensor<2x8x8x4xf32>
  // CHECK: %[[R:.*]] = graph.relu %[[C]] : (tensor<2x8x8x4xf32>) -> tensor<2x8x8x4xf32>
  // CHECK: %[[P:.*]] = graph.max_pool2d %[[R]] {channels_last{{.*}}} : (tensor<2x8x8x4xf32>) -> tensor<2x4x4x4xf32>
  // CHECK: %[[C2:.*]] = graph.conv2d %[[P]], %arg2 {channels_last{{.*}}} : (tensor<2x4x4x4xf32>, tensor<5x4x1x1xf32>) -> tensor<2x4x4x5xf32>
  // CHECK: %[[M:.*]] = graph.reduce_mean %[[C2]] {axes = array<i64: 1, 2>} : (tensor<2x4x4x5xf32>) -> tensor<2x1x1x5xf32>
  // CHECK: %[[Y:.*]] = graph.reshape %[[M]] : (tensor<2x1x1x5xf32>) -> tensor<2x5x1x1xf32>
  // CHECK-NOT: graph.transpose
  // CHECK: return %[[Y]]
  %c = graph.conv2d %x, %w {strides = array<i64: 1, 1>, pads = array<i64: 1, 1, 1, 1>, dilations = array<i64: 1, 1>} : (tensor<2x3x8x8xf32>, tensor<4x3x3x3xf32>) -> tensor<2x4x8x8xf32>
  %r = graph.relu %c : (tensor<2x4x8x8xf32>) -> tensor<2x4x8x8xf32>
  %p = graph.max_pool2d %r {kernel = array<i64: 2, 2>, strides = array<i64: 2, 2>, pads = array<i64: 0, 0, 0, 0>, dilations = array<i64: 1, 1>} : (tensor<2x4x8x8xf32>) -> tensor<2x4x4x4xf32>
  %c2 = graph.conv2d %p, %w2 {strides = array<i64: 1, 1>, pads = array<i64: 0, 0, 0, 0>, dilations = array<i64: 1, 1>} : (tensor<2x4x4x4xf32>, tensor<5x4x1x1xf32>) -> tensor<2x5x4x4xf32>
  %m = graph.reduce_mean %c2 {axes = array<i64: 2, 3>} : (tensor<2x5x4x4xf32>) -> tensor<2x5x1x1xf32>
  return %m : tensor<2x5x1x1xf32>
}

// A residual add of two NHWC results stays NHWC; a reduction without
// keepdims gets the transpose of the dims it keeps.
// CHECK-LABEL: func.func @residual
func.func @residual(%x: tensor<1x4x6x6xf32>, %w: tensor<4x4x3x3xf32>) -> tensor<4x6xf32> {
  // CHECK: %[[T:.*]] = graph.transpose %arg0 {perm = array<i64: 0, 2, 3, 1>}
  // CHECK: %[[A:.*]] = graph.conv2d %[[T]], %arg1 {channels_last
  // CHECK: %[[B:.*]] = graph.conv2d %[[A]], %arg1 {channels_last
  // CHECK: %[[S:.*]] = graph.add %[[A]], %[[B]] : (tensor<1x6x6x4xf32>, tensor<1x6x6x4xf32>) -> tensor<1x6x6x4xf32>
  // CHECK: %[[SUM:.*]] = graph.reduce_sum %[[S]] {axes = array<i64: 0, 2>, keepdims = false} : (tensor<1x6x6x4xf32>) -> tensor<6x4xf32>
  // CHECK: %[[ST:.*]] = graph.transpose %[[SUM]] {perm = array<i64: 1, 0>} : (tensor<6x4xf32>) -> tensor<4x6xf32>
  // CHECK: return %[[ST]]
  %a = graph.conv2d %x, %w {strides = array<i64: 1, 1>, pads = array<i64: 1, 1, 1, 1>, dilations = array<i64: 1, 1>} : (tensor<1x4x6x6xf32>, tensor<4x4x3x3xf32>) -> tensor<1x4x6x6xf32>
  %b = graph.conv2d %a, %w {strides = array<i64: 1, 1>, pads = array<i64: 1, 1, 1, 1>, dilations = array<i64: 1, 1>} : (tensor<1x4x6x6xf32>, tensor<4x4x3x3xf32>) -> tensor<1x4x6x6xf32>
  %s = graph.add %a, %b : (tensor<1x4x6x6xf32>, tensor<1x4x6x6xf32>) -> tensor<1x4x6x6xf32>
  %sum = graph.reduce_sum %s {axes = array<i64: 0, 3>, keepdims = false} : (tensor<1x4x6x6xf32>) -> tensor<4x6xf32>
  return %sum : tensor<4x6xf32>
}

// A value also used as NCHW keeps its transpose back, which the reduction
// then reads as is (moving the transpose would copy twice).
// CHECK-LABEL: func.func @shared
func.func @shared(%x: tensor<1x4x6x6xf32>, %w: tensor<4x4x3x3xf32>)
    -> (tensor<1x4x6x6xf32>, tensor<1x4x1x1xf32>) {
  // CHECK: %[[A:.*]] = graph.conv2d {{.*}}channels_last
  // CHECK: %[[BACK:.*]] = graph.transpose %[[A]] {perm = array<i64: 0, 3, 1, 2>}
  // CHECK: %[[M:.*]] = graph.reduce_max %[[BACK]] {axes = array<i64: 2, 3>}
  // CHECK: return %[[BACK]], %[[M]]
  %a = graph.conv2d %x, %w {strides = array<i64: 1, 1>, pads = array<i64: 1, 1, 1, 1>, dilations = array<i64: 1, 1>} : (tensor<1x4x6x6xf32>, tensor<4x4x3x3xf32>) -> tensor<1x4x6x6xf32>
  %m = graph.reduce_max %a {axes = array<i64: 2, 3>} : (tensor<1x4x6x6xf32>) -> tensor<1x4x1x1xf32>
  return %a, %m : tensor<1x4x6x6xf32>, tensor<1x4x1x1xf32>
}

// Pools of other element types stay NCHW (the CPU kernels are f32).
// CHECK-LABEL: func.func @f64_pool
func.func @f64_pool(%x: tensor<1x2x4x4xf64>) -> tensor<1x2x2x2xf64> {
  // CHECK-NOT: graph.transpose
  // CHECK: graph.max_pool2d %arg0 {
  // CHECK-NOT: channels_last
  %p = graph.max_pool2d %x {kernel = array<i64: 2, 2>, strides = array<i64: 2, 2>, pads = array<i64: 0, 0, 0, 0>, dilations = array<i64: 1, 1>} : (tensor<1x2x4x4xf64>) -> tensor<1x2x2x2xf64>
  return %p : tensor<1x2x2x2xf64>
}
