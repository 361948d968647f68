// RUN: %dtc-opt %s --verify-diagnostics --dtc-local-sgd=federated=true

// Federated clients share nothing within a round: batch statistics
// reduced over the clients' axis cannot stay, nor be left out silently.
module attributes {dtc.mesh_axis_names = ["dp"]} {
  mesh.mesh @mesh(shape = 2)
  func.func @main(%mean: tensor<8xf32>) -> tensor<8xf32> attributes {dtc.training = {}} {
    // expected-error @+1 {{--sync federated: clients share nothing during a round, but the step mesh.all_reduces over 'dp' (batch-norm statistics over the batch?)}}
    %0 = mesh.all_reduce %mean on @mesh mesh_axes = [0] : tensor<8xf32> -> tensor<8xf32>
    return %0 : tensor<8xf32>
  }
}
