// Verifier and result-type errors of graph ops. An op whose result type
// does not match its inferred type is rejected; so are bad attributes.
// RUN: %dtc-opt %s -split-input-file -verify-diagnostics

func.func @f(%a: tensor<2x3xf32>, %b: tensor<3xf32>) {
  // expected-error @below {{'graph.add' op inferred type(s) 'tensor<2x3xf32>' are incompatible with return type(s) of operation 'tensor<3x3xf32>'}}
  // expected-error @below {{'graph.add' op failed to infer returned types}}
  %0 = graph.add %a, %b : (tensor<2x3xf32>, tensor<3xf32>) -> tensor<3x3xf32>
  return
}

// -----

func.func @f(%a: tensor<2x3xf32>, %b: tensor<4xf32>) {
  // expected-error @below {{shapes 2x3 and 4 do not broadcast}}
  // expected-error @below {{'graph.add' op failed to infer returned types}}
  %0 = graph.add %a, %b : (tensor<2x3xf32>, tensor<4xf32>) -> tensor<2x3xf32>
  return
}

// -----

func.func @f(%a: tensor<2x3xf32>, %b: tensor<3xi32>) {
  // expected-error @below {{'graph.mul' op requires the same element type for all operands}}
  %0 = graph.mul %a, %b : (tensor<2x3xf32>, tensor<3xi32>) -> tensor<2x3xf32>
  return
}

// -----

func.func @f(%a: tensor<2x3xf32>) {
  // expected-error @below {{'graph.less' op result #0 must be statically shaped tensor of 1-bit signless integer values, but got 'tensor<2x3xf32>'}}
  %0 = graph.less %a, %a : (tensor<2x3xf32>, tensor<2x3xf32>) -> tensor<2x3xf32>
  return
}

// -----

func.func @f(%a: tensor<2x3xf32>) {
  // expected-error @below {{'graph.relu' op requires the same type for all operands and results}}
  %0 = graph.relu %a : (tensor<2x3xf32>) -> tensor<3x2xf32>
  return
}

// -----

func.func @f(%a: tensor<2x3xi32>) {
  // expected-error @below {{'graph.exp' op operand #0 must be statically shaped tensor of floating-point values, but got 'tensor<2x3xi32>'}}
  %0 = graph.exp %a : (tensor<2x3xi32>) -> tensor<2x3xi32>
  return
}

// -----

func.func @f(%a: tensor<?x3xf32>) {
  // expected-error @below {{'graph.relu' op operand #0 must be statically shaped tensor of floating-point or integer values, but got 'tensor<?x3xf32>'}}
  %0 = graph.relu %a : (tensor<?x3xf32>) -> tensor<?x3xf32>
  return
}

// -----

func.func @f(%a: tensor<2x3xf32>) {
  // expected-error @below {{'graph.gelu' op approximate must be "none" or "tanh", got "fast"}}
  %0 = graph.gelu %a {approximate = "fast"} : (tensor<2x3xf32>) -> tensor<2x3xf32>
  return
}

// -----

func.func @f(%a: tensor<2x3xf32>) {
  // expected-error @below {{'graph.cast' op requires the same shape for all operands and results}}
  %0 = graph.cast %a : (tensor<2x3xf32>) -> tensor<3x2xi32>
  return
}

// -----

func.func @f(%c: tensor<2x3xf32>, %a: tensor<2x3xf32>) {
  // expected-error @below {{'graph.where' op operand #0 must be statically shaped tensor of 1-bit signless integer values, but got 'tensor<2x3xf32>'}}
  %0 = graph.where %c, %a, %a : (tensor<2x3xf32>, tensor<2x3xf32>, tensor<2x3xf32>) -> tensor<2x3xf32>
  return
}

// -----

func.func @f(%c: tensor<2x3xi1>, %a: tensor<2x3xf32>, %b: tensor<2x3xi32>) {
  // expected-error @below {{x and y element types differ: 'f32' vs 'i32'}}
  // expected-error @below {{'graph.where' op failed to infer returned types}}
  %0 = graph.where %c, %a, %b : (tensor<2x3xi1>, tensor<2x3xf32>, tensor<2x3xi32>) -> tensor<2x3xf32>
  return
}

// -----

func.func @f(%a: tensor<2x3xf32>) {
  // expected-error @below {{'graph.parameter' op result #0 must be statically shaped tensor of floating-point values, but got 'tensor<2x3xi32>'}}
  %0 = graph.parameter "w" : tensor<2x3xi32>
  return
}

// -----

func.func @f(%a: tensor<2x3xf32>) {
  // expected-error @below {{'graph.reshape' op cannot reshape 2x3 (6 elements) to 4x2 (8 elements)}}
  %0 = graph.reshape %a : (tensor<2x3xf32>) -> tensor<4x2xf32>
  return
}

// -----

func.func @f(%a: tensor<2x3xf32>) {
  // expected-error @below {{'graph.reshape' op reshape must keep the element type}}
  %0 = graph.reshape %a : (tensor<2x3xf32>) -> tensor<6xi32>
  return
}

// -----

func.func @f(%a: tensor<2x3xf32>, %b: tensor<4x5xf32>) {
  // expected-error @below {{matmul contraction sizes differ: 2x3 x 4x5 (3 vs 4)}}
  // expected-error @below {{'graph.matmul' op failed to infer returned types}}
  %0 = graph.matmul %a, %b : (tensor<2x3xf32>, tensor<4x5xf32>) -> tensor<2x5xf32>
  return
}

// -----

func.func @f(%a: tensor<2x3xf32>, %b: tensor<5x3xf32>) {
  // expected-error @below {{'graph.matmul' op inferred type(s) 'tensor<2x5xf32>' are incompatible with return type(s) of operation 'tensor<2x3xf32>'}}
  // expected-error @below {{'graph.matmul' op failed to infer returned types}}
  %0 = graph.matmul %a, %b {transpose_rhs = true} : (tensor<2x3xf32>, tensor<5x3xf32>) -> tensor<2x3xf32>
  return
}

// -----

func.func @f(%a: tensor<2x3x4xf32>) {
  // expected-error @below {{reduction axis 3 out of range for rank-3 input}}
  // expected-error @below {{'graph.reduce_sum' op failed to infer returned types}}
  %0 = graph.reduce_sum %a {axes = array<i64: 3>} : (tensor<2x3x4xf32>) -> tensor<2x3x4xf32>
  return
}

// -----

// Only a 16-bit float input may widen, and only to f32.
func.func @f(%a: tensor<2x3xf32>, %h: tensor<2x3xbf16>) {
  // expected-error @below {{'graph.reduce_sum' op inferred type(s) 'tensor<1x3xf32>' are incompatible with return type(s) of operation 'tensor<1x3xf64>'}}
  // expected-error @below {{'graph.reduce_sum' op failed to infer returned types}}
  %0 = graph.reduce_sum %a {axes = array<i64: 0>} : (tensor<2x3xf32>) -> tensor<1x3xf64>
  return
}

// -----

func.func @f(%h: tensor<2x3xbf16>) {
  // expected-error @below {{'graph.reduce_sum' op inferred type(s) 'tensor<1x3xbf16>' are incompatible with return type(s) of operation 'tensor<1x3xf64>'}}
  // expected-error @below {{'graph.reduce_sum' op failed to infer returned types}}
  %0 = graph.reduce_sum %h {axes = array<i64: 0>} : (tensor<2x3xbf16>) -> tensor<1x3xf64>
  return
}

// -----

func.func @f(%a: tensor<2x3x4xf32>) {
  // expected-error @below {{'graph.reduce_mean' op inferred type(s) 'tensor<2x4xf32>' are incompatible with return type(s) of operation 'tensor<2x1x4xf32>'}}
  // expected-error @below {{'graph.reduce_mean' op failed to infer returned types}}
  %0 = graph.reduce_mean %a {axes = array<i64: 1>, keepdims = false} : (tensor<2x3x4xf32>) -> tensor<2x1x4xf32>
  return
}

// -----

func.func @f(%a: tensor<2x3xf32>) {
  // expected-error @below {{axis 2 out of range for rank-2 input}}
  // expected-error @below {{'graph.softmax' op failed to infer returned types}}
  %0 = graph.softmax %a {axis = 2 : i64} : (tensor<2x3xf32>) -> tensor<2x3xf32>
  return
}

// -----

func.func @f(%a: tensor<2x3xf32>, %s: tensor<4xf32>) {
  // expected-error @below {{'graph.layer_norm_backward' op the scale must be 'tensor<3xf32>' (the normalised dims), got 'tensor<4xf32>'}}
  %0:3 = graph.layer_norm_backward %a, %s, %a {axis = 1 : i64} : (tensor<2x3xf32>, tensor<4xf32>, tensor<2x3xf32>) -> (tensor<2x3xf32>, tensor<2x1xf32>, tensor<2x1xf32>)
  return
}

// -----

func.func @f(%a: tensor<2x3xbf16>, %s: tensor<3xbf16>) {
  // expected-error @below {{'graph.layer_norm_backward' op mean and rstd must be 'tensor<2x1xf32>'}}
  %0:3 = graph.layer_norm_backward %a, %s, %a {axis = 1 : i64} : (tensor<2x3xbf16>, tensor<3xbf16>, tensor<2x3xbf16>) -> (tensor<2x3xbf16>, tensor<2x1xbf16>, tensor<2x1xbf16>)
  return
}

// -----

func.func @f(%a: tensor<2x3xf32>, %s: tensor<4xf32>) {
  // expected-error @below {{scale/bias shape 4 does not broadcast to the normalised shape 3}}
  // expected-error @below {{'graph.layer_norm' op failed to infer returned types}}
  %0 = graph.layer_norm %a, %s {axis = 1 : i64} : (tensor<2x3xf32>, tensor<4xf32>) -> tensor<2x3xf32>
  return
}

// -----

func.func @f(%a: tensor<2x3xf32>, %s: tensor<3xf32>) {
  // expected-error @below {{an rms layer_norm has no bias}}
  // expected-error @below {{'graph.layer_norm' op failed to infer returned types}}
  %0 = graph.layer_norm %a, %s, %s {axis = 1 : i64, rms} : (tensor<2x3xf32>, tensor<3xf32>, tensor<3xf32>) -> tensor<2x3xf32>
  return
}

// -----

func.func @f(%a: tensor<2x3xf32>, %s: tensor<1x3xf32>) {
  // expected-error @below {{an rms layer_norm's scale must have the normalised shape 3}}
  // expected-error @below {{'graph.layer_norm' op failed to infer returned types}}
  %0 = graph.layer_norm %a, %s {axis = 1 : i64, rms} : (tensor<2x3xf32>, tensor<1x3xf32>) -> tensor<2x3xf32>
  return
}

// -----

func.func @f(%x: tensor<2x5xbf16>, %l: tensor<5xi64>) {
  // expected-error @below {{'graph.cross_entropy' op labels 'tensor<5xi64>' must have the logits' shape without its last dim (the classes), got logits 'tensor<2x5xbf16>'}}
  %0:2 = graph.cross_entropy %x, %l : (tensor<2x5xbf16>, tensor<5xi64>) -> (tensor<5xf32>, tensor<5xf32>)
  return
}

// -----

func.func @f(%x: tensor<2x5xbf16>, %l: tensor<2xi32>) {
  // expected-error @below {{'graph.cross_entropy' op loss and lse must be 'tensor<2xf32>'}}
  %0:2 = graph.cross_entropy %x, %l : (tensor<2x5xbf16>, tensor<2xi32>) -> (tensor<2xbf16>, tensor<2xf32>)
  return
}

// -----

func.func @f(%x: tensor<2x3x5x5xf32>, %c: tensor<4xf32>) {
  // expected-error @below {{scale, bias, mean and variance must have shape 3 (the channel count), got 4}}
  // expected-error @below {{'graph.batch_norm' op failed to infer returned types}}
  %0 = graph.batch_norm %x, %c, %c, %c, %c : (tensor<2x3x5x5xf32>, tensor<4xf32>, tensor<4xf32>, tensor<4xf32>, tensor<4xf32>) -> tensor<2x3x5x5xf32>
  return
}

// -----

func.func @f(%a: tensor<1x3x8x8xf32>, %w: tensor<4x2x3x3xf32>) {
  // expected-error @below {{conv2d: input has 3 channels, weight 4x2x3x3 with 1 group(s) expects 2}}
  // expected-error @below {{'graph.conv2d' op failed to infer returned types}}
  %0 = graph.conv2d %a, %w {strides = array<i64: 1, 1>, pads = array<i64: 0, 0, 0, 0>, dilations = array<i64: 1, 1>} : (tensor<1x3x8x8xf32>, tensor<4x2x3x3xf32>) -> tensor<1x4x6x6xf32>
  return
}

// -----

func.func @f(%a: tensor<1x3x8x8xf32>, %w: tensor<4x3x3x3xf32>) {
  // expected-error @below {{'graph.conv2d' op inferred type(s) 'tensor<1x4x4x4xf32>' are incompatible with return type(s) of operation 'tensor<1x4x8x8xf32>'}}
  // expected-error @below {{'graph.conv2d' op failed to infer returned types}}
  %0 = graph.conv2d %a, %w {strides = array<i64: 2, 2>, pads = array<i64: 1, 1, 1, 1>, dilations = array<i64: 1, 1>} : (tensor<1x3x8x8xf32>, tensor<4x3x3x3xf32>) -> tensor<1x4x8x8xf32>
  return
}

// -----

func.func @f(%a: tensor<1x3x9x9xf32>) {
  // expected-error @below {{'graph.max_pool2d' op inferred type(s) 'tensor<1x3x4x4xf32>' are incompatible with return type(s) of operation 'tensor<1x3x5x5xf32>'}}
  // expected-error @below {{'graph.max_pool2d' op failed to infer returned types}}
  %0 = graph.max_pool2d %a {kernel = array<i64: 2, 2>, strides = array<i64: 2, 2>, pads = array<i64: 0, 0, 0, 0>, dilations = array<i64: 1, 1>} : (tensor<1x3x9x9xf32>) -> tensor<1x3x5x5xf32>
  return
}

// -----

func.func @f(%a: tensor<1x3x3x3xf32>) {
  // expected-error @below {{pooling window (kernel 4, stride 1, dilation 1, pads 0/0) does not fit input size 3}}
  // expected-error @below {{'graph.avg_pool2d' op failed to infer returned types}}
  %0 = graph.avg_pool2d %a {kernel = array<i64: 4, 4>, strides = array<i64: 1, 1>, pads = array<i64: 0, 0, 0, 0>, dilations = array<i64: 1, 1>} : (tensor<1x3x3x3xf32>) -> tensor<1x3x1x1xf32>
  return
}

// -----

func.func @f(%a: tensor<2x3xf32>, %i: tensor<4xi64>) {
  // expected-error @below {{axis 2 out of range for rank-2 input}}
  // expected-error @below {{'graph.gather' op failed to infer returned types}}
  %0 = graph.gather %a, %i {axis = 2 : i64} : (tensor<2x3xf32>, tensor<4xi64>) -> tensor<2x4xf32>
  return
}

// -----

func.func @f(%a: tensor<2x3xf32>, %i: tensor<4xi64>) {
  // expected-error @below {{'graph.gather' op inferred type(s) 'tensor<2x4xf32>' are incompatible with return type(s) of operation 'tensor<2x3xf32>'}}
  // expected-error @below {{'graph.gather' op failed to infer returned types}}
  %0 = graph.gather %a, %i {axis = 1 : i64} : (tensor<2x3xf32>, tensor<4xi64>) -> tensor<2x3xf32>
  return
}

// -----

func.func @f(%a: tensor<2x3xf32>) {
  // expected-error @below {{cannot squeeze axis 0 of size 2 (shape 2x3)}}
  // expected-error @below {{'graph.squeeze' op failed to infer returned types}}
  %0 = graph.squeeze %a {axes = array<i64: 0>} : (tensor<2x3xf32>) -> tensor<3xf32>
  return
}

// -----

func.func @f(%a: tensor<2x3xf32>) {
  // expected-error @below {{'graph.unsqueeze' op inferred type(s) 'tensor<2x1x3xf32>' are incompatible with return type(s) of operation 'tensor<1x2x3xf32>'}}
  // expected-error @below {{'graph.unsqueeze' op failed to infer returned types}}
  %0 = graph.unsqueeze %a {axes = array<i64: 1>} : (tensor<2x3xf32>) -> tensor<1x2x3xf32>
  return
}

// -----

func.func @f(%a: tensor<2x3xf32>) {
  // expected-error @below {{perm is not a permutation of 0..1}}
  // expected-error @below {{'graph.transpose' op failed to infer returned types}}
  %0 = graph.transpose %a {perm = array<i64: 0, 0>} : (tensor<2x3xf32>) -> tensor<2x2xf32>
  return
}

// -----

func.func @f(%a: tensor<2x3xf32>) {
  // expected-error @below {{'graph.transpose' op inferred type(s) 'tensor<3x2xf32>' are incompatible with return type(s) of operation 'tensor<2x3xf32>'}}
  // expected-error @below {{'graph.transpose' op failed to infer returned types}}
  %0 = graph.transpose %a {perm = array<i64: 1, 0>} : (tensor<2x3xf32>) -> tensor<2x3xf32>
  return
}

// -----

func.func @f(%a: tensor<3x1xf32>) {
  // expected-error @below {{cannot broadcast 3x1 to 2x2}}
  // expected-error @below {{'graph.broadcast' op failed to infer returned types}}
  %0 = graph.broadcast %a {shape = array<i64: 2, 2>} : (tensor<3x1xf32>) -> tensor<3x2xf32>
  return
}

// -----

func.func @f(%a: tensor<2x3xf32>, %b: tensor<2x4xf32>) {
  // expected-error @below {{cannot concat 2x3 and 2x4 on axis 0}}
  // expected-error @below {{'graph.concat' op failed to infer returned types}}
  %0 = graph.concat %a, %b {axis = 0 : i64} : (tensor<2x3xf32>, tensor<2x4xf32>) -> tensor<4x3xf32>
  return
}

// -----

func.func @f(%a: tensor<2x3xf32>) {
  // expected-error @below {{'graph.concat' op inferred type(s) 'tensor<2x6xf32>' are incompatible with return type(s) of operation 'tensor<4x3xf32>'}}
  // expected-error @below {{'graph.concat' op failed to infer returned types}}
  %0 = graph.concat %a, %a {axis = 1 : i64} : (tensor<2x3xf32>, tensor<2x3xf32>) -> tensor<4x3xf32>
  return
}

// -----

func.func @f(%a: tensor<2x3xf32>) {
  // expected-error @below {{split sizes add up to 2 but axis 1 has size 3}}
  // expected-error @below {{'graph.split' op failed to infer returned types}}
  %0:2 = graph.split %a {axis = 1 : i64, sizes = array<i64: 1, 1>} : (tensor<2x3xf32>) -> (tensor<2x1xf32>, tensor<2x1xf32>)
  return
}

// -----

func.func @f(%a: tensor<2x3xf32>) {
  // expected-error @below {{slice dim 1 reads outside [0, 3)}}
  // expected-error @below {{'graph.slice' op failed to infer returned types}}
  %0 = graph.slice %a {offsets = array<i64: 0, 2>, sizes = array<i64: 2, 2>, strides = array<i64: 1, 1>} : (tensor<2x3xf32>) -> tensor<2x2xf32>
  return
}

// -----

func.func @f(%a: tensor<3xf32>) {
  // expected-error @below {{trilu needs rank >= 2, got rank 1}}
  // expected-error @below {{'graph.trilu' op failed to infer returned types}}
  %0 = graph.trilu %a {upper = true} : (tensor<3xf32>) -> tensor<3xf32>
  return
}

// -----

// Gradient ops state their result shape; the forward rule checks it.
func.func @f(%g: tensor<1x4x3x3xf32>, %w: tensor<4x2x3x3xf32>) {
  // expected-error @below {{'graph.conv2d_backward_input' op expects grad_output of type 'tensor<1x4x4x4xf32>' for this result, got 'tensor<1x4x3x3xf32>'}}
  %0 = graph.conv2d_backward_input %g, %w {strides = array<i64: 1, 1>, pads = array<i64: 0, 0, 0, 0>, dilations = array<i64: 1, 1>} : (tensor<1x4x3x3xf32>, tensor<4x2x3x3xf32>) -> tensor<1x2x6x6xf32>
  return
}

// -----

func.func @f(%x: tensor<1x2x6x6xf32>, %g: tensor<1x4x4x4xf32>) {
  // expected-error @below {{conv2d: input has 2 channels, weight 4x3x3x3 with 1 group(s) expects 3}}
  // expected-error @below {{'graph.conv2d_backward_weight' op the result does not fit the forward op's attributes}}
  %0 = graph.conv2d_backward_weight %x, %g {strides = array<i64: 1, 1>, pads = array<i64: 0, 0, 0, 0>, dilations = array<i64: 1, 1>} : (tensor<1x2x6x6xf32>, tensor<1x4x4x4xf32>) -> tensor<4x3x3x3xf32>
  return
}

// -----

func.func @f(%x: tensor<1x2x6x6xf32>, %g: tensor<1x2x2x2xf32>) {
  // expected-error @below {{'graph.max_pool2d_backward' op expects grad_output of type 'tensor<1x2x3x3xf32>' for this result, got 'tensor<1x2x2x2xf32>'}}
  %0 = graph.max_pool2d_backward %x, %g {kernel = array<i64: 2, 2>, strides = array<i64: 2, 2>, pads = array<i64: 0, 0, 0, 0>, dilations = array<i64: 1, 1>} : (tensor<1x2x6x6xf32>, tensor<1x2x2x2xf32>) -> tensor<1x2x6x6xf32>
  return
}

// -----

func.func @f(%u: tensor<3x4xf32>, %i: tensor<2xi64>) {
  // expected-error @below {{'graph.scatter_add' op expects updates of type 'tensor<2x4xf32>' for this result, got 'tensor<3x4xf32>'}}
  %0 = graph.scatter_add %u, %i {axis = 0 : i64} : (tensor<3x4xf32>, tensor<2xi64>) -> tensor<5x4xf32>
  return
}

// -----

// bf16 updates may add into f32, not f32 updates into bf16.
func.func @f(%u: tensor<2x4xf32>, %i: tensor<2xi64>) {
  // expected-error @below {{'graph.scatter_add' op expects updates of type 'tensor<2x4xbf16>' for this result, got 'tensor<2x4xf32>'}}
  %0 = graph.scatter_add %u, %i {axis = 0 : i64} : (tensor<2x4xf32>, tensor<2xi64>) -> tensor<5x4xbf16>
  return
}

// -----

func.func @f(%u: tensor<3x4xbf16>, %i: tensor<2xi64>) {
  // expected-error @below {{'graph.scatter_add' op expects updates of type 'tensor<2x4xf32>' for this result, got 'tensor<3x4xbf16>'}}
  %0 = graph.scatter_add %u, %i {axis = 0 : i64} : (tensor<3x4xbf16>, tensor<2xi64>) -> tensor<5x4xf32>
  return
}

// -----

// A required attribute left out is the op's own verifier's error (the
// result-type rules never see the op without it).
func.func @f(%a: tensor<2x3xf32>) {
  // expected-error @below {{'graph.softmax' op requires attribute 'axis'}}
  %0 = "graph.softmax"(%a) : (tensor<2x3xf32>) -> tensor<2x3xf32>
  return
}

// -----

func.func @f(%a: tensor<2x3xf32>) {
  // expected-error @below {{top_k k = 4 must be in [1, 3]}}
  // expected-error @below {{'graph.top_k' op failed to infer returned types}}
  %0 = graph.top_k %a {axis = 1 : i64, k = 4 : i64, largest = true} : (tensor<2x3xf32>) -> tensor<2x4xi64>
  return
}

// -----

func.func @f(%q: tensor<2x4x8xf32>, %k: tensor<2x5x6xf32>, %v: tensor<2x5x8xf32>) {
  // expected-error @below {{attention's shapes do not fit q [..., H, Sq, D], k [..., G, Sk, D], v [..., G, Sk, Dv] with G dividing H: 2x4x8, 2x5x6, 2x5x8}}
  // expected-error @below {{'graph.attention' op failed to infer returned types}}
  %o, %l = graph.attention %q, %k, %v {scale = 1.0 : f64} : (tensor<2x4x8xf32>, tensor<2x5x6xf32>, tensor<2x5x8xf32>) -> (tensor<2x4x8xf32>, tensor<2x4xf32>)
  return
}

// -----

func.func @f(%q: tensor<2x4x8xf32>, %k: tensor<2x5x8xf32>, %v: tensor<2x5x8xf32>) {
  // expected-error @below {{'graph.attention' op scale must be positive and finite, got 0}}
  %o, %l = graph.attention %q, %k, %v {scale = 0.0 : f64} : (tensor<2x4x8xf32>, tensor<2x5x8xf32>, tensor<2x5x8xf32>) -> (tensor<2x4x8xf32>, tensor<2x4xf32>)
  return
}

// -----

func.func @f(%x: tensor<4x8xf32>, %w: tensor<8x16xf32>, %b: tensor<16xf32>) {
  // expected-error @below {{'graph.matmul_bias' op keeps its preactivation only with gelu_tanh, not relu}}
  %y, %p = graph.matmul_bias %x, %w, %b {activation = "relu", keep_preactivation} : (tensor<4x8xf32>, tensor<8x16xf32>, tensor<16xf32>) -> (tensor<4x16xf32>, tensor<4x16xf32>)
  return
}

// -----

// A bias must be f32 of q's rank, broadcasting to the scores [..., Sq, Sk].
func.func @f(%q: tensor<2x4x8xf32>, %k: tensor<2x5x8xf32>, %v: tensor<2x5x8xf32>, %b: tensor<4x5xf32>) {
  // expected-error @below {{'graph.attention' op bias must be f32 of q's rank (3), got 'tensor<4x5xf32>'}}
  %o, %l = graph.attention %q, %k, %v, %b {scale = 1.0 : f64} : (tensor<2x4x8xf32>, tensor<2x5x8xf32>, tensor<2x5x8xf32>, tensor<4x5xf32>) -> (tensor<2x4x8xf32>, tensor<2x4xf32>)
  return
}

// -----

func.func @f(%q: tensor<2x4x8xf32>, %k: tensor<2x5x8xf32>, %v: tensor<2x5x8xf32>, %b: tensor<1x3x5xf32>) {
  // expected-error @below {{'graph.attention' op bias 'tensor<1x3x5xf32>' does not broadcast to the scores}}
  %o, %l = graph.attention %q, %k, %v, %b {scale = 1.0 : f64} : (tensor<2x4x8xf32>, tensor<2x5x8xf32>, tensor<2x5x8xf32>, tensor<1x3x5xf32>) -> (tensor<2x4x8xf32>, tensor<2x4xf32>)
  return
}

// -----

func.func @f(%q: tensor<2x4x3x2x8xf32>, %k: tensor<2x4x3x2x8xf32>) {
  // expected-error @below {{a packed attention's q, k and v are one bshd value [..., S, 3, H, D], got 2x4x3x2x8, 2x4x3x2x8, 2x4x3x2x8}}
  // expected-error @below {{'graph.attention' op failed to infer returned types}}
  %o, %l = graph.attention %q, %k, %q {bshd, packed, scale = 1.0 : f64} : (tensor<2x4x3x2x8xf32>, tensor<2x4x3x2x8xf32>, tensor<2x4x3x2x8xf32>) -> (tensor<2x4x2x8xf32>, tensor<2x2x4xf32>)
  return
}

// -----

func.func @f(%q: tensor<2x4x3x2x8xf32>) {
  // expected-error @below {{a packed attention's q, k and v are one bshd value [..., S, H, 3, D], got 2x4x3x2x8, 2x4x3x2x8, 2x4x3x2x8}}
  // expected-error @below {{'graph.attention' op failed to infer returned types}}
  %o, %l = graph.attention %q, %q, %q {bshd, packed, interleaved, scale = 1.0 : f64} : (tensor<2x4x3x2x8xf32>, tensor<2x4x3x2x8xf32>, tensor<2x4x3x2x8xf32>) -> (tensor<2x4x3x8xf32>, tensor<2x3x4xf32>)
  return
}

// -----

func.func @f(%q: tensor<2x4x8xf32>) {
  // expected-error @below {{an interleaved attention is packed}}
  // expected-error @below {{'graph.attention' op failed to infer returned types}}
  %o, %l = graph.attention %q, %q, %q {interleaved, scale = 1.0 : f64} : (tensor<2x4x8xf32>, tensor<2x4x8xf32>, tensor<2x4x8xf32>) -> (tensor<2x4x8xf32>, tensor<2x4xf32>)
  return
}

// -----

func.func @f(%p: tensor<2x4x3x2x8xf32>, %o: tensor<2x4x2x8xf32>, %l: tensor<2x2x4xf32>) {
  // expected-error @below {{'graph.attention_backward' op has one result, the packed q, k and v's gradient, of their type}}
  %a, %c, %d = graph.attention_backward %p, %p, %p, %o, %l, %o {bshd, packed, scale = 1.0 : f64} : (tensor<2x4x3x2x8xf32>, tensor<2x4x3x2x8xf32>, tensor<2x4x3x2x8xf32>, tensor<2x4x2x8xf32>, tensor<2x2x4xf32>, tensor<2x4x2x8xf32>) -> (tensor<2x4x2x8xf32>, tensor<2x4x2x8xf32>, tensor<2x4x2x8xf32>)
  return
}

// -----

func.func @f(%q: tensor<2x4x8xf32>, %k: tensor<2x5x8xf32>, %v: tensor<2x5x8xf32>, %o: tensor<2x4x8xf32>, %l: tensor<2x4xf32>, %b: tensor<2x1x4xf32>) {
  // expected-error @below {{'graph.attention_backward' op bias must end in the keys' count 5, got 'tensor<2x1x4xf32>'}}
  %a, %c, %d = graph.attention_backward %q, %k, %v, %o, %l, %o, %b {scale = 1.0 : f64} : (tensor<2x4x8xf32>, tensor<2x5x8xf32>, tensor<2x5x8xf32>, tensor<2x4x8xf32>, tensor<2x4xf32>, tensor<2x4x8xf32>, tensor<2x1x4xf32>) -> (tensor<2x4x8xf32>, tensor<2x5x8xf32>, tensor<2x5x8xf32>)
  return
}

// -----

// The log-sum-exp is f32 whatever q's type.
func.func @f(%q: tensor<2x4x8xbf16>, %k: tensor<2x5x8xbf16>, %v: tensor<2x5x8xbf16>) {
  // expected-error @below {{'graph.attention' op inferred type(s) 'tensor<2x4x8xbf16>', 'tensor<2x4xf32>' are incompatible with return type(s) of operation 'tensor<2x4x8xbf16>', 'tensor<2x4xbf16>'}}
  // expected-error @below {{'graph.attention' op failed to infer returned types}}
  %o, %l = graph.attention %q, %k, %v {scale = 1.0 : f64} : (tensor<2x4x8xbf16>, tensor<2x5x8xbf16>, tensor<2x5x8xbf16>) -> (tensor<2x4x8xbf16>, tensor<2x4xbf16>)
  return
}

// -----

func.func @f(%q: tensor<2x4x8xf32>, %k: tensor<2x5x8xf32>, %v: tensor<2x5x8xf32>, %o: tensor<2x4x8xf32>, %l: tensor<2x4xbf16>) {
  // expected-error @below {{'graph.attention_backward' op lse must be 'tensor<2x4xf32>'}}
  %a, %b, %c = graph.attention_backward %q, %k, %v, %o, %l, %o {scale = 1.0 : f64} : (tensor<2x4x8xf32>, tensor<2x5x8xf32>, tensor<2x5x8xf32>, tensor<2x4x8xf32>, tensor<2x4xbf16>, tensor<2x4x8xf32>) -> (tensor<2x4x8xf32>, tensor<2x5x8xf32>, tensor<2x5x8xf32>)
  return
}

// -----

func.func @f(%a: tensor<4xf32>) {
  // expected-error @below {{'graph.fused' op results must have one shape (one loop writes them all), got 'tensor<4xf32>', 'tensor<2x2xf32>'}}
  %0:2 = graph.fused %a : (tensor<4xf32>) -> (tensor<4xf32>, tensor<2x2xf32>) {
  ^bb0(%x: tensor<4xf32>):
    %r = graph.reshape %x {shape = array<i64: 2, 2>} : (tensor<4xf32>) -> tensor<2x2xf32>
    graph.yield %x, %r : tensor<4xf32>, tensor<2x2xf32>
  }
  return
}

// -----

func.func @f(%a: tensor<4xf32>) {
  // expected-error @below {{'graph.fused' op yields 'tensor<4xf32>' but the results are 'tensor<4xf32>', 'tensor<4xf32>'}}
  %0:2 = graph.fused %a : (tensor<4xf32>) -> (tensor<4xf32>, tensor<4xf32>) {
  ^bb0(%x: tensor<4xf32>):
    %n = graph.neg %x : (tensor<4xf32>) -> tensor<4xf32>
    graph.yield %n : tensor<4xf32>
  }
  return
}

// -----

func.func @f(%q: tensor<4x8xf32>) {
  // expected-error @below {{attention's q, k and v need one rank >= 3, got 4x8, 4x8, 4x8}}
  // expected-error @below {{'graph.attention' op failed to infer returned types}}
  %o, %l = graph.attention %q, %q, %q {bshd, scale = 0.5 : f64} : (tensor<4x8xf32>, tensor<4x8xf32>, tensor<4x8xf32>) -> (tensor<4x8xf32>, tensor<4xf32>)
  return
}

// -----

func.func @f(%q: tensor<2x4x3x8xf32>, %k: tensor<2x5x2x8xf32>) {
  // expected-error @below {{attention's shapes do not fit q [..., H, Sq, D], k [..., G, Sk, D], v [..., G, Sk, Dv] with G dividing H (bshd: [..., S, H, D]): 2x4x3x8, 2x5x2x8, 2x5x2x8}}
  // expected-error @below {{'graph.attention' op failed to infer returned types}}
  %o, %l = graph.attention %q, %k, %k {bshd, scale = 0.5 : f64} : (tensor<2x4x3x8xf32>, tensor<2x5x2x8xf32>, tensor<2x5x2x8xf32>) -> (tensor<2x4x3x8xf32>, tensor<2x3x4xf32>)
  return
}

// -----

func.func @f(%x: tensor<4x8xf32>, %w: tensor<8x8xf32>, %b: tensor<8xf32>) {
  // expected-error @below {{'graph.matmul_bias' op an addend must have the output's type 'tensor<4x8xf32>' and the product no activation}}
  %y = graph.matmul_bias %x, %w, %b, %x {activation = "relu"} : (tensor<4x8xf32>, tensor<8x8xf32>, tensor<8xf32>, tensor<4x8xf32>) -> tensor<4x8xf32>
  return
}

// -----

mesh.mesh @mesh(shape = 2)
func.func @f(%a: tensor<4xf32>, %b: tensor<4xf32>) {
  %0:2 = graph.bucket %a, %b : (tensor<4xf32>, tensor<4xf32>) -> (tensor<4xf32>, tensor<8xf32>) {
  ^bb0(%x: tensor<4xf32>, %y: tensor<4xf32>):
    %r = mesh.all_reduce %x on @mesh mesh_axes = [0] : tensor<4xf32> -> tensor<4xf32>
    // expected-error @below {{'mesh.all_gather' op cannot be in this graph.bucket: 'mesh.all_gather' after 'mesh.all_reduce': one kind of collective a bucket}}
    %g = mesh.all_gather %y on @mesh mesh_axes = [0] gather_axis = 0 : tensor<4xf32> -> tensor<8xf32>
    graph.yield %r, %g : tensor<4xf32>, tensor<8xf32>
  }
  return
}

// -----

mesh.mesh @mesh(shape = 2)
func.func @f(%a: tensor<4xf32>, %b: tensor<4xf32>) {
  %0:2 = graph.bucket %a, %b : (tensor<4xf32>, tensor<4xf32>) -> (tensor<4xf32>, tensor<4xf32>) {
  ^bb0(%x: tensor<4xf32>, %y: tensor<4xf32>):
    // expected-error @below {{'mesh.all_reduce' op member 0 of graph.bucket must read argument 0 and be yielded as result 0}}
    %r = mesh.all_reduce %y on @mesh mesh_axes = [0] : tensor<4xf32> -> tensor<4xf32>
    %s = mesh.all_reduce %x on @mesh mesh_axes = [0] : tensor<4xf32> -> tensor<4xf32>
    graph.yield %r, %s : tensor<4xf32>, tensor<4xf32>
  }
  return
}
