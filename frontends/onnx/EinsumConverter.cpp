//===- EinsumConverter.cpp - ONNX Einsum as transposes, matmuls, sums -----===//
//
// Each operand's letters that no other operand and not the output name are
// summed away first; two operands are then one batched matmul: the letters
// both share and the output keeps are its batch, those both share and the
// output drops its contraction, the rest its rows and columns; more than
// two are contracted left to right. A single operand is a sum and a
// transpose. `...` stands for the same leading dims in every operand.
// Diagonals (a letter twice in one operand) are not supported.
// docs/onnx-lowerings.md.
//
//===----------------------------------------------------------------------===//
#include "frontends/onnx/NodeContext.h"

#include "dialects/graph/GraphOps.h"

#include <algorithm>

using namespace mlir;
using namespace dtc::graph;

namespace dtc::onnx {
namespace {

/// An operand: its value and, per dim, the letter that names it.
struct Term {
  Value value;
  std::string letters;
};

RankedTensorType typeOf(Value v) { return cast<RankedTensorType>(v.getType()); }

/// `term` with its dims in the order of `letters` (a permutation of its own).
FailureOr<Term> permute(NodeContext &ctx, Term term, const std::string &letters) {
  if (term.letters == letters)
    return term;
  SmallVector<int64_t> perm;
  for (char c : letters)
    perm.push_back(int64_t(term.letters.find(c)));
  auto t = ctx.create<TransposeOp>(term.value, {ctx.namedI64s("perm", perm)});
  if (failed(t))
    return failure();
  return Term{*t, letters};
}

/// `term` summed over the letters not in `keep`.
FailureOr<Term> sumAway(NodeContext &ctx, Term term, const std::string &keep) {
  SmallVector<int64_t> axes;
  std::string left;
  for (size_t i = 0; i < term.letters.size(); ++i) {
    if (keep.find(term.letters[i]) == std::string::npos)
      axes.push_back(int64_t(i));
    else
      left += term.letters[i];
  }
  if (axes.empty())
    return term;
  auto sum = ctx.create<ReduceSumOp>(term.value, {ctx.namedI64s("axes", axes),
                                                  ctx.named("keepdims", ctx.builder().getBoolAttr(false))});
  if (failed(sum))
    return failure();
  return Term{*sum, left};
}

FailureOr<Value> reshape(NodeContext &ctx, Value v, ArrayRef<int64_t> shape) {
  if (typeOf(v).getShape() == shape)
    return v;
  return ctx.createTyped<ReshapeOp>(typeOf(v).clone(shape), v);
}

/// a and b contracted into the letters `out` (each letter of `out` in a or b).
FailureOr<Term> contract(NodeContext &ctx, Term a, Term b, const std::string &out,
                         std::map<char, int64_t> &sizes) {
  std::string batch, rows, cols, inner;
  for (char c : a.letters) {
    bool inB = b.letters.find(c) != std::string::npos, kept = out.find(c) != std::string::npos;
    (inB ? (kept ? batch : inner) : rows) += c;
  }
  for (char c : b.letters)
    if (a.letters.find(c) == std::string::npos)
      cols += c;
  auto pa = permute(ctx, a, batch + rows + inner), pb = permute(ctx, b, batch + inner + cols);
  if (failed(pa) || failed(pb))
    return failure();
  auto product = [&](const std::string &letters) {
    int64_t n = 1;
    for (char c : letters)
      n *= sizes[c];
    return n;
  };
  SmallVector<int64_t> lead;
  for (char c : batch)
    lead.push_back(sizes[c]);
  auto shaped = [&](int64_t r, int64_t c) {
    SmallVector<int64_t> s(lead);
    s.append({r, c});
    return s;
  };
  auto ma = reshape(ctx, pa->value, shaped(product(rows), product(inner)));
  auto mb = reshape(ctx, pb->value, shaped(product(inner), product(cols)));
  if (failed(ma) || failed(mb))
    return failure();
  auto m = ctx.create<MatmulOp>(ValueRange{*ma, *mb});
  if (failed(m))
    return failure();
  SmallVector<int64_t> full(lead);
  for (char c : rows + cols)
    full.push_back(sizes[c]);
  auto r = reshape(ctx, *m, full);
  if (failed(r))
    return failure();
  return Term{*r, batch + rows + cols};
}

LogicalResult convertEinsum(NodeContext &ctx) {
  std::string equation = ctx.attrString("equation", "");
  equation.erase(std::remove(equation.begin(), equation.end(), ' '), equation.end());
  size_t arrow = equation.find("->");
  std::string lhs = equation.substr(0, arrow);
  std::vector<std::string> specs;
  for (size_t start = 0;;) {
    size_t comma = lhs.find(',', start);
    specs.push_back(lhs.substr(start, comma - start));
    if (comma == std::string::npos)
      break;
    start = comma + 1;
  }
  if (int(specs.size()) != ctx.node().input_size())
    return ctx.fail("equation '" + equation + "' names " + std::to_string(specs.size()) +
                    " operands, the node has " + std::to_string(ctx.node().input_size()));
  // `...` becomes one placeholder letter per broadcast dim (digits), the
  // same dims in every operand that has it.
  int64_t ellipsisRank = -1;
  std::vector<Term> terms;
  std::map<char, int64_t> sizes;
  for (size_t i = 0; i < specs.size(); ++i) {
    auto type = ctx.inputType(int(i));
    auto value = ctx.input(int(i));
    if (failed(type) || failed(value))
      return failure();
    std::string spec = specs[i];
    if (size_t dots = spec.find("..."); dots != std::string::npos) {
      int64_t rank = type->getRank() - int64_t(spec.size() - 3);
      if (rank < 0 || (ellipsisRank >= 0 && rank != ellipsisRank))
        return ctx.fail("'...' stands for different numbers of dims in '" + equation + "'");
      ellipsisRank = rank;
      std::string digits;
      for (int64_t d = 0; d < rank; ++d)
        digits += char('0' + d);
      spec.replace(dots, 3, digits);
    }
    if (int64_t(spec.size()) != type->getRank())
      return ctx.fail("operand " + std::to_string(i) + " has rank " +
                      std::to_string(type->getRank()) + " but '" + specs[i] + "' names " +
                      std::to_string(spec.size()) + " dims");
    for (size_t d = 0; d < spec.size(); ++d) {
      char c = spec[d];
      if (!std::isalpha(c) && !std::isdigit(c))
        return ctx.fail("equation '" + equation + "': '" + std::string(1, c) +
                        "' is not a letter");
      if (spec.find(c) != d)
        return ctx.fail("equation '" + equation + "' repeats '" + std::string(1, c) +
                        "' within an operand (a diagonal), which is not supported");
      int64_t size = type->getDimSize(int64_t(d));
      auto [it, fresh] = sizes.insert({c, size});
      if (!fresh && it->second != size)
        return ctx.fail("'" + std::string(1, c) + "' is " + std::to_string(it->second) +
                        " in one operand and " + std::to_string(size) + " in another");
    }
    terms.push_back({*value, spec});
  }
  // The output's letters: given, or those named once, in order (ONNX's
  // implicit form), after the broadcast dims.
  std::string out;
  if (arrow != std::string::npos) {
    out = equation.substr(arrow + 2);
    if (size_t dots = out.find("..."); dots != std::string::npos) {
      std::string digits;
      for (int64_t d = 0; d < std::max<int64_t>(ellipsisRank, 0); ++d)
        digits += char('0' + d);
      out.replace(dots, 3, digits);
    }
  } else {
    for (int64_t d = 0; d < ellipsisRank; ++d)
      out += char('0' + d);
    std::string once;
    for (auto &[c, size] : sizes) {
      int count = 0;
      for (const Term &t : terms)
        count += int(std::count(t.letters.begin(), t.letters.end(), c));
      if (count == 1 && std::isalpha(c))
        once += c;
    }
    std::sort(once.begin(), once.end());
    out += once;
  }
  for (char c : out)
    if (!sizes.count(c))
      return ctx.fail("the output names '" + std::string(1, c) + "', which no operand has");
  // Contract left to right; before each step, sum away what nothing later
  // needs.
  auto neededAfter = [&](size_t i) {
    std::string need = out;
    for (size_t j = i + 1; j < terms.size(); ++j)
      need += terms[j].letters;
    return need;
  };
  auto acc = sumAway(ctx, terms[0], neededAfter(0));
  if (failed(acc))
    return failure();
  for (size_t i = 1; i < terms.size(); ++i) {
    std::string need = neededAfter(i);
    auto next = sumAway(ctx, terms[i], need + acc->letters);
    if (failed(next))
      return failure();
    auto prev = sumAway(ctx, *acc, need + next->letters);
    if (failed(prev))
      return failure();
    acc = contract(ctx, *prev, *next, need, sizes);
    if (failed(acc))
      return failure();
  }
  acc = sumAway(ctx, *acc, out);
  if (failed(acc))
    return failure();
  auto result = permute(ctx, *acc, out);
  if (failed(result))
    return failure();
  return ctx.result(result->value);
}

const OpConverter kConverters[] = {
    {"Einsum", 12, convertEinsum},
};

} // namespace

llvm::ArrayRef<OpConverter> einsumConverters() { return kConverters; }

} // namespace dtc::onnx
