// RUN: not %dtc-opt %s --pass-pipeline='builtin.module(func.func(dtc-autodiff))' --split-input-file 2>&1 | FileCheck %s

// CHECK: the loss must be a float scalar, got 'tensor<4xf32>'
func.func @not_scalar(%x: tensor<4xf32>) -> tensor<4xf32> {
  return %x : tensor<4xf32>
}

// -----

// An op on the loss's path whose gradient is not defined says so (batch
// norm with frozen statistics: training expands it first).
// CHECK: the gradient of 'graph.batch_norm' is not defined yet
func.func @frozen_norm(%x: tensor<2x3x4x4xf32>, %s: tensor<3xf32>, %b: tensor<3xf32>, %m: tensor<3xf32>, %v: tensor<3xf32>) -> tensor<f32> {
  %w = graph.parameter "w" : tensor<2x3x4x4xf32>
  %y = graph.mul %x, %w : (tensor<2x3x4x4xf32>, tensor<2x3x4x4xf32>) -> tensor<2x3x4x4xf32>
  %n = graph.batch_norm %y, %s, %b, %m, %v : (tensor<2x3x4x4xf32>, tensor<3xf32>, tensor<3xf32>, tensor<3xf32>, tensor<3xf32>) -> tensor<2x3x4x4xf32>
  %l = graph.reduce_sum %n {axes = array<i64: 0, 1, 2, 3>, keepdims = false} : (tensor<2x3x4x4xf32>) -> tensor<f32>
  return %l : tensor<f32>
}

// -----

// A loss that reads attention's log-sum-exp: its gradient is not defined.
// CHECK: 'graph.attention' op has no gradient through its log-sum-exp result
func.func @lse_in_loss(%x: tensor<2x4x8xf32>) -> tensor<f32> {
  %w = graph.parameter "w" : tensor<2x4x8xf32>
  %k = graph.mul %x, %w : (tensor<2x4x8xf32>, tensor<2x4x8xf32>) -> tensor<2x4x8xf32>
  %o, %lse = graph.attention %x, %k, %x {scale = 0.5 : f64} : (tensor<2x4x8xf32>, tensor<2x4x8xf32>, tensor<2x4x8xf32>) -> (tensor<2x4x8xf32>, tensor<2x4xf32>)
  %l = graph.reduce_sum %lse {axes = array<i64: 0, 1>, keepdims = false} : (tensor<2x4xf32>) -> tensor<f32>
  return %l : tensor<f32>
}
