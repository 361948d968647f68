// RUN: %dtc-opt %s --pass-pipeline="builtin.module(dtc-build-training-step{loss=mse optimizer=sgd momentum=0 model-outputs=false},func.func(canonicalize,cse,dtc-recompute{mode=selective},cse))" | FileCheck %s --check-prefix=SELECTIVE
// RUN: %dtc-opt %s --pass-pipeline="builtin.module(dtc-build-training-step{loss=mse optimizer=sgd momentum=0 model-outputs=false},func.func(canonicalize,cse,dtc-recompute{mode=full}))" | FileCheck %s --check-prefix=FULL
// RUN: %dtc-opt %s --pass-pipeline="builtin.module(dtc-build-training-step{loss=mse optimizer=sgd momentum=0 model-outputs=false},func.func(canonicalize,cse,dtc-recompute{mode=none}))" | FileCheck %s --check-prefix=NONE
// RUN: not %dtc-opt %s --pass-pipeline="builtin.module(dtc-build-training-step{loss=mse},func.func(dtc-recompute{mode=some}))" 2>&1 | FileCheck %s --check-prefix=BAD

// A one-head attention (q = x wq; softmax(q q^T) q) with a residual, then
// a tanh block with a residual, trained with MSE.

// Selective: the scores and the softmax, between the two activation-by-
// activation matmuls, are recomputed just before the backward reads the
// softmax; the original softmax is read by the forward only. The product
// with the values is not read by the backward, so it is not copied. CSE
// keeps the copies apart from the originals.
// SELECTIVE: "recompute: selective, 2 ops recomputed in the backward instead of keeping 1 values (128 B, before any split)"
// SELECTIVE: %[[Q:.*]] = graph.matmul %arg0
// SELECTIVE-NEXT: %[[KT:.*]] = graph.transpose %[[Q]]
// SELECTIVE-NEXT: %[[S:.*]] = graph.matmul %[[Q]], %[[KT]] :
// SELECTIVE-NEXT: %[[P:.*]] = graph.softmax %[[S]] {axis = 2 : i64} :
// SELECTIVE-NEXT: graph.matmul %[[P]], %[[Q]] :
// SELECTIVE-NOT: %[[P]]
// SELECTIVE: %[[S2:.*]] = graph.matmul %[[Q]], %[[KT]] {dtc.recompute}
// SELECTIVE-NEXT: %[[P2:.*]] = graph.softmax %[[S2]] {axis = 2 : i64, dtc.recompute}
// SELECTIVE-NOT: %[[P]]
// SELECTIVE: graph.mul %{{.*}}, %[[P2]]
// SELECTIVE-NOT: %[[P]]
// SELECTIVE: return

// Full: the values that alone carry the forward on (q, the attention's
// output, each residual sum) are kept; the rest before the last of them
// is recomputed: the tanh block's matmul and tanh, the transpose, scores
// and softmax.
// FULL: "recompute: full, 5 ops recomputed in the backward instead of keeping 3 values
// FULL: %[[Q:.*]] = graph.matmul %arg0
// FULL: %[[H:.*]] = graph.add %arg0,
// FULL: %[[Y2:.*]] = graph.matmul %[[H]], %{{.*}} {dtc.recompute}
// FULL-NEXT: graph.tanh %[[Y2]] {dtc.recompute}
// FULL: %[[KT2:.*]] = graph.transpose %[[Q]] {dtc.recompute
// FULL-NEXT: %[[S2:.*]] = graph.matmul %[[Q]], %[[KT2]] {dtc.recompute}
// FULL-NEXT: graph.softmax %[[S2]] {axis = 2 : i64, dtc.recompute}
// FULL: return

// NONE-NOT: dtc.recompute
// NONE-NOT: "recompute:

// BAD: dtc-recompute: mode must be none, selective or full, not 'some'
func.func @main(%x: tensor<2x4x8xf32> {graph.name = "x"}) -> (tensor<2x4x8xf32> {graph.name = "y"}) {
  %wq = graph.parameter "wq" : tensor<8x8xf32>
  %q = graph.matmul %x, %wq : (tensor<2x4x8xf32>, tensor<8x8xf32>) -> tensor<2x4x8xf32>
  %kt = graph.transpose %q {perm = array<i64: 0, 2, 1>} : (tensor<2x4x8xf32>) -> tensor<2x8x4xf32>
  %s = graph.matmul %q, %kt : (tensor<2x4x8xf32>, tensor<2x8x4xf32>) -> tensor<2x4x4xf32>
  %p = graph.softmax %s {axis = 2 : i64} : (tensor<2x4x4xf32>) -> tensor<2x4x4xf32>
  %o = graph.matmul %p, %q : (tensor<2x4x4xf32>, tensor<2x4x8xf32>) -> tensor<2x4x8xf32>
  %h = graph.add %x, %o : (tensor<2x4x8xf32>, tensor<2x4x8xf32>) -> tensor<2x4x8xf32>
  %w2 = graph.parameter "w2" : tensor<8x8xf32>
  %y = graph.matmul %h, %w2 : (tensor<2x4x8xf32>, tensor<8x8xf32>) -> tensor<2x4x8xf32>
  %t = graph.tanh %y : (tensor<2x4x8xf32>) -> tensor<2x4x8xf32>
  %z = graph.add %h, %t : (tensor<2x4x8xf32>, tensor<2x4x8xf32>) -> tensor<2x4x8xf32>
  return %z : tensor<2x4x8xf32>
}
