// RUN: %dtc-opt %s --dtc-build-training-step="precision=bf16" | FileCheck %s

// Mixed precision: the model computes in bf16 between casts of the f32
// weights and inputs. A bias's gradient is the batch's sum of the output's
// gradient: the sum reads bf16 and keeps its f32 accumulator (no bf16
// rounding and cast back), through the reshape to the bias's shape. The
// weight's gradient, a bf16 product, is cast to f32 for AdamW.
// CHECK-LABEL: func.func @main
// CHECK-SAME: 1 weight gradients that are sums over the batch (biases', norms') accumulate straight into fp32
// CHECK: %[[SUM:.*]] = graph.reduce_sum %{{.*}} {axes = array<i64: 0>, dtc.weight_gradient} : (tensor<4x3xbf16>) -> tensor<1x3xf32>
// CHECK: %[[BIASGRAD:.*]] = graph.reshape %[[SUM]] {dtc.weight_gradient} : (tensor<1x3xf32>) -> tensor<3xf32>
// CHECK: %[[PRODUCT:.*]] = graph.matmul %{{.*}}, %{{.*}} {dtc.weight_gradient, transpose_lhs = true} : (tensor<4x8xbf16>, tensor<4x3xbf16>) -> tensor<8x3xbf16>
// CHECK: graph.cast %[[PRODUCT]] {dtc.weight_gradient} : (tensor<8x3xbf16>) -> tensor<8x3xf32>
// CHECK-NOT: graph.cast %[[SUM]]
// CHECK-NOT: graph.cast %[[BIASGRAD]]
func.func @main(%x: tensor<4x8xf32> {graph.name = "x"}) -> (tensor<4x3xf32> {graph.name = "logits"}) {
  %w = graph.parameter "w" : tensor<8x3xf32>
  %b = graph.parameter "b" : tensor<3xf32>
  %y = graph.matmul %x, %w : (tensor<4x8xf32>, tensor<8x3xf32>) -> tensor<4x3xf32>
  %z = graph.add %y, %b : (tensor<4x3xf32>, tensor<3xf32>) -> tensor<4x3xf32>
  return %z : tensor<4x3xf32>
}
