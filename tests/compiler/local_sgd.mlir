// RUN: %dtc-opt %s --dtc-local-sgd | FileCheck %s
// RUN: %dtc-opt %s --dtc-local-sgd=federated=true | FileCheck %s --check-prefix=FED
// RUN: %dtc-opt %s --dtc-local-sgd=average-every=8 | FileCheck %s --check-prefix=EVERY
// RUN: not %dtc-opt %s --dtc-local-sgd=axis=data 2>&1 | FileCheck %s --check-prefix=AXIS

// On a dp x tp mesh: a weight gradient reduced over dp alone is not
// reduced but scaled by dp's 2 ranks (the loss divided each rank's mean by
// them); one reduced over dp and tp keeps its tp part; an activation's
// reduction over tp and the loss's over dp stay (local SGD still reports
// the mean loss). Federated, the loss is each client's own (scaled alike).
// CHECK-LABEL: func.func @main
// CHECK-SAME: dtc.notes = ["sync: local SGD: each of the 2 'dp' ranks trains its own replica (2 gradient all-reduces left out); the runtime averages the weights every 4 steps and at the end"]
// CHECK-SAME: dtc.training = {average_every = 4 : i64, data_axes = array<i64: 0>, micro_batches = 1 : i64, sync = "local"}
// CHECK: %[[TWO:.*]] = graph.constant dense<2.000000e+00> : tensor<f32>
// CHECK-NEXT: %[[G:.*]] = graph.mul %arg0, %[[TWO]] {dtc.once_per_step}
// CHECK-NEXT: %[[T:.*]] = mesh.all_reduce %arg1 on @mesh mesh_axes = [1] {dtc.gradient_reduction}
// CHECK: %[[TS:.*]] = graph.mul %[[T]],
// CHECK-NEXT: %[[A:.*]] = mesh.all_reduce %arg2 on @mesh mesh_axes = [1] :
// CHECK-NEXT: %[[L:.*]] = mesh.all_reduce %arg3 on @mesh mesh_axes = [0] :
// CHECK-NEXT: return %[[L]], %[[G]], %[[TS]], %[[A]]
// FED-LABEL: func.func @main
// FED-SAME: sync: federated averaging: each of the 2 'dp' ranks is a client training on its own data (2 gradient all-reduces and the loss's left out)
// FED-SAME: sync = "federated"
// FED: %[[A:.*]] = mesh.all_reduce %arg2 on @mesh mesh_axes = [1] :
// FED-NEXT: %[[TWO:.*]] = graph.constant dense<2.000000e+00> : tensor<f32>
// FED-NEXT: %[[L:.*]] = graph.mul %arg3, %[[TWO]]
// FED-NEXT: return %[[L]], %{{.*}}, %{{.*}}, %[[A]]
// EVERY: the runtime averages the weights every 8 steps
// AXIS: --sync local keeps replicas along the data-parallel axis 'data', which the mesh does not have: give --dp N
module attributes {dtc.mesh_axis_names = ["dp", "tp"]} {
  mesh.mesh @mesh(shape = 2x2)
  func.func @main(%g: tensor<4x8xf32>, %t: tensor<4x8xf32>, %a: tensor<4xf32>, %l: tensor<f32>)
      -> (tensor<f32>, tensor<4x8xf32>, tensor<4x8xf32>, tensor<4xf32>)
      attributes {dtc.training = {micro_batches = 1 : i64}} {
    %0 = mesh.all_reduce %g on @mesh mesh_axes = [0] {dtc.gradient_reduction, dtc.once_per_step} : tensor<4x8xf32> -> tensor<4x8xf32>
    %1 = mesh.all_reduce %t on @mesh mesh_axes = [0, 1] {dtc.gradient_reduction} : tensor<4x8xf32> -> tensor<4x8xf32>
    %2 = mesh.all_reduce %a on @mesh mesh_axes = [1] : tensor<4xf32> -> tensor<4xf32>
    %3 = mesh.all_reduce %l on @mesh mesh_axes = [0] : tensor<f32> -> tensor<f32>
    return %3, %0, %1, %2 : tensor<f32>, tensor<4x8xf32>, tensor<4x8xf32>, tensor<4xf32>
  }
}

