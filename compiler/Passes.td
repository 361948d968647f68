//===- Passes.td - dtc's compiler passes ---------------------*- tablegen -*-===//
#ifndef DTC_COMPILER_PASSES
#define DTC_COMPILER_PASSES

include "mlir/Pass/PassBase.td"

def FuseConv : Pass<"dtc-fuse-conv", "mlir::func::FuncOp"> {
  let summary = "Fold inference batch norms into convolutions and ReLUs into their epilogue";
  let description = [{
    A graph.batch_norm whose input is a conv2d used only there, where the
    convolution's weight and bias and the norm's statistics are parameters
    or constants, becomes a conv2d with weight w * s and bias
    (b - mean) * s + beta, s = scale / sqrt(variance + epsilon), computed
    by graph ops on the parameters (which dtc-hoist-constants then moves to
    the load-time prologue). A graph.relu whose input is a conv2d used only
    there becomes the conv2d's `relu` flag.
  }];
  let dependentDialects = ["dtc::graph::GraphDialect"];
}

def FuseGelu : Pass<"dtc-fuse-gelu", "mlir::func::FuncOp"> {
  let summary = "Recognise GELU written out in primitives as one graph.gelu";
  let description = [{
    0.5 x (1 + tanh(sqrt(2/pi) (x + 0.044715 x^3))) (GPT-2's gelu_new, as
    exporters expand it; also Megatron's x (1 + 0.044715 x^2) inside) becomes
    graph.gelu {approximate = "tanh"}, and 0.5 x (1 + erf(x / sqrt 2))
    graph.gelu: the training step then keeps x alone for the backward and
    differentiates one op. Factors match in any order; constants to 1e-4
    relative; every op inside the expression must be read by it alone.
  }];
  let dependentDialects = ["dtc::graph::GraphDialect"];
}

def FuseRmsNorm : Pass<"dtc-fuse-rms-norm", "mlir::func::FuncOp"> {
  let summary = "Recognise RMSNorm written out in ops as one graph.layer_norm {rms}";
  let description = [{
    x * (1 / sqrt(mean(x^2 over the trailing dims) + eps)) * scale (the
    inverse a reciprocal or 1 / ..., or x / sqrt(...); the square a pow or
    x * x; x and the normalised row maybe cast to f32 and back, as a 16-bit
    model's statistics are) becomes graph.layer_norm {rms}: one row kernel
    forward and backward, statistics in f32. The scale must have the
    normalised shape; every op inside must be read by the expression alone.
  }];
  let dependentDialects = ["dtc::graph::GraphDialect"];
}

def FuseRotary : Pass<"dtc-fuse-rotary", "mlir::func::FuncOp"> {
  let summary = "Recognise a rotary embedding spelled out in ops as one graph.rotary";
  let description = [{
    x * cos + rotate_half(x) * sin, rotate_half(x) the concat of -x's upper
    half and x's lower half along the last dim (slices, a neg, a concat,
    as PyTorch exports Llama's, Mistral's and Qwen's), becomes
    graph.rotary(x, cos, sin) when cos and sin broadcast to x and no
    trained parameter reaches them. The products, sum, concat, negation
    and slices must be read by the expression alone.
  }];
  let dependentDialects = ["dtc::graph::GraphDialect"];
}

def InterleaveQkv : Pass<"dtc-interleave-qkv", "mlir::func::FuncOp"> {
  let summary = "Lay a packed attention's q, k and v out by heads, as Megatron-LM does";
  let description = [{
    A packed graph.attention reads one projection's product [..., S, 3, H,
    D] (transformers' GPT-2 `c_attn`), whose heads are not contiguous
    columns: tensor parallelism can cut it only by the projection's rows,
    an all-reduce of the whole product. Where the product is x W (+ b), W
    (and b) are permuted each step to [K, H, 3, D] order (a reshape, a
    transpose, a reshape: a copy of the weight, small beside the product)
    and the attention reads the product as [..., S, H, 3, D]
    (`interleaved`): cut by heads, each rank's columns are its heads' q, k
    and v, and the gradient comes back through the same moves. Run when
    the step is split over devices; the model's weights keep their layout
    (checkpoints and export are unchanged).
  }];
  let dependentDialects = ["dtc::graph::GraphDialect"];
}

def FuseAttention : Pass<"dtc-fuse-attention", "mlir::func::FuncOp"> {
  let summary = "Recognise attention spelled out in ops as one graph.attention";
  let description = [{
    matmul(softmax(mask(scale * matmul(q, k^T))), v), the scale a multiply
    or divide by a number, the mask none or causal (a where filling with
    -1e4 or less, or the add of a bias of 0 and such numbers, computed from
    constants), becomes graph.attention: flash style, no scores tensor, and
    in training no probabilities kept for the backward. Every op inside
    must be read by the expression alone; any other mask or added term no
    parameter reaches (padding read from the inputs) becomes its f32 bias.
    q, k and v read through transposes of [..., S, H, D] are read as they
    were (`bshd`); the thirds of one projection's product, as that product
    viewed [..., S, 3, H, D] (`packed`).
  }];
  let dependentDialects = ["dtc::graph::GraphDialect"];
}

def MixedPrecision : Pass<"dtc-mixed-precision", "mlir::func::FuncOp"> {
  let summary = "An inference model computing in bf16 (compile --precision bf16 without --train)";
  let description = [{
    What a bf16 training step does to its model (castModelToBf16): every
    f32 value the outputs depend on becomes bf16, weights and inputs are
    cast where the model reads them (weight casts are computed once, by the
    load-time prologue), tables computed from positions and constants stay
    f32 until activations read them, attention's bias and log-sum-exp stay
    f32. The outputs are cast back to the types the model declares, so a
    caller sees the same interface.
  }];
  let dependentDialects = ["dtc::graph::GraphDialect"];
}

def Autodiff : Pass<"dtc-autodiff", "mlir::func::FuncOp"> {
  let summary = "Reverse-mode gradients of the first result with respect to the parameters";
  let description = [{
    The function's first result must be a float scalar (the loss). Ops are
    visited in reverse; each builds its operands' gradients from its
    results' (graph::DifferentiableOp, defined with each op), and the
    gradients of a value used several times are summed. Each parameter the
    loss depends on gets its gradient appended to the results, with
    `dtc.gradient_of` naming the parameter.
  }];
  let dependentDialects = ["dtc::graph::GraphDialect"];
}

def BuildTrainingStep : Pass<"dtc-build-training-step", "mlir::ModuleOp"> {
  let summary = "Turn @main (a model's forward pass) into one training step";
  let description = [{
    Adds the labels input and the loss on @main's first result, the
    gradients (dtc-autodiff's differentiate), gradient clipping and the
    optimizer update, with the optimizer's state as zero-initialised
    parameters (`dtc.zeros`). @main then returns the loss, the model's
    outputs (only with `model-outputs=true`: the trainer reads none of
    them, and a language model's logits are the step's largest tensor) and
    the new value of every
    trained parameter and state (result attribute `dtc.updates` names the
    parameter). The inputs the runtime feeds carry `dtc.role` (labels,
    learning_rate, bias_correction1, bias_correction2); the options are
    recorded on @main as `dtc.training` for plan emission. With
    `precision=bf16` the model computes in bf16 between casts while the
    weights, their gradients, the optimizer state and the loss stay f32.
  }];
  let options = [
    Option<"loss", "loss", "std::string", "\"cross_entropy\"",
           "cross_entropy (the prediction is logits) or mse">,
    ListOption<"ignoreIndex", "ignore-index", "int64_t",
               "cross_entropy: a label that contributes nothing (at most one)">,
    Option<"optimizer", "optimizer", "std::string", "\"adamw\"", "adamw or sgd">,
    Option<"learningRate", "lr", "double", "1e-3", "Peak learning rate">,
    Option<"momentum", "momentum", "double", "0.9", "sgd: momentum (0: none)">,
    Option<"beta1", "beta1", "double", "0.9", "adamw: first moment decay">,
    Option<"beta2", "beta2", "double", "0.999", "adamw: second moment decay">,
    Option<"epsilon", "epsilon", "double", "1e-8", "adamw: denominator epsilon">,
    Option<"weightDecay", "weight-decay", "double", "0.0", "Decoupled weight decay">,
    Option<"clipNorm", "clip-norm", "double", "0.0",
           "Clip gradients to this global L2 norm (0: off)">,
    Option<"skipNonFinite", "skip-nonfinite", "bool", "false",
           "Leave weights and state as they were when the gradients are not finite">,
    Option<"schedule", "schedule", "std::string", "\"constant\"",
           "constant, or cosine (linear warm-up, then cosine decay)">,
    Option<"warmupSteps", "warmup", "int64_t", "0", "cosine: warm-up steps">,
    Option<"totalSteps", "total-steps", "int64_t", "0", "cosine: the step it decays to 0 at">,
    Option<"precision", "precision", "std::string", "\"fp32\"",
           "fp32, or bf16 (bf16 compute, fp32 master weights and optimizer state)">,
    Option<"microBatches", "micro-batches", "int64_t", "1",
           "Accumulate gradients over this many micro-batches (the model's batch) per step">,
    Option<"modelOutputs", "model-outputs", "bool", "false",
           "Return the model's outputs too (not for a micro-batched or split step)">,
    Option<"trainOutput", "train-output", "std::string", "\"\"",
           "The model output the loss reads, by name (default: the first)">,
    Option<"padClasses", "pad-classes", "int64_t", "128",
           "cross_entropy: a vocabulary's classes padded to a multiple of this (0: never)">,
  ];
  let dependentDialects = ["dtc::graph::GraphDialect"];
}

def Recompute : Pass<"dtc-recompute", "mlir::func::FuncOp"> {
  let summary = "Recompute forward values in the backward instead of keeping them";
  let description = [{
    In a training step (dtc-build-training-step), picks forward ops to
    recompute; each backward read of one of their results reads a copy of
    the op, marked `dtc.recompute`, made just before that read. `selective`
    recomputes the ops on a path between two activation-by-activation
    matmuls that crosses no weight's matmul (attention's scores, softmax and
    product with the values);
    `full` recomputes every forward op but those that make checkpoints (an
    activation that alone carries the forward onward: each layer's input)
    and the part after the last checkpoint. `none` changes nothing. Adds a
    note with what it copied and what is no longer kept.
  }];
  let options = [
    Option<"mode", "mode", "std::string", "\"selective\"", "none, selective or full">,
  ];
}

def RegatherWeights : Pass<"dtc-regather-weights", "mlir::func::FuncOp"> {
  let summary = "Gather ZeRO-3 weights again for the backward instead of keeping them";
  let description = [{
    After dtc-spmd-partition, a weight split over the data-parallel ranks
    (ZeRO stage 3) is all-gathered whole for the forward; the backward reads
    it again. Rather than keep every layer's gathered weight from the
    forward to the backward (all of the model's weights, whole, at once),
    the backward's reads read a copy of the all-gather (and of what is
    computed from gathered weights alone), made just before the first such
    read and marked `dtc.recompute`: each gathered weight lives for one
    layer's work, as in ZeRO-3.
  }];
  let dependentDialects = ["mlir::mesh::MeshDialect"];
}

def KeepBf16Weights : Pass<"dtc-keep-bf16-weights", "mlir::func::FuncOp"> {
  let summary = "Keep a bf16 step's weights in bf16 between steps, beside the f32 master";
  let description = [{
    In a training step (`dtc.training`) that reads an f32 weight through
    casts to bf16, the casts become one new parameter `NAME.bf16` (`cast_of`
    the weight, with its split or sharding; dtc compile runs this between the
    sharding search and the partitioner, and splits the f32 master as the
    search split its update where that is finer: ZeRO), which the runtime
    makes from the weight at load and on resuming; where the step updates the weight, the step
    ends by casting the update into the copy (`NAME.bf16.new`, once per
    step): one more output of the optimizer's elementwise kernel, and no
    cast kernel per weight per step. For steps whose weights change only
    through the step (dtc compile adds it unless --sync is local, federated
    or ps, which rewrite weights between steps). In a bf16 inference plan
    the copies replace the casts and the f32 weights nothing else reads.
  }];
  let dependentDialects = ["dtc::graph::GraphDialect"];
}

def ShardingSearch : Pass<"dtc-sharding-search", "mlir::ModuleOp"> {
  let summary = "Decide how every op of @main is split over a device mesh";
  let description = [{
    The intra-op sharding search (compiler/ShardingSearch.h, docs/sharding.md):
    every op picks a split of its sharding rule's factors over the mesh
    axes, minimising compute + communication on the cluster's cost model
    under each device's memory limit, as an integer program (CBC). Writes
    `mesh.mesh @mesh`, the axis names (`dtc.mesh_axis_names`), `dtc.split`
    on each op and `dtc.sharding` on each argument and parameter, for
    dtc-spmd-partition. `devices` gives a device count and leaves the
    mesh's shape to the search (one axis, or dp x tp with tensor groups
    inside a node); `dp`/`tp` pin a data- or tensor-parallel axis;
    `mesh` gives free axes (with pins: the devices left over form one free
    axis); `zero` pins the ZeRO stage. A training step (@main carries
    `dtc.training`) counts gradients, optimizer state and kept activations.
    A mesh of one device leaves the module as it is. With pipeline stages
    (`pp`), the stages' ends are chosen by the search's figures
    (compiler/StageCuts.h) and marked `dtc.stage_end` for
    dtc-pipeline-split; `stage-cuts=flops` keeps the FLOP-even cut.
  }];
  let options = [
    ListOption<"mesh", "mesh", "int64_t", "Free mesh axes' sizes, e.g. 2,2">,
    Option<"devices", "devices", "int64_t", "0",
           "This many devices, the mesh's shape searched too (dp x tp within a node)">,
    Option<"dataParallel", "dp", "int64_t", "0", "A data-parallel axis of this size">,
    Option<"tensorParallel", "tp", "int64_t", "0", "A tensor-parallel axis of this size">,
    Option<"pipelineStages", "pp", "int64_t", "1",
           "Pipeline stages the step is cut into afterwards (memory per device); "
           "0 with devices: searched too">,
    Option<"zero", "zero", "int64_t", "-1", "ZeRO stage 0-3 (-1: searched)">,
    Option<"sequenceParallel", "sequence-parallel", "bool", "true",
           "Tensor-parallel (and free) axes may split the data's sequence dims">,
    Option<"pipelineSchedule", "schedule", "std::string", "\"1f1b\"",
           "Pipeline schedule (gpipe, 1f1b, interleaved; with pp=0, 'searched': 1f1b "
           "or interleaved, whichever is faster)">,
    Option<"preset", "preset", "std::string", "\"cpu-local\"",
           "Cluster preset the plan is costed on (cpu-local, a100-80g, h100-sxm)">,
    Option<"clusterFile", "cluster", "std::string", "\"\"",
           "A cluster file (JSON) instead of the preset">,
    Option<"memoryLimit", "memory-limit", "std::string", "\"\"",
           "Bytes per device, e.g. 40GiB (default: the cluster's device memory)">,
    Option<"stageCuts", "stage-cuts", "std::string", "\"costs\"",
           "Where pipeline stages end: costs (the cost model's shortest step within "
           "memory) or flops (forward FLOPs evened out)">,
  ];
  let dependentDialects = ["dtc::graph::GraphDialect", "mlir::mesh::MeshDialect"];
}

def AccumulateGradients : Pass<"dtc-accumulate-gradients", "mlir::func::FuncOp"> {
  let summary = "Split a micro-batched training step into its per-micro-batch and per-step parts";
  let description = [{
    In a step that accumulates gradients (dtc-build-training-step with
    micro-batches: `graph.add`s of a `dtc.accumulator` parameter and a
    gradient, returned as the accumulator's update), marks with
    `dtc.once_per_step` the ops that run once per step, after the last
    micro-batch: those that read an accumulated gradient (clipping, the
    optimizer), and those only such ops read. The other ops run once per
    micro-batch. A sum all-reduce (or one followed by a cast) whose result
    only feeds an accumulation moves past it into the once-per-step part:
    each rank sums its partial gradients over the micro-batches and the
    data-parallel group reduces once per step, not once per micro-batch
    (the reduction is linear). Runs after dtc-spmd-partition; a function
    without accumulators is left as it is.
  }];
  let dependentDialects = ["dtc::graph::GraphDialect", "mlir::mesh::MeshDialect"];
}

def LocalSgd : Pass<"dtc-local-sgd", "mlir::func::FuncOp"> {
  let summary = "Local SGD: each data-parallel rank updates its own replica";
  let description = [{
    Local SGD (Stich 2019; Lin et al. 2020, "Don't use large mini-batches,
    use local SGD"): the data-parallel ranks do not reduce their weights'
    gradients each step; each applies its own micro-batch's gradient to
    its own replica, and the runtime averages the replicas every
    `average-every` steps (Training.average_every) and at the end. On the
    partitioned step, each weight gradient's reduction (`mesh.all_reduce`
    marked `dtc.gradient_reduction`) loses the mesh axis named `axis`: the
    other axes' part of it stays (a tensor-parallel partial sum is still
    one rank's gradient), and the gradient is scaled by that axis's size,
    since the step's loss divides each rank's mean by it. The reported loss
    is still the mean over all ranks. Weights must be whole on every rank
    of the axis (ZeRO stage 0): a gradient's reduce-scatter over the axis is
    an error. Records sync = "local", average_every and data_axes in
    `dtc.training`. With `federated`, the step shares nothing over the axis
    (the loss's all-reduce becomes the rank's own mean; any other
    collective over it is an error) and sync is "federated": the runtime
    runs rounds of local epochs on each client's own data (dtc run
    --rounds). Runs right after dtc-spmd-partition.
  }];
  let options = [
    Option<"averageEvery", "average-every", "int64_t", "4",
           "Steps between averages of the replicas">,
    Option<"axis", "axis", "std::string", "\"dp\"",
           "The mesh axis (by name) whose ranks keep replicas">,
    Option<"federated", "federated", "bool", "false",
           "Federated averaging: the loss's all-reduce over the axis goes too (each "
           "client reports its own), so that clients may take different step counts">,
  ];
  let dependentDialects = ["dtc::graph::GraphDialect", "mlir::mesh::MeshDialect"];
}

def ParameterServer : Pass<"dtc-parameter-server", "mlir::ModuleOp"> {
  let summary = "Parameter servers: workers push gradients, servers update the weights";
  let description = [{
    TensorFlow's ParameterServerStrategy and MXNet's kvstore (Li et al.
    2014): the data-parallel ranks of @main become workers that compute
    gradients only; `servers` server ranks hold the weights and their
    optimizer state, each a share of the weights (whole tensors, the
    largest first to the least loaded server). On the partitioned step,
    every weight gradient's all-reduce over `axis` goes (each worker pushes
    its own part, the runtime sums them on the server), the optimizer's
    ops move into a function per server (@server_K, marked `dtc.server`),
    whose parameters are its weights, their optimizer state and one buffer
    per weight for the pushed gradient sum (an accumulator named
    `<weight>.gradient`), and @main returns those gradients instead of the
    updates. The module's `dtc.parameter_servers` says which tensor goes to
    which server and which outputs carry it. With `staleness` S > 0 the
    servers apply each push as it comes (asynchronous, a worker at most S
    steps ahead of the slowest), so workers share nothing else: the loss's
    all-reduce becomes each worker's own mean, and any other collective over
    the axis is an error. The mesh may have no axis but `axis`; gradient
    clipping and --skip-nonfinite (which read every gradient) are refused.
    Runs after dtc-accumulate-gradients.
  }];
  let options = [
    Option<"servers", "servers", "int64_t", "1", "Server ranks">,
    Option<"staleness", "staleness", "int64_t", "0",
           "0: synchronous; S > 0: asynchronous, a worker at most S steps ahead">,
    Option<"axis", "axis", "std::string", "\"dp\"",
           "The mesh axis (by name) whose ranks are the workers">,
  ];
  let dependentDialects = ["dtc::graph::GraphDialect", "mlir::mesh::MeshDialect",
                           "mlir::func::FuncDialect"];
}

def CompressGradients : Pass<"dtc-compress-gradients", "mlir::func::FuncOp"> {
  let summary = "Send weight gradients' reductions in bf16 or f16";
  let description = [{
    Gradient compression (as Horovod's and PyTorch DDP's fp16 hooks): each
    mesh all-reduce or reduce-scatter of a weight's gradient (marked
    `dtc.gradient_reduction` by dtc-spmd-partition; kept so by
    dtc-accumulate-gradients) on f32 becomes a cast to `precision`, the
    reduction in that type, and a cast back to f32: half the bytes on the
    wire, each rank's reduction combining pairs in f32 and rounding once per
    hop (runtime/comm). Activations' reductions (tensor parallelism) and
    the loss stay f32. Runs after dtc-accumulate-gradients, so that a
    micro-batched step's deferred reduction is the one compressed.
  }];
  let options = [
    Option<"precision", "precision", "std::string", "\"bf16\"",
           "The type gradients travel in: bf16 (f32's range) or f16">,
  ];
  let dependentDialects = ["dtc::graph::GraphDialect", "mlir::mesh::MeshDialect"];
}

def PowerSgd : Pass<"dtc-power-sgd", "mlir::func::FuncOp"> {
  let summary = "Send weight gradients' all-reduces as rank-r factors (PowerSGD)";
  let description = [{
    PowerSGD (Vogels et al. 2019; PyTorch DDP's powerSGD_hook): each f32
    all-reduce of a weight's gradient (`dtc.gradient_reduction`, a sum)
    whose tensor, as an n x m matrix (its last dim m), moves at least twice
    the bytes of its factors, becomes P = all_reduce((M + E) Q), P's
    columns made orthonormal (Gram-Schmidt), Q' = all_reduce((M + E)^T P)
    and M^ = P Q'^T, with error feedback E' = M + E - M^ / ranks. E and Q
    are new zero-initialised parameters ("powersgd.K.error", "powersgd.K.q")
    the step updates (checkpointed like optimizer state); a zero Q (before
    the first step) is replaced by a fixed full-rank one. Runs after
    dtc-accumulate-gradients, so that a micro-batched step's deferred
    reduction is the one compressed.
  }];
  let options = [
    Option<"rank", "rank", "int64_t", "2", "The factors' rank r">,
  ];
  let dependentDialects = ["dtc::graph::GraphDialect", "mlir::mesh::MeshDialect"];
}

def PipelineSplit : Pass<"dtc-pipeline-split", "mlir::ModuleOp"> {
  let summary = "Cut a training step into pipeline stages, one function each";
  let description = [{
    Cuts @main's forward at `stages - 1` of its checkpoints (an activation
    that alone carries the forward on: each layer's input), chosen so that
    the stages' forward FLOPs are as even as they can be. Every other op
    goes where it belongs: a parameter with its earliest forward reader
    (which sends it to later ones each micro-batch: tied embeddings); a
    backward or optimizer op to the earliest stage among its operands'
    (the gradient of a stage's ops runs on that stage); constants to every
    stage that reads them. Each stage becomes a function @stageN (marked
    `dtc.stage`) with @main's arguments and the results it computes
    (`dtc.outputs`: their indices in @main's results); a value one stage
    makes and another reads is sent right after it is made
    (`graph.send ... to stage t`) and received at the same place in the
    reader (`graph.recv from stage s`), so each pair of stages meets its
    transfers in one order. Forward ops (and their transfers) are marked
    `dtc.pipeline_forward`; a step input the backward reads is copied in
    the forward (`graph.copy`), as the input holds a later micro-batch by
    then. The module records `dtc.pipeline` (stages, schedule, the
    micro-batches, the virtual stages) and @main goes. With the interleaved
    schedule the step is cut into `stages` x `virtual-stages` chunks and
    @stageN holds chunks N, N + stages, ...: its ops carry `dtc.chunk`
    (which of them), and its transfers `dtc.channel` (sending chunk x
    virtual stages + receiving chunk). Runs after dtc-spmd-partition and
    dtc-accumulate-gradients: each stage runs its part of the partitioned
    program on a copy of the data- and tensor-parallel mesh.
  }];
  let options = [
    Option<"stages", "stages", "int64_t", "1",
           "Pipeline stages (1: none; 0: as dtc-sharding-search chose)">,
    Option<"schedule", "schedule", "std::string", "\"1f1b\"", "gpipe, 1f1b or interleaved">,
    Option<"virtualStages", "virtual-stages", "int64_t", "1",
           "Model chunks per stage (the interleaved schedule: 2 or more)">,
    ListOption<"replicas", "replicas", "int64_t",
               "Copies of each stage's mesh, one count per stage (empty: one each)">,
  ];
  let dependentDialects = ["dtc::graph::GraphDialect"];
}

def ChannelsLast : Pass<"dtc-channels-last", "mlir::func::FuncOp"> {
  let summary = "Run f32 convolutions and pools on NHWC data, transposing only at chain ends";
  let description = [{
    Each f32 graph.conv2d, graph.max_pool2d and graph.avg_pool2d gets
    `channels_last` between a transpose to NHWC and one back. Transposes
    then sink through elementwise ops (when every non-scalar operand is the
    same transpose) and reductions, and cancel against their inverse, so
    data stays NHWC along a chain of such ops.
  }];
  let dependentDialects = ["dtc::graph::GraphDialect"];
}

def FuseMatmulBias : Pass<"dtc-fuse-matmul-bias", "mlir::func::FuncOp"> {
  let summary = "A matmul's bias add (and a ReLU or tanh GELU after it) as its GEMM's epilogue";
  let description = [{
    add(matmul(x, w), b), b a vector along the product's columns (or of
    leading 1s), with the matmul read by the add alone, becomes
    graph.matmul_bias; a relu or tanh gelu reading the sum alone joins it.
    A residual add joins as the GEMM's addend (or, in the backward, a layer
    norm gradient's residual), and a sum of dy's rows beside x^T dy (a
    bias's gradient beside its weight's) becomes graph.matmul_grad's second
    result; a tanh GELU's gradient as autodiff writes it, reading a product
    read by nothing else, becomes graph.matmul_gelu_grad. Last, an add of a
    plain product read by it alone and another value of its type becomes
    graph.matmul_acc (a layer's input gradient summed over the linear
    layers reading the input). Runs after the step is built and split,
    before elementwise fusion.
  }];
  let dependentDialects = ["dtc::graph::GraphDialect"];
}

def FuseNormGradients : Pass<"dtc-fuse-norm-gradients", "mlir::func::FuncOp"> {
  let summary = "A layer norm's scale and bias gradients summed by its gradient's row kernel";
  let description = [{
    The sums over the rows of dy * xhat (xhat from graph.layer_norm_backward's
    mean and rstd, as autodiff writes the scale's gradient) and of dy (the
    bias's) become partial sums per group of rows that the
    layer_norm_backward op writes beside the input's gradient
    (`scale_gradient`, `bias_gradient`), and a reduction of those over the
    groups. Runs after the step is built and split, before elementwise
    fusion.
  }];
  let dependentDialects = ["dtc::graph::GraphDialect"];
}

def FuseLossGradient : Pass<"dtc-fuse-loss-gradient", "mlir::func::FuncOp"> {
  let summary = "The logits' gradient written by graph.cross_entropy's row kernel";
  let description = [{
    (exp(logits - lse) - onehot(label)) * factor, as autodiff writes the
    gradient of a graph.cross_entropy, becomes the op's third result (its
    `grad_scale` operand the factor, whose ops, reading only labels and
    constants, move before it), so the logits are read once. Runs after
    the step is split over ranks and before it is cut into pipeline
    stages: the last stage then keeps the logits' gradient for its
    backward where it kept the logits (and the labels).
  }];
  let dependentDialects = ["dtc::graph::GraphDialect"];
}

def FuseElementwise : Pass<"dtc-fuse-elementwise", "mlir::func::FuncOp"> {
  let summary = "Merge chains of elementwise and broadcast ops into graph.fused kernels";
  let description = [{
    Every elementwise op ends up in exactly one graph.fused op. A producer
    joins its consumer's group when all its uses are in that group, so a
    value used by two kernels is computed once and stored; splat constants
    are copied into each group that reads them. One fused op becomes one
    kernel: one pass over the result, no intermediate tensors.
  }];
  let dependentDialects = ["dtc::graph::GraphDialect"];
}

def OutlineKernels : Pass<"dtc-outline-kernels", "mlir::ModuleOp"> {
  let summary = "Graph ops as kernel functions in @dtc_kernels";
  let description = [{
    A kernel function per graph.fused op, in the nested module
    @dtc_kernels: (inputs..., result) as memrefs, one linalg.generic over
    the result's elements whose indexing maps broadcast the inputs (NumPy
    rules) and whose body is the fused ops as scalar arith and math ops.
    Reductions, softmax, log-softmax, layer norm, transpose, slice, copy,
    concat, gather and scatter-add get one scf.parallel over their threads
    (an output element, a row or an update each), `dtc.threads` saying how
    many; long rows and folds (64 and up) are row kernels (`dtc.lanes`):
    each row's work spread over nested parallel loops over lanes, their
    parts combined by scf.reduce. The op names its kernel (`dtc.kernel`). An op or element type the
    generator does not cover gets no kernel; a note on @main counts them
    and says what was missing. Before any device mapping: the kernels lower
    for GPUs (dtc-kernels-to-ptx) and for the host alike.
  }];
  let dependentDialects = ["mlir::linalg::LinalgDialect", "mlir::arith::ArithDialect",
                           "mlir::scf::SCFDialect",
                           "mlir::math::MathDialect", "mlir::memref::MemRefDialect",
                           "mlir::func::FuncDialect"];
}

def BatchKernels : Pass<"dtc-batch-kernels", "mlir::ModuleOp"> {
  let summary = "Consecutive independent kernels (an optimizer's updates) as one launch";
  let description = [{
    A run of consecutive ops with kernels (dtc-outline-kernels: graph.fused's,
    and loop kernels that are one parallel loop over their threads, not row
    kernels or status words) that do not read each other's results, touch
    no bytes another member writes, and run in the same part of the step
    (an optimizer's updates; a layer norm's two gradient sums) gets one
    kernel: a parallel loop over the members' threads laid end to end, each
    member's a whole number of blocks of 256, a thread finding its member by
    a binary search of scf.if over their first threads. Kernels whose
    outputs start as zeros batch with their own kind alone (the batch's
    `dtc.zero_outputs`), none writing over its input. The last op names the
    kernel (`dtc.kernel`) and says how many instructions it runs
    (`dtc.batch`); the others are `dtc.batched`. Each distinct buffer is
    one argument (`dtc.batch_operands`: which of the batch's operands, the
    members' inputs then their outputs); at most 480 a launch. Members'
    kernels no op names any more are erased.
  }];
  let dependentDialects = ["mlir::scf::SCFDialect", "mlir::affine::AffineDialect",
                           "mlir::memref::MemRefDialect", "mlir::arith::ArithDialect"];
}

def RowsToGpu : Pass<"dtc-rows-to-gpu", "mlir::func::FuncOp"> {
  let summary = "A row kernel's rows onto blocks, its lanes onto a block's threads";
  let description = [{
    A kernel function with `dtc.lanes` (softmax and layer norm rows, from
    dtc-outline-kernels) is one scf.parallel over its rows whose body holds
    scf.parallel loops over the lanes. It becomes one gpu.launch: a block
    per row (the row index is the block's), `dtc.lanes` threads a block
    (each lane loop's index is the thread's); a lane loop's reduction
    becomes a gpu.all_reduce over the block (its combining region kept), a
    lane loop without results is followed by a gpu.barrier. What lies
    between the lane loops runs in every thread alike. Other functions are
    left for the parallel-loop mapping. The first step of
    dtc-kernels-to-ptx's lowering.
  }];
  let dependentDialects = ["mlir::gpu::GPUDialect", "mlir::arith::ArithDialect"];
}

def KernelsToPtx : Pass<"dtc-kernels-to-ptx", "mlir::ModuleOp"> {
  let summary = "Lower dtc-outline-kernels' functions to PTX for NVIDIA GPUs";
  let description = [{
    On a copy of @dtc_kernels per chip: row kernels a block per row
    (dtc-rows-to-gpu), the loop over another kernel's elements
    tiled by 256 and mapped onto blocks and threads, outlined into a
    gpu.module and lowered through NVVM to PTX by LLVM's NVPTX back end
    (bare-pointer parameters). Each kernel function gets `dtc.ptx`, a
    dictionary from chip to PTX text. Needs no GPU.
  }];
  let options = [
    Option<"chips", "chips", "std::string", "\"sm_80,sm_90\"",
           "Target chips, comma-separated">,
  ];
  // Every dialect the lowering meets: loading one while another thread
  // compiles (--recompute auto) would race, so they load up front.
  let dependentDialects = ["mlir::gpu::GPUDialect", "mlir::NVVM::NVVMDialect",
                           "mlir::LLVM::LLVMDialect", "mlir::scf::SCFDialect",
                           "mlir::cf::ControlFlowDialect", "mlir::affine::AffineDialect",
                           "mlir::index::IndexDialect", "mlir::memref::MemRefDialect",
                           "mlir::arith::ArithDialect", "mlir::math::MathDialect",
                           "mlir::linalg::LinalgDialect", "mlir::func::FuncDialect"];
}

def HoistConstants : Pass<"dtc-hoist-constants", "mlir::func::FuncOp"> {
  let summary = "Mark what depends only on parameters and constants for the load-time prologue";
  let description = [{
    Every op whose operands all come from parameters, constants or other
    such ops gets `dtc.prologue`: the runtime computes it once, after
    loading the parameters, not on every run, and its result persists like
    a parameter. Such ops move to the front of the function, in their
    order. With `parameters=false` (training, where parameters change every
    step) only constants count.
  }];
  let options = [
    Option<"parameters", "parameters", "bool", "true",
           "Treat parameters as constant (inference)">,
  ];
}

def ScheduleForMemory : Pass<"dtc-schedule", "mlir::func::FuncOp"> {
  let summary = "Order ops to lower peak activation memory";
  let description = [{
    A greedy list schedule: among the ops whose operands are ready, run the
    one that frees the most bytes net of what it allocates (ties keep the
    source order). The pass keeps whichever of this order and the source
    order has the lower simulated peak, and records both peaks on the
    function (`dtc.schedule`).
  }];
}

def BucketCollectives : Pass<"dtc-bucket-collectives", "mlir::func::FuncOp"> {
  let summary = "Send collectives of one group together, up to a bucket's bytes";
  let description = [{
    Walking the scheduled ops, all_reduce, all_gather and reduce_scatter
    ops that could share a message (graph::bucketMismatch) and run in the
    same part of the step are gathered into one graph.bucket, up to
    `bytes` of input a bucket (at most a quarter of its kind's bytes in
    the part, where that is over 1 MiB): a collective's start-up (a ring's
    p - 1 latencies) is then paid once for the bucket, not once a tensor.
    A bucket is sent where its last member was. The ops that read an
    earlier member move after it, in their order, when they lead nowhere
    but the step's results (an optimizer's updates, a gradient's
    accumulation); any other reader sends the bucket first, and every
    other op keeps its place. A bucket closes at its byte limit, with the
    last collective of its kind, at a send or receive, at the part's end,
    or at a reader that cannot wait. Left alone: collectives between
    pipeline stages or a stage's replicas (each stage's program buckets
    its own), all-reduces of a gradient accumulator in the once-per-step
    part (they run early, during the last micro-batch's backward:
    plan.proto's OverlappedInstruction), and groups of one rank.
  }];
  let options = [
    Option<"bytes", "bytes", "int64_t", "26214400",
           "A bucket's most bytes of input (0: one collective a message)">,
  ];
  let dependentDialects = ["dtc::graph::GraphDialect"];
}

def AssignBuffers : Pass<"dtc-assign-buffers", "mlir::func::FuncOp"> {
  let summary = "Give every tensor a byte offset in one arena, reusing dead bytes";
  let description = [{
    Values whose lifetimes (in the current op order) do not overlap may
    share bytes. Parameters and constants live for the whole program, at the
    start of the arena; the other values are placed greedily by size, each at
    the lowest offset free during its lifetime. Reshape, squeeze and
    unsqueeze results alias their operand (no copy). Results carry
    `dtc.offsets`, function arguments `dtc.offset`; the function gets
    `dtc.arena_bytes`, `dtc.parameter_bytes` and `dtc.unshared_bytes` (what
    the values would take without reuse).
  }];
}

def SpmdPartition : Pass<"dtc-spmd-partition", "mlir::ModuleOp"> {
  let summary = "Rewrite @main into the program each rank of the mesh runs on its shards";
  let description = [{
    The module holds a `mesh.mesh @mesh`; @main's arguments may carry
    `dtc.sharding` (per dim, the mesh axes that split it). Ops are visited
    in order; each op's sharding rule (graph::ShardableOp) decides how its
    factors are split from how its operands already are, operands that do
    not fit are resharded (all-gather), the op is rebuilt on local shapes,
    and a result left holding partial sums (a split reduction factor) is
    combined at once by an all-reduce (a mean: a sum, then a division by the
    group size). Results are made whole (all-gathered). Parameters keep the
    sharding they were computed with (`dtc.sharding`), so each rank loads
    only its part. Collectives are upstream `mesh` ops.
  }];
  let dependentDialects = ["dtc::graph::GraphDialect", "mlir::mesh::MeshDialect"];
}

#endif // DTC_COMPILER_PASSES
