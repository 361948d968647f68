// RUN: %dtc-opt %s --pass-pipeline="builtin.module(dtc-build-training-step{optimizer=sgd momentum=0},func.func(canonicalize,cse),dtc-sharding-search{dp=2 zero=0},dtc-spmd-partition,func.func(dtc-accumulate-gradients,dtc-compress-gradients))" | FileCheck %s


// A data-parallel training step end to end: the weight's gradient (the
// matmul dtc-build-training-step marks) is reduced in bf16; the loss's
// mean over the ranks stays f32.
func.func @main(%x: tensor<4x8xf32> {dtc.name = "x"}) -> (tensor<4x3xf32> {dtc.name = "logits"}) {
  %w = graph.parameter "w" : tensor<8x3xf32>
  %y = graph.matmul %x, %w : (tensor<4x8xf32>, tensor<8x3xf32>) -> tensor<4x3xf32>
  return %y : tensor<4x3xf32>
}
// CHECK: mesh.all_reduce %{{.*}} on @mesh mesh_axes = [0] : tensor<f32> -> tensor<f32>
// CHECK: graph.matmul %{{.*}} {dtc.weight_gradient, transpose_lhs = true}
// CHECK-NEXT: %[[C:.*]] = graph.cast %{{.*}} : (tensor<8x3xf32>) -> tensor<8x3xbf16>
// CHECK-NEXT: %[[R:.*]] = mesh.all_reduce %[[C]] on @mesh mesh_axes = [0] {dtc.gradient_reduction} : tensor<8x3xbf16> -> tensor<8x3xbf16>
// CHECK-NEXT: graph.cast %[[R]] : (tensor<8x3xbf16>) -> tensor<8x3xf32>
// CHECK-NOT: mesh.all_reduce
