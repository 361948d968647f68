// RUN: %dtc-opt %s --split-input-file --dtc-build-training-step="precision=bf16" --canonicalize --cse --dtc-fuse-loss-gradient | FileCheck %s --check-prefix=BF16
// RUN: %dtc-opt %s --split-input-file --dtc-build-training-step="precision=fp32" --canonicalize --cse --dtc-fuse-loss-gradient | FileCheck %s --check-prefix=F32

// The logits' gradient, (exp(logits - lse) - onehot(label)) * factor as
// autodiff writes it, becomes graph.cross_entropy's third result: its row
// factor (the mean's 1/8 times whether the label is a class, read from
// the labels alone) is computed before the loss and is its third operand.
// No exp, no one-hot and no second read of the logits are left.
// BF16-LABEL: func.func @main
// BF16-SAME: fusion: 1 cross-entropy loss writes the logits' gradient as it reads them
// BF16: %[[F:.*]] = graph.mul {{.*}} -> tensor<2x4x1xf32>
// BF16: %[[S:.*]] = graph.reshape %[[F]] : (tensor<2x4x1xf32>) -> tensor<2x4xf32>
// BF16-NEXT: %{{.*}}, %{{.*}}, %[[G:.*]] = graph.cross_entropy %[[L:.*]], %arg1, %[[S]] : (tensor<2x4x3xbf16>, tensor<2x4xi64>, tensor<2x4xf32>) -> (tensor<2x4xf32>, tensor<2x4xf32>, tensor<2x4x3xbf16>)
// BF16-NOT: graph.exp
// BF16-NOT: graph.equal
// BF16: graph.reshape %[[G]]
// F32-LABEL: func.func @main
// F32: %{{.*}}, %{{.*}}, %[[G:.*]] = graph.cross_entropy %{{.*}}, %arg1, %{{.*}} : (tensor<2x4x3xf32>, tensor<2x4xi64>, tensor<2x4xf32>) -> (tensor<2x4xf32>, tensor<2x4xf32>, tensor<2x4x3xf32>)
// F32-NOT: graph.exp
// F32: graph.reshape %[[G]]
func.func @main(%x: tensor<2x4x8xf32> {graph.name = "x"}) -> (tensor<2x4x3xf32> {graph.name = "logits"}) {
  %w = graph.parameter "w" : tensor<8x3xf32>
  %y = graph.matmul %x, %w : (tensor<2x4x8xf32>, tensor<8x3xf32>) -> tensor<2x4x3xf32>
  return %y : tensor<2x4x3xf32>
}
