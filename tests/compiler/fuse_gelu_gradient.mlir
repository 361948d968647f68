// RUN: %dtc-opt %s --split-input-file --dtc-build-training-step="precision=bf16" --canonicalize --cse --dtc-fuse-matmul-bias | FileCheck %s --check-prefixes=CHECK,BF16
// RUN: %dtc-opt %s --split-input-file --dtc-build-training-step="precision=fp32" --canonicalize --cse --dtc-fuse-matmul-bias | FileCheck %s --check-prefixes=CHECK,F32

// A tanh GELU's gradient, as autodiff writes it out (about 20 ops, in f32
// between casts in bf16), multiplies the product that makes its output
// gradient (dy W2^T): the two become one graph.matmul_gelu_grad reading the
// GELU's input that the forward's GEMM kept (cuBLASLt's DGELU), and the
// bias's gradient of the layer before is then summed by its weight
// gradient's GEMM. No tanh, no cast of the GELU's input is left.
// CHECK-LABEL: func.func @main
// CHECK-SAME: fusion: 1 GELU gradients computed by the GEMM that makes their output gradient
// BF16: %{{[^,]*}}, %[[PRE:.*]] = graph.matmul_bias {{.*}} {activation = "gelu_tanh", keep_preactivation} : {{.*}} -> (tensor<4x16xbf16>, tensor<4x16xbf16>)
// F32: %{{[^,]*}}, %[[PRE:.*]] = graph.matmul_bias {{.*}} {activation = "gelu_tanh", keep_preactivation} : {{.*}} -> (tensor<4x16xf32>, tensor<4x16xf32>)
// CHECK-NOT: graph.tanh
// BF16: %[[DX:.*]] = graph.matmul_gelu_grad %{{.*}}, %{{.*}}, %[[PRE]] {transpose_rhs = true} : (tensor<4x3xbf16>, tensor<16x3xbf16>, tensor<4x16xbf16>) -> tensor<4x16xbf16>
// F32: %[[DX:.*]] = graph.matmul_gelu_grad %{{.*}}, %{{.*}}, %[[PRE]] {transpose_rhs = true} : (tensor<4x3xf32>, tensor<16x3xf32>, tensor<4x16xf32>) -> tensor<4x16xf32>
// CHECK-NEXT: graph.matmul_grad %{{.*}}, %[[DX]]
// CHECK-NOT: graph.tanh
// CHECK-NOT: graph.cast %[[PRE]]
func.func @main(%x: tensor<4x8xf32> {graph.name = "x"}) -> (tensor<4x3xf32> {graph.name = "logits"}) {
  %w1 = graph.parameter "w1" : tensor<8x16xf32>
  %b1 = graph.parameter "b1" : tensor<16xf32>
  %w2 = graph.parameter "w2" : tensor<16x3xf32>
  %h = graph.matmul %x, %w1 : (tensor<4x8xf32>, tensor<8x16xf32>) -> tensor<4x16xf32>
  %hb = graph.add %h, %b1 : (tensor<4x16xf32>, tensor<16xf32>) -> tensor<4x16xf32>
  %g = graph.gelu %hb {approximate = "tanh"} : (tensor<4x16xf32>) -> tensor<4x16xf32>
  %y = graph.matmul %g, %w2 : (tensor<4x16xf32>, tensor<16x3xf32>) -> tensor<4x3xf32>
  return %y : tensor<4x3xf32>
}

// -----

// An exact (erf) GELU's gradient stays apart: cuBLASLt's DGELU is tanh's.
// CHECK-LABEL: func.func @main
// CHECK-NOT: matmul_gelu_grad
// CHECK: graph.erf
// CHECK-NOT: matmul_gelu_grad
func.func @main(%x: tensor<4x8xf32> {graph.name = "x"}) -> (tensor<4x3xf32> {graph.name = "logits"}) {
  %w1 = graph.parameter "w1" : tensor<8x16xf32>
  %w2 = graph.parameter "w2" : tensor<16x3xf32>
  %h = graph.matmul %x, %w1 : (tensor<4x8xf32>, tensor<8x16xf32>) -> tensor<4x16xf32>
  %g = graph.gelu %h : (tensor<4x16xf32>) -> tensor<4x16xf32>
  %y = graph.matmul %g, %w2 : (tensor<4x16xf32>, tensor<16x3xf32>) -> tensor<4x3xf32>
  return %y : tensor<4x3xf32>
}
