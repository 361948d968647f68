// RUN: %dtc-opt %s --dtc-bucket-collectives | FileCheck %s --check-prefix=PARTS

// What keeps collectives apart: a send (nothing moves across it), the end
// of the per-micro-batch part, an accumulator's all-reduce once a step
// (it runs early, in place), and a group of one rank. An activation's
// collectives (no dtc.gradient_reduction) share a message only side by
// side: the step may wait for the first.
// PARTS-LABEL: func.func @parts
// PARTS: graph.bucket %arg0, %arg1
// PARTS: graph.send
// PARTS-NEXT: mesh.all_gather %arg2
// PARTS-NEXT: mesh.all_gather %arg3 {{.*}}dtc.once_per_step
// PARTS-NEXT: mesh.all_reduce %arg0 {{.*}}dtc.once_per_step
// PARTS-NEXT: mesh.all_reduce %arg1 {{.*}}dtc.once_per_step
// PARTS-NEXT: mesh.all_gather %arg2 on @single
// PARTS-NEXT: mesh.all_gather %arg3 on @single
mesh.mesh @mesh(shape = 2x2)
mesh.mesh @single(shape = 1)
func.func @parts(%a: tensor<4xf32>, %b: tensor<4xf32>, %c: tensor<4xf32>, %d: tensor<4xf32>) -> (tensor<8xf32>, tensor<8xf32>, tensor<8xf32>, tensor<8xf32>, tensor<4xf32>, tensor<4xf32>, tensor<4xf32>, tensor<4xf32>) {
  %0 = mesh.all_gather %a on @mesh mesh_axes = [0] gather_axis = 0 : tensor<4xf32> -> tensor<8xf32>
  %1 = mesh.all_gather %b on @mesh mesh_axes = [0] gather_axis = 0 : tensor<4xf32> -> tensor<8xf32>
  graph.send %a to stage 1 : tensor<4xf32>
  %2 = mesh.all_gather %c on @mesh mesh_axes = [0] gather_axis = 0 : tensor<4xf32> -> tensor<8xf32>
  %3 = mesh.all_gather %d on @mesh mesh_axes = [0] gather_axis = 0 {dtc.once_per_step} : tensor<4xf32> -> tensor<8xf32>
  %4 = mesh.all_reduce %a on @mesh mesh_axes = [0] {dtc.once_per_step} : tensor<4xf32> -> tensor<4xf32>
  %5 = mesh.all_reduce %b on @mesh mesh_axes = [0] {dtc.once_per_step} : tensor<4xf32> -> tensor<4xf32>
  %6 = mesh.all_gather %c on @single mesh_axes = [0] gather_axis = 0 : tensor<4xf32> -> tensor<4xf32>
  %7 = mesh.all_gather %d on @single mesh_axes = [0] gather_axis = 0 : tensor<4xf32> -> tensor<4xf32>
  return %0, %1, %2, %3, %4, %5, %6, %7 : tensor<8xf32>, tensor<8xf32>, tensor<8xf32>, tensor<8xf32>, tensor<4xf32>, tensor<4xf32>, tensor<4xf32>, tensor<4xf32>
}

// PARTS-LABEL: func.func @apart
// PARTS-NOT: graph.bucket
// PARTS: mesh.all_gather %arg0
// PARTS-NEXT: graph.add
// PARTS-NEXT: mesh.all_gather
func.func @apart(%a: tensor<4xf32>) -> (tensor<8xf32>, tensor<8xf32>) {
  %0 = mesh.all_gather %a on @mesh mesh_axes = [0] gather_axis = 0 : tensor<4xf32> -> tensor<8xf32>
  %s = graph.add %a, %a : (tensor<4xf32>, tensor<4xf32>) -> tensor<4xf32>
  %1 = mesh.all_gather %s on @mesh mesh_axes = [0] gather_axis = 0 : tensor<4xf32> -> tensor<8xf32>
  return %0, %1 : tensor<8xf32>, tensor<8xf32>
}
