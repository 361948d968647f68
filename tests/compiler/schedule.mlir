// RUN: %dtc-opt %s --pass-pipeline='builtin.module(func.func(dtc-schedule))' | FileCheck %s

// Two independent branches that each blow a small input up to a large
// value and reduce it again. In source order both large values are alive
// at once; the memory-aware order finishes one branch before starting the
// other.
// CHECK-LABEL: func.func @branches
// CHECK-SAME: dtc.schedule = {memory_peak_bytes = 16896 : i64, order = "memory", source_peak_bytes = 33024 : i64}
// CHECK: graph.parameter "w"
// CHECK: %[[A:.*]] = graph.broadcast %arg0
// CHECK-NEXT: %[[RA:.*]] = graph.reduce_sum %[[A]]
// CHECK-NEXT: %[[B:.*]] = graph.broadcast %arg1
// CHECK-NEXT: %[[RB:.*]] = graph.reduce_sum %[[B]]
// CHECK-NEXT: graph.add %[[RA]], %[[RB]]
func.func @branches(%x: tensor<1x64xf32>, %y: tensor<1x64xf32>) -> tensor<1x64xf32> {
  %a = graph.broadcast %x {shape = array<i64: 64, 64>} : (tensor<1x64xf32>) -> tensor<64x64xf32>
  %b = graph.broadcast %y {shape = array<i64: 64, 64>} : (tensor<1x64xf32>) -> tensor<64x64xf32>
  %w = graph.parameter "w" : tensor<1x64xf32>
  %ra = graph.reduce_sum %a {axes = array<i64: 0>} : (tensor<64x64xf32>) -> tensor<1x64xf32>
  %rb = graph.reduce_sum %b {axes = array<i64: 0>} : (tensor<64x64xf32>) -> tensor<1x64xf32>
  %s = graph.add %ra, %rb : (tensor<1x64xf32>, tensor<1x64xf32>) -> tensor<1x64xf32>
  %o = graph.add %s, %w : (tensor<1x64xf32>, tensor<1x64xf32>) -> tensor<1x64xf32>
  return %o : tensor<1x64xf32>
}

// When the greedy order is no better, the source order is kept.
// CHECK-LABEL: func.func @chain
// CHECK-SAME: order = "source"
// CHECK: graph.exp
// CHECK-NEXT: graph.neg
func.func @chain(%x: tensor<8xf32>) -> tensor<8xf32> {
  %e = graph.exp %x : (tensor<8xf32>) -> tensor<8xf32>
  %n = graph.neg %e : (tensor<8xf32>) -> tensor<8xf32>
  return %n : tensor<8xf32>
}
