//===- ParameterServer.cpp - workers push gradients, servers update -------===//
//
// Passes description: compiler/Passes.td. The step is cut after
// partitioning, as a pipeline is: the data-parallel program loses its
// weight gradients' all-reduces and its optimizer, which goes, op for op,
// into one function per server. Why whole tensors per server rather than a
// slice of each (MXNet splits large arrays): a server then runs the
// optimizer exactly as the single-device step does, with no slicing of
// weight decay or state, and a tensor's push is one contiguous block; the
// cost is balance (a server holds at least the largest tensor), which the
// note states. docs/parameter-servers.md explains the runtime side.
//
//===----------------------------------------------------------------------===//
#include "compiler/CompileNotes.h"
#include "compiler/OwnLoss.h"
#include "compiler/Passes.h"
#include "dialects/graph/AttrNames.h"
#include "dialects/graph/GraphOps.h"
#include "plan/FormatBytes.h"

#include "mlir/Dialect/Mesh/IR/MeshOps.h"
#include "mlir/IR/Builders.h"
#include "mlir/IR/BuiltinOps.h"
#include "mlir/IR/IRMapping.h"

#include "llvm/ADT/SetVector.h"
#include "llvm/ADT/StringMap.h"

#include <algorithm>
#include <cmath>
#include <numeric>

namespace dtc {
#define GEN_PASS_DEF_PARAMETERSERVER
#include "compiler/Passes.h.inc"
} // namespace dtc

using namespace mlir;

namespace dtc {
namespace {

int64_t tensorBytes(Type type) {
  auto tensor = cast<RankedTensorType>(type);
  return tensor.getNumElements() * int64_t(tensor.getElementTypeBitWidth() / 8);
}

/// A weight's share of the step: its gradient (as each worker has it) and
/// the updates that read it (the weight and its optimizer state).
struct Tensor {
  Value gradient;                // what the worker pushes (its own part)
  Value reduced;                 // what the optimizer read (the sum, on the server)
  SmallVector<unsigned> results; // of @main: the updates it feeds
  std::string weight;            // the parameter the updates train
  int64_t bytes = 0;
  llvm::SetVector<Operation *> ops; // the optimizer's, from `reduced` to the updates
  int64_t sparseRows = 0;            // an embedding's gradient: at most these rows nonzero
};

/// The rows of an embedding's gradient a step can touch: the lookups'
/// count (times the micro-batches accumulated), when `pushed` is a
/// scatter-add along dim 0 (or an accumulator plus one); 0 otherwise.
int64_t sparseRowsOf(Value pushed, int64_t microBatches) {
  Value v = pushed;
  while (auto add = v.getDefiningOp<graph::AddOp>()) {
    auto accumulator = [](Value x) {
      auto p = x.getDefiningOp<graph::ParameterOp>();
      return p && p->hasAttr(attr::kAccumulator);
    };
    if (accumulator(add.getOperand(0)))
      v = add.getOperand(1);
    else if (accumulator(add.getOperand(1)))
      v = add.getOperand(0);
    else
      return 0;
  }
  auto scatter = v.getDefiningOp<graph::ScatterAddOp>();
  if (!scatter || scatter.getAxis() != 0)
    return 0;
  auto rows = cast<RankedTensorType>(pushed.getType()).getDimSize(0);
  int64_t lookups = cast<RankedTensorType>(scatter.getIndices().getType()).getNumElements();
  return std::min<int64_t>(rows, lookups * std::max<int64_t>(1, microBatches));
}

/// `type` cut to a row block's rows when it has the weight's rows (a row
/// block's values), else as it is (scalars).
template <typename Piece> Type blockType(Type type, const Piece &piece) {
  auto tensor = cast<RankedTensorType>(type);
  if (!piece.rows || tensor.getRank() == 0)
    return type;
  SmallVector<int64_t> shape(tensor.getShape());
  shape[0] = piece.rows;
  return RankedTensorType::get(shape, tensor.getElementType());
}

/// Whether a tensor's optimizer may run on row blocks: every op elementwise
/// on values of the weight's shape or scalars, constants scalars.
bool sliceable(const Tensor &t, RankedTensorType weight) {
  if (weight.getRank() == 0)
    return false;
  auto fits = [&](Type type) {
    auto tensor = dyn_cast<RankedTensorType>(type);
    return tensor && (tensor.getRank() == 0 || tensor == weight);
  };
  for (Operation *op : t.ops) {
    bool kind = isa<graph::ParameterOp, graph::ConstantOp>(op) ||
                (op->hasTrait<graph::GraphElementwise>() && !isa<graph::BroadcastOp>(op));
    if (!kind || !llvm::all_of(op->getResultTypes(), fits) ||
        !llvm::all_of(op->getOperandTypes(), fits))
      return false;
    if (isa<graph::ConstantOp>(op) && cast<RankedTensorType>(op->getResult(0).getType()).getRank())
      return false;
  }
  return true;
}

struct ParameterServer : impl::ParameterServerBase<ParameterServer> {
  using ParameterServerBase::ParameterServerBase;

  void runOnOperation() override {
    if (failed(split()))
      signalPassFailure();
  }

  LogicalResult split() {
    ModuleOp module = getOperation();
    auto main = module.lookupSymbol<func::FuncOp>("main");
    auto training = main ? main->getAttrOfType<DictionaryAttr>(attr::kTraining) : DictionaryAttr();
    if (!training)
      return module.emitError("--sync ps splits a training step: compile with --train");
    if (servers < 1)
      return main.emitError("--servers needs at least 1 server rank, got ") << int64_t(servers);
    if (staleness < 0)
      return main.emitError("--staleness needs 0 (synchronous) or a step count, got ")
             << int64_t(staleness);
    if (auto clip = training.getAs<FloatAttr>("clip_norm"); clip && clip.getValueAsDouble() > 0)
      return main.emitError("--sync ps with --clip-norm is not built yet: clipping reads every "
                            "weight's gradient, which the servers hold apart");
    if (auto skip = training.getAs<BoolAttr>("skip_nonfinite"); skip && skip.getValue())
      return main.emitError("--sync ps with --skip-nonfinite is not built yet: the check reads "
                            "every weight's gradient, which the servers hold apart");
    auto names = module->getAttrOfType<ArrayAttr>(attr::kMeshAxisNames);
    mesh::MeshOp meshOp;
    module.walk([&](mesh::MeshOp m) { meshOp = m; });
    int16_t data = -1;
    if (names && meshOp)
      for (auto [i, name] : llvm::enumerate(names.getAsValueRange<StringAttr>())) {
        if (name == axis.getValue())
          data = int16_t(i);
        else if (meshOp.getShape()[i] > 1)
          return main.emitError("--sync ps: workers split only the batch, over '")
                 << axis.getValue() << "', but the mesh has axis '" << name
                 << "' too: leave out --tp (and --mesh)";
      }
    if (data < 0)
      return main.emitError("--sync ps makes the ranks along the data-parallel axis '")
             << axis.getValue() << "' workers, which the mesh does not have: give --dp N";
    int64_t workers = meshOp.getShape()[size_t(data)];
    bool async = staleness > 0;

    // What a server receives: a weight gradient's reduction (each worker
    // pushes its own part, the reduction's input), or, in a micro-batched
    // step, a value of the per-micro-batch part (an accumulated gradient)
    // that the once-per-step part reads.
    Block &body = main.getBody().front();
    auto ret = cast<func::ReturnOp>(body.getTerminator());
    auto microBatches = training.getAs<IntegerAttr>("micro_batches");
    bool micro = microBatches && microBatches.getInt() > 1;
    DenseMap<Value, Value> ownOf; // a gradient's reduction -> the worker's part
    SmallVector<Operation *> reductions;
    for (Operation &op : body) {
      if (!op.hasAttr(attr::kGradientReduction))
        continue;
      auto reduce = dyn_cast<mesh::AllReduceOp>(&op);
      if (!reduce)
        return op.emitError("--sync ps needs every weight whole on each worker (ZeRO stage "
                            "0), but this gradient is reduced by ")
               << op.getName() << ": use --zero 0";
      ownOf[reduce.getResult()] = reduce.getInput();
      reductions.push_back(reduce);
    }
    if (reductions.empty())
      return main.emitError("--sync ps: the step reduces no weight gradient over '")
             << axis.getValue() << "' (nothing to train?)";
    auto received = [&](Value v) {
      if (ownOf.count(v))
        return true;
      Operation *def = v.getDefiningOp();
      return micro && def && !def->hasAttr(attr::kOncePerStep) &&
             !isa<graph::ParameterOp, graph::ConstantOp>(def);
    };

    // Each update's tensor: the received value its ops read (the slice back
    // from the result stops at parameters, arguments and received values).
    SmallVector<Tensor> tensors;
    DenseMap<Value, unsigned> tensorOf; // a received value -> its tensor
    DenseMap<unsigned, unsigned> tensorOfResult;
    llvm::StringMap<graph::ParameterOp> parameters;
    for (auto p : body.getOps<graph::ParameterOp>())
      parameters[p.getName()] = p;
    for (auto [i, operand] : llvm::enumerate(ret.getOperands())) {
      auto updates = main.getResultAttrOfType<StringAttr>(unsigned(i), attr::kUpdates);
      if (!updates)
        continue;
      // A micro-batched step's per-micro-batch updates (accumulations, batch
      // norms' statistics) are the worker's.
      Operation *made = operand.getDefiningOp();
      if (micro && (!made || !made->hasAttr(attr::kOncePerStep)))
        continue;
      std::optional<Value> found;
      SmallVector<Value> work{operand};
      DenseSet<Value> seen;
      while (!work.empty()) {
        Value v = work.pop_back_val();
        if (!seen.insert(v).second)
          continue;
        if (received(v) && v != operand) {
          if (found && *found != v)
            return main.emitError("--sync ps: the update of '")
                   << updates.getValue() << "' reads the gradients of two weights, which "
                   << "may sit on different servers";
          found = v;
          continue;
        }
        Operation *def = v.getDefiningOp();
        if (!def || isa<graph::ParameterOp>(def))
          continue;
        for (Value in : def->getOperands())
          work.push_back(in);
      }
      if (!found)
        continue; // the worker's own (batch norms' statistics)
      auto [entry, added] = tensorOf.try_emplace(*found, unsigned(tensors.size()));
      if (added) {
        auto type = cast<RankedTensorType>(found->getType());
        if (!type.getElementType().isF32())
          return main.emitError("--sync ps pushes f32 gradients; the update of '")
                 << updates.getValue() << "' reads one of " << type;
        Value pushed = ownOf.count(*found) ? ownOf.lookup(*found) : *found;
        tensors.push_back({pushed, *found, {}, "", tensorBytes(type), {},
                           sparseRowsOf(pushed, micro ? microBatches.getInt() : 1)});
      }
      tensorOfResult[unsigned(i)] = entry->second;
      Tensor &t = tensors[entry->second];
      t.results.push_back(unsigned(i));
      // The weight, not its state: the updated parameter that is loaded.
      if (graph::ParameterOp param = parameters.lookup(updates.getValue());
          param && !param->hasAttr(attr::kZeros))
        t.weight = updates.str();
      else if (t.weight.empty() && t.results.size() == 1)
        t.weight = updates.str();
    }
    for (Tensor &t : tensors)
      if (t.results.empty())
        return main.emitError("--sync ps: a weight gradient no update reads");
    // Each tensor's optimizer ops: what its updates read, back to what the
    // server receives.
    for (Tensor &t : tensors) {
      SmallVector<Value> work;
      for (unsigned r : t.results)
        work.push_back(ret.getOperand(r));
      while (!work.empty()) {
        Value v = work.pop_back_val();
        Operation *def = v.getDefiningOp();
        if (!def || received(v) || !t.ops.insert(def))
          continue;
        for (Value in : def->getOperands())
          work.push_back(in);
      }
    }
    // A tensor larger than a server's fair share is cut into row blocks
    // over several servers, where its optimizer is elementwise over the
    // weight's shape (AdamW, SGD): each block's update is the same ops on
    // its rows.
    int64_t all = 0;
    for (const Tensor &t : tensors)
      all += t.bytes;
    double fair = double(all) / double(servers.getValue());
    struct Piece {
      unsigned tensor;
      int64_t first = 0, rows = 0; // rows 0: the whole tensor
      int64_t bytes = 0, server = 0;
    };
    SmallVector<Piece> pieces;
    for (auto [i, t] : llvm::enumerate(tensors)) {
      auto type = cast<RankedTensorType>(t.reduced.getType());
      int64_t count = std::min<int64_t>(int64_t(std::ceil(double(t.bytes) / fair)), servers);
      if (count > 1 && sliceable(t, type))
        count = std::min<int64_t>(count, type.getDimSize(0));
      else
        count = 1;
      int64_t rows = count > 1 ? type.getDimSize(0) : 0;
      for (int64_t p = 0; p < count; ++p) {
        int64_t first = rows * p / count, next = rows * (p + 1) / count;
        pieces.push_back({unsigned(i), first, next - first,
                          count > 1 ? t.bytes / rows * (next - first) : t.bytes, 0});
      }
    }
    if (int64_t(pieces.size()) < servers)
      return main.emitError("--servers ")
             << int64_t(servers) << ": the model has only " << tensors.size()
             << " trained tensors, in " << pieces.size() << " parts a server could hold";

    // Largest first, each to the least loaded server that holds no other
    // block of its tensor.
    SmallVector<unsigned> order(pieces.size());
    std::iota(order.begin(), order.end(), 0u);
    llvm::stable_sort(order,
                      [&](unsigned a, unsigned b) { return pieces[a].bytes > pieces[b].bytes; });
    size_t count = size_t(servers.getValue());
    SmallVector<int64_t> load(count, 0);
    SmallVector<SmallVector<unsigned>> held(count);
    for (unsigned p : order) {
      size_t best = count;
      for (size_t k = 0; k < count; ++k) {
        bool holds = llvm::any_of(
            held[k], [&](unsigned q) { return pieces[q].tensor == pieces[p].tensor; });
        if (!holds && (best == count || load[k] < load[best]))
          best = k;
      }
      pieces[p].server = int64_t(best);
      load[best] += pieces[p].bytes;
      held[best].push_back(p);
    }
    for (auto &list : held)
      llvm::sort(list);

    OpBuilder b(&getContext());
    // The servers' functions: the optimizer's ops of their tensors.
    SmallVector<Attribute> entries;
    SmallVector<unsigned> workerResults;
    for (unsigned i = 0; i < ret.getNumOperands(); ++i)
      if (!tensorOfResult.count(i))
        workerResults.push_back(i);
    // @main's outputs come first (its own, then the gradients), then each
    // server's.
    int64_t nextOutput = int64_t(workerResults.size() + tensors.size());
    SmallVector<int64_t> weightOutput(pieces.size(), -1);
    b.setInsertionPointAfter(main);
    for (int64_t k = 0; k < servers; ++k) {
      SmallVector<unsigned> results;
      SmallVector<Type> resultTypes;
      for (unsigned p : held[size_t(k)])
        for (unsigned r : tensors[pieces[p].tensor].results) {
          results.push_back(r);
          resultTypes.push_back(blockType(ret.getOperand(r).getType(), pieces[p]));
        }
      auto type = b.getFunctionType(main.getArgumentTypes(), resultTypes);
      auto server = b.create<func::FuncOp>(main.getLoc(), ("server_" + Twine(k)).str(), type);
      server.setAllArgAttrs(main.getAllArgAttrs());
      Block *entry = server.addEntryBlock();
      OpBuilder inner = OpBuilder::atBlockBegin(entry);
      SmallVector<Value> mapped;
      SmallVector<int64_t> outputs;
      for (unsigned p : held[size_t(k)]) {
        const Piece &piece = pieces[p];
        const Tensor &t = tensors[piece.tensor];
        IRMapping map;
        for (auto [from, to] : llvm::zip(main.getArguments(), server.getArguments()))
          map.map(from, to);
        // The pushed gradients' sum: a buffer the runtime fills each step.
        auto gradient = inner.create<graph::ParameterOp>(
            main.getLoc(), blockType(t.reduced.getType(), piece),
            inner.getStringAttr(t.weight + ".gradient"));
        gradient->setAttr(attr::kZeros, inner.getUnitAttr());
        gradient->setAttr(attr::kAccumulator, inner.getUnitAttr());
        map.map(t.reduced, gradient.getResult());
        for (Operation &op : body) {
          if (!t.ops.contains(&op))
            continue;
          Operation *copy = inner.clone(op, map);
          for (StringRef name : {attr::kSharding, attr::kOncePerStep})
            copy->removeAttr(name);
          if (!piece.rows)
            continue;
          // A row block: the weight-shaped values become the block's.
          for (Value v : copy->getResults())
            v.setType(blockType(v.getType(), piece));
          if (isa<graph::ParameterOp>(copy) && !copy->hasAttr(attr::kZeros))
            copy->setAttr(attr::kRows,
                          inner.getDenseI64ArrayAttr(
                              {piece.first, cast<RankedTensorType>(t.reduced.getType())
                                                .getDimSize(0)}));
        }
        for (unsigned r : t.results) {
          mapped.push_back(map.lookup(ret.getOperand(r)));
          server.setResultAttrs(unsigned(outputs.size()), main.getResultAttrDict(r));
          if (main.getResultAttrOfType<StringAttr>(r, attr::kUpdates).getValue() == t.weight)
            weightOutput[p] = nextOutput;
          outputs.push_back(nextOutput++);
        }
      }
      inner.create<func::ReturnOp>(main.getLoc(), mapped);
      server->setAttr(attr::kServer, b.getI64IntegerAttr(k));
      server->setAttr(attr::kOutputs, b.getDenseI64ArrayAttr(outputs));
      NamedAttrList options(training);
      options.set("micro_batches", b.getI64IntegerAttr(1));
      server->setAttr(attr::kTraining, options.getDictionary(&getContext()));
      b.setInsertionPointAfter(server);
    }
    for (auto [p, piece] : llvm::enumerate(pieces))
      entries.push_back(b.getDictionaryAttr({
          b.getNamedAttr("weight", b.getStringAttr(tensors[piece.tensor].weight)),
          b.getNamedAttr("server", b.getI64IntegerAttr(piece.server)),
          b.getNamedAttr("gradient",
                         b.getI64IntegerAttr(int64_t(workerResults.size() + piece.tensor))),
          b.getNamedAttr("weight_output", b.getI64IntegerAttr(weightOutput[p])),
          b.getNamedAttr("first_row", b.getI64IntegerAttr(piece.first)),
          b.getNamedAttr("rows", b.getI64IntegerAttr(piece.rows)),
          b.getNamedAttr("sparse_rows",
                         b.getI64IntegerAttr(piece.rows ? std::min(piece.rows,
                                                                   tensors[piece.tensor].sparseRows)
                                                        : tensors[piece.tensor].sparseRows)),
      }));

    // The workers reduce nothing: each keeps its own part.
    for (Operation *op : reductions) {
      op->getResult(0).replaceAllUsesWith(op->getOperand(0));
      op->erase();
    }

    // @main: the worker's results, then the gradients it pushes.
    SmallVector<Value> operands;
    SmallVector<DictionaryAttr> resultAttrs;
    for (unsigned r : workerResults) {
      operands.push_back(ret.getOperand(r));
      resultAttrs.push_back(main.getResultAttrDict(r));
    }
    for (const Tensor &t : tensors) {
      operands.push_back(t.gradient);
      resultAttrs.push_back(b.getDictionaryAttr(
          {b.getNamedAttr(attr::kName, b.getStringAttr(t.weight + ".gradient"))}));
    }
    b.setInsertionPoint(ret);
    b.create<func::ReturnOp>(ret.getLoc(), operands);
    ret.erase();
    SmallVector<Type> types;
    for (Value v : operands)
      types.push_back(v.getType());
    main.setType(b.getFunctionType(main.getArgumentTypes(), types));
    main.setAllResultAttrs(resultAttrs);
    SmallVector<int64_t> mainOutputs(operands.size());
    std::iota(mainOutputs.begin(), mainOutputs.end(), int64_t(0));
    main->setAttr(attr::kOutputs, b.getDenseI64ArrayAttr(mainOutputs));

    // Asynchronous workers share nothing: the loss is each one's own mean.
    if (async && failed(keepOwnLoss(main, data, workers, axis.getValue(),
                                    "--sync ps --staleness: asynchronous workers share nothing "
                                    "but their pushes",
                                    ": use --staleness 0")))
      return failure();

    // What the worker no longer runs: the optimizer, the reductions, the
    // optimizer state.
    bool erased = true;
    while (erased) {
      erased = false;
      for (Operation &op : llvm::make_early_inc_range(llvm::reverse(body)))
        if (!op.hasTrait<OpTrait::IsTerminator>() && op.use_empty() &&
            op.getNumResults() > 0) {
          op.erase();
          erased = true;
        }
    }

    NamedAttrList options(training);
    options.set("sync", b.getStringAttr("ps"));
    options.set("data_axes", b.getDenseI64ArrayAttr({int64_t(data)}));
    main->setAttr(attr::kTraining, options.getDictionary(&getContext()));
    module->setAttr(attr::kParameterServers,
                    b.getDictionaryAttr({
                        b.getNamedAttr("servers", b.getI64IntegerAttr(servers)),
                        b.getNamedAttr("staleness", b.getI64IntegerAttr(staleness)),
                        b.getNamedAttr("tensors", b.getArrayAttr(entries)),
                    }));
    // Each server's share; past eight, the range.
    std::string shares;
    if (servers <= 8) {
      shares = "tensors or row blocks (bytes) ";
      for (int64_t k = 0; k < servers; ++k)
        shares += (k ? ", " : "") + std::to_string(held[size_t(k)].size()) + " (" +
                  plan::formatBytes(load[size_t(k)]) + ")";
    } else {
      auto [few, many] = std::minmax_element(held.begin(), held.end(), [](auto &a, auto &b) {
        return a.size() < b.size();
      });
      auto [least, most] = std::minmax_element(load.begin(), load.end());
      shares = std::to_string(few->size()) + " to " + std::to_string(many->size()) +
               " tensors or row blocks (" + plan::formatBytes(*least) + " to " +
               plan::formatBytes(*most) + ") each";
    }
    int64_t cut = 0;
    for (auto [p, piece] : llvm::enumerate(pieces))
      cut += piece.rows && piece.first == 0;
    if (cut)
      shares += ", " + std::to_string(cut) + (cut == 1 ? " tensor" : " tensors") +
                " cut into row blocks";
    // A tensor whose optimizer is not elementwise stays whole: the largest
    // may bound the busiest server's share.
    int64_t busiest = *std::max_element(load.begin(), load.end());
    if (servers > 1 && double(busiest) > 1.5 * fair) {
      const Piece &largest = pieces[order.front()];
      shares += " (the largest, '" + tensors[largest.tensor].weight + "' (" +
                plan::formatBytes(largest.bytes) +
                "), bounds the busiest server's share: its optimizer is not elementwise, so "
                "it is not cut into row blocks)";
    }
    addNote(main, "sync: parameter servers: the " + std::to_string(workers) + " '" +
                      axis.getValue() + "' ranks are workers that push their gradients (" +
                      plan::formatBytes(all) + " a step) and pull the weights; " +
                      std::to_string(int64_t(servers)) +
                      (servers == 1 ? " server rank holds" : " server ranks hold") +
                      " the weights and their optimizer state, " + shares +
                      "; " +
                      (async ? "asynchronous: each push is applied as it comes, a worker at "
                               "most " +
                                   std::to_string(int64_t(staleness)) +
                                   (staleness == 1 ? " step" : " steps") +
                                   " ahead of the slowest"
                             : std::string("synchronous: the servers sum every worker's push, "
                                           "then update")));
    return success();
  }
};

} // namespace
} // namespace dtc
