//===- StreamOrder.h - work on several streams kept in order -----*- C++ -*-===//
//
// A GPU rank queues its instructions on several in-order streams
// (plan/Streams.h: compute, collectives, transfers, reductions) that share
// one arena, whose bytes the buffer assignment reuses as values die. Work
// on one stream runs in the order queued; work on another must wait for
// what it depends on there: a value it reads (read after write), bytes it
// overwrites that another still reads or writes (write after read or
// write). StreamOrder keeps, for the work queued since the streams were
// last idle, which bytes each piece read and wrote, and says, for new work,
// the latest piece of each other stream it must follow. It knows which
// waits are already implied (a vector clock per stream: following piece k
// of stream t also follows everything piece k followed), so a wait is
// asked for only where it is needed. It knows nothing of CUDA; the device
// turns each wait into an event (runtime/cuda/CudaDevice.cpp).
//
//===----------------------------------------------------------------------===//
#ifndef DTC_RUNTIME_STREAMORDER_H
#define DTC_RUNTIME_STREAMORDER_H

#include "runtime/InstructionWaves.h"

#include <cstdint>
#include <vector>

namespace dtc::runtime {

class StreamOrder {
public:
  explicit StreamOrder(int streams);

  /// A piece of work: the `ticket`-th queued on `stream` (from 1).
  struct Piece {
    int stream = 0;
    uint64_t ticket = 0;
    bool operator==(const Piece &o) const { return stream == o.stream && ticket == o.ticket; }
  };

  /// The latest piece of each other stream that work on `stream` touching
  /// `reads` and `writes` must follow and does not yet.
  std::vector<Piece> dependencies(int stream, const std::vector<ByteRange> &reads,
                                  const std::vector<ByteRange> &writes) const;

  /// Work on `stream` from now on follows `piece` (and all it followed):
  /// the device made the stream wait for it, or for a later piece of its
  /// stream (`piece.ticket` up to latest(piece.stream)).
  void follow(int stream, Piece piece);

  /// Queues work on `stream`; its ticket.
  uint64_t add(int stream, std::vector<ByteRange> reads, std::vector<ByteRange> writes);

  /// The last ticket queued on `stream` (0: none).
  uint64_t latest(int stream) const { return clocks_[size_t(stream)][size_t(stream)]; }

  /// Whether work on `stream` follows `piece`, directly or through others.
  bool follows(int stream, Piece piece) const {
    return clocks_[size_t(stream)][size_t(piece.stream)] >= piece.ticket;
  }

  /// Every stream is idle (the device synchronized): nothing to follow.
  void clear();

private:
  struct Entry {
    std::vector<ByteRange> reads, writes;
    std::vector<uint64_t> clock; // what the piece followed, per stream
  };
  int streams_;
  std::vector<std::vector<uint64_t>> clocks_; // per stream: the pieces it follows
  std::vector<std::vector<Entry>> queued_;    // per stream, by ticket - 1
};

} // namespace dtc::runtime

#endif // DTC_RUNTIME_STREAMORDER_H
