// RUN: %dtc-opt %s --pass-pipeline='builtin.module(func.func(dtc-fuse-elementwise),dtc-outline-kernels)' | FileCheck %s --check-prefix=KERNEL
// RUN: %dtc-opt %s --pass-pipeline='builtin.module(func.func(dtc-fuse-elementwise),dtc-outline-kernels,dtc-kernels-to-ptx)' > %t.mlir
// RUN: FileCheck %s --check-prefix=PTX < %t.mlir
// RUN: %ptxas %t.mlir | FileCheck %s --check-prefix=ASSEMBLED
// RUN: not %dtc-opt %s --pass-pipeline='builtin.module(func.func(dtc-fuse-elementwise),dtc-outline-kernels,dtc-kernels-to-ptx{chips=sm_80,sm_75})' 2>&1 | FileCheck %s --check-prefix=CHIP
// REQUIRES: ptxas

// A chip the kernels cannot target is named.
// CHIP: error: chips=sm_80,sm_75: 'sm_75' is not a chip the kernels can target (sm_80 to sm_90)

// A bias add, GELU (erf form) and a residual add: one fused group, one
// kernel over the result's 32 elements, the bias read at d0 mod 8; the
// kernel reads and writes flat buffers.
// KERNEL-DAG: #[[FLAT:.*]] = affine_map<(d0) -> (d0)>
// KERNEL-DAG: #[[BIAS:.*]] = affine_map<(d0) -> (d0 mod 8)>
// KERNEL-DAG: #[[MASK:.*]] = affine_map<(d0) -> (d0 mod 4 + ((d0 floordiv 4) mod 3) * 4)>
// KERNEL-LABEL: func.func @gelu_chain
// KERNEL: graph.fused %arg0, %arg1, %arg2 {dtc.kernel = @dtc_kernels::@kernel_0}
// KERNEL-LABEL: func.func @masked
// KERNEL: graph.fused {{.*}}{dtc.kernel = @dtc_kernels::@kernel_1}
// A kernel the same as one made before (a repeated layer's) is that one:
// @again's softmax runs @rows's kernel, and no seventh kernel is made.
// KERNEL-LABEL: func.func @again
// KERNEL: graph.softmax {{.*}}dtc.kernel = @dtc_kernels::@kernel_2
// KERNEL: module @dtc_kernels
// KERNEL: func.func @kernel_0(%arg0: memref<32xf32>, %arg1: memref<8xf32>, %arg2: memref<32xf32>, %arg3: memref<32xf32>)
// KERNEL: linalg.generic {indexing_maps = [#[[FLAT]], #[[BIAS]], #[[FLAT]], #[[FLAT]]], iterator_types = ["parallel"]}
// KERNEL: arith.addf
// KERNEL: math.erf
// KERNEL: linalg.yield
// A mask read by a where, a bf16 cast and a tanh-form GELU: a bool input,
// its row broadcast over [2, 3, 4] ((d0 floordiv 4) mod 3 * 4 + d0 mod 4
// for a [3, 4] mask), casts in the body.
// KERNEL: func.func @kernel_1(%arg0: memref<24xf32>, %arg1: memref<12xi1>, %arg2: memref<24xbf16>)
// KERNEL: linalg.generic {indexing_maps = [#[[FLAT]], #[[MASK]], #[[FLAT]]]
// KERNEL: math.tanh
// KERNEL: arith.select
// KERNEL: arith.truncf {{.*}} : f32 to bf16

// Each kernel gets PTX for both chips (LLVM's NVPTX back end) whose
// parameters are its buffers alone (constants and index arithmetic sunk
// into the kernel; no calls left: math expanded, libdevice linked), which
// ptxas assembles, and its launch: a block of 256 threads per 256 elements.
// PTX: func.func @kernel_0({{.*}}) attributes {dtc.launch = array<i64: 1, 256>, dtc.params = array<i64: 0, 1, 2, 3>, dtc.ptx = {sm_80 = "{{.*}}.target sm_80{{.*}}.entry kernel_0_kernel(\0A\09.param .u64 kernel_0_kernel_param_0,\0A\09.param .u64 kernel_0_kernel_param_1,\0A\09.param .u64 kernel_0_kernel_param_2,\0A\09.param .u64 kernel_0_kernel_param_3\0A){{.*}}", sm_90 = "{{.*}}.target sm_90
// PTX-SAME: dtc.ptx_entry = "kernel_0_kernel"
// PTX: func.func @kernel_1({{.*}}) attributes {dtc.launch = array<i64: 1, 256>, dtc.params = array<i64: 0, 1, 2>, dtc.ptx = {sm_80 =
// PTX-NOT: call
// The softmax launches a block of 128 threads per row; the others one
// thread per output; the gather's and the scatter-add's parameters are
// in the order the kernel first uses its buffers (indices, then the
// status word an index out of range sets, then the table or updates, then
// the output), which dtc.params records; the scatter-add wants zeroed
// outputs.
// PTX: func.func @kernel_2({{.*}}) attributes {dtc.lanes = 128 : i64, dtc.launch = array<i64: 600, 128>, dtc.params = array<i64: 0, 1>
// The block-wide reductions: shuffles within a warp, then shared memory.
// PTX-SAME: shfl.sync.bfly{{.*}}bar.sync
// PTX: func.func @kernel_3({{.*}}) attributes {dtc.launch = array<i64: 1, 256>, dtc.params = array<i64: 0, 1>
// PTX-SAME: dtc.zero_outputs
// The gather reads each index in one 64-bit load (the kernels are
// translated under NVPTX's data layout, not LLVM's default, which aligns
// i64 to 4 bytes and splits it in two).
// PTX: func.func @kernel_4({{.*}}) attributes {dtc.launch = array<i64: 6, 256>, dtc.params = array<i64: 1, 3, 0, 2>
// PTX-SAME: ld.global.u64
// PTX-NOT: ld.global.u32
// PTX: func.func @kernel_5({{.*}}) attributes {dtc.launch = array<i64: 6, 256>, dtc.params = array<i64: 1, 3, 0, 2>
// PTX-SAME: dtc.zero_outputs
// A square root and its reciprocal are IEEE's (sqrt.rn, div.rn), as the
// host computes them: not libdevice's sqrt.approx.
// PTX: func.func @kernel_6({{.*}}) attributes {dtc.launch = array<i64: 1, 256>
// PTX-SAME: sqrt.rn.f32
// PTX-NOT: sqrt.approx
// PTX-NOT: rsqrt.approx
// A block of a split table's gather and scatter-add (skip_outside): no
// status word (nothing is an error), so indices, table, output.
// PTX: func.func @kernel_8({{.*}}) attributes {dtc.launch = array<i64: 6, 256>, dtc.params = array<i64: 1, 0, 2>
// PTX: func.func @kernel_9({{.*}}) attributes {dtc.launch = array<i64: 6, 256>, dtc.params = array<i64: 1, 0, 2>
// PTX-SAME: dtc.zero_outputs
// ASSEMBLED: assembled 18 kernels: sm_80 9, sm_90 9

// Softmax over the last axis, rows of 100: a row kernel (dtc.lanes), the
// 600 rows (scf.parallel) each spread over 128 lanes (nested scf.parallel
// loops): each lane folds every 128th element, the lanes' maxima and sums
// combined by scf.reduce, then each lane writes its outputs. A sum over
// the leading axes (a bias's gradient): 100 sums of 600 rows would leave a
// GPU idle, so each is split in 2 parts of 300 rows, a thread each, added
// atomically into zeroed outputs.
// KERNEL-LABEL: func.func @kernel_2(%arg0: memref<60000xf32>, %arg1: memref<60000xf32>) attributes {dtc.lanes = 128 : i64, dtc.threads = 600 : i64}
// KERNEL: scf.parallel ({{.*}}) = ({{.*}}) to (%c600) step
// KERNEL: scf.parallel ({{.*}}) = ({{.*}}) to (%c128{{.*}}) step ({{.*}}) init
// KERNEL: scf.for {{.*}} step %c128
// KERNEL: arith.maximumf
// KERNEL: scf.reduce
// KERNEL: arith.maximumf
// KERNEL: scf.parallel
// KERNEL: math.exp
// KERNEL: scf.reduce
// KERNEL: arith.addf
// KERNEL: scf.parallel
// KERNEL: memref.store
// KERNEL-LABEL: func.func @kernel_3(%arg0: memref<60000xf32>, %arg1: memref<100xf32>) attributes {dtc.threads = 200 : i64, dtc.zero_outputs}
// KERNEL: arith.remui
// KERNEL: memref.atomic_rmw addf
// KERNEL-LABEL: func.func @kernel_4(%arg0: memref<3200xf32>, %arg1: memref<48xi64>, %arg2: memref<1536xf32>, %arg3: memref<1xi32>) attributes {dtc.status, dtc.threads = 1536 : i64}
// KERNEL-LABEL: func.func @kernel_5(%arg0: memref<1536xf32>, %arg1: memref<48xi64>, %arg2: memref<3200xf32>, %arg3: memref<1xi32>) attributes {dtc.status, dtc.threads = 1536 : i64, dtc.zero_outputs}
// KERNEL: memref.atomic_rmw addf
// KERNEL: func.func @kernel_6(%arg0: memref<64xf32>, %arg1: memref<64xf32>)
// KERNEL: math.sqrt
// KERNEL-NOT: func.func @kernel_7
// skip_outside: an index outside [0, 100) is not wrapped and sets no
// status; the gather reads the clamped row and stores a zero for it, the
// scatter-add adds only inside (@again's softmax took the name kernel_7).
// KERNEL-LABEL: func.func @kernel_8(%arg0: memref<3200xf32>, %arg1: memref<48xi64>, %arg2: memref<1536xf32>) attributes {dtc.threads = 1536 : i64}
// KERNEL-NOT: arith.select {{.*}} : index
// KERNEL: %[[GE:.*]] = arith.cmpi sge, %[[ROW:.*]], %c0
// KERNEL: %[[LT:.*]] = arith.cmpi slt, %[[ROW]], %c100
// KERNEL: %[[IN:.*]] = arith.andi %[[GE]], %[[LT]] : i1
// KERNEL: %[[V:.*]] = memref.load %arg0
// KERNEL: %[[ZERO:.*]] = arith.constant 0.000000e+00 : f32
// KERNEL: %[[PICK:.*]] = arith.select %[[IN]], %[[V]], %[[ZERO]] : f32
// KERNEL: memref.store %[[PICK]], %arg2
// KERNEL-LABEL: func.func @kernel_9(%arg0: memref<1536xf32>, %arg1: memref<48xi64>, %arg2: memref<3200xf32>) attributes {dtc.threads = 1536 : i64, dtc.zero_outputs}
// KERNEL: %[[IN:.*]] = arith.andi
// KERNEL: scf.if %[[IN]] {
// KERNEL-NEXT: memref.atomic_rmw addf
// KERNEL-NOT: func.func @kernel_10

func.func @gelu_chain(%x: tensor<4x8xf32>, %b: tensor<8xf32>, %r: tensor<4x8xf32>) -> tensor<4x8xf32> {
  %half = graph.constant dense<0.5> : tensor<f32>
  %one = graph.constant dense<1.0> : tensor<f32>
  %h = graph.add %x, %b : (tensor<4x8xf32>, tensor<8xf32>) -> tensor<4x8xf32>
  %s = graph.mul %h, %half : (tensor<4x8xf32>, tensor<f32>) -> tensor<4x8xf32>
  %e = graph.erf %s : (tensor<4x8xf32>) -> tensor<4x8xf32>
  %p = graph.add %e, %one : (tensor<4x8xf32>, tensor<f32>) -> tensor<4x8xf32>
  %g = graph.mul %h, %p : (tensor<4x8xf32>, tensor<4x8xf32>) -> tensor<4x8xf32>
  %o = graph.add %g, %r : (tensor<4x8xf32>, tensor<4x8xf32>) -> tensor<4x8xf32>
  return %o : tensor<4x8xf32>
}

func.func @masked(%m: tensor<3x4xi1>, %x: tensor<2x3x4xf32>) -> tensor<2x3x4xbf16> {
  %zero = graph.constant dense<0.0> : tensor<f32>
  %g = graph.gelu %x {approximate = "tanh"} : (tensor<2x3x4xf32>) -> tensor<2x3x4xf32>
  %w = graph.where %m, %g, %zero : (tensor<3x4xi1>, tensor<2x3x4xf32>, tensor<f32>) -> tensor<2x3x4xf32>
  %c = graph.cast %w : (tensor<2x3x4xf32>) -> tensor<2x3x4xbf16>
  return %c : tensor<2x3x4xbf16>
}

func.func @rows(%x: tensor<12x50x100xf32>) -> (tensor<12x50x100xf32>, tensor<1x1x100xf32>) {
  %s = graph.softmax %x {axis = 2 : i64} : (tensor<12x50x100xf32>) -> tensor<12x50x100xf32>
  %b = graph.reduce_sum %x {axes = array<i64: 0, 1>} : (tensor<12x50x100xf32>) -> tensor<1x1x100xf32>
  return %s, %b : tensor<12x50x100xf32>, tensor<1x1x100xf32>
}

func.func @embedding(%e: tensor<100x32xf32>, %ids: tensor<48xi64>) -> (tensor<48x32xf32>, tensor<100x32xf32>) {
  %g = graph.gather %e, %ids {axis = 0 : i64} : (tensor<100x32xf32>, tensor<48xi64>) -> tensor<48x32xf32>
  %d = graph.scatter_add %g, %ids {axis = 0 : i64} : (tensor<48x32xf32>, tensor<48xi64>) -> tensor<100x32xf32>
  return %g, %d : tensor<48x32xf32>, tensor<100x32xf32>
}

func.func @norm(%x: tensor<64xf32>) -> tensor<64xf32> {
  %r = graph.sqrt %x : (tensor<64xf32>) -> tensor<64xf32>
  %i = graph.reciprocal %r : (tensor<64xf32>) -> tensor<64xf32>
  return %i : tensor<64xf32>
}

func.func @again(%x: tensor<12x50x100xf32>) -> tensor<12x50x100xf32> {
  %s = graph.softmax %x {axis = 2 : i64} : (tensor<12x50x100xf32>) -> tensor<12x50x100xf32>
  return %s : tensor<12x50x100xf32>
}

func.func @vocab_block(%e: tensor<100x32xf32>, %ids: tensor<48xi64>) -> (tensor<48x32xf32>, tensor<100x32xf32>) {
  %g = graph.gather %e, %ids {axis = 0 : i64, skip_outside} : (tensor<100x32xf32>, tensor<48xi64>) -> tensor<48x32xf32>
  %d = graph.scatter_add %g, %ids {axis = 0 : i64, skip_outside} : (tensor<48x32xf32>, tensor<48xi64>) -> tensor<100x32xf32>
  return %g, %d : tensor<48x32xf32>, tensor<100x32xf32>
}
