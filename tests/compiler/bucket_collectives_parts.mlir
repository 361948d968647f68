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
// PARTS-NEXT: graph.matmul
// PARTS-NEXT: graph.add
// PARTS-NEXT: mesh.all_gather
func.func @apart(%a: tensor<2x2xf32>) -> (tensor<4x2xf32>, tensor<4x2xf32>) {
  %0 = mesh.all_gather %a on @mesh mesh_axes = [0] gather_axis = 0 : tensor<2x2xf32> -> tensor<4x2xf32>
  %m = graph.matmul %0, %a : (tensor<4x2xf32>, tensor<2x2xf32>) -> tensor<4x2xf32>
  %s = graph.add %a, %a : (tensor<2x2xf32>, tensor<2x2xf32>) -> tensor<2x2xf32>
  %1 = mesh.all_gather %s on @mesh mesh_axes = [0] gather_axis = 0 : tensor<2x2xf32> -> tensor<4x2xf32>
  %n = graph.matmul %1, %a : (tensor<4x2xf32>, tensor<2x2xf32>) -> tensor<4x2xf32>
  return %m, %n : tensor<4x2xf32>, tensor<4x2xf32>
}

// A collective that leads nowhere but the step's results (ZeRO's gather of
// an updated weight's shard, read by the update alone) waits like a
// gradient's reduction: the two gathers share a message across the
// optimizer's op between them, and the update reading the first moves
// after it. They do not join an activation's gather.
// PARTS-LABEL: func.func @late
// PARTS: %[[U:.*]] = graph.mul %arg1, %arg1
// PARTS-NEXT: %[[B:.*]]:2 = graph.bucket %arg0, %[[U]]
// PARTS-NOT: dtc.gradient_reduction
// PARTS: graph.sub %arg2, %[[B]]#0
// PARTS-NEXT: graph.sub %arg2, %[[B]]#1
// PARTS-NEXT: mesh.all_gather %arg0
// PARTS-NEXT: graph.matmul
func.func @late(%d1: tensor<2x2xf32>, %d2: tensor<2x2xf32>, %w: tensor<4x2xf32>) -> (tensor<4x2xf32>, tensor<4x2xf32>, tensor<4x2xf32>) {
  %g1 = mesh.all_gather %d1 on @mesh mesh_axes = [0] gather_axis = 0 : tensor<2x2xf32> -> tensor<4x2xf32>
  %w1 = graph.sub %w, %g1 : (tensor<4x2xf32>, tensor<4x2xf32>) -> tensor<4x2xf32>
  %u = graph.mul %d2, %d2 : (tensor<2x2xf32>, tensor<2x2xf32>) -> tensor<2x2xf32>
  %g2 = mesh.all_gather %u on @mesh mesh_axes = [0] gather_axis = 0 : tensor<2x2xf32> -> tensor<4x2xf32>
  %w2 = graph.sub %w, %g2 : (tensor<4x2xf32>, tensor<4x2xf32>) -> tensor<4x2xf32>
  %a = mesh.all_gather %d1 on @mesh mesh_axes = [0] gather_axis = 0 : tensor<2x2xf32> -> tensor<4x2xf32>
  %m = graph.matmul %a, %d2 : (tensor<4x2xf32>, tensor<2x2xf32>) -> tensor<4x2xf32>
  return %w1, %w2, %m : tensor<4x2xf32>, tensor<4x2xf32>, tensor<4x2xf32>
}

// A weight's gather (its input a parameter: ZeRO-3's) goes ahead of where
// it stood: the next weight gathers of its kind join it, up to the next
// send, receive or part, while what they gather stays within the byte
// limit. The second gather moves before the first matmul; the third,
// past the send, stays.
// PARTS-LABEL: func.func @ahead
// PARTS: %[[W1:.*]] = graph.parameter "w1"
// PARTS: %[[W2:.*]] = graph.parameter "w2"
// PARTS: %[[B:.*]]:2 = graph.bucket %[[W1]], %[[W2]]
// PARTS: graph.matmul %arg0, %[[B]]#0
// PARTS-NEXT: graph.matmul {{.*}}, %[[B]]#1
// PARTS-NEXT: graph.send
// PARTS-NEXT: mesh.all_gather
// PARTS-NEXT: graph.matmul
func.func @ahead(%x: tensor<2x4xf32>) -> tensor<2x4xf32> {
  %w1 = graph.parameter "w1" : tensor<2x4xf32>
  %w2 = graph.parameter "w2" : tensor<2x4xf32>
  %w3 = graph.parameter "w3" : tensor<2x4xf32>
  %g1 = mesh.all_gather %w1 on @mesh mesh_axes = [0] gather_axis = 0 : tensor<2x4xf32> -> tensor<4x4xf32>
  %y1 = graph.matmul %x, %g1 : (tensor<2x4xf32>, tensor<4x4xf32>) -> tensor<2x4xf32>
  %g2 = mesh.all_gather %w2 on @mesh mesh_axes = [0] gather_axis = 0 : tensor<2x4xf32> -> tensor<4x4xf32>
  %y2 = graph.matmul %y1, %g2 : (tensor<2x4xf32>, tensor<4x4xf32>) -> tensor<2x4xf32>
  graph.send %y2 to stage 1 : tensor<2x4xf32>
  %g3 = mesh.all_gather %w3 on @mesh mesh_axes = [0] gather_axis = 0 : tensor<2x4xf32> -> tensor<4x4xf32>
  %y3 = graph.matmul %y2, %g3 : (tensor<2x4xf32>, tensor<4x4xf32>) -> tensor<2x4xf32>
  return %y3 : tensor<2x4xf32>
}
