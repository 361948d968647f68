// RUN: %dtc-opt %s --pass-pipeline='builtin.module(func.func(dtc-hoist-constants))' | FileCheck %s
// RUN: %dtc-opt %s --pass-pipeline='builtin.module(func.func(dtc-hoist-constants{parameters=false}))' | FileCheck %s --check-prefix=TRAIN

// What depends only on parameters and constants moves to the front, marked
// for the load-time prologue; views of such values move with them but are
// not marked (they cost nothing); what reads a graph input stays.
// CHECK-LABEL: func.func @fold
// CHECK-NEXT: %[[W:.*]] = graph.parameter "w"
// CHECK-NEXT: %[[S:.*]] = graph.parameter "s"
// CHECK-NEXT: %[[T:.*]] = graph.transpose %[[W]] {dtc.prologue, perm
// CHECK-NEXT: %[[V:.*]] = graph.reshape %[[S]] :
// CHECK-NEXT: %[[M:.*]] = graph.mul %[[T]], %[[V]] {dtc.prologue}
// CHECK-NEXT: %[[C:.*]] = graph.constant dense<1.000000e+00>
// CHECK-NEXT: %[[R:.*]] = graph.relu %arg0 :
// CHECK-NEXT: graph.matmul %[[R]], %[[M]] :
// CHECK-NOT: dtc.prologue
// TRAIN-LABEL: func.func @fold
// TRAIN-NOT: dtc.prologue
// TRAIN: graph.constant
// TRAIN: return
func.func @fold(%x: tensor<2x3xf32>) -> tensor<2x4xf32> {
  %w = graph.parameter "w" : tensor<4x3xf32>
  %y0 = graph.relu %x : (tensor<2x3xf32>) -> tensor<2x3xf32>
  %s = graph.parameter "s" : tensor<3xf32>
  %t = graph.transpose %w {perm = array<i64: 1, 0>} : (tensor<4x3xf32>) -> tensor<3x4xf32>
  %v = graph.reshape %s : (tensor<3xf32>) -> tensor<3x1xf32>
  %m = graph.mul %t, %v : (tensor<3x4xf32>, tensor<3x1xf32>) -> tensor<3x4xf32>
  %one = graph.constant dense<1.0> : tensor<f32>
  %y = graph.matmul %y0, %m : (tensor<2x3xf32>, tensor<3x4xf32>) -> tensor<2x4xf32>
  %z = graph.add %y, %one : (tensor<2x4xf32>, tensor<f32>) -> tensor<2x4xf32>
  return %z : tensor<2x4xf32>
}

// Constants count in training too: a mask built from constants is computed
// once.
// CHECK-LABEL: func.func @mask
// CHECK: graph.trilu {{.*}}dtc.prologue
// TRAIN-LABEL: func.func @mask
// TRAIN: graph.trilu {{.*}}dtc.prologue
// TRAIN: graph.where
// TRAIN-NOT: dtc.prologue
func.func @mask(%x: tensor<4x4xf32>) -> tensor<4x4xf32> {
  %ones = graph.constant dense<1.0> : tensor<4x4xf32>
  %zero = graph.constant dense<0.0> : tensor<4x4xf32>
  %l = graph.trilu %ones {upper = false} : (tensor<4x4xf32>) -> tensor<4x4xf32>
  %c = graph.equal %l, %zero : (tensor<4x4xf32>, tensor<4x4xf32>) -> tensor<4x4xi1>
  %y = graph.where %c, %zero, %x : (tensor<4x4xi1>, tensor<4x4xf32>, tensor<4x4xf32>) -> tensor<4x4xf32>
  return %y : tensor<4x4xf32>
}
