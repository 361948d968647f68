// Graph ops with small constant operands fold to constants under
// -canonicalize (as they do at import), so shape arithmetic disappears.
// RUN: %dtc-opt %s -canonicalize | FileCheck %s

// CHECK-LABEL: func.func @add
// CHECK-NEXT: %[[C:.*]] = graph.constant dense<[11, 12, 13]> : tensor<3xi64>
// CHECK-NEXT: return %[[C]]
func.func @add() -> tensor<3xi64> {
  %a = graph.constant dense<[1, 2, 3]> : tensor<3xi64>
  %b = graph.constant dense<10> : tensor<i64>
  %0 = graph.add %a, %b : (tensor<3xi64>, tensor<i64>) -> tensor<3xi64>
  return %0 : tensor<3xi64>
}

// CHECK-LABEL: func.func @arith_float
// CHECK-NEXT: %[[C:.*]] = graph.constant dense<[5.000000e-01, -1.000000e+00]> : tensor<2xf32>
// CHECK-NEXT: return %[[C]]
func.func @arith_float() -> tensor<2xf32> {
  %a = graph.constant dense<[1.0, -2.0]> : tensor<2xf32>
  %b = graph.constant dense<2.0> : tensor<f32>
  %0 = graph.div %a, %b : (tensor<2xf32>, tensor<f32>) -> tensor<2xf32>
  return %0 : tensor<2xf32>
}

// CHECK-LABEL: func.func @gather
// CHECK-DAG: %[[V:.*]] = graph.constant dense<[30, 10]> : tensor<2xi64>
// CHECK-DAG: %[[S:.*]] = graph.constant dense<20> : tensor<i64>
// CHECK-NOT: graph.gather
// CHECK: return %[[V]], %[[S]]
func.func @gather() -> (tensor<2xi64>, tensor<i64>) {
  %data = graph.constant dense<[10, 20, 30]> : tensor<3xi64>
  %idx = graph.constant dense<[2, 0]> : tensor<2xi64>
  %one = graph.constant dense<-2> : tensor<i64>
  %0 = graph.gather %data, %idx {axis = 0 : i64} : (tensor<3xi64>, tensor<2xi64>) -> tensor<2xi64>
  %1 = graph.gather %data, %one {axis = 0 : i64} : (tensor<3xi64>, tensor<i64>) -> tensor<i64>
  return %0, %1 : tensor<2xi64>, tensor<i64>
}

// CHECK-LABEL: func.func @concat
// CHECK-NEXT: %[[C:.*]] = graph.constant dense<[2, 16, 4, 16]> : tensor<4xi64>
// CHECK-NEXT: return %[[C]]
func.func @concat() -> tensor<4xi64> {
  %a = graph.constant dense<[2, 16]> : tensor<2xi64>
  %b = graph.constant dense<4> : tensor<1xi64>
  %c = graph.constant dense<[16]> : tensor<1xi64>
  %0 = graph.concat %a, %b, %c {axis = 0 : i64} : (tensor<2xi64>, tensor<1xi64>, tensor<1xi64>) -> tensor<4xi64>
  return %0 : tensor<4xi64>
}

// CHECK-LABEL: func.func @slice
// CHECK-NEXT: %[[C:.*]] = graph.constant dense<[4, 2, 0]> : tensor<3xi64>
// CHECK-NEXT: return %[[C]]
func.func @slice() -> tensor<3xi64> {
  %a = graph.constant dense<[0, 1, 2, 3, 4, 5]> : tensor<6xi64>
  %0 = graph.slice %a {offsets = array<i64: 4>, sizes = array<i64: 3>, strides = array<i64: -2>} : (tensor<6xi64>) -> tensor<3xi64>
  return %0 : tensor<3xi64>
}

// CHECK-LABEL: func.func @transpose
// CHECK-NEXT: %[[C:.*]] = graph.constant dense<{{\[\[}}1, 4], [2, 5], [3, 6]]> : tensor<3x2xi32>
// CHECK-NEXT: return %[[C]]
func.func @transpose() -> tensor<3x2xi32> {
  %a = graph.constant dense<[[1, 2, 3], [4, 5, 6]]> : tensor<2x3xi32>
  %0 = graph.transpose %a {perm = array<i64: 1, 0>} : (tensor<2x3xi32>) -> tensor<3x2xi32>
  return %0 : tensor<3x2xi32>
}

// CHECK-LABEL: func.func @broadcast
// CHECK-NEXT: %[[C:.*]] = graph.constant dense<{{\[\[}}1.000000e+00, 1.000000e+00, 1.000000e+00], [2.000000e+00, 2.000000e+00, 2.000000e+00]]> : tensor<2x3xf32>
// CHECK-NEXT: return %[[C]]
func.func @broadcast() -> tensor<2x3xf32> {
  %a = graph.constant dense<[[1.0], [2.0]]> : tensor<2x1xf32>
  %0 = graph.broadcast %a {shape = array<i64: 2, 3>} : (tensor<2x1xf32>) -> tensor<2x3xf32>
  return %0 : tensor<2x3xf32>
}

// CHECK-LABEL: func.func @reshape
// CHECK-NEXT: %[[C:.*]] = graph.constant dense<{{\[\[}}1, 2, 3], [4, 5, 6]]> : tensor<2x3xi64>
// CHECK-NEXT: return %[[C]]
func.func @reshape() -> tensor<2x3xi64> {
  %a = graph.constant dense<[1, 2, 3, 4, 5, 6]> : tensor<6xi64>
  %0 = graph.reshape %a : (tensor<6xi64>) -> tensor<2x3xi64>
  return %0 : tensor<2x3xi64>
}

// A PyTorch-style shape computation: Gather -> Unsqueeze -> Concat with a
// divided head size folds to one constant.
// CHECK-LABEL: func.func @shape_chain
// CHECK-NEXT: %[[C:.*]] = graph.constant dense<[2, 16, 4, 16]> : tensor<4xi64>
// CHECK-NEXT: return %[[C]]
func.func @shape_chain() -> tensor<4xi64> {
  %shape = graph.constant dense<[2, 16, 64]> : tensor<3xi64>
  %i0 = graph.constant dense<0> : tensor<i64>
  %i1 = graph.constant dense<1> : tensor<i64>
  %i2 = graph.constant dense<2> : tensor<i64>
  %heads = graph.constant dense<4> : tensor<i64>
  %d0 = graph.gather %shape, %i0 {axis = 0 : i64} : (tensor<3xi64>, tensor<i64>) -> tensor<i64>
  %d1 = graph.gather %shape, %i1 {axis = 0 : i64} : (tensor<3xi64>, tensor<i64>) -> tensor<i64>
  %d2 = graph.gather %shape, %i2 {axis = 0 : i64} : (tensor<3xi64>, tensor<i64>) -> tensor<i64>
  %hd = graph.div %d2, %heads : (tensor<i64>, tensor<i64>) -> tensor<i64>
  %u0 = graph.unsqueeze %d0 {axes = array<i64: 0>} : (tensor<i64>) -> tensor<1xi64>
  %u1 = graph.unsqueeze %d1 {axes = array<i64: 0>} : (tensor<i64>) -> tensor<1xi64>
  %u2 = graph.unsqueeze %heads {axes = array<i64: 0>} : (tensor<i64>) -> tensor<1xi64>
  %u3 = graph.unsqueeze %hd {axes = array<i64: 0>} : (tensor<i64>) -> tensor<1xi64>
  %0 = graph.concat %u0, %u1, %u2, %u3 {axis = 0 : i64} : (tensor<1xi64>, tensor<1xi64>, tensor<1xi64>, tensor<1xi64>) -> tensor<4xi64>
  return %0 : tensor<4xi64>
}

// Comparisons, where and not fold too (a causal-mask style computation).
// CHECK-LABEL: func.func @mask
// CHECK-NEXT: %[[C:.*]] = graph.constant dense<[0.000000e+00, -1.000000e+09, -1.000000e+09]> : tensor<3xf32>
// CHECK-NEXT: return %[[C]]
func.func @mask() -> tensor<3xf32> {
  %pos = graph.constant dense<[0, 1, 2]> : tensor<3xi64>
  %zero = graph.constant dense<0> : tensor<i64>
  %neg = graph.constant dense<-1.0e9> : tensor<f32>
  %z = graph.constant dense<0.0> : tensor<f32>
  %keep = graph.equal %pos, %zero : (tensor<3xi64>, tensor<i64>) -> tensor<3xi1>
  %drop = graph.not %keep : (tensor<3xi1>) -> tensor<3xi1>
  %0 = graph.where %drop, %neg, %z : (tensor<3xi1>, tensor<f32>, tensor<f32>) -> tensor<3xf32>
  return %0 : tensor<3xf32>
}

// Runtime operands do not fold; neither do constants over the size limit.
// CHECK-LABEL: func.func @no_fold
// CHECK: graph.add %arg0
// CHECK: graph.add %{{.*}} : (tensor<300x300xf32>, tensor<300x300xf32>) -> tensor<300x300xf32>
func.func @no_fold(%x: tensor<3xi64>) -> (tensor<3xi64>, tensor<300x300xf32>) {
  %a = graph.constant dense<[1, 2, 3]> : tensor<3xi64>
  %0 = graph.add %x, %a : (tensor<3xi64>, tensor<3xi64>) -> tensor<3xi64>
  %big = graph.constant dense<1.0> : tensor<300x300xf32>
  %1 = graph.add %big, %big : (tensor<300x300xf32>, tensor<300x300xf32>) -> tensor<300x300xf32>
  return %0, %1 : tensor<3xi64>, tensor<300x300xf32>
}
