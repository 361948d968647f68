// RUN: %dtc-opt %s --pass-pipeline='builtin.module(func.func(dtc-assign-buffers),dtc-outline-kernels,dtc-batch-kernels)' | FileCheck %s
// RUN: %dtc-opt %s --pass-pipeline='builtin.module(func.func(dtc-assign-buffers),dtc-outline-kernels,dtc-batch-kernels,dtc-kernels-to-ptx{chips=sm_90})' > %t.mlir
// RUN: FileCheck %s --check-prefix=PTX < %t.mlir
// RUN: %ptxas %t.mlir | FileCheck %s --check-prefix=ASSEMBLED
// REQUIRES: ptxas

// Two independent updates reading one learning rate: one kernel, a loop
// over 768 threads (8 elements in the first block, 300 in the next two),
// a thread picking its update by comparing its index with 256; the rate
// is one argument. The last op names the kernel and counts the batch, the
// first launches nothing. The third update's result is placed where the
// rate was (dead after the second): run beside them it would overwrite
// what they read, so it keeps its own kernel.
// CHECK-LABEL: func.func @adam
// CHECK: graph.fused {{.*}}{dtc.batched,
// CHECK: graph.fused {{.*}}{dtc.batch = 2 : i64, dtc.kernel = @dtc_kernels::@batch_0,
// CHECK: graph.fused {{.*}}{dtc.kernel = @dtc_kernels::@kernel_2,
func.func @adam(%g0: tensor<8xf32>, %g1: tensor<300xf32>, %g2: tensor<4x8xf32>, %lr: tensor<f32>) -> (tensor<8xf32>, tensor<300xf32>, tensor<4x8xf32>, tensor<8xf32>, tensor<300xf32>) {
  %p0 = graph.parameter "w0" : tensor<8xf32>
  %p1 = graph.parameter "w1" : tensor<300xf32>
  %p2 = graph.parameter "w2" : tensor<4x8xf32>
  %b2 = graph.parameter "b2" : tensor<8xf32>
  %n0 = graph.fused %p0, %g0, %lr : (tensor<8xf32>, tensor<8xf32>, tensor<f32>) -> tensor<8xf32> {
  ^bb0(%p: tensor<8xf32>, %g: tensor<8xf32>, %l: tensor<f32>):
    %s = graph.mul %g, %l : (tensor<8xf32>, tensor<f32>) -> tensor<8xf32>
    %n = graph.sub %p, %s : (tensor<8xf32>, tensor<8xf32>) -> tensor<8xf32>
    graph.yield %n : tensor<8xf32>
  }
  %n1 = graph.fused %p1, %g1, %lr : (tensor<300xf32>, tensor<300xf32>, tensor<f32>) -> tensor<300xf32> {
  ^bb0(%p: tensor<300xf32>, %g: tensor<300xf32>, %l: tensor<f32>):
    %s = graph.mul %g, %l : (tensor<300xf32>, tensor<f32>) -> tensor<300xf32>
    %e = graph.exp %s : (tensor<300xf32>) -> tensor<300xf32>
    %n = graph.sub %p, %e : (tensor<300xf32>, tensor<300xf32>) -> tensor<300xf32>
    graph.yield %n : tensor<300xf32>
  }
  %n2 = graph.fused %p2, %g2, %b2 : (tensor<4x8xf32>, tensor<4x8xf32>, tensor<8xf32>) -> tensor<4x8xf32> {
  ^bb0(%p: tensor<4x8xf32>, %g: tensor<4x8xf32>, %b: tensor<8xf32>):
    %s = graph.mul %g, %b : (tensor<4x8xf32>, tensor<8xf32>) -> tensor<4x8xf32>
    %n = graph.sub %p, %s : (tensor<4x8xf32>, tensor<4x8xf32>) -> tensor<4x8xf32>
    graph.yield %n : tensor<4x8xf32>
  }
  return %n0, %n1, %n2, %g0, %g1 : tensor<8xf32>, tensor<300xf32>, tensor<4x8xf32>, tensor<8xf32>, tensor<300xf32>
}

// An elementwise op reading another's result (through a view) waits for
// it: the run starts again there, and an independent op joins it.
// CHECK-LABEL: func.func @dependent
// CHECK: graph.fused {{.*}}{dtc.kernel = @dtc_kernels::@kernel_
// CHECK: graph.fused {{.*}}{dtc.batched,
// CHECK: graph.fused {{.*}}{dtc.batch = 2 : i64, dtc.kernel = @dtc_kernels::@batch_1,
func.func @dependent(%x: tensor<8xf32>, %y: tensor<4x4xf32>) -> (tensor<2x4xf32>, tensor<4x4xf32>, tensor<8xf32>) {
  %a = graph.fused %x : (tensor<8xf32>) -> tensor<8xf32> {
  ^bb0(%v: tensor<8xf32>):
    %e = graph.exp %v : (tensor<8xf32>) -> tensor<8xf32>
    graph.yield %e : tensor<8xf32>
  }
  %r = graph.reshape %a : (tensor<8xf32>) -> tensor<2x4xf32>
  %b = graph.fused %r : (tensor<2x4xf32>) -> tensor<2x4xf32> {
  ^bb0(%v: tensor<2x4xf32>):
    %n = graph.neg %v : (tensor<2x4xf32>) -> tensor<2x4xf32>
    graph.yield %n : tensor<2x4xf32>
  }
  %d = graph.fused %y : (tensor<4x4xf32>) -> tensor<4x4xf32> {
  ^bb0(%v: tensor<4x4xf32>):
    %e = graph.exp %v : (tensor<4x4xf32>) -> tensor<4x4xf32>
    graph.yield %e : tensor<4x4xf32>
  }
  return %b, %d, %a : tensor<2x4xf32>, tensor<4x4xf32>, tensor<8xf32>
}

// Ops of different parts of the step (the per-micro-batch part, the once
// per step) run at different times: no batch across them.
// CHECK-LABEL: func.func @parts
// CHECK-NOT: dtc.batch
// CHECK: return
func.func @parts(%x: tensor<8xf32>, %y: tensor<8xf32>) -> (tensor<8xf32>, tensor<8xf32>, tensor<8xf32>, tensor<8xf32>) {
  %a = graph.fused %x : (tensor<8xf32>) -> tensor<8xf32> {
  ^bb0(%v: tensor<8xf32>):
    %e = graph.exp %v : (tensor<8xf32>) -> tensor<8xf32>
    graph.yield %e : tensor<8xf32>
  }
  %b = graph.fused %y {dtc.once_per_step} : (tensor<8xf32>) -> tensor<8xf32> {
  ^bb0(%v: tensor<8xf32>):
    %n = graph.neg %v : (tensor<8xf32>) -> tensor<8xf32>
    graph.yield %n : tensor<8xf32>
  }
  return %a, %b, %x, %y : tensor<8xf32>, tensor<8xf32>, tensor<8xf32>, tensor<8xf32>
}

// A layer norm's two gradient sums (loop kernels: a thread per output
// folding its column) side by side are one launch too; each member's loop
// body runs for its thread, its constants with it.
// CHECK-LABEL: func.func @sums
// CHECK: graph.reduce_sum {{.*}}dtc.batched
// CHECK: graph.reduce_sum {{.*}}dtc.batch = 2 : i64, dtc.kernel = @dtc_kernels::@batch_2
func.func @sums(%a: tensor<2x1x32xf32>, %b: tensor<2x1x32xf32>) -> (tensor<1x1x32xf32>, tensor<1x1x32xf32>, tensor<2x1x32xf32>, tensor<2x1x32xf32>) {
  %r = graph.reduce_sum %a {axes = array<i64: 0>, keepdims = true} : (tensor<2x1x32xf32>) -> tensor<1x1x32xf32>
  %s = graph.reduce_sum %b {axes = array<i64: 0>, keepdims = true} : (tensor<2x1x32xf32>) -> tensor<1x1x32xf32>
  return %r, %s, %a, %b : tensor<1x1x32xf32>, tensor<1x1x32xf32>, tensor<2x1x32xf32>, tensor<2x1x32xf32>
}

// Long sums split over threads add atomically into outputs the runtime
// zeroes first: two of them are one launch whose outputs are all zeroed;
// a kernel whose outputs are not (the exp) is not in it.
// CHECK-LABEL: func.func @atomic_sums
// CHECK: graph.reduce_sum {{.*}}dtc.batched
// CHECK: graph.reduce_sum {{.*}}dtc.batch = 2 : i64, dtc.kernel = @dtc_kernels::@batch_3
// CHECK: graph.fused {{.*}}{dtc.kernel = @dtc_kernels::@kernel_
func.func @atomic_sums(%a: tensor<3000x40xf32>, %b: tensor<3000x40xf32>, %c: tensor<40xf32>) -> (tensor<1x40xf32>, tensor<1x40xf32>, tensor<40xf32>, tensor<3000x40xf32>, tensor<3000x40xf32>, tensor<40xf32>) {
  %r = graph.reduce_sum %a {axes = array<i64: 0>} : (tensor<3000x40xf32>) -> tensor<1x40xf32>
  %s = graph.reduce_sum %b {axes = array<i64: 0>} : (tensor<3000x40xf32>) -> tensor<1x40xf32>
  %e = graph.fused %c : (tensor<40xf32>) -> tensor<40xf32> {
  ^bb0(%v: tensor<40xf32>):
    %x = graph.exp %v : (tensor<40xf32>) -> tensor<40xf32>
    graph.yield %x : tensor<40xf32>
  }
  return %r, %s, %e, %a, %b, %c : tensor<1x40xf32>, tensor<1x40xf32>, tensor<40xf32>, tensor<3000x40xf32>, tensor<3000x40xf32>, tensor<40xf32>
}

// The batch's kernel: each distinct buffer one argument (the rate once),
// which of the batch's operands each is (the members' inputs, then their
// outputs: operand 5, the second's rate, is the first's), the members'
// threads end to end.
// CHECK: module @dtc_kernels
// CHECK-NOT: func.func @kernel_0(
// CHECK-NOT: func.func @kernel_1(
// CHECK: func.func @batch_0(%arg0: memref<8xf32>, %arg1: memref<8xf32>, %arg2: memref<1xf32>, %arg3: memref<300xf32>, %arg4: memref<300xf32>, %arg5: memref<8xf32>, %arg6: memref<300xf32>)
// CHECK-SAME: dtc.batch_operands = array<i64: 0, 1, 2, 3, 4, 6, 7>, dtc.threads = 768
// CHECK: scf.parallel (%[[T:.*]]) = (%c0) to (%c768) step (%c1)
// CHECK: arith.cmpi ult, %[[T]], %c256
// CHECK: scf.if
// CHECK: arith.cmpi ult, %{{.*}}, %c8
// CHECK: memref.store {{.*}}, %arg5
// CHECK: } else {
// CHECK: arith.cmpi ult, %{{.*}}, %c300
// CHECK: math.exp
// CHECK: memref.store {{.*}}, %arg6
// CHECK: func.func @batch_1(
// CHECK: func.func @batch_2(%arg0: memref<64xf32>, %arg1: memref<64xf32>, %arg2: memref<32xf32>, %arg3: memref<32xf32>)
// CHECK-SAME: dtc.threads = 512
// CHECK: scf.for
// CHECK: memref.load %arg0
// CHECK: memref.store {{.*}}, %arg2
// CHECK: } else {
// CHECK: scf.for
// CHECK: memref.load %arg1
// CHECK: memref.store {{.*}}, %arg3
// CHECK: func.func @batch_3(
// CHECK-SAME: dtc.zero_outputs
// CHECK: memref.atomic_rmw addf
// CHECK: memref.atomic_rmw addf

// One launch of 3 blocks of 256 threads; ptxas assembles it.
// PTX: func.func @batch_0
// PTX-SAME: dtc.launch = array<i64: 3, 256>
// ASSEMBLED: assembled {{[0-9]+}} kernels: sm_90
