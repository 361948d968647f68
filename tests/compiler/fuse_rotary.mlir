// RUN: %dtc-opt %s --split-input-file --pass-pipeline='builtin.module(func.func(dtc-fuse-rotary))' | FileCheck %s

// Llama's rotary embedding as PyTorch exports it: x * cos plus
// rotate_half(x) * sin, rotate_half the concat of -x's upper half and its
// lower half. One graph.rotary; the slices, negation, concat, products and
// sum are gone.
// CHECK-LABEL: func.func @llama
// CHECK-SAME: fusion: 1 rotary embeddings (x cos + rotate_half(x) sin) computed as one op each: no slices, negation or concat of their own
// CHECK: %[[R:.*]] = graph.rotary %arg0, %[[COS:.*]], %[[SIN:.*]] : (tensor<2x4x16x8xf32>, tensor<1x1x16x8xf32>, tensor<1x1x16x8xf32>) -> tensor<2x4x16x8xf32>
// CHECK-NOT: graph.slice
// CHECK-NOT: graph.concat
// CHECK: return %[[R]]
func.func @llama(%x: tensor<2x4x16x8xf32>) -> tensor<2x4x16x8xf32> {
  %cos = graph.parameter "cos" {frozen = "rotary cos and sin tables"} : tensor<1x1x16x8xf32>
  %sin = graph.parameter "sin" {frozen = "rotary cos and sin tables"} : tensor<1x1x16x8xf32>
  %a = graph.mul %x, %cos : (tensor<2x4x16x8xf32>, tensor<1x1x16x8xf32>) -> tensor<2x4x16x8xf32>
  %lo = graph.slice %x {offsets = array<i64: 0, 0, 0, 0>, sizes = array<i64: 2, 4, 16, 4>, strides = array<i64: 1, 1, 1, 1>} : (tensor<2x4x16x8xf32>) -> tensor<2x4x16x4xf32>
  %hi = graph.slice %x {offsets = array<i64: 0, 0, 0, 4>, sizes = array<i64: 2, 4, 16, 4>, strides = array<i64: 1, 1, 1, 1>} : (tensor<2x4x16x8xf32>) -> tensor<2x4x16x4xf32>
  %n = graph.neg %hi : (tensor<2x4x16x4xf32>) -> tensor<2x4x16x4xf32>
  %r = graph.concat %n, %lo {axis = 3 : i64} : (tensor<2x4x16x4xf32>, tensor<2x4x16x4xf32>) -> tensor<2x4x16x8xf32>
  %b = graph.mul %r, %sin : (tensor<2x4x16x8xf32>, tensor<1x1x16x8xf32>) -> tensor<2x4x16x8xf32>
  %y = graph.add %a, %b : (tensor<2x4x16x8xf32>, tensor<2x4x16x8xf32>) -> tensor<2x4x16x8xf32>
  return %y : tensor<2x4x16x8xf32>
}

// -----

// Products and the sum in the other order, the tables rank 2 [S, D]: the
// same op.
// CHECK-LABEL: func.func @other_order
// CHECK: graph.rotary %arg0, %arg1, %arg2 : (tensor<2x16x8xf32>, tensor<16x8xf32>, tensor<16x8xf32>) -> tensor<2x16x8xf32>
func.func @other_order(%x: tensor<2x16x8xf32>, %cos: tensor<16x8xf32>, %sin: tensor<16x8xf32>) -> tensor<2x16x8xf32> {
  %lo = graph.slice %x {offsets = array<i64: 0, 0, 0>, sizes = array<i64: 2, 16, 4>, strides = array<i64: 1, 1, 1>} : (tensor<2x16x8xf32>) -> tensor<2x16x4xf32>
  %hi = graph.slice %x {offsets = array<i64: 0, 0, 4>, sizes = array<i64: 2, 16, 4>, strides = array<i64: 1, 1, 1>} : (tensor<2x16x8xf32>) -> tensor<2x16x4xf32>
  %n = graph.neg %hi : (tensor<2x16x4xf32>) -> tensor<2x16x4xf32>
  %r = graph.concat %n, %lo {axis = 2 : i64} : (tensor<2x16x4xf32>, tensor<2x16x4xf32>) -> tensor<2x16x8xf32>
  %b = graph.mul %sin, %r : (tensor<16x8xf32>, tensor<2x16x8xf32>) -> tensor<2x16x8xf32>
  %a = graph.mul %cos, %x : (tensor<16x8xf32>, tensor<2x16x8xf32>) -> tensor<2x16x8xf32>
  %y = graph.add %b, %a : (tensor<2x16x8xf32>, tensor<2x16x8xf32>) -> tensor<2x16x8xf32>
  return %y : tensor<2x16x8xf32>
}

// -----

// Not a rotary embedding: the halves swapped without the negation, and
// tables a trained parameter reaches (they would need a gradient).
// CHECK-LABEL: func.func @no_negation
// CHECK-NOT: graph.rotary
// CHECK-LABEL: func.func @trained_table
// CHECK-NOT: graph.rotary
func.func @no_negation(%x: tensor<2x16x8xf32>, %cos: tensor<16x8xf32>, %sin: tensor<16x8xf32>) -> tensor<2x16x8xf32> {
  %lo = graph.slice %x {offsets = array<i64: 0, 0, 0>, sizes = array<i64: 2, 16, 4>, strides = array<i64: 1, 1, 1>} : (tensor<2x16x8xf32>) -> tensor<2x16x4xf32>
  %hi = graph.slice %x {offsets = array<i64: 0, 0, 4>, sizes = array<i64: 2, 16, 4>, strides = array<i64: 1, 1, 1>} : (tensor<2x16x8xf32>) -> tensor<2x16x4xf32>
  %r = graph.concat %hi, %lo {axis = 2 : i64} : (tensor<2x16x4xf32>, tensor<2x16x4xf32>) -> tensor<2x16x8xf32>
  %b = graph.mul %r, %sin : (tensor<2x16x8xf32>, tensor<16x8xf32>) -> tensor<2x16x8xf32>
  %a = graph.mul %x, %cos : (tensor<2x16x8xf32>, tensor<16x8xf32>) -> tensor<2x16x8xf32>
  %y = graph.add %a, %b : (tensor<2x16x8xf32>, tensor<2x16x8xf32>) -> tensor<2x16x8xf32>
  return %y : tensor<2x16x8xf32>
}
func.func @trained_table(%x: tensor<2x16x8xf32>) -> tensor<2x16x8xf32> {
  %cos = graph.parameter "cos" : tensor<16x8xf32>
  %sin = graph.parameter "sin" : tensor<16x8xf32>
  %lo = graph.slice %x {offsets = array<i64: 0, 0, 0>, sizes = array<i64: 2, 16, 4>, strides = array<i64: 1, 1, 1>} : (tensor<2x16x8xf32>) -> tensor<2x16x4xf32>
  %hi = graph.slice %x {offsets = array<i64: 0, 0, 4>, sizes = array<i64: 2, 16, 4>, strides = array<i64: 1, 1, 1>} : (tensor<2x16x8xf32>) -> tensor<2x16x4xf32>
  %n = graph.neg %hi : (tensor<2x16x4xf32>) -> tensor<2x16x4xf32>
  %r = graph.concat %n, %lo {axis = 2 : i64} : (tensor<2x16x4xf32>, tensor<2x16x4xf32>) -> tensor<2x16x8xf32>
  %b = graph.mul %r, %sin : (tensor<2x16x8xf32>, tensor<16x8xf32>) -> tensor<2x16x8xf32>
  %a = graph.mul %x, %cos : (tensor<2x16x8xf32>, tensor<16x8xf32>) -> tensor<2x16x8xf32>
  %y = graph.add %a, %b : (tensor<2x16x8xf32>, tensor<2x16x8xf32>) -> tensor<2x16x8xf32>
  return %y : tensor<2x16x8xf32>
}
