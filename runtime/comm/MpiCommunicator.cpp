//===- MpiCommunicator.cpp - collectives over MPI -------------------------===//
#include "runtime/comm/MpiCommunicator.h"
#include "runtime/comm/Watchdog.h"

#include "runtime/cpu/BFloat16.h"

#include <mpi.h>

#include <algorithm>
#include <array>
#include <chrono>
#include <cstdlib>
#include <cstring>
#include <deque>
#include <thread>

namespace dtc::runtime {
namespace {

constexpr int64_t kDefaultChunkElements = int64_t(1) << 30;
int64_t chunkElements = kDefaultChunkElements;

std::string mpiErrorString(int code) {
  char text[MPI_MAX_ERROR_STRING];
  int length = 0;
  if (MPI_Error_string(code, text, &length) != MPI_SUCCESS)
    return "MPI error code " + std::to_string(code);
  return std::string(text, length);
}

/// An MPI type as wide as `dtype`'s elements, for moving them unreduced.
MPI_Datatype storageType(plan::DType dtype) {
  switch (dtypeBytes(dtype)) {
  case 1: return MPI_UINT8_T;
  case 2: return MPI_UINT16_T;
  case 4: return MPI_UINT32_T;
  case 8: return MPI_UINT64_T;
  default: return MPI_DATATYPE_NULL;
  }
}

// MPI has no f16 or bf16: their reductions are user ops that widen each
// pair to float, combine and round back (to nearest even).
struct Add {
  float operator()(float a, float b) const { return a + b; }
};
struct Larger {
  float operator()(float a, float b) const { return a > b ? a : b; }
};
struct Smaller {
  float operator()(float a, float b) const { return a < b ? a : b; }
};

template <typename Half, typename Combine>
void reduceHalves(void *in, void *inout, int *length, MPI_Datatype *) {
  const Half *a = static_cast<const Half *>(in);
  Half *b = static_cast<Half *>(inout);
  for (int i = 0; i < *length; ++i)
    b[i] = Half(Combine()(float(a[i]), float(b[i])));
}

/// The user op reducing f16 or bf16 (as MPI_UINT16_T) by `reduction`,
/// created on first use, while MPI runs.
MPI_Op halfOp(bool bf16, Reduction reduction) {
  static const auto ops = [] {
    using cpu::BFloat16;
    MPI_User_function *functions[2][3] = {
        {reduceHalves<_Float16, Add>, reduceHalves<_Float16, Larger>,
         reduceHalves<_Float16, Smaller>},
        {reduceHalves<BFloat16, Add>, reduceHalves<BFloat16, Larger>,
         reduceHalves<BFloat16, Smaller>}};
    std::array<std::array<MPI_Op, 3>, 2> created;
    for (int type = 0; type < 2; ++type)
      for (int r = 0; r < 3; ++r)
        if (MPI_Op_create(functions[type][r], /*commute=*/1, &created[type][r]) != MPI_SUCCESS)
          created[type][r] = MPI_OP_NULL;
    return created;
  }();
  return ops[bf16][int(reduction)];
}

/// The MPI type and op reducing `dtype` by `reduction`; false when there is
/// none (a sum of bools, an unknown dtype).
bool reductionOf(plan::DType dtype, Reduction reduction, MPI_Datatype &type, MPI_Op &op) {
  op = reduction == Reduction::Sum ? MPI_SUM : reduction == Reduction::Max ? MPI_MAX : MPI_MIN;
  switch (dtype) {
  case plan::F32: type = MPI_FLOAT; return true;
  case plan::F64: type = MPI_DOUBLE; return true;
  case plan::I64: type = MPI_INT64_T; return true;
  case plan::I32: type = MPI_INT32_T; return true;
  case plan::I16: type = MPI_INT16_T; return true;
  case plan::I8: type = MPI_INT8_T; return true;
  case plan::U64: type = MPI_UINT64_T; return true;
  case plan::U32: type = MPI_UINT32_T; return true;
  case plan::U16: type = MPI_UINT16_T; return true;
  case plan::U8: type = MPI_UINT8_T; return true;
  case plan::F16:
  case plan::BF16:
    type = MPI_UINT16_T;
    op = halfOp(dtype == plan::BF16, reduction);
    return true;
  case plan::BOOL:
    // 0 and 1 only: max is or, min is and.
    type = MPI_UINT8_T;
    return reduction != Reduction::Sum;
  default: return false;
  }
}

/// Runs `piece(offset, count)` over [0, total) in pieces of at most
/// chunkElements, at least once (an empty message still synchronises and
/// is checked); returns the first MPI error code.
template <typename Piece>
int inPieces(int64_t total, Piece piece) {
  int64_t offset = 0;
  do {
    int count = int(std::min(chunkElements, total - offset));
    if (int code = piece(offset, count); code != MPI_SUCCESS)
      return code;
    offset += count;
  } while (offset < total);
  return MPI_SUCCESS;
}

/// `count` elements of `type` with an extent of `stride` bytes: one rank's
/// piece of a buffer of per-rank blocks, so that rank r's piece lands in
/// block r.
class BlockPieceType {
public:
  BlockPieceType(int count, MPI_Datatype type, int64_t stride) {
    MPI_Datatype piece;
    code_ = MPI_Type_contiguous(count, type, &piece);
    if (code_ != MPI_SUCCESS)
      return;
    code_ = MPI_Type_create_resized(piece, 0, MPI_Aint(stride), &type_);
    MPI_Type_free(&piece);
    if (code_ == MPI_SUCCESS)
      code_ = MPI_Type_commit(&type_);
  }
  ~BlockPieceType() {
    if (type_ != MPI_DATATYPE_NULL)
      MPI_Type_free(&type_);
  }
  BlockPieceType(const BlockPieceType &) = delete;
  BlockPieceType &operator=(const BlockPieceType &) = delete;

  int code() const { return code_; }
  MPI_Datatype type() const { return type_; }

private:
  MPI_Datatype type_ = MPI_DATATYPE_NULL;
  int code_;
};

std::string elements(int64_t count, plan::DType dtype) {
  return std::to_string(count) + " " + dtypeName(dtype);
}

class MpiCommunicator final : public Communicator {
public:
  /// Owns `comm`, which reports errors (MPI_ERRORS_RETURN).
  MpiCommunicator(MPI_Comm comm, std::string name) : comm_(comm) {
    MPI_Comm_rank(comm_, &rank_);
    MPI_Comm_size(comm_, &size_);
    setName(std::move(name));
  }
  ~MpiCommunicator() override {
    int finalized = 0;
    MPI_Finalized(&finalized);
    if (finalized)
      return;
    // Sends still in flight (a run that stopped early) finish on their own;
    // their bytes must outlive us, so they are left allocated.
    if (!pending_.empty()) {
      for (PendingSend &sent : pending_)
        for (MPI_Request &request : sent.requests)
          if (request != MPI_REQUEST_NULL)
            MPI_Request_free(&request);
      (void)new std::deque<PendingSend>(std::move(pending_));
    }
    MPI_Comm_free(&comm_);
  }

  int rank() const override { return rank_; }
  int size() const override { return size_; }

  bool allReduce(void *data, int64_t count, plan::DType dtype, Reduction reduction,
                 std::string &error) override {
    auto what = [&] {
      return std::string("allReduce (") + reductionName(reduction) + ") of " +
             elements(count, dtype);
    };
    watchdog::Wait waiting([&] { return waitText(what()); });
    MPI_Datatype type;
    MPI_Op op;
    if (!checkCount(count, dtype, what, error) ||
        !checkReduction(dtype, reduction, what, type, op, error))
      return false;
    char *bytes = static_cast<char *>(data);
    int64_t width = dtypeBytes(dtype);
    tally("all_reduce", 2.0 * (size_ - 1) / size_ * double(count * width));
    return check(what, error, inPieces(count, [&](int64_t offset, int n) {
      return MPI_Allreduce(MPI_IN_PLACE, bytes + offset * width, n, type, op, comm_);
    }));
  }

  bool allGather(const void *send, void *recv, int64_t countPerRank, plan::DType dtype,
                 std::string &error) override {
    auto what = [&] { return "allGather of " + elements(countPerRank, dtype) + " per rank"; };
    watchdog::Wait waiting([&] { return waitText(what()); });
    if (!checkCount(countPerRank, dtype, what, error))
      return false;
    const char *in = static_cast<const char *>(send);
    char *out = static_cast<char *>(recv);
    MPI_Datatype type = storageType(dtype);
    int64_t width = dtypeBytes(dtype);
    tally("all_gather", double(size_ - 1) * double(countPerRank * width));
    return check(what, error, inPieces(countPerRank, [&](int64_t offset, int n) {
      if (n == countPerRank)
        return MPI_Allgather(in, n, type, out, n, type, comm_);
      BlockPieceType block(n, type, countPerRank * width);
      if (block.code() != MPI_SUCCESS)
        return block.code();
      return MPI_Allgather(in + offset * width, n, type, out + offset * width, 1, block.type(),
                           comm_);
    }));
  }

  bool reduceScatter(const void *send, void *recv, int64_t countPerRank, plan::DType dtype,
                     Reduction reduction, std::string &error) override {
    auto what = [&] {
      return std::string("reduceScatter (") + reductionName(reduction) + ") of " +
             elements(countPerRank, dtype) + " per rank";
    };
    watchdog::Wait waiting([&] { return waitText(what()); });
    MPI_Datatype type;
    MPI_Op op;
    if (!checkCount(countPerRank, dtype, what, error) ||
        !checkReduction(dtype, reduction, what, type, op, error))
      return false;
    const char *in = static_cast<const char *>(send);
    char *out = static_cast<char *>(recv);
    int64_t width = dtypeBytes(dtype);
    tally("reduce_scatter", double(size_ - 1) * double(countPerRank * width));
    if (size_ == 1) {
      std::memcpy(recv, send, size_t(countPerRank * width));
      return true;
    }
    return check(what, error, inPieces(countPerRank, [&](int64_t offset, int n) {
      return ringReduceScatter(in, out, countPerRank, offset, n, width, type, op);
    }));
  }

  /// One piece ([offset, offset + n) of every rank's block) of a
  /// reduce-scatter, around the ring: at step s each rank sends the block
  /// (rank - s - 1) mod p it has summed so far to the next rank and adds its
  /// own part to the block (rank - s - 2) it receives from the one before;
  /// after p - 1 steps its own block is whole: one transfer and one local
  /// sum a step. OpenMPI's MPI_Reduce_scatter_block took several times as
  /// long as an all-reduce of the whole at 1-4 MiB per rank; this ring takes
  /// less than that all-reduce.
  int ringReduceScatter(const char *in, char *out, int64_t countPerRank, int64_t offset, int n,
                        int64_t width, MPI_Datatype type, MPI_Op op) {
    int next = (rank_ + 1) % size_, previous = (rank_ + size_ - 1) % size_;
    auto block = [&](int b) { return in + (int64_t(b) * countPerRank + offset) * width; };
    size_t bytes = size_t(n) * size_t(width);
    for (std::vector<char> &buffer : ring_) // two ranks receive into `out` alone
      if (size_ > 2 && buffer.size() < bytes)
        buffer.resize(bytes);
    const char *sending = block((rank_ + size_ - 1) % size_);
    for (int step = 0; step < size_ - 1; ++step) {
      int into = (rank_ + 2 * size_ - step - 2) % size_;
      // The last step receives into the result; the others alternate.
      char *receiving = step == size_ - 2 ? out + offset * width : ring_[step % 2].data();
      int code = MPI_Sendrecv(sending, n, type, next, kReservedTag, receiving, n, type,
                              previous, kReservedTag, comm_, MPI_STATUS_IGNORE);
      if (code == MPI_SUCCESS)
        code = MPI_Reduce_local(block(into), receiving, n, type, op);
      if (code != MPI_SUCCESS)
        return code;
      sending = receiving;
    }
    return MPI_SUCCESS;
  }

  bool allToAll(const void *send, void *recv, int64_t countPerRank, plan::DType dtype,
                std::string &error) override {
    auto what = [&] { return "allToAll of " + elements(countPerRank, dtype) + " per rank"; };
    watchdog::Wait waiting([&] { return waitText(what()); });
    if (!checkCount(countPerRank, dtype, what, error))
      return false;
    const char *in = static_cast<const char *>(send);
    char *out = static_cast<char *>(recv);
    MPI_Datatype type = storageType(dtype);
    int64_t width = dtypeBytes(dtype);
    tally("all_to_all", double(size_ - 1) * double(countPerRank * width));
    return check(what, error, inPieces(countPerRank, [&](int64_t offset, int n) {
      if (n == countPerRank)
        return MPI_Alltoall(in, n, type, out, n, type, comm_);
      BlockPieceType block(n, type, countPerRank * width);
      if (block.code() != MPI_SUCCESS)
        return block.code();
      return MPI_Alltoall(in + offset * width, 1, block.type(), out + offset * width, 1,
                          block.type(), comm_);
    }));
  }

  bool broadcast(void *data, int64_t count, plan::DType dtype, int root,
                 std::string &error) override {
    auto what = [&] {
      return "broadcast of " + elements(count, dtype) + " from root " + std::to_string(root);
    };
    watchdog::Wait waiting([&] { return waitText(what()); });
    if (!checkCount(count, dtype, what, error))
      return false;
    char *bytes = static_cast<char *>(data);
    MPI_Datatype type = storageType(dtype);
    int64_t width = dtypeBytes(dtype);
    if (size_ > 1)
      tally("broadcast", double(count * width));
    return check(what, error, inPieces(count, [&](int64_t offset, int n) {
      return MPI_Bcast(bytes + offset * width, n, type, root, comm_);
    }));
  }

  bool send(const void *data, int64_t bytes, int peer, int tag, std::string &error) override {
    auto what = [&] {
      return "send of " + std::to_string(bytes) + " bytes to peer " + std::to_string(peer) +
             " (tag " + std::to_string(tag) + ")";
    };
    if (!checkCount(bytes, plan::U8, what, error))
      return false;
    if (!reapSends(error))
      return false;
    tally("send", double(bytes));
    // The bytes are ours until the receive has them.
    pending_.push_back({std::vector<char>(static_cast<const char *>(data),
                                          static_cast<const char *>(data) + bytes),
                        {}});
    PendingSend &sent = pending_.back();
    int code = inPieces(bytes, [&](int64_t offset, int n) {
      MPI_Request request = MPI_REQUEST_NULL;
      int code = MPI_Isend(sent.bytes.data() + offset, n, MPI_BYTE, peer, tag, comm_, &request);
      if (code == MPI_SUCCESS)
        sent.requests.push_back(request);
      return code;
    });
    if (code != MPI_SUCCESS && sent.requests.empty())
      pending_.pop_back(); // nothing in flight
    return check(what, error, code);
  }

  bool completeSends(std::string &error) override {
    watchdog::Wait waiting([&] { return waitText("the completion of sends"); });
    for (PendingSend &sent : pending_) {
      int code = MPI_Waitall(int(sent.requests.size()), sent.requests.data(), MPI_STATUSES_IGNORE);
      if (code != MPI_SUCCESS)
        return fail("completing a send", mpiErrorString(code), error);
    }
    pending_.clear();
    return true;
  }

  bool recv(void *data, int64_t bytes, int peer, int tag, std::string &error) override {
    auto what = [&] {
      return "recv of " + std::to_string(bytes) + " bytes from peer " + std::to_string(peer) +
             " (tag " + std::to_string(tag) + ")";
    };
    watchdog::Wait waiting([&] { return waitText(what()); });
    if (!checkCount(bytes, plan::U8, what, error))
      return false;
    char *out = static_cast<char *>(data);
    // Not an MPI code (those are >= 0): the matching send was shorter.
    constexpr int kShortMessage = -1;
    int64_t received = 0;
    int code = inPieces(bytes, [&](int64_t offset, int n) {
      MPI_Status status;
      int piece = 0;
      int code = MPI_Recv(out + offset, n, MPI_BYTE, peer, tag, comm_, &status);
      if (code == MPI_SUCCESS)
        code = MPI_Get_count(&status, MPI_BYTE, &piece);
      received = offset + piece;
      return code == MPI_SUCCESS && piece != n ? kShortMessage : code;
    });
    if (code == kShortMessage)
      return fail(what(), "the matching send was shorter (" + std::to_string(received) +
                              " bytes)", error);
    return check(what, error, code);
  }

  bool recvAny(void *data, int64_t bytes, int tag, int &source, std::string &error) override {
    MPI_Status status;
    {
      watchdog::Wait waiting([&] {
        return waitText("a message with tag " + std::to_string(tag) + " from any rank");
      });
      if (!check([&] { return "probe for tag " + std::to_string(tag); }, error,
                 MPI_Probe(MPI_ANY_SOURCE, tag, comm_, &status)))
        return false;
    }
    source = status.MPI_SOURCE;
    return recv(data, bytes, source, tag, error);
  }

  /// Frees the buffers of sends already received.
  bool reapSends(std::string &error) {
    while (!pending_.empty()) {
      int done = 0;
      PendingSend &oldest = pending_.front();
      int code = MPI_Testall(int(oldest.requests.size()), oldest.requests.data(), &done,
                             MPI_STATUSES_IGNORE);
      if (code != MPI_SUCCESS)
        return fail("completing a send", mpiErrorString(code), error);
      if (!done)
        break;
      pending_.pop_front();
    }
    return true;
  }

  bool barrier(std::string &error) override {
    watchdog::Wait waiting([&] { return waitText("barrier"); });
    return check([] { return std::string("barrier"); }, error, MPI_Barrier(comm_));
  }

  std::unique_ptr<Communicator> split(int color, int key, std::string &error) override {
    std::string what =
        "split (color " + std::to_string(color) + ", key " + std::to_string(key) + ")";
    if (color < 0) {
      fail(what, "the color must be >= 0", error);
      return nullptr;
    }
    MPI_Comm comm;
    int code = MPI_Comm_split(comm_, color, key, &comm);
    if (code == MPI_SUCCESS) {
      code = MPI_Comm_set_errhandler(comm, MPI_ERRORS_RETURN);
      if (code != MPI_SUCCESS)
        MPI_Comm_free(&comm);
    }
    if (code != MPI_SUCCESS) {
      fail(what, mpiErrorString(code), error);
      return nullptr;
    }
    return std::make_unique<MpiCommunicator>(comm,
                                             name() + " split " + std::to_string(color));
  }

private:
  /// A wait for the watchdog's message: "allReduce (sum) of 8 f32 on group
  /// 'world' (rank 1 of 4)".
  std::string waitText(const std::string &what) const {
    return what + " on group '" + name() + "' (rank " + std::to_string(rank_) + " of " +
           std::to_string(size_) + ")";
  }

  bool fail(const std::string &what, const std::string &why, std::string &error) const {
    error = what + " on group '" + name() + "' (rank " + std::to_string(rank_) + " of " +
            std::to_string(size_) + ") failed: " + why;
    return false;
  }

  /// True on MPI_SUCCESS; otherwise false with MPI's message for `code`.
  template <typename What>
  bool check(const What &what, std::string &error, int code) const {
    return code == MPI_SUCCESS || fail(what(), mpiErrorString(code), error);
  }

  template <typename What>
  bool checkCount(int64_t count, plan::DType dtype, const What &what, std::string &error) const {
    if (dtypeBytes(dtype) == 0)
      return fail(what(), "unknown dtype " + std::to_string(int(dtype)), error);
    if (count < 0)
      return fail(what(), "the count is negative", error);
    return true;
  }

  /// The MPI type and op of a reduction; false with `error` when MPI (and
  /// our own ops) have none for the dtype.
  template <typename What>
  bool checkReduction(plan::DType dtype, Reduction reduction, const What &what,
                      MPI_Datatype &type, MPI_Op &op, std::string &error) const {
    if (reductionOf(dtype, reduction, type, op))
      return true;
    return fail(what(), std::string("no ") + reductionName(reduction) + " of " + dtypeName(dtype),
                error);
  }

  MPI_Comm comm_;
  int rank_ = 0;
  int size_ = 0;
  std::vector<char> ring_[2]; // ringReduceScatter's blocks in flight
  /// A buffered send not yet known to be received: its bytes and requests.
  struct PendingSend {
    std::vector<char> bytes;
    std::vector<MPI_Request> requests;
  };
  std::deque<PendingSend> pending_;
};

} // namespace

namespace {
/// gatherFailures' communicator: a duplicate of the world made when MPI
/// starts (a collective every rank makes then), kept apart from the step's.
MPI_Comm failureComm = MPI_COMM_NULL;

void makeFailureComm() {
  if (failureComm == MPI_COMM_NULL)
    MPI_Comm_dup(MPI_COMM_WORLD, &failureComm);
}
} // namespace

bool MpiSession::gatherFailures(const std::string &message, double seconds,
                                std::vector<std::string> &messages) {
  if (failureComm == MPI_COMM_NULL)
    return false;
  MPI_Request arrived;
  MPI_Ibarrier(failureComm, &arrived);
  auto deadline = std::chrono::steady_clock::now() + std::chrono::duration<double>(seconds);
  for (int done = 0;;) {
    MPI_Test(&arrived, &done, MPI_STATUS_IGNORE);
    if (done)
      break;
    if (std::chrono::steady_clock::now() > deadline)
      return false;
    std::this_thread::sleep_for(std::chrono::milliseconds(5));
  }
  int rank = 0, size = 1;
  MPI_Comm_rank(failureComm, &rank);
  MPI_Comm_size(failureComm, &size);
  int length = int(message.size());
  std::vector<int> lengths(size_t(rank == 0 ? size : 0)), offsets(lengths.size());
  MPI_Gather(&length, 1, MPI_INT, lengths.data(), 1, MPI_INT, 0, failureComm);
  std::string all;
  if (rank == 0) {
    int total = 0;
    for (int r = 0; r < size; ++r) {
      offsets[size_t(r)] = total;
      total += lengths[size_t(r)];
    }
    all.resize(size_t(total));
  }
  MPI_Gatherv(message.data(), length, MPI_CHAR, all.data(), lengths.data(), offsets.data(),
              MPI_CHAR, 0, failureComm);
  messages.clear();
  for (int r = 0; rank == 0 && r < size; ++r)
    messages.push_back(all.substr(size_t(offsets[size_t(r)]), size_t(lengths[size_t(r)])));
  return true;
}

std::unique_ptr<MpiSession> MpiSession::start(std::string &error) {
  int initialized = 0, finalized = 0;
  MPI_Finalized(&finalized);
  if (finalized) {
    error = "MPI was already finalized in this process and cannot start again";
    return nullptr;
  }
  MPI_Initialized(&initialized);
  if (initialized) {
    makeFailureComm();
    return std::unique_ptr<MpiSession>(new MpiSession(/*owner=*/false));
  }
  int provided = MPI_THREAD_SINGLE;
  int code = MPI_Init_thread(nullptr, nullptr, MPI_THREAD_FUNNELED, &provided);
  if (code != MPI_SUCCESS) {
    error = "MPI_Init_thread failed: " + mpiErrorString(code);
    return nullptr;
  }
  if (provided < MPI_THREAD_FUNNELED) {
    MPI_Finalize();
    error = "this MPI library does not support MPI_THREAD_FUNNELED, which the runtime's "
            "threaded kernels need";
    return nullptr;
  }
  makeFailureComm();
  return std::unique_ptr<MpiSession>(new MpiSession(/*owner=*/true));
}

MpiSession::~MpiSession() {
  int finalized = 0;
  MPI_Finalized(&finalized);
  if (owner_ && !finalized) {
    if (failureComm != MPI_COMM_NULL)
      MPI_Comm_free(&failureComm);
    MPI_Finalize();
  }
}

void MpiSession::abortJob(int status) {
  MPI_Abort(MPI_COMM_WORLD, status);
  std::_Exit(status); // MPI_Abort does not return; should it, end this rank anyway
}

bool MpiSession::placeOnNode(int &rank, int &size, std::string &error) {
  MPI_Comm node;
  int code = MPI_Comm_split_type(MPI_COMM_WORLD, MPI_COMM_TYPE_SHARED, 0, MPI_INFO_NULL, &node);
  if (code != MPI_SUCCESS) {
    error = "finding the ranks on this machine (MPI_Comm_split_type) failed: " +
            mpiErrorString(code);
    return false;
  }
  MPI_Comm_rank(node, &rank);
  MPI_Comm_size(node, &size);
  MPI_Comm_free(&node);
  return true;
}

bool MpiSession::launchedByMpi() {
  for (const char *name : {"OMPI_COMM_WORLD_SIZE", "PMI_SIZE", "PMIX_RANK"})
    if (std::getenv(name))
      return true;
  return false;
}

std::unique_ptr<Communicator> worldCommunicator(std::string &error) {
  int initialized = 0, finalized = 0;
  MPI_Initialized(&initialized);
  MPI_Finalized(&finalized);
  if (!initialized || finalized) {
    error = "the world communicator needs MPI running: start an MpiSession first";
    return nullptr;
  }
  MPI_Comm comm;
  int code = MPI_Comm_dup(MPI_COMM_WORLD, &comm);
  if (code == MPI_SUCCESS) {
    code = MPI_Comm_set_errhandler(comm, MPI_ERRORS_RETURN);
    if (code != MPI_SUCCESS)
      MPI_Comm_free(&comm);
  }
  if (code != MPI_SUCCESS) {
    error = "duplicating MPI_COMM_WORLD failed: " + mpiErrorString(code);
    return nullptr;
  }
  return std::make_unique<MpiCommunicator>(comm, "world");
}

void setMpiChunkElements(int64_t elements) {
  chunkElements = elements >= 1 ? std::min(elements, kDefaultChunkElements)
                                : kDefaultChunkElements;
}

int64_t mpiChunkElements() { return chunkElements; }

} // namespace dtc::runtime
