// RUN: %dtc-opt %s --dtc-compile-pipeline="train=true optimizer=adamw lr=0.01" | %dtc-translate --graph-to-plan-text | FileCheck %s
// RUN: %dtc-opt %s --dtc-compile-pipeline | %dtc-translate --graph-to-plan-text | FileCheck %s --check-prefix=INFER
// RUN: %dtc-opt %s --dtc-fuse-elementwise | not %dtc-translate --graph-to-plan 2>&1 | FileCheck %s --check-prefix=UNASSIGNED

// Emission stamps the format version and dtc's version, names the model it
// came from, gives the training inputs their roles, and copies the passes'
// notes into the decisions, after what only emission knows (the mesh of a
// single-device plan) and before its own (the instruction count).
// CHECK: plan format 24, written by dtc {{[0-9.]+}}
// CHECK-NEXT: model: tiny.onnx
// CHECK-NEXT: mesh: device=1 (1 rank)
// CHECK: inputs:
// CHECK-NEXT: x {{ *}}f32[4,8]{{$}}
// CHECK-NEXT: labels {{ *}}i64[4]  (labels, from the data set)
// CHECK-NEXT: optimizer.lr {{ *}}f32[]  (learning rate, from the schedule each step)
// CHECK-NEXT: optimizer.bias_correction1 f32[]  (AdamW's first bias correction, each step)
// CHECK-NEXT: optimizer.bias_correction2 f32[]  (AdamW's second bias correction, each step)
// CHECK: decisions:
// CHECK-NEXT: mesh: 1 device (single-rank plan)
// CHECK-NEXT: training: loss cross_entropy, AdamW (beta1 0.9, beta2 0.999, weight decay 0), learning rate 0.01 constant
// CHECK: memory: peak
// CHECK: instructions: {{[0-9]+}} over {{[0-9]+}} buffers
// CHECK: matmul

// INFER: inputs:
// INFER-NEXT: x {{ *}}f32[4,8]{{$}}
// INFER-NEXT: outputs:
// INFER-NEXT: logits {{ *}}f32[4,3]

// Emission needs the buffer assignment the pipeline ends with.
// UNASSIGNED: error: plan emission needs buffer offsets (run dtc-assign-buffers)
module attributes {graph.source = "tiny.onnx"} {
  func.func @main(%x: tensor<4x8xf32> {graph.name = "x"}) -> (tensor<4x3xf32> {graph.name = "logits"}) {
    %w = graph.parameter "w" : tensor<8x3xf32>
    %y = graph.matmul %x, %w : (tensor<4x8xf32>, tensor<8x3xf32>) -> tensor<4x3xf32>
    return %y : tensor<4x3xf32>
  }
}
