//===- DataSet.h - training batches from files ------------------*- C++ -*-===//
//
// A DataSet cuts samples from files into the batches a training plan takes,
// one buffer per graph input (and the labels), in a shuffled order that
// depends only on (seed, epoch): a resumed run sees the batches the
// interrupted one would have, on every platform.
//
//===----------------------------------------------------------------------===//
#ifndef DTC_RUNTIME_TRAIN_DATASET_H
#define DTC_RUNTIME_TRAIN_DATASET_H

#include "plan.pb.h"

#include <cstdint>
#include <memory>
#include <optional>
#include <string>
#include <vector>

namespace dtc::runtime::train {

/// One field of a batch: a graph input (or the labels) as the plan declares
/// it, shape [batch, ...] and dtype.
struct FieldSpec {
  std::string name;
  plan::TensorType type;
};

class DataSet {
public:
  ~DataSet(); // out of line: TokenFile is complete only there

  /// DIR/<field.name>.npy for every field (the labels field is named
  /// "labels"); each file's first dim is the sample count, the rest must
  /// equal the field's shape without its first dim; dtype must match, except
  /// that integer files of another integer width (int32/int64/uint8/...) are
  /// converted to an integer field's dtype (a value that does not fit is an
  /// error), and float64 data converts to f32 fields. All files must have
  /// the same sample count. Errors (missing file, shape/dtype mismatch naming
  /// file, expected and got, fewer samples than one batch) -> null + message.
  static std::unique_ptr<DataSet> openNpyDir(const std::string &dir,
                                             const std::vector<FieldSpec> &fields,
                                             std::string &error);

  /// A flat file of token ids (tokenBytes 2 = uint16, 4 = uint32) cut into
  /// non-overlapping windows of seq+1 tokens: field 0 (ids, [batch, seq])
  /// gets tokens [0, seq), field 1 (labels, [batch, seq]) tokens [1, seq+1)
  /// of each window; a window is a sample. Both fields integer (I64 or I32).
  /// The file is memory-mapped. Errors: file size not a multiple of
  /// tokenBytes, too short for one batch.
  static std::unique_ptr<DataSet> openTokens(const std::string &path, int tokenBytes,
                                             const std::vector<FieldSpec> &fields,
                                             std::string &error);

  int64_t samples() const { return samples_; }
  /// From the fields' first dim.
  int64_t batch() const { return batch_; }
  /// samples / batch: the last partial batch is dropped.
  int64_t batchesPerEpoch() const { return samples_ / batch_; }

  /// Fills one buffer per field (in the fields' order, each of the field's
  /// byte size) with batch number `step` (0-based, counting across epochs):
  /// epoch = step / batchesPerEpoch, samples taken in a permutation of
  /// [0, samples) that depends only on (seed, epoch) (see permutation());
  /// shuffle off: samples in file order. false with a message when `step` is
  /// negative, or a label is out of the range setLabelRange gave:
  /// "labels.npy: sample S has label L, outside [0, C)".
  /// With `rows`, field f gets only the batch's samples [rows[f].first,
  /// rows[f].first + rows[f].second) (a rank's part: data-parallel ranks
  /// read disjoint parts of each batch), its buffer sized for those.
  bool fillBatch(int64_t step, void *const *outputs, std::string &error,
                 const std::vector<std::pair<int64_t, int64_t>> *rows = nullptr);

  /// Off by default.
  void setShuffle(bool shuffle, uint64_t seed);

  /// fillBatch checks that field `field` (an integer field) holds values in
  /// [0, classes) or equal to `ignoreIndex`. A field index out of range or a
  /// non-integer field makes every later fillBatch fail with a message.
  void setLabelRange(size_t field, int64_t classes, std::optional<int64_t> ignoreIndex);

  /// The order of samples in `epoch`: Fisher-Yates over std::mt19937_64
  /// seeded with seed ^ (epoch * 0x9E3779B97F4A7C15), drawing bounded
  /// integers by rejection rather than through std::uniform_int_distribution
  /// or std::shuffle, whose results differ between standard libraries.
  static std::vector<int64_t> permutation(int64_t samples, uint64_t seed, int64_t epoch);

private:
  DataSet() = default;

  struct LabelRange {
    int64_t classes;
    std::optional<int64_t> ignoreIndex;
  };
  struct Field {
    FieldSpec spec;
    std::string source;              // the file, for messages
    int64_t sampleBytes = 0;
    std::vector<char> data;          // .npy: every sample, in the field's dtype
    std::optional<LabelRange> labelRange;
  };
  struct TokenFile;

  /// Checks the fields' common shape rules and sets batch_.
  bool setFields(const std::vector<FieldSpec> &fields, const std::string &label,
                 std::string &error);
  /// Writes sample `sample` of field `f` to `out`; false with `error` when a
  /// token does not fit the field's dtype.
  bool copySample(size_t f, int64_t sample, char *out, std::string &error) const;

  std::vector<Field> fields_;
  std::unique_ptr<TokenFile> tokens_; // null for .npy data sets
  int64_t samples_ = 0;
  int64_t batch_ = 0;
  bool shuffle_ = false;
  uint64_t seed_ = 0;
  int64_t orderEpoch_ = -1;           // the epoch order_ is for; -1: none
  std::vector<int64_t> order_;
  std::string usageError_;            // a setLabelRange misuse, for fillBatch to report
};

} // namespace dtc::runtime::train

#endif // DTC_RUNTIME_TRAIN_DATASET_H
