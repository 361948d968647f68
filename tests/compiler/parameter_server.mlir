// RUN: %dtc-opt %s --dtc-parameter-server=servers=2 | FileCheck %s
// RUN: %dtc-opt %s --dtc-parameter-server="servers=1 staleness=1" | FileCheck %s --check-prefix=ASYNC
// RUN: not %dtc-opt %s --dtc-parameter-server=servers=9 2>&1 | FileCheck %s --check-prefix=MANY

// Two weights on two servers: w, more than a server's fair share and
// updated elementwise, is cut into two row blocks, one a server (each
// server's parameter a block of the initializer, dtc.rows); b goes whole to
// the less loaded. Each worker returns its own gradients (the reductions
// go) and keeps the loss's all-reduce; each server reads the pushed sum
// from an accumulator parameter and runs the optimizer's ops on its rows.
// CHECK: dtc.parameter_servers = {servers = 2 : i64, staleness = 0 : i64, tensors = [{first_row = 0 : i64, gradient = 1 : i64, rows = 2 : i64, server = 0 : i64, sparse_rows = 0 : i64, weight = "w", weight_output = 3 : i64}, {first_row = 2 : i64, gradient = 1 : i64, rows = 2 : i64, server = 1 : i64, sparse_rows = 0 : i64, weight = "w", weight_output = 6 : i64}, {first_row = 0 : i64, gradient = 2 : i64, rows = 0 : i64, server = 0 : i64, sparse_rows = 0 : i64, weight = "b", weight_output = 5 : i64}]}
// CHECK-LABEL: func.func @main
// CHECK-SAME: -> (tensor<f32> {graph.name = "loss"}, tensor<4x8xf32> {graph.name = "w.gradient"}, tensor<8xf32> {graph.name = "b.gradient"})
// CHECK-SAME: 2 server ranks hold the weights and their optimizer state, tensors or row blocks (bytes) 2 (96 B), 1 (64 B), 1 tensor cut into row blocks; synchronous
// CHECK-SAME: dtc.outputs = array<i64: 0, 1, 2>, dtc.training = {data_axes = array<i64: 0>, micro_batches = 1 : i64, sync = "ps"}
// CHECK-NEXT: %[[L:.*]] = mesh.all_reduce %arg3 on @mesh mesh_axes = [0] :
// CHECK-NEXT: return %[[L]], %arg1, %arg2
// CHECK-LABEL: func.func @server_0
// CHECK-SAME: -> (tensor<2x8xf32> {dtc.updates = "w", graph.name = "w.new"}, tensor<2x8xf32> {dtc.updates = "w.m", graph.name = "w.m.new"}, tensor<8xf32> {dtc.updates = "b", graph.name = "b.new"})
// CHECK-SAME: dtc.outputs = array<i64: 3, 4, 5>, dtc.server = 0 : i64
// CHECK-NEXT: %[[G:.*]] = graph.parameter "w.gradient" {dtc.accumulator, dtc.zeros} : tensor<2x8xf32>
// CHECK-NEXT: %[[W:.*]] = graph.parameter "w" {dtc.rows = array<i64: 0, 4>} : tensor<2x8xf32>
// CHECK-NEXT: %[[M:.*]] = graph.parameter "w.m" {dtc.zeros} : tensor<2x8xf32>
// CHECK-NEXT: %[[M2:.*]] = graph.add %[[M]], %[[G]]
// CHECK-NEXT: %[[S:.*]] = graph.mul %[[M2]], %arg0
// CHECK-NEXT: %[[W2:.*]] = graph.sub %[[W]], %[[S]]
// CHECK-NEXT: %[[BG:.*]] = graph.parameter "b.gradient" {dtc.accumulator, dtc.zeros} : tensor<8xf32>
// CHECK-NEXT: %[[B:.*]] = graph.parameter "b" : tensor<8xf32>
// CHECK: return %[[W2]], %[[M2]], %{{.*}} : tensor<2x8xf32>, tensor<2x8xf32>, tensor<8xf32>
// CHECK-LABEL: func.func @server_1
// CHECK-SAME: dtc.outputs = array<i64: 6, 7>, dtc.server = 1 : i64
// CHECK-NEXT: graph.parameter "w.gradient" {dtc.accumulator, dtc.zeros} : tensor<2x8xf32>
// CHECK-NEXT: graph.parameter "w" {dtc.rows = array<i64: 2, 4>} : tensor<2x8xf32>

// Asynchronous: the workers share nothing, so the loss is each worker's
// own mean (scaled as --sync federated does); one server holds both, whole.
// ASYNC-LABEL: func.func @main
// ASYNC-SAME: asynchronous: each push is applied as it comes, a worker at most 1 step ahead of the slowest
// ASYNC-NEXT: %[[TWO:.*]] = graph.constant dense<2.000000e+00> : tensor<f32>
// ASYNC-NEXT: %[[L:.*]] = graph.mul %arg3, %[[TWO]]
// ASYNC-NEXT: return %[[L]], %arg1, %arg2
// ASYNC-LABEL: func.func @server_0
// ASYNC-SAME: -> (tensor<4x8xf32> {dtc.updates = "w", graph.name = "w.new"}, tensor<4x8xf32> {dtc.updates = "w.m", graph.name = "w.m.new"}, tensor<8xf32> {dtc.updates = "b", graph.name = "b.new"})
// ASYNC-SAME: dtc.outputs = array<i64: 3, 4, 5>
// ASYNC-NOT: dtc.rows
// MANY: error: --servers 9: the model has only 2 trained tensors, in 6 parts a server could hold
module attributes {dtc.mesh_axis_names = ["dp"]} {
  mesh.mesh @mesh(shape = 2)
  func.func @main(%lr: tensor<f32> {dtc.role = "learning_rate", graph.name = "optimizer.lr"},
                  %g: tensor<4x8xf32>, %b: tensor<8xf32>, %l: tensor<f32>)
      -> (tensor<f32> {graph.name = "loss"},
          tensor<4x8xf32> {dtc.updates = "w", graph.name = "w.new"},
          tensor<4x8xf32> {dtc.updates = "w.m", graph.name = "w.m.new"},
          tensor<8xf32> {dtc.updates = "b", graph.name = "b.new"})
      attributes {dtc.training = {micro_batches = 1 : i64}} {
    %w = graph.parameter "w" : tensor<4x8xf32>
    %m = graph.parameter "w.m" {dtc.zeros} : tensor<4x8xf32>
    %bias = graph.parameter "b" : tensor<8xf32>
    %0 = mesh.all_reduce %g on @mesh mesh_axes = [0] {dtc.gradient_reduction} : tensor<4x8xf32> -> tensor<4x8xf32>
    %1 = mesh.all_reduce %b on @mesh mesh_axes = [0] {dtc.gradient_reduction} : tensor<8xf32> -> tensor<8xf32>
    %loss = mesh.all_reduce %l on @mesh mesh_axes = [0] : tensor<f32> -> tensor<f32>
    %m2 = graph.add %m, %0 : (tensor<4x8xf32>, tensor<4x8xf32>) -> tensor<4x8xf32>
    %step = graph.mul %m2, %lr : (tensor<4x8xf32>, tensor<f32>) -> tensor<4x8xf32>
    %w2 = graph.sub %w, %step : (tensor<4x8xf32>, tensor<4x8xf32>) -> tensor<4x8xf32>
    %s2 = graph.mul %1, %lr : (tensor<8xf32>, tensor<f32>) -> tensor<8xf32>
    %b2 = graph.sub %bias, %s2 : (tensor<8xf32>, tensor<8xf32>) -> tensor<8xf32>
    return %loss, %w2, %m2, %b2 : tensor<f32>, tensor<4x8xf32>, tensor<4x8xf32>, tensor<8xf32>
  }
}

