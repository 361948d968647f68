// RUN: %dtc-opt %s --split-input-file --dtc-build-training-step="precision=bf16" | FileCheck %s

// Mixed precision: the model computes in bf16 between casts of the f32
// weights and inputs. A bias's gradient is the batch's sum of the output's
// gradient: the sum reads bf16 and keeps its f32 accumulator (no bf16
// rounding and cast back), through the reshape to the bias's shape. The
// weight's gradient, a product of bf16 operands (a sum over the batch too),
// keeps its f32 result for AdamW.
// CHECK-LABEL: func.func @main
// CHECK-SAME: 2 weight gradients that are sums (linear layers' products, biases', norms', embeddings') accumulate straight into fp32
// CHECK: %[[SUM:.*]] = graph.reduce_sum %{{.*}} {axes = array<i64: 0>, dtc.weight_gradient} : (tensor<4x3xbf16>) -> tensor<1x3xf32>
// CHECK: %[[BIASGRAD:.*]] = graph.reshape %[[SUM]] {dtc.weight_gradient} : (tensor<1x3xf32>) -> tensor<3xf32>
// CHECK: %[[PRODUCT:.*]] = graph.matmul %{{.*}}, %{{.*}} {dtc.weight_gradient, transpose_lhs = true} : (tensor<4x8xbf16>, tensor<4x3xbf16>) -> tensor<8x3xf32>
// CHECK-NOT: graph.cast %[[PRODUCT]]
// CHECK-NOT: graph.cast %[[SUM]]
// CHECK-NOT: graph.cast %[[BIASGRAD]]
func.func @main(%x: tensor<4x8xf32> {graph.name = "x"}) -> (tensor<4x3xf32> {graph.name = "logits"}) {
  %w = graph.parameter "w" : tensor<8x3xf32>
  %b = graph.parameter "b" : tensor<3xf32>
  %y = graph.matmul %x, %w : (tensor<4x8xf32>, tensor<8x3xf32>) -> tensor<4x3xf32>
  %z = graph.add %y, %b : (tensor<4x3xf32>, tensor<3xf32>) -> tensor<4x3xf32>
  return %z : tensor<4x3xf32>
}

// -----

// Embeddings: a position table's gradient (the batch's sum, scattered to
// the positions) is f32 from its first sum on; a tied table's is its
// scatter-add, into f32, plus the output layer's product, also into f32.
// CHECK-LABEL: func.func @main
// CHECK-SAME: 2 weight gradients that are sums (linear layers' products, biases', norms', embeddings') accumulate straight into fp32
// CHECK: %[[DX:.*]] = graph.matmul %{{.*}}, %{{.*}} : (tensor<2x4x10xbf16>, tensor<10x8xbf16>) -> tensor<2x4x8xbf16>
// CHECK: %[[DW:.*]] = graph.matmul %{{.*}}, %{{.*}} {transpose_lhs = true} : (tensor<8x10xbf16>, tensor<8x8xbf16>) -> tensor<10x8xf32>
// CHECK: graph.reduce_sum %[[DX]] {{.*}} : (tensor<2x4x8xbf16>) -> tensor<1x4x8xf32>
// CHECK: graph.scatter_add %{{.*}}, %{{.*}} {{.*}} : (tensor<4x8xf32>, tensor<4xi64>) -> tensor<4x8xf32>
// CHECK: %[[ROWS:.*]] = graph.scatter_add %[[DX]], %arg0 {axis = 0 : i64} : (tensor<2x4x8xbf16>, tensor<2x4xi64>) -> tensor<10x8xf32>
// CHECK: graph.add %[[DW]], %[[ROWS]] {dtc.weight_gradient} : (tensor<10x8xf32>, tensor<10x8xf32>) -> tensor<10x8xf32>
func.func @main(%ids: tensor<2x4xi64> {graph.name = "ids"}) -> (tensor<2x4x10xf32> {graph.name = "logits"}) {
  %wte = graph.parameter "wte" : tensor<10x8xf32>
  %wpe = graph.parameter "wpe" : tensor<4x8xf32>
  %pos = graph.constant dense<[0, 1, 2, 3]> : tensor<4xi64>
  %e = graph.gather %wte, %ids {axis = 0 : i64} : (tensor<10x8xf32>, tensor<2x4xi64>) -> tensor<2x4x8xf32>
  %p = graph.gather %wpe, %pos {axis = 0 : i64} : (tensor<4x8xf32>, tensor<4xi64>) -> tensor<4x8xf32>
  %h = graph.add %e, %p : (tensor<2x4x8xf32>, tensor<4x8xf32>) -> tensor<2x4x8xf32>
  %y = graph.matmul %h, %wte {transpose_rhs = true} : (tensor<2x4x8xf32>, tensor<10x8xf32>) -> tensor<2x4x10xf32>
  return %y : tensor<2x4x10xf32>
}

// -----

// Tables stay f32: rotary angles made of integer positions and a frozen
// inverse frequency (no trained weight, no float input), and their cosines,
// are computed in f32 (a position past 256 is not exact in bf16) and cast
// once where the bf16 activations read them. The frozen parameter is read
// as it is, not cast.
// CHECK-LABEL: func.func @main
// CHECK-SAME: 1 table computed from positions and constants alone (rotary cos and sin, masks) stays fp32 until activations read it
// CHECK: %[[FREQ:.*]] = graph.parameter "inv_freq"
// CHECK-NOT: graph.cast %[[FREQ]]
// CHECK: %[[ANGLE:.*]] = graph.mul %{{.*}}, %[[FREQ]] : (tensor<4x1xf32>, tensor<8xf32>) -> tensor<4x8xf32>
// CHECK: %[[COS:.*]] = graph.cos %[[ANGLE]] : (tensor<4x8xf32>) -> tensor<4x8xf32>
// CHECK: %[[NARROW:.*]] = graph.cast %[[COS]] : (tensor<4x8xf32>) -> tensor<4x8xbf16>
// CHECK: graph.mul %{{.*}}, %[[NARROW]] : (tensor<4x8xbf16>, tensor<4x8xbf16>) -> tensor<4x8xbf16>
func.func @main(%x: tensor<4x8xf32> {graph.name = "x"}, %pos: tensor<4xi64> {graph.name = "position_ids"}) -> (tensor<4x8xf32> {graph.name = "logits"}) {
  %f = graph.parameter "inv_freq" {frozen = "a rotary embedding's inverse frequencies"} : tensor<8xf32>
  %w = graph.parameter "w" : tensor<8x8xf32>
  %p = graph.cast %pos : (tensor<4xi64>) -> tensor<4xf32>
  %column = graph.reshape %p : (tensor<4xf32>) -> tensor<4x1xf32>
  %angle = graph.mul %column, %f : (tensor<4x1xf32>, tensor<8xf32>) -> tensor<4x8xf32>
  %c = graph.cos %angle : (tensor<4x8xf32>) -> tensor<4x8xf32>
  %y = graph.matmul %x, %w : (tensor<4x8xf32>, tensor<8x8xf32>) -> tensor<4x8xf32>
  %z = graph.mul %y, %c : (tensor<4x8xf32>, tensor<4x8xf32>) -> tensor<4x8xf32>
  return %z : tensor<4x8xf32>
}
