// RUN: %dtc-opt %s --dtc-spmd-partition --split-input-file --verify-diagnostics | FileCheck %s

// Data parallel: the batch split over the mesh flows through the forward;
// the mean loss is the all-reduced sum of each rank's mean divided by the
// ranks, the weight gradient (batch is its matmul's reduction) is all-reduced.
// CHECK-LABEL: func.func @main
// CHECK-SAME: (%arg0: tensor<2x16xf32> {dtc.sharding = #graph.sharding<[0], []>}, %arg1: tensor<2x4xf32>
// CHECK: graph.parameter "w" : tensor<16x4xf32>
// CHECK: graph.matmul %arg0, %0 {dtc.sharding = #graph.sharding<[0], []>} : (tensor<2x16xf32>, tensor<16x4xf32>) -> tensor<2x4xf32>
// CHECK: %[[MEAN:.*]] = graph.reduce_mean {{.*}} -> tensor<f32>
// CHECK: %[[FOUR:.*]] = graph.constant dense<4.000000e+00> : tensor<f32>
// CHECK: %[[SHARE:.*]] = graph.div %[[MEAN]], %[[FOUR]]
// CHECK: %[[LOSS:.*]] = mesh.all_reduce %[[SHARE]] on @mesh mesh_axes = [0] : tensor<f32> -> tensor<f32>
// CHECK: %[[GW:.*]] = graph.matmul %arg0, {{.*}} {transpose_lhs = true} : (tensor<2x16xf32>, tensor<2x4xf32>) -> tensor<16x4xf32>
// CHECK: %[[GWS:.*]] = mesh.all_reduce %[[GW]] on @mesh mesh_axes = [0] : tensor<16x4xf32> -> tensor<16x4xf32>
// CHECK: return %[[LOSS]], %[[GWS]]
module {
  mesh.mesh @mesh(shape = 4)
  func.func @main(%x: tensor<8x16xf32> {dtc.sharding = #graph.sharding<[0], []>}, %y: tensor<8x4xf32> {dtc.sharding = #graph.sharding<[0], []>}) -> (tensor<f32>, tensor<16x4xf32>) {
    %w = graph.parameter "w" : tensor<16x4xf32>
    %h = graph.matmul %x, %w : (tensor<8x16xf32>, tensor<16x4xf32>) -> tensor<8x4xf32>
    %d = graph.sub %h, %y : (tensor<8x4xf32>, tensor<8x4xf32>) -> tensor<8x4xf32>
    %sq = graph.mul %d, %d : (tensor<8x4xf32>, tensor<8x4xf32>) -> tensor<8x4xf32>
    %loss = graph.reduce_mean %sq {axes = array<i64: 0, 1>, keepdims = false} : (tensor<8x4xf32>) -> tensor<f32>
    %gw = graph.matmul %x, %d {transpose_lhs = true} : (tensor<8x16xf32>, tensor<8x4xf32>) -> tensor<16x4xf32>
    return %loss, %gw : tensor<f32>, tensor<16x4xf32>
  }
}

// -----

// A 2-D mesh; a softmax cannot split its axis, so the columns split over
// axis 1 are gathered first; rows stay split over axis 0 until the result,
// which every rank holds whole. A splat constant is cut locally; a
// reshape carries the row split into its merged dim. Every split value
// records its split (dtc.sharding), for dtc plan.
// CHECK-LABEL: func.func @main
// CHECK-SAME: (%arg0: tensor<4x3x8xf32>
// CHECK: %[[G:.*]] = mesh.all_gather %arg0 on @mesh mesh_axes = [1] gather_axis = 2 {dtc.sharding = #graph.sharding<[0], [], []>} : tensor<4x3x8xf32> -> tensor<4x3x16xf32>
// CHECK: %[[S:.*]] = graph.softmax %[[G]] {axis = 2 : i64, dtc.sharding = #graph.sharding<[0], [], []>} : (tensor<4x3x16xf32>) -> tensor<4x3x16xf32>
// CHECK: graph.constant {dtc.sharding = #graph.sharding<[0], [], []>} dense<2.000000e+00> : tensor<4x3x16xf32>
// CHECK: %[[R:.*]] = graph.reshape {{.*}} : (tensor<4x3x16xf32>) -> tensor<12x16xf32>
// CHECK: mesh.all_gather %[[R]] on @mesh mesh_axes = [0] gather_axis = 0 : tensor<12x16xf32> -> tensor<24x16xf32>
module {
  mesh.mesh @mesh(shape = 2x2)
  func.func @main(%x: tensor<8x3x16xf32> {dtc.sharding = #graph.sharding<[0], [], [1]>}) -> tensor<24x16xf32> {
    %s = graph.softmax %x {axis = 2 : i64} : (tensor<8x3x16xf32>) -> tensor<8x3x16xf32>
    %two = graph.constant dense<2.0> : tensor<8x3x16xf32>
    %m = graph.mul %s, %two : (tensor<8x3x16xf32>, tensor<8x3x16xf32>) -> tensor<8x3x16xf32>
    %r = graph.reshape %m : (tensor<8x3x16xf32>) -> tensor<24x16xf32>
    return %r : tensor<24x16xf32>
  }
}

// -----

module {
  mesh.mesh @mesh(shape = 4)
  // expected-error @+1 {{dim 0 of size 6 cannot be split into 4 equal parts}}
  func.func @main(%x: tensor<6x2xf32> {dtc.sharding = #graph.sharding<[0], []>}) -> tensor<6x2xf32> {
    return %x : tensor<6x2xf32>
  }
}

// -----

// Splits decided by the search (`dtc.split`, per factor of the op's rule,
// [m, n, k] for a matmul): Megatron's MLP. The first matmul splits its columns (n) over axis 0, so
// each rank slices its block of the whole weight; the second splits its
// reduction (k), leaving partial sums. Its reader wants the rows split
// (sequence parallel), so the all-reduce and the slice become one
// reduce-scatter. A gathered-then-sliced value is the value itself.
// CHECK-LABEL: func.func @main
// CHECK-SAME: (%arg0: tensor<8x16xf32>) -> tensor<8x16xf32>
// CHECK: %[[W1:.*]] = graph.parameter "w1" : tensor<16x32xf32>
// CHECK: %[[W1S:.*]] = mesh.all_slice %[[W1]] on @mesh mesh_axes = [0] slice_axis = 1 {dtc.sharding = #graph.sharding<[], [0]>} : tensor<16x32xf32> -> tensor<16x8xf32>
// CHECK: %[[H:.*]] = graph.matmul %arg0, %[[W1S]] {dtc.sharding = #graph.sharding<[], [0]>} : (tensor<8x16xf32>, tensor<16x8xf32>) -> tensor<8x8xf32>
// CHECK: %[[A:.*]] = graph.relu %[[H]] {dtc.sharding = #graph.sharding<[], [0]>} : (tensor<8x8xf32>) -> tensor<8x8xf32>
// CHECK: %[[W2:.*]] = graph.parameter "w2" {dtc.sharding = #graph.sharding<[0], []>} : tensor<8x16xf32>
// CHECK: %[[P:.*]] = graph.matmul %[[A]], %[[W2]] : (tensor<8x8xf32>, tensor<8x16xf32>) -> tensor<8x16xf32>
// CHECK: %[[RS:.*]] = mesh.reduce_scatter %[[P]] on @mesh mesh_axes = [0] scatter_axis = 0 {dtc.sharding = #graph.sharding<[0], []>} : tensor<8x16xf32> -> tensor<2x16xf32>
// CHECK: %[[T:.*]] = graph.tanh %[[RS]] {dtc.sharding = #graph.sharding<[0], []>} : (tensor<2x16xf32>) -> tensor<2x16xf32>
// CHECK: %[[G:.*]] = mesh.all_gather %[[T]] on @mesh mesh_axes = [0] gather_axis = 0 : tensor<2x16xf32> -> tensor<8x16xf32>
// CHECK: return %[[G]]
module {
  mesh.mesh @mesh(shape = 4)
  func.func @main(%x: tensor<8x16xf32>) -> tensor<8x16xf32> {
    %w1 = graph.parameter "w1" : tensor<16x32xf32>
    %h = graph.matmul %x, %w1 {dtc.split = #graph.split<[], [0], []>} : (tensor<8x16xf32>, tensor<16x32xf32>) -> tensor<8x32xf32>
    %a = graph.relu %h : (tensor<8x32xf32>) -> tensor<8x32xf32>
    %w2 = graph.parameter "w2" {dtc.split = #graph.split<[0], []>} : tensor<32x16xf32>
    %p = graph.matmul %a, %w2 {dtc.split = #graph.split<[], [], [0]>} : (tensor<8x32xf32>, tensor<32x16xf32>) -> tensor<8x16xf32>
    %t = graph.tanh %p {dtc.split = #graph.split<[0], []>} : (tensor<8x16xf32>) -> tensor<8x16xf32>
    return %t : tensor<8x16xf32>
  }
}

// -----

// A bf16 bias gradient (summed over batch and sequence to 1x1xN, reshaped
// to N, cast to f32) added to its accumulator's shard (ZeRO-2): the
// reshape moves before the reduction and the cast after the slice, so the
// all-reduce and the slice fuse into one reduce-scatter in bf16 and only
// the kept block is cast.
// CHECK-LABEL: func.func @main
// CHECK: %[[ACC:.*]] = graph.parameter "b.acc" {dtc.sharding = #graph.sharding<[0]>} : tensor<4xf32>
// CHECK: %[[S:.*]] = graph.reduce_sum %arg0
// CHECK: %[[R:.*]] = graph.reshape %[[S]] {dtc.weight_gradient} : (tensor<1x1x16xbf16>) -> tensor<16xbf16>
// CHECK: %[[RS:.*]] = mesh.reduce_scatter %[[R]] on @mesh mesh_axes = [0] scatter_axis = 0 {dtc.gradient_reduction, dtc.sharding = #graph.sharding<[0]>} : tensor<16xbf16> -> tensor<4xbf16>
// CHECK: %[[C:.*]] = graph.cast %[[RS]] {dtc.sharding = #graph.sharding<[0]>, dtc.weight_gradient} : (tensor<4xbf16>) -> tensor<4xf32>
// CHECK-NEXT: %[[N:.*]] = graph.add %[[ACC]], %[[C]]
// CHECK-NEXT: return %[[N]]
module {
  mesh.mesh @mesh(shape = 4)
  func.func @main(%x: tensor<8x2x16xbf16> {dtc.sharding = #graph.sharding<[0], [], []>}) -> (tensor<16xf32> {dtc.updates = "b.acc"}) {
    %acc = graph.parameter "b.acc" {dtc.split = #graph.split<[0]>} : tensor<16xf32>
    %s = graph.reduce_sum %x {axes = array<i64: 0, 1>, dtc.weight_gradient} : (tensor<8x2x16xbf16>) -> tensor<1x1x16xbf16>
    %r = graph.reshape %s {dtc.weight_gradient} : (tensor<1x1x16xbf16>) -> tensor<16xbf16>
    %c = graph.cast %r {dtc.weight_gradient} : (tensor<16xbf16>) -> tensor<16xf32>
    %n = graph.add %acc, %c {dtc.split = #graph.split<[0]>} : (tensor<16xf32>, tensor<16xf32>) -> tensor<16xf32>
    return %n : tensor<16xf32>
  }
}

// -----

module {
  mesh.mesh @mesh(shape = 4)
  func.func @main(%x: tensor<8x16xf32>) -> tensor<8x16xf32> {
    // expected-error @+1 {{'dtc.split' names 1 factors; the op's sharding rule has 2}}
    %t = graph.tanh %x {dtc.split = #graph.split<[0]>} : (tensor<8x16xf32>) -> tensor<8x16xf32>
    return %t : tensor<8x16xf32>
  }
}

// -----

// A split moved to another dim over the same axes: one all-to-all (each
// rank sends a part of its rows to each), not an all-gather and a slice.
// CHECK-LABEL: func.func @main
// CHECK-SAME: (%arg0: tensor<2x16xf32> {dtc.sharding = #graph.sharding<[0], []>})
// CHECK: %[[T:.*]] = mesh.all_to_all %arg0 on @mesh mesh_axes = [0] split_axis = 1 concat_axis = 0 {dtc.sharding = #graph.sharding<[], [0]>} : tensor<2x16xf32> -> tensor<8x4xf32>
// CHECK: graph.tanh %[[T]] {dtc.sharding = #graph.sharding<[], [0]>} : (tensor<8x4xf32>) -> tensor<8x4xf32>
module {
  mesh.mesh @mesh(shape = 4)
  func.func @main(%x: tensor<8x16xf32> {dtc.sharding = #graph.sharding<[0], []>}) -> tensor<8x16xf32> {
    %t = graph.tanh %x {dtc.split = #graph.split<[], [0]>} : (tensor<8x16xf32>) -> tensor<8x16xf32>
    return %t : tensor<8x16xf32>
  }
}

// -----

// Attention split over heads (dim 1): each rank computes its heads. A
// padding bias [B, 1, 1, Sk] broadcasts over heads and stays whole on every
// rank; a bias per head [1, H, Sq, Sk] is cut to the rank's heads. Each
// result records its split (dtc plan shows it).
// CHECK-LABEL: func.func @main
// CHECK: graph.attention %arg0, %arg1, %arg2, %arg3 {dtc.result_shardings = [#graph.sharding<[], [0], [], []>, #graph.sharding<[], [0], []>], scale = 1.000000e+00 : f64} : (tensor<2x2x8x16xf32>, tensor<2x2x8x16xf32>, tensor<2x2x8x16xf32>, tensor<2x1x1x8xf32>) -> (tensor<2x2x8x16xf32>, tensor<2x2x8xf32>)
// CHECK: %[[CUT:.*]] = mesh.all_slice %arg4 on @mesh mesh_axes = [0] slice_axis = 1
// CHECK: graph.attention %arg0, %arg1, %arg2, %[[CUT]] {dtc.result_shardings = {{.*}}, scale = 1.000000e+00 : f64} : (tensor<2x2x8x16xf32>, tensor<2x2x8x16xf32>, tensor<2x2x8x16xf32>, tensor<1x2x8x8xf32>)
module {
  mesh.mesh @mesh(shape = 2)
  func.func @main(%q: tensor<2x4x8x16xf32> {dtc.sharding = #graph.sharding<[], [0], [], []>},
                  %k: tensor<2x4x8x16xf32> {dtc.sharding = #graph.sharding<[], [0], [], []>},
                  %v: tensor<2x4x8x16xf32> {dtc.sharding = #graph.sharding<[], [0], [], []>},
                  %pad: tensor<2x1x1x8xf32>, %heads: tensor<1x4x8x8xf32>)
      -> (tensor<2x4x8x16xf32> {dtc.sharding = #graph.sharding<[], [0], [], []>},
          tensor<2x4x8x16xf32> {dtc.sharding = #graph.sharding<[], [0], [], []>}) {
    %o, %l = graph.attention %q, %k, %v, %pad {scale = 1.0 : f64} : (tensor<2x4x8x16xf32>, tensor<2x4x8x16xf32>, tensor<2x4x8x16xf32>, tensor<2x1x1x8xf32>) -> (tensor<2x4x8x16xf32>, tensor<2x4x8xf32>)
    %o2, %l2 = graph.attention %q, %k, %v, %heads {scale = 1.0 : f64} : (tensor<2x4x8x16xf32>, tensor<2x4x8x16xf32>, tensor<2x4x8x16xf32>, tensor<1x4x8x8xf32>) -> (tensor<2x4x8x16xf32>, tensor<2x4x8xf32>)
    return %o, %o2 : tensor<2x4x8x16xf32>, tensor<2x4x8x16xf32>
  }
}

// -----

// A packed attention ([B, S, 3, H, D], q, k and v one value) split over
// heads: the value is cut once for its three operands, and the backward
// reads that cut again; the 3 and the sequence stay whole, and the
// backward's one gradient is cut as it is.
// CHECK-LABEL: func.func @main
// CHECK: %[[CUT:.*]] = mesh.all_slice %arg0 on @mesh mesh_axes = [0] slice_axis = 3 {{.*}}: tensor<2x8x3x4x16xf32> -> tensor<2x8x3x2x16xf32>
// CHECK-NEXT: graph.attention %[[CUT]], %[[CUT]], %[[CUT]] {bshd, dtc.result_shardings = [#graph.sharding<[], [], [0], []>, #graph.sharding<[], [0], []>], packed, scale = 2.500000e-01 : f64} : (tensor<2x8x3x2x16xf32>, tensor<2x8x3x2x16xf32>, tensor<2x8x3x2x16xf32>) -> (tensor<2x8x2x16xf32>, tensor<2x2x8xf32>)
// CHECK-NEXT: graph.attention_backward %[[CUT]], %[[CUT]], %[[CUT]], {{.*}} -> tensor<2x8x3x2x16xf32>
module {
  mesh.mesh @mesh(shape = 2)
  func.func @main(%qkv: tensor<2x8x3x4x16xf32>, %g: tensor<2x8x4x16xf32> {dtc.sharding = #graph.sharding<[], [], [0], []>})
      -> (tensor<2x8x3x4x16xf32> {dtc.sharding = #graph.sharding<[], [], [], [0], []>}) {
    %o, %l = graph.attention %qkv, %qkv, %qkv {bshd, packed, scale = 0.25 : f64, dtc.split = #graph.split<[], [0], [], [], []>} : (tensor<2x8x3x4x16xf32>, tensor<2x8x3x4x16xf32>, tensor<2x8x3x4x16xf32>) -> (tensor<2x8x4x16xf32>, tensor<2x4x8xf32>)
    %d = graph.attention_backward %qkv, %qkv, %qkv, %o, %l, %g {bshd, packed, scale = 0.25 : f64, dtc.split = #graph.split<[], [0], [], [], []>} : (tensor<2x8x3x4x16xf32>, tensor<2x8x3x4x16xf32>, tensor<2x8x3x4x16xf32>, tensor<2x8x4x16xf32>, tensor<2x4x8xf32>, tensor<2x8x4x16xf32>) -> tensor<2x8x3x4x16xf32>
    return %d : tensor<2x8x3x4x16xf32>
  }
}

// -----

// Interleaved ([B, S, H, 3, D], each head's q, k and v side by side) split
// over heads: a contiguous cut of the value's H, the 3 whole.
// CHECK-LABEL: func.func @main
// CHECK: %[[CUT:.*]] = mesh.all_slice %arg0 on @mesh mesh_axes = [0] slice_axis = 2 {{.*}}: tensor<2x8x4x3x16xf32> -> tensor<2x8x2x3x16xf32>
// CHECK-NEXT: graph.attention %[[CUT]], %[[CUT]], %[[CUT]] {bshd, dtc.result_shardings = [#graph.sharding<[], [], [0], []>, #graph.sharding<[], [0], []>], interleaved, packed, scale = 2.500000e-01 : f64} : (tensor<2x8x2x3x16xf32>, tensor<2x8x2x3x16xf32>, tensor<2x8x2x3x16xf32>) -> (tensor<2x8x2x16xf32>, tensor<2x2x8xf32>)
module {
  mesh.mesh @mesh(shape = 2)
  func.func @main(%qkv: tensor<2x8x4x3x16xf32>)
      -> (tensor<2x8x4x16xf32> {dtc.sharding = #graph.sharding<[], [], [0], []>}) {
    %o, %l = graph.attention %qkv, %qkv, %qkv {bshd, packed, interleaved, scale = 0.25 : f64, dtc.split = #graph.split<[], [0], [], [], []>} : (tensor<2x8x4x3x16xf32>, tensor<2x8x4x3x16xf32>, tensor<2x8x4x3x16xf32>) -> (tensor<2x8x4x16xf32>, tensor<2x4x8xf32>)
    return %o : tensor<2x8x4x16xf32>
  }
}

// -----

// Grouped-query attention (4 query heads on 2 key-value heads) split over
// the groups: each rank keeps 2 query heads and the 1 key-value head they
// read; the backward's key and value gradients are whole sums (a group's
// query heads are on one rank).
// CHECK-LABEL: func.func @main
// CHECK-DAG: %[[Q:.*]] = mesh.all_slice %arg0 on @mesh mesh_axes = [0] slice_axis = 1 {{.*}}: tensor<2x4x8x16xf32> -> tensor<2x2x8x16xf32>
// CHECK-DAG: %[[K:.*]] = mesh.all_slice %arg1 on @mesh mesh_axes = [0] slice_axis = 1 {{.*}}: tensor<2x2x8x16xf32> -> tensor<2x1x8x16xf32>
// CHECK-DAG: %[[V:.*]] = mesh.all_slice %arg2 on @mesh mesh_axes = [0] slice_axis = 1 {{.*}}: tensor<2x2x8x16xf32> -> tensor<2x1x8x16xf32>
// CHECK: graph.attention %[[Q]], %[[K]], %[[V]] {{.*}} : (tensor<2x2x8x16xf32>, tensor<2x1x8x16xf32>, tensor<2x1x8x16xf32>) -> (tensor<2x2x8x16xf32>, tensor<2x2x8xf32>)
// CHECK: graph.attention_backward %[[Q]], %[[K]], %[[V]], {{.*}} -> (tensor<2x2x8x16xf32>, tensor<2x1x8x16xf32>, tensor<2x1x8x16xf32>)
// CHECK-NOT: all_reduce
module {
  mesh.mesh @mesh(shape = 2)
  func.func @main(%q: tensor<2x4x8x16xf32>, %k: tensor<2x2x8x16xf32>, %v: tensor<2x2x8x16xf32>, %g: tensor<2x4x8x16xf32> {dtc.sharding = #graph.sharding<[], [0], [], []>})
      -> (tensor<2x2x8x16xf32> {dtc.sharding = #graph.sharding<[], [0], [], []>}) {
    %o, %l = graph.attention %q, %k, %v {scale = 0.25 : f64, dtc.split = #graph.split<[], [0], [], [], [], [], []>} : (tensor<2x4x8x16xf32>, tensor<2x2x8x16xf32>, tensor<2x2x8x16xf32>) -> (tensor<2x4x8x16xf32>, tensor<2x4x8xf32>)
    %dq, %dk, %dv = graph.attention_backward %q, %k, %v, %o, %l, %g {scale = 0.25 : f64, dtc.split = #graph.split<[], [0], [], [], [], [], []>} : (tensor<2x4x8x16xf32>, tensor<2x2x8x16xf32>, tensor<2x2x8x16xf32>, tensor<2x4x8x16xf32>, tensor<2x4x8xf32>, tensor<2x4x8x16xf32>) -> (tensor<2x4x8x16xf32>, tensor<2x2x8x16xf32>, tensor<2x2x8x16xf32>)
    return %dk : tensor<2x2x8x16xf32>
  }
}

// -----

// A whole value two ops read cut the same way is cut once (the cross-
// entropy's labels and its gradient's one-hot read one cut, so that the
// loss gradient fuses with the loss); cut another way, it is cut again.
// CHECK-LABEL: func.func @main
// CHECK: %[[CUT:.*]] = mesh.all_slice %arg0 on @mesh mesh_axes = [0] slice_axis = 0
// CHECK-NEXT: graph.relu %[[CUT]]
// CHECK-NEXT: graph.tanh %[[CUT]]
// CHECK-NEXT: %[[COLUMNS:.*]] = mesh.all_slice %arg0 on @mesh mesh_axes = [0] slice_axis = 1
// CHECK-NEXT: graph.exp %[[COLUMNS]]
module {
  mesh.mesh @mesh(shape = 2)
  func.func @main(%x: tensor<8x4xf32>)
      -> (tensor<8x4xf32> {dtc.sharding = #graph.sharding<[0], []>},
          tensor<8x4xf32> {dtc.sharding = #graph.sharding<[0], []>},
          tensor<8x4xf32> {dtc.sharding = #graph.sharding<[], [0]>}) {
    %r = graph.relu %x {dtc.split = #graph.split<[0], []>} : (tensor<8x4xf32>) -> tensor<8x4xf32>
    %t = graph.tanh %x {dtc.split = #graph.split<[0], []>} : (tensor<8x4xf32>) -> tensor<8x4xf32>
    %e = graph.exp %x {dtc.split = #graph.split<[], [0]>} : (tensor<8x4xf32>) -> tensor<8x4xf32>
    return %r, %t, %e : tensor<8x4xf32>, tensor<8x4xf32>, tensor<8x4xf32>
  }
}

// -----

// Cross-entropy with its classes split (Megatron's vocabulary-parallel
// loss): each rank's labels shifted to its block of classes (one in
// another block is no class: loss 0), the rows' log-sum-exps combined
// (max, then the sum of exps), the picked logits summed beside that sum;
// the loss is lse - x[label], 0 where the label is no class. No logits
// gathered.
// CHECK-LABEL: func.func @main
// CHECK-SAME: "partition: the loss's classes split across ranks
// CHECK: %[[X:.*]] = mesh.all_slice %arg0 on @mesh mesh_axes = [0] slice_axis = 1 {{.*}} -> tensor<4x4xf32>
// CHECK: %[[FIRSTS:.*]] = graph.constant dense<[0, 4]> : tensor<2xi64>
// CHECK: %[[FIRST:.*]] = mesh.all_slice %[[FIRSTS]] on @mesh mesh_axes = [0] slice_axis = 0 : tensor<2xi64> -> tensor<1xi64>
// CHECK: %[[SHIFTED:.*]] = graph.sub %arg1, %[[FIRST]]
// CHECK: %[[LOSSK:.*]], %[[LSEK:.*]] = graph.cross_entropy %[[X]], %[[SHIFTED]] : (tensor<4x4xf32>, tensor<4xi64>)
// CHECK: %[[ZERO:.*]] = graph.constant dense<0.000000e+00> : tensor<f32>
// CHECK: %[[M:.*]] = mesh.all_reduce %[[LSEK]] on @mesh mesh_axes = [0] reduction = <max>
// CHECK: %[[D:.*]] = graph.sub %[[LSEK]], %[[M]]
// CHECK: %[[E:.*]] = graph.exp %[[D]]
// CHECK: graph.greater_equal %[[SHIFTED]]
// CHECK: %[[BLOCK:.*]] = graph.constant dense<4> : tensor<i64>
// CHECK: graph.less %[[SHIFTED]], %[[BLOCK]]
// CHECK: %[[HERE:.*]] = graph.and
// CHECK: %[[MINE:.*]] = graph.sub %[[LOSSK]], %[[LSEK]]
// CHECK: %[[PART:.*]] = graph.where %[[HERE]], %[[MINE]], %[[ZERO]]
// The two sums side by side: one message once bucketed.
// CHECK-NEXT: %[[S:.*]] = mesh.all_reduce %[[E]] on @mesh mesh_axes = [0] : tensor<4xf32>
// CHECK-NEXT: %[[PICKED:.*]] = mesh.all_reduce %[[PART]] on @mesh mesh_axes = [0] : tensor<4xf32>
// CHECK: %[[LOGS:.*]] = graph.log %[[S]]
// CHECK: %[[LSE:.*]] = graph.add %[[M]], %[[LOGS]]
// CHECK: graph.greater_equal %arg1
// CHECK: %[[CLASSES:.*]] = graph.constant dense<8> : tensor<i64>
// CHECK: graph.less %arg1, %[[CLASSES]]
// CHECK: %[[VALID:.*]] = graph.and
// CHECK: %[[SUM:.*]] = graph.add %[[LSE]], %[[PICKED]]
// CHECK: %[[LOSS:.*]] = graph.where %[[VALID]], %[[SUM]], %[[ZERO]]
// CHECK: return %[[LOSS]], %[[LSE]]
module {
  mesh.mesh @mesh(shape = 2)
  func.func @main(%x: tensor<4x8xf32>, %y: tensor<4xi64>) -> (tensor<4xf32>, tensor<4xf32>) {
    %loss, %lse = graph.cross_entropy %x, %y {dtc.split = #graph.split<[], [0]>} : (tensor<4x8xf32>, tensor<4xi64>) -> (tensor<4xf32>, tensor<4xf32>)
    return %loss, %lse : tensor<4xf32>, tensor<4xf32>
  }
}

// -----

// A table split by rows (Megatron's vocabulary-parallel embedding): each
// rank's ids, negative ones counted from the end as a whole table's gather
// reads them, shifted to its block; the gather takes zeros for ids in
// another block (skip_outside) and the lookups add up; the scatter-add
// (its gradient) adds into each rank's rows alone. (A table of under 1024
// rows stays whole.)
// CHECK-LABEL: func.func @main
// CHECK-SAME: "partition: 2 gathers and scatter-adds over a block of a table's rows
// CHECK: %[[T:.*]] = mesh.all_slice %arg0 on @mesh mesh_axes = [0] slice_axis = 0 {{.*}} -> tensor<512x3xf32>
// CHECK: %[[NEG:.*]] = graph.less %arg1
// CHECK: %[[DIM:.*]] = graph.constant dense<1024> : tensor<i64>
// CHECK: %[[UP:.*]] = graph.add %arg1, %[[DIM]]
// CHECK: %[[IDS:.*]] = graph.where %[[NEG]], %[[UP]], %arg1
// CHECK: %[[FIRSTS:.*]] = graph.constant dense<[0, 512]> : tensor<2xi64>
// CHECK: %[[FIRST:.*]] = mesh.all_slice %[[FIRSTS]] on @mesh mesh_axes = [0] slice_axis = 0
// CHECK: %[[SHIFTED:.*]] = graph.sub %[[IDS]], %[[FIRST]]
// CHECK: %[[PART:.*]] = graph.gather %[[T]], %[[SHIFTED]] {axis = 0 : i64, skip_outside} : (tensor<512x3xf32>, tensor<4xi64>) -> tensor<4x3xf32>
// CHECK: %[[E:.*]] = mesh.all_reduce %[[PART]] on @mesh mesh_axes = [0] : tensor<4x3xf32>
// CHECK: %[[D:.*]] = graph.scatter_add %arg2, %{{.*}} {axis = 0 : i64, dtc.sharding = #graph.sharding<[0], []>, skip_outside} : (tensor<4x3xf32>, tensor<4xi64>) -> tensor<512x3xf32>
// CHECK: %[[WHOLE:.*]] = mesh.all_gather %[[D]] on @mesh mesh_axes = [0] gather_axis = 0
// CHECK: return %[[E]], %[[WHOLE]]
module {
  mesh.mesh @mesh(shape = 2)
  func.func @main(%t: tensor<1024x3xf32>, %ids: tensor<4xi64>, %g: tensor<4x3xf32>) -> (tensor<4x3xf32>, tensor<1024x3xf32>) {
    %e = graph.gather %t, %ids {axis = 0 : i64, dtc.split = #graph.split<[0], [], []>} : (tensor<1024x3xf32>, tensor<4xi64>) -> tensor<4x3xf32>
    %d = graph.scatter_add %g, %ids {axis = 0 : i64, dtc.split = #graph.split<[0], [], []>} : (tensor<4x3xf32>, tensor<4xi64>) -> tensor<1024x3xf32>
    return %e, %d : tensor<4x3xf32>, tensor<1024x3xf32>
  }
}
