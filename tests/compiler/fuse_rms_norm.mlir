// RUN: %dtc-opt %s --pass-pipeline='builtin.module(func.func(dtc-fuse-rms-norm))' | FileCheck %s

// Llama's RMSNorm as the default exporter writes it (an fp32 model):
// weight * (x * reciprocal(sqrt(mean(x^2 over the last dim) + eps))).
// CHECK-LABEL: func.func @llama
// CHECK-SAME: dtc.notes = ["fusion: 1 RMSNorms written out in ops computed as one rms layer_norm each (statistics in f32)"]
// CHECK-NOT: graph.mul
// CHECK: %[[N:.*]] = graph.layer_norm %arg0, %arg1 {axis = 2 : i64, epsilon = 9.9999999747524271E-7 : f64, rms} : (tensor<2x4x8xf32>, tensor<8xf32>) -> tensor<2x4x8xf32>
// CHECK-NEXT: return %[[N]]
func.func @llama(%x: tensor<2x4x8xf32>, %w: tensor<8xf32>) -> tensor<2x4x8xf32> {
  %two = graph.constant dense<2.000000e+00> : tensor<f32>
  %eps = graph.constant dense<9.99999997e-07> : tensor<f32>
  %0 = graph.pow %x, %two : (tensor<2x4x8xf32>, tensor<f32>) -> tensor<2x4x8xf32>
  %1 = graph.reduce_mean %0 {axes = array<i64: 2>} : (tensor<2x4x8xf32>) -> tensor<2x4x1xf32>
  %2 = graph.add %1, %eps : (tensor<2x4x1xf32>, tensor<f32>) -> tensor<2x4x1xf32>
  %3 = graph.sqrt %2 : (tensor<2x4x1xf32>) -> tensor<2x4x1xf32>
  %4 = graph.reciprocal %3 : (tensor<2x4x1xf32>) -> tensor<2x4x1xf32>
  %5 = graph.mul %x, %4 : (tensor<2x4x8xf32>, tensor<2x4x1xf32>) -> tensor<2x4x8xf32>
  %6 = graph.mul %w, %5 : (tensor<8xf32>, tensor<2x4x8xf32>) -> tensor<2x4x8xf32>
  return %6 : tensor<2x4x8xf32>
}

// A bf16 model: the statistics in f32 (x widened, the row cast back), the
// inverse as 1 / sqrt, the square as x * x, the weight on the right: one
// bf16 rms layer_norm of x itself (the widening cast is left dead).
// CHECK-LABEL: func.func @bf16_statistics_in_f32
// CHECK-NOT: graph.reduce_mean
// CHECK: %[[N:.*]] = graph.layer_norm %arg0, %arg1 {axis = 1 : i64, epsilon = 9.9999997473787516E-6 : f64, rms} : (tensor<4x8xbf16>, tensor<8xbf16>) -> tensor<4x8xbf16>
// CHECK-NOT: graph.mul
// CHECK: return %[[N]]
func.func @bf16_statistics_in_f32(%x: tensor<4x8xbf16>, %w: tensor<8xbf16>) -> tensor<4x8xbf16> {
  %one = graph.constant dense<1.000000e+00> : tensor<f32>
  %eps = graph.constant dense<1.000000e-05> : tensor<1xf32>
  %wide = graph.cast %x : (tensor<4x8xbf16>) -> tensor<4x8xf32>
  %0 = graph.mul %wide, %wide : (tensor<4x8xf32>, tensor<4x8xf32>) -> tensor<4x8xf32>
  %1 = graph.reduce_mean %0 {axes = array<i64: 1>} : (tensor<4x8xf32>) -> tensor<4x1xf32>
  %2 = graph.add %eps, %1 : (tensor<1xf32>, tensor<4x1xf32>) -> tensor<4x1xf32>
  %3 = graph.sqrt %2 : (tensor<4x1xf32>) -> tensor<4x1xf32>
  %4 = graph.div %one, %3 : (tensor<f32>, tensor<4x1xf32>) -> tensor<4x1xf32>
  %5 = graph.mul %4, %wide : (tensor<4x1xf32>, tensor<4x8xf32>) -> tensor<4x8xf32>
  %6 = graph.cast %5 : (tensor<4x8xf32>) -> tensor<4x8xbf16>
  %7 = graph.mul %6, %w : (tensor<4x8xbf16>, tensor<8xbf16>) -> tensor<4x8xbf16>
  return %7 : tensor<4x8xbf16>
}

// x / sqrt(mean(x^2) + eps) over the two trailing dims.
// CHECK-LABEL: func.func @divided_two_dims
// CHECK: graph.layer_norm %arg0, %arg1 {axis = 1 : i64, epsilon = 9.9999997473787516E-6 : f64, rms} : (tensor<2x3x4xf32>, tensor<3x4xf32>) -> tensor<2x3x4xf32>
// CHECK-NOT: graph.div
func.func @divided_two_dims(%x: tensor<2x3x4xf32>, %w: tensor<3x4xf32>) -> tensor<2x3x4xf32> {
  %two = graph.constant dense<2.000000e+00> : tensor<f32>
  %eps = graph.constant dense<1.000000e-05> : tensor<f32>
  %0 = graph.pow %x, %two : (tensor<2x3x4xf32>, tensor<f32>) -> tensor<2x3x4xf32>
  %1 = graph.reduce_mean %0 {axes = array<i64: 2, 1>} : (tensor<2x3x4xf32>) -> tensor<2x1x1xf32>
  %2 = graph.add %1, %eps : (tensor<2x1x1xf32>, tensor<f32>) -> tensor<2x1x1xf32>
  %3 = graph.sqrt %2 : (tensor<2x1x1xf32>) -> tensor<2x1x1xf32>
  %4 = graph.div %x, %3 : (tensor<2x3x4xf32>, tensor<2x1x1xf32>) -> tensor<2x3x4xf32>
  %5 = graph.mul %4, %w : (tensor<2x3x4xf32>, tensor<3x4xf32>) -> tensor<2x3x4xf32>
  return %5 : tensor<2x3x4xf32>
}

// Left as written: a weight that broadcasts onto the row, a mean over a
// dim that is not trailing, an inverse root read elsewhere too (as
// SimplifiedLayerNormalization's second output), and the square of
// another tensor.
// CHECK-LABEL: func.func @not_rms_norms
// CHECK-NOT: graph.layer_norm
// CHECK: return
func.func @not_rms_norms(%x: tensor<2x4x8xf32>, %y: tensor<2x4x8xf32>, %wb: tensor<1x1x8xf32>, %w: tensor<8xf32>, %w4: tensor<4x8xf32>) -> (tensor<2x4x8xf32>, tensor<2x4x8xf32>, tensor<2x4x8xf32>, tensor<2x4x1xf32>, tensor<2x4x8xf32>) {
  %two = graph.constant dense<2.000000e+00> : tensor<f32>
  %eps = graph.constant dense<1.000000e-05> : tensor<f32>
  %a0 = graph.pow %x, %two : (tensor<2x4x8xf32>, tensor<f32>) -> tensor<2x4x8xf32>
  %a1 = graph.reduce_mean %a0 {axes = array<i64: 2>} : (tensor<2x4x8xf32>) -> tensor<2x4x1xf32>
  %a2 = graph.add %a1, %eps : (tensor<2x4x1xf32>, tensor<f32>) -> tensor<2x4x1xf32>
  %a3 = graph.sqrt %a2 : (tensor<2x4x1xf32>) -> tensor<2x4x1xf32>
  %a4 = graph.reciprocal %a3 : (tensor<2x4x1xf32>) -> tensor<2x4x1xf32>
  %a5 = graph.mul %x, %a4 : (tensor<2x4x8xf32>, tensor<2x4x1xf32>) -> tensor<2x4x8xf32>
  %a6 = graph.mul %wb, %a5 : (tensor<1x1x8xf32>, tensor<2x4x8xf32>) -> tensor<2x4x8xf32>
  %b0 = graph.pow %x, %two : (tensor<2x4x8xf32>, tensor<f32>) -> tensor<2x4x8xf32>
  %b1 = graph.reduce_mean %b0 {axes = array<i64: 1>} : (tensor<2x4x8xf32>) -> tensor<2x1x8xf32>
  %b2 = graph.add %b1, %eps : (tensor<2x1x8xf32>, tensor<f32>) -> tensor<2x1x8xf32>
  %b3 = graph.sqrt %b2 : (tensor<2x1x8xf32>) -> tensor<2x1x8xf32>
  %b4 = graph.reciprocal %b3 : (tensor<2x1x8xf32>) -> tensor<2x1x8xf32>
  %b5 = graph.mul %x, %b4 : (tensor<2x4x8xf32>, tensor<2x1x8xf32>) -> tensor<2x4x8xf32>
  %b6 = graph.mul %w4, %b5 : (tensor<4x8xf32>, tensor<2x4x8xf32>) -> tensor<2x4x8xf32>
  %c0 = graph.pow %x, %two : (tensor<2x4x8xf32>, tensor<f32>) -> tensor<2x4x8xf32>
  %c1 = graph.reduce_mean %c0 {axes = array<i64: 2>} : (tensor<2x4x8xf32>) -> tensor<2x4x1xf32>
  %c2 = graph.add %c1, %eps : (tensor<2x4x1xf32>, tensor<f32>) -> tensor<2x4x1xf32>
  %c3 = graph.sqrt %c2 : (tensor<2x4x1xf32>) -> tensor<2x4x1xf32>
  %c4 = graph.reciprocal %c3 : (tensor<2x4x1xf32>) -> tensor<2x4x1xf32>
  %c5 = graph.mul %x, %c4 : (tensor<2x4x8xf32>, tensor<2x4x1xf32>) -> tensor<2x4x8xf32>
  %c6 = graph.mul %w, %c5 : (tensor<8xf32>, tensor<2x4x8xf32>) -> tensor<2x4x8xf32>
  %d0 = graph.pow %y, %two : (tensor<2x4x8xf32>, tensor<f32>) -> tensor<2x4x8xf32>
  %d1 = graph.reduce_mean %d0 {axes = array<i64: 2>} : (tensor<2x4x8xf32>) -> tensor<2x4x1xf32>
  %d2 = graph.add %d1, %eps : (tensor<2x4x1xf32>, tensor<f32>) -> tensor<2x4x1xf32>
  %d3 = graph.sqrt %d2 : (tensor<2x4x1xf32>) -> tensor<2x4x1xf32>
  %d4 = graph.reciprocal %d3 : (tensor<2x4x1xf32>) -> tensor<2x4x1xf32>
  %d5 = graph.mul %x, %d4 : (tensor<2x4x8xf32>, tensor<2x4x1xf32>) -> tensor<2x4x8xf32>
  %d6 = graph.mul %w, %d5 : (tensor<8xf32>, tensor<2x4x8xf32>) -> tensor<2x4x8xf32>
  return %a6, %b6, %c6, %c4, %d6 : tensor<2x4x8xf32>, tensor<2x4x8xf32>, tensor<2x4x8xf32>, tensor<2x4x1xf32>, tensor<2x4x8xf32>
}
