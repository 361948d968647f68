// RUN: %dtc-opt %s --split-input-file --pass-pipeline='builtin.module(func.func(dtc-interleave-qkv))' | FileCheck %s

// transformers' GPT-2 attention, packed: c_attn's product x W + b read as
// [B, S, 3, H, D]. The weight's and bias's columns are reordered [3, H, D]
// -> [H, 3, D] in the step (reshape, transpose, reshape), and the
// attention reads the new product as [B, S, H, 3, D] (interleaved), so
// that a cut of its heads is a contiguous block of W's columns.
// CHECK-LABEL: func.func @gpt2
// CHECK-SAME: layout: 1 packed q, k, v projections laid out by heads ([K, H, 3, D], as Megatron-LM stores them)
// CHECK: %[[W3:.*]] = graph.reshape %arg1 : (tensor<32x96xf32>) -> tensor<32x3x2x16xf32>
// CHECK: %[[WT:.*]] = graph.transpose %[[W3]] {perm = array<i64: 0, 2, 1, 3>} : (tensor<32x3x2x16xf32>) -> tensor<32x2x3x16xf32>
// CHECK: %[[W:.*]] = graph.reshape %[[WT]] : (tensor<32x2x3x16xf32>) -> tensor<32x96xf32>
// CHECK: %[[P:.*]] = graph.matmul %arg0, %[[W]]
// CHECK: %[[B3:.*]] = graph.reshape %arg2 : (tensor<96xf32>) -> tensor<3x2x16xf32>
// CHECK: %[[BT:.*]] = graph.transpose %[[B3]] {perm = array<i64: 1, 0, 2>}
// CHECK: %[[B:.*]] = graph.reshape %[[BT]] : (tensor<2x3x16xf32>) -> tensor<96xf32>
// CHECK: %[[PB:.*]] = graph.add %[[P]], %[[B]]
// CHECK: %[[QKV:.*]] = graph.reshape %[[PB]] : (tensor<16x96xf32>) -> tensor<2x8x2x3x16xf32>
// CHECK: graph.attention %[[QKV]], %[[QKV]], %[[QKV]] {bshd, causal = true, interleaved, packed, scale = 2.500000e-01 : f64} : (tensor<2x8x2x3x16xf32>, tensor<2x8x2x3x16xf32>, tensor<2x8x2x3x16xf32>) -> (tensor<2x8x2x16xf32>, tensor<2x2x8xf32>)
func.func @gpt2(%x: tensor<16x32xf32>, %w: tensor<32x96xf32>, %b: tensor<96xf32>) -> tensor<2x8x2x16xf32> {
  %p = graph.matmul %x, %w : (tensor<16x32xf32>, tensor<32x96xf32>) -> tensor<16x96xf32>
  %pb = graph.add %p, %b : (tensor<16x96xf32>, tensor<96xf32>) -> tensor<16x96xf32>
  %qkv = graph.reshape %pb : (tensor<16x96xf32>) -> tensor<2x8x3x2x16xf32>
  %o, %l = graph.attention %qkv, %qkv, %qkv {bshd, causal = true, packed, scale = 0.25 : f64} : (tensor<2x8x3x2x16xf32>, tensor<2x8x3x2x16xf32>, tensor<2x8x3x2x16xf32>) -> (tensor<2x8x2x16xf32>, tensor<2x2x8xf32>)
  return %o : tensor<2x8x2x16xf32>
}

// -----

// A weight stored transposed ([N, K], read with transpose_rhs) has its
// rows reordered; with no bias, nothing more.
// CHECK-LABEL: func.func @transposed_weight
// CHECK: %[[W3:.*]] = graph.reshape %arg1 : (tensor<96x32xf32>) -> tensor<3x2x16x32xf32>
// CHECK: graph.transpose %[[W3]] {perm = array<i64: 1, 0, 2, 3>}
// CHECK: graph.matmul %arg0, %{{.*}} {transpose_rhs = true}
// CHECK: graph.attention {{.*}}interleaved
func.func @transposed_weight(%x: tensor<16x32xf32>, %w: tensor<96x32xf32>) -> tensor<2x8x2x16xf32> {
  %p = graph.matmul %x, %w {transpose_rhs = true} : (tensor<16x32xf32>, tensor<96x32xf32>) -> tensor<16x96xf32>
  %qkv = graph.reshape %p : (tensor<16x96xf32>) -> tensor<2x8x3x2x16xf32>
  %o, %l = graph.attention %qkv, %qkv, %qkv {bshd, packed, scale = 0.25 : f64} : (tensor<2x8x3x2x16xf32>, tensor<2x8x3x2x16xf32>, tensor<2x8x3x2x16xf32>) -> (tensor<2x8x2x16xf32>, tensor<2x2x8xf32>)
  return %o : tensor<2x8x2x16xf32>
}

// -----

// The product read by something else too stays as it is: reordering it
// would change what that reads.
// CHECK-LABEL: func.func @product_read_elsewhere
// CHECK-NOT: interleaved
// CHECK: graph.attention %{{.*}} {bshd, packed, scale
func.func @product_read_elsewhere(%x: tensor<16x32xf32>, %w: tensor<32x96xf32>) -> (tensor<2x8x2x16xf32>, tensor<16x96xf32>) {
  %p = graph.matmul %x, %w : (tensor<16x32xf32>, tensor<32x96xf32>) -> tensor<16x96xf32>
  %qkv = graph.reshape %p : (tensor<16x96xf32>) -> tensor<2x8x3x2x16xf32>
  %o, %l = graph.attention %qkv, %qkv, %qkv {bshd, packed, scale = 0.25 : f64} : (tensor<2x8x3x2x16xf32>, tensor<2x8x3x2x16xf32>, tensor<2x8x3x2x16xf32>) -> (tensor<2x8x2x16xf32>, tensor<2x2x8xf32>)
  return %o, %p : tensor<2x8x2x16xf32>, tensor<16x96xf32>
}
