//===- OutlineKernels.cpp - graph ops as kernel functions ------------------===//
//
// Each graph.fused op becomes a kernel function in the nested module
// @dtc_kernels: one linalg.generic over the result's elements, the inputs
// read through indexing maps that broadcast them (NumPy rules: dims
// aligned right, a size-1 dim read at 0), the body the fused ops as scalar
// arith and math ops. The kernel takes the inputs' and the result's
// buffers in the fused op's order, each flat (a 1-D memref), as the
// runtime holds them. This is the kernel IR before
// any mapping to a device: dtc-kernels-to-ptx lowers it for NVIDIA GPUs,
// and the same functions lower for the host, so the code generator's
// numerics are checked on any machine. The other ops with a kernel
// (reductions, softmax and layer norm rows, data movement, gather and
// scatter-add) get theirs from LoopKernels.h: one parallel loop over their
// threads. An op names its kernel (`dtc.kernel`); one with an op or type
// the generator does not cover keeps none, and a note counts them and
// says what was missing. Why: docs/gpu-kernels.md.
//
//===----------------------------------------------------------------------===//
#include "compiler/CompileNotes.h"
#include "compiler/LoopKernels.h"
#include "compiler/Passes.h"
#include "dialects/graph/AttrNames.h"
#include "dialects/graph/GraphOps.h"

#include "mlir/Dialect/Arith/IR/Arith.h"
#include "mlir/Dialect/Linalg/IR/Linalg.h"
#include "mlir/Dialect/Math/IR/Math.h"
#include "mlir/Dialect/MemRef/IR/MemRef.h"
#include "mlir/IR/Builders.h"
#include "mlir/IR/IRMapping.h"
#include "llvm/ADT/TypeSwitch.h"
#include "llvm/Support/raw_ostream.h"

#include <map>

#include <cmath>

namespace dtc {
#define GEN_PASS_DEF_OUTLINEKERNELS
#include "compiler/Passes.h.inc"
} // namespace dtc

using namespace mlir;

namespace dtc {
namespace {

/// The scalar of a splat constant, or null.
TypedAttr splatOf(graph::ConstantOp c) {
  auto dense = dyn_cast<DenseElementsAttr>(c.getValue());
  if (!dense || !dense.isSplat())
    return {};
  return dense.getSplatValue<TypedAttr>();
}

/// Builds the scalar body: each graph op of the fused body as arith/math
/// ops on the elements. Fails (with `missing` naming what) on an op or an
/// element type it does not cover.
class ScalarBody {
public:
  ScalarBody(OpBuilder &b, Location loc, std::string &missing)
      : b_(b), loc_(loc), missing_(missing) {}

  IRMapping map;

  LogicalResult emit(Operation *op) {
    Value result = TypeSwitch<Operation *, Value>(op)
                       .Case([&](graph::ConstantOp c) -> Value {
                         TypedAttr v = splatOf(c);
                         if (!v || !supported(v.getType()))
                           return Value();
                         return b_.create<arith::ConstantOp>(loc_, v);
                       })
                       .Case([&](graph::BroadcastOp o) { return in(o.getInput()); })
                       .Default([&](Operation *o) { return scalarOp(o); });
    if (!result) {
      if (missing_.empty())
        missing_ = op->getName().getStringRef().str();
      return failure();
    }
    map.map(op->getResult(0), result);
    return success();
  }

  static bool supported(Type t) {
    return t.isF32() || t.isF64() || t.isBF16() || t.isF16() || t.isInteger(1) ||
           t.isInteger(32) || t.isInteger(64);
  }

private:
  Value in(Value v) { return map.lookupOrNull(v); }
  Value f(double x, Type t) { return b_.create<arith::ConstantOp>(loc_, b_.getFloatAttr(t, x)); }

  Value scalarOp(Operation *op) {
    SmallVector<Value> args;
    for (Value v : op->getOperands()) {
      Value s = in(v);
      if (!s)
        return Value();
      args.push_back(s);
    }
    Type out = llvm::cast<ShapedType>(op->getResult(0).getType()).getElementType();
    if (!supported(out))
      return Value();
    Type t = args.empty() ? out : args.front().getType();
    bool fl = isa<FloatType>(t);
    auto bin = [&](auto floatOp, auto intOp) -> Value {
      using F = decltype(floatOp);
      using I = decltype(intOp);
      if (fl)
        return b_.create<F>(loc_, args[0], args[1]);
      return b_.create<I>(loc_, args[0], args[1]);
    };
    auto cmp = [&](arith::CmpFPredicate fp, arith::CmpIPredicate ip) -> Value {
      if (fl)
        return b_.create<arith::CmpFOp>(loc_, fp, args[0], args[1]);
      return b_.create<arith::CmpIOp>(loc_, ip, args[0], args[1]);
    };
    return TypeSwitch<Operation *, Value>(op)
        .Case([&](graph::AddOp) { return bin(arith::AddFOp(), arith::AddIOp()); })
        .Case([&](graph::SubOp) { return bin(arith::SubFOp(), arith::SubIOp()); })
        .Case([&](graph::MulOp) { return bin(arith::MulFOp(), arith::MulIOp()); })
        .Case([&](graph::DivOp) { return bin(arith::DivFOp(), arith::DivSIOp()); })
        .Case([&](graph::MaxOp) { return bin(arith::MaximumFOp(), arith::MaxSIOp()); })
        .Case([&](graph::MinOp) { return bin(arith::MinimumFOp(), arith::MinSIOp()); })
        .Case([&](graph::PowOp) -> Value {
          return fl ? b_.create<math::PowFOp>(loc_, args[0], args[1]).getResult() : Value();
        })
        .Case([&](graph::EqualOp) { return cmp(arith::CmpFPredicate::OEQ, arith::CmpIPredicate::eq); })
        .Case([&](graph::LessOp) { return cmp(arith::CmpFPredicate::OLT, arith::CmpIPredicate::slt); })
        .Case([&](graph::LessEqualOp) { return cmp(arith::CmpFPredicate::OLE, arith::CmpIPredicate::sle); })
        .Case([&](graph::GreaterOp) { return cmp(arith::CmpFPredicate::OGT, arith::CmpIPredicate::sgt); })
        .Case([&](graph::GreaterEqualOp) { return cmp(arith::CmpFPredicate::OGE, arith::CmpIPredicate::sge); })
        .Case([&](graph::AndOp) { return b_.create<arith::AndIOp>(loc_, args[0], args[1]).getResult(); })
        .Case([&](graph::OrOp) { return b_.create<arith::OrIOp>(loc_, args[0], args[1]).getResult(); })
        .Case([&](graph::XorOp) { return b_.create<arith::XOrIOp>(loc_, args[0], args[1]).getResult(); })
        .Case([&](graph::NotOp) -> Value {
          Value one = b_.create<arith::ConstantOp>(loc_, b_.getIntegerAttr(t, 1));
          return b_.create<arith::XOrIOp>(loc_, args[0], one);
        })
        .Case([&](graph::NegOp) -> Value {
          if (fl)
            return b_.create<arith::NegFOp>(loc_, args[0]);
          Value zero = b_.create<arith::ConstantOp>(loc_, b_.getIntegerAttr(t, 0));
          return b_.create<arith::SubIOp>(loc_, zero, args[0]);
        })
        .Case([&](graph::AbsOp) -> Value {
          return fl ? b_.create<math::AbsFOp>(loc_, args[0]).getResult()
                    : b_.create<math::AbsIOp>(loc_, args[0]).getResult();
        })
        .Case([&](graph::ExpOp) { return floatUnary<math::ExpOp>(fl, args); })
        .Case([&](graph::LogOp) { return floatUnary<math::LogOp>(fl, args); })
        .Case([&](graph::SqrtOp) { return floatUnary<math::SqrtOp>(fl, args); })
        .Case([&](graph::TanhOp) { return floatUnary<math::TanhOp>(fl, args); })
        .Case([&](graph::ErfOp) { return floatUnary<math::ErfOp>(fl, args); })
        .Case([&](graph::SinOp) { return floatUnary<math::SinOp>(fl, args); })
        .Case([&](graph::CosOp) { return floatUnary<math::CosOp>(fl, args); })
        .Case([&](graph::ReciprocalOp) -> Value {
          return b_.create<arith::DivFOp>(loc_, f(1, t), args[0]);
        })
        .Case([&](graph::SigmoidOp) -> Value { // 1 / (1 + e^-x)
          Value e = b_.create<math::ExpOp>(loc_, b_.create<arith::NegFOp>(loc_, args[0]));
          return b_.create<arith::DivFOp>(loc_, f(1, t), b_.create<arith::AddFOp>(loc_, f(1, t), e));
        })
        .Case([&](graph::ReluOp) -> Value {
          return fl ? b_.create<arith::MaximumFOp>(loc_, args[0], f(0, t)).getResult() : Value();
        })
        .Case([&](graph::GeluOp g) -> Value {
          Value x = args[0];
          if (g.getApproximate() == "tanh") { // 0.5 x (1 + tanh(sqrt(2/pi) (x + 0.044715 x^3)))
            Value x3 = b_.create<arith::MulFOp>(loc_, x, b_.create<arith::MulFOp>(loc_, x, x));
            Value inner = b_.create<arith::AddFOp>(
                loc_, x, b_.create<arith::MulFOp>(loc_, x3, f(0.044715, t)));
            Value th = b_.create<math::TanhOp>(
                loc_, b_.create<arith::MulFOp>(loc_, inner, f(std::sqrt(2 / M_PI), t)));
            return b_.create<arith::MulFOp>(
                loc_, b_.create<arith::MulFOp>(loc_, x, f(0.5, t)),
                b_.create<arith::AddFOp>(loc_, th, f(1, t)));
          }
          Value e = b_.create<math::ErfOp>(loc_, b_.create<arith::MulFOp>(loc_, x, f(M_SQRT1_2, t)));
          return b_.create<arith::MulFOp>(loc_, b_.create<arith::MulFOp>(loc_, x, f(0.5, t)),
                                          b_.create<arith::AddFOp>(loc_, e, f(1, t)));
        })
        .Case([&](graph::ClipOp c) -> Value {
          if (!fl)
            return Value();
          Value v = args[0];
          if (auto lo = c.getMin())
            v = b_.create<arith::MaximumFOp>(loc_, v, f(lo->convertToDouble(), t));
          if (auto hi = c.getMax())
            v = b_.create<arith::MinimumFOp>(loc_, v, f(hi->convertToDouble(), t));
          return v;
        })
        .Case([&](graph::WhereOp) -> Value {
          return b_.create<arith::SelectOp>(loc_, args[0], args[1], args[2]);
        })
        .Case([&](graph::CastOp) { return cast(args[0], out); })
        .Default([](Operation *) { return Value(); });
  }

  template <typename OpTy> Value floatUnary(bool fl, ArrayRef<Value> args) {
    return fl ? b_.create<OpTy>(loc_, args[0]).getResult() : Value();
  }

  Value cast(Value v, Type to) {
    Type from = v.getType();
    if (from == to)
      return v;
    auto fromF = dyn_cast<FloatType>(from), toF = dyn_cast<FloatType>(to);
    if (fromF && toF)
      return fromF.getWidth() < toF.getWidth() ? b_.create<arith::ExtFOp>(loc_, to, v).getResult()
                                               : b_.create<arith::TruncFOp>(loc_, to, v).getResult();
    if (fromF) // to an integer: toward zero; to bool: nonzero
      return to.isInteger(1) ? b_.create<arith::CmpFOp>(loc_, arith::CmpFPredicate::UNE, v,
                                                        f(0, from)).getResult()
                             : b_.create<arith::FPToSIOp>(loc_, to, v).getResult();
    if (toF)
      return from.isInteger(1) ? b_.create<arith::UIToFPOp>(loc_, to, v).getResult()
                               : b_.create<arith::SIToFPOp>(loc_, to, v).getResult();
    if (to.isInteger(1))
      return b_.create<arith::CmpIOp>(loc_, arith::CmpIPredicate::ne, v,
                                      b_.create<arith::ConstantOp>(loc_, b_.getIntegerAttr(from, 0)));
    unsigned a = from.getIntOrFloatBitWidth(), z = to.getIntOrFloatBitWidth();
    if (a < z)
      return from.isInteger(1) ? b_.create<arith::ExtUIOp>(loc_, to, v).getResult()
                               : b_.create<arith::ExtSIOp>(loc_, to, v).getResult();
    return b_.create<arith::TruncIOp>(loc_, to, v);
  }

  OpBuilder &b_;
  Location loc_;
  std::string &missing_;
};

/// Where the kernel reads `input` (of `type`, a flat buffer) at element
/// d0 of `result` (flat, row-major): NumPy broadcasting, dims aligned
/// right, a size-1 dim read at 0. Coordinate k of d0 is
/// (d0 floordiv stride_k) mod size_k.
AffineMap broadcastMap(MLIRContext *context, RankedTensorType type, RankedTensorType result) {
  int64_t rank = result.getRank(), offset = rank - type.getRank();
  AffineExpr d0 = getAffineDimExpr(0, context);
  if (type.getShape() == result.getShape())
    return AffineMap::get(1, 0, d0);
  SmallVector<int64_t> resultStrides(size_t(rank), 1);
  for (int64_t k = rank - 1; k > 0; --k)
    resultStrides[size_t(k - 1)] = resultStrides[size_t(k)] * result.getDimSize(k);
  AffineExpr at = getAffineConstantExpr(0, context);
  int64_t stride = 1;
  for (int64_t d = type.getRank() - 1; d >= 0; --d) {
    int64_t k = offset + d, size = result.getDimSize(k);
    if (!(type.getDimSize(d) == 1 && size != 1)) {
      AffineExpr coordinate = d0.floorDiv(resultStrides[size_t(k)]);
      if (k > 0)
        coordinate = coordinate % size;
      at = at + coordinate * stride;
    }
    stride *= type.getDimSize(d);
  }
  return AffineMap::get(1, 0, at);
}

/// A flat buffer of `type`'s elements.
MemRefType flatMemRef(RankedTensorType type) {
  return MemRefType::get({type.getNumElements()}, type.getElementType());
}

/// What a kernel was made of, for the note.
std::string kindOf(Operation *op) {
  return llvm::TypeSwitch<Operation *, std::string>(op)
      .Case([](graph::FusedOp) { return "elementwise"; })
      .Case<graph::ReduceSumOp, graph::ReduceMeanOp, graph::ReduceMaxOp, graph::ReduceMinOp>(
          [](Operation *) { return "reduce"; })
      .Case<graph::SoftmaxOp, graph::LogSoftmaxOp, graph::LayerNormOp,
            graph::LayerNormBackwardOp, graph::CrossEntropyOp>(
          [](Operation *) { return "row"; })
      .Case<graph::MaxPool2DOp, graph::AvgPool2DOp, graph::MaxPool2DBackwardOp,
            graph::AvgPool2DBackwardOp>([](Operation *) { return "pool"; })
      .Case([](graph::BatchNormOp) { return "batch norm"; })
      .Default([](Operation *) { return "data movement"; });
}

struct OutlineKernels : impl::OutlineKernelsBase<OutlineKernels> {
  void runOnOperation() override {
    ModuleOp module = getOperation();
    OpBuilder b(&getContext());
    module->setAttr(attr::kBackend, b.getStringAttr("cuda"));
    ModuleOp kernels;
    int64_t count = 0, missed = 0;
    std::map<std::string, int64_t> kinds;   // kernels made, by kind
    std::map<std::string, int64_t> missing; // what kept ops from a kernel
    std::map<std::string, func::FuncOp> distinct; // a kernel's text after its name -> it
    SmallVector<Operation *> ops;
    for (auto program : module.getOps<func::FuncOp>())
      program.walk([&](Operation *op) {
        // An op with no elements to write has nothing to launch (its loop
        // folds away): the runtime's host kernel does nothing as well.
        bool empty = llvm::all_of(op->getResultTypes(), [](Type t) {
          auto shaped = dyn_cast<ShapedType>(t);
          return shaped && shaped.hasStaticShape() && shaped.getNumElements() == 0;
        });
        if ((isa<graph::FusedOp>(op) || hasLoopKernel(op)) && !empty)
          ops.push_back(op);
      });
    for (Operation *op : ops) {
      if (!kernels) {
        b.setInsertionPointToEnd(module.getBody());
        kernels = b.create<ModuleOp>(module.getLoc(), StringRef(attr::kKernelModule));
      }
      std::string why;
      b.setInsertionPointToEnd(kernels.getBody());
      auto nextName = [&] { return "kernel_" + std::to_string(count++); };
      SmallVector<func::FuncOp> funcs;
      if (auto fused = dyn_cast<graph::FusedOp>(op)) {
        if (func::FuncOp func = elementwiseKernel(b, fused, nextName(), why))
          funcs.push_back(func);
      } else {
        funcs = buildLoopKernels(b, op, nextName, why);
      }
      if (funcs.empty()) {
        ++missed;
        ++missing[why];
        continue;
      }
      // One kernel per instruction the op becomes: a split's pieces' as a
      // list. A kernel the same as one made before (a repeated layer's) is
      // that one: lowered once, loaded once.
      SmallVector<Attribute> names;
      for (func::FuncOp func : funcs) {
        std::string text;
        llvm::raw_string_ostream os(text);
        func.print(os);
        std::string key = text.substr(text.find('('));
        auto [it, fresh] = distinct.try_emplace(key, func);
        if (!fresh)
          func.erase();
        names.push_back(SymbolRefAttr::get(b.getStringAttr(attr::kKernelModule),
                                           {FlatSymbolRefAttr::get(it->second)}));
      }
      op->setAttr(attr::kKernel, names.size() == 1 ? names[0] : b.getArrayAttr(names));
      kinds[kindOf(op)] += int64_t(funcs.size());
    }
    if (kernels && kernels.getBody()->empty())
      kernels.erase();
    auto main = module.lookupSymbol<func::FuncOp>("main");
    if (!main)
      return;
    std::string made;
    int64_t generated = 0;
    for (const auto &[kind, n] : kinds) {
      made += (made.empty() ? "" : ", ") + std::to_string(n) + " " + kind;
      generated += n;
    }
    if (generated)
      addNote(main, "kernels: " + std::to_string(generated) + " generated (" + made + "), " +
                        std::to_string(distinct.size()) + " distinct");
    if (missed == 0)
      return;
    std::string text;
    for (const auto &[what, n] : missing)
      text += (text.empty() ? "" : ", ") + what + " (" + std::to_string(n) + ")";
    addNote(main, "kernels: " + std::to_string(missed) + " ops get none: " + text);
  }

  /// `fused`'s kernel: one linalg.generic over its results' elements; null
  /// (with `why`) when its body has an op or type the generator does not cover.
  static func::FuncOp elementwiseKernel(OpBuilder &b, graph::FusedOp fused, StringRef name,
                                        std::string &why) {
    MLIRContext *context = b.getContext();
    auto result = cast<RankedTensorType>(fused.getResult(0).getType()); // all one shape
    for (Type type : fused.getResultTypes())
      if (Type element = cast<RankedTensorType>(type).getElementType();
          !ScalarBody::supported(element)) {
        llvm::raw_string_ostream os(why);
        os << element << " results";
        return {};
      }
    // The kernel: (inputs..., results...) as flat buffers, one loop over
    // the results' elements (the runtime's buffers are flat; one loop maps
    // onto blocks of threads whatever the rank).
    const size_t inputs = fused.getInputs().size(), results = fused.getNumResults();
    SmallVector<Type> args;
    for (Value in : fused.getInputs())
      args.push_back(flatMemRef(cast<RankedTensorType>(in.getType())));
    for (Type type : fused.getResultTypes())
      args.push_back(flatMemRef(cast<RankedTensorType>(type)));
    auto func = b.create<func::FuncOp>(fused.getLoc(), name, b.getFunctionType(args, {}));
    func->setAttr(attr::kThreads, b.getI64IntegerAttr(result.getNumElements()));
    Block *entry = func.addEntryBlock();
    OpBuilder::InsertionGuard guard(b);
    b.setInsertionPointToStart(entry);
    SmallVector<AffineMap> maps;
    for (Value in : fused.getInputs())
      maps.push_back(broadcastMap(context, cast<RankedTensorType>(in.getType()), result));
    maps.append(results, b.getMultiDimIdentityMap(1));
    SmallVector<utils::IteratorType> iterators{utils::IteratorType::parallel};
    bool ok = true;
    ValueRange params(entry->getArguments());
    b.create<linalg::GenericOp>(
        fused.getLoc(), params.take_front(inputs), params.drop_front(inputs), maps, iterators,
        [&](OpBuilder &nested, Location loc, ValueRange scalars) {
          ScalarBody body(nested, loc, why);
          Block &fusedBody = fused.getBody().front();
          for (auto [arg, scalar] : llvm::zip(fusedBody.getArguments(), scalars))
            body.map.map(arg, scalar);
          for (Operation &op : fusedBody.without_terminator())
            if (ok && failed(body.emit(&op)))
              ok = false;
          SmallVector<Value> outs;
          for (auto [k, yielded] : llvm::enumerate(fusedBody.getTerminator()->getOperands())) {
            Value out = ok ? body.map.lookupOrNull(yielded) : Value();
            outs.push_back(out ? out : scalars[inputs + k]);
          }
          nested.create<linalg::YieldOp>(loc, outs);
        });
    b.create<func::ReturnOp>(fused.getLoc());
    if (!ok) {
      func.erase();
      return {};
    }
    return func;
  }
};

} // namespace
} // namespace dtc
