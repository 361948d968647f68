// RUN: %dtc-opt %s --split-input-file --verify-diagnostics

// An axis cuts one dim at most.
// expected-error @below {{mesh axis 0 cuts more than one dim}}
func.func @twice(%x: tensor<4x8xf32> {dtc.sharding = #graph.sharding<[0], [0]>}) {
  return
}

// -----

// expected-error @below {{factor 1: mesh axis -1 out of range}}
%0 = graph.parameter "w" {dtc.split = #graph.split<[], [-1]>} : tensor<2x2xf32>

// -----

// expected-error @below {{expected '['}}
func.func @bad(%x: tensor<4xf32> {dtc.sharding = #graph.sharding<0>}) {
  return
}
