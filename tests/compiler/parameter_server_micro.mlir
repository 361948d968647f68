// RUN: %dtc-opt %s --dtc-parameter-server | FileCheck %s

// Micro-batches: the per-micro-batch part stays the worker's (its
// accumulation, with the reduction gone); the server receives the
// accumulated gradient the once-per-step part read.
// CHECK-LABEL: func.func @main
// CHECK-SAME: -> (tensor<8xf32> {dtc.updates = "w.acc", graph.name = "w.acc.new"}, tensor<8xf32> {graph.name = "w.gradient"})
// CHECK: %[[ACC:.*]] = graph.parameter "w.acc"
// CHECK-NEXT: %[[SUM:.*]] = graph.add %[[ACC]], %arg1
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
                  %g: tensor<8xf32>)
      -> (tensor<8xf32> {dtc.updates = "w.acc", graph.name = "w.acc.new"},
          tensor<8xf32> {dtc.updates = "w", graph.name = "w.new"})
      attributes {dtc.training = {micro_batches = 2 : i64}} {
    %w = graph.parameter "w" : tensor<8xf32>
    %acc = graph.parameter "w.acc" {dtc.accumulator, dtc.zeros} : tensor<8xf32>
    %0 = mesh.all_reduce %g on @mesh mesh_axes = [0] {dtc.gradient_reduction} : tensor<8xf32> -> tensor<8xf32>
    %sum = graph.add %acc, %0 : (tensor<8xf32>, tensor<8xf32>) -> tensor<8xf32>
    %step = graph.mul %sum, %lr {dtc.once_per_step} : (tensor<8xf32>, tensor<f32>) -> tensor<8xf32>
    %w2 = graph.sub %w, %step {dtc.once_per_step} : (tensor<8xf32>, tensor<8xf32>) -> tensor<8xf32>
    return %sum, %w2 : tensor<8xf32>, tensor<8xf32>
  }
}
