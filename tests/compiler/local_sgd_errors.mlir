// RUN: %dtc-opt %s --split-input-file --verify-diagnostics --dtc-local-sgd
// RUN: not %dtc-opt %s --dtc-local-sgd=average-every=0 2>&1 | FileCheck %s --check-prefix=EVERY

// ZeRO's reduce-scatter of a gradient over dp cannot be left out: local
// SGD averages whole replicas.
module attributes {dtc.mesh_axis_names = ["dp"]} {
  mesh.mesh @mesh(shape = 2)
  func.func @zero(%s: tensor<4x8xf32>) -> tensor<2x8xf32> attributes {dtc.training = {}} {
    // expected-error @+1 {{--sync local needs every weight whole on each data-parallel rank (ZeRO stage 0), but this gradient is reduce-scattered over 'dp'}}
    %0 = mesh.reduce_scatter %s on @mesh mesh_axes = [0] scatter_axis = 0 {dtc.gradient_reduction} : tensor<4x8xf32> -> tensor<2x8xf32>
    return %0 : tensor<2x8xf32>
  }
}

// EVERY: --average-every needs a number of steps of at least 1, got 0
