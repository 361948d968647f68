// RUN: %dtc-opt %s --pass-pipeline='builtin.module(func.func(dtc-fuse-matmul-bias))' | FileCheck %s

// A linear layer and a tanh GELU read by nothing else: one matmul_bias;
// the bias of leading 1s made a vector; a ReLU after the second.
// CHECK-LABEL: func.func @linear_layers
// CHECK-SAME: dtc.notes = ["fusion: 2 matmuls add their bias as they write (1 then ReLU, 1 then tanh GELU): the GEMM's epilogue, no pass of their own"]
// CHECK: %[[H:.*]] = graph.matmul_bias %arg0, %arg1, %arg2 {activation = "gelu_tanh"} : (tensor<2x4x8xf32>, tensor<8x16xf32>, tensor<16xf32>) -> tensor<2x4x16xf32>
// CHECK: %[[B:.*]] = graph.reshape %arg4 : (tensor<1x8xf32>) -> tensor<8xf32>
// CHECK: %[[Y:.*]] = graph.matmul_bias %[[H]], %arg3, %[[B]] {activation = "relu", transpose_rhs = true}
// CHECK-NOT: graph.add
// CHECK: return %[[Y]]
func.func @linear_layers(%x: tensor<2x4x8xf32>, %w1: tensor<8x16xf32>, %b1: tensor<16xf32>,
                         %w2: tensor<8x16xf32>, %b2: tensor<1x8xf32>) -> tensor<2x4x8xf32> {
  %m1 = graph.matmul %x, %w1 : (tensor<2x4x8xf32>, tensor<8x16xf32>) -> tensor<2x4x16xf32>
  %a1 = graph.add %m1, %b1 : (tensor<2x4x16xf32>, tensor<16xf32>) -> tensor<2x4x16xf32>
  %g = graph.gelu %a1 {approximate = "tanh"} : (tensor<2x4x16xf32>) -> tensor<2x4x16xf32>
  %m2 = graph.matmul %g, %w2 {transpose_rhs = true} : (tensor<2x4x16xf32>, tensor<8x16xf32>) -> tensor<2x4x8xf32>
  %a2 = graph.add %b2, %m2 : (tensor<1x8xf32>, tensor<2x4x8xf32>) -> tensor<2x4x8xf32>
  %r = graph.relu %a2 : (tensor<2x4x8xf32>) -> tensor<2x4x8xf32>
  return %r : tensor<2x4x8xf32>
}

// In training the GELU's input is also its gradient's: a tanh GELU joins
// the product all the same, which keeps the biased value as a second
// result for the other readers (cuBLASLt's GELU_AUX_BIAS). An erf GELU (no
// cuBLASLt epilogue) stays apart.
// CHECK-LABEL: func.func @activation_read_elsewhere
// CHECK: %[[G:.*]], %[[PRE:.*]] = graph.matmul_bias %arg0, %arg1, %arg2 {activation = "gelu_tanh", keep_preactivation} : (tensor<4x8xf32>, tensor<8x16xf32>, tensor<16xf32>) -> (tensor<4x16xf32>, tensor<4x16xf32>)
// CHECK-NOT: approximate = "tanh"
// CHECK: %[[Q:.*]] = graph.matmul_bias %arg0, %arg1, %arg2 : (tensor<4x8xf32>, tensor<8x16xf32>, tensor<16xf32>) -> tensor<4x16xf32>
// CHECK: %[[E:.*]] = graph.gelu %[[Q]] :
// CHECK: return %[[G]], %[[PRE]], %[[E]]
func.func @activation_read_elsewhere(%x: tensor<4x8xf32>, %w: tensor<8x16xf32>, %b: tensor<16xf32>)
    -> (tensor<4x16xf32>, tensor<4x16xf32>, tensor<4x16xf32>) {
  %m = graph.matmul %x, %w : (tensor<4x8xf32>, tensor<8x16xf32>) -> tensor<4x16xf32>
  %a = graph.add %m, %b : (tensor<4x16xf32>, tensor<16xf32>) -> tensor<4x16xf32>
  %g = graph.gelu %a {approximate = "tanh"} : (tensor<4x16xf32>) -> tensor<4x16xf32>
  %m2 = graph.matmul %x, %w : (tensor<4x8xf32>, tensor<8x16xf32>) -> tensor<4x16xf32>
  %a2 = graph.add %m2, %b : (tensor<4x16xf32>, tensor<16xf32>) -> tensor<4x16xf32>
  %e = graph.gelu %a2 : (tensor<4x16xf32>) -> tensor<4x16xf32>
  return %g, %a, %e : tensor<4x16xf32>, tensor<4x16xf32>, tensor<4x16xf32>
}

// transformers' GPT-2: [B*T, N] reshaped to [B, T, N] between the bias and
// the GELU. The GELU joins the product all the same, and the results are
// reshaped for their readers (the kept input too, in training).
// CHECK-LABEL: func.func @through_a_reshape
// CHECK: %[[G:.*]], %[[PRE:.*]] = graph.matmul_bias %arg0, %arg1, %arg2 {activation = "gelu_tanh", keep_preactivation} : (tensor<8x4xf32>, tensor<4x16xf32>, tensor<16xf32>) -> (tensor<8x16xf32>, tensor<8x16xf32>)
// CHECK: %[[G3:.*]] = graph.reshape %[[G]] : (tensor<8x16xf32>) -> tensor<2x4x16xf32>
// CHECK: %[[PRE3:.*]] = graph.reshape %[[PRE]] : (tensor<8x16xf32>) -> tensor<2x4x16xf32>
// CHECK: %[[I:.*]] = graph.matmul_bias %arg0, %arg1, %arg2 {activation = "gelu_tanh"} : (tensor<8x4xf32>, tensor<4x16xf32>, tensor<16xf32>) -> tensor<8x16xf32>
// CHECK: %[[I3:.*]] = graph.reshape %[[I]] : (tensor<8x16xf32>) -> tensor<2x4x16xf32>
// CHECK: return %[[G3]], %[[PRE3]], %[[I3]]
func.func @through_a_reshape(%x: tensor<8x4xf32>, %w: tensor<4x16xf32>, %b: tensor<16xf32>)
    -> (tensor<2x4x16xf32>, tensor<2x4x16xf32>, tensor<2x4x16xf32>) {
  %m = graph.matmul %x, %w : (tensor<8x4xf32>, tensor<4x16xf32>) -> tensor<8x16xf32>
  %a = graph.add %m, %b : (tensor<8x16xf32>, tensor<16xf32>) -> tensor<8x16xf32>
  %r = graph.reshape %a : (tensor<8x16xf32>) -> tensor<2x4x16xf32>
  %g = graph.gelu %r {approximate = "tanh"} : (tensor<2x4x16xf32>) -> tensor<2x4x16xf32>
  %m2 = graph.matmul %x, %w : (tensor<8x4xf32>, tensor<4x16xf32>) -> tensor<8x16xf32>
  %a2 = graph.add %m2, %b : (tensor<8x16xf32>, tensor<16xf32>) -> tensor<8x16xf32>
  %r2 = graph.reshape %a2 : (tensor<8x16xf32>) -> tensor<2x4x16xf32>
  %g2 = graph.gelu %r2 {approximate = "tanh"} : (tensor<2x4x16xf32>) -> tensor<2x4x16xf32>
  return %g, %r, %g2 : tensor<2x4x16xf32>, tensor<2x4x16xf32>, tensor<2x4x16xf32>
}

// Left alone: a product read elsewhere, a bias that is not along the
// columns, a product plus another product (a sum of products: @product_sums).
// CHECK-LABEL: func.func @left_alone
// CHECK-NOT: graph.matmul_bias
// CHECK: return
func.func @left_alone(%x: tensor<4x8xf32>, %w: tensor<8x16xf32>, %b: tensor<16xf32>,
                      %rows: tensor<4x1xf32>) -> (tensor<4x16xf32>, tensor<4x16xf32>, tensor<4x16xf32>, tensor<4x16xf32>) {
  %m = graph.matmul %x, %w : (tensor<4x8xf32>, tensor<8x16xf32>) -> tensor<4x16xf32>
  %a = graph.add %m, %b : (tensor<4x16xf32>, tensor<16xf32>) -> tensor<4x16xf32>
  %m2 = graph.matmul %x, %w : (tensor<4x8xf32>, tensor<8x16xf32>) -> tensor<4x16xf32>
  %a2 = graph.add %m2, %rows : (tensor<4x16xf32>, tensor<4x1xf32>) -> tensor<4x16xf32>
  %m3 = graph.matmul %x, %w : (tensor<4x8xf32>, tensor<8x16xf32>) -> tensor<4x16xf32>
  %m4 = graph.matmul %x, %w : (tensor<4x8xf32>, tensor<8x16xf32>) -> tensor<4x16xf32>
  %a3 = graph.add %m3, %m4 : (tensor<4x16xf32>, tensor<4x16xf32>) -> tensor<4x16xf32>
  return %a, %m, %a2, %a3 : tensor<4x16xf32>, tensor<4x16xf32>, tensor<4x16xf32>, tensor<4x16xf32>
}

// A residual connection: the biased product (no activation, read by the
// add alone) takes the other term as its addend (cuBLASLt's C); also
// through transformers' [B*T, N] -> [B, T, N] reshape, the addend then
// reshaped to the product's rows.
// CHECK-LABEL: func.func @residual
// CHECK-SAME: 2 adding a residual connection's other term too
// CHECK: %[[S:.*]] = graph.matmul_bias %arg0, %arg1, %arg2, %arg3 : (tensor<2x4x8xf32>, tensor<8x8xf32>, tensor<8xf32>, tensor<2x4x8xf32>) -> tensor<2x4x8xf32>
// CHECK: %[[R:.*]] = graph.reshape %[[S]] : (tensor<2x4x8xf32>) -> tensor<8x8xf32>
// CHECK: %[[S2:.*]] = graph.matmul_bias %[[R]], %arg1, %arg2, %{{.*}} : (tensor<8x8xf32>, tensor<8x8xf32>, tensor<8xf32>, tensor<8x8xf32>) -> tensor<8x8xf32>
// CHECK: %[[S3:.*]] = graph.reshape %[[S2]] : (tensor<8x8xf32>) -> tensor<2x4x8xf32>
// CHECK-NOT: graph.add
// CHECK: return %[[S3]]
func.func @residual(%x: tensor<2x4x8xf32>, %w: tensor<8x8xf32>, %b: tensor<8xf32>, %h: tensor<2x4x8xf32>) -> tensor<2x4x8xf32> {
  %m = graph.matmul %x, %w : (tensor<2x4x8xf32>, tensor<8x8xf32>) -> tensor<2x4x8xf32>
  %a = graph.add %m, %b : (tensor<2x4x8xf32>, tensor<8xf32>) -> tensor<2x4x8xf32>
  %s = graph.add %h, %a : (tensor<2x4x8xf32>, tensor<2x4x8xf32>) -> tensor<2x4x8xf32>
  %rows = graph.reshape %s : (tensor<2x4x8xf32>) -> tensor<8x8xf32>
  %m2 = graph.matmul %rows, %w : (tensor<8x8xf32>, tensor<8x8xf32>) -> tensor<8x8xf32>
  %a2 = graph.add %m2, %b : (tensor<8x8xf32>, tensor<8xf32>) -> tensor<8x8xf32>
  %r2 = graph.reshape %a2 : (tensor<8x8xf32>) -> tensor<2x4x8xf32>
  %s2 = graph.add %r2, %s : (tensor<2x4x8xf32>, tensor<2x4x8xf32>) -> tensor<2x4x8xf32>
  return %s2 : tensor<2x4x8xf32>
}

// Not joined: the biased product read elsewhere too, an activation after
// it, an addend that broadcasts.
// CHECK-LABEL: func.func @residual_left_alone
// CHECK-COUNT-3: graph.add
// CHECK: return
func.func @residual_left_alone(%x: tensor<4x8xf32>, %w: tensor<8x8xf32>, %b: tensor<8xf32>, %h: tensor<4x8xf32>, %row: tensor<8xf32>) -> (tensor<4x8xf32>, tensor<4x8xf32>, tensor<4x8xf32>, tensor<4x8xf32>) {
  %m = graph.matmul %x, %w : (tensor<4x8xf32>, tensor<8x8xf32>) -> tensor<4x8xf32>
  %a = graph.add %m, %b : (tensor<4x8xf32>, tensor<8xf32>) -> tensor<4x8xf32>
  %s = graph.add %h, %a : (tensor<4x8xf32>, tensor<4x8xf32>) -> tensor<4x8xf32>
  %m2 = graph.matmul %x, %w : (tensor<4x8xf32>, tensor<8x8xf32>) -> tensor<4x8xf32>
  %a2 = graph.add %m2, %b : (tensor<4x8xf32>, tensor<8xf32>) -> tensor<4x8xf32>
  %r2 = graph.relu %a2 : (tensor<4x8xf32>) -> tensor<4x8xf32>
  %s2 = graph.add %h, %r2 : (tensor<4x8xf32>, tensor<4x8xf32>) -> tensor<4x8xf32>
  %m3 = graph.matmul %x, %w : (tensor<4x8xf32>, tensor<8x8xf32>) -> tensor<4x8xf32>
  %a3 = graph.add %m3, %b : (tensor<4x8xf32>, tensor<8xf32>) -> tensor<4x8xf32>
  %s3 = graph.add %a3, %row : (tensor<4x8xf32>, tensor<8xf32>) -> tensor<4x8xf32>
  return %a, %s, %s2, %s3 : tensor<4x8xf32>, tensor<4x8xf32>, tensor<4x8xf32>, tensor<4x8xf32>
}

// The backward's residual stream: a layer norm's input gradient plus the
// gradient arriving around the layer norm is one layer_norm_backward with
// that gradient its residual, where the gradient op stood (the scale's
// gradient reads its statistics before the add).
// CHECK-LABEL: func.func @residual_gradient
// CHECK-SAME: fusion: 1 layer norm gradients add the residual stream's as they write it
// CHECK: %[[G:[^,]*]], %{{[^,]*}}, %[[R:.*]] = graph.layer_norm_backward %arg0, %arg1, %arg2, %arg3 {axis = 1 : i64
// CHECK: graph.mul %arg2, %[[R]]
// CHECK-NOT: graph.add
// CHECK: return %[[G]]
func.func @residual_gradient(%x: tensor<4x8xf32>, %s: tensor<8xf32>, %dy: tensor<4x8xf32>, %around: tensor<4x8xf32>) -> (tensor<4x8xf32>, tensor<4x8xf32>) {
  %dx, %mean, %rstd = graph.layer_norm_backward %x, %s, %dy {axis = 1 : i64} : (tensor<4x8xf32>, tensor<8xf32>, tensor<4x8xf32>) -> (tensor<4x8xf32>, tensor<4x1xf32>, tensor<4x1xf32>)
  %p = graph.mul %dy, %rstd : (tensor<4x8xf32>, tensor<4x1xf32>) -> tensor<4x8xf32>
  %sum = graph.add %around, %dx : (tensor<4x8xf32>, tensor<4x8xf32>) -> tensor<4x8xf32>
  return %sum, %p : tensor<4x8xf32>, tensor<4x8xf32>
}

// A bias's gradient, the sum of dy's rows, is written by the GEMM that
// reads them for the weight's gradient x^T dy (bf16 operands, f32 sums
// here, as mixed precision has them), where the product stood. A sum of
// another value, or over the other axis, stays a reduction; a product
// not of the form x^T dy leaves the sum alone.
// CHECK-LABEL: func.func @bias_gradient
// CHECK-SAME: fusion: 1 weight gradients' GEMMs sum their output gradient's rows as they read them
// CHECK: graph.reduce_sum %arg1 {axes = array<i64: 1>}
// CHECK-NEXT: %[[DW:[^,]*]], %[[DB:.*]] = graph.matmul_grad %arg0, %arg1 : (tensor<16x8xbf16>, tensor<16x4xbf16>) -> (tensor<8x4xf32>, tensor<1x4xf32>)
// CHECK-NEXT: %[[V:.*]] = graph.reshape %[[DB]]
// CHECK: graph.reduce_sum %arg2 {axes = array<i64: 0>}
// CHECK: graph.matmul %arg2, %arg3 {transpose_rhs = true}
// CHECK: return %[[DW]], %[[V]],
func.func @bias_gradient(%x: tensor<16x8xbf16>, %dy: tensor<16x4xbf16>, %dz: tensor<16x4xbf16>, %w: tensor<8x4xbf16>) -> (tensor<8x4xf32>, tensor<4xf32>, tensor<16x1xf32>, tensor<1x4xf32>, tensor<16x8xbf16>) {
  %sum = graph.reduce_sum %dy {axes = array<i64: 0>} : (tensor<16x4xbf16>) -> tensor<1x4xf32>
  %db = graph.reshape %sum : (tensor<1x4xf32>) -> tensor<4xf32>
  %rows = graph.reduce_sum %dy {axes = array<i64: 1>} : (tensor<16x4xbf16>) -> tensor<16x1xf32>
  %dw = graph.matmul %x, %dy {transpose_lhs = true} : (tensor<16x8xbf16>, tensor<16x4xbf16>) -> tensor<8x4xf32>
  %other = graph.reduce_sum %dz {axes = array<i64: 0>} : (tensor<16x4xbf16>) -> tensor<1x4xf32>
  %dx = graph.matmul %dz, %w {transpose_rhs = true} : (tensor<16x4xbf16>, tensor<8x4xbf16>) -> tensor<16x8xbf16>
  return %dw, %db, %rows, %other, %dx : tensor<8x4xf32>, tensor<4xf32>, tensor<16x1xf32>, tensor<1x4xf32>, tensor<16x8xbf16>
}

// A linear layer on [batch, seq, features]: its bias's gradient sums dy
// over batch and sequence, its weight's product reads x and dy reshaped to
// rows. The joined op stands at the product (the large result made no
// earlier), and what reads the sum before it moves down after it; where
// that cannot move (here: another part of a micro-batched step), at the
// sum, the product's operands' views moving up to it.
// CHECK-LABEL: func.func @bias_gradient_of_rows
// CHECK: %[[XR:.*]] = graph.reshape %arg0 : (tensor<2x8x8xf32>) -> tensor<16x8xf32>
// CHECK-NEXT: %[[ROWS:.*]] = graph.reshape %arg1 : (tensor<2x8x4xf32>) -> tensor<16x4xf32>
// CHECK-NEXT: %[[DW:[^,]*]], %[[DB:.*]] = graph.matmul_grad %[[XR]], %[[ROWS]] : (tensor<16x8xf32>, tensor<16x4xf32>) -> (tensor<8x4xf32>, tensor<1x1x4xf32>)
// CHECK-NEXT: %[[V:.*]] = graph.reshape %[[DB]] : (tensor<1x1x4xf32>) -> tensor<4xf32>
// CHECK-NEXT: %[[XR2:.*]] = graph.reshape %arg0 : (tensor<2x8x8xf32>) -> tensor<16x8xf32>
// CHECK-NEXT: %[[ROWS2:.*]] = graph.reshape %arg2 : (tensor<2x8x4xf32>) -> tensor<16x4xf32>
// CHECK-NEXT: %[[DW2:[^,]*]], %[[DB2:.*]] = graph.matmul_grad %[[XR2]], %[[ROWS2]]
// CHECK-NEXT: graph.exp %[[DB2]]
// CHECK-NOT: graph.reduce_sum
// CHECK: return %[[DW]], %[[V]], %[[DW2]],
func.func @bias_gradient_of_rows(%x: tensor<2x8x8xf32>, %dy: tensor<2x8x4xf32>, %dz: tensor<2x8x4xf32>) -> (tensor<8x4xf32>, tensor<4xf32>, tensor<8x4xf32>, tensor<1x1x4xf32>) {
  %sum = graph.reduce_sum %dy {axes = array<i64: 1, 0>} : (tensor<2x8x4xf32>) -> tensor<1x1x4xf32>
  %db = graph.reshape %sum : (tensor<1x1x4xf32>) -> tensor<4xf32>
  %xr = graph.reshape %x : (tensor<2x8x8xf32>) -> tensor<16x8xf32>
  %dyr = graph.reshape %dy : (tensor<2x8x4xf32>) -> tensor<16x4xf32>
  %dw = graph.matmul %xr, %dyr {transpose_lhs = true} : (tensor<16x8xf32>, tensor<16x4xf32>) -> tensor<8x4xf32>
  %sum2 = graph.reduce_sum %dz {axes = array<i64: 0, 1>} : (tensor<2x8x4xf32>) -> tensor<1x1x4xf32>
  %e = graph.exp %sum2 {dtc.once_per_step} : (tensor<1x1x4xf32>) -> tensor<1x1x4xf32>
  %xr2 = graph.reshape %x : (tensor<2x8x8xf32>) -> tensor<16x8xf32>
  %dzr = graph.reshape %dz : (tensor<2x8x4xf32>) -> tensor<16x4xf32>
  %dw2 = graph.matmul %xr2, %dzr {transpose_lhs = true} : (tensor<16x8xf32>, tensor<16x4xf32>) -> tensor<8x4xf32>
  return %dw, %db, %dw2, %e : tensor<8x4xf32>, tensor<4xf32>, tensor<8x4xf32>, tensor<1x1x4xf32>
}

// dy made as rows and viewed as [batch, seq, N] for the sum (attention's
// gradient is): the product reads the rows. The sum's readers before the
// product (its reduction over the ranks, then a view) move after it, in
// their order.
// CHECK-LABEL: func.func @bias_gradient_moves_its_readers
// CHECK: %[[DW:[^,]*]], %[[DB:.*]] = graph.matmul_grad %arg0, %arg1 : (tensor<16x8xf32>, tensor<16x4xf32>) -> (tensor<8x4xf32>, tensor<1x1x4xf32>)
// CHECK-NEXT: %[[E:.*]] = graph.exp %[[DB]]
// CHECK-NEXT: %[[V:.*]] = graph.reshape %[[E]]
// CHECK-NEXT: return %[[DW]], %[[V]]
func.func @bias_gradient_moves_its_readers(%x: tensor<16x8xf32>, %d: tensor<16x4xf32>) -> (tensor<8x4xf32>, tensor<4xf32>) {
  %dy = graph.reshape %d : (tensor<16x4xf32>) -> tensor<2x8x4xf32>
  %sum = graph.reduce_sum %dy {axes = array<i64: 0, 1>} : (tensor<2x8x4xf32>) -> tensor<1x1x4xf32>
  %e = graph.exp %sum : (tensor<1x1x4xf32>) -> tensor<1x1x4xf32>
  %v = graph.reshape %e : (tensor<1x1x4xf32>) -> tensor<4xf32>
  %dw = graph.matmul %x, %d {transpose_lhs = true} : (tensor<16x8xf32>, tensor<16x4xf32>) -> tensor<8x4xf32>
  return %dw, %v : tensor<8x4xf32>, tensor<4xf32>
}

// A layer's input gradient over the linear layers that read the input
// (attention's query, key and value projections, as autodiff sums their
// input gradients): an add of a plain product read by the add alone
// becomes that product with the other term its C (graph.matmul_acc), so
// the second sum's GEMM adds the first's; also through a reshape to the
// product's rows. The later product takes the earlier as its C, where it
// stood. A product read elsewhere too stays, its add with it; so does a
// micro-batches' accumulator's add (in place, where the GEMM would write
// a buffer of its own).
// CHECK-LABEL: func.func @product_sums
// CHECK-SAME: fusion: 2 sums of products
// CHECK: %[[Q:.*]] = graph.matmul %arg0, %arg3 {transpose_rhs = true} : (tensor<8x16xf32>, tensor<8x16xf32>) -> tensor<8x8xf32>
// CHECK: %[[K:.*]] = graph.matmul_acc %arg1, %arg3, %[[Q]] {transpose_rhs = true} : (tensor<8x16xf32>, tensor<8x16xf32>, tensor<8x8xf32>) -> tensor<8x8xf32>
// CHECK: %[[KR:.*]] = graph.reshape %[[K]] : (tensor<8x8xf32>) -> tensor<2x4x8xf32>
// CHECK: %[[ROWS:.*]] = graph.reshape %[[KR]] : (tensor<2x4x8xf32>) -> tensor<8x8xf32>
// CHECK: %[[V:.*]] = graph.matmul_acc %arg2, %arg3, %[[ROWS]] {transpose_rhs = true}
// CHECK: %[[VR:.*]] = graph.reshape %[[V]] : (tensor<8x8xf32>) -> tensor<2x4x8xf32>
// CHECK: %[[O:.*]] = graph.matmul %arg0, %arg3
// CHECK: %[[VROWS:.*]] = graph.reshape %[[VR]]
// CHECK: graph.add %[[O]], %[[VROWS]]
// CHECK: %[[G:.*]] = graph.matmul %arg0, %arg1 {transpose_lhs = true}
// CHECK: graph.add %{{.*}}, %[[G]]
// CHECK: return %[[VR]]
func.func @product_sums(%dq: tensor<8x16xf32>, %dk: tensor<8x16xf32>, %dv: tensor<8x16xf32>, %w: tensor<8x16xf32>) -> (tensor<2x4x8xf32>, tensor<8x8xf32>, tensor<8x8xf32>, tensor<16x16xf32>) {
  %q = graph.matmul %dq, %w {transpose_rhs = true} : (tensor<8x16xf32>, tensor<8x16xf32>) -> tensor<8x8xf32>
  %k = graph.matmul %dk, %w {transpose_rhs = true} : (tensor<8x16xf32>, tensor<8x16xf32>) -> tensor<8x8xf32>
  %qk = graph.add %q, %k : (tensor<8x8xf32>, tensor<8x8xf32>) -> tensor<8x8xf32>
  %qk3 = graph.reshape %qk : (tensor<8x8xf32>) -> tensor<2x4x8xf32>
  %v = graph.matmul %dv, %w {transpose_rhs = true} : (tensor<8x16xf32>, tensor<8x16xf32>) -> tensor<8x8xf32>
  %v3 = graph.reshape %v : (tensor<8x8xf32>) -> tensor<2x4x8xf32>
  %dx = graph.add %qk3, %v3 : (tensor<2x4x8xf32>, tensor<2x4x8xf32>) -> tensor<2x4x8xf32>
  %o = graph.matmul %dq, %w {transpose_rhs = true} : (tensor<8x16xf32>, tensor<8x16xf32>) -> tensor<8x8xf32>
  %dx2 = graph.reshape %dx : (tensor<2x4x8xf32>) -> tensor<8x8xf32>
  %both = graph.add %o, %dx2 : (tensor<8x8xf32>, tensor<8x8xf32>) -> tensor<8x8xf32>
  %acc = graph.parameter "w.grad_accumulator" {dtc.accumulator} : tensor<16x16xf32>
  %g = graph.matmul %dq, %dk {transpose_lhs = true} : (tensor<8x16xf32>, tensor<8x16xf32>) -> tensor<16x16xf32>
  %summed = graph.add %acc, %g : (tensor<16x16xf32>, tensor<16x16xf32>) -> tensor<16x16xf32>
  return %dx, %o, %both, %summed : tensor<2x4x8xf32>, tensor<8x8xf32>, tensor<8x8xf32>, tensor<16x16xf32>
}
