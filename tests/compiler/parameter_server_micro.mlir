// RUN: %dtc-opt %s --dtc-parameter-server | FileCheck %s

// Micro-batches: the per-micro-batch part stays the worker's (its
// accumulation, with the reduction gone); the server receives the
// accumulated gradient the once-per-step part read. It is an embedding's
// (a scatter-add of 3 looked-up rows a micro-batch): at most 6 of its 16
// rows are nonzero a step, which the plan records for the cost model.
// CHECK: tensors = [{first_row = 0 : i64, gradient = 1 : i64, rows = 0 : i64, server = 0 : i64, sparse_rows = 6 : i64, weight = "w", weight_output = 2 : i64}]
// CHECK-LABEL: func.func @main
// CHECK-SAME: -> (tensor<16x4xf32> {dtc.updates = "w.acc", graph.name = "w.acc.new"}, tensor<16x4xf32> {graph.name = "w.gradient"})
// CHECK: %[[ACC:.*]] = graph.parameter "w.acc"
// CHECK-NEXT: %[[ROWS:.*]] = graph.scatter_add %arg1, %arg2 {axis = 0 : i64}
// CHECK-NEXT: %[[SUM:.*]] = graph.add %[[ACC]], %[[ROWS]]
// CHECK-NEXT: return %[[SUM]], %[[SUM]]
// CHECK-LABEL: func.func @server_0
// CHECK-NEXT: %[[G:.*]] = graph.parameter "w.gradient"
// CHECK-NEXT: %[[W:.*]] = graph.parameter "w" :
// CHECK-NEXT: %[[S:.*]] = graph.mul %[[G]], %arg0
// CHECK-NEXT: %[[W2:.*]] = graph.sub %[[W]], %[[S]]
// CHECK-NEXT: return %[[W2]]
// CHECK-NOT: server_1
module attributes {dtc.mesh_axis_names = ["dp"]} {
  mesh.mesh @mesh(shape = 2)
  func.func @main(%lr: tensor<f32> {dtc.role = "learning_rate", graph.name = "optimizer.lr"},
                  %g: tensor<3x4xf32>, %ids: tensor<3xi64>)
      -> (tensor<16x4xf32> {dtc.updates = "w.acc", graph.name = "w.acc.new"},
          tensor<16x4xf32> {dtc.updates = "w", graph.name = "w.new"})
      attributes {dtc.training = {micro_batches = 2 : i64}} {
    %w = graph.parameter "w" : tensor<16x4xf32>
    %acc = graph.parameter "w.acc" {dtc.accumulator, dtc.zeros} : tensor<16x4xf32>
    %0 = mesh.all_reduce %g on @mesh mesh_axes = [0] {dtc.gradient_reduction} : tensor<3x4xf32> -> tensor<3x4xf32>
    %rows = graph.scatter_add %0, %ids {axis = 0 : i64} : (tensor<3x4xf32>, tensor<3xi64>) -> tensor<16x4xf32>
    %sum = graph.add %acc, %rows : (tensor<16x4xf32>, tensor<16x4xf32>) -> tensor<16x4xf32>
    %step = graph.mul %sum, %lr {dtc.once_per_step} : (tensor<16x4xf32>, tensor<f32>) -> tensor<16x4xf32>
    %w2 = graph.sub %w, %step {dtc.once_per_step} : (tensor<16x4xf32>, tensor<16x4xf32>) -> tensor<16x4xf32>
    return %sum, %w2 : tensor<16x4xf32>, tensor<16x4xf32>
  }
}
