// RUN: %dtc-opt %s --split-input-file --dtc-mixed-precision | FileCheck %s

// An inference model in bf16: its input and weights are cast where the
// model reads them, every value it computes is bf16, and its output leaves
// through a cast to the f32 it declares; an output a product makes is that
// product's f32 accumulator instead (no cast after it).
// CHECK-LABEL: func.func @main
// CHECK-SAME: precision: the model computes in bf16 (2 matmuls and convolutions; activations stored in bf16), its weights cast once; its outputs are cast back to the types the model declares (1 written in f32 by the product that makes it)
// CHECK: %[[X:.*]] = graph.cast %arg0 : (tensor<4x8xf32>) -> tensor<4x8xbf16>
// CHECK: %[[W1:.*]] = graph.cast %{{.*}} : (tensor<8x16xf32>) -> tensor<8x16xbf16>
// CHECK: %[[H:.*]] = graph.matmul %[[X]], %[[W1]] : (tensor<4x8xbf16>, tensor<8x16xbf16>) -> tensor<4x16xbf16>
// CHECK: %[[R:.*]] = graph.relu %[[H]] : (tensor<4x16xbf16>) -> tensor<4x16xbf16>
// CHECK: %[[Y:.*]] = graph.matmul %[[R]], %{{.*}} : (tensor<4x16xbf16>, tensor<16x2xbf16>) -> tensor<4x2xf32>
// CHECK: %[[S:.*]] = graph.tanh %[[R]] : (tensor<4x16xbf16>) -> tensor<4x16xbf16>
// CHECK: %[[SF:.*]] = graph.cast %[[S]] : (tensor<4x16xbf16>) -> tensor<4x16xf32>
// CHECK: return %[[Y]], %[[SF]] : tensor<4x2xf32>, tensor<4x16xf32>
func.func @main(%x: tensor<4x8xf32>) -> (tensor<4x2xf32>, tensor<4x16xf32>) {
  %w1 = graph.parameter "w1" : tensor<8x16xf32>
  %h = graph.matmul %x, %w1 : (tensor<4x8xf32>, tensor<8x16xf32>) -> tensor<4x16xf32>
  %r = graph.relu %h : (tensor<4x16xf32>) -> tensor<4x16xf32>
  %w2 = graph.parameter "w2" : tensor<16x2xf32>
  %y = graph.matmul %r, %w2 : (tensor<4x16xf32>, tensor<16x2xf32>) -> tensor<4x2xf32>
  %s = graph.tanh %r : (tensor<4x16xf32>) -> tensor<4x16xf32>
  return %y, %s : tensor<4x2xf32>, tensor<4x16xf32>
}
