// RUN: not %dtc-opt %s --pass-pipeline='builtin.module(func.func(dtc-autodiff))' --split-input-file 2>&1 | FileCheck %s

// CHECK: the loss must be a float scalar, got 'tensor<4xf32>'
func.func @not_scalar(%x: tensor<4xf32>) -> tensor<4xf32> {
  return %x : tensor<4xf32>
}

// -----

// An op on the loss's path whose gradient is not defined says so.
// CHECK: the gradient of 'graph.max_pool2d' is not defined yet
func.func @pool(%x: tensor<1x1x4x4xf32>) -> tensor<f32> {
  %w = graph.parameter "w" : tensor<1x1x4x4xf32>
  %m = graph.mul %x, %w : (tensor<1x1x4x4xf32>, tensor<1x1x4x4xf32>) -> tensor<1x1x4x4xf32>
  %p = graph.max_pool2d %m {kernel = array<i64: 2, 2>, strides = array<i64: 2, 2>, pads = array<i64: 0, 0, 0, 0>, dilations = array<i64: 1, 1>} : (tensor<1x1x4x4xf32>) -> tensor<1x1x2x2xf32>
  %l = graph.reduce_sum %p {axes = array<i64: 0, 1, 2, 3>, keepdims = false} : (tensor<1x1x2x2xf32>) -> tensor<f32>
  return %l : tensor<f32>
}
