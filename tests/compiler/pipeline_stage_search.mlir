// RUN: %dtc-opt %s --pass-pipeline="builtin.module(dtc-build-training-step{loss=mse optimizer=sgd momentum=0 model-outputs=false micro-batches=4},func.func(canonicalize,cse),dtc-sharding-search{devices=2 pp=0},dtc-spmd-partition,func.func(dtc-accumulate-gradients),dtc-pipeline-split{stages=0})" | FileCheck %s
// RUN: %dtc-opt %s --mlir-disable-threading --pass-pipeline="builtin.module(dtc-build-training-step{loss=mse optimizer=sgd momentum=0 model-outputs=false micro-batches=4},func.func(canonicalize,cse),dtc-sharding-search{devices=2 pp=0},dtc-spmd-partition,func.func(dtc-accumulate-gradients),dtc-pipeline-split{stages=0})" | FileCheck %s

// Without threads the count ahead (searched beside the current one on a
// second thread: docs/pipeline.md) runs when its turn comes, under the
// same bound: the same stages and notes.

// The stage search (dtc-sharding-search with devices and pp=0) and the cut
// (dtc-pipeline-split with stages=0: as many as the search chose) on four
// tanh layers over 2 devices and 4 micro-batches. On cpu-local two stages
// of one device each beat one stage of two: no gradient all-reduce, each
// device accumulates half the gradients, and the micro-batches overlap
// across the stages.

// CHECK-LABEL: module attributes {dtc.cluster = {{.*}}, dtc.pipeline = {micro_batches = 4 : i64, schedule = "1f1b", stages = 2 : i64, virtual_stages = 1 : i64}}
// CHECK: func.func @stage0(
// CHECK-SAME: "pipeline: 2 stages of 1 device, searched from --devices 2 (predicted step with the 1f1b bubble and transfers: 1 stage {{[0-9.]+}} us, 2 stages {{[0-9.]+}} us (chosen); searched in {{[0-9.]+}} s)"
// CHECK: func.func @stage1(
func.func @main(%x: tensor<4x64xf32> {graph.name = "x"}) -> (tensor<4x64xf32> {graph.name = "y"}) {
  %w1 = graph.parameter "w1" : tensor<64x64xf32>
  %a1 = graph.matmul %x, %w1 : (tensor<4x64xf32>, tensor<64x64xf32>) -> tensor<4x64xf32>
  %t1 = graph.tanh %a1 : (tensor<4x64xf32>) -> tensor<4x64xf32>
  %w2 = graph.parameter "w2" : tensor<64x64xf32>
  %a2 = graph.matmul %t1, %w2 : (tensor<4x64xf32>, tensor<64x64xf32>) -> tensor<4x64xf32>
  %t2 = graph.tanh %a2 : (tensor<4x64xf32>) -> tensor<4x64xf32>
  %w3 = graph.parameter "w3" : tensor<64x64xf32>
  %a3 = graph.matmul %t2, %w3 : (tensor<4x64xf32>, tensor<64x64xf32>) -> tensor<4x64xf32>
  %t3 = graph.tanh %a3 : (tensor<4x64xf32>) -> tensor<4x64xf32>
  %w4 = graph.parameter "w4" : tensor<64x64xf32>
  %a4 = graph.matmul %t3, %w4 : (tensor<4x64xf32>, tensor<64x64xf32>) -> tensor<4x64xf32>
  %t4 = graph.tanh %a4 : (tensor<4x64xf32>) -> tensor<4x64xf32>
  return %t4 : tensor<4x64xf32>
}
