// RUN: %dtc-opt %s --pass-pipeline='builtin.module(dtc-outline-kernels,builtin.module(func.func(dtc-rows-to-gpu)))' | FileCheck %s

// A log-softmax over rows of 3000: a row kernel of 256 lanes becomes one
// gpu.launch, a block per row (4) of 256 threads; the row is the block's
// index, each lane loop's index the thread's; the max and the sum of
// exps each a block-wide gpu.all_reduce (their combining ops kept); the
// outputs' pass then a barrier.
// CHECK-LABEL: func.func @kernel_0(%arg0: memref<12000xf32>, %arg1: memref<12000xf32>) attributes {dtc.lanes = 256 : i64, dtc.threads = 4 : i64}
// CHECK-NOT: scf.parallel
// CHECK: gpu.launch blocks(%[[ROW:.*]], %{{.*}}, %{{.*}}) in (%{{.*}} = %c4{{.*}}, %{{.*}} = %c1{{.*}}, %{{.*}} = %c1{{.*}}) threads(%[[LANE:.*]], %{{.*}}, %{{.*}}) in (%{{.*}} = %c256{{.*}}, %{{.*}} = %c1{{.*}}, %{{.*}} = %c1{{.*}})
// CHECK: arith.muli %[[ROW]], %c3000
// CHECK: %[[PART:.*]] = scf.for %{{.*}} = %[[LANE]] to %c3000{{.*}} step %c256
// CHECK: arith.maximumf
// CHECK: %[[MAX:.*]] = gpu.all_reduce %[[PART]] uniform
// CHECK-NEXT: ^bb0(%[[L:.*]]: f32, %[[R:.*]]: f32):
// CHECK-NEXT: arith.maximumf %[[L]], %[[R]]
// CHECK-NEXT: gpu.yield
// CHECK: scf.for %{{.*}} = %[[LANE]]
// CHECK: arith.subf %{{.*}}, %[[MAX]]
// CHECK: math.exp
// CHECK: %[[SUM:.*]] = gpu.all_reduce
// CHECK: arith.addf
// CHECK: math.log %[[SUM]]
// CHECK: scf.for %{{.*}} = %[[LANE]]
// CHECK: memref.store
// CHECK: gpu.barrier
// CHECK-NEXT: gpu.terminator

// A layer norm over rows of 100: 128 lanes (whole warps), two block-wide sums.
// CHECK-LABEL: func.func @kernel_1({{.*}}) attributes {dtc.lanes = 128 : i64, dtc.threads = 6 : i64}
// CHECK: gpu.launch
// CHECK-COUNT-2: gpu.all_reduce
// CHECK: math.sqrt
// CHECK: gpu.barrier

// A softmax over rows of 16 stays a thread's row: no lanes, left for the
// parallel-loop mapping.
// CHECK-LABEL: func.func @kernel_2({{.*}}) attributes {dtc.threads = 5 : i64}
// CHECK-NOT: gpu.launch
// CHECK: scf.parallel
// CHECK-NOT: gpu.launch
// CHECK: return

func.func @rows(%x: tensor<4x3000xf32>, %s: tensor<100xf32>, %y: tensor<6x100xf32>,
                %z: tensor<5x16xf32>) -> (tensor<4x3000xf32>, tensor<6x100xf32>, tensor<5x16xf32>) {
  %a = graph.log_softmax %x {axis = 1 : i64} : (tensor<4x3000xf32>) -> tensor<4x3000xf32>
  %b = graph.layer_norm %y, %s {axis = 1 : i64} : (tensor<6x100xf32>, tensor<100xf32>) -> tensor<6x100xf32>
  %c = graph.softmax %z {axis = 1 : i64} : (tensor<5x16xf32>) -> tensor<5x16xf32>
  return %a, %b, %c : tensor<4x3000xf32>, tensor<6x100xf32>, tensor<5x16xf32>
}

// A layer norm's gradient summing its scale's and bias's gradients over 3
// groups of 2 rows (dtc-fuse-norm-gradients): a block per group, which
// zeroes its sums and then takes its rows in turn, each row's block-wide
// sums and passes inside that loop, each lane adding to its own elements'
// sums.
// CHECK-LABEL: func.func @kernel_3({{.*}}) attributes {dtc.lanes = 128 : i64, dtc.threads = 3 : i64}
// CHECK: gpu.launch blocks(%[[G:.*]], %{{.*}}, %{{.*}}) in (%{{.*}} = %c3{{.*}}, %{{.*}} = %c1{{.*}}, %{{.*}} = %c1{{.*}}) threads(%[[LANE:.*]], %{{.*}}, %{{.*}}) in (%{{.*}} = %c128{{.*}}
// CHECK: scf.for %{{.*}} = %[[LANE]] to %c100{{.*}} step %c128
// CHECK: memref.store %cst
// CHECK: gpu.barrier
// CHECK: arith.muli %[[G]], %c2
// CHECK: scf.for %[[ROW:.*]] = %{{.*}} to %{{.*}} step %c1
// CHECK: arith.muli %[[ROW]], %c100
// CHECK-COUNT-4: gpu.all_reduce
// CHECK: scf.for %{{.*}} = %[[LANE]] to %c100{{.*}} step %c128
// CHECK: arith.addf
// CHECK: memref.store
// CHECK: gpu.barrier
// CHECK: memref.store
// CHECK: gpu.barrier
// CHECK-NEXT: }
// CHECK-NEXT: gpu.terminator
func.func @groups(%x: tensor<6x100xf32>, %s: tensor<100xf32>, %dy: tensor<6x100xf32>)
    -> (tensor<6x100xf32>, tensor<3x100xf32>, tensor<3x100xf32>) {
  %dx, %mean, %rstd, %sums:2 = graph.layer_norm_backward %x, %s, %dy {axis = 1 : i64, scale_gradient, bias_gradient} : (tensor<6x100xf32>, tensor<100xf32>, tensor<6x100xf32>) -> (tensor<6x100xf32>, tensor<6x1xf32>, tensor<6x1xf32>, tensor<3x100xf32>, tensor<3x100xf32>)
  return %dx, %sums#0, %sums#1 : tensor<6x100xf32>, tensor<3x100xf32>, tensor<3x100xf32>
}
