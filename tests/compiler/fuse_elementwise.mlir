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

// An optimizer's update: the new moment is returned and read by the
// parameter's update, which comes before the return: one kernel reads the
// moment, gradient and parameter once and writes both.
// CHECK-LABEL: func.func @moment_and_update
func.func @moment_and_update(%m: tensor<8xf32>, %g: tensor<8xf32>, %p: tensor<8xf32>, %lr: tensor<f32>) -> (tensor<8xf32>, tensor<8xf32>) {
  // CHECK: %[[F:.*]]:2 = graph.fused %arg0, %arg1, %arg3, %arg2 : (tensor<8xf32>, tensor<8xf32>, tensor<f32>, tensor<8xf32>) -> (tensor<8xf32>, tensor<8xf32>) {
  // CHECK: %[[M:.*]] = graph.add
  // CHECK: %[[S:.*]] = graph.mul %[[M]]
  // CHECK: %[[P:.*]] = graph.sub %{{.*}}, %[[S]]
  // CHECK-NEXT: graph.yield %[[M]], %[[P]] : tensor<8xf32>, tensor<8xf32>
  // CHECK-NOT: graph.fused
  // CHECK: return %[[F]]#0, %[[F]]#1
  %c = graph.constant dense<0.9> : tensor<f32>
  %m1 = graph.mul %m, %c : (tensor<8xf32>, tensor<f32>) -> tensor<8xf32>
  %m2 = graph.add %m1, %g : (tensor<8xf32>, tensor<8xf32>) -> tensor<8xf32>
  %s = graph.mul %m2, %lr : (tensor<8xf32>, tensor<f32>) -> tensor<8xf32>
  %p1 = graph.sub %p, %s : (tensor<8xf32>, tensor<8xf32>) -> tensor<8xf32>
  return %m2, %p1 : tensor<8xf32>, tensor<8xf32>
}

// Not joined: a value a matmul reads before the consumer (it would feed the
// consumer through the matmul), and one of another shape than the
// consumer's.
// CHECK-LABEL: func.func @not_joined
func.func @not_joined(%x: tensor<4x8xf32>, %w: tensor<8x8xf32>, %b: tensor<8xf32>) -> (tensor<8xf32>, tensor<4x8xf32>) {
  // CHECK: %[[E:.*]] = graph.fused %arg0 : (tensor<4x8xf32>) -> tensor<4x8xf32>
  // CHECK: %[[MM:.*]] = graph.matmul %[[E]], %arg1
  // CHECK: %[[N:.*]] = graph.fused %arg2 : (tensor<8xf32>) -> tensor<8xf32>
  // CHECK: %[[S:.*]] = graph.fused %[[E]], %[[MM]], %[[N]] : (tensor<4x8xf32>, tensor<4x8xf32>, tensor<8xf32>) -> tensor<4x8xf32>
  // CHECK: return %[[N]], %[[S]]
  %e = graph.exp %x : (tensor<4x8xf32>) -> tensor<4x8xf32>
  %mm = graph.matmul %e, %w : (tensor<4x8xf32>, tensor<8x8xf32>) -> tensor<4x8xf32>
  %a = graph.add %e, %mm : (tensor<4x8xf32>, tensor<4x8xf32>) -> tensor<4x8xf32>
  %n = graph.neg %b : (tensor<8xf32>) -> tensor<8xf32>
  %s = graph.add %a, %n : (tensor<4x8xf32>, tensor<8xf32>) -> tensor<4x8xf32>
  return %n, %s : tensor<8xf32>, tensor<4x8xf32>
}
