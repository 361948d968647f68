// RUN: %dtc-opt %s --pass-pipeline='builtin.module(func.func(dtc-assign-buffers))' | FileCheck %s

// Parameters come first (64-byte aligned); then values are placed largest
// first at the lowest offset free during their lifetime: %b reuses the
// bytes of %x (dead after %a), and a reshape shares its operand's bytes.
// CHECK-LABEL: func.func @chain
// CHECK-SAME: (%arg0: tensor<16x16xf32> {dtc.offset = 1088 : i64})
// CHECK-SAME: dtc.arena_bytes = 3136 : i64
// CHECK-SAME: dtc.parameter_bytes = 1088 : i64, dtc.unshared_bytes = 4160 : i64
func.func @chain(%x: tensor<16x16xf32>) -> tensor<256xf32> {
  // CHECK: graph.parameter "w" {dtc.offsets = array<i64: 0>}
  // CHECK: graph.parameter "bias" {dtc.offsets = array<i64: 1024>}
  // CHECK: graph.matmul %arg0, %0 {dtc.offsets = array<i64: 2112>}
  // CHECK: graph.add {{.*}} {dtc.offsets = array<i64: 1088>}
  // CHECK: graph.reshape {{.*}} {dtc.offsets = array<i64: 1088>}
  %w = graph.parameter "w" : tensor<16x16xf32>
  %bias = graph.parameter "bias" : tensor<16xf32>
  %a = graph.matmul %x, %w : (tensor<16x16xf32>, tensor<16x16xf32>) -> tensor<16x16xf32>
  %b = graph.add %a, %bias : (tensor<16x16xf32>, tensor<16xf32>) -> tensor<16x16xf32>
  %r = graph.reshape %b : (tensor<16x16xf32>) -> tensor<256xf32>
  return %r : tensor<256xf32>
}

// A value read through a view stays alive until the view's last reader:
// %e's bytes are not reused by %n while %v (a view of %e) is still read.
// CHECK-LABEL: func.func @view_lifetime
// CHECK: graph.exp {{.*}} {dtc.offsets = array<i64: [[E:[0-9]+]]>}
// CHECK: graph.reshape {{.*}} {dtc.offsets = array<i64: [[E]]>}
// CHECK: graph.neg {{.*}} {dtc.offsets = array<i64: [[N:[0-9]+]]>}
// CHECK-NOT: array<i64: [[E]]>
// CHECK: graph.add
func.func @view_lifetime(%x: tensor<4x4xf32>) -> tensor<16xf32> {
  %e = graph.exp %x : (tensor<4x4xf32>) -> tensor<4x4xf32>
  %v = graph.reshape %e : (tensor<4x4xf32>) -> tensor<16xf32>
  %n = graph.neg %x : (tensor<4x4xf32>) -> tensor<4x4xf32>
  %m = graph.reshape %n : (tensor<4x4xf32>) -> tensor<16xf32>
  %s = graph.add %v, %m : (tensor<16xf32>, tensor<16xf32>) -> tensor<16xf32>
  return %s : tensor<16xf32>
}

// A training step's new parameter values take their parameter's bytes when
// nothing reads the parameter after them: %wn (made by the elementwise op
// that reads %w last) and %mn do; %vn does not, as %v is read after it.
// CHECK-LABEL: func.func @updates
// CHECK-SAME: dtc.updates_in_place = 2 : i64
func.func @updates(%g: tensor<16xf32>) -> (tensor<16xf32> {dtc.updates = "m"}, tensor<16xf32> {dtc.updates = "v"}, tensor<16xf32> {dtc.updates = "w"}, tensor<16xf32>) {
  // CHECK: graph.parameter "w" {dtc.offsets = array<i64: 0>}
  // CHECK: graph.parameter "m" {dtc.offsets = array<i64: 64>}
  // CHECK: graph.parameter "v" {dtc.offsets = array<i64: 128>}
  %w = graph.parameter "w" : tensor<16xf32>
  %m = graph.parameter "m" : tensor<16xf32>
  %v = graph.parameter "v" : tensor<16xf32>
  // CHECK: graph.add {{.*}} {dtc.offsets = array<i64: 64>}
  %mn = graph.add %m, %g : (tensor<16xf32>, tensor<16xf32>) -> tensor<16xf32>
  // CHECK: graph.mul {{.*}} {dtc.offsets = array<i64: [[VN:[0-9]+]]>}
  %vn = graph.mul %g, %g : (tensor<16xf32>, tensor<16xf32>) -> tensor<16xf32>
  // CHECK: graph.sub {{.*}} {dtc.offsets = array<i64: 0>}
  %wn = graph.sub %w, %mn : (tensor<16xf32>, tensor<16xf32>) -> tensor<16xf32>
  %late = graph.add %v, %wn : (tensor<16xf32>, tensor<16xf32>) -> tensor<16xf32>
  return %mn, %vn, %wn, %late : tensor<16xf32>, tensor<16xf32>, tensor<16xf32>, tensor<16xf32>
}

// Memory by kind: weights, optimizer state (zero-initialised parameters),
// and a training step's activations kept for backward: the values live
// across the op that computes the loss (result 0). Here %h (1 KiB, read by
// the backward %dh) is kept; %y dies at the loss.
// CHECK-LABEL: func.func @memory_kinds
// CHECK-SAME: dtc.activation_bytes = 1024 : i64
// CHECK-SAME: dtc.optimizer_state_bytes = 1024 : i64
// CHECK-SAME: dtc.weight_bytes = 1024 : i64
func.func @memory_kinds(%x: tensor<16x16xf32>) -> (tensor<f32>, tensor<16x16xf32> {dtc.updates = "w"}, tensor<16x16xf32> {dtc.updates = "w.m"}) {
  %w = graph.parameter "w" : tensor<16x16xf32>
  %m = graph.parameter "w.m" {dtc.zeros} : tensor<16x16xf32>
  %h = graph.matmul %x, %w : (tensor<16x16xf32>, tensor<16x16xf32>) -> tensor<16x16xf32>
  %y = graph.exp %h : (tensor<16x16xf32>) -> tensor<16x16xf32>
  %loss = graph.reduce_sum %y {axes = array<i64: 0, 1>, keepdims = false} : (tensor<16x16xf32>) -> tensor<f32>
  %dh = graph.exp %h : (tensor<16x16xf32>) -> tensor<16x16xf32>
  %mn = graph.add %m, %dh : (tensor<16x16xf32>, tensor<16x16xf32>) -> tensor<16x16xf32>
  %wn = graph.sub %w, %mn : (tensor<16x16xf32>, tensor<16x16xf32>) -> tensor<16x16xf32>
  return %loss, %wn, %mn : tensor<f32>, tensor<16x16xf32>, tensor<16x16xf32>
}
