// RUN: %dtc-opt %s --dtc-build-training-step="train-output=logits model-outputs=false" | FileCheck %s
// RUN: not %dtc-opt %s --dtc-build-training-step 2>&1 | FileCheck %s --check-prefix=FIRST
// RUN: not %dtc-opt %s --dtc-build-training-step="train-output=scores" 2>&1 | FileCheck %s --check-prefix=MISSING

// A model whose first output is not the prediction (a sentence-embedding
// export's first output is integer): --train-output names the one the loss
// reads, and the labels take its shape (cross-entropy: its classes).
// CHECK-LABEL: func.func @main(
// CHECK-SAME: %arg2: tensor<4xi64> {dtc.role = "labels"
// CHECK: %[[LOGITS:.*]] = graph.matmul %arg0, %{{.*}} : (tensor<4x8xf32>, tensor<8x3xf32>) -> tensor<4x3xf32>
// CHECK: graph.cross_entropy %[[LOGITS]], %arg2
// CHECK: graph.reshape %arg2

// FIRST: error: training needs an f32 model output, got 'tensor<4xi64>' (the first; --train-output NAME trains another: the model's outputs are ids (tensor<4xi64>), logits (tensor<4x3xf32>))
// MISSING: error: --train-output scores: the model has no output of that name (its outputs: ids (tensor<4xi64>), logits (tensor<4x3xf32>))
func.func @main(%x: tensor<4x8xf32> {graph.name = "x"}, %ids: tensor<4xi64> {graph.name = "in_ids"})
    -> (tensor<4xi64> {graph.name = "ids"}, tensor<4x3xf32> {graph.name = "logits"}) {
  %w = graph.parameter "w" : tensor<8x3xf32>
  %y = graph.matmul %x, %w : (tensor<4x8xf32>, tensor<8x3xf32>) -> tensor<4x3xf32>
  return %ids, %y : tensor<4xi64>, tensor<4x3xf32>
}
