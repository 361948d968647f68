// RUN: %dtc-opt %s --split-input-file --dtc-build-training-step="model-outputs=true pad-classes=8" | FileCheck %s
// RUN: %dtc-opt %s --split-input-file --dtc-build-training-step="pad-classes=8 precision=bf16" | FileCheck %s --check-prefix=BF16
// RUN: %dtc-opt %s --split-input-file --dtc-build-training-step="pad-classes=0" | FileCheck %s --check-prefix=OFF

// A classifier of 300 classes (at least 32 x 8) padded to 304: the weight
// holds 4 more columns (zeros at load: dtc.model_shape is what the model
// has), the padded logits get -1e9 added (the product's bias), the loss
// reads them and labels stay below 300 (classes = 300); the model's output
// is its 300 classes. AdamW's state is padded with the weight.
// CHECK-LABEL: func.func @main
// CHECK-SAME: tensor<4x300xf32> {graph.name = "logits"}, tensor<16x304xf32> {dtc.updates = "head.adam_m"
// CHECK-SAME: "classes: the loss's 300 classes padded to 304 (a multiple of 8): 'head' holds 4 more, zeros that stay zeros
// CHECK-SAME: classes = 300
// CHECK: %[[W:.*]] = graph.parameter "head" {dtc.model_shape = array<i64: 16, 300>} : tensor<16x304xf32>
// CHECK: %[[P:.*]] = graph.matmul %arg0, %[[W]] : (tensor<4x16xf32>, tensor<16x304xf32>) -> tensor<4x304xf32>
// CHECK: %[[MASK:.*]] = graph.constant dense<{{.*}}00000000286B6ECE286B6ECE286B6ECE286B6ECE"> : tensor<304xf32>
// CHECK: %[[LOGITS:.*]] = graph.add %[[P]], %[[MASK]]
// CHECK: %[[OUT:.*]] = graph.slice %[[LOGITS]] {offsets = array<i64: 0, 0>, sizes = array<i64: 4, 300>
// CHECK: graph.cross_entropy %[[LOGITS]], %arg1 : (tensor<4x304xf32>, tensor<4xi64>)
// CHECK: return %{{.*}}, %[[OUT]],

// In bf16 the mask is bf16 and the loss reads the bf16 logits.
// BF16-LABEL: func.func @main
// BF16: %[[W:.*]] = graph.parameter "head" {dtc.model_shape = array<i64: 16, 300>} : tensor<16x304xf32>
// BF16: %[[WB:.*]] = graph.cast %[[W]] : (tensor<16x304xf32>) -> tensor<16x304xbf16>
// BF16: %[[P:.*]] = graph.matmul %{{.*}}, %[[WB]] : (tensor<4x16xbf16>, tensor<16x304xbf16>) -> tensor<4x304xbf16>
// BF16: %[[MASK:.*]] = graph.constant dense<{{.*}}00006ECE6ECE6ECE6ECE"> : tensor<304xbf16>
// BF16: %[[LOGITS:.*]] = graph.add %[[P]], %[[MASK]]
// BF16: graph.cross_entropy %[[LOGITS]], %arg1 : (tensor<4x304xbf16>, tensor<4xi64>)

// pad-classes=0: the model's shapes.
// OFF-LABEL: func.func @main
// OFF-NOT: 304
// OFF: graph.cross_entropy %{{.*}}, %arg1 : (tensor<4x300xf32>, tensor<4xi64>)
func.func @main(%x: tensor<4x16xf32> {graph.name = "x"}) -> (tensor<4x300xf32> {graph.name = "logits"}) {
  %w = graph.parameter "head" : tensor<16x300xf32>
  %y = graph.matmul %x, %w : (tensor<4x16xf32>, tensor<16x300xf32>) -> tensor<4x300xf32>
  return %y : tensor<4x300xf32>
}

// -----

// Tied embeddings: the table [300, 16] is padded by rows, its gather reads
// the padded table as it is (its indices never reach the padding), the
// classifier its transpose. A negative id counts from the model's last
// row (ONNX's Gather), not the padding's: the ids are wrapped by 300 first.
// CHECK-LABEL: func.func @main
// CHECK-SAME: "classes: the loss's 300 classes padded to 304 (a multiple of 8): 'wte' holds 4 more
// CHECK: %[[E:.*]] = graph.parameter "wte" {dtc.model_shape = array<i64: 300, 16>} : tensor<304x16xf32>
// CHECK-DAG: %[[ZERO:.*]] = graph.constant dense<0> : tensor<i64>
// CHECK-DAG: %[[ROWS:.*]] = graph.constant dense<300> : tensor<i64>
// CHECK-DAG: %[[NEG:.*]] = graph.less %arg0, %[[ZERO]]
// CHECK-DAG: %[[UP:.*]] = graph.add %arg0, %[[ROWS]]
// CHECK: %[[IDS:.*]] = graph.where %[[NEG]], %[[UP]], %arg0
// CHECK: %[[H:.*]] = graph.gather %[[E]], %[[IDS]] {axis = 0 : i64} : (tensor<304x16xf32>, tensor<4xi64>) -> tensor<4x16xf32>
// CHECK: %[[T:.*]] = graph.transpose %[[E]] {perm = array<i64: 1, 0>} : (tensor<304x16xf32>) -> tensor<16x304xf32>
// CHECK: graph.matmul %[[H]], %[[T]] : (tensor<4x16xf32>, tensor<16x304xf32>) -> tensor<4x304xf32>
// BF16-LABEL: func.func @main
// OFF-LABEL: func.func @main
// OFF-NOT: 304
func.func @main(%ids: tensor<4xi64> {graph.name = "ids"}) -> (tensor<4x300xf32> {graph.name = "logits"}) {
  %e = graph.parameter "wte" : tensor<300x16xf32>
  %h = graph.gather %e, %ids {axis = 0 : i64} : (tensor<300x16xf32>, tensor<4xi64>) -> tensor<4x16xf32>
  %t = graph.transpose %e {perm = array<i64: 1, 0>} : (tensor<300x16xf32>) -> tensor<16x300xf32>
  %y = graph.matmul %h, %t : (tensor<4x16xf32>, tensor<16x300xf32>) -> tensor<4x300xf32>
  return %y : tensor<4x300xf32>
}

// -----

// A classifier's bias is padded too, and the mask joins it (a vector on
// weights, no pass over the logits).
// CHECK-LABEL: func.func @main
// CHECK-SAME: 'head' and 'head.bias' hold 4 more
// CHECK-DAG: %[[W:.*]] = graph.parameter "head" {dtc.model_shape = array<i64: 16, 300>} : tensor<16x304xf32>
// CHECK-DAG: %[[B:.*]] = graph.parameter "head.bias" {dtc.model_shape = array<i64: 300>} : tensor<304xf32>
// CHECK: %[[P:.*]] = graph.matmul %arg0, %[[W]] : (tensor<2x2x16xf32>, tensor<16x304xf32>) -> tensor<2x2x304xf32>
// CHECK: %[[MASKED:.*]] = graph.add %[[B]], %{{.*}} : (tensor<304xf32>, tensor<304xf32>) -> tensor<304xf32>
// CHECK: %[[LOGITS:.*]] = graph.add %[[P]], %[[MASKED]] : (tensor<2x2x304xf32>, tensor<304xf32>) -> tensor<2x2x304xf32>
// CHECK: graph.cross_entropy %[[LOGITS]]
// BF16-LABEL: func.func @main
// OFF-LABEL: func.func @main
func.func @main(%x: tensor<2x2x16xf32> {graph.name = "x"}) -> (tensor<2x2x300xf32> {graph.name = "logits"}) {
  %w = graph.parameter "head" : tensor<16x300xf32>
  %b = graph.parameter "head.bias" : tensor<300xf32>
  %y = graph.matmul %x, %w : (tensor<2x2x16xf32>, tensor<16x300xf32>) -> tensor<2x2x300xf32>
  %z = graph.add %y, %b : (tensor<2x2x300xf32>, tensor<300xf32>) -> tensor<2x2x300xf32>
  return %z : tensor<2x2x300xf32>
}

// -----

// Untied embeddings: the token table [300, 16], a weight of its own, is
// padded by rows like the head, so that its rows can split too; its
// gather reads the padded table. A gather along another axis is left
// alone.
// CHECK-LABEL: func.func @main
// CHECK-SAME: "classes: the loss's 300 classes padded to 304 (a multiple of 8): 'head' and 'wte' hold 4 more
// CHECK-DAG: %[[E:.*]] = graph.parameter "wte" {dtc.model_shape = array<i64: 300, 16>} : tensor<304x16xf32>
// CHECK-DAG: %[[P:.*]] = graph.parameter "wpe" : tensor<300x4xf32>
// CHECK-DAG: graph.gather %[[E]], %{{[0-9]+}} {axis = 0 : i64} : (tensor<304x16xf32>, tensor<4xi64>) -> tensor<4x16xf32>
// CHECK-DAG: graph.gather %[[P]], %arg0 {axis = 1 : i64}
// BF16-LABEL: func.func @main
// BF16: graph.parameter "wte" {{.*}}dtc.model_shape = array<i64: 300, 16>{{.*}} : tensor<304x16xf32>
// OFF-LABEL: func.func @main
// OFF-NOT: 304
func.func @main(%ids: tensor<4xi64> {graph.name = "ids"}) -> (tensor<4x300xf32> {graph.name = "logits"}, tensor<300x4xf32> {graph.name = "side"}) {
  %e = graph.parameter "wte" : tensor<300x16xf32>
  %p = graph.parameter "wpe" : tensor<300x4xf32>
  %h = graph.gather %e, %ids {axis = 0 : i64} : (tensor<300x16xf32>, tensor<4xi64>) -> tensor<4x16xf32>
  %q = graph.gather %p, %ids {axis = 1 : i64} : (tensor<300x4xf32>, tensor<4xi64>) -> tensor<300x4xf32>
  %w = graph.parameter "head" : tensor<16x300xf32>
  %y = graph.matmul %h, %w : (tensor<4x16xf32>, tensor<16x300xf32>) -> tensor<4x300xf32>
  return %y, %q : tensor<4x300xf32>, tensor<300x4xf32>
}

// -----

// Under 32 x 8 classes (a classifier, not a vocabulary), or a round count:
// as the model has them.
// CHECK-LABEL: func.func @main
// CHECK-NOT: dtc.model_shape
// CHECK: graph.cross_entropy %{{.*}}, %arg1 : (tensor<4x250xf32>, tensor<4xi64>)
// BF16-LABEL: func.func @main
// OFF-LABEL: func.func @main
func.func @main(%x: tensor<4x16xf32> {graph.name = "x"}) -> (tensor<4x250xf32> {graph.name = "logits"}) {
  %w = graph.parameter "head" : tensor<16x250xf32>
  %y = graph.matmul %x, %w : (tensor<4x16xf32>, tensor<16x250xf32>) -> tensor<4x250xf32>
  return %y : tensor<4x250xf32>
}
