// RUN: %dtc-opt %s --split-input-file --dtc-build-training-step="precision=bf16" --canonicalize --cse --dtc-fuse-matmul-bias --dtc-fuse-norm-gradients | FileCheck %s --check-prefix=BF16
// RUN: %dtc-opt %s --split-input-file --dtc-build-training-step="precision=fp32" --canonicalize --cse --dtc-fuse-matmul-bias --dtc-fuse-norm-gradients | FileCheck %s --check-prefix=F32

// A layer norm's scale gradient (sum(dy * xhat) over the rows, xhat from
// the gradient op's mean and rstd) and its bias's (sum(dy)) become partial
// sums that layer_norm_backward writes per group of rows: 64 rows, 8
// groups of 8, [8, 1, 8] f32 each (the row dims past the first 1); a
// reduction over the groups gives each gradient (f32, weight gradients).
// The elementwise product, its casts and the sums of dy and of the
// product are gone.
// BF16-LABEL: func.func @main
// BF16-SAME: fusion: 1 layer norm gradient sums its scale's and bias's gradients per group of rows
// BF16: %{{.*}}, %{{.*}}, %{{.*}}, %[[P:.*]]:2 = graph.layer_norm_backward %{{.*}}, %{{.*}}, %[[DY:[^ ]*]] {axis = 2 : i64, bias_gradient, scale_gradient} : (tensor<4x16x8xbf16>, tensor<8xbf16>, tensor<4x16x8xbf16>) -> (tensor<4x16x8xbf16>, tensor<4x16x1xf32>, tensor<4x16x1xf32>, tensor<8x1x8xf32>, tensor<8x1x8xf32>)
// BF16-NEXT: graph.reduce_sum %[[P]]#0 {axes = array<i64: 0>, dtc.weight_gradient} : (tensor<8x1x8xf32>) -> tensor<1x1x8xf32>
// BF16-NEXT: graph.reshape
// BF16-NEXT: graph.reduce_sum %[[P]]#1 {axes = array<i64: 0>, dtc.weight_gradient} : (tensor<8x1x8xf32>) -> tensor<1x1x8xf32>
// BF16-NOT: graph.reduce_sum %[[DY]]
// BF16-NOT: graph.cast %[[DY]]
// BF16-NOT: tensor<4x16x8xbf16>) -> tensor<1x1x8xf32>
// BF16: return
// F32-LABEL: func.func @main
// F32: %{{.*}}, %{{.*}}, %{{.*}}, %[[P:.*]]:2 = graph.layer_norm_backward %{{.*}} {axis = 2 : i64, bias_gradient, scale_gradient} : {{.*}} -> (tensor<4x16x8xf32>, tensor<4x16x1xf32>, tensor<4x16x1xf32>, tensor<8x1x8xf32>, tensor<8x1x8xf32>)
// F32-NOT: graph.sub {{.*}}tensor<4x16x1xf32>
// F32-NOT: tensor<4x16x8xf32>) -> tensor<1x1x8xf32>
// F32: return
func.func @main(%x: tensor<4x16x8xf32> {graph.name = "x"}) -> (tensor<4x16x3xf32> {graph.name = "logits"}) {
  %s = graph.parameter "s" : tensor<8xf32>
  %b = graph.parameter "b" : tensor<8xf32>
  %w = graph.parameter "w" : tensor<8x3xf32>
  %n = graph.layer_norm %x, %s, %b {axis = 2 : i64} : (tensor<4x16x8xf32>, tensor<8xf32>, tensor<8xf32>) -> tensor<4x16x8xf32>
  %y = graph.matmul %n, %w : (tensor<4x16x8xf32>, tensor<8x3xf32>) -> tensor<4x16x3xf32>
  return %y : tensor<4x16x3xf32>
}

// -----

// RMSNorm has no bias: the scale's gradient alone. 300 rows: groups of 8
// (the fewest rows a group takes), 38 of them, the last of 4. A layer
// norm over 2 rows of 8 is one group, which is the gradient itself: a
// view of the partial sums, no reduction.
// BF16-LABEL: func.func @main
// BF16-SAME: fusion: 2 layer norm gradients sum their scale's
// BF16: %{{.*}}, %{{.*}}, %{{.*}}, %[[P:.*]] = graph.layer_norm_backward {{.*}} {axis = 1 : i64, rms, scale_gradient} : {{.*}} -> (tensor<300x16xbf16>, tensor<300x1xf32>, tensor<300x1xf32>, tensor<38x16xf32>)
// BF16-NEXT: graph.reduce_sum %[[P]] {axes = array<i64: 0>, dtc.weight_gradient} : (tensor<38x16xf32>) -> tensor<1x16xf32>
// BF16: %{{.*}}, %{{.*}}, %{{.*}}, %[[Q:.*]] = graph.layer_norm_backward {{.*}} {axis = 1 : i64, rms, scale_gradient} : {{.*}} -> (tensor<2x8xbf16>, tensor<2x1xf32>, tensor<2x1xf32>, tensor<1x8xf32>)
// BF16-NEXT: graph.reshape %[[Q]] {dtc.weight_gradient} : (tensor<1x8xf32>) -> tensor<8xf32>
// BF16: return
// F32-LABEL: func.func @main
// F32: graph.layer_norm_backward {{.*}} {axis = 1 : i64, rms, scale_gradient} : {{.*}} tensor<38x16xf32>)
func.func @main(%x: tensor<300x16xf32> {graph.name = "x"}, %z: tensor<2x8xf32> {graph.name = "z"}) -> (tensor<300x3xf32> {graph.name = "logits"}) {
  %s = graph.parameter "s" : tensor<16xf32>
  %t = graph.parameter "t" : tensor<8xf32>
  %w = graph.parameter "w" : tensor<16x3xf32>
  %v = graph.parameter "v" : tensor<8x16xf32>
  %zn = graph.layer_norm %z, %t {axis = 1 : i64, rms} : (tensor<2x8xf32>, tensor<8xf32>) -> tensor<2x8xf32>
  %zp = graph.matmul %zn, %v : (tensor<2x8xf32>, tensor<8x16xf32>) -> tensor<2x16xf32>
  %zs = graph.reduce_sum %zp {axes = array<i64: 0>, keepdims = true} : (tensor<2x16xf32>) -> tensor<1x16xf32>
  %xz = graph.add %x, %zs : (tensor<300x16xf32>, tensor<1x16xf32>) -> tensor<300x16xf32>
  %n = graph.layer_norm %xz, %s {axis = 1 : i64, rms} : (tensor<300x16xf32>, tensor<16xf32>) -> tensor<300x16xf32>
  %y = graph.matmul %n, %w : (tensor<300x16xf32>, tensor<16x3xf32>) -> tensor<300x3xf32>
  return %y : tensor<300x3xf32>
}
