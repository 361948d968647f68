//===- StreamOrder.cpp -----------------------------------------------------===//
#include "runtime/StreamOrder.h"

#include <algorithm>

namespace dtc::runtime {

StreamOrder::StreamOrder(int streams)
    : streams_(streams), clocks_(size_t(streams), std::vector<uint64_t>(size_t(streams), 0)),
      queued_(size_t(streams)) {}

std::vector<StreamOrder::Piece>
StreamOrder::dependencies(int stream, const std::vector<ByteRange> &reads,
                          const std::vector<ByteRange> &writes) const {
  std::vector<Piece> pieces;
  const std::vector<uint64_t> &known = clocks_[size_t(stream)];
  for (int other = 0; other < streams_; ++other) {
    if (other == stream)
      continue;
    // The latest conflicting piece: the stream runs in order, so following
    // it follows the earlier ones.
    const std::vector<Entry> &queued = queued_[size_t(other)];
    for (uint64_t ticket = queued.size(); ticket > known[size_t(other)]; --ticket) {
      const Entry &e = queued[ticket - 1];
      if (conflicts(reads, writes, e.reads, e.writes)) {
        pieces.push_back({other, ticket});
        break;
      }
    }
  }
  // A piece another of them followed needs no wait of its own.
  std::vector<Piece> needed;
  for (const Piece &p : pieces) {
    bool implied = false;
    for (const Piece &q : pieces)
      implied = implied || (!(q == p) &&
                            queued_[size_t(q.stream)][q.ticket - 1].clock[size_t(p.stream)] >=
                                p.ticket);
    if (!implied)
      needed.push_back(p);
  }
  return needed;
}

void StreamOrder::follow(int stream, Piece piece) {
  std::vector<uint64_t> &known = clocks_[size_t(stream)];
  if (piece.ticket == 0 || piece.stream == stream)
    return;
  const std::vector<uint64_t> &theirs = queued_[size_t(piece.stream)][piece.ticket - 1].clock;
  for (int s = 0; s < streams_; ++s)
    if (s != stream)
      known[size_t(s)] = std::max(known[size_t(s)], theirs[size_t(s)]);
  known[size_t(piece.stream)] = std::max(known[size_t(piece.stream)], piece.ticket);
}

uint64_t StreamOrder::add(int stream, std::vector<ByteRange> reads,
                          std::vector<ByteRange> writes) {
  std::vector<uint64_t> &known = clocks_[size_t(stream)];
  uint64_t ticket = ++known[size_t(stream)];
  queued_[size_t(stream)].push_back({std::move(reads), std::move(writes), known});
  return ticket;
}

void StreamOrder::clear() {
  for (std::vector<uint64_t> &known : clocks_)
    std::fill(known.begin(), known.end(), 0);
  for (std::vector<Entry> &queued : queued_)
    queued.clear();
}

} // namespace dtc::runtime
