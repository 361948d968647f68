// RUN: %dtc-opt %s | %dtc-opt | FileCheck %s

// Shardings and splits round-trip: per entry, the mesh axes that cut it.
// CHECK-LABEL: func.func @split
// CHECK-SAME: %arg0: tensor<4x8xf32> {dtc.sharding = #graph.sharding<[0], []>}
// CHECK: graph.matmul %arg0, %arg1 {dtc.split = #graph.split<[0], [], [1]>}
// CHECK: dtc.sharding = #graph.sharding<[1, 0]>
// CHECK: dtc.sharding = #graph.sharding<>
func.func @split(%x: tensor<4x8xf32> {dtc.sharding = #graph.sharding<[0], []>},
                 %w: tensor<8x2xf32>) -> tensor<4x2xf32> {
  %y = graph.matmul %x, %w {dtc.split = #graph.split<[0], [], [1]>} : (tensor<4x8xf32>, tensor<8x2xf32>) -> tensor<4x2xf32>
  %b = graph.parameter "b" {dtc.sharding = #graph.sharding<[1, 0]>} : tensor<2xf32>
  %s = graph.parameter "s" {dtc.sharding = #graph.sharding<>} : tensor<f32>
  return %y : tensor<4x2xf32>
}
