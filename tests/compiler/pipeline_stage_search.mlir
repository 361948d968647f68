// RUN: %dtc-opt %s --pass-pipeline="builtin.module(dtc-build-training-step{loss=mse optimizer=sgd momentum=0 model-outputs=false micro-batches=2},func.func(canonicalize,cse),dtc-sharding-search{devices=2 pp=0},dtc-spmd-partition,func.func(dtc-accumulate-gradients),dtc-pipeline-split{stages=0})" | FileCheck %s

// The stage search (dtc-sharding-search with devices and pp=0) and the cut
// (dtc-pipeline-split with stages=0: as many as the search chose) on two
// tanh layers over 2 devices and 2 micro-batches. On cpu-local two stages
// of one device each beat one stage of two: no gradient all-reduce, and
// the micro-batches overlap across the stages.

// CHECK-LABEL: module attributes {dtc.cluster = {{.*}}, dtc.pipeline = {micro_batches = 2 : i64, schedule = "1f1b", stages = 2 : i64, virtual_stages = 1 : i64}}
// CHECK: func.func @stage0(
// CHECK-SAME: "pipeline: 2 stages of 1 device, searched from --devices 2 (predicted step with the 1f1b bubble and transfers: 1 stage {{[0-9.]+}} us, 2 stages {{[0-9.]+}} us (chosen); searched in {{[0-9.]+}} s)"
// CHECK: func.func @stage1(
func.func @main(%x: tensor<4x8xf32> {graph.name = "x"}) -> (tensor<4x8xf32> {graph.name = "y"}) {
  %w1 = graph.parameter "w1" : tensor<8x8xf32>
  %a = graph.matmul %x, %w1 : (tensor<4x8xf32>, tensor<8x8xf32>) -> tensor<4x8xf32>
  %b = graph.tanh %a : (tensor<4x8xf32>) -> tensor<4x8xf32>
  %w2 = graph.parameter "w2" : tensor<8x8xf32>
  %c = graph.matmul %b, %w2 : (tensor<4x8xf32>, tensor<8x8xf32>) -> tensor<4x8xf32>
  %d = graph.tanh %c : (tensor<4x8xf32>) -> tensor<4x8xf32>
  return %d : tensor<4x8xf32>
}
