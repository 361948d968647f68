// RUN: %dtc-opt %s --pass-pipeline='builtin.module(func.func(dtc-fuse-attention))' | FileCheck %s
// RUN: %dtc-opt %s --pass-pipeline='builtin.module(func.func(dtc-fuse-attention,canonicalize))' | FileCheck %s --check-prefix=CLEAN

// The generated GPT's form: k transposed before the matmul, the scores
// divided by sqrt(D), a causal mask made from a triangle (where fills the
// hidden keys with -1e9). One causal attention; k transposed back.
// CHECK-LABEL: func.func @generated_gpt
// CHECK-SAME: dtc.notes = ["fusion: 1 attentions (1 causal) computed as one op each, flash style: no scores tensor, the backward recomputes them"]
// CHECK: %[[K:.*]] = graph.transpose %arg1 {perm = array<i64: 0, 2, 1>}
// CHECK: %[[O:.*]], %{{.*}} = graph.attention %arg0, %[[K]], %arg2 {causal = true, scale = 2.500000e-01 : f64} : (tensor<2x16x8xf32>, tensor<2x16x8xf32>, tensor<2x16x8xf32>) -> (tensor<2x16x8xf32>, tensor<2x16xf32>)
// CHECK-NOT: graph.softmax
// CHECK-NOT: graph.where
// CHECK: return %[[O]]
func.func @generated_gpt(%q: tensor<2x16x8xf32>, %kt: tensor<2x8x16xf32>, %v: tensor<2x16x8xf32>) -> tensor<2x16x8xf32> {
  %ones = graph.constant dense<1.000000e+00> : tensor<16x16xf32>
  %lower = graph.trilu %ones {upper = false} : (tensor<16x16xf32>) -> tensor<16x16xf32>
  %zero = graph.constant dense<0.000000e+00> : tensor<f32>
  %hidden = graph.equal %lower, %zero : (tensor<16x16xf32>, tensor<f32>) -> tensor<16x16xi1>
  %s = graph.matmul %q, %kt : (tensor<2x16x8xf32>, tensor<2x8x16xf32>) -> tensor<2x16x16xf32>
  %root = graph.constant dense<4.000000e+00> : tensor<f32>
  %scaled = graph.div %s, %root : (tensor<2x16x16xf32>, tensor<f32>) -> tensor<2x16x16xf32>
  %fill = graph.constant dense<-1.000000e+09> : tensor<f32>
  %masked = graph.where %hidden, %fill, %scaled : (tensor<16x16xi1>, tensor<f32>, tensor<2x16x16xf32>) -> tensor<2x16x16xf32>
  %p = graph.softmax %masked {axis = 2 : i64} : (tensor<2x16x16xf32>) -> tensor<2x16x16xf32>
  %o = graph.matmul %p, %v : (tensor<2x16x16xf32>, tensor<2x16x8xf32>) -> tensor<2x16x8xf32>
  return %o : tensor<2x16x8xf32>
}

// ONNX Attention's form: the matmul transposes k, a multiply scales, the
// causal triangle is a bias of 0 and -inf with a past (Sq 2 < Sk 4: the
// last query sees every key).
// CHECK-LABEL: func.func @onnx_attention_with_past
// CHECK: graph.attention %arg0, %arg1, %arg2 {causal = true, scale = 5.000000e-01 : f64} : (tensor<1x2x2x4xf32>, tensor<1x2x4x4xf32>, tensor<1x2x4x4xf32>) -> (tensor<1x2x2x4xf32>, tensor<1x2x2xf32>)
func.func @onnx_attention_with_past(%q: tensor<1x2x2x4xf32>, %k: tensor<1x2x4x4xf32>, %v: tensor<1x2x4x4xf32>) -> tensor<1x2x2x4xf32> {
  %s = graph.matmul %q, %k {transpose_rhs = true} : (tensor<1x2x2x4xf32>, tensor<1x2x4x4xf32>) -> tensor<1x2x2x4xf32>
  %half = graph.constant dense<5.000000e-01> : tensor<f32>
  %scaled = graph.mul %s, %half : (tensor<1x2x2x4xf32>, tensor<f32>) -> tensor<1x2x2x4xf32>
  %bias = graph.constant dense<[[0.0, 0.0, 0.0, 0xFF800000], [0.0, 0.0, 0.0, 0.0]]> : tensor<2x4xf32>
  %biased = graph.add %scaled, %bias : (tensor<1x2x2x4xf32>, tensor<2x4xf32>) -> tensor<1x2x2x4xf32>
  %p = graph.softmax %biased {axis = -1 : i64} : (tensor<1x2x2x4xf32>) -> tensor<1x2x2x4xf32>
  %o = graph.matmul %p, %v : (tensor<1x2x2x4xf32>, tensor<1x2x4x4xf32>) -> tensor<1x2x2x4xf32>
  return %o : tensor<1x2x2x4xf32>
}

// PyTorch's export of scaled_dot_product_attention (transformers' GPT-2):
// the scale split over q and k, the causal mask from positions compared
// (gathered, summed, and-ed: evaluated at compile time), added as a bias of
// 0 and the lowest float, and a guard that zeroes NaN rows after the
// softmax. One causal attention on q and k, their numbers its scale.
// CHECK-LABEL: func.func @pytorch_sdpa
// CHECK-NOT: graph.mul
// CHECK: %[[O:.*]], %{{.*}} = graph.attention %arg0, %arg1, %arg2 {causal = true, scale = 0.35355336{{[0-9]*}} : f64}
// CHECK-NOT: graph.not
// CHECK: return %[[O]]
func.func @pytorch_sdpa(%q: tensor<2x2x4x8xf32>, %k: tensor<2x2x4x8xf32>, %v: tensor<2x2x4x8xf32>) -> tensor<2x2x4x8xf32> {
  %pairs = graph.constant dense<[[0, 0], [0, 1], [0, 2], [0, 3]]> : tensor<4x2xi64>
  %idx = graph.reduce_sum %pairs {axes = array<i64: 1>, keepdims = false} : (tensor<4x2xi64>) -> tensor<4xi64>
  %pos = graph.constant dense<[0, 1, 2, 3]> : tensor<4xi64>
  %cols = graph.gather %pos, %idx {axis = 0 : i64} : (tensor<4xi64>, tensor<4xi64>) -> tensor<4xi64>
  %rows = graph.reshape %cols : (tensor<4xi64>) -> tensor<4x1xi64>
  %seen = graph.less_equal %cols, %rows : (tensor<4xi64>, tensor<4x1xi64>) -> tensor<4x4xi1>
  %true = graph.constant dense<true> : tensor<i1>
  %keep = graph.and %true, %seen : (tensor<i1>, tensor<4x4xi1>) -> tensor<4x4xi1>
  %keep4 = graph.broadcast %keep {shape = array<i64: 2, 1, 4, 4>} : (tensor<4x4xi1>) -> tensor<2x1x4x4xi1>
  %zero = graph.constant dense<0.000000e+00> : tensor<f32>
  %lowest = graph.constant dense<-3.40282347E+38> : tensor<f32>
  %bias = graph.where %keep4, %zero, %lowest : (tensor<2x1x4x4xi1>, tensor<f32>, tensor<f32>) -> tensor<2x1x4x4xf32>
  %root = graph.constant dense<0.594603539> : tensor<f32>
  %qs = graph.mul %q, %root : (tensor<2x2x4x8xf32>, tensor<f32>) -> tensor<2x2x4x8xf32>
  %ks = graph.mul %k, %root : (tensor<2x2x4x8xf32>, tensor<f32>) -> tensor<2x2x4x8xf32>
  %s = graph.matmul %qs, %ks {transpose_rhs = true} : (tensor<2x2x4x8xf32>, tensor<2x2x4x8xf32>) -> tensor<2x2x4x4xf32>
  %biased = graph.add %s, %bias : (tensor<2x2x4x4xf32>, tensor<2x1x4x4xf32>) -> tensor<2x2x4x4xf32>
  %p = graph.softmax %biased {axis = 3 : i64} : (tensor<2x2x4x4xf32>) -> tensor<2x2x4x4xf32>
  %same = graph.equal %p, %p : (tensor<2x2x4x4xf32>, tensor<2x2x4x4xf32>) -> tensor<2x2x4x4xi1>
  %nan = graph.not %same : (tensor<2x2x4x4xi1>) -> tensor<2x2x4x4xi1>
  %guarded = graph.where %nan, %zero, %p : (tensor<2x2x4x4xi1>, tensor<f32>, tensor<2x2x4x4xf32>) -> tensor<2x2x4x4xf32>
  %o = graph.matmul %guarded, %v : (tensor<2x2x4x4xf32>, tensor<2x2x4x8xf32>) -> tensor<2x2x4x8xf32>
  return %o : tensor<2x2x4x8xf32>
}

// A causal mask the exporter folded into an initializer: frozen, its
// values read by the importer, which marks it causal.
// CHECK-LABEL: func.func @folded_mask
// CHECK: graph.attention %arg0, %arg1, %arg2 {causal = true, scale = 1.000000e+00 : f64}
func.func @folded_mask(%q: tensor<2x2x4x8xf32>, %k: tensor<2x2x4x8xf32>, %v: tensor<2x2x4x8xf32>) -> tensor<2x2x4x8xf32> {
  %mask = graph.parameter "val_161" {dtc.causal_mask, frozen = "a mask: its values are 0 and -3.40282e+38"} : tensor<2x1x4x4xf32>
  %s = graph.matmul %q, %k {transpose_rhs = true} : (tensor<2x2x4x8xf32>, tensor<2x2x4x8xf32>) -> tensor<2x2x4x4xf32>
  %biased = graph.add %s, %mask : (tensor<2x2x4x4xf32>, tensor<2x1x4x4xf32>) -> tensor<2x2x4x4xf32>
  %p = graph.softmax %biased {axis = 3 : i64} : (tensor<2x2x4x4xf32>) -> tensor<2x2x4x4xf32>
  %o = graph.matmul %p, %v : (tensor<2x2x4x4xf32>, tensor<2x2x4x8xf32>) -> tensor<2x2x4x8xf32>
  return %o : tensor<2x2x4x8xf32>
}

// No mask and no scale; v given transposed (the matmul transposes it back).
// CHECK-LABEL: func.func @plain
// CHECK: %[[V:.*]] = graph.transpose %arg2 {perm = array<i64: 0, 2, 1>}
// CHECK: graph.attention %arg0, %arg1, %[[V]] {scale = 1.000000e+00 : f64}
func.func @plain(%q: tensor<2x16x8xf32>, %k: tensor<2x16x8xf32>, %vt: tensor<2x4x16xf32>) -> tensor<2x16x4xf32> {
  %s = graph.matmul %q, %k {transpose_rhs = true} : (tensor<2x16x8xf32>, tensor<2x16x8xf32>) -> tensor<2x16x16xf32>
  %p = graph.softmax %s {axis = 2 : i64} : (tensor<2x16x16xf32>) -> tensor<2x16x16xf32>
  %o = graph.matmul %p, %vt {transpose_rhs = true} : (tensor<2x16x16xf32>, tensor<2x4x16xf32>) -> tensor<2x16x4xf32>
  return %o : tensor<2x16x4xf32>
}

// Masks that are neither none nor causal, and added biases, become the
// op's f32 bias, broadcast to the scores' rank: a padding mask from an
// input (where(hide, fill, 0)), a constant bias that shifts scores, a mask
// hiding an odd key, a causal triangle with more queries than keys (each
// spelled-out row's result kept, uniform where every key is hidden),
// BERT's export (an input mask cast and added as 0 or the lowest float).
// CHECK-LABEL: func.func @carried_as_bias
// CHECK-SAME: 5 with their mask as a bias operand
// CHECK: graph.constant dense<-1.000000e+09>
// CHECK-NEXT: %[[FILL:.*]] = graph.constant dense<-1.000000e+09> : tensor<f32>
// CHECK-NEXT: %[[ZERO:.*]] = graph.constant dense<0.000000e+00> : tensor<f32>
// CHECK-NEXT: %[[PAD:.*]] = graph.where %arg3, %[[FILL]], %[[ZERO]] : (tensor<4x4xi1>, tensor<f32>, tensor<f32>) -> tensor<4x4xf32>
// CHECK: %[[PAD3:.*]] = graph.reshape %[[PAD]] : (tensor<4x4xf32>) -> tensor<1x4x4xf32>
// CHECK: graph.attention %arg0, %arg1, %arg2, %[[PAD3]] {scale = 1.000000e+00 : f64}
// CHECK: %[[SHIFT:.*]] = graph.reshape %{{.*}} : (tensor<4x4xf32>) -> tensor<1x4x4xf32>
// CHECK: graph.attention %arg0, %arg1, %arg2, %[[SHIFT]] {scale = 1.000000e+00 : f64}
// CHECK: graph.attention %arg0, %arg1, %arg2, %{{.*}} {scale = 1.000000e+00 : f64}
// CHECK: graph.attention %arg4, %arg1, %arg2, %{{.*}} {scale = 1.000000e+00 : f64} : (tensor<2x6x8xf32>, tensor<2x4x8xf32>, tensor<2x4x8xf32>, tensor<1x6x4xf32>)
// CHECK: %[[BERT:.*]] = graph.where %{{.*}}, %{{.*}}, %{{.*}} : (tensor<2x1x1x4xi1>, tensor<f32>, tensor<f32>) -> tensor<2x1x1x4xf32>
// CHECK: graph.attention %arg6, %arg7, %arg8, %[[BERT]] {scale = 5.000000e-01 : f64} : (tensor<2x2x4x8xf32>, tensor<2x2x4x8xf32>, tensor<2x2x4x8xf32>, tensor<2x1x1x4xf32>)
// CHECK-NOT: graph.softmax
func.func @carried_as_bias(%q: tensor<2x4x8xf32>, %k: tensor<2x4x8xf32>, %v: tensor<2x4x8xf32>,
                           %pad: tensor<4x4xi1>, %q6: tensor<2x6x8xf32>, %mask: tensor<2x4xi64>,
                           %bq: tensor<2x2x4x8xf32>, %bk: tensor<2x2x4x8xf32>, %bv: tensor<2x2x4x8xf32>)
    -> (tensor<2x4x8xf32>, tensor<2x4x8xf32>, tensor<2x4x8xf32>, tensor<2x6x8xf32>, tensor<2x2x4x8xf32>) {
  %fill = graph.constant dense<-1.000000e+09> : tensor<f32>
  %s1 = graph.matmul %q, %k {transpose_rhs = true} : (tensor<2x4x8xf32>, tensor<2x4x8xf32>) -> tensor<2x4x4xf32>
  %m1 = graph.where %pad, %fill, %s1 : (tensor<4x4xi1>, tensor<f32>, tensor<2x4x4xf32>) -> tensor<2x4x4xf32>
  %p1 = graph.softmax %m1 {axis = 2 : i64} : (tensor<2x4x4xf32>) -> tensor<2x4x4xf32>
  %o1 = graph.matmul %p1, %v : (tensor<2x4x4xf32>, tensor<2x4x8xf32>) -> tensor<2x4x8xf32>

  %shift = graph.constant dense<[[0.0, 1.0, 0.0, 0.0], [0.0, 0.0, 0.0, 0.0], [0.0, 0.0, 0.0, 0.0], [0.0, 0.0, 0.0, 0.0]]> : tensor<4x4xf32>
  %s2 = graph.matmul %q, %k {transpose_rhs = true} : (tensor<2x4x8xf32>, tensor<2x4x8xf32>) -> tensor<2x4x4xf32>
  %m2 = graph.add %s2, %shift : (tensor<2x4x4xf32>, tensor<4x4xf32>) -> tensor<2x4x4xf32>
  %p2 = graph.softmax %m2 {axis = 2 : i64} : (tensor<2x4x4xf32>) -> tensor<2x4x4xf32>
  %o2 = graph.matmul %p2, %v : (tensor<2x4x4xf32>, tensor<2x4x8xf32>) -> tensor<2x4x8xf32>

  %odd = graph.constant dense<[[false, true, false, false], [false, false, false, false], [false, false, false, false], [false, false, false, false]]> : tensor<4x4xi1>
  %s3 = graph.matmul %q, %k {transpose_rhs = true} : (tensor<2x4x8xf32>, tensor<2x4x8xf32>) -> tensor<2x4x4xf32>
  %m3 = graph.where %odd, %fill, %s3 : (tensor<4x4xi1>, tensor<f32>, tensor<2x4x4xf32>) -> tensor<2x4x4xf32>
  %p3 = graph.softmax %m3 {axis = 2 : i64} : (tensor<2x4x4xf32>) -> tensor<2x4x4xf32>
  %o3 = graph.matmul %p3, %v : (tensor<2x4x4xf32>, tensor<2x4x8xf32>) -> tensor<2x4x8xf32>

  %ones = graph.constant dense<1.000000e+00> : tensor<6x4xf32>
  %lower = graph.trilu %ones {upper = false, k = -2 : i64} : (tensor<6x4xf32>) -> tensor<6x4xf32>
  %zero = graph.constant dense<0.000000e+00> : tensor<f32>
  %hidden = graph.equal %lower, %zero : (tensor<6x4xf32>, tensor<f32>) -> tensor<6x4xi1>
  %s5 = graph.matmul %q6, %k {transpose_rhs = true} : (tensor<2x6x8xf32>, tensor<2x4x8xf32>) -> tensor<2x6x4xf32>
  %m5 = graph.where %hidden, %fill, %s5 : (tensor<6x4xi1>, tensor<f32>, tensor<2x6x4xf32>) -> tensor<2x6x4xf32>
  %p5 = graph.softmax %m5 {axis = 2 : i64} : (tensor<2x6x4xf32>) -> tensor<2x6x4xf32>
  %o5 = graph.matmul %p5, %v : (tensor<2x6x4xf32>, tensor<2x4x8xf32>) -> tensor<2x6x8xf32>

  %m4 = graph.reshape %mask : (tensor<2x4xi64>) -> tensor<2x1x1x4xi64>
  %kept = graph.cast %m4 : (tensor<2x1x1x4xi64>) -> tensor<2x1x1x4xi1>
  %lowest = graph.constant dense<-3.40282347E+38> : tensor<f32>
  %bias = graph.where %kept, %zero, %lowest : (tensor<2x1x1x4xi1>, tensor<f32>, tensor<f32>) -> tensor<2x1x1x4xf32>
  %half = graph.constant dense<5.000000e-01> : tensor<f32>
  %s7 = graph.matmul %bq, %bk {transpose_rhs = true} : (tensor<2x2x4x8xf32>, tensor<2x2x4x8xf32>) -> tensor<2x2x4x4xf32>
  %c7 = graph.mul %s7, %half : (tensor<2x2x4x4xf32>, tensor<f32>) -> tensor<2x2x4x4xf32>
  %m7 = graph.add %c7, %bias : (tensor<2x2x4x4xf32>, tensor<2x1x1x4xf32>) -> tensor<2x2x4x4xf32>
  %p7 = graph.softmax %m7 {axis = 3 : i64} : (tensor<2x2x4x4xf32>) -> tensor<2x2x4x4xf32>
  %o7 = graph.matmul %p7, %bv : (tensor<2x2x4x4xf32>, tensor<2x2x4x8xf32>) -> tensor<2x2x4x8xf32>
  return %o1, %o2, %o3, %o5, %o7 : tensor<2x4x8xf32>, tensor<2x4x8xf32>, tensor<2x4x8xf32>, tensor<2x6x8xf32>, tensor<2x2x4x8xf32>
}

// Not fused: a bias a parameter reaches (it would need a gradient), scores
// read elsewhere, and a softmax over another axis.
// CHECK-LABEL: func.func @left_alone
// CHECK-NOT: graph.attention
// CHECK: return
func.func @left_alone(%q: tensor<2x4x8xf32>, %k: tensor<2x4x8xf32>, %v: tensor<2x4x8xf32>)
    -> (tensor<2x4x8xf32>, tensor<2x4x8xf32>, tensor<2x4x4xf32>, tensor<2x4x8xf32>) {
  %learned = graph.parameter "position_bias" : tensor<4x4xf32>
  %s2 = graph.matmul %q, %k {transpose_rhs = true} : (tensor<2x4x8xf32>, tensor<2x4x8xf32>) -> tensor<2x4x4xf32>
  %m2 = graph.add %s2, %learned : (tensor<2x4x4xf32>, tensor<4x4xf32>) -> tensor<2x4x4xf32>
  %p2 = graph.softmax %m2 {axis = 2 : i64} : (tensor<2x4x4xf32>) -> tensor<2x4x4xf32>
  %o2 = graph.matmul %p2, %v : (tensor<2x4x4xf32>, tensor<2x4x8xf32>) -> tensor<2x4x8xf32>

  %s4 = graph.matmul %q, %k {transpose_rhs = true} : (tensor<2x4x8xf32>, tensor<2x4x8xf32>) -> tensor<2x4x4xf32>
  %p4 = graph.softmax %s4 {axis = 2 : i64} : (tensor<2x4x4xf32>) -> tensor<2x4x4xf32>
  %o4 = graph.matmul %p4, %v : (tensor<2x4x4xf32>, tensor<2x4x8xf32>) -> tensor<2x4x8xf32>

  %s6 = graph.matmul %q, %k {transpose_rhs = true} : (tensor<2x4x8xf32>, tensor<2x4x8xf32>) -> tensor<2x4x4xf32>
  %p6 = graph.softmax %s6 {axis = 1 : i64} : (tensor<2x4x4xf32>) -> tensor<2x4x4xf32>
  %o6 = graph.matmul %p6, %v : (tensor<2x4x4xf32>, tensor<2x4x8xf32>) -> tensor<2x4x8xf32>
  return %o2, %o4, %s4, %o6 : tensor<2x4x8xf32>, tensor<2x4x8xf32>, tensor<2x4x4xf32>, tensor<2x4x8xf32>
}

// q and k each scaled by the scale's square root (as PyTorch's exporter
// writes scaled_dot_product_attention, 8^-1/4 = 0.5946...), k transposed
// before its multiply: both numbers join the op's scale (0.3535... =
// 8^-1/2, exact), no multiply is left, and k is read as it is. A number
// that broadcasts q to a larger shape stays.
// CHECK-LABEL: func.func @q_and_k_scaled
// CHECK-NOT: graph.mul
// CHECK: graph.attention %arg0, %arg1, %arg2 {scale = 0.35355336{{[0-9]*}} : f64}
// CHECK-NOT: graph.mul
// CHECK-LABEL: func.func @q_broadcast_by_its_number
// CHECK: graph.mul %arg0
// CHECK: graph.attention
func.func @q_and_k_scaled(%q: tensor<1x2x4x8xf32>, %k: tensor<1x2x4x8xf32>, %v: tensor<1x2x4x8xf32>) -> tensor<1x2x4x8xf32> {
  %c = graph.constant dense<0.594603539> : tensor<f32>
  %qs = graph.mul %q, %c : (tensor<1x2x4x8xf32>, tensor<f32>) -> tensor<1x2x4x8xf32>
  %kt = graph.transpose %k {perm = array<i64: 0, 1, 3, 2>} : (tensor<1x2x4x8xf32>) -> tensor<1x2x8x4xf32>
  %ks = graph.mul %kt, %c : (tensor<1x2x8x4xf32>, tensor<f32>) -> tensor<1x2x8x4xf32>
  %s = graph.matmul %qs, %ks : (tensor<1x2x4x8xf32>, tensor<1x2x8x4xf32>) -> tensor<1x2x4x4xf32>
  %p = graph.softmax %s {axis = 3 : i64} : (tensor<1x2x4x4xf32>) -> tensor<1x2x4x4xf32>
  %o = graph.matmul %p, %v : (tensor<1x2x4x4xf32>, tensor<1x2x4x8xf32>) -> tensor<1x2x4x8xf32>
  return %o : tensor<1x2x4x8xf32>
}
func.func @q_broadcast_by_its_number(%q: tensor<2x4x8xf32>, %k: tensor<1x2x4x8xf32>, %v: tensor<1x2x4x8xf32>) -> tensor<1x2x4x8xf32> {
  %c = graph.constant dense<0.5> : tensor<1x1x1x1xf32>
  %qs = graph.mul %q, %c : (tensor<2x4x8xf32>, tensor<1x1x1x1xf32>) -> tensor<1x2x4x8xf32>
  %s = graph.matmul %qs, %k {transpose_rhs = true} : (tensor<1x2x4x8xf32>, tensor<1x2x4x8xf32>) -> tensor<1x2x4x4xf32>
  %p = graph.softmax %s {axis = 3 : i64} : (tensor<1x2x4x4xf32>) -> tensor<1x2x4x4xf32>
  %o = graph.matmul %p, %v : (tensor<1x2x4x4xf32>, tensor<1x2x4x8xf32>) -> tensor<1x2x4x8xf32>
  return %o : tensor<1x2x4x8xf32>
}

// Heads split out of the projections ([B, S, H, D]) and transposed to
// [B, H, S, D] for attention (k twice: its k^T made from [B, S, H, D]), and
// the output transposed back: the op reads q, k and v as they were (bshd)
// and its output is transposed back for what the model reads, which then
// cancels with the model's own transpose.
// CHECK-LABEL: func.func @heads_split_out
// CHECK-SAME: 1 read q, k, v and write their output as [batch, seq, heads, dim], no transposes around them
// CHECK: %[[O:.*]], %[[L:.*]] = graph.attention %arg0, %arg1, %arg2 {bshd, causal = true, scale = 0.3535{{[0-9]*}} : f64} : (tensor<2x4x3x8xf32>, tensor<2x4x3x8xf32>, tensor<2x4x3x8xf32>) -> (tensor<2x4x3x8xf32>, tensor<2x3x4xf32>)
// CHECK: %[[T:.*]] = graph.transpose %[[O]] {perm = array<i64: 0, 2, 1, 3>}
// CHECK: graph.transpose %[[T]] {perm = array<i64: 0, 2, 1, 3>}
func.func @heads_split_out(%q: tensor<2x4x3x8xf32>, %k: tensor<2x4x3x8xf32>, %v: tensor<2x4x3x8xf32>) -> tensor<2x4x3x8xf32> {
  %qh = graph.transpose %q {perm = array<i64: 0, 2, 1, 3>} : (tensor<2x4x3x8xf32>) -> tensor<2x3x4x8xf32>
  %kt = graph.transpose %k {perm = array<i64: 0, 2, 3, 1>} : (tensor<2x4x3x8xf32>) -> tensor<2x3x8x4xf32>
  %vh = graph.transpose %v {perm = array<i64: 0, 2, 1, 3>} : (tensor<2x4x3x8xf32>) -> tensor<2x3x4x8xf32>
  %s = graph.matmul %qh, %kt : (tensor<2x3x4x8xf32>, tensor<2x3x8x4xf32>) -> tensor<2x3x4x4xf32>
  %root = graph.constant dense<2.82842712> : tensor<f32>
  %scaled = graph.div %s, %root : (tensor<2x3x4x4xf32>, tensor<f32>) -> tensor<2x3x4x4xf32>
  %ones = graph.constant dense<1.000000e+00> : tensor<4x4xf32>
  %lower = graph.trilu %ones {upper = false} : (tensor<4x4xf32>) -> tensor<4x4xf32>
  %zero = graph.constant dense<0.000000e+00> : tensor<f32>
  %hidden = graph.equal %lower, %zero : (tensor<4x4xf32>, tensor<f32>) -> tensor<4x4xi1>
  %fill = graph.constant dense<-1.000000e+09> : tensor<f32>
  %masked = graph.where %hidden, %fill, %scaled : (tensor<4x4xi1>, tensor<f32>, tensor<2x3x4x4xf32>) -> tensor<2x3x4x4xf32>
  %p = graph.softmax %masked {axis = 3 : i64} : (tensor<2x3x4x4xf32>) -> tensor<2x3x4x4xf32>
  %o = graph.matmul %p, %vh : (tensor<2x3x4x4xf32>, tensor<2x3x4x8xf32>) -> tensor<2x3x4x8xf32>
  %back = graph.transpose %o {perm = array<i64: 0, 2, 1, 3>} : (tensor<2x3x4x8xf32>) -> tensor<2x4x3x8xf32>
  return %back : tensor<2x4x3x8xf32>
}

// q read through the transpose but v not (a [B, H, S, D] argument): the
// op stays heads first.
// CHECK-LABEL: func.func @v_heads_first
// CHECK: graph.attention %{{.*}}, %{{.*}}, %arg2 {causal = true, scale = 0.3535{{[0-9]*}} : f64}
func.func @v_heads_first(%q: tensor<2x4x3x8xf32>, %k: tensor<2x4x3x8xf32>, %vh: tensor<2x3x4x8xf32>) -> tensor<2x3x4x8xf32> {
  %qh = graph.transpose %q {perm = array<i64: 0, 2, 1, 3>} : (tensor<2x4x3x8xf32>) -> tensor<2x3x4x8xf32>
  %kt = graph.transpose %k {perm = array<i64: 0, 2, 3, 1>} : (tensor<2x4x3x8xf32>) -> tensor<2x3x8x4xf32>
  %s = graph.matmul %qh, %kt : (tensor<2x3x4x8xf32>, tensor<2x3x8x4xf32>) -> tensor<2x3x4x4xf32>
  %root = graph.constant dense<2.82842712> : tensor<f32>
  %scaled = graph.div %s, %root : (tensor<2x3x4x4xf32>, tensor<f32>) -> tensor<2x3x4x4xf32>
  %ones = graph.constant dense<1.000000e+00> : tensor<4x4xf32>
  %lower = graph.trilu %ones {upper = false} : (tensor<4x4xf32>) -> tensor<4x4xf32>
  %zero = graph.constant dense<0.000000e+00> : tensor<f32>
  %hidden = graph.equal %lower, %zero : (tensor<4x4xf32>, tensor<f32>) -> tensor<4x4xi1>
  %fill = graph.constant dense<-1.000000e+09> : tensor<f32>
  %masked = graph.where %hidden, %fill, %scaled : (tensor<4x4xi1>, tensor<f32>, tensor<2x3x4x4xf32>) -> tensor<2x3x4x4xf32>
  %p = graph.softmax %masked {axis = 3 : i64} : (tensor<2x3x4x4xf32>) -> tensor<2x3x4x4xf32>
  %o = graph.matmul %p, %vh : (tensor<2x3x4x4xf32>, tensor<2x3x4x8xf32>) -> tensor<2x3x4x8xf32>
  return %o : tensor<2x3x4x8xf32>
}

// PyTorch's export of k^T: k's heads transposed out, flattened to
// [B*H, S, D], transposed, reshaped back. The moves compose first (their
// canonicalization patterns, on them alone), so k too is read as it was.
// CHECK-LABEL: func.func @exported_k_transposed
// CHECK: graph.attention %arg0, %arg1, %arg2 {bshd, causal = true
func.func @exported_k_transposed(%q: tensor<2x4x3x8xf32>, %k: tensor<2x4x3x8xf32>, %v: tensor<2x4x3x8xf32>) -> tensor<2x3x4x8xf32> {
  %qh = graph.transpose %q {perm = array<i64: 0, 2, 1, 3>} : (tensor<2x4x3x8xf32>) -> tensor<2x3x4x8xf32>
  %kh = graph.transpose %k {perm = array<i64: 0, 2, 1, 3>} : (tensor<2x4x3x8xf32>) -> tensor<2x3x4x8xf32>
  %k3 = graph.reshape %kh : (tensor<2x3x4x8xf32>) -> tensor<6x4x8xf32>
  %kt3 = graph.transpose %k3 {perm = array<i64: 0, 2, 1>} : (tensor<6x4x8xf32>) -> tensor<6x8x4xf32>
  %kt = graph.reshape %kt3 : (tensor<6x8x4xf32>) -> tensor<2x3x8x4xf32>
  %vh = graph.transpose %v {perm = array<i64: 0, 2, 1, 3>} : (tensor<2x4x3x8xf32>) -> tensor<2x3x4x8xf32>
  %s = graph.matmul %qh, %kt : (tensor<2x3x4x8xf32>, tensor<2x3x8x4xf32>) -> tensor<2x3x4x4xf32>
  %root = graph.constant dense<2.82842712> : tensor<f32>
  %scaled = graph.div %s, %root : (tensor<2x3x4x4xf32>, tensor<f32>) -> tensor<2x3x4x4xf32>
  %ones = graph.constant dense<1.000000e+00> : tensor<4x4xf32>
  %lower = graph.trilu %ones {upper = false} : (tensor<4x4xf32>) -> tensor<4x4xf32>
  %zero = graph.constant dense<0.000000e+00> : tensor<f32>
  %hidden = graph.equal %lower, %zero : (tensor<4x4xf32>, tensor<f32>) -> tensor<4x4xi1>
  %fill = graph.constant dense<-1.000000e+09> : tensor<f32>
  %masked = graph.where %hidden, %fill, %scaled : (tensor<4x4xi1>, tensor<f32>, tensor<2x3x4x4xf32>) -> tensor<2x3x4x4xf32>
  %p = graph.softmax %masked {axis = 3 : i64} : (tensor<2x3x4x4xf32>) -> tensor<2x3x4x4xf32>
  %o = graph.matmul %p, %vh : (tensor<2x3x4x4xf32>, tensor<2x3x4x8xf32>) -> tensor<2x3x4x8xf32>
  return %o : tensor<2x3x4x8xf32>
}

// transformers' GPT-2: q, k and v the three pieces of one projection's
// product [B, S, 3 H D], split out (graph.split, or the slices it becomes),
// each viewed as [B, S, H, D]: the op reads them where they are (`packed`:
// the product viewed as [B, S, 3, H, D]), no copies.
// CHECK-LABEL: func.func @packed_projection
// CHECK-SAME: 1 read q, k and v where one projection wrote them side by side, no copies split them out
// CHECK: %[[P:.*]] = graph.reshape %arg0 : (tensor<2x4x72xf32>) -> tensor<2x4x3x3x8xf32>
// CHECK: graph.attention %[[P]], %[[P]], %[[P]] {bshd, causal = true, packed, scale = 0.3535{{[0-9]*}} : f64} : (tensor<2x4x3x3x8xf32>, tensor<2x4x3x3x8xf32>, tensor<2x4x3x3x8xf32>) -> (tensor<2x4x3x8xf32>, tensor<2x3x4xf32>)
func.func @packed_projection(%qkv: tensor<2x4x72xf32>) -> tensor<2x3x4x8xf32> {
  %q, %k, %v = graph.split %qkv {axis = 2 : i64, sizes = array<i64: 24, 24, 24>} : (tensor<2x4x72xf32>) -> (tensor<2x4x24xf32>, tensor<2x4x24xf32>, tensor<2x4x24xf32>)
  %q4 = graph.reshape %q : (tensor<2x4x24xf32>) -> tensor<2x4x3x8xf32>
  %k4 = graph.reshape %k : (tensor<2x4x24xf32>) -> tensor<2x4x3x8xf32>
  %v4 = graph.reshape %v : (tensor<2x4x24xf32>) -> tensor<2x4x3x8xf32>
  %qh = graph.transpose %q4 {perm = array<i64: 0, 2, 1, 3>} : (tensor<2x4x3x8xf32>) -> tensor<2x3x4x8xf32>
  %kt = graph.transpose %k4 {perm = array<i64: 0, 2, 3, 1>} : (tensor<2x4x3x8xf32>) -> tensor<2x3x8x4xf32>
  %vh = graph.transpose %v4 {perm = array<i64: 0, 2, 1, 3>} : (tensor<2x4x3x8xf32>) -> tensor<2x3x4x8xf32>
  %s = graph.matmul %qh, %kt : (tensor<2x3x4x8xf32>, tensor<2x3x8x4xf32>) -> tensor<2x3x4x4xf32>
  %root = graph.constant dense<2.82842712> : tensor<f32>
  %scaled = graph.div %s, %root : (tensor<2x3x4x4xf32>, tensor<f32>) -> tensor<2x3x4x4xf32>
  %ones = graph.constant dense<1.000000e+00> : tensor<4x4xf32>
  %lower = graph.trilu %ones {upper = false} : (tensor<4x4xf32>) -> tensor<4x4xf32>
  %zero = graph.constant dense<0.000000e+00> : tensor<f32>
  %hidden = graph.equal %lower, %zero : (tensor<4x4xf32>, tensor<f32>) -> tensor<4x4xi1>
  %fill = graph.constant dense<-1.000000e+09> : tensor<f32>
  %masked = graph.where %hidden, %fill, %scaled : (tensor<4x4xi1>, tensor<f32>, tensor<2x3x4x4xf32>) -> tensor<2x3x4x4xf32>
  %p = graph.softmax %masked {axis = 3 : i64} : (tensor<2x3x4x4xf32>) -> tensor<2x3x4x4xf32>
  %o = graph.matmul %p, %vh : (tensor<2x3x4x4xf32>, tensor<2x3x4x8xf32>) -> tensor<2x3x4x8xf32>
  return %o : tensor<2x3x4x8xf32>
}

// The same pieces cut by slices of a 2-D product [B*S, 3 H D]: packed too.
// Pieces out of order (k first) or not the product's thirds: bshd only.
// CHECK-LABEL: func.func @packed_slices
// CHECK: %[[P:.*]] = graph.reshape %arg0 : (tensor<8x72xf32>) -> tensor<2x4x3x3x8xf32>
// CHECK: graph.attention %[[P]], %[[P]], %[[P]] {bshd, packed, scale
// CHECK-LABEL: func.func @pieces_out_of_order
// CHECK-NOT: packed
// CHECK: graph.attention %{{.*}}, %{{.*}}, %{{.*}} {bshd, scale
func.func @packed_slices(%qkv: tensor<8x72xf32>) -> tensor<2x3x4x8xf32> {
  %q = graph.slice %qkv {offsets = array<i64: 0, 0>, sizes = array<i64: 8, 24>, strides = array<i64: 1, 1>} : (tensor<8x72xf32>) -> tensor<8x24xf32>
  %k = graph.slice %qkv {offsets = array<i64: 0, 24>, sizes = array<i64: 8, 24>, strides = array<i64: 1, 1>} : (tensor<8x72xf32>) -> tensor<8x24xf32>
  %v = graph.slice %qkv {offsets = array<i64: 0, 48>, sizes = array<i64: 8, 24>, strides = array<i64: 1, 1>} : (tensor<8x72xf32>) -> tensor<8x24xf32>
  %q4 = graph.reshape %q : (tensor<8x24xf32>) -> tensor<2x4x3x8xf32>
  %k4 = graph.reshape %k : (tensor<8x24xf32>) -> tensor<2x4x3x8xf32>
  %v4 = graph.reshape %v : (tensor<8x24xf32>) -> tensor<2x4x3x8xf32>
  %qh = graph.transpose %q4 {perm = array<i64: 0, 2, 1, 3>} : (tensor<2x4x3x8xf32>) -> tensor<2x3x4x8xf32>
  %kt = graph.transpose %k4 {perm = array<i64: 0, 2, 3, 1>} : (tensor<2x4x3x8xf32>) -> tensor<2x3x8x4xf32>
  %vh = graph.transpose %v4 {perm = array<i64: 0, 2, 1, 3>} : (tensor<2x4x3x8xf32>) -> tensor<2x3x4x8xf32>
  %s = graph.matmul %qh, %kt : (tensor<2x3x4x8xf32>, tensor<2x3x8x4xf32>) -> tensor<2x3x4x4xf32>
  %root = graph.constant dense<2.82842712> : tensor<f32>
  %scaled = graph.div %s, %root : (tensor<2x3x4x4xf32>, tensor<f32>) -> tensor<2x3x4x4xf32>
  %p = graph.softmax %scaled {axis = 3 : i64} : (tensor<2x3x4x4xf32>) -> tensor<2x3x4x4xf32>
  %o = graph.matmul %p, %vh : (tensor<2x3x4x4xf32>, tensor<2x3x4x8xf32>) -> tensor<2x3x4x8xf32>
  return %o : tensor<2x3x4x8xf32>
}
func.func @pieces_out_of_order(%qkv: tensor<8x72xf32>) -> tensor<2x3x4x8xf32> {
  %k = graph.slice %qkv {offsets = array<i64: 0, 0>, sizes = array<i64: 8, 24>, strides = array<i64: 1, 1>} : (tensor<8x72xf32>) -> tensor<8x24xf32>
  %q = graph.slice %qkv {offsets = array<i64: 0, 24>, sizes = array<i64: 8, 24>, strides = array<i64: 1, 1>} : (tensor<8x72xf32>) -> tensor<8x24xf32>
  %v = graph.slice %qkv {offsets = array<i64: 0, 48>, sizes = array<i64: 8, 24>, strides = array<i64: 1, 1>} : (tensor<8x72xf32>) -> tensor<8x24xf32>
  %q4 = graph.reshape %q : (tensor<8x24xf32>) -> tensor<2x4x3x8xf32>
  %k4 = graph.reshape %k : (tensor<8x24xf32>) -> tensor<2x4x3x8xf32>
  %v4 = graph.reshape %v : (tensor<8x24xf32>) -> tensor<2x4x3x8xf32>
  %qh = graph.transpose %q4 {perm = array<i64: 0, 2, 1, 3>} : (tensor<2x4x3x8xf32>) -> tensor<2x3x4x8xf32>
  %kt = graph.transpose %k4 {perm = array<i64: 0, 2, 3, 1>} : (tensor<2x4x3x8xf32>) -> tensor<2x3x8x4xf32>
  %vh = graph.transpose %v4 {perm = array<i64: 0, 2, 1, 3>} : (tensor<2x4x3x8xf32>) -> tensor<2x3x4x8xf32>
  %s = graph.matmul %qh, %kt : (tensor<2x3x4x8xf32>, tensor<2x3x8x4xf32>) -> tensor<2x3x4x4xf32>
  %root = graph.constant dense<2.82842712> : tensor<f32>
  %scaled = graph.div %s, %root : (tensor<2x3x4x4xf32>, tensor<f32>) -> tensor<2x3x4x4xf32>
  %p = graph.softmax %scaled {axis = 3 : i64} : (tensor<2x3x4x4xf32>) -> tensor<2x3x4x4xf32>
  %o = graph.matmul %p, %vh : (tensor<2x3x4x4xf32>, tensor<2x3x4x8xf32>) -> tensor<2x3x4x8xf32>
  return %o : tensor<2x3x4x8xf32>
}

// Llama as transformers exports it: q and k rotated (graph.rotary, its
// tables [1, 1, S, D]) after the heads' transpose; k and v repeated over
// the heads for grouped query attention (unsqueeze, broadcast, reshape);
// k^T spelled reshape-transpose-reshape. The op reads all three as
// [B, S, H, D] (bshd): the rotary embeddings rotate the rows where the
// projections wrote them (tables [1, S, 1, D]), k and v with their own 2
// heads (not repeated: q's heads 0, 1 read their head 0, 2, 3 head 1),
// and no transpose, unsqueeze or broadcast is left (once cleanup removes
// the old chain).
// CHECK-LABEL: func.func @llama_rows
// CLEAN-LABEL: func.func @llama_rows
// CHECK-SAME: 1 read q, k, v and write their output as [batch, seq, heads, dim], no transposes around them; 1 read k and v once per group of query heads (grouped-query attention), not repeated over them
// CLEAN-NOT: graph.transpose
// CLEAN: %[[Q:.*]] = graph.rotary %arg0, %{{.*}}, %{{.*}} : (tensor<2x16x4x8xf32>, tensor<1x16x1x8xf32>, tensor<1x16x1x8xf32>) -> tensor<2x16x4x8xf32>
// CLEAN: %[[K:.*]] = graph.rotary %arg1, %{{.*}}, %{{.*}} : (tensor<2x16x2x8xf32>, tensor<1x16x1x8xf32>, tensor<1x16x1x8xf32>) -> tensor<2x16x2x8xf32>
// CLEAN-NOT: graph.unsqueeze
// CLEAN-NOT: graph.broadcast
// CLEAN: graph.attention %[[Q]], %[[K]], %arg2 {bshd, scale = {{.*}}} : (tensor<2x16x4x8xf32>, tensor<2x16x2x8xf32>, tensor<2x16x2x8xf32>) -> (tensor<2x16x4x8xf32>, tensor<2x4x16xf32>)
// CLEAN-NOT: graph.transpose
// CLEAN: return
func.func @llama_rows(%q: tensor<2x16x4x8xf32>, %k: tensor<2x16x2x8xf32>, %v: tensor<2x16x2x8xf32>, %cos: tensor<1x1x16x8xf32>, %sin: tensor<1x1x16x8xf32>) -> tensor<2x16x4x8xf32> {
  %qh = graph.transpose %q {perm = array<i64: 0, 2, 1, 3>} : (tensor<2x16x4x8xf32>) -> tensor<2x4x16x8xf32>
  %kh = graph.transpose %k {perm = array<i64: 0, 2, 1, 3>} : (tensor<2x16x2x8xf32>) -> tensor<2x2x16x8xf32>
  %vh = graph.transpose %v {perm = array<i64: 0, 2, 1, 3>} : (tensor<2x16x2x8xf32>) -> tensor<2x2x16x8xf32>
  %qr = graph.rotary %qh, %cos, %sin : (tensor<2x4x16x8xf32>, tensor<1x1x16x8xf32>, tensor<1x1x16x8xf32>) -> tensor<2x4x16x8xf32>
  %kr = graph.rotary %kh, %cos, %sin : (tensor<2x2x16x8xf32>, tensor<1x1x16x8xf32>, tensor<1x1x16x8xf32>) -> tensor<2x2x16x8xf32>
  %ku = graph.unsqueeze %kr {axes = array<i64: 2>} : (tensor<2x2x16x8xf32>) -> tensor<2x2x1x16x8xf32>
  %kb = graph.broadcast %ku {shape = array<i64: 2, 2, 2, 16, 8>} : (tensor<2x2x1x16x8xf32>) -> tensor<2x2x2x16x8xf32>
  %vu = graph.unsqueeze %vh {axes = array<i64: 2>} : (tensor<2x2x16x8xf32>) -> tensor<2x2x1x16x8xf32>
  %vb = graph.broadcast %vu {shape = array<i64: 2, 2, 2, 16, 8>} : (tensor<2x2x1x16x8xf32>) -> tensor<2x2x2x16x8xf32>
  %vr = graph.reshape %vb : (tensor<2x2x2x16x8xf32>) -> tensor<2x4x16x8xf32>
  %k3 = graph.reshape %kb : (tensor<2x2x2x16x8xf32>) -> tensor<8x16x8xf32>
  %kt3 = graph.transpose %k3 {perm = array<i64: 0, 2, 1>} : (tensor<8x16x8xf32>) -> tensor<8x8x16xf32>
  %kt = graph.reshape %kt3 : (tensor<8x8x16xf32>) -> tensor<2x4x8x16xf32>
  %s = graph.matmul %qr, %kt : (tensor<2x4x16x8xf32>, tensor<2x4x8x16xf32>) -> tensor<2x4x16x16xf32>
  %root = graph.constant dense<2.82842712> : tensor<f32>
  %scaled = graph.div %s, %root : (tensor<2x4x16x16xf32>, tensor<f32>) -> tensor<2x4x16x16xf32>
  %p = graph.softmax %scaled {axis = 3 : i64} : (tensor<2x4x16x16xf32>) -> tensor<2x4x16x16xf32>
  %o = graph.matmul %p, %vr : (tensor<2x4x16x16xf32>, tensor<2x4x16x8xf32>) -> tensor<2x4x16x8xf32>
  %back = graph.transpose %o {perm = array<i64: 0, 2, 1, 3>} : (tensor<2x4x16x8xf32>) -> tensor<2x16x4x8xf32>
  return %back : tensor<2x16x4x8xf32>
}

// Grouped-query attention heads first (no transposes to see through): q
// [B, 4, S, D], k and v [B, 2, S, D] repeated to 4 heads; the op reads
// them unrepeated.
// CHECK-LABEL: func.func @grouped_heads_first
// CHECK-SAME: 1 read k and v once per group of query heads
// CLEAN-LABEL: func.func @grouped_heads_first
// CLEAN-NOT: graph.broadcast
// CLEAN: graph.attention %arg0, %arg1, %arg2 {scale = {{.*}}} : (tensor<2x4x16x8xf32>, tensor<2x2x16x8xf32>, tensor<2x2x16x8xf32>) -> (tensor<2x4x16x8xf32>, tensor<2x4x16xf32>)
// CLEAN-NEXT: return
func.func @grouped_heads_first(%q: tensor<2x4x16x8xf32>, %k: tensor<2x2x16x8xf32>, %v: tensor<2x2x16x8xf32>) -> tensor<2x4x16x8xf32> {
  %ku = graph.unsqueeze %k {axes = array<i64: 2>} : (tensor<2x2x16x8xf32>) -> tensor<2x2x1x16x8xf32>
  %kb = graph.broadcast %ku {shape = array<i64: 2, 2, 2, 16, 8>} : (tensor<2x2x1x16x8xf32>) -> tensor<2x2x2x16x8xf32>
  %kr = graph.reshape %kb : (tensor<2x2x2x16x8xf32>) -> tensor<2x4x16x8xf32>
  %vu = graph.unsqueeze %v {axes = array<i64: 2>} : (tensor<2x2x16x8xf32>) -> tensor<2x2x1x16x8xf32>
  %vb = graph.broadcast %vu {shape = array<i64: 2, 2, 2, 16, 8>} : (tensor<2x2x1x16x8xf32>) -> tensor<2x2x2x16x8xf32>
  %vr = graph.reshape %vb : (tensor<2x2x2x16x8xf32>) -> tensor<2x4x16x8xf32>
  %kt = graph.transpose %kr {perm = array<i64: 0, 1, 3, 2>} : (tensor<2x4x16x8xf32>) -> tensor<2x4x8x16xf32>
  %s = graph.matmul %q, %kt : (tensor<2x4x16x8xf32>, tensor<2x4x8x16xf32>) -> tensor<2x4x16x16xf32>
  %root = graph.constant dense<2.82842712> : tensor<f32>
  %scaled = graph.div %s, %root : (tensor<2x4x16x16xf32>, tensor<f32>) -> tensor<2x4x16x16xf32>
  %p = graph.softmax %scaled {axis = 3 : i64} : (tensor<2x4x16x16xf32>) -> tensor<2x4x16x16xf32>
  %o = graph.matmul %p, %vr : (tensor<2x4x16x16xf32>, tensor<2x4x16x8xf32>) -> tensor<2x4x16x8xf32>
  return %o : tensor<2x4x16x8xf32>
}
