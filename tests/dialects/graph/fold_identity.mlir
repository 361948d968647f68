// Ops that do nothing fold to their input under -canonicalize.
// RUN: %dtc-opt %s -canonicalize | FileCheck %s

// CHECK-LABEL: func.func @identities
// CHECK-SAME: (%[[X:.*]]: tensor<2x3xf32>, %[[I:.*]]: tensor<2x3xi64>)
// CHECK-NOT: graph.
// CHECK: return %[[X]], %[[X]], %[[X]], %[[X]], %[[X]], %[[I]]
func.func @identities(%x: tensor<2x3xf32>, %i: tensor<2x3xi64>) -> (tensor<2x3xf32>, tensor<2x3xf32>, tensor<2x3xf32>, tensor<2x3xf32>, tensor<2x3xf32>, tensor<2x3xi64>) {
  %0 = graph.reshape %x : (tensor<2x3xf32>) -> tensor<2x3xf32>
  %1 = graph.transpose %x {perm = array<i64: 0, 1>} : (tensor<2x3xf32>) -> tensor<2x3xf32>
  %2 = graph.broadcast %x {shape = array<i64: 3>} : (tensor<2x3xf32>) -> tensor<2x3xf32>
  %3 = graph.slice %x {offsets = array<i64: 0, 0>, sizes = array<i64: 2, 3>, strides = array<i64: 1, 1>} : (tensor<2x3xf32>) -> tensor<2x3xf32>
  %4 = graph.concat %x {axis = 1 : i64} : (tensor<2x3xf32>) -> tensor<2x3xf32>
  %5 = graph.cast %i : (tensor<2x3xi64>) -> tensor<2x3xi64>
  return %0, %1, %2, %3, %4, %5 : tensor<2x3xf32>, tensor<2x3xf32>, tensor<2x3xf32>, tensor<2x3xf32>, tensor<2x3xf32>, tensor<2x3xi64>
}

// A reversing slice of the whole tensor is not the identity.
// CHECK-LABEL: func.func @reverse
// CHECK: graph.slice
func.func @reverse(%x: tensor<4xf32>) -> tensor<4xf32> {
  %0 = graph.slice %x {offsets = array<i64: 3>, sizes = array<i64: 4>, strides = array<i64: -1>} : (tensor<4xf32>) -> tensor<4xf32>
  return %0 : tensor<4xf32>
}

// Unused constants are removed.
// CHECK-LABEL: func.func @dead
// CHECK-NOT: graph.constant
// CHECK: return
func.func @dead() {
  %0 = graph.constant dense<[1, 2]> : tensor<2xi64>
  return
}

// Transposes compose; a transpose that moves only size-1 dims is a
// reshape; reshapes compose.
// CHECK-LABEL: func.func @data_movement_chains
// CHECK-SAME: (%[[X:.*]]: tensor<2x3x4xf32>, %[[Y:.*]]: tensor<2x1x3xf32>)
// CHECK: %[[T:.*]] = graph.transpose %[[X]] {perm = array<i64: 2, 0, 1>} : (tensor<2x3x4xf32>) -> tensor<4x2x3xf32>
// CHECK: %[[R:.*]] = graph.reshape %[[Y]] : (tensor<2x1x3xf32>) -> tensor<6xf32>
// CHECK: return %[[X]], %[[T]], %[[R]]
func.func @data_movement_chains(%x: tensor<2x3x4xf32>, %y: tensor<2x1x3xf32>) -> (tensor<2x3x4xf32>, tensor<4x2x3xf32>, tensor<6xf32>) {
  %0 = graph.transpose %x {perm = array<i64: 1, 2, 0>} : (tensor<2x3x4xf32>) -> tensor<3x4x2xf32>
  %1 = graph.transpose %0 {perm = array<i64: 2, 0, 1>} : (tensor<3x4x2xf32>) -> tensor<2x3x4xf32>
  %2 = graph.transpose %0 {perm = array<i64: 1, 2, 0>} : (tensor<3x4x2xf32>) -> tensor<4x2x3xf32>
  %3 = graph.transpose %y {perm = array<i64: 1, 0, 2>} : (tensor<2x1x3xf32>) -> tensor<1x2x3xf32>
  %4 = graph.reshape %3 : (tensor<1x2x3xf32>) -> tensor<6xf32>
  return %1, %2, %4 : tensor<2x3x4xf32>, tensor<4x2x3xf32>, tensor<6xf32>
}

// A transpose after a reshape of the leading dims it leaves in place meets
// the transpose before the reshape: k^T of a grouped-query attention
// ([B*H, D, S]), heads split out ([B, H, D, S]) and transposed back is k
// reshaped. Without a transpose to meet, or when the reshape regroups the
// dims the transpose moves, nothing changes.
// CHECK-LABEL: func.func @transpose_past_a_reshape
// CHECK-SAME: (%[[K:.*]]: tensor<8x16x4xf32>, %[[Z:.*]]: tensor<8x4x16xf32>, %[[W:.*]]: tensor<8x16x4xf32>)
// CHECK: %[[A:.*]] = graph.reshape %[[K]] : (tensor<8x16x4xf32>) -> tensor<2x4x16x4xf32>
// CHECK: %[[B:.*]] = graph.reshape %[[Z]] : (tensor<8x4x16xf32>) -> tensor<2x4x4x16xf32>
// CHECK: %[[C:.*]] = graph.transpose %[[B]] {perm = array<i64: 0, 1, 3, 2>}
// CHECK: %[[D:.*]] = graph.transpose %[[W]] {perm = array<i64: 0, 2, 1>}
// CHECK: %[[E:.*]] = graph.reshape %[[D]] : (tensor<8x4x16xf32>) -> tensor<8x2x32xf32>
// CHECK: %[[F:.*]] = graph.transpose %[[E]] {perm = array<i64: 0, 2, 1>}
// CHECK: return %[[A]], %[[C]], %[[F]]
func.func @transpose_past_a_reshape(%k: tensor<8x16x4xf32>, %z: tensor<8x4x16xf32>, %w: tensor<8x16x4xf32>) -> (tensor<2x4x16x4xf32>, tensor<2x4x16x4xf32>, tensor<8x32x2xf32>) {
  %kt = graph.transpose %k {perm = array<i64: 0, 2, 1>} : (tensor<8x16x4xf32>) -> tensor<8x4x16xf32>
  %heads = graph.reshape %kt : (tensor<8x4x16xf32>) -> tensor<2x4x4x16xf32>
  %back = graph.transpose %heads {perm = array<i64: 0, 1, 3, 2>} : (tensor<2x4x4x16xf32>) -> tensor<2x4x16x4xf32>
  %zh = graph.reshape %z : (tensor<8x4x16xf32>) -> tensor<2x4x4x16xf32>
  %zb = graph.transpose %zh {perm = array<i64: 0, 1, 3, 2>} : (tensor<2x4x4x16xf32>) -> tensor<2x4x16x4xf32>
  %wt = graph.transpose %w {perm = array<i64: 0, 2, 1>} : (tensor<8x16x4xf32>) -> tensor<8x4x16xf32>
  %wr = graph.reshape %wt : (tensor<8x4x16xf32>) -> tensor<8x2x32xf32>
  %wb = graph.transpose %wr {perm = array<i64: 0, 2, 1>} : (tensor<8x2x32xf32>) -> tensor<8x32x2xf32>
  return %back, %zb, %wb : tensor<2x4x16x4xf32>, tensor<2x4x16x4xf32>, tensor<8x32x2xf32>
}
