//===- GraphAttrs.cpp - parsing, printing and checking mesh splits --------===//
#include "dialects/graph/GraphAttrs.h"
#include "dialects/graph/GraphDialect.h"

#include "mlir/IR/Builders.h"
#include "llvm/ADT/SmallBitVector.h"
#include "llvm/ADT/TypeSwitch.h"

using namespace mlir;

namespace dtc::graph {
namespace {

/// `<[0], [], [1, 0]>`: per entry, a bracketed list of mesh axes.
ParseResult parseEntries(AsmParser &parser, SmallVectorImpl<DenseI64ArrayAttr> &entries) {
  return parser.parseCommaSeparatedList(AsmParser::Delimiter::LessGreater, [&] {
    SmallVector<int64_t> axes;
    if (parser.parseCommaSeparatedList(AsmParser::Delimiter::Square, [&] {
          return parser.parseInteger(axes.emplace_back());
        }))
      return failure();
    entries.push_back(DenseI64ArrayAttr::get(parser.getContext(), axes));
    return success();
  });
}

void printEntries(AsmPrinter &printer, ArrayRef<DenseI64ArrayAttr> entries) {
  printer << "<";
  llvm::interleaveComma(entries, printer, [&](DenseI64ArrayAttr axes) {
    printer << "[";
    llvm::interleaveComma(axes.asArrayRef(), printer);
    printer << "]";
  });
  printer << ">";
}

/// Mesh axes are small non-negative numbers, each cutting one entry at most.
LogicalResult verifyEntries(function_ref<InFlightDiagnostic()> emitError,
                            ArrayRef<DenseI64ArrayAttr> entries, StringRef what) {
  constexpr int64_t kMaxAxes = 64;
  llvm::SmallBitVector used(kMaxAxes);
  for (auto [i, axes] : llvm::enumerate(entries)) {
    if (!axes)
      return emitError() << what << " " << i << " has no axis list";
    for (int64_t axis : axes.asArrayRef()) {
      if (axis < 0 || axis >= kMaxAxes)
        return emitError() << what << " " << i << ": mesh axis " << axis << " out of range";
      if (used.test(unsigned(axis)))
        return emitError() << "mesh axis " << axis << " cuts more than one " << what;
      used.set(unsigned(axis));
    }
  }
  return success();
}

} // namespace

Attribute ShardingAttr::parse(AsmParser &parser, Type) {
  SmallVector<DenseI64ArrayAttr> entries;
  SMLoc loc = parser.getCurrentLocation();
  if (failed(parseEntries(parser, entries)))
    return {};
  return getChecked([&] { return parser.emitError(loc); }, parser.getContext(), entries);
}

void ShardingAttr::print(AsmPrinter &printer) const { printEntries(printer, getEntries()); }

LogicalResult ShardingAttr::verify(function_ref<InFlightDiagnostic()> emitError,
                                   ArrayRef<DenseI64ArrayAttr> entries) {
  return verifyEntries(emitError, entries, "dim");
}

Attribute SplitAttr::parse(AsmParser &parser, Type) {
  SmallVector<DenseI64ArrayAttr> entries;
  SMLoc loc = parser.getCurrentLocation();
  if (failed(parseEntries(parser, entries)))
    return {};
  return getChecked([&] { return parser.emitError(loc); }, parser.getContext(), entries);
}

void SplitAttr::print(AsmPrinter &printer) const { printEntries(printer, getEntries()); }

LogicalResult SplitAttr::verify(function_ref<InFlightDiagnostic()> emitError,
                                ArrayRef<DenseI64ArrayAttr> entries) {
  return verifyEntries(emitError, entries, "factor");
}

void GraphDialect::registerAttributes() {
  addAttributes<
#define GET_ATTRDEF_LIST
#include "dialects/graph/GraphAttrs.cpp.inc"
      >();
}

} // namespace dtc::graph

#define GET_ATTRDEF_CLASSES
#include "dialects/graph/GraphAttrs.cpp.inc"
