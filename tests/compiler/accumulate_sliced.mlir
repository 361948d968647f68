// RUN: %dtc-opt %s --dtc-accumulate-gradients | FileCheck %s

// A ZeRO-1 split the search may choose: the accumulator whole, the
// gradient and the optimizer's shard split. The partitioner slices the
// accumulator, adds the gradient's part and gathers the sum back whole
// into it; as written, accumulations() would not see an accumulation, and
// the update behind it would run every micro-batch (a step's losses went
// wrong from its second micro-batch on). dtc-accumulate-gradients adds
// the gathered gradient to the whole accumulator instead, so the update
// reads a slice of the sum once a step.

// CHECK: "gradient accumulation: 3 ops run once per micro-batch, 2 once per step"
// CHECK: %[[ACC:.*]] = graph.parameter "w.grad_accumulator"
// CHECK: %[[PART:.*]] = mesh.all_slice %arg0
// CHECK-NOT: dtc.once_per_step
// CHECK: %[[G:.*]] = mesh.all_gather %[[PART]] on @mesh mesh_axes = [0] gather_axis = 0 : tensor<4x3xf32> -> tensor<8x3xf32>
// CHECK-NEXT: %[[SUM:.*]] = graph.add %[[ACC]], %[[G]] : (tensor<8x3xf32>, tensor<8x3xf32>) -> tensor<8x3xf32>
// CHECK-NEXT: %[[S:.*]] = mesh.all_slice %[[SUM]] on @mesh mesh_axes = [0] slice_axis = 0 {dtc.once_per_step} : tensor<8x3xf32> -> tensor<4x3xf32>
// CHECK-NEXT: graph.sub %{{.*}}, %[[S]] {dtc.once_per_step}
// CHECK: return %[[SUM]],
module {
  mesh.mesh @mesh(shape = 2)
  func.func @main(%g: tensor<8x3xf32>) -> (tensor<8x3xf32>, tensor<4x3xf32>) {
    %acc = graph.parameter "w.grad_accumulator" {dtc.accumulator, dtc.zeros} : tensor<8x3xf32>
    %w = graph.parameter "w" : tensor<4x3xf32>
    %gs = mesh.all_slice %g on @mesh mesh_axes = [0] slice_axis = 0 : tensor<8x3xf32> -> tensor<4x3xf32>
    %as = mesh.all_slice %acc on @mesh mesh_axes = [0] slice_axis = 0 : tensor<8x3xf32> -> tensor<4x3xf32>
    %sum = graph.add %as, %gs : (tensor<4x3xf32>, tensor<4x3xf32>) -> tensor<4x3xf32>
    %back = mesh.all_gather %sum on @mesh mesh_axes = [0] gather_axis = 0 : tensor<4x3xf32> -> tensor<8x3xf32>
    %new = graph.sub %w, %sum : (tensor<4x3xf32>, tensor<4x3xf32>) -> tensor<4x3xf32>
    return %back, %new : tensor<8x3xf32>, tensor<4x3xf32>
  }
}
