// RUN: %dtc-opt %s --pass-pipeline='builtin.module(func.func(dtc-autodiff))' | FileCheck %s

// loss = sum(relu(x @ w) * w2) with w2 used twice: the walk goes backwards
// through each op's own gradient, sums the gradients of a value used twice,
// and returns each parameter's gradient after the loss.
// CHECK-LABEL: func.func @mlp
// CHECK-SAME: -> (tensor<f32>, tensor<2x3xf32> {dtc.gradient_of = "w"}, tensor<4x3xf32> {dtc.gradient_of = "w2"})
func.func @mlp(%x: tensor<4x2xf32>) -> tensor<f32> {
  // CHECK: %[[W:.*]] = graph.parameter "w"
  // CHECK: %[[W2:.*]] = graph.parameter "w2"
  %w = graph.parameter "w" : tensor<2x3xf32>
  %w2 = graph.parameter "w2" : tensor<4x3xf32>
  // CHECK: %[[Y:.*]] = graph.matmul %arg0, %[[W]]
  %y = graph.matmul %x, %w : (tensor<4x2xf32>, tensor<2x3xf32>) -> tensor<4x3xf32>
  %r = graph.relu %y : (tensor<4x3xf32>) -> tensor<4x3xf32>
  %m = graph.mul %r, %w2 : (tensor<4x3xf32>, tensor<4x3xf32>) -> tensor<4x3xf32>
  %a = graph.add %m, %w2 : (tensor<4x3xf32>, tensor<4x3xf32>) -> tensor<4x3xf32>
  %l = graph.reduce_sum %a {axes = array<i64: 0, 1>, keepdims = false} : (tensor<4x3xf32>) -> tensor<f32>
  // The seed, then the reduction's gradient broadcast back.
  // CHECK: %[[ONE:.*]] = graph.constant dense<1.000000e+00> : tensor<f32>
  // CHECK: %[[G0:.*]] = graph.reshape %[[ONE]] : (tensor<f32>) -> tensor<1x1xf32>
  // CHECK: %[[GA:.*]] = graph.broadcast %[[G0]] {shape = array<i64: 4, 3>}
  // mul: d/dr = g * w2, d/dw2 = g * r
  // CHECK: %[[GR:.*]] = graph.mul %[[GA]], %[[W2]]
  // CHECK: %[[GW2A:.*]] = graph.mul %[[GA]], %{{.*}}
  // w2 is used twice: its gradients are summed.
  // CHECK: %[[GW2:.*]] = graph.add %[[GA]], %[[GW2A]]
  // relu: where(y > 0, g, 0)
  // CHECK: %[[POS:.*]] = graph.greater %[[Y]], %{{.*}}
  // CHECK: %[[GY:.*]] = graph.where %[[POS]], %[[GR]], %{{.*}}
  // matmul: d/dw = x^T g
  // CHECK: graph.matmul %[[GY]], %[[W]] {{{.*}}transpose_rhs = true{{.*}}}
  // CHECK: %[[GW:.*]] = graph.matmul %arg0, %[[GY]] {{{.*}}transpose_lhs = true{{.*}}}
  // CHECK: return %{{.*}}, %[[GW]], %[[GW2]]
  return %l : tensor<f32>
}

// Convolution, pooling and embedding gradients are their own ops: the
// transposed convolution, the weight correlation, the pool backward ops,
// scatter_add for gather; the bias gradient is g summed per channel.
// CHECK-LABEL: func.func @cnn
func.func @cnn(%x: tensor<2x3x8x8xf32>, %ids: tensor<2xi64>) -> tensor<f32> {
  %w = graph.parameter "w" : tensor<4x3x3x3xf32>
  %b = graph.parameter "b" : tensor<4xf32>
  %e = graph.parameter "e" : tensor<5x4xf32>
  %c = graph.conv2d %x, %w, %b {strides = array<i64: 1, 1>, pads = array<i64: 1, 1, 1, 1>, dilations = array<i64: 1, 1>} : (tensor<2x3x8x8xf32>, tensor<4x3x3x3xf32>, tensor<4xf32>) -> tensor<2x4x8x8xf32>
  %m = graph.max_pool2d %c {kernel = array<i64: 2, 2>, strides = array<i64: 2, 2>, pads = array<i64: 0, 0, 0, 0>, dilations = array<i64: 1, 1>} : (tensor<2x4x8x8xf32>) -> tensor<2x4x4x4xf32>
  %a = graph.avg_pool2d %m {kernel = array<i64: 2, 2>, strides = array<i64: 2, 2>, pads = array<i64: 0, 0, 0, 0>, dilations = array<i64: 1, 1>} : (tensor<2x4x4x4xf32>) -> tensor<2x4x2x2xf32>
  %s = graph.reduce_mean %a {axes = array<i64: 2, 3>, keepdims = false} : (tensor<2x4x2x2xf32>) -> tensor<2x4xf32>
  %g = graph.gather %e, %ids {axis = 0 : i64} : (tensor<5x4xf32>, tensor<2xi64>) -> tensor<2x4xf32>
  %p = graph.mul %s, %g : (tensor<2x4xf32>, tensor<2x4xf32>) -> tensor<2x4xf32>
  %l = graph.reduce_sum %p {axes = array<i64: 0, 1>, keepdims = false} : (tensor<2x4xf32>) -> tensor<f32>
  // CHECK: %[[GE:.*]] = graph.scatter_add %{{.*}}, %arg1 {axis = 0 : i64} : (tensor<2x4xf32>, tensor<2xi64>) -> tensor<5x4xf32>
  // CHECK: %[[GM:.*]] = graph.avg_pool2d_backward %{{.*}} {{{.*}}kernel = array<i64: 2, 2>{{.*}}} : (tensor<2x4x2x2xf32>) -> tensor<2x4x4x4xf32>
  // CHECK: %[[GC:.*]] = graph.max_pool2d_backward %{{.*}}, %[[GM]] {{{.*}}} : (tensor<2x4x8x8xf32>, tensor<2x4x4x4xf32>) -> tensor<2x4x8x8xf32>
  // CHECK: graph.conv2d_backward_input %[[GC]], %{{.*}} {{{.*}}pads = array<i64: 1, 1, 1, 1>{{.*}}} : (tensor<2x4x8x8xf32>, tensor<4x3x3x3xf32>) -> tensor<2x3x8x8xf32>
  // CHECK: %[[GW:.*]] = graph.conv2d_backward_weight %arg0, %[[GC]] {{{.*}}} : (tensor<2x3x8x8xf32>, tensor<2x4x8x8xf32>) -> tensor<4x3x3x3xf32>
  // CHECK: %[[GB:.*]] = graph.reduce_sum %[[GC]] {axes = array<i64: 0, 2, 3>, keepdims = false} : (tensor<2x4x8x8xf32>) -> tensor<4xf32>
  // CHECK: return %{{.*}}, %[[GW]], %[[GB]], %[[GE]]
  return %l : tensor<f32>
}

// Attention's gradient is one op for q, k and v, reading the output and
// the log-sum-exp (the probabilities are recomputed, not kept).
// CHECK-LABEL: func.func @attention
func.func @attention(%x: tensor<2x4x8xf32>) -> tensor<f32> {
  %w = graph.parameter "w" : tensor<2x4x8xf32>
  %k = graph.mul %x, %w : (tensor<2x4x8xf32>, tensor<2x4x8xf32>) -> tensor<2x4x8xf32>
  // CHECK: %[[O:.*]], %[[LSE:.*]] = graph.attention %arg0, %[[K:.*]], %arg0 {causal = true, scale = 5.000000e-01 : f64}
  %o, %lse = graph.attention %x, %k, %x {causal = true, scale = 0.5 : f64} : (tensor<2x4x8xf32>, tensor<2x4x8xf32>, tensor<2x4x8xf32>) -> (tensor<2x4x8xf32>, tensor<2x4xf32>)
  %l = graph.reduce_sum %o {axes = array<i64: 0, 1, 2>, keepdims = false} : (tensor<2x4x8xf32>) -> tensor<f32>
  // CHECK: %[[G:.*]]:3 = graph.attention_backward %arg0, %[[K]], %arg0, %[[O]], %[[LSE]], %{{.*}} {causal = true, scale = 5.000000e-01 : f64}
  // CHECK: graph.mul %[[G]]#1, %arg0
  return %l : tensor<f32>
}

// Packed, q, k and v are one value: the backward's one result is its
// gradient, which flows on to the projection that made it.
// CHECK-LABEL: func.func @packed_attention
func.func @packed_attention(%x: tensor<2x4x3x2x8xf32>) -> tensor<f32> {
  %w = graph.parameter "w" : tensor<2x4x3x2x8xf32>
  %p = graph.mul %x, %w : (tensor<2x4x3x2x8xf32>, tensor<2x4x3x2x8xf32>) -> tensor<2x4x3x2x8xf32>
  // CHECK: %[[O:.*]], %[[LSE:.*]] = graph.attention %[[P:.*]], %[[P]], %[[P]] {bshd, causal = true, packed, scale = 5.000000e-01 : f64}
  %o, %lse = graph.attention %p, %p, %p {bshd, causal = true, packed, scale = 0.5 : f64} : (tensor<2x4x3x2x8xf32>, tensor<2x4x3x2x8xf32>, tensor<2x4x3x2x8xf32>) -> (tensor<2x4x2x8xf32>, tensor<2x2x4xf32>)
  %l = graph.reduce_sum %o {axes = array<i64: 0, 1, 2, 3>, keepdims = false} : (tensor<2x4x2x8xf32>) -> tensor<f32>
  // CHECK: %[[DP:.*]] = graph.attention_backward %[[P]], %[[P]], %[[P]], %[[O]], %[[LSE]], %{{.*}} {bshd, causal = true, packed, scale = 5.000000e-01 : f64} : ({{.*}}) -> tensor<2x4x3x2x8xf32>
  // CHECK: graph.mul %[[DP]], %arg0
  return %l : tensor<f32>
}

// A rotary embedding's gradient is its backward form on the output's
// gradient, reading the same tables (which get none).
// CHECK-LABEL: func.func @rotary
func.func @rotary(%x: tensor<2x16x8xf32>, %cos: tensor<16x8xf32>, %sin: tensor<16x8xf32>) -> tensor<f32> {
  %w = graph.parameter "w" : tensor<2x16x8xf32>
  %p = graph.mul %x, %w : (tensor<2x16x8xf32>, tensor<2x16x8xf32>) -> tensor<2x16x8xf32>
  // CHECK: %[[R:.*]] = graph.rotary %[[P:.*]], %arg1, %arg2 : (tensor<2x16x8xf32>, tensor<16x8xf32>, tensor<16x8xf32>) -> tensor<2x16x8xf32>
  %r = graph.rotary %p, %cos, %sin : (tensor<2x16x8xf32>, tensor<16x8xf32>, tensor<16x8xf32>) -> tensor<2x16x8xf32>
  %l = graph.reduce_sum %r {axes = array<i64: 0, 1, 2>, keepdims = false} : (tensor<2x16x8xf32>) -> tensor<f32>
  // CHECK: %[[G:.*]] = graph.rotary %{{.*}}, %arg1, %arg2 {backward} : (tensor<2x16x8xf32>, tensor<16x8xf32>, tensor<16x8xf32>) -> tensor<2x16x8xf32>
  // CHECK: graph.mul %[[G]], %arg0
  return %l : tensor<f32>
}

// With a bias (a padding mask read from an input): the backward reads it
// too, and it gets no gradient.
// CHECK-LABEL: func.func @attention_with_bias
func.func @attention_with_bias(%x: tensor<2x4x8xf32>, %mask: tensor<2x1x4xf32>) -> tensor<f32> {
  %w = graph.parameter "w" : tensor<2x4x8xf32>
  %k = graph.mul %x, %w : (tensor<2x4x8xf32>, tensor<2x4x8xf32>) -> tensor<2x4x8xf32>
  // CHECK: %[[O:.*]], %[[LSE:.*]] = graph.attention %arg0, %[[K:.*]], %arg0, %arg1 {scale = 5.000000e-01 : f64}
  %o, %lse = graph.attention %x, %k, %x, %mask {scale = 0.5 : f64} : (tensor<2x4x8xf32>, tensor<2x4x8xf32>, tensor<2x4x8xf32>, tensor<2x1x4xf32>) -> (tensor<2x4x8xf32>, tensor<2x4xf32>)
  %l = graph.reduce_sum %o {axes = array<i64: 0, 1, 2>, keepdims = false} : (tensor<2x4x8xf32>) -> tensor<f32>
  // CHECK: %[[G:.*]]:3 = graph.attention_backward %arg0, %[[K]], %arg0, %[[O]], %[[LSE]], %{{.*}}, %arg1 {scale = 5.000000e-01 : f64}
  // CHECK: graph.mul %[[G]]#1, %arg0
  return %l : tensor<f32>
}

// A bf16 GELU's gradient is computed in f32 and rounded once: its
// constants keep their digits (sqrt(2/pi) would be 0.796875 in bf16).
// CHECK-LABEL: func.func @gelu_bf16
func.func @gelu_bf16(%x: tensor<4x8xbf16>) -> tensor<f32> {
  %w = graph.parameter "w" : tensor<8xbf16>
  %y = graph.mul %x, %w : (tensor<4x8xbf16>, tensor<8xbf16>) -> tensor<4x8xbf16>
  %g = graph.gelu %y {approximate = "tanh"} : (tensor<4x8xbf16>) -> tensor<4x8xbf16>
  %f = graph.cast %g : (tensor<4x8xbf16>) -> tensor<4x8xf32>
  %l = graph.reduce_sum %f {axes = array<i64: 0, 1>, keepdims = false} : (tensor<4x8xf32>) -> tensor<f32>
  // CHECK: %[[Y:.*]] = graph.mul %arg0, %{{.*}} : (tensor<4x8xbf16>, tensor<8xbf16>) -> tensor<4x8xbf16>
  // CHECK: %[[G:.*]] = graph.cast %{{.*}} : (tensor<4x8xf32>) -> tensor<4x8xbf16>
  // CHECK: %[[X32:.*]] = graph.cast %[[Y]] : (tensor<4x8xbf16>) -> tensor<4x8xf32>
  // CHECK: %[[G32:.*]] = graph.cast %[[G]] : (tensor<4x8xbf16>) -> tensor<4x8xf32>
  // CHECK: graph.constant dense<0.797884583> : tensor<f32>
  // CHECK: %[[D:.*]] = graph.mul %[[G32]], %{{.*}} : (tensor<4x8xf32>, tensor<4x8xf32>) -> tensor<4x8xf32>
  // CHECK: graph.cast %[[D]] : (tensor<4x8xf32>) -> tensor<4x8xbf16>
  return %l : tensor<f32>
}
