// Every graph op parses, verifies and prints back in its custom form.
// RUN: %dtc-opt %s | %dtc-opt | FileCheck %s

// CHECK-LABEL: func.func @sources
func.func @sources() -> (tensor<4x8xf32>, tensor<3xi64>, tensor<f32>, tensor<2x2xi1>) {
  // CHECK: graph.parameter "layer.weight" : tensor<4x8xf32>
  %0 = graph.parameter "layer.weight" : tensor<4x8xf32>
  // CHECK: graph.constant dense<[1, 2, 3]> : tensor<3xi64>
  %1 = graph.constant dense<[1, 2, 3]> : tensor<3xi64>
  // CHECK: graph.constant dense<5.000000e-01> : tensor<f32>
  %2 = graph.constant dense<0.5> : tensor<f32>
  // CHECK: graph.constant dense<{{\[\[}}true, false], [false, true]]> : tensor<2x2xi1>
  %3 = graph.constant dense<[[true, false], [false, true]]> : tensor<2x2xi1>
  return %0, %1, %2, %3 : tensor<4x8xf32>, tensor<3xi64>, tensor<f32>, tensor<2x2xi1>
}

// CHECK-LABEL: func.func @binary
func.func @binary(%a: tensor<2x3xf32>, %b: tensor<3xf32>, %i: tensor<4xi64>, %j: tensor<i64>) {
  // CHECK: graph.add %arg0, %arg1 : (tensor<2x3xf32>, tensor<3xf32>) -> tensor<2x3xf32>
  %0 = graph.add %a, %b : (tensor<2x3xf32>, tensor<3xf32>) -> tensor<2x3xf32>
  // CHECK: graph.sub %arg1, %arg0 : (tensor<3xf32>, tensor<2x3xf32>) -> tensor<2x3xf32>
  %1 = graph.sub %b, %a : (tensor<3xf32>, tensor<2x3xf32>) -> tensor<2x3xf32>
  // CHECK: graph.mul %arg0, %arg0 : (tensor<2x3xf32>, tensor<2x3xf32>) -> tensor<2x3xf32>
  %2 = graph.mul %a, %a : (tensor<2x3xf32>, tensor<2x3xf32>) -> tensor<2x3xf32>
  // CHECK: graph.div %arg2, %arg3 : (tensor<4xi64>, tensor<i64>) -> tensor<4xi64>
  %3 = graph.div %i, %j : (tensor<4xi64>, tensor<i64>) -> tensor<4xi64>
  // CHECK: graph.pow %arg0, %arg1 : (tensor<2x3xf32>, tensor<3xf32>) -> tensor<2x3xf32>
  %4 = graph.pow %a, %b : (tensor<2x3xf32>, tensor<3xf32>) -> tensor<2x3xf32>
  // CHECK: graph.max %arg0, %arg1 : (tensor<2x3xf32>, tensor<3xf32>) -> tensor<2x3xf32>
  %5 = graph.max %a, %b : (tensor<2x3xf32>, tensor<3xf32>) -> tensor<2x3xf32>
  // CHECK: graph.min %arg2, %arg3 : (tensor<4xi64>, tensor<i64>) -> tensor<4xi64>
  %6 = graph.min %i, %j : (tensor<4xi64>, tensor<i64>) -> tensor<4xi64>
  return
}

// CHECK-LABEL: func.func @compare_and_logic
func.func @compare_and_logic(%a: tensor<2x3xf32>, %b: tensor<3xf32>, %p: tensor<2x3xi1>, %q: tensor<3xi1>) {
  // CHECK: graph.equal %arg0, %arg1 : (tensor<2x3xf32>, tensor<3xf32>) -> tensor<2x3xi1>
  %0 = graph.equal %a, %b : (tensor<2x3xf32>, tensor<3xf32>) -> tensor<2x3xi1>
  // CHECK: graph.less %arg0, %arg1 : (tensor<2x3xf32>, tensor<3xf32>) -> tensor<2x3xi1>
  %1 = graph.less %a, %b : (tensor<2x3xf32>, tensor<3xf32>) -> tensor<2x3xi1>
  // CHECK: graph.less_equal %arg0, %arg1 : (tensor<2x3xf32>, tensor<3xf32>) -> tensor<2x3xi1>
  %2 = graph.less_equal %a, %b : (tensor<2x3xf32>, tensor<3xf32>) -> tensor<2x3xi1>
  // CHECK: graph.greater %arg0, %arg1 : (tensor<2x3xf32>, tensor<3xf32>) -> tensor<2x3xi1>
  %3 = graph.greater %a, %b : (tensor<2x3xf32>, tensor<3xf32>) -> tensor<2x3xi1>
  // CHECK: graph.greater_equal %arg0, %arg1 : (tensor<2x3xf32>, tensor<3xf32>) -> tensor<2x3xi1>
  %4 = graph.greater_equal %a, %b : (tensor<2x3xf32>, tensor<3xf32>) -> tensor<2x3xi1>
  // CHECK: graph.and %arg2, %arg3 : (tensor<2x3xi1>, tensor<3xi1>) -> tensor<2x3xi1>
  %5 = graph.and %p, %q : (tensor<2x3xi1>, tensor<3xi1>) -> tensor<2x3xi1>
  // CHECK: graph.or %arg2, %arg3 : (tensor<2x3xi1>, tensor<3xi1>) -> tensor<2x3xi1>
  %6 = graph.or %p, %q : (tensor<2x3xi1>, tensor<3xi1>) -> tensor<2x3xi1>
  // CHECK: graph.xor %arg2, %arg2 : (tensor<2x3xi1>, tensor<2x3xi1>) -> tensor<2x3xi1>
  %7 = graph.xor %p, %p : (tensor<2x3xi1>, tensor<2x3xi1>) -> tensor<2x3xi1>
  // CHECK: graph.not %arg2 : (tensor<2x3xi1>) -> tensor<2x3xi1>
  %8 = graph.not %p : (tensor<2x3xi1>) -> tensor<2x3xi1>
  return
}

// CHECK-LABEL: func.func @unary
func.func @unary(%x: tensor<2x3xf32>, %i: tensor<4xi32>) {
  // CHECK: graph.neg %arg0 : (tensor<2x3xf32>) -> tensor<2x3xf32>
  %0 = graph.neg %x : (tensor<2x3xf32>) -> tensor<2x3xf32>
  // CHECK: graph.abs %arg1 : (tensor<4xi32>) -> tensor<4xi32>
  %1 = graph.abs %i : (tensor<4xi32>) -> tensor<4xi32>
  // CHECK: graph.exp %arg0 : (tensor<2x3xf32>) -> tensor<2x3xf32>
  %2 = graph.exp %x : (tensor<2x3xf32>) -> tensor<2x3xf32>
  // CHECK: graph.log %arg0 : (tensor<2x3xf32>) -> tensor<2x3xf32>
  %3 = graph.log %x : (tensor<2x3xf32>) -> tensor<2x3xf32>
  // CHECK: graph.sqrt %arg0 : (tensor<2x3xf32>) -> tensor<2x3xf32>
  %4 = graph.sqrt %x : (tensor<2x3xf32>) -> tensor<2x3xf32>
  // CHECK: graph.reciprocal %arg0 : (tensor<2x3xf32>) -> tensor<2x3xf32>
  %5 = graph.reciprocal %x : (tensor<2x3xf32>) -> tensor<2x3xf32>
  // CHECK: graph.tanh %arg0 : (tensor<2x3xf32>) -> tensor<2x3xf32>
  %6 = graph.tanh %x : (tensor<2x3xf32>) -> tensor<2x3xf32>
  // CHECK: graph.erf %arg0 : (tensor<2x3xf32>) -> tensor<2x3xf32>
  %7 = graph.erf %x : (tensor<2x3xf32>) -> tensor<2x3xf32>
  // CHECK: graph.sigmoid %arg0 : (tensor<2x3xf32>) -> tensor<2x3xf32>
  %8 = graph.sigmoid %x : (tensor<2x3xf32>) -> tensor<2x3xf32>
  // CHECK: graph.relu %arg1 : (tensor<4xi32>) -> tensor<4xi32>
  %9 = graph.relu %i : (tensor<4xi32>) -> tensor<4xi32>
  // CHECK: graph.gelu %arg0 : (tensor<2x3xf32>) -> tensor<2x3xf32>
  %10 = graph.gelu %x : (tensor<2x3xf32>) -> tensor<2x3xf32>
  // CHECK: graph.gelu %arg0 {approximate = "tanh"} : (tensor<2x3xf32>) -> tensor<2x3xf32>
  %11 = graph.gelu %x {approximate = "tanh"} : (tensor<2x3xf32>) -> tensor<2x3xf32>
  // CHECK: graph.clip %arg0 {max = 6.000000e+00 : f64, min = 0.000000e+00 : f64} : (tensor<2x3xf32>) -> tensor<2x3xf32>
  %12 = graph.clip %x {min = 0.0 : f64, max = 6.0 : f64} : (tensor<2x3xf32>) -> tensor<2x3xf32>
  // CHECK: graph.clip %arg1 {min = -1.000000e+00 : f64} : (tensor<4xi32>) -> tensor<4xi32>
  %13 = graph.clip %i {min = -1.0 : f64} : (tensor<4xi32>) -> tensor<4xi32>
  // CHECK: graph.cast %arg0 : (tensor<2x3xf32>) -> tensor<2x3xi64>
  %14 = graph.cast %x : (tensor<2x3xf32>) -> tensor<2x3xi64>
  // CHECK: graph.cast %arg1 : (tensor<4xi32>) -> tensor<4xf16>
  %15 = graph.cast %i : (tensor<4xi32>) -> tensor<4xf16>
  return
}

// CHECK-LABEL: func.func @select_and_triangle
func.func @select_and_triangle(%c: tensor<2x1xi1>, %x: tensor<2x3xf32>, %y: tensor<3xf32>, %m: tensor<2x4x4xf32>) {
  // CHECK: graph.where %arg0, %arg1, %arg2 : (tensor<2x1xi1>, tensor<2x3xf32>, tensor<3xf32>) -> tensor<2x3xf32>
  %0 = graph.where %c, %x, %y : (tensor<2x1xi1>, tensor<2x3xf32>, tensor<3xf32>) -> tensor<2x3xf32>
  // CHECK: graph.trilu %arg3 {upper = true} : (tensor<2x4x4xf32>) -> tensor<2x4x4xf32>
  %1 = graph.trilu %m {upper = true} : (tensor<2x4x4xf32>) -> tensor<2x4x4xf32>
  // CHECK: graph.trilu %arg3 {k = -1 : i64, upper = false} : (tensor<2x4x4xf32>) -> tensor<2x4x4xf32>
  %2 = graph.trilu %m {upper = false, k = -1 : i64} : (tensor<2x4x4xf32>) -> tensor<2x4x4xf32>
  // CHECK: graph.top_k %arg1 {axis = 1 : i64, k = 2 : i64, largest = false} : (tensor<2x3xf32>) -> tensor<2x2xi64>
  %3 = graph.top_k %x {axis = 1 : i64, k = 2 : i64, largest = false} : (tensor<2x3xf32>) -> tensor<2x2xi64>
  return
}

// CHECK-LABEL: func.func @reductions_and_norms
func.func @reductions_and_norms(%x: tensor<2x3x4xf32>, %s: tensor<4xf32>, %img: tensor<2x3x5x5xf32>, %c: tensor<3xf32>) {
  // CHECK: graph.reduce_sum %arg0 {axes = array<i64: 1, 2>} : (tensor<2x3x4xf32>) -> tensor<2x1x1xf32>
  %0 = graph.reduce_sum %x {axes = array<i64: 1, 2>} : (tensor<2x3x4xf32>) -> tensor<2x1x1xf32>
  // CHECK: graph.reduce_mean %arg0 {axes = array<i64: 2>, keepdims = false} : (tensor<2x3x4xf32>) -> tensor<2x3xf32>
  %1 = graph.reduce_mean %x {axes = array<i64: 2>, keepdims = false} : (tensor<2x3x4xf32>) -> tensor<2x3xf32>
  // CHECK: graph.reduce_max %arg0 {axes = array<i64: 0>} : (tensor<2x3x4xf32>) -> tensor<1x3x4xf32>
  %2 = graph.reduce_max %x {axes = array<i64: 0>} : (tensor<2x3x4xf32>) -> tensor<1x3x4xf32>
  // CHECK: graph.reduce_min %arg0 {axes = array<i64: 0, 1, 2>, keepdims = false} : (tensor<2x3x4xf32>) -> tensor<f32>
  %3 = graph.reduce_min %x {axes = array<i64: 0, 1, 2>, keepdims = false} : (tensor<2x3x4xf32>) -> tensor<f32>
  // A 16-bit float input may sum into f32 (the accumulator kept).
  // CHECK: graph.reduce_sum %{{.*}} {axes = array<i64: 0>} : (tensor<2x3x4xbf16>) -> tensor<1x3x4xf32>
  %h = graph.cast %x : (tensor<2x3x4xf32>) -> tensor<2x3x4xbf16>
  %wide = graph.reduce_sum %h {axes = array<i64: 0>} : (tensor<2x3x4xbf16>) -> tensor<1x3x4xf32>
  // So may a 16-bit scatter-add's updates (an embedding's gradient).
  // CHECK: graph.scatter_add %{{.*}}, %{{.*}} {axis = 0 : i64} : (tensor<2x3x4xbf16>, tensor<2x3xi64>) -> tensor<7x4xf32>
  %ids = graph.constant dense<1> : tensor<2x3xi64>
  %scattered = graph.scatter_add %h, %ids {axis = 0 : i64} : (tensor<2x3x4xbf16>, tensor<2x3xi64>) -> tensor<7x4xf32>
  // CHECK: graph.softmax %arg0 {axis = 2 : i64} : (tensor<2x3x4xf32>) -> tensor<2x3x4xf32>
  %4 = graph.softmax %x {axis = 2 : i64} : (tensor<2x3x4xf32>) -> tensor<2x3x4xf32>
  // CHECK: graph.log_softmax %arg0 {axis = 0 : i64} : (tensor<2x3x4xf32>) -> tensor<2x3x4xf32>
  %5 = graph.log_softmax %x {axis = 0 : i64} : (tensor<2x3x4xf32>) -> tensor<2x3x4xf32>
  // CHECK: graph.layer_norm %arg0, %arg1, %arg1 {axis = 2 : i64} : (tensor<2x3x4xf32>, tensor<4xf32>, tensor<4xf32>) -> tensor<2x3x4xf32>
  %6 = graph.layer_norm %x, %s, %s {axis = 2 : i64} : (tensor<2x3x4xf32>, tensor<4xf32>, tensor<4xf32>) -> tensor<2x3x4xf32>
  // CHECK: graph.layer_norm %arg0, %arg1 {axis = 2 : i64, epsilon = 1.000000e-03 : f64} : (tensor<2x3x4xf32>, tensor<4xf32>) -> tensor<2x3x4xf32>
  %7 = graph.layer_norm %x, %s {axis = 2 : i64, epsilon = 1.0e-3 : f64} : (tensor<2x3x4xf32>, tensor<4xf32>) -> tensor<2x3x4xf32>
  // CHECK: graph.layer_norm_backward %arg0, %arg1, %arg0 {axis = 2 : i64} : (tensor<2x3x4xf32>, tensor<4xf32>, tensor<2x3x4xf32>) -> (tensor<2x3x4xf32>, tensor<2x3x1xf32>, tensor<2x3x1xf32>)
  %lnb:3 = graph.layer_norm_backward %x, %s, %x {axis = 2 : i64} : (tensor<2x3x4xf32>, tensor<4xf32>, tensor<2x3x4xf32>) -> (tensor<2x3x4xf32>, tensor<2x3x1xf32>, tensor<2x3x1xf32>)
  // RMSNorm: a layer norm with rms, forward and backward.
  // CHECK: graph.layer_norm %arg0, %arg1 {axis = 2 : i64, epsilon = 9.9999999999999995E-7 : f64, rms} : (tensor<2x3x4xf32>, tensor<4xf32>) -> tensor<2x3x4xf32>
  %rms = graph.layer_norm %x, %s {axis = 2 : i64, epsilon = 1.0e-6 : f64, rms} : (tensor<2x3x4xf32>, tensor<4xf32>) -> tensor<2x3x4xf32>
  // CHECK: graph.layer_norm_backward %arg0, %arg1, %arg0 {axis = 2 : i64, rms} : (tensor<2x3x4xf32>, tensor<4xf32>, tensor<2x3x4xf32>) -> (tensor<2x3x4xf32>, tensor<2x3x1xf32>, tensor<2x3x1xf32>)
  %rmsb:3 = graph.layer_norm_backward %x, %s, %x {axis = 2 : i64, rms} : (tensor<2x3x4xf32>, tensor<4xf32>, tensor<2x3x4xf32>) -> (tensor<2x3x4xf32>, tensor<2x3x1xf32>, tensor<2x3x1xf32>)
  // CHECK: graph.cross_entropy %arg0, %{{.*}} : (tensor<2x3x4xf32>, tensor<2x3xi64>) -> (tensor<2x3xf32>, tensor<2x3xf32>)
  %ce:2 = graph.cross_entropy %x, %ids : (tensor<2x3x4xf32>, tensor<2x3xi64>) -> (tensor<2x3xf32>, tensor<2x3xf32>)
  // CHECK: graph.batch_norm %arg2, %arg3, %arg3, %arg3, %arg3 : (tensor<2x3x5x5xf32>, tensor<3xf32>, tensor<3xf32>, tensor<3xf32>, tensor<3xf32>) -> tensor<2x3x5x5xf32>
  %8 = graph.batch_norm %img, %c, %c, %c, %c : (tensor<2x3x5x5xf32>, tensor<3xf32>, tensor<3xf32>, tensor<3xf32>, tensor<3xf32>) -> tensor<2x3x5x5xf32>
  return
}

// CHECK-LABEL: func.func @linear_and_windows
func.func @linear_and_windows(%a: tensor<2x3x4xf32>, %b: tensor<5x4xf32>, %x: tensor<1x4x8x8xf32>, %w: tensor<8x2x3x3xf32>, %bias: tensor<8xf32>) {
  // CHECK: graph.matmul %arg0, %arg1 {transpose_rhs = true} : (tensor<2x3x4xf32>, tensor<5x4xf32>) -> tensor<2x3x5xf32>
  %0 = graph.matmul %a, %b {transpose_rhs = true} : (tensor<2x3x4xf32>, tensor<5x4xf32>) -> tensor<2x3x5xf32>
  // CHECK: graph.matmul %arg0, %arg0 {transpose_lhs = true} : (tensor<2x3x4xf32>, tensor<2x3x4xf32>) -> tensor<2x4x4xf32>
  %1 = graph.matmul %a, %a {transpose_lhs = true} : (tensor<2x3x4xf32>, tensor<2x3x4xf32>) -> tensor<2x4x4xf32>
  // CHECK: graph.conv2d %arg2, %arg3, %arg4 {dilations = array<i64: 1, 1>, groups = 2 : i64, pads = array<i64: 1, 1, 1, 1>, strides = array<i64: 2, 2>} : (tensor<1x4x8x8xf32>, tensor<8x2x3x3xf32>, tensor<8xf32>) -> tensor<1x8x4x4xf32>
  %2 = graph.conv2d %x, %w, %bias {strides = array<i64: 2, 2>, pads = array<i64: 1, 1, 1, 1>, dilations = array<i64: 1, 1>, groups = 2 : i64} : (tensor<1x4x8x8xf32>, tensor<8x2x3x3xf32>, tensor<8xf32>) -> tensor<1x8x4x4xf32>
  // CHECK: graph.max_pool2d %arg2 {ceil_mode = true, dilations = array<i64: 1, 1>, kernel = array<i64: 3, 3>, pads = array<i64: 0, 0, 0, 0>, strides = array<i64: 2, 2>} : (tensor<1x4x8x8xf32>) -> tensor<1x4x4x4xf32>
  %3 = graph.max_pool2d %x {kernel = array<i64: 3, 3>, strides = array<i64: 2, 2>, pads = array<i64: 0, 0, 0, 0>, dilations = array<i64: 1, 1>, ceil_mode = true} : (tensor<1x4x8x8xf32>) -> tensor<1x4x4x4xf32>
  // CHECK: graph.avg_pool2d %arg2 {count_include_pad = true, dilations = array<i64: 1, 1>, kernel = array<i64: 2, 2>, pads = array<i64: 1, 1, 1, 1>, strides = array<i64: 2, 2>} : (tensor<1x4x8x8xf32>) -> tensor<1x4x5x5xf32>
  %4 = graph.avg_pool2d %x {kernel = array<i64: 2, 2>, strides = array<i64: 2, 2>, pads = array<i64: 1, 1, 1, 1>, dilations = array<i64: 1, 1>, count_include_pad = true} : (tensor<1x4x8x8xf32>) -> tensor<1x4x5x5xf32>
  return
}

// CHECK-LABEL: func.func @data_movement
func.func @data_movement(%t: tensor<10x8xf32>, %ids: tensor<2x5xi64>, %x: tensor<2x3x4xf32>, %u: tensor<1x3x1xf32>, %v: tensor<3x1xf32>) {
  // CHECK: graph.gather %arg0, %arg1 {axis = 0 : i64} : (tensor<10x8xf32>, tensor<2x5xi64>) -> tensor<2x5x8xf32>
  %0 = graph.gather %t, %ids {axis = 0 : i64} : (tensor<10x8xf32>, tensor<2x5xi64>) -> tensor<2x5x8xf32>
  // CHECK: graph.reshape %arg2 : (tensor<2x3x4xf32>) -> tensor<6x4xf32>
  %1 = graph.reshape %x : (tensor<2x3x4xf32>) -> tensor<6x4xf32>
  // CHECK: graph.squeeze %arg3 {axes = array<i64: 0, 2>} : (tensor<1x3x1xf32>) -> tensor<3xf32>
  %2 = graph.squeeze %u {axes = array<i64: 0, 2>} : (tensor<1x3x1xf32>) -> tensor<3xf32>
  // CHECK: graph.unsqueeze %arg2 {axes = array<i64: 1>} : (tensor<2x3x4xf32>) -> tensor<2x1x3x4xf32>
  %3 = graph.unsqueeze %x {axes = array<i64: 1>} : (tensor<2x3x4xf32>) -> tensor<2x1x3x4xf32>
  // CHECK: graph.transpose %arg2 {perm = array<i64: 2, 0, 1>} : (tensor<2x3x4xf32>) -> tensor<4x2x3xf32>
  %4 = graph.transpose %x {perm = array<i64: 2, 0, 1>} : (tensor<2x3x4xf32>) -> tensor<4x2x3xf32>
  // CHECK: graph.broadcast %arg4 {shape = array<i64: 2, 3, 5>} : (tensor<3x1xf32>) -> tensor<2x3x5xf32>
  %5 = graph.broadcast %v {shape = array<i64: 2, 3, 5>} : (tensor<3x1xf32>) -> tensor<2x3x5xf32>
  // CHECK: graph.concat %arg2, %arg2, %arg2 {axis = 1 : i64} : (tensor<2x3x4xf32>, tensor<2x3x4xf32>, tensor<2x3x4xf32>) -> tensor<2x9x4xf32>
  %6 = graph.concat %x, %x, %x {axis = 1 : i64} : (tensor<2x3x4xf32>, tensor<2x3x4xf32>, tensor<2x3x4xf32>) -> tensor<2x9x4xf32>
  // CHECK: graph.split %arg2 {axis = 2 : i64, sizes = array<i64: 1, 3>} : (tensor<2x3x4xf32>) -> (tensor<2x3x1xf32>, tensor<2x3x3xf32>)
  %7:2 = graph.split %x {axis = 2 : i64, sizes = array<i64: 1, 3>} : (tensor<2x3x4xf32>) -> (tensor<2x3x1xf32>, tensor<2x3x3xf32>)
  // CHECK: graph.slice %arg2 {offsets = array<i64: 1, 2, 0>, sizes = array<i64: 1, 2, 2>, strides = array<i64: 1, -1, 2>} : (tensor<2x3x4xf32>) -> tensor<1x2x2xf32>
  %8 = graph.slice %x {offsets = array<i64: 1, 2, 0>, sizes = array<i64: 1, 2, 2>, strides = array<i64: 1, -1, 2>} : (tensor<2x3x4xf32>) -> tensor<1x2x2xf32>
  return
}
