// RUN: %dtc-opt %s --pass-pipeline='builtin.module(func.func(dtc-fuse-conv))' | FileCheck %s

// conv -> batch_norm -> relu on parameters: the norm is folded into the
// convolution's weight and bias (graph ops on the parameters), the ReLU
// becomes the convolution's epilogue.
// CHECK-LABEL: func.func @conv_bn_relu
func.func @conv_bn_relu(%x: tensor<2x3x8x8xf32>) -> tensor<2x4x8x8xf32> {
  // CHECK-DAG: %[[W:.*]] = graph.parameter "w"
  // CHECK-DAG: %[[B:.*]] = graph.parameter "b"
  // CHECK-DAG: %[[SCALE:.*]] = graph.parameter "scale"
  // CHECK-DAG: %[[BETA:.*]] = graph.parameter "beta"
  // CHECK-DAG: %[[MEAN:.*]] = graph.parameter "mean"
  // CHECK-DAG: %[[VAR:.*]] = graph.parameter "var"
  // CHECK: %[[EPS:.*]] = graph.constant dense<1.000000e-03> : tensor<f32>
  // CHECK: %[[VE:.*]] = graph.add %[[VAR]], %[[EPS]]
  // CHECK: %[[SQ:.*]] = graph.sqrt %[[VE]]
  // CHECK: %[[S:.*]] = graph.div %[[SCALE]], %[[SQ]]
  // CHECK: %[[COL:.*]] = graph.reshape %[[S]] : (tensor<4xf32>) -> tensor<4x1x1x1xf32>
  // CHECK: %[[W2:.*]] = graph.mul %[[W]], %[[COL]]
  // CHECK: %[[C:.*]] = graph.sub %[[B]], %[[MEAN]]
  // CHECK: %[[CS:.*]] = graph.mul %[[C]], %[[S]]
  // CHECK: %[[B2:.*]] = graph.add %[[CS]], %[[BETA]]
  // CHECK: %[[Y:.*]] = graph.conv2d %arg0, %[[W2]], %[[B2]] {{{.*}}relu{{.*}}}
  // CHECK-NOT: graph.batch_norm
  // CHECK-NOT: graph.relu
  // CHECK: return %[[Y]]
  %w = graph.parameter "w" : tensor<4x3x3x3xf32>
  %b = graph.parameter "b" : tensor<4xf32>
  %scale = graph.parameter "scale" : tensor<4xf32>
  %beta = graph.parameter "beta" : tensor<4xf32>
  %mean = graph.parameter "mean" : tensor<4xf32>
  %var = graph.parameter "var" : tensor<4xf32>
  %c = graph.conv2d %x, %w, %b {dilations = array<i64: 1, 1>, pads = array<i64: 1, 1, 1, 1>, strides = array<i64: 1, 1>} : (tensor<2x3x8x8xf32>, tensor<4x3x3x3xf32>, tensor<4xf32>) -> tensor<2x4x8x8xf32>
  %n = graph.batch_norm %c, %scale, %beta, %mean, %var {epsilon = 1.0e-3 : f64} : (tensor<2x4x8x8xf32>, tensor<4xf32>, tensor<4xf32>, tensor<4xf32>, tensor<4xf32>) -> tensor<2x4x8x8xf32>
  %r = graph.relu %n : (tensor<2x4x8x8xf32>) -> tensor<2x4x8x8xf32>
  return %r : tensor<2x4x8x8xf32>
}

// Without a conv bias the folded bias is beta - mean * s.
// CHECK-LABEL: func.func @conv_without_bias
// CHECK: %[[NEG:.*]] = graph.neg
// CHECK: graph.mul %[[NEG]]
// CHECK: graph.conv2d %arg0, %{{.*}}, %{{.*}} {
// CHECK-NOT: relu
// CHECK-NOT: graph.batch_norm
func.func @conv_without_bias(%x: tensor<1x2x4x4xf32>) -> tensor<1x2x4x4xf32> {
  %w = graph.parameter "w" : tensor<2x2x1x1xf32>
  %p = graph.parameter "p" : tensor<2xf32>
  %c = graph.conv2d %x, %w {dilations = array<i64: 1, 1>, pads = array<i64: 0, 0, 0, 0>, strides = array<i64: 1, 1>} : (tensor<1x2x4x4xf32>, tensor<2x2x1x1xf32>) -> tensor<1x2x4x4xf32>
  %n = graph.batch_norm %c, %p, %p, %p, %p : (tensor<1x2x4x4xf32>, tensor<2xf32>, tensor<2xf32>, tensor<2xf32>, tensor<2xf32>) -> tensor<1x2x4x4xf32>
  return %n : tensor<1x2x4x4xf32>
}

// Not folded: the statistics are graph inputs (not fixed), and a conv whose
// output is also read elsewhere keeps its norm and ReLU apart.
// CHECK-LABEL: func.func @not_fused
// CHECK: graph.conv2d
// CHECK-NOT: relu
// CHECK: graph.batch_norm
// CHECK: graph.conv2d
// CHECK-NOT: relu
// CHECK: graph.relu
func.func @not_fused(%x: tensor<1x2x4x4xf32>, %stats: tensor<2xf32>) -> (tensor<1x2x4x4xf32>, tensor<1x2x4x4xf32>, tensor<1x2x4x4xf32>) {
  %w = graph.parameter "w" : tensor<2x2x1x1xf32>
  %c = graph.conv2d %x, %w {dilations = array<i64: 1, 1>, pads = array<i64: 0, 0, 0, 0>, strides = array<i64: 1, 1>} : (tensor<1x2x4x4xf32>, tensor<2x2x1x1xf32>) -> tensor<1x2x4x4xf32>
  %n = graph.batch_norm %c, %stats, %stats, %stats, %stats : (tensor<1x2x4x4xf32>, tensor<2xf32>, tensor<2xf32>, tensor<2xf32>, tensor<2xf32>) -> tensor<1x2x4x4xf32>
  %c2 = graph.conv2d %x, %w {dilations = array<i64: 1, 1>, pads = array<i64: 0, 0, 0, 0>, strides = array<i64: 1, 1>} : (tensor<1x2x4x4xf32>, tensor<2x2x1x1xf32>) -> tensor<1x2x4x4xf32>
  %r = graph.relu %c2 : (tensor<1x2x4x4xf32>) -> tensor<1x2x4x4xf32>
  return %n, %r, %c2 : tensor<1x2x4x4xf32>, tensor<1x2x4x4xf32>, tensor<1x2x4x4xf32>
}
