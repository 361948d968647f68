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

// A micro-batched step: each gradient is added to its accumulator right
// after it is made (its buffer free early), not where the source put the
// sums (after the whole backward); and the once-per-step updates run in
// the order their sums are final: w2's (the later layer, summed first in
// the backward) before w1's.
// CHECK-LABEL: func.func @accumulate
// CHECK: %[[G2:.*]] = graph.matmul %arg0, %arg1
// CHECK-NEXT: %[[S2:.*]] = graph.add %[[A2:.*]], %[[G2]]
// CHECK-NEXT: %[[G1:.*]] = graph.matmul %arg1, %arg1
// CHECK-NEXT: %[[S1:.*]] = graph.add %{{.*}}, %[[G1]]
// CHECK-NEXT: graph.sub %{{.*}}, %[[S2]] {dtc.once_per_step}
// CHECK-NEXT: graph.sub %{{.*}}, %[[S1]] {dtc.once_per_step}
func.func @accumulate(%x: tensor<4x4xf32>, %d: tensor<4x4xf32>) -> (tensor<4x4xf32>, tensor<4x4xf32>, tensor<4x4xf32>, tensor<4x4xf32>) {
  %w1 = graph.parameter "w1" : tensor<4x4xf32>
  %w2 = graph.parameter "w2" : tensor<4x4xf32>
  %a1 = graph.parameter "w1.grad_accumulator" {dtc.accumulator, dtc.zeros} : tensor<4x4xf32>
  %a2 = graph.parameter "w2.grad_accumulator" {dtc.accumulator, dtc.zeros} : tensor<4x4xf32>
  %g2 = graph.matmul %x, %d : (tensor<4x4xf32>, tensor<4x4xf32>) -> tensor<4x4xf32>
  %g1 = graph.matmul %d, %d : (tensor<4x4xf32>, tensor<4x4xf32>) -> tensor<4x4xf32>
  %s1 = graph.add %a1, %g1 : (tensor<4x4xf32>, tensor<4x4xf32>) -> tensor<4x4xf32>
  %s2 = graph.add %a2, %g2 : (tensor<4x4xf32>, tensor<4x4xf32>) -> tensor<4x4xf32>
  %u1 = graph.sub %w1, %s1 {dtc.once_per_step} : (tensor<4x4xf32>, tensor<4x4xf32>) -> tensor<4x4xf32>
  %u2 = graph.sub %w2, %s2 {dtc.once_per_step} : (tensor<4x4xf32>, tensor<4x4xf32>) -> tensor<4x4xf32>
  return %s1, %s2, %u1, %u2 : tensor<4x4xf32>, tensor<4x4xf32>, tensor<4x4xf32>, tensor<4x4xf32>
}
