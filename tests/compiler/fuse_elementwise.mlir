// RUN: %dtc-opt %s --pass-pipeline='builtin.module(func.func(dtc-fuse-elementwise))' | FileCheck %s

// A bias add, GELU written out (x used twice) and a residual add become one
// kernel; the splat constants are copied into it.
// CHECK-LABEL: func.func @gelu_chain
func.func @gelu_chain(%x: tensor<4x8xf32>, %b: tensor<8xf32>, %r: tensor<4x8xf32>) -> tensor<4x8xf32> {
  // CHECK: %[[F:.*]] = graph.fused %arg0, %arg1, %arg2 : (tensor<4x8xf32>, tensor<8xf32>, tensor<4x8xf32>) -> tensor<4x8xf32> {
  // CHECK-NEXT: ^bb0(%[[X:.*]]: tensor<4x8xf32>, %[[B:.*]]: tensor<8xf32>, %[[R:.*]]: tensor<4x8xf32>):
  // CHECK-DAG: graph.constant dense<5.000000e-01> : tensor<f32>
  // CHECK-DAG: graph.constant dense<1.000000e+00> : tensor<f32>
  // CHECK: %[[H:.*]] = graph.add %[[X]], %[[B]]
  // CHECK: graph.erf
  // CHECK: %[[OUT:.*]] = graph.add {{.*}}, %[[R]]
  // CHECK-NEXT: graph.yield %[[OUT]] : tensor<4x8xf32>
  // CHECK-NOT: graph.add
  // CHECK: return %[[F]]
  %half = graph.constant dense<0.5> : tensor<f32>
  %one = graph.constant dense<1.0> : tensor<f32>
  %h = graph.add %x, %b : (tensor<4x8xf32>, tensor<8xf32>) -> tensor<4x8xf32>
  %s = graph.mul %h, %half : (tensor<4x8xf32>, tensor<f32>) -> tensor<4x8xf32>
  %e = graph.erf %s : (tensor<4x8xf32>) -> tensor<4x8xf32>
  %p = graph.add %e, %one : (tensor<4x8xf32>, tensor<f32>) -> tensor<4x8xf32>
  %g = graph.mul %h, %p : (tensor<4x8xf32>, tensor<4x8xf32>) -> tensor<4x8xf32>
  %o = graph.add %g, %r : (tensor<4x8xf32>, tensor<4x8xf32>) -> tensor<4x8xf32>
  return %o : tensor<4x8xf32>
}

// A value read by two kernels (or by a non-elementwise op) is computed once
// and stored: it ends its own group.
// CHECK-LABEL: func.func @shared_producer
func.func @shared_producer(%x: tensor<4x8xf32>, %w: tensor<8x8xf32>) -> (tensor<4x8xf32>, tensor<4x8xf32>) {
  // CHECK: %[[E:.*]] = graph.fused %arg0 : (tensor<4x8xf32>) -> tensor<4x8xf32> {
  // CHECK: graph.exp
  // CHECK: %[[M:.*]] = graph.matmul %[[E]], %arg1
  // CHECK: %[[A:.*]] = graph.fused %[[M]], %[[E]]
  // CHECK: graph.relu
  // CHECK: graph.add
  // CHECK: %[[N:.*]] = graph.fused %[[E]] :
  // CHECK: graph.neg
  // CHECK: return %[[A]], %[[N]]
  %e = graph.exp %x : (tensor<4x8xf32>) -> tensor<4x8xf32>
  %m = graph.matmul %e, %w : (tensor<4x8xf32>, tensor<8x8xf32>) -> tensor<4x8xf32>
  %r = graph.relu %m : (tensor<4x8xf32>) -> tensor<4x8xf32>
  %a = graph.add %e, %r : (tensor<4x8xf32>, tensor<4x8xf32>) -> tensor<4x8xf32>
  %n = graph.neg %e : (tensor<4x8xf32>) -> tensor<4x8xf32>
  return %a, %n : tensor<4x8xf32>, tensor<4x8xf32>
}

// Broadcast, cast, comparison and where fuse too; a non-splat constant
// stays outside as an input.
// CHECK-LABEL: func.func @mask
func.func @mask(%s: tensor<2x3x3xf32>) -> tensor<2x3x3xf32> {
  // CHECK: %[[T:.*]] = graph.constant dense<{{\[}}[1, 0, 0], [1, 1, 0], [1, 1, 1]]> : tensor<3x3xi64>
  // CHECK: graph.fused %[[T]], %arg0 : (tensor<3x3xi64>, tensor<2x3x3xf32>) -> tensor<2x3x3xf32>
  // CHECK: graph.constant dense<0> : tensor<i64>
  // CHECK: graph.constant dense<-1.000000e+09> : tensor<f32>
  // CHECK: graph.equal
  // CHECK: graph.broadcast
  // CHECK: graph.where
  %tri = graph.constant dense<[[1, 0, 0], [1, 1, 0], [1, 1, 1]]> : tensor<3x3xi64>
  %zero = graph.constant dense<0> : tensor<i64>
  %neg = graph.constant dense<-1.0e9> : tensor<f32>
  %c = graph.equal %tri, %zero : (tensor<3x3xi64>, tensor<i64>) -> tensor<3x3xi1>
  %cb = graph.broadcast %c {shape = array<i64: 2, 3, 3>} : (tensor<3x3xi1>) -> tensor<2x3x3xi1>
  %w = graph.where %cb, %neg, %s : (tensor<2x3x3xi1>, tensor<f32>, tensor<2x3x3xf32>) -> tensor<2x3x3xf32>
  return %w : tensor<2x3x3xf32>
}

// Non-elementwise ops are left alone.
// CHECK-LABEL: func.func @none
func.func @none(%x: tensor<4x8xf32>) -> tensor<4x8xf32> {
  // CHECK-NOT: graph.fused
  // CHECK: graph.softmax
  %s = graph.softmax %x {axis = 1 : i64} : (tensor<4x8xf32>) -> tensor<4x8xf32>
  return %s : tensor<4x8xf32>
}
