// RUN: %dtc-opt %s --split-input-file --pass-pipeline="builtin.module(dtc-build-training-step{loss=mse optimizer=sgd momentum=0 model-outputs=false micro-batches=2},func.func(canonicalize,cse),dtc-sharding-search{devices=2 pp=0})" | FileCheck %s

// The stage search (dtc-sharding-search with devices and pp=0) on two
// tanh layers over 2 devices and 2 micro-batches. Layers with weights of
// their own may be cut into 2 stages (which the search costs); one weight
// read by both layers (tied, as a GPT-2's embeddings are) would need its
// gradient summed across stages, which dtc-pipeline-split refuses: the
// search keeps one stage and says why.

// Two stages of one device: no gradient all-reduce, and the two
// micro-batches overlap across the stages.
// CHECK-LABEL: module attributes {dtc.pipeline_stages = 2 : i64}
// CHECK: "pipeline: 2 stages of 1 device, searched from --devices 2 (predicted step with the 1f1b bubble and transfers: 1 stage {{[0-9.]+}} us, 2 stages {{[0-9.]+}} us (chosen); searched in {{[0-9.]+}} s)"
func.func @main(%x: tensor<4x8xf32> {graph.name = "x"}) -> (tensor<4x8xf32> {graph.name = "y"}) {
  %w1 = graph.parameter "w1" : tensor<8x8xf32>
  %a = graph.matmul %x, %w1 : (tensor<4x8xf32>, tensor<8x8xf32>) -> tensor<4x8xf32>
  %b = graph.tanh %a : (tensor<4x8xf32>) -> tensor<4x8xf32>
  %w2 = graph.parameter "w2" : tensor<8x8xf32>
  %c = graph.matmul %b, %w2 : (tensor<4x8xf32>, tensor<8x8xf32>) -> tensor<4x8xf32>
  %d = graph.tanh %c : (tensor<4x8xf32>) -> tensor<4x8xf32>
  return %d : tensor<4x8xf32>
}

// -----

// CHECK-LABEL: module attributes {dtc.mesh_axis_names = ["x"], dtc.pipeline_stages = 1 : i64}
// CHECK: "pipeline: 1 stage of 2 devices, searched from --devices 2 (predicted step with the 1f1b bubble and transfers: 1 stage {{[0-9.]+}} us (chosen); a weight is read by layers on both sides of a layer boundary (tied embeddings): no pipeline stages; searched in {{[0-9.]+}} s)"
func.func @main(%x: tensor<4x8xf32> {graph.name = "x"}) -> (tensor<4x8xf32> {graph.name = "y"}) {
  %w = graph.parameter "w" : tensor<8x8xf32>
  %a = graph.matmul %x, %w : (tensor<4x8xf32>, tensor<8x8xf32>) -> tensor<4x8xf32>
  %b = graph.tanh %a : (tensor<4x8xf32>) -> tensor<4x8xf32>
  %c = graph.matmul %b, %w : (tensor<4x8xf32>, tensor<8x8xf32>) -> tensor<4x8xf32>
  %d = graph.tanh %c : (tensor<4x8xf32>) -> tensor<4x8xf32>
  return %d : tensor<4x8xf32>
}
