// RUN: %dtc-opt %s --pass-pipeline='builtin.module(func.func(dtc-interleave-qkv),dtc-sharding-search{tp=2 preset=h100-sxm})' | FileCheck %s --check-prefix=TP
// RUN: %dtc-opt %s --pass-pipeline='builtin.module(func.func(dtc-interleave-qkv),dtc-sharding-search{dp=2 preset=h100-sxm})' | FileCheck %s --check-prefix=DP
// RUN: %dtc-opt %s --pass-pipeline='builtin.module(dtc-sharding-search{tp=2 preset=h100-sxm})' | FileCheck %s --check-prefix=PACKED

// dtc-sharding-search records on the module how many attentions read a
// projection dtc-interleave-qkv laid out by heads, and how many of them
// its split cuts by heads, for dtc compile to compile the step again with
// the model's packing where that is none (compileCheckingLayout).
// tp=2 splits the two heads:
// TP: module attributes {{{.*}}dtc.interleaved_heads = array<i64: 1, 1>
// dp=2 splits the batch only:
// DP: module attributes {{{.*}}dtc.interleaved_heads = array<i64: 1, 0>
// Nothing interleaved, nothing recorded:
// PACKED-NOT: dtc.interleaved_heads
func.func @main(%x: tensor<2048x1024xf32>, %w: tensor<1024x3072xf32>, %b: tensor<3072xf32>) -> tensor<4x512x16x64xf32> {
  %p = graph.matmul %x, %w : (tensor<2048x1024xf32>, tensor<1024x3072xf32>) -> tensor<2048x3072xf32>
  %pb = graph.add %p, %b : (tensor<2048x3072xf32>, tensor<3072xf32>) -> tensor<2048x3072xf32>
  %qkv = graph.reshape %pb : (tensor<2048x3072xf32>) -> tensor<4x512x3x16x64xf32>
  %o, %l = graph.attention %qkv, %qkv, %qkv {bshd, causal = true, packed, scale = 0.125 : f64} : (tensor<4x512x3x16x64xf32>, tensor<4x512x3x16x64xf32>, tensor<4x512x3x16x64xf32>) -> (tensor<4x512x16x64xf32>, tensor<4x16x512xf32>)
  return %o : tensor<4x512x16x64xf32>
}
