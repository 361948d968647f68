//===- MpiCommunicator.h - collectives over MPI -----------------*- C++ -*-===//
//
// The CPU runtime's Communicator, on MPI (OpenMPI). MPI is started once per
// process by an MpiSession; communicators are duplicates or splits of
// MPI_COMM_WORLD with MPI_ERRORS_RETURN, so a failure is a message. This
// header does not include mpi.h: only MpiCommunicator.cpp sees MPI.
//
//===----------------------------------------------------------------------===//
#ifndef DTC_RUNTIME_COMM_MPICOMMUNICATOR_H
#define DTC_RUNTIME_COMM_MPICOMMUNICATOR_H

#include "runtime/comm/Communicator.h"

#include <cstdint>
#include <memory>
#include <string>
#include <vector>

namespace dtc::runtime {

/// MPI for this process, from MPI_Init_thread (MPI_THREAD_FUNNELED: only the
/// thread that started it calls MPI) to MPI_Finalize at destruction. MPI
/// cannot start twice in a process: a session made while MPI is already
/// running neither starts nor finalizes it.
class MpiSession {
public:
  /// Starts MPI; null with `error` when it cannot (MPI already finalized,
  /// or MPI_Init_thread failed).
  static std::unique_ptr<MpiSession> start(std::string &error);
  ~MpiSession();
  MpiSession(const MpiSession &) = delete;
  MpiSession &operator=(const MpiSession &) = delete;

  /// Whether mpirun, srun or another PMI launcher started this process, from
  /// its environment (OMPI_COMM_WORLD_SIZE, PMI_SIZE, PMIX_RANK); does not
  /// start MPI. Ask before starting it: OpenMPI started in a process of its
  /// own (a singleton) sets PMIX_RANK too.
  static bool launchedByMpi();

  /// Ends every rank of the job with `status` (MPI_Abort): for a rank that
  /// fails alone, which would otherwise leave the others waiting for it in
  /// a collective. Does not return.
  [[noreturn]] void abortJob(int status);

  /// Whether every rank of the job comes to this call within `seconds`
  /// (on a communicator of its own, made when MPI started, so that ranks
  /// still in a collective elsewhere do not meet it); then every rank's
  /// `message` is gathered on rank 0, in rank order, into `messages`. False
  /// when some rank does not come in time (it is busy, or waits for one
  /// that failed): then abortJob is what ends the job.
  bool gatherFailures(const std::string &message, double seconds,
                      std::vector<std::string> &messages);

  /// This process's place among the job's ranks on its machine (those that
  /// share its memory, MPI_COMM_TYPE_SHARED): `rank` of `size`. A
  /// collective call over the world; false with `error` when MPI fails.
  static bool placeOnNode(int &rank, int &size, std::string &error);

private:
  explicit MpiSession(bool owner) : owner_(owner) {}
  bool owner_;
};

/// All ranks of the job (a duplicate of MPI_COMM_WORLD, named "world").
/// Needs a running MpiSession; null with `error` otherwise.
std::unique_ptr<Communicator> worldCommunicator(std::string &error);

/// The most elements one MPI call carries (MPI counts are int); longer
/// buffers go in pieces of this size. Tests lower it to exercise the
/// pieces; values < 1 restore the default (1 << 30).
void setMpiChunkElements(int64_t elements);
int64_t mpiChunkElements();

} // namespace dtc::runtime

#endif // DTC_RUNTIME_COMM_MPICOMMUNICATOR_H
