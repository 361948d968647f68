// RUN: %dtc-opt %s --dtc-compress-gradients | FileCheck %s
// RUN: %dtc-opt %s --dtc-compress-gradients=precision=f16 | FileCheck %s --check-prefix=F16
// RUN: not %dtc-opt %s --dtc-compress-gradients=precision=f8 2>&1 | FileCheck %s --check-prefix=BAD

// A weight gradient's reduction (marked by dtc-spmd-partition) travels in
// bf16 between casts; an activation's (tensor parallelism) and a value
// already narrow stay as they are; a reduce-scatter (ZeRO) too.
module {
  mesh.mesh @mesh(shape = 2)
  func.func @main(%g: tensor<4x8xf32>, %a: tensor<4xf32>, %s: tensor<4x8xf32>, %h: tensor<4xbf16>)
      -> (tensor<4x8xf32>, tensor<4xf32>, tensor<2x8xf32>, tensor<4xbf16>) {
    %0 = mesh.all_reduce %g on @mesh mesh_axes = [0] {dtc.gradient_reduction, dtc.once_per_step} : tensor<4x8xf32> -> tensor<4x8xf32>
    %1 = mesh.all_reduce %a on @mesh mesh_axes = [0] : tensor<4xf32> -> tensor<4xf32>
    %2 = mesh.reduce_scatter %s on @mesh mesh_axes = [0] scatter_axis = 0 {dtc.gradient_reduction} : tensor<4x8xf32> -> tensor<2x8xf32>
    %3 = mesh.all_reduce %h on @mesh mesh_axes = [0] {dtc.gradient_reduction} : tensor<4xbf16> -> tensor<4xbf16>
    return %0, %1, %2, %3 : tensor<4x8xf32>, tensor<4xf32>, tensor<2x8xf32>, tensor<4xbf16>
  }
}
// CHECK: "gradient compression: 2 gradient reductions sent in bf16 (128 B instead of 256 B in f32)"
// CHECK: %[[C:.*]] = graph.cast %arg0 {dtc.once_per_step} : (tensor<4x8xf32>) -> tensor<4x8xbf16>
// CHECK-NEXT: %[[R:.*]] = mesh.all_reduce %[[C]] on @mesh mesh_axes = [0] {dtc.gradient_reduction, dtc.once_per_step} : tensor<4x8xbf16> -> tensor<4x8xbf16>
// CHECK-NEXT: %[[B:.*]] = graph.cast %[[R]] {dtc.once_per_step} : (tensor<4x8xbf16>) -> tensor<4x8xf32>
// CHECK-NEXT: %[[A:.*]] = mesh.all_reduce %arg1 on @mesh mesh_axes = [0] : tensor<4xf32> -> tensor<4xf32>
// CHECK-NEXT: %[[SC:.*]] = graph.cast %arg2 : (tensor<4x8xf32>) -> tensor<4x8xbf16>
// CHECK-NEXT: %[[RS:.*]] = mesh.reduce_scatter %[[SC]] on @mesh mesh_axes = [0] scatter_axis = 0 {dtc.gradient_reduction} : tensor<4x8xbf16> -> tensor<2x8xbf16>
// CHECK-NEXT: %[[SB:.*]] = graph.cast %[[RS]] : (tensor<2x8xbf16>) -> tensor<2x8xf32>
// CHECK-NEXT: %[[H:.*]] = mesh.all_reduce %arg3 on @mesh mesh_axes = [0] {dtc.gradient_reduction} : tensor<4xbf16> -> tensor<4xbf16>
// CHECK-NEXT: return %[[B]], %[[A]], %[[SB]], %[[H]]

// F16: mesh.all_reduce %{{.*}} {dtc.gradient_reduction, dtc.once_per_step} : tensor<4x8xf16> -> tensor<4x8xf16>
// BAD: error: --compress-gradients takes bf16 or f16, got 'f8'
