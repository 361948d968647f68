// RUN: %dtc-opt %s --split-input-file --dtc-build-training-step="model-outputs=true" | FileCheck %s
// RUN: %dtc-opt %s --split-input-file --dtc-build-training-step="optimizer=sgd lr=0.5 momentum=0 ignore-index=-100" | FileCheck %s --check-prefix=SGD
// RUN: not %dtc-opt %s --split-input-file --dtc-build-training-step="loss=hinge" 2>&1 | FileCheck %s --check-prefix=BAD

// The forward pass becomes a training step: the labels and the optimizer's
// per-step scalars are new inputs whose role says what the runtime feeds
// them; the results are the loss, the model's output and each update, named
// by the parameter it replaces; AdamW's moments are zero-initialised
// parameters; the options are recorded for the plan, the decisions noted.
// CHECK-LABEL: func.func @main
// CHECK-SAME: %arg1: tensor<4xi64> {dtc.role = "labels", graph.name = "labels"}
// CHECK-SAME: %arg2: tensor<f32> {dtc.role = "learning_rate", graph.name = "optimizer.lr"}
// CHECK-SAME: %arg3: tensor<f32> {dtc.role = "bias_correction1", graph.name = "optimizer.bias_correction1"}
// CHECK-SAME: %arg4: tensor<f32> {dtc.role = "bias_correction2", graph.name = "optimizer.bias_correction2"}
// CHECK-SAME: -> (tensor<f32> {graph.name = "loss"}, tensor<4x3xf32> {graph.name = "logits"}, tensor<8x3xf32> {dtc.updates = "w.adam_m", graph.name = "w.adam_m.new"}, tensor<8x3xf32> {dtc.updates = "w.adam_v", graph.name = "w.adam_v.new"}, tensor<8x3xf32> {dtc.updates = "w", graph.name = "w.new"})
// CHECK-SAME: dtc.notes = ["training: loss cross_entropy, AdamW (beta1 0.9, beta2 0.999, weight decay 0), learning rate 0.001 constant", "training: 1 of 1 parameters trained (24 values), 2 optimizer state tensors added (192 B, zero-initialised parameters)
// CHECK-SAME: dtc.training = {{{.*}}classes = 3 : i64{{.*}}learning_rate = 1.000000e-03 : f64, loss = "cross_entropy"{{.*}}optimizer = "adamw"{{.*}}}
// CHECK: graph.parameter "w.adam_v" {dtc.zeros} : tensor<8x3xf32>
// CHECK: graph.parameter "w.adam_m" {dtc.zeros} : tensor<8x3xf32>
// The loss is one cross_entropy (each row's lse - logit[label]) and its
// mean; its gradient (exp(logits - lse) - onehot(label)) * dloss, rows
// whose label is no class left out, is elementwise.
// CHECK: %[[LOGITS:.*]] = graph.matmul %arg0
// CHECK: %[[LOSS:.*]], %[[LSE:.*]] = graph.cross_entropy %[[LOGITS]], %arg1 : (tensor<4x3xf32>, tensor<4xi64>) -> (tensor<4xf32>, tensor<4xf32>)
// CHECK: graph.reduce_mean %[[LOSS]]
// CHECK: %[[LABEL:.*]] = graph.reshape %arg1 : (tensor<4xi64>) -> tensor<4x1xi64>
// CHECK: %[[HIT:.*]] = graph.equal %[[LABEL]], %{{.*}} : (tensor<4x1xi64>, tensor<3xi64>) -> tensor<4x3xi1>
// CHECK: graph.greater_equal %[[LABEL]]
// CHECK: graph.less %[[LABEL]]
// CHECK: %[[ROWLSE:.*]] = graph.reshape %[[LSE]] : (tensor<4xf32>) -> tensor<4x1xf32>
// CHECK: %[[SHIFTED:.*]] = graph.sub %[[LOGITS]], %[[ROWLSE]]
// CHECK: %[[P:.*]] = graph.exp %[[SHIFTED]]
// CHECK: %[[ONEHOT:.*]] = graph.cast %[[HIT]]
// CHECK: graph.sub %[[P]], %[[ONEHOT]]

// SGD without momentum has no state and no bias corrections; the step
// returns the loss and the updates only (the default, model-outputs=false).
// SGD-LABEL: func.func @main
// SGD-SAME: %arg2: tensor<f32> {dtc.role = "learning_rate", graph.name = "optimizer.lr"})
// SGD-SAME: -> (tensor<f32> {graph.name = "loss"}, tensor<8x3xf32> {dtc.updates = "w", graph.name = "w.new"})
// SGD-SAME: dtc.training = {{{.*}}ignore_index = -100 : i64, learning_rate = 5.000000e-01 : f64{{.*}}optimizer = "sgd"
// SGD-NOT: dtc.zeros

// BAD: error: --loss must be cross_entropy or mse, got 'hinge'
func.func @main(%x: tensor<4x8xf32> {graph.name = "x"}) -> (tensor<4x3xf32> {graph.name = "logits"}) {
  %w = graph.parameter "w" : tensor<8x3xf32>
  %y = graph.matmul %x, %w : (tensor<4x8xf32>, tensor<8x3xf32>) -> tensor<4x3xf32>
  return %y : tensor<4x3xf32>
}

// -----

// Batch norms normalise with the batch's statistics; their running
// statistics become updates.
// CHECK-LABEL: func.func @main
// CHECK-SAME: dtc.updates = "bn.mean"
// CHECK-SAME: dtc.updates = "bn.var"
// CHECK-SAME: "training: 1 batch norms normalise with the batch's statistics; 2 running means and variances updated each step"
// CHECK-SAME: running_statistics = 2 : i64
// CHECK-NOT: graph.batch_norm
func.func @main(%x: tensor<2x3x4x4xf32> {graph.name = "x"}) -> (tensor<2x3xf32> {graph.name = "y"}) {
  %s = graph.parameter "bn.scale" : tensor<3xf32>
  %b = graph.parameter "bn.bias" : tensor<3xf32>
  %m = graph.parameter "bn.mean" : tensor<3xf32>
  %v = graph.parameter "bn.var" : tensor<3xf32>
  %n = graph.batch_norm %x, %s, %b, %m, %v : (tensor<2x3x4x4xf32>, tensor<3xf32>, tensor<3xf32>, tensor<3xf32>, tensor<3xf32>) -> tensor<2x3x4x4xf32>
  %r = graph.reduce_mean %n {axes = array<i64: 2, 3>, keepdims = false} : (tensor<2x3x4x4xf32>) -> tensor<2x3xf32>
  return %r : tensor<2x3xf32>
}
