// RUN: %dtc-opt %s --dtc-bucket-collectives | FileCheck %s
// RUN: %dtc-opt %s --dtc-bucket-collectives="bytes=100" | FileCheck %s --check-prefix=SMALL
// RUN: %dtc-opt %s --dtc-bucket-collectives="bytes=0" | FileCheck %s --check-prefix=OFF

// Gradients' collectives of one kind over one group share a message: the
// three reduce-scatters over axis 0 (each along its own dim) are one bucket,
// sent where the last of them was; the two all-reduces over axis 1 another. The
// op reading the first reduce-scatter's result moves after its bucket; the
// add, which reads none, keeps its place before it. A bucket is sent when
// the last collective of its kind joins it.
// CHECK: "buckets: 5 collectives sent as 2 messages (528 B, up to 25.00 MiB each, --bucket)
// CHECK: %[[A:.*]] = graph.add %arg1, %arg1
// CHECK-NEXT: %[[RS:.*]]:3 = graph.bucket %arg0, %[[A]], %arg2 {dtc.gradient_reduction, dtc.result_shardings = [unit, unit, unit]} : (tensor<8x4xf32>, tensor<4xf32>, tensor<8x4xf32>) -> (tensor<4x4xf32>, tensor<2xf32>, tensor<8x2xf32>) {
// CHECK-NEXT: ^bb0(%[[X:.*]]: tensor<8x4xf32>, %[[Y:.*]]: tensor<4xf32>, %[[Z:.*]]: tensor<8x4xf32>):
// CHECK-NEXT: mesh.reduce_scatter %[[X]] on @mesh mesh_axes = [0] scatter_axis = 0
// CHECK-NEXT: mesh.reduce_scatter %[[Y]] on @mesh mesh_axes = [0] scatter_axis = 0
// CHECK-NEXT: mesh.reduce_scatter %[[Z]] on @mesh mesh_axes = [0] scatter_axis = 1
// CHECK-NEXT: graph.yield
// CHECK: %[[U:.*]] = graph.mul %[[RS]]#0, %[[RS]]#0
// CHECK-NEXT: %[[AR:.*]]:2 = graph.bucket %arg2, %arg0 {dtc.gradient_reduction
// CHECK: mesh.all_reduce {{.*}} mesh_axes = [1]
// CHECK-NEXT: mesh.all_reduce {{.*}} mesh_axes = [1]
// CHECK: return %[[RS]]#1, %[[RS]]#2, %[[AR]]#0, %[[AR]]#1, %[[U]]

// At most 100 bytes a bucket: a 128-byte tensor fills one alone and is
// sent where it was; the 16-byte reduce-scatter finds no room beside the
// next one, and goes alone too.
// SMALL-NOT: graph.bucket
// SMALL: mesh.reduce_scatter %arg0
// SMALL-NEXT: graph.mul
// SMALL-NEXT: graph.add
// SMALL-NEXT: mesh.all_reduce %arg2
// SMALL-NEXT: mesh.reduce_scatter %1
// SMALL-NEXT: mesh.reduce_scatter %arg2
// SMALL-NEXT: mesh.all_reduce %arg0

// OFF-NOT: graph.bucket
// OFF-NOT: buckets:
mesh.mesh @mesh(shape = 2x2)
func.func @main(%g1: tensor<8x4xf32>, %g2: tensor<4xf32>, %g3: tensor<8x4xf32>) -> (tensor<2xf32>, tensor<8x2xf32>, tensor<8x4xf32>, tensor<8x4xf32>, tensor<4x4xf32>) {
  %r1 = mesh.reduce_scatter %g1 on @mesh mesh_axes = [0] scatter_axis = 0 {dtc.gradient_reduction} : tensor<8x4xf32> -> tensor<4x4xf32>
  %u1 = graph.mul %r1, %r1 : (tensor<4x4xf32>, tensor<4x4xf32>) -> tensor<4x4xf32>
  %a = graph.add %g2, %g2 : (tensor<4xf32>, tensor<4xf32>) -> tensor<4xf32>
  %r2 = mesh.reduce_scatter %a on @mesh mesh_axes = [0] scatter_axis = 0 {dtc.gradient_reduction} : tensor<4xf32> -> tensor<2xf32>
  %t1 = mesh.all_reduce %g3 on @mesh mesh_axes = [1] {dtc.gradient_reduction} : tensor<8x4xf32> -> tensor<8x4xf32>
  %r3 = mesh.reduce_scatter %g3 on @mesh mesh_axes = [0] scatter_axis = 1 {dtc.gradient_reduction} : tensor<8x4xf32> -> tensor<8x2xf32>
  %t2 = mesh.all_reduce %g1 on @mesh mesh_axes = [1] {dtc.gradient_reduction} : tensor<8x4xf32> -> tensor<8x4xf32>
  return %r2, %r3, %t1, %t2, %u1 : tensor<2xf32>, tensor<8x2xf32>, tensor<8x4xf32>, tensor<8x4xf32>, tensor<4x4xf32>
}

