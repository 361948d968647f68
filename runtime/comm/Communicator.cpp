//===- Communicator.cpp - collectives over a group of ranks ---------------===//
#include "runtime/comm/Communicator.h"

namespace dtc::runtime {

Communicator::~Communicator() = default;

const char *reductionName(Reduction reduction) {
  switch (reduction) {
  case Reduction::Sum: return "sum";
  case Reduction::Max: return "max";
  case Reduction::Min: return "min";
  }
  return "unknown reduction";
}

} // namespace dtc::runtime
