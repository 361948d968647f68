//===- GraphOps.td - dtc graph dialect -------------------------*- tablegen -*-===//
//
// The graph dialect: static-shaped tensor ops, one op per definition. Each op
// carries its verifier and result-type rule here; the sharding rule, cost and
// gradient are added to the same op classes (see docs/graph-dialect.md).
//
//===----------------------------------------------------------------------===//

#ifndef DTC_GRAPH_OPS
#define DTC_GRAPH_OPS

include "mlir/IR/OpBase.td"
include "mlir/IR/AttrTypeBase.td"
include "mlir/IR/BuiltinAttributeInterfaces.td"
include "mlir/Interfaces/InferTypeOpInterface.td"
include "mlir/Interfaces/SideEffectInterfaces.td"
include "GraphDialect.td"
include "GraphInterfaces.td"

//===----------------------------------------------------------------------===//
// Type constraints
//===----------------------------------------------------------------------===//

def Graph_Tensor : StaticShapeTensorOf<[AnyFloat, AnyInteger]>;
def Graph_FloatTensor : StaticShapeTensorOf<[AnyFloat]>;
def Graph_BoolTensor : StaticShapeTensorOf<[I1]>;
def Graph_IndexTensor : StaticShapeTensorOf<[I32, I64]>;

// Marks ops that compute each result element from the operand elements at
// the same (broadcast) position: the fusion pass may merge them into one
// graph.fused kernel.
def Graph_Elementwise : NativeOpTrait<"GraphElementwise"> {
  let cppNamespace = "::dtc::graph";
}

//===----------------------------------------------------------------------===//
// Base classes. An op family shares its shape rule here, written once.
//===----------------------------------------------------------------------===//

// Every op defines its gradient (Gradients.cpp), even if only to say it
// has none, and its cost (Costs.cpp).
class Graph_Op<string mnemonic, list<Trait> traits = []>
    : Op<Graph_Dialect, mnemonic,
         !listconcat([Pure, DeclareOpInterfaceMethods<Graph_DifferentiableOpInterface>,
                      DeclareOpInterfaceMethods<Graph_CostOpInterface>,
                      DeclareOpInterfaceMethods<Graph_ShardingOpInterface>],
                     traits)> {
  let assemblyFormat = "operands attr-dict `:` functional-type(operands, results)";
}

// An op whose result types follow from its operands and attributes; the
// C++ side defines `inferReturnTypes` (in GraphOps.cpp, or in a base class).
class Graph_InferredOp<string mnemonic, list<Trait> traits = []>
    : Graph_Op<mnemonic, !listconcat([InferTypeOpAdaptor], traits)>;

// Elementwise on one tensor; the result has the operand's type (ODS derives
// the result-type rule from SameOperandsAndResultType).
class Graph_UnaryOp<string mnemonic, Type operandType = Graph_Tensor,
                    list<Trait> traits = []>
    : Graph_Op<mnemonic, !listconcat([SameOperandsAndResultType,
                                      InferTypeOpInterface, Graph_Elementwise], traits)> {
  let arguments = (ins operandType:$input);
  let results = (outs operandType:$output);
}

// Elementwise on two tensors with NumPy (ONNX multidirectional) broadcasting.
// `resultBool` makes the result i1 (comparisons).
// Elementwise on two tensors with NumPy (ONNX multidirectional) broadcasting.
// `resultBool` makes the result i1 (comparisons). `foldFn`, when given, is a
// C++ callable on (int64_t or double) pairs returning std::optional of the
// same type, used to fold constant operands (shape arithmetic).
class Graph_BinaryOp<string mnemonic, Type operandType = Graph_Tensor,
                     bit resultBool = 0, string foldFn = "">
    : Graph_InferredOp<mnemonic, [SameOperandsElementType, Graph_Elementwise]> {
  let arguments = (ins operandType:$lhs, operandType:$rhs);
  let results = (outs !if(resultBool, Graph_BoolTensor, operandType):$output);
  let hasFolder = !ne(foldFn, "");
  let extraClassDefinition = [{
    ::mlir::LogicalResult $cppClass::inferReturnTypes(
        ::mlir::MLIRContext *context, std::optional<::mlir::Location> loc,
        Adaptor adaptor, ::llvm::SmallVectorImpl<::mlir::Type> &types) {
      return ::dtc::graph::inferBroadcastType(loc, {adaptor.getLhs(), adaptor.getRhs()},
          }] # !if(resultBool, "::mlir::IntegerType::get(context, 1)", "nullptr") # [{, types);
    }
  }] # !if(!ne(foldFn, ""), [{
    ::mlir::OpFoldResult $cppClass::fold(FoldAdaptor adaptor) {
      return ::dtc::graph::foldBinary(getType(), adaptor.getLhs(), adaptor.getRhs(),
                                      }] # foldFn # [{);
    }
  }], "");
}

// Reduces `axes` (sorted, non-negative); `keepdims` keeps them as size 1.
// The result is the input's element type, or f32 for a 16-bit float input:
// the f32 accumulator kept rather than rounded (mixed precision's bias and
// norm gradients, which the optimizer reads in f32).
class Graph_ReduceOp<string mnemonic>
    : Graph_Op<mnemonic, [InferTypeOpAdaptorWithIsCompatible]> {
  let arguments = (ins Graph_Tensor:$input, DenseI64ArrayAttr:$axes,
                       DefaultValuedAttr<BoolAttr, "true">:$keepdims);
  let results = (outs Graph_Tensor:$output);
  let extraClassDefinition = [{
    ::mlir::LogicalResult $cppClass::inferReturnTypes(
        ::mlir::MLIRContext *, std::optional<::mlir::Location> loc,
        Adaptor adaptor, ::llvm::SmallVectorImpl<::mlir::Type> &types) {
      return ::dtc::graph::inferReduceType(loc, adaptor.getInput(),
          adaptor.getAxesAttr(), adaptor.getKeepdims(), types);
    }
    bool $cppClass::isCompatibleReturnTypes(::mlir::TypeRange inferred,
                                            ::mlir::TypeRange actual) {
      return ::dtc::graph::reduceTypesCompatible(inferred, actual);
    }
  }];
}

//===----------------------------------------------------------------------===//
// Sources: parameters and constants
//===----------------------------------------------------------------------===//

def Graph_ParameterOp : Graph_Op<"parameter"> {
  let summary = "A trainable parameter, loaded from the model's initializer `name`";
  let description = [{
    Parameters are kept distinct from constants: they are trained, sharded
    and checkpointed, and their values never enter the IR. `name` is the
    ONNX initializer the value comes from. When its bytes are in an external
    data file, the importer records where: `file` (relative to the model's
    folder) and the byte `offset` of the whole tensor in it, so that a rank
    reads its shard from there without parsing the model again. Both are
    optional and printed in the attribute dictionary.

    `frozen`, when present, says why training leaves the parameter as it
    is (a mask or a cos/sin table the exporter stored as an initializer, or
    the user's `--frozen` pattern): it gets no gradient, no optimizer state
    and no update, but is loaded, sharded and exported like any other.

    `copy_of`, when present, makes the parameter a copy of initializer
    `copy_of` (its first value, and its `file` and `offset`) for the one ONNX
    node `reader` (named by its first output): the exporter had merged
    weights initialised alike into that initializer, and each reader trains
    its own copy. `name` is the copy's own (`ln.weight@2`), under which the
    trained model is exported and `reader` rewired.

    `cast_of`, when present, makes the parameter parameter `cast_of`'s value
    in this one's element type (a bf16 step's copy of an f32 weight, which
    the step writes with the weight: dtc-keep-bf16-weights). It is made
    from that parameter wherever the runtime sets it (at load, on resuming),
    and neither checkpointed nor exported.
  }];
  let arguments = (ins StrAttr:$name, OptionalAttr<StrAttr>:$file,
                       OptionalAttr<I64Attr>:$offset, OptionalAttr<StrAttr>:$frozen,
                       OptionalAttr<StrAttr>:$copy_of, OptionalAttr<StrAttr>:$reader,
                       OptionalAttr<StrAttr>:$cast_of);
  let results = (outs Graph_FloatTensor:$output);
  let assemblyFormat = "$name attr-dict `:` type($output)";
  let builders = [
    // A parameter whose bytes are not in external data (or not in any file).
    OpBuilder<(ins "::mlir::Type":$output, "::mlir::StringAttr":$name), [{
      build($_builder, $_state, output, name, /*file=*/nullptr, /*offset=*/nullptr,
            /*frozen=*/nullptr, /*copy_of=*/nullptr, /*reader=*/nullptr,
            /*cast_of=*/nullptr);
    }]>
  ];
}

def Graph_ConstantOp : Graph_InferredOp<"constant", [ConstantLike]> {
  let summary = "A constant tensor held in the IR";
  let arguments = (ins ElementsAttr:$value);
  let results = (outs Graph_Tensor:$output);
  let assemblyFormat = "attr-dict $value";
  let hasFolder = 1;
}

//===----------------------------------------------------------------------===//
// Elementwise
//===----------------------------------------------------------------------===//

def Graph_AddOp : Graph_BinaryOp<"add", Graph_Tensor, 0, "[](auto a, auto b) { return std::optional(a + b); }">;
def Graph_SubOp : Graph_BinaryOp<"sub", Graph_Tensor, 0, "[](auto a, auto b) { return std::optional(a - b); }">;
def Graph_MulOp : Graph_BinaryOp<"mul", Graph_Tensor, 0, "[](auto a, auto b) { return std::optional(a * b); }">;
def Graph_DivOp : Graph_BinaryOp<"div", Graph_Tensor, 0, "[](auto a, auto b) { return ::dtc::graph::foldDivide(a, b); }">;
def Graph_PowOp : Graph_BinaryOp<"pow", Graph_Tensor, 0, "[](auto a, auto b) { return ::dtc::graph::foldPower(a, b); }">;
def Graph_MaxOp : Graph_BinaryOp<"max", Graph_Tensor, 0, "[](auto a, auto b) { return std::optional(a > b ? a : b); }">;
def Graph_MinOp : Graph_BinaryOp<"min", Graph_Tensor, 0, "[](auto a, auto b) { return std::optional(a < b ? a : b); }">;
def Graph_EqualOp : Graph_BinaryOp<"equal", Graph_Tensor, 1, "[](auto a, auto b) { return std::optional<decltype(a)>(a == b); }">;
def Graph_LessOp : Graph_BinaryOp<"less", Graph_Tensor, 1, "[](auto a, auto b) { return std::optional<decltype(a)>(a < b); }">;
def Graph_LessEqualOp : Graph_BinaryOp<"less_equal", Graph_Tensor, 1, "[](auto a, auto b) { return std::optional<decltype(a)>(a <= b); }">;
def Graph_GreaterOp : Graph_BinaryOp<"greater", Graph_Tensor, 1, "[](auto a, auto b) { return std::optional<decltype(a)>(a > b); }">;
def Graph_GreaterEqualOp : Graph_BinaryOp<"greater_equal", Graph_Tensor, 1, "[](auto a, auto b) { return std::optional<decltype(a)>(a >= b); }">;
def Graph_AndOp : Graph_BinaryOp<"and", Graph_BoolTensor, 0, "[](auto a, auto b) { return std::optional<decltype(a)>(a && b); }">;
def Graph_OrOp : Graph_BinaryOp<"or", Graph_BoolTensor, 0, "[](auto a, auto b) { return std::optional<decltype(a)>(a || b); }">;
def Graph_XorOp : Graph_BinaryOp<"xor", Graph_BoolTensor>;

def Graph_NegOp : Graph_UnaryOp<"neg"> { let hasFolder = 1; }
def Graph_AbsOp : Graph_UnaryOp<"abs"> { let hasFolder = 1; }
def Graph_ExpOp : Graph_UnaryOp<"exp", Graph_FloatTensor> { let hasFolder = 1; }
def Graph_LogOp : Graph_UnaryOp<"log", Graph_FloatTensor> { let hasFolder = 1; }
def Graph_SqrtOp : Graph_UnaryOp<"sqrt", Graph_FloatTensor> { let hasFolder = 1; }
def Graph_ReciprocalOp : Graph_UnaryOp<"reciprocal", Graph_FloatTensor> { let hasFolder = 1; }
def Graph_TanhOp : Graph_UnaryOp<"tanh", Graph_FloatTensor>;
def Graph_ErfOp : Graph_UnaryOp<"erf", Graph_FloatTensor>;
def Graph_SinOp : Graph_UnaryOp<"sin", Graph_FloatTensor> { let hasFolder = 1; }
def Graph_CosOp : Graph_UnaryOp<"cos", Graph_FloatTensor> { let hasFolder = 1; }
def Graph_SigmoidOp : Graph_UnaryOp<"sigmoid", Graph_FloatTensor>;
def Graph_ReluOp : Graph_UnaryOp<"relu">;
def Graph_NotOp : Graph_UnaryOp<"not", Graph_BoolTensor> { let hasFolder = 1; }

def Graph_GeluOp : Graph_UnaryOp<"gelu", Graph_FloatTensor> {
  let summary = "GELU; `approximate` is \"none\" (erf) or \"tanh\"";
  let arguments = (ins Graph_FloatTensor:$input,
                       DefaultValuedStrAttr<StrAttr, "none">:$approximate);
  let hasVerifier = 1;
}

def Graph_ClipOp : Graph_UnaryOp<"clip"> {
  let summary = "Clamps to [min, max]; either bound may be absent";
  let arguments = (ins Graph_Tensor:$input, OptionalAttr<F64Attr>:$min,
                       OptionalAttr<F64Attr>:$max);
}

def Graph_CastOp : Graph_Op<"cast", [SameOperandsAndResultShape, Graph_Elementwise]> {
  let summary = "Converts the element type; the result type names the target";
  let arguments = (ins Graph_Tensor:$input);
  let results = (outs Graph_Tensor:$output);
  let hasFolder = 1;
}

def Graph_WhereOp : Graph_InferredOp<"where", [Graph_Elementwise]> {
  let summary = "Selects x where cond is true, else y (with broadcasting)";
  let arguments = (ins Graph_BoolTensor:$cond, Graph_Tensor:$x, Graph_Tensor:$y);
  let results = (outs Graph_Tensor:$output);
  let hasFolder = 1;
}

def Graph_TopKOp : Graph_InferredOp<"top_k"> {
  let summary = "Indices of the k largest (or smallest) elements along an axis, in order";
  let description = [{
    The result has the input's shape with `k` along `axis` and holds i64
    indices into that axis: those of the k largest elements (the smallest
    when `largest` is false), the extreme first; equal values by the lower
    index, NaN above every number. ONNX TopK is this and a gather of the
    values at the indices, whose gradient is the gather's.
  }];
  let arguments = (ins Graph_Tensor:$input, I64Attr:$axis, I64Attr:$k, BoolAttr:$largest);
  let results = (outs Graph_Tensor:$output);
}

def Graph_TriluOp : Graph_InferredOp<"trilu"> {
  let summary = "Keeps the upper (or lower) triangle of the last two dims; zeros the rest";
  let arguments = (ins Graph_Tensor:$input, BoolAttr:$upper,
                       DefaultValuedAttr<I64Attr, "0">:$k);
  let results = (outs Graph_Tensor:$output);
}

//===----------------------------------------------------------------------===//
// Reductions and normalisations
//===----------------------------------------------------------------------===//

def Graph_ReduceSumOp : Graph_ReduceOp<"reduce_sum">;
def Graph_ReduceMeanOp : Graph_ReduceOp<"reduce_mean">;
def Graph_ReduceMaxOp : Graph_ReduceOp<"reduce_max">;
def Graph_ReduceMinOp : Graph_ReduceOp<"reduce_min">;

def Graph_SoftmaxOp : Graph_InferredOp<"softmax"> {
  let arguments = (ins Graph_FloatTensor:$input, I64Attr:$axis);
  let results = (outs Graph_FloatTensor:$output);
}

def Graph_LogSoftmaxOp : Graph_InferredOp<"log_softmax"> {
  let arguments = (ins Graph_FloatTensor:$input, I64Attr:$axis);
  let results = (outs Graph_FloatTensor:$output);
}

def Graph_RotaryOp : Graph_InferredOp<"rotary"> {
  let summary = "Rotary position embedding: x cos + rotate_half(x) sin, one kernel";
  let description = [{
    Over the last dim, D even, h = D / 2: `rotate_half(x)[i]` is `-x[i + h]`
    for i < h and `x[i - h]` after (Llama's and Mistral's halves), and the
    result is `x * cos + rotate_half(x) * sin`, cos and sin broadcast to x
    (NumPy rules; f32 tables, or x's type), computed in f32 and rounded
    once. With `backward` it is the gradient of that through x (cos and sin
    have none): `x * cos - rotate_half(x * sin)`. Formed by dtc-fuse-rotary
    from the slices, negation, concat, products and sum that spell it out.
  }];
  let arguments = (ins Graph_FloatTensor:$input, Graph_FloatTensor:$cos, Graph_FloatTensor:$sin,
                       UnitAttr:$backward);
  let results = (outs Graph_FloatTensor:$output);
  let hasVerifier = 1;
}

def Graph_LayerNormOp : Graph_InferredOp<"layer_norm"> {
  let summary = "Normalises dims [axis, rank) then applies scale and optional bias";
  let description = [{
    Each row (the dims [axis, rank)) becomes `(x - mean) / sqrt(var + eps)
    * scale + bias`, the statistics in f32 for 16-bit inputs. With `rms`
    (RMSNorm, as Llama, Mistral and T5 normalise) the row is not centred:
    `x / sqrt(mean(x^2) + eps) * scale`, no bias, and the scale must have
    the normalised shape. One op for both: the rows, kernels, sharding and
    gradient are the same but for the mean.
  }];
  let arguments = (ins Graph_FloatTensor:$input, Graph_FloatTensor:$scale,
                       Optional<Graph_FloatTensor>:$bias, I64Attr:$axis,
                       DefaultValuedAttr<F64Attr, "1e-5">:$epsilon, UnitAttr:$rms);
  let results = (outs Graph_FloatTensor:$output);
}

def Graph_LayerNormBackwardOp : Graph_Op<"layer_norm_backward"> {
  let summary = "Gradient of layer_norm's input, and each row's mean and 1/sqrt(var + eps)";
  let description = [{
    Over the normalised dims [axis, rank) of `input` (a row each), with the
    row's statistics recomputed from the input in f32:
    `grad_input = rstd * (h - mean(h) - xhat * mean(h * xhat))`, where
    `xhat = (input - mean) * rstd` and `h = grad_output * scale`. `mean`
    and `rstd` are f32 of the input's shape with the normalised dims 1: from
    them the scale's gradient, `sum(grad_output * xhat)` over the rows, is
    an elementwise product and a sum. One row kernel instead of the dozen
    kernels the gradient takes written as graph ops. With `rms` (RMSNorm's
    gradient) the row is not centred: `mean` is 0, `xhat = input * rstd`
    and `grad_input = rstd * (h - xhat * mean(h * xhat))`. A `residual`
    (at most one, of the input's type) is added to `grad_input` as it is
    written: a residual stream's gradient, which reaches the layer norm's
    input both through it and around it (dtc-fuse-matmul-bias joins the
    add).

    With `scale_gradient` (and `bias_gradient`) the op also sums, in f32,
    `grad_output * xhat` (and `grad_output`) over groups of rows: the rows
    are taken in `G` groups of `ceil(rows / G)` consecutive rows (the last
    may hold fewer, or none), and group g's sums are row g of a `partials`
    result, f32 `[G, 1..., normalised dims]` (the input's rank, the row dims
    past the first 1). Its sum over dim 0 is the scale's (the bias's)
    gradient: the kernel that has each row in hand adds it to its group's
    sums, where another kernel would read the input and grad_output again
    (dtc-fuse-norm-gradients).
  }];
  let arguments = (ins Graph_FloatTensor:$input, Graph_FloatTensor:$scale,
                       Graph_FloatTensor:$grad_output, Variadic<Graph_FloatTensor>:$residual,
                       I64Attr:$axis,
                       DefaultValuedAttr<F64Attr, "1e-5">:$epsilon, UnitAttr:$rms,
                       UnitAttr:$scale_gradient, UnitAttr:$bias_gradient);
  let results = (outs Graph_FloatTensor:$grad_input, Graph_FloatTensor:$mean,
                      Graph_FloatTensor:$rstd, Variadic<Graph_FloatTensor>:$partials);
  let hasVerifier = 1;
}

def Graph_CrossEntropyOp : Graph_Op<"cross_entropy"> {
  let summary = "Each row's -log_softmax(logits)[label], and its log-sum-exp";
  let description = [{
    Over the last dim of `logits` (the classes), in f32 for 16-bit logits:
    `lse = log(sum(exp(logits)))` (the row's max taken out first) and
    `loss = lse - logits[label]`; a label outside [0, classes) (a position
    the loss leaves out) gives a loss of 0 and no gradient. Both results
    are f32 of the labels' shape. One row kernel where log_softmax would
    write a tensor of the logits' size for a one-hot to pick from (at
    GPT-2's vocabulary, the step's largest tensors); the gradient,
    `(exp(logits - lse) - onehot(label)) * grad_loss`, is one elementwise
    kernel.

    With `grad_scale` (f32, the labels' shape: each row's factor, the loss's
    gradient times whether its label is a class) the op also writes that
    gradient, `grad_logits = (exp(logits - lse) - onehot(label)) *
    grad_scale` in f32, rounded once to the logits' type: the row kernel
    has the row in hand, where the elementwise kernel would read the logits
    again (dtc-fuse-loss-gradient). A label outside [0, classes) hits no
    class.
  }];
  let arguments = (ins Graph_FloatTensor:$logits, Graph_IndexTensor:$labels,
                       Optional<Graph_FloatTensor>:$grad_scale);
  let results = (outs Graph_FloatTensor:$loss, Graph_FloatTensor:$lse,
                      Variadic<Graph_FloatTensor>:$grad_logits);
  let hasVerifier = 1;
}

def Graph_BatchNormOp : Graph_InferredOp<"batch_norm"> {
  let summary = "Inference batch norm over dim 1 with running mean and variance";
  let description = [{
    `momentum` is for training, which normalises with the batch's statistics
    instead and updates the running ones as running * momentum + batch *
    (1 - momentum) (ONNX's convention; see expandBatchNormForTraining).
  }];
  let arguments = (ins Graph_FloatTensor:$input, Graph_FloatTensor:$scale,
                       Graph_FloatTensor:$bias, Graph_FloatTensor:$mean,
                       Graph_FloatTensor:$variance,
                       DefaultValuedAttr<F64Attr, "1e-5">:$epsilon,
                       DefaultValuedAttr<F64Attr, "0.9">:$momentum);
  let results = (outs Graph_FloatTensor:$output);
}

//===----------------------------------------------------------------------===//
// Linear algebra and convolution
//===----------------------------------------------------------------------===//

def Graph_MatmulOp : Graph_Op<"matmul", [InferTypeOpAdaptorWithIsCompatible]> {
  let summary = "Batched matrix product with broadcast batch dims";
  let description = [{
    Both operands have rank >= 2; the last two dims are the matrix, leading
    dims broadcast. `transpose_lhs` / `transpose_rhs` swap the last two dims
    of an operand first (what BLAS calls op(A)). A product of 16-bit
    operands may have an f32 result, its f32 accumulator kept rather than
    rounded (mixed precision's weight gradients, which the optimizer reads
    in f32).
  }];
  let extraClassDefinition = [{
    bool $cppClass::isCompatibleReturnTypes(::mlir::TypeRange inferred,
                                            ::mlir::TypeRange actual) {
      return ::dtc::graph::reduceTypesCompatible(inferred, actual);
    }
  }];
  let arguments = (ins Graph_Tensor:$lhs, Graph_Tensor:$rhs,
                       DefaultValuedAttr<BoolAttr, "false">:$transpose_lhs,
                       DefaultValuedAttr<BoolAttr, "false">:$transpose_rhs);
  let results = (outs Graph_Tensor:$output);
  let extraClassDeclaration = [{
    /// The rule of a product of these operands (matmul_bias shares it).
    static ::dtc::graph::ShardingRule shardingRuleOf(::mlir::Value output, ::mlir::Value lhs,
        ::mlir::Value rhs, bool transposeLhs, bool transposeRhs);
  }];
}

def Graph_MatmulBiasOp : Graph_InferredOp<"matmul_bias"> {
  let summary = "matmul, then a bias [N] added to every row, then an activation";
  let description = [{
    What a linear layer computes, as one op for the GEMM's epilogue
    (cuBLASLt's, oneDNN's): `activation` is "none", "relu" or "gelu_tanh".
    `keep_preactivation` (gelu_tanh only) adds a second result, the biased
    product before the activation, which the activation's gradient reads in
    training (cuBLASLt's GELU_AUX_BIAS writes both as the product is
    written). Formed by dtc-fuse-matmul-bias after the training step is
    built, so it has no gradient of its own. An `addend` (at most one, of
    the output's type, only without an activation) is added too: a
    residual connection's sum written by the GEMM (cuBLASLt's C, beta 1).
  }];
  let arguments = (ins Graph_FloatTensor:$lhs, Graph_FloatTensor:$rhs,
                       Graph_FloatTensor:$bias, Variadic<Graph_FloatTensor>:$addend,
                       DefaultValuedAttr<BoolAttr, "false">:$transpose_lhs,
                       DefaultValuedAttr<BoolAttr, "false">:$transpose_rhs,
                       DefaultValuedStrAttr<StrAttr, "none">:$activation,
                       UnitAttr:$keep_preactivation);
  let results = (outs Graph_FloatTensor:$output, Optional<Graph_FloatTensor>:$preactivation);
  let hasVerifier = 1;
}

def Graph_MatmulGradOp : Graph_Op<"matmul_grad"> {
  let summary = "A backward matmul that also writes the sum of its rhs's rows";
  let description = [{
    `lhs^T rhs` (2-D operands, as many rows): a linear layer's weight
    gradient `x^T dy`, whose `dy` rows' sum is the layer's bias gradient;
    the second result is that sum (any shape of N elements: the sum's as
    the step had it, [1, N] or [N]; f32 or the operands' type), computed as
    the product reads `dy` (cuBLASLt's BGRAD epilogue) rather than by a
    reduction reading `dy` again. Formed by dtc-fuse-matmul-bias after the
    training step is built, so it has no gradient of its own.
  }];
  let arguments = (ins Graph_FloatTensor:$lhs, Graph_FloatTensor:$rhs);
  let results = (outs Graph_FloatTensor:$output, Graph_FloatTensor:$bias_grad);
  let hasVerifier = 1;
}

def Graph_MatmulGeluGradOp : Graph_Op<"matmul_gelu_grad"> {
  let summary = "A matmul times tanh GELU's derivative at another value";
  let description = [{
    The product (as graph.matmul computes it) is a tanh GELU's output
    gradient; the result is the GELU's input gradient, the product times
    the GELU's derivative at `gelu_input` (of the output's type), computed
    as the product is written (cuBLASLt's DGELU epilogue, which reads the
    GELU's input that GELU_AUX_BIAS kept in the forward). Formed by
    dtc-fuse-matmul-bias from the gradient autodiff writes out in ops, so
    it has no gradient of its own.
  }];
  let arguments = (ins Graph_FloatTensor:$lhs, Graph_FloatTensor:$rhs,
                       Graph_FloatTensor:$gelu_input,
                       DefaultValuedAttr<BoolAttr, "false">:$transpose_lhs,
                       DefaultValuedAttr<BoolAttr, "false">:$transpose_rhs);
  let results = (outs Graph_FloatTensor:$output);
  let hasVerifier = 1;
}

def Graph_MatmulAccOp : Graph_Op<"matmul_acc"> {
  let summary = "A matmul plus another value of its type";
  let description = [{
    The product (as graph.matmul computes it) plus `addend`, of the
    output's type, added as the product is written (cuBLASLt's C with beta
    1): a sum of products, as a layer's input gradient is when several
    linear layers read the input (attention's query, key and value
    projections; an MLP's gate and up projections). Formed by
    dtc-fuse-matmul-bias from the adds autodiff writes, so it has no
    gradient of its own.
  }];
  let arguments = (ins Graph_FloatTensor:$lhs, Graph_FloatTensor:$rhs,
                       Graph_FloatTensor:$addend,
                       DefaultValuedAttr<BoolAttr, "false">:$transpose_lhs,
                       DefaultValuedAttr<BoolAttr, "false">:$transpose_rhs);
  let results = (outs Graph_FloatTensor:$output);
  let hasVerifier = 1;
}

def Graph_Conv2DOp : Graph_InferredOp<"conv2d"> {
  let summary = "2-D convolution, NCHW input, OIHW weight";
  let description = [{
    `relu` (set by the `dtc-fuse-conv` pass) passes the output through
    max(0, x), so that the kernel applies it while the output is in cache.
    `channels_last` (set by `dtc-channels-last`) makes the input and output
    NHWC; the weight stays OIHW.
  }];
  let arguments = (ins Graph_FloatTensor:$input, Graph_FloatTensor:$weight,
                       Optional<Graph_FloatTensor>:$bias,
                       DenseI64ArrayAttr:$strides, DenseI64ArrayAttr:$pads,
                       DenseI64ArrayAttr:$dilations,
                       DefaultValuedAttr<I64Attr, "1">:$groups,
                       UnitAttr:$relu, UnitAttr:$channels_last);
  let results = (outs Graph_FloatTensor:$output);
}

def Graph_AttentionOp : Graph_InferredOp<"attention"> {
  let summary = "Scaled dot-product attention, fused: no scores tensor";
  let description = [{
    softmax(scale q k^T + bias, masked) v over the last two dims: q [..., Sq,
    D], k [..., Sk, D], v [..., Sk, Dv], the leading dims the same on all
    three. `causal`: query i sees key j iff j <= i + Sk - Sq. `bias`
    (optional, f32, q's rank) is added to the scaled scores, broadcast: each
    leading dim q's or 1, then Sq or 1, then Sk (a padding mask of 0s and
    large negatives read from the model's inputs, a sliding window, a
    position bias); it has no gradient. A row whose every key is hidden
    (causal, or a bias of -inf) is 0. `lse` [..., Sq] (f32 whatever q's
    type) is each row's log-sum-exp of its scaled, biased scores, which the
    backward reads instead of the probabilities. Formed by
    dtc-fuse-attention from the ops that spell it out.

    `bshd`: q, k, v and the output hold the heads after the sequence, [...,
    S, H, D], as the projections before and after attention make them (no
    transposes around it); the scores are those of each leading index and
    head as before, so lse and the bias keep their [..., H, Sq(, Sk)] forms.

    `packed` (with `bshd`): q, k and v are one value, [..., S, 3, H, D], the
    product of one projection (transformers' GPT-2 `c_attn`) viewed with q,
    k and v its pieces 0, 1 and 2 along the 3: the kernels read each as
    [..., S, H, D] rows 3 H D apart, so no copies split them out of it. Its
    backward writes their gradients into one value of that shape.
    `interleaved` (with `packed`): the value is [..., S, H, 3, D], each
    head's q, k and v side by side (Megatron-LM's layout, which
    dtc-interleave-qkv makes so that tensor parallelism can split the
    projection by heads); the rows are still 3 H D apart.

    k and v may have fewer heads than q (grouped-query attention): their
    leading dims are q's but for the last (heads), which divides q's H; q's
    head h reads their head h / (H / theirs).
  }];
  let arguments = (ins Graph_FloatTensor:$q, Graph_FloatTensor:$k, Graph_FloatTensor:$v,
                       Optional<Graph_FloatTensor>:$bias,
                       F64Attr:$scale, DefaultValuedAttr<BoolAttr, "false">:$causal,
                       UnitAttr:$bshd, UnitAttr:$packed, UnitAttr:$interleaved);
  let results = (outs Graph_FloatTensor:$output, Graph_FloatTensor:$lse);
  let hasVerifier = 1;
}

def Graph_AttentionBackwardOp : Graph_Op<"attention_backward"> {
  let summary = "Gradients of attention's q, k and v, recomputing the probabilities from lse";
  let description = [{
    Three results, grad_q, grad_k and grad_v, of q's, k's and v's types;
    with `packed` one, the gradient of the packed value q, k and v are (in
    its layout, `interleaved` or not).
  }];
  let arguments = (ins Graph_FloatTensor:$q, Graph_FloatTensor:$k, Graph_FloatTensor:$v,
                       Graph_FloatTensor:$output, Graph_FloatTensor:$lse,
                       Graph_FloatTensor:$grad_output, Optional<Graph_FloatTensor>:$bias,
                       F64Attr:$scale, DefaultValuedAttr<BoolAttr, "false">:$causal,
                       UnitAttr:$bshd, UnitAttr:$packed, UnitAttr:$interleaved);
  let results = (outs Variadic<Graph_FloatTensor>:$grads);
  let hasVerifier = 1;
}

/// 2-D pooling over an NCHW input, or NHWC with `channels_last`.
class Graph_Pool2DOp<string mnemonic, Type tensorType, dag extraArgs>
    : Graph_InferredOp<mnemonic> {
  let arguments = !con((ins tensorType:$input,
                            DenseI64ArrayAttr:$kernel, DenseI64ArrayAttr:$strides,
                            DenseI64ArrayAttr:$pads, DenseI64ArrayAttr:$dilations,
                            DefaultValuedAttr<BoolAttr, "false">:$ceil_mode,
                            UnitAttr:$channels_last),
                       extraArgs);
  let results = (outs tensorType:$output);
  let extraClassDefinition = [{
    ::mlir::LogicalResult $cppClass::inferReturnTypes(
        ::mlir::MLIRContext *, std::optional<::mlir::Location> loc,
        Adaptor adaptor, ::llvm::SmallVectorImpl<::mlir::Type> &types) {
      return ::dtc::graph::inferPoolType(loc, adaptor.getInput(), adaptor.getKernelAttr(),
          adaptor.getStridesAttr(), adaptor.getPadsAttr(), adaptor.getDilationsAttr(),
          adaptor.getCeilMode(), adaptor.getChannelsLast(), types);
    }
  }];
}

def Graph_MaxPool2DOp : Graph_Pool2DOp<"max_pool2d", Graph_Tensor, (ins)>;
def Graph_AvgPool2DOp : Graph_Pool2DOp<"avg_pool2d", Graph_FloatTensor,
    (ins DefaultValuedAttr<BoolAttr, "false">:$count_include_pad)>;

//===----------------------------------------------------------------------===//
// Backward ops: what the gradients of convolution and pooling compute. Their
// result shapes are the forward op's operand shapes, which the forward
// shape rule cannot be run backwards to find (floor division), so they are
// stated, and each verifier checks them by running the forward rule.
//===----------------------------------------------------------------------===//

def Graph_Conv2DBackwardInputOp : Graph_Op<"conv2d_backward_input"> {
  let summary = "Gradient of conv2d's input (a transposed convolution), NCHW";
  let arguments = (ins Graph_FloatTensor:$grad_output, Graph_FloatTensor:$weight,
                       DenseI64ArrayAttr:$strides, DenseI64ArrayAttr:$pads,
                       DenseI64ArrayAttr:$dilations,
                       DefaultValuedAttr<I64Attr, "1">:$groups);
  let results = (outs Graph_FloatTensor:$output);
  let hasVerifier = 1;
}

def Graph_Conv2DBackwardWeightOp : Graph_Op<"conv2d_backward_weight"> {
  let summary = "Gradient of conv2d's weight, OIHW, from its NCHW input and output gradient";
  let arguments = (ins Graph_FloatTensor:$input, Graph_FloatTensor:$grad_output,
                       DenseI64ArrayAttr:$strides, DenseI64ArrayAttr:$pads,
                       DenseI64ArrayAttr:$dilations,
                       DefaultValuedAttr<I64Attr, "1">:$groups);
  let results = (outs Graph_FloatTensor:$output);
  let hasVerifier = 1;
}

def Graph_MaxPool2DBackwardOp : Graph_Op<"max_pool2d_backward"> {
  let summary = "Gradient of max_pool2d's input: each window's gradient goes to its first maximum";
  let arguments = (ins Graph_FloatTensor:$input, Graph_FloatTensor:$grad_output,
                       DenseI64ArrayAttr:$kernel, DenseI64ArrayAttr:$strides,
                       DenseI64ArrayAttr:$pads, DenseI64ArrayAttr:$dilations,
                       DefaultValuedAttr<BoolAttr, "false">:$ceil_mode);
  let results = (outs Graph_FloatTensor:$output);
  let hasVerifier = 1;
}

def Graph_AvgPool2DBackwardOp : Graph_Op<"avg_pool2d_backward"> {
  let summary = "Gradient of avg_pool2d's input: each window's gradient spread over its cells";
  let arguments = (ins Graph_FloatTensor:$grad_output,
                       DenseI64ArrayAttr:$kernel, DenseI64ArrayAttr:$strides,
                       DenseI64ArrayAttr:$pads, DenseI64ArrayAttr:$dilations,
                       DefaultValuedAttr<BoolAttr, "false">:$ceil_mode,
                       DefaultValuedAttr<BoolAttr, "false">:$count_include_pad);
  let results = (outs Graph_FloatTensor:$output);
  let hasVerifier = 1;
}

//===----------------------------------------------------------------------===//
// Data movement
//===----------------------------------------------------------------------===//

def Graph_GatherOp : Graph_InferredOp<"gather"> {
  let summary = "Takes slices of `data` along `axis` at `indices` (embedding lookup)";
  let description = [{
    Negative indices count from the end. With `skip_outside`, indices
    outside [0, dim) take zeros instead (no wrap, no error): `data` is one
    rank's block of a table split along `axis`, the indices shifted to it,
    and the ranks' results add up to the whole table's (dtc-spmd-partition;
    Megatron-LM's vocabulary-parallel embedding).
  }];
  let arguments = (ins Graph_Tensor:$data, Graph_IndexTensor:$indices, I64Attr:$axis,
                       UnitAttr:$skip_outside);
  let results = (outs Graph_Tensor:$output);
  let hasFolder = 1;
}

def Graph_ScatterAddOp : Graph_Op<"scatter_add"> {
  let summary = "Zeros of the result's shape plus `updates` added at `indices` along `axis`";
  let description = [{
    The inverse of gather (its gradient): `updates` has gather's result
    shape, result.shape[:axis] + indices.shape + result.shape[axis+1:], and
    rows sharing an index add up. Negative indices count from the end; with
    `skip_outside`, updates at indices outside [0, dim) are dropped (the
    result is one rank's block of a table split along `axis`, as gather's).
  }];
  let arguments = (ins Graph_FloatTensor:$updates, Graph_IndexTensor:$indices, I64Attr:$axis,
                       UnitAttr:$skip_outside);
  let results = (outs Graph_FloatTensor:$output);
  let hasVerifier = 1;
}

def Graph_ReshapeOp : Graph_Op<"reshape"> {
  let summary = "Same elements in row-major order, new static shape";
  let arguments = (ins Graph_Tensor:$input);
  let results = (outs Graph_Tensor:$output);
  let hasFolder = 1;
  let hasCanonicalizer = 1;
  let hasVerifier = 1;
}

def Graph_SqueezeOp : Graph_InferredOp<"squeeze"> {
  let summary = "Drops the size-1 dims `axes`";
  let arguments = (ins Graph_Tensor:$input, DenseI64ArrayAttr:$axes);
  let results = (outs Graph_Tensor:$output);
  let hasFolder = 1;
}

def Graph_UnsqueezeOp : Graph_InferredOp<"unsqueeze"> {
  let summary = "Inserts size-1 dims at `axes` (positions in the result)";
  let arguments = (ins Graph_Tensor:$input, DenseI64ArrayAttr:$axes);
  let results = (outs Graph_Tensor:$output);
  let hasFolder = 1;
}

def Graph_TransposeOp : Graph_InferredOp<"transpose"> {
  let summary = "Permutes dims: result dim i is input dim perm[i]";
  let arguments = (ins Graph_Tensor:$input, DenseI64ArrayAttr:$perm);
  let results = (outs Graph_Tensor:$output);
  let hasFolder = 1;
  let hasCanonicalizer = 1;
}

def Graph_BroadcastOp : Graph_InferredOp<"broadcast", [Graph_Elementwise]> {
  let summary = "Broadcasts to `shape` (NumPy rules, as ONNX Expand)";
  let arguments = (ins Graph_Tensor:$input, DenseI64ArrayAttr:$shape);
  let results = (outs Graph_Tensor:$output);
  let hasFolder = 1;
}

def Graph_ConcatOp : Graph_InferredOp<"concat"> {
  let arguments = (ins Variadic<Graph_Tensor>:$inputs, I64Attr:$axis);
  let results = (outs Graph_Tensor:$output);
  let hasFolder = 1;
}

def Graph_SplitOp : Graph_InferredOp<"split"> {
  let summary = "Cuts `axis` into pieces of `sizes`";
  let arguments = (ins Graph_Tensor:$input, I64Attr:$axis, DenseI64ArrayAttr:$sizes);
  let results = (outs Variadic<Graph_Tensor>:$outputs);
}

def Graph_SliceOp : Graph_InferredOp<"slice"> {
  let summary = "Strided slice: per dim, `sizes` elements from `offsets` by `strides`";
  let description = [{
    Element i of dim d comes from input index offsets[d] + i * strides[d].
    Strides may be negative (ONNX Slice with negative steps).
  }];
  let arguments = (ins Graph_Tensor:$input, DenseI64ArrayAttr:$offsets,
                       DenseI64ArrayAttr:$sizes, DenseI64ArrayAttr:$strides);
  let results = (outs Graph_Tensor:$output);
  let hasFolder = 1;
}

//===----------------------------------------------------------------------===//
// Pipeline stages
//===----------------------------------------------------------------------===//

// Not Graph_Ops: they move data between stages' programs (made by
// dtc-pipeline-split after the search), with no gradient, sharding rule or
// math. Their effects keep them in place: CSE and DCE leave them alone.
def Graph_SendOp : Op<Graph_Dialect, "send", [MemoryEffects<[MemWrite]>]> {
  let summary = "Send a tensor to pipeline stage `stage`";
  let description = [{
    The n-th send to a stage meets that stage's n-th receive from this one
    (per micro-batch part: forward, backward or once per step). Each rank
    sends to the rank of `stage` at its own data- and tensor-parallel place.
  }];
  let arguments = (ins Graph_Tensor:$input, I64Attr:$stage);
  let assemblyFormat = "$input `to` `stage` $stage attr-dict `:` type($input)";
}

def Graph_RecvOp : Op<Graph_Dialect, "recv", [MemoryEffects<[MemRead, MemWrite]>]> {
  let summary = "Receive a tensor from pipeline stage `stage`";
  let arguments = (ins I64Attr:$stage);
  let results = (outs Graph_Tensor:$output);
  let assemblyFormat = "`from` `stage` $stage attr-dict `:` type($output)";
}

def Graph_CopyOp : Op<Graph_Dialect, "copy", [Pure, SameOperandsAndResultType]> {
  let summary = "A copy of a tensor in its own buffer";
  let description = [{
    A pipeline stage's backward that reads one of the step's inputs reads
    this copy, made in the forward and kept with the micro-batch's other
    stashed values: by the time the backward runs, the input holds a later
    micro-batch.
  }];
  let arguments = (ins Graph_Tensor:$input);
  let results = (outs Graph_Tensor:$output);
  let assemblyFormat = "$input attr-dict `:` type($input)";
}

//===----------------------------------------------------------------------===//
// Fusion
//===----------------------------------------------------------------------===//

def Graph_FusedOp : Graph_Op<"fused", [IsolatedFromAbove, SingleBlock]> {
  let summary = "Elementwise ops evaluated in one pass over the results";
  let description = [{
    The body holds elementwise ops (and scalar or splat constants) over the
    block arguments, which stand for `inputs`; `graph.yield` gives the
    results, all of one shape. Every value in the body broadcasts to that
    shape, so one loop over its elements evaluates the whole body and
    writes every result: one kernel, no intermediate tensors. Made by the
    `dtc-fuse-elementwise` pass; a result besides the last is a value the
    body computes that is also read outside it (an optimizer's new moment,
    read by the parameter's update and returned).
  }];
  let arguments = (ins Variadic<Graph_Tensor>:$inputs);
  let results = (outs Variadic<Graph_Tensor>:$outputs);
  let regions = (region SizedRegion<1>:$body);
  let assemblyFormat = "$inputs attr-dict `:` functional-type($inputs, results) $body";
  let hasVerifier = 1;
}

def Graph_BucketOp : Op<Graph_Dialect, "bucket", [IsolatedFromAbove, SingleBlock]> {
  let summary = "Collectives of one kind over one group, sent as one message";
  let description = [{
    The body holds one mesh collective (all_reduce, all_gather or
    reduce_scatter) for each block argument, which stands for the input of
    the same position: all of one kind, on one mesh, over the same axes
    with the same reduction and element type (each may gather or scatter
    along its own dim); `graph.yield` gives their results in that order.
    The runtime sends the members as one message, paying a collective's
    start-up once (PyTorch DDP's gradient buckets, and FSDP's flattened
    parameters, for the same reason). Made by `dtc-bucket-collectives`.
  }];
  let arguments = (ins Variadic<Graph_Tensor>:$inputs);
  let results = (outs Variadic<Graph_Tensor>:$outputs);
  let regions = (region SizedRegion<1>:$body);
  let assemblyFormat = "$inputs attr-dict `:` functional-type($inputs, results) $body";
  let hasVerifier = 1;
}

def Graph_YieldOp : Op<Graph_Dialect, "yield",
                       [Pure, Terminator, ParentOneOf<["FusedOp", "BucketOp"]>]> {
  let summary = "The results of a graph.fused or graph.bucket body";
  let arguments = (ins Variadic<Graph_Tensor>:$values);
  let assemblyFormat = "$values attr-dict `:` type($values)";
}

#endif // DTC_GRAPH_OPS
