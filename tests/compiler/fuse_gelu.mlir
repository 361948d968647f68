// RUN: %dtc-opt %s --pass-pipeline='builtin.module(func.func(dtc-fuse-gelu))' | FileCheck %s

// GPT-2's gelu_new as the default exporter writes it: one gelu (tanh).
// CHECK-LABEL: func.func @gpt2_gelu_new
// CHECK-SAME: dtc.notes = ["fusion: 1 GELUs written out in primitives (1 tanh form, 0 erf form) computed as one gelu each"]
// CHECK-NOT: graph.mul
// CHECK: %[[G:.*]] = graph.gelu %arg0 {approximate = "tanh"} : (tensor<4x8xf32>) -> tensor<4x8xf32>
// CHECK-NOT: graph.tanh
// CHECK-NOT: graph.pow
// CHECK: return %[[G]]
func.func @gpt2_gelu_new(%x: tensor<4x8xf32>) -> tensor<4x8xf32> {
  %half = graph.constant dense<5.000000e-01> : tensor<f32>
  %three = graph.constant dense<3.000000e+00> : tensor<f32>
  %a = graph.constant dense<4.471500e-02> : tensor<f32>
  %c = graph.constant dense<0.797884583> : tensor<f32>
  %one = graph.constant dense<1.000000e+00> : tensor<f32>
  %0 = graph.mul %x, %half : (tensor<4x8xf32>, tensor<f32>) -> tensor<4x8xf32>
  %1 = graph.pow %x, %three : (tensor<4x8xf32>, tensor<f32>) -> tensor<4x8xf32>
  %2 = graph.mul %1, %a : (tensor<4x8xf32>, tensor<f32>) -> tensor<4x8xf32>
  %3 = graph.add %x, %2 : (tensor<4x8xf32>, tensor<4x8xf32>) -> tensor<4x8xf32>
  %4 = graph.mul %3, %c : (tensor<4x8xf32>, tensor<f32>) -> tensor<4x8xf32>
  %5 = graph.tanh %4 : (tensor<4x8xf32>) -> tensor<4x8xf32>
  %6 = graph.add %5, %one : (tensor<4x8xf32>, tensor<f32>) -> tensor<4x8xf32>
  %7 = graph.mul %0, %6 : (tensor<4x8xf32>, tensor<4x8xf32>) -> tensor<4x8xf32>
  return %7 : tensor<4x8xf32>
}

// Megatron's form, factors in another order, the cube as x * x * x inside:
// x * 0.5 * (1 + tanh(0.7978845608 * x * (1 + 0.044715 * x * x))).
// CHECK-LABEL: func.func @megatron_gelu
// CHECK-NOT: graph.mul
// CHECK: graph.gelu %arg0 {approximate = "tanh"}
// CHECK-NOT: graph.tanh
func.func @megatron_gelu(%x: tensor<8xf32>) -> tensor<8xf32> {
  %half = graph.constant dense<5.000000e-01> : tensor<1xf32>
  %a = graph.constant dense<4.471500e-02> : tensor<f32>
  %c = graph.constant dense<0.797884583> : tensor<f32>
  %one = graph.constant dense<1.000000e+00> : tensor<f32>
  %0 = graph.mul %x, %x : (tensor<8xf32>, tensor<8xf32>) -> tensor<8xf32>
  %1 = graph.mul %a, %0 : (tensor<f32>, tensor<8xf32>) -> tensor<8xf32>
  %2 = graph.add %one, %1 : (tensor<f32>, tensor<8xf32>) -> tensor<8xf32>
  %3 = graph.mul %c, %x : (tensor<f32>, tensor<8xf32>) -> tensor<8xf32>
  %4 = graph.mul %3, %2 : (tensor<8xf32>, tensor<8xf32>) -> tensor<8xf32>
  %5 = graph.tanh %4 : (tensor<8xf32>) -> tensor<8xf32>
  %6 = graph.add %one, %5 : (tensor<f32>, tensor<8xf32>) -> tensor<8xf32>
  %7 = graph.mul %6, %x : (tensor<8xf32>, tensor<8xf32>) -> tensor<8xf32>
  %8 = graph.mul %7, %half : (tensor<8xf32>, tensor<1xf32>) -> tensor<8xf32>
  return %8 : tensor<8xf32>
}

// The older exporter's exact GELU: x * 0.5 * (1 + erf(x / sqrt 2)).
// CHECK-LABEL: func.func @erf_gelu
// CHECK-SAME: (0 tanh form, 1 erf form)
// CHECK-NOT: graph.mul
// CHECK: graph.gelu %arg0 : (tensor<8xf32>) -> tensor<8xf32>
// CHECK-NOT: graph.erf
func.func @erf_gelu(%x: tensor<8xf32>) -> tensor<8xf32> {
  %half = graph.constant dense<5.000000e-01> : tensor<f32>
  %sqrt2 = graph.constant dense<1.41421354> : tensor<f32>
  %one = graph.constant dense<1.000000e+00> : tensor<f32>
  %0 = graph.div %x, %sqrt2 : (tensor<8xf32>, tensor<f32>) -> tensor<8xf32>
  %1 = graph.erf %0 : (tensor<8xf32>) -> tensor<8xf32>
  %2 = graph.add %1, %one : (tensor<8xf32>, tensor<f32>) -> tensor<8xf32>
  %3 = graph.mul %x, %2 : (tensor<8xf32>, tensor<8xf32>) -> tensor<8xf32>
  %4 = graph.mul %3, %half : (tensor<8xf32>, tensor<f32>) -> tensor<8xf32>
  return %4 : tensor<8xf32>
}

// Not GELUs: a wrong constant (0.04 for 0.044715), and an intermediate
// (the tanh) that something else reads: both left as they are.
// CHECK-LABEL: func.func @not_gelu
// CHECK-NOT: graph.gelu
// CHECK: graph.tanh
// CHECK: graph.tanh
// CHECK-NOT: graph.gelu
func.func @not_gelu(%x: tensor<8xf32>) -> (tensor<8xf32>, tensor<8xf32>, tensor<8xf32>) {
  %half = graph.constant dense<5.000000e-01> : tensor<f32>
  %three = graph.constant dense<3.000000e+00> : tensor<f32>
  %a = graph.constant dense<4.000000e-02> : tensor<f32>
  %a2 = graph.constant dense<4.471500e-02> : tensor<f32>
  %c = graph.constant dense<0.797884583> : tensor<f32>
  %one = graph.constant dense<1.000000e+00> : tensor<f32>
  %0 = graph.mul %x, %half : (tensor<8xf32>, tensor<f32>) -> tensor<8xf32>
  %1 = graph.pow %x, %three : (tensor<8xf32>, tensor<f32>) -> tensor<8xf32>
  %2 = graph.mul %1, %a : (tensor<8xf32>, tensor<f32>) -> tensor<8xf32>
  %3 = graph.add %x, %2 : (tensor<8xf32>, tensor<8xf32>) -> tensor<8xf32>
  %4 = graph.mul %3, %c : (tensor<8xf32>, tensor<f32>) -> tensor<8xf32>
  %5 = graph.tanh %4 : (tensor<8xf32>) -> tensor<8xf32>
  %6 = graph.add %5, %one : (tensor<8xf32>, tensor<f32>) -> tensor<8xf32>
  %7 = graph.mul %0, %6 : (tensor<8xf32>, tensor<8xf32>) -> tensor<8xf32>
  %10 = graph.mul %x, %half : (tensor<8xf32>, tensor<f32>) -> tensor<8xf32>
  %11 = graph.pow %x, %three : (tensor<8xf32>, tensor<f32>) -> tensor<8xf32>
  %12 = graph.mul %11, %a2 : (tensor<8xf32>, tensor<f32>) -> tensor<8xf32>
  %13 = graph.add %x, %12 : (tensor<8xf32>, tensor<8xf32>) -> tensor<8xf32>
  %14 = graph.mul %13, %c : (tensor<8xf32>, tensor<f32>) -> tensor<8xf32>
  %15 = graph.tanh %14 : (tensor<8xf32>) -> tensor<8xf32>
  %16 = graph.add %15, %one : (tensor<8xf32>, tensor<f32>) -> tensor<8xf32>
  %17 = graph.mul %10, %16 : (tensor<8xf32>, tensor<8xf32>) -> tensor<8xf32>
  return %7, %17, %15 : tensor<8xf32>, tensor<8xf32>, tensor<8xf32>
}
