// RUN: %dtc-opt %s --dtc-fuse-loss-gradient | FileCheck %s

// The factor may be anything made of values the loss does not make (here
// an input scaled): its ops move above the loss. A factor that reads the
// loss (a gradient scaled by the loss itself) keeps the gradient apart;
// so does a gradient whose product another op also reads.
// CHECK-LABEL: func.func @scaled
// CHECK-NEXT: graph.mul %arg2, %arg3
// CHECK-NEXT: graph.reshape
// CHECK-NEXT: %[[LOSS:.*]], %{{.*}}, %[[G:.*]] = graph.cross_entropy %arg0, %arg1, %{{.*}} :
// CHECK-NEXT: return %[[LOSS]], %[[G]]
// CHECK-LABEL: func.func @reads_the_loss
// CHECK: graph.exp
// CHECK-LABEL: func.func @product_kept
// CHECK: graph.exp
func.func @scaled(%x: tensor<4x10xf32>, %labels: tensor<4xi64>, %w: tensor<4x1xf32>, %s: tensor<f32>) -> (tensor<4xf32>, tensor<4x10xf32>) {
  %loss, %lse = graph.cross_entropy %x, %labels : (tensor<4x10xf32>, tensor<4xi64>) -> (tensor<4xf32>, tensor<4xf32>)
  %col = graph.reshape %lse : (tensor<4xf32>) -> tensor<4x1xf32>
  %sub = graph.sub %x, %col : (tensor<4x10xf32>, tensor<4x1xf32>) -> tensor<4x10xf32>
  %p = graph.exp %sub : (tensor<4x10xf32>) -> tensor<4x10xf32>
  %lab = graph.reshape %labels : (tensor<4xi64>) -> tensor<4x1xi64>
  %ids = graph.constant dense<[0, 1, 2, 3, 4, 5, 6, 7, 8, 9]> : tensor<10xi64>
  %hit = graph.equal %lab, %ids : (tensor<4x1xi64>, tensor<10xi64>) -> tensor<4x10xi1>
  %hitf = graph.cast %hit : (tensor<4x10xi1>) -> tensor<4x10xf32>
  %d = graph.sub %p, %hitf : (tensor<4x10xf32>, tensor<4x10xf32>) -> tensor<4x10xf32>
  %f = graph.mul %w, %s : (tensor<4x1xf32>, tensor<f32>) -> tensor<4x1xf32>
  %g = graph.mul %d, %f : (tensor<4x10xf32>, tensor<4x1xf32>) -> tensor<4x10xf32>
  return %loss, %g : tensor<4xf32>, tensor<4x10xf32>
}
func.func @reads_the_loss(%x: tensor<4x10xf32>, %labels: tensor<4xi64>) -> (tensor<4xf32>, tensor<4x10xf32>) {
  %loss, %lse = graph.cross_entropy %x, %labels : (tensor<4x10xf32>, tensor<4xi64>) -> (tensor<4xf32>, tensor<4xf32>)
  %col = graph.reshape %lse : (tensor<4xf32>) -> tensor<4x1xf32>
  %sub = graph.sub %x, %col : (tensor<4x10xf32>, tensor<4x1xf32>) -> tensor<4x10xf32>
  %p = graph.exp %sub : (tensor<4x10xf32>) -> tensor<4x10xf32>
  %lab = graph.reshape %labels : (tensor<4xi64>) -> tensor<4x1xi64>
  %ids = graph.constant dense<[0, 1, 2, 3, 4, 5, 6, 7, 8, 9]> : tensor<10xi64>
  %hit = graph.equal %lab, %ids : (tensor<4x1xi64>, tensor<10xi64>) -> tensor<4x10xi1>
  %hitf = graph.cast %hit : (tensor<4x10xi1>) -> tensor<4x10xf32>
  %d = graph.sub %p, %hitf : (tensor<4x10xf32>, tensor<4x10xf32>) -> tensor<4x10xf32>
  %f = graph.reshape %loss : (tensor<4xf32>) -> tensor<4x1xf32>
  %g = graph.mul %d, %f : (tensor<4x10xf32>, tensor<4x1xf32>) -> tensor<4x10xf32>
  return %loss, %g : tensor<4xf32>, tensor<4x10xf32>
}
func.func @product_kept(%x: tensor<4x10xf32>, %labels: tensor<4xi64>, %f: tensor<4x1xf32>) -> (tensor<4xf32>, tensor<4x10xf32>, tensor<4x10xf32>) {
  %loss, %lse = graph.cross_entropy %x, %labels : (tensor<4x10xf32>, tensor<4xi64>) -> (tensor<4xf32>, tensor<4xf32>)
  %col = graph.reshape %lse : (tensor<4xf32>) -> tensor<4x1xf32>
  %sub = graph.sub %x, %col : (tensor<4x10xf32>, tensor<4x1xf32>) -> tensor<4x10xf32>
  %p = graph.exp %sub : (tensor<4x10xf32>) -> tensor<4x10xf32>
  %lab = graph.reshape %labels : (tensor<4xi64>) -> tensor<4x1xi64>
  %ids = graph.constant dense<[0, 1, 2, 3, 4, 5, 6, 7, 8, 9]> : tensor<10xi64>
  %hit = graph.equal %lab, %ids : (tensor<4x1xi64>, tensor<10xi64>) -> tensor<4x10xi1>
  %hitf = graph.cast %hit : (tensor<4x10xi1>) -> tensor<4x10xf32>
  %d = graph.sub %p, %hitf : (tensor<4x10xf32>, tensor<4x10xf32>) -> tensor<4x10xf32>
  %g = graph.mul %d, %f : (tensor<4x10xf32>, tensor<4x1xf32>) -> tensor<4x10xf32>
  return %loss, %g, %d : tensor<4xf32>, tensor<4x10xf32>, tensor<4x10xf32>
}
