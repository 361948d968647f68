// RUN: %dtc-opt %s --pass-pipeline="builtin.module(dtc-build-training-step{loss=mse optimizer=sgd momentum=0 model-outputs=false micro-batches=2},func.func(canonicalize,cse,dtc-accumulate-gradients),dtc-pipeline-split{stages=0})" | FileCheck %s

// stages=0: as many stages as dtc-sharding-search chose, and the
// interleaved schedule when it chose virtual stages (the module's
// dtc.pipeline_stages and dtc.pipeline_virtual_stages, which the split
// replaces by dtc.pipeline).
// CHECK: module attributes {dtc.pipeline = {micro_batches = 2 : i64, schedule = "interleaved", stages = 2 : i64, virtual_stages = 2 : i64}}
// CHECK-NOT: dtc.pipeline_stages
// CHECK-NOT: dtc.pipeline_virtual_stages
// CHECK: func.func @stage0(
// CHECK: func.func @stage1(
module attributes {dtc.pipeline_stages = 2 : i64, dtc.pipeline_virtual_stages = 2 : i64} {
  func.func @main(%x: tensor<4x8xf32> {graph.name = "x"}) -> (tensor<4x8xf32> {graph.name = "y"}) {
    %w1 = graph.parameter "w1" : tensor<8x8xf32>
    %a = graph.matmul %x, %w1 : (tensor<4x8xf32>, tensor<8x8xf32>) -> tensor<4x8xf32>
    %b = graph.tanh %a : (tensor<4x8xf32>) -> tensor<4x8xf32>
    %w2 = graph.parameter "w2" : tensor<8x8xf32>
    %c = graph.matmul %b, %w2 : (tensor<4x8xf32>, tensor<8x8xf32>) -> tensor<4x8xf32>
    %d = graph.tanh %c : (tensor<4x8xf32>) -> tensor<4x8xf32>
    %w3 = graph.parameter "w3" : tensor<8x8xf32>
    %e = graph.matmul %d, %w3 : (tensor<4x8xf32>, tensor<8x8xf32>) -> tensor<4x8xf32>
    %f = graph.tanh %e : (tensor<4x8xf32>) -> tensor<4x8xf32>
    %w4 = graph.parameter "w4" : tensor<8x8xf32>
    %g = graph.matmul %f, %w4 : (tensor<4x8xf32>, tensor<8x8xf32>) -> tensor<4x8xf32>
    %h = graph.tanh %g : (tensor<4x8xf32>) -> tensor<4x8xf32>
    return %h : tensor<4x8xf32>
  }
}
