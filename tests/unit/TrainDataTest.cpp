//===- TrainDataTest.cpp - training data sets and checkpoints -------------===//
#include "runtime/TensorIO.h"
#include "runtime/train/Checkpoint.h"
#include "runtime/Crc32c.h"
#include "plan/Version.h"
#include "runtime/train/DataSet.h"
#include "runtime/train/ModelExport.h"
#include "runtime/train/Reshard.h"
#include "tests/unit/SpmdPlanBuilder.h"
#include "tests/unit/TestFiles.h"

#include "onnx.pb.h"

#include <gtest/gtest.h>

#include <cstdint>
#include <cstdlib>
#include <cstring>
#include <fstream>
#include <functional>
#include <random>
#include <set>
#include <sstream>
#include <sys/stat.h>
#include <tuple>

using namespace dtc;
using namespace dtc::runtime;
using namespace dtc::runtime::train;

namespace {

std::string makeTempDir() { return testsupport::makeTempDir("train"); }

/// Whether `text` contains `part`; says both when not.
testing::AssertionResult contains(const std::string &text, const std::string &part) {
  if (text.find(part) != std::string::npos)
    return testing::AssertionSuccess();
  return testing::AssertionFailure() << "'" << text << "' does not contain '" << part << "'";
}

bool exists(const std::string &path) {
  struct stat st;
  return ::stat(path.c_str(), &st) == 0;
}

using testsupport::readBytes;
using testsupport::writeBytes;

plan::TensorType tensorType(plan::DType dtype, std::vector<int64_t> shape) {
  plan::TensorType type;
  type.set_dtype(dtype);
  for (int64_t d : shape)
    type.add_shape(d);
  return type;
}

FieldSpec field(std::string name, plan::DType dtype, std::vector<int64_t> shape) {
  return {std::move(name), tensorType(dtype, std::move(shape))};
}

/// Writes `values` as a .npy file of `dtype` and `shape` with the runtime's
/// own writer.
template <typename T>
void writeNpy(const std::string &path, plan::DType dtype, std::vector<int64_t> shape,
              const std::vector<T> &values) {
  HostTensor tensor;
  tensor.type = tensorType(dtype, std::move(shape));
  tensor.bytes.resize(values.size() * sizeof(T));
  std::memcpy(tensor.bytes.data(), values.data(), tensor.bytes.size());
  std::string error;
  ASSERT_TRUE(writeTensorFile(path, tensor, error)) << error;
}

/// A data set of `n` samples: x f32[n, 3] with row s = {s, s + 0.25, s + 0.5}
/// and labels i64[n] = 7 s, so that every batch says which samples it took.
std::string writeSampleDir(int64_t n) {
  std::string dir = makeTempDir();
  std::vector<float> x;
  std::vector<int64_t> labels;
  for (int64_t s = 0; s < n; ++s) {
    x.insert(x.end(), {float(s), float(s) + 0.25f, float(s) + 0.5f});
    labels.push_back(7 * s);
  }
  writeNpy(dir + "/x.npy", plan::F32, {n, 3}, x);
  writeNpy(dir + "/labels.npy", plan::I64, {n}, labels);
  return dir;
}

std::vector<FieldSpec> sampleFields(int64_t batch) {
  return {field("x", plan::F32, {batch, 3}), field("labels", plan::I64, {batch})};
}

/// The samples of batch `step`, checking that x and labels agree.
std::vector<int64_t> batchSamples(DataSet &set, int64_t step) {
  int64_t batch = set.batch();
  std::vector<float> x(size_t(batch * 3));
  std::vector<int64_t> labels(static_cast<size_t>(batch));
  void *outputs[] = {x.data(), labels.data()};
  std::string error;
  EXPECT_TRUE(set.fillBatch(step, outputs, error)) << error;
  std::vector<int64_t> samples;
  for (int64_t i = 0; i < batch; ++i) {
    int64_t s = int64_t(x[size_t(i * 3)]);
    EXPECT_EQ(x[size_t(i * 3 + 1)], float(s) + 0.25f);
    EXPECT_EQ(x[size_t(i * 3 + 2)], float(s) + 0.5f);
    EXPECT_EQ(labels[size_t(i)], 7 * s) << "labels and x from different samples";
    samples.push_back(s);
  }
  return samples;
}

/// The samples of every batch of `epoch`, in order.
std::vector<int64_t> epochSamples(DataSet &set, int64_t epoch) {
  std::vector<int64_t> samples;
  for (int64_t b = 0; b < set.batchesPerEpoch(); ++b)
    for (int64_t s : batchSamples(set, epoch * set.batchesPerEpoch() + b))
      samples.push_back(s);
  return samples;
}

std::unique_ptr<DataSet> openSamples(const std::string &dir, int64_t batch) {
  std::string error;
  auto set = DataSet::openNpyDir(dir, sampleFields(batch), error);
  EXPECT_TRUE(set) << error;
  return set;
}

std::string openError(const std::string &dir, const std::vector<FieldSpec> &fields) {
  std::string error;
  auto set = DataSet::openNpyDir(dir, fields, error);
  EXPECT_FALSE(set);
  EXPECT_FALSE(error.empty());
  return error;
}

} // namespace

//===----------------------------------------------------------------------===//
// Order
//===----------------------------------------------------------------------===//

TEST(DataSetTest, UnshuffledBatchesAreInFileOrder) {
  auto set = openSamples(writeSampleDir(12), 4);
  ASSERT_TRUE(set);
  EXPECT_EQ(set->samples(), 12);
  EXPECT_EQ(set->batch(), 4);
  EXPECT_EQ(set->batchesPerEpoch(), 3);
  std::vector<int64_t> expected = {0, 1, 2, 3, 4, 5, 6, 7, 8, 9, 10, 11};
  EXPECT_EQ(epochSamples(*set, 0), expected);
  EXPECT_EQ(epochSamples(*set, 1), expected);
}

TEST(DataSetTest, ShuffledEpochCoversEachSampleOnce) {
  auto set = openSamples(writeSampleDir(12), 4);
  ASSERT_TRUE(set);
  set->setShuffle(true, 42);
  for (int64_t epoch = 0; epoch < 4; ++epoch) {
    std::vector<int64_t> samples = epochSamples(*set, epoch);
    ASSERT_EQ(samples.size(), 12u);
    std::set<int64_t> distinct(samples.begin(), samples.end());
    EXPECT_EQ(distinct.size(), 12u) << "epoch " << epoch;
    EXPECT_EQ(*distinct.begin(), 0);
    EXPECT_EQ(*distinct.rbegin(), 11);
  }
}

TEST(DataSetTest, RanksReadDisjointRowsOfEachBatch) {
  // Four data-parallel ranks, each filling only its rows of a shuffled
  // batch of 8, together hold exactly the whole batch, in order.
  auto set = openSamples(writeSampleDir(24), 8);
  ASSERT_TRUE(set);
  set->setShuffle(true, 7);
  for (int64_t step : {0, 2, 5}) {
    std::vector<int64_t> whole = batchSamples(*set, step), joined;
    for (int64_t rank = 0; rank < 4; ++rank) {
      std::vector<float> x(2 * 3);
      std::vector<int64_t> labels(2);
      void *outputs[] = {x.data(), labels.data()};
      std::vector<std::pair<int64_t, int64_t>> rows = {{2 * rank, 2}, {2 * rank, 2}};
      std::string error;
      ASSERT_TRUE(set->fillBatch(step, outputs, error, &rows)) << error;
      for (int64_t i = 0; i < 2; ++i) {
        EXPECT_EQ(labels[size_t(i)], 7 * int64_t(x[size_t(i * 3)]));
        joined.push_back(int64_t(x[size_t(i * 3)]));
      }
    }
    EXPECT_EQ(joined, whole) << "step " << step;
  }
  std::vector<float> x(3);
  std::vector<int64_t> labels(1);
  void *outputs[] = {x.data(), labels.data()};
  std::vector<std::pair<int64_t, int64_t>> outside = {{7, 2}, {7, 2}};
  std::string error;
  EXPECT_FALSE(set->fillBatch(0, outputs, error, &outside));
  EXPECT_EQ(error, "rows [7, 9) of a batch of 8 requested");
}

TEST(DataSetTest, LastPartialBatchIsDropped) {
  auto set = openSamples(writeSampleDir(10), 4);
  ASSERT_TRUE(set);
  EXPECT_EQ(set->batchesPerEpoch(), 2);
  EXPECT_EQ(epochSamples(*set, 0), (std::vector<int64_t>{0, 1, 2, 3, 4, 5, 6, 7}));
  // Step 2 starts epoch 1 again from sample 0.
  EXPECT_EQ(batchSamples(*set, 2), (std::vector<int64_t>{0, 1, 2, 3}));
  set->setShuffle(true, 3);
  std::vector<int64_t> samples = epochSamples(*set, 0);
  EXPECT_EQ(std::set<int64_t>(samples.begin(), samples.end()).size(), 8u);
}

TEST(DataSetTest, ShuffledOrderDependsOnlyOnSeedAndEpoch) {
  std::string dir = writeSampleDir(12);
  auto set = openSamples(dir, 4);
  ASSERT_TRUE(set);
  set->setShuffle(true, 7);
  std::vector<int64_t> epoch0 = epochSamples(*set, 0);
  std::vector<int64_t> epoch1 = epochSamples(*set, 1);
  std::vector<int64_t> fileOrder = {0, 1, 2, 3, 4, 5, 6, 7, 8, 9, 10, 11};
  EXPECT_NE(epoch0, fileOrder);
  EXPECT_NE(epoch0, epoch1) << "every epoch needs its own order";
  // The same seed again, in a fresh data set resumed mid-epoch: the same
  // batches, without filling the earlier ones first.
  auto resumed = openSamples(dir, 4);
  ASSERT_TRUE(resumed);
  resumed->setShuffle(true, 7);
  EXPECT_EQ(batchSamples(*resumed, 4),
            std::vector<int64_t>(epoch1.begin() + 4, epoch1.begin() + 8));
  EXPECT_EQ(epochSamples(*resumed, 0), epoch0);
  EXPECT_EQ(epochSamples(*resumed, 1), epoch1);
  // Going back an epoch gives the old order again.
  EXPECT_EQ(epochSamples(*set, 0), epoch0);
  // Another seed, another order.
  resumed->setShuffle(true, 8);
  EXPECT_NE(epochSamples(*resumed, 0), epoch0);
  // Shuffle off again: file order.
  resumed->setShuffle(false, 8);
  EXPECT_EQ(epochSamples(*resumed, 0), fileOrder);
}

TEST(DataSetTest, PermutationIsPinned) {
  // The generator itself is pinned by the standard (its 10000th output).
  std::mt19937_64 gen;
  gen.discard(9999);
  EXPECT_EQ(gen(), 9981545732273789042ull);
  // Computed by a separate Python implementation of mt19937_64 and the same
  // Fisher-Yates: a change here reorders every resumed run's data.
  EXPECT_EQ(DataSet::permutation(10, 42, 0),
            (std::vector<int64_t>{1, 7, 9, 0, 3, 8, 4, 2, 5, 6}));
  EXPECT_EQ(DataSet::permutation(10, 42, 1),
            (std::vector<int64_t>{2, 6, 1, 7, 3, 8, 4, 9, 5, 0}));
  EXPECT_EQ(DataSet::permutation(16, 0xdeadbeef, 5),
            (std::vector<int64_t>{1, 10, 5, 8, 12, 2, 13, 4, 15, 9, 6, 11, 14, 3, 0, 7}));
  // And the data set takes its batches in that order.
  std::string dir = writeSampleDir(12);
  auto set = openSamples(dir, 4);
  ASSERT_TRUE(set);
  set->setShuffle(true, 7);
  EXPECT_EQ(epochSamples(*set, 0),
            (std::vector<int64_t>{4, 0, 2, 6, 10, 9, 1, 5, 11, 8, 7, 3}));
}

//===----------------------------------------------------------------------===//
// Errors and conversions
//===----------------------------------------------------------------------===//

TEST(DataSetTest, ShapeMismatchNamesFileExpectedAndGot) {
  std::string dir = writeSampleDir(12);
  std::string error =
      openError(dir, {field("x", plan::F32, {4, 5}), field("labels", plan::I64, {4})});
  EXPECT_TRUE(contains(error, "x.npy"));
  EXPECT_TRUE(contains(error, "expected f32[N,5]"));
  EXPECT_TRUE(contains(error, "got f32[12,3]"));
  // Another rank.
  error = openError(dir, {field("x", plan::F32, {4, 3}), field("labels", plan::I64, {4, 1})});
  EXPECT_TRUE(contains(error, "labels.npy: expected i64[N,1]"));
  EXPECT_TRUE(contains(error, "got i64[12]"));
}

TEST(DataSetTest, DtypeMismatchNamesFileExpectedAndGot) {
  std::string dir = writeSampleDir(12);
  // Float data never feeds an integer field, nor f32 data an f64 one.
  std::string error =
      openError(dir, {field("x", plan::I64, {4, 3}), field("labels", plan::I64, {4})});
  EXPECT_TRUE(contains(error, "x.npy: expected i64[N,3]"));
  EXPECT_TRUE(contains(error, "got f32[12,3]"));
  error = openError(dir, {field("x", plan::F64, {4, 3}), field("labels", plan::I64, {4})});
  EXPECT_TRUE(contains(error, "got f32[12,3]"));
  error = openError(dir, {field("x", plan::F32, {4, 3}), field("labels", plan::F32, {4})});
  EXPECT_TRUE(contains(error, "labels.npy: expected f32[N]"));
  EXPECT_TRUE(contains(error, "got i64[12]"));
}

TEST(DataSetTest, MissingFileAndSampleCountMismatch) {
  std::string dir = writeSampleDir(12);
  std::string error =
      openError(dir, {field("x", plan::F32, {4, 3}), field("mask", plan::I64, {4})});
  EXPECT_TRUE(contains(error, "mask.npy"));
  writeNpy(dir + "/labels.npy", plan::I64, {11}, std::vector<int64_t>(11, 0));
  error = openError(dir, sampleFields(4));
  EXPECT_TRUE(contains(error, "labels.npy has 11 samples"));
  EXPECT_TRUE(contains(error, "x.npy has 12"));
}

TEST(DataSetTest, FieldsMustShareTheBatchDim) {
  std::string error = openError(
      writeSampleDir(12), {field("x", plan::F32, {4, 3}), field("labels", plan::I64, {2})});
  EXPECT_TRUE(contains(error, "field 'labels' has batch 2 but field 'x' has 4"));
}

TEST(DataSetTest, FewerSamplesThanOneBatch) {
  std::string error = openError(writeSampleDir(3), sampleFields(4));
  EXPECT_TRUE(contains(error, "data set has 3 samples, fewer than one batch of 4"));
  EXPECT_TRUE(openSamples(writeSampleDir(4), 4));
}

TEST(DataSetTest, LabelOutOfRange) {
  std::string dir = makeTempDir();
  writeNpy(dir + "/x.npy", plan::F32, {8, 1}, std::vector<float>(8, 1.0f));
  writeNpy(dir + "/labels.npy", plan::I64, {8},
           std::vector<int64_t>{0, 1, -100, 3, 4, 10, 6, 9});
  std::string error;
  auto set = DataSet::openNpyDir(
      dir, {field("x", plan::F32, {4, 1}), field("labels", plan::I64, {4})}, error);
  ASSERT_TRUE(set) << error;
  std::vector<float> x(4);
  std::vector<int64_t> labels(4);
  void *outputs[] = {x.data(), labels.data()};
  // No range set: anything goes.
  EXPECT_TRUE(set->fillBatch(1, outputs, error)) << error;

  set->setLabelRange(1, 10, -100);
  EXPECT_TRUE(set->fillBatch(0, outputs, error)) << error; // -100 is ignored
  EXPECT_EQ(labels, (std::vector<int64_t>{0, 1, -100, 3}));
  EXPECT_FALSE(set->fillBatch(1, outputs, error));
  EXPECT_TRUE(contains(error, "labels.npy: sample 5 has label 10, outside [0, 10)"));

  set->setLabelRange(1, 10, std::nullopt);
  EXPECT_FALSE(set->fillBatch(0, outputs, error));
  EXPECT_TRUE(contains(error, "labels.npy: sample 2 has label -100, outside [0, 10); to leave "
                              "such labels out of the loss (Hugging Face marks padding with "
                              "-100), compile with --ignore-index -100"));
  set->setLabelRange(1, 10, -1);
  EXPECT_FALSE(set->fillBatch(0, outputs, error));
  EXPECT_TRUE(contains(error, "sample 2 has label -100, outside [0, 10) and not the ignored "
                              "label -1"));

  set->setLabelRange(1, 11, -100);
  EXPECT_TRUE(set->fillBatch(1, outputs, error)) << error;
  // The shuffled order reports the file's sample number.
  set->setLabelRange(1, 10, -100);
  set->setShuffle(true, 1);
  int failures = 0;
  for (int64_t step = 0; step < 2; ++step)
    if (!set->fillBatch(step, outputs, error)) {
      ++failures;
      EXPECT_TRUE(contains(error, "sample 5 has label 10"));
    }
  EXPECT_EQ(failures, 1);
}

TEST(DataSetTest, LabelRangeMisuseIsReported) {
  auto set = openSamples(writeSampleDir(8), 4);
  ASSERT_TRUE(set);
  std::vector<float> x(12);
  std::vector<int64_t> labels(4);
  void *outputs[] = {x.data(), labels.data()};
  std::string error;
  set->setLabelRange(0, 10, std::nullopt); // x is f32
  EXPECT_FALSE(set->fillBatch(0, outputs, error));
  EXPECT_TRUE(contains(error, "field 'x'"));
  EXPECT_FALSE(set->fillBatch(-1, outputs, error));
}

TEST(DataSetTest, IntegerFilesConvertToTheFieldsDtype) {
  std::string dir = makeTempDir();
  writeNpy(dir + "/x.npy", plan::F64, {4, 2},
           std::vector<double>{0.5, 1.5, 2.5, 3.5, 4.5, 5.5, 6.5, 1e-3});
  writeNpy(dir + "/labels.npy", plan::I32, {4}, std::vector<int32_t>{3, -100, 2147483647, 0});
  writeNpy(dir + "/mask.npy", plan::U8, {4}, std::vector<uint8_t>{1, 0, 255, 1});
  std::string error;
  auto set =
      DataSet::openNpyDir(dir,
                          {field("x", plan::F32, {4, 2}), field("labels", plan::I64, {4}),
                           field("mask", plan::I32, {4})},
                          error);
  ASSERT_TRUE(set) << error;
  std::vector<float> x(8);
  std::vector<int64_t> labels(4);
  std::vector<int32_t> mask(4);
  void *outputs[] = {x.data(), labels.data(), mask.data()};
  ASSERT_TRUE(set->fillBatch(0, outputs, error)) << error;
  EXPECT_EQ(x, (std::vector<float>{0.5f, 1.5f, 2.5f, 3.5f, 4.5f, 5.5f, 6.5f, float(1e-3)}));
  EXPECT_EQ(labels, (std::vector<int64_t>{3, -100, 2147483647, 0}));
  EXPECT_EQ(mask, (std::vector<int32_t>{1, 0, 255, 1}));

  // A value the field's dtype cannot hold is an error, not a wrap.
  writeNpy(dir + "/labels.npy", plan::I64, {4},
           std::vector<int64_t>{1, 2, int64_t(1) << 40, 3});
  error = openError(dir, {field("x", plan::F32, {4, 2}), field("labels", plan::I32, {4})});
  EXPECT_TRUE(contains(error, "labels.npy: sample 2 has value 1099511627776"));
  EXPECT_TRUE(contains(error, "i32"));
  writeNpy(dir + "/labels.npy", plan::I32, {4}, std::vector<int32_t>{1, 2, 3, -1});
  error = openError(dir, {field("x", plan::F32, {4, 2}), field("labels", plan::U8, {4})});
  EXPECT_TRUE(contains(error, "sample 3 has value -1"));
}

//===----------------------------------------------------------------------===//
// Token files
//===----------------------------------------------------------------------===//

namespace {

/// `count` tokens first + 0, first + 1, ... as `tokenBytes`-byte integers.
std::string tokenFile(int64_t count, uint32_t first, int tokenBytes) {
  std::string bytes;
  for (int64_t i = 0; i < count; ++i) {
    uint32_t token = first + uint32_t(i);
    bytes.append(reinterpret_cast<const char *>(&token), size_t(tokenBytes));
  }
  return bytes;
}

template <typename T> std::vector<T> window(uint32_t first, int64_t start, int64_t seq) {
  std::vector<T> values;
  for (int64_t t = 0; t < seq; ++t)
    values.push_back(T(first + uint32_t(start + t)));
  return values;
}

} // namespace

TEST(DataSetTest, Uint16TokenWindows) {
  std::string path = makeTempDir() + "/tokens.bin";
  // 22 tokens: 5 windows of 4 (seq 3 + 1), 2 tokens left over.
  writeBytes(path, tokenFile(22, 1000, 2));
  std::string error;
  auto set = DataSet::openTokens(
      path, 2, {field("ids", plan::I64, {2, 3}), field("labels", plan::I64, {2, 3})}, error);
  ASSERT_TRUE(set) << error;
  EXPECT_EQ(set->samples(), 5);
  EXPECT_EQ(set->batchesPerEpoch(), 2);
  std::vector<int64_t> ids(6), labels(6);
  void *outputs[] = {ids.data(), labels.data()};
  for (int64_t step : {1, 3}) { // batch 1 of epochs 0 and 1: windows 2 and 3
    ASSERT_TRUE(set->fillBatch(step, outputs, error)) << error;
    std::vector<int64_t> wantIds = window<int64_t>(1000, 8, 3);
    std::vector<int64_t> more = window<int64_t>(1000, 12, 3);
    wantIds.insert(wantIds.end(), more.begin(), more.end());
    std::vector<int64_t> wantLabels = window<int64_t>(1000, 9, 3);
    more = window<int64_t>(1000, 13, 3);
    wantLabels.insert(wantLabels.end(), more.begin(), more.end());
    EXPECT_EQ(ids, wantIds);
    EXPECT_EQ(labels, wantLabels);
  }
  // Shuffled: every window once per epoch, labels one token after the ids.
  set->setShuffle(true, 5);
  std::set<int64_t> windows;
  for (int64_t step = 0; step < 2; ++step) {
    ASSERT_TRUE(set->fillBatch(step, outputs, error)) << error;
    for (int64_t i = 0; i < 2; ++i) {
      int64_t start = ids[size_t(i * 3)] - 1000;
      EXPECT_EQ(start % 4, 0);
      windows.insert(start / 4);
      EXPECT_EQ(std::vector<int64_t>(ids.begin() + i * 3, ids.begin() + i * 3 + 3),
                window<int64_t>(1000, start, 3));
      EXPECT_EQ(std::vector<int64_t>(labels.begin() + i * 3, labels.begin() + i * 3 + 3),
                window<int64_t>(1000, start + 1, 3));
    }
  }
  EXPECT_EQ(windows.size(), 4u);
  // The label range applies to token labels as well.
  set->setShuffle(false, 0);
  set->setLabelRange(1, 1010, std::nullopt);
  EXPECT_TRUE(set->fillBatch(0, outputs, error)) << error; // labels up to 1007
  EXPECT_FALSE(set->fillBatch(1, outputs, error));
  EXPECT_TRUE(contains(error, "tokens.bin: sample 2 has label 1010, outside [0, 1010)"));
}

TEST(DataSetTest, Uint32TokenWindows) {
  std::string path = makeTempDir() + "/tokens.bin";
  writeBytes(path, tokenFile(12, 100000, 4)); // beyond uint16
  std::string error;
  auto set = DataSet::openTokens(
      path, 4, {field("ids", plan::I32, {1, 5}), field("labels", plan::I32, {1, 5})}, error);
  ASSERT_TRUE(set) << error;
  EXPECT_EQ(set->samples(), 2);
  std::vector<int32_t> ids(5), labels(5);
  void *outputs[] = {ids.data(), labels.data()};
  ASSERT_TRUE(set->fillBatch(1, outputs, error)) << error;
  EXPECT_EQ(ids, window<int32_t>(100000, 6, 5));
  EXPECT_EQ(labels, window<int32_t>(100000, 7, 5));

  // A token beyond i32 does not wrap.
  writeBytes(path, tokenFile(4, 0x7ffffffe, 4));
  set = DataSet::openTokens(
      path, 4, {field("ids", plan::I32, {1, 3}), field("labels", plan::I32, {1, 3})}, error);
  ASSERT_TRUE(set) << error;
  std::vector<int32_t> ids3(3), labels3(3);
  void *outputs3[] = {ids3.data(), labels3.data()};
  EXPECT_FALSE(set->fillBatch(0, outputs3, error));
  EXPECT_TRUE(contains(error, "token 2147483648 at 2 does not fit the field's i32"));
}

TEST(DataSetTest, TokenFileErrors) {
  std::string dir = makeTempDir();
  std::vector<FieldSpec> fields = {field("ids", plan::I64, {2, 3}),
                                   field("labels", plan::I64, {2, 3})};
  std::string error;
  writeBytes(dir + "/odd.bin", tokenFile(20, 0, 2) + "x");
  EXPECT_FALSE(DataSet::openTokens(dir + "/odd.bin", 2, fields, error));
  EXPECT_TRUE(contains(error, "odd.bin: 41 bytes is not a multiple of the 2-byte token size"));
  writeBytes(dir + "/short.bin", tokenFile(7, 0, 4)); // one window of 4, a batch needs 2
  EXPECT_FALSE(DataSet::openTokens(dir + "/short.bin", 4, fields, error));
  EXPECT_TRUE(contains(error, "short.bin: data set has 1 samples"));
  EXPECT_TRUE(contains(error, "fewer than one batch of 2"));
  EXPECT_FALSE(DataSet::openTokens(dir + "/missing.bin", 2, fields, error));
  EXPECT_TRUE(contains(error, "missing.bin"));
  EXPECT_FALSE(DataSet::openTokens(dir + "/short.bin", 3, fields, error));
  EXPECT_TRUE(contains(error, "token size 3"));
  EXPECT_FALSE(DataSet::openTokens(
      dir + "/short.bin", 2,
      {field("ids", plan::F32, {2, 3}), field("labels", plan::I64, {2, 3})}, error));
  EXPECT_TRUE(contains(error, "field 'ids' is f32[2,3]"));
}

//===----------------------------------------------------------------------===//
// Checkpoints
//===----------------------------------------------------------------------===//

namespace {

std::vector<char> patternBytes(size_t size, int salt) {
  std::vector<char> bytes(size);
  for (size_t i = 0; i < size; ++i)
    bytes[i] = char(i * 37 + 11 + salt);
  return bytes;
}

CheckpointState sampleState(int64_t step) {
  CheckpointState state;
  state.step = step;
  state.seed = 0xfedcba9876543210ull;
  state.planDigest = "sha256:0123abcd";
  state.tensorTypes = {{"fc1.weight", tensorType(plan::F32, {2, 3})},
                       {"fc1.weight.adam_m", tensorType(plan::BF16, {2, 3})},
                       {"steps", tensorType(plan::I64, {})},
                       {"empty", tensorType(plan::U8, {0, 4})}};
  state.tensorBytes = {
      patternBytes(24, int(step)), patternBytes(12, 1), patternBytes(8, 2), {}};
  // NaN payloads and negative zero survive: bytes, not values.
  uint32_t nan = 0x7fc01234, negativeZero = 0x80000000;
  std::memcpy(state.tensorBytes[0].data(), &nan, 4);
  std::memcpy(state.tensorBytes[0].data() + 4, &negativeZero, 4);
  return state;
}

void expectSameState(const CheckpointState &a, const CheckpointState &b) {
  EXPECT_EQ(a.step, b.step);
  EXPECT_EQ(a.seed, b.seed);
  EXPECT_EQ(a.planDigest, b.planDigest);
  ASSERT_EQ(a.tensorTypes.size(), b.tensorTypes.size());
  for (size_t i = 0; i < a.tensorTypes.size(); ++i) {
    EXPECT_EQ(a.tensorTypes[i].first, b.tensorTypes[i].first);
    EXPECT_EQ(a.tensorTypes[i].second.SerializeAsString(),
              b.tensorTypes[i].second.SerializeAsString());
  }
  EXPECT_EQ(a.tensorBytes, b.tensorBytes);
  EXPECT_EQ(a.mesh, b.mesh);
  EXPECT_EQ(a.rank, b.rank);
}

/// A checkpoint file around a hand-encoded message, with the trailing
/// checksum format version 2 has (or without, as version 1 was).
void writeRawCheckpoint(const std::string &dir, const std::string &message,
                        bool checksum = true) {
  uint64_t length = message.size();
  std::string file =
      std::string("dtc-ckpt") + std::string(reinterpret_cast<const char *>(&length), 8) + message;
  uint32_t crc = runtime::crc32c(file.data(), file.size());
  if (checksum)
    file += std::string(reinterpret_cast<const char *>(&crc), 4);
  writeBytes(dir + "/checkpoint.dtck", file);
}

/// A hand-encoded tensor's crc32c field (4, fixed32) for `data`.
std::string crcField(const std::string &data) {
  uint32_t crc = runtime::crc32c(data.data(), data.size());
  return "\x25" + std::string(reinterpret_cast<const char *>(&crc), 4);
}

} // namespace

TEST(CheckpointTest, RoundTripIsBitExact) {
  std::string dir = makeTempDir() + "/run/checkpoints"; // created, parents too
  CheckpointState state = sampleState(1234);
  std::string error;
  ASSERT_TRUE(writeCheckpoint(dir, state, error)) << error;
  EXPECT_FALSE(exists(dir + "/checkpoint.dtck.tmp"));
  CheckpointState read;
  ASSERT_TRUE(readCheckpoint(dir, read, error)) << error;
  expectSameState(read, state);
  // A raw binary digest and names that are not UTF-8 are bytes like any other.
  state.planDigest = std::string("\xff\x00\xc3\x28", 4);
  state.tensorTypes[1].first = "m\xe9";
  ASSERT_TRUE(writeCheckpoint(dir, state, error)) << error;
  ASSERT_TRUE(readCheckpoint(dir, read, error)) << error;
  expectSameState(read, state);
}

TEST(CheckpointTest, EveryTruncationIsAMessage) {
  std::string dir = makeTempDir();
  std::string error;
  ASSERT_TRUE(writeCheckpoint(dir, sampleState(5), error)) << error;
  std::string whole = readBytes(dir + "/checkpoint.dtck");
  ASSERT_GT(whole.size(), 16u);
  std::string cut = makeTempDir();
  for (size_t size = 0; size < whole.size(); ++size) {
    writeBytes(cut + "/checkpoint.dtck", whole.substr(0, size));
    CheckpointState state;
    state.step = -7;
    error.clear();
    EXPECT_FALSE(readCheckpoint(cut, state, error)) << "cut at " << size;
    EXPECT_TRUE(contains(error, "checkpoint.dtck")) << "cut at " << size;
    EXPECT_TRUE(contains(error, size < 8 ? "truncated" : "truncated checkpoint")) << size;
    EXPECT_EQ(state.step, -7) << "a failed read changed the state";
  }
  // Trailing bytes are no better.
  writeBytes(cut + "/checkpoint.dtck", whole + "x");
  CheckpointState state;
  EXPECT_FALSE(readCheckpoint(cut, state, error));
  EXPECT_TRUE(contains(error, "corrupt checkpoint"));
}

TEST(CheckpointTest, ForeignAndInconsistentFiles) {
  std::string dir = makeTempDir();
  CheckpointState state;
  std::string error;
  EXPECT_FALSE(readCheckpoint(dir, state, error));
  EXPECT_TRUE(contains(error, "cannot open"));

  writeBytes(dir + "/checkpoint.dtck", std::string(64, 'a'));
  EXPECT_FALSE(readCheckpoint(dir, state, error));
  EXPECT_TRUE(contains(error, "not a dtc checkpoint"));

  writeRawCheckpoint(dir, std::string("\x08\x03", 2)); // format_version 3
  EXPECT_FALSE(readCheckpoint(dir, state, error));
  EXPECT_TRUE(contains(error, "checkpoint format version 3 is not supported"));
  // Version 1 had no checksums.
  writeRawCheckpoint(dir, std::string("\x08\x01", 2), false);
  EXPECT_FALSE(readCheckpoint(dir, state, error));
  EXPECT_TRUE(contains(error, "format version 1 (an older dtc's, without checksums) is not "
                              "supported (this runtime reads 2)"))
      << error;

  writeRawCheckpoint(dir, std::string("\x08\x02\x2a\x03\xff\xff\xff", 7)); // a broken tensor
  EXPECT_FALSE(readCheckpoint(dir, state, error));
  EXPECT_TRUE(contains(error, "does not parse"));

  // Tensor 'w' of f32[2] but 4 data bytes.
  std::string type("\x08\x01\x12\x01\x02", 5);
  std::string tensor = std::string("\x0a\x01w\x12", 4) + char(type.size()) + type +
                       std::string("\x1a\x04"
                                   "abcd",
                                   6) +
                       crcField("abcd");
  writeRawCheckpoint(dir, std::string("\x08\x02\x2a", 3) + char(tensor.size()) + tensor);
  EXPECT_FALSE(readCheckpoint(dir, state, error));
  EXPECT_TRUE(contains(error, "tensor 'w': holds 4 bytes but f32[2] needs 8"));
  // The same with the right size reads.
  std::string good = std::string("\x0a\x01w\x12", 4) + char(type.size()) + type +
                     std::string("\x1a\x08"
                                 "abcdefgh",
                                 10);
  tensor = good + crcField("abcdefgh");
  writeRawCheckpoint(dir, std::string("\x08\x02\x2a", 3) + char(tensor.size()) + tensor);
  ASSERT_TRUE(readCheckpoint(dir, state, error)) << error;
  ASSERT_EQ(state.tensorBytes.size(), 1u);
  EXPECT_EQ(std::string(state.tensorBytes[0].begin(), state.tensorBytes[0].end()), "abcdefgh");
  // A tensor whose own checksum does not match its bytes (the file's
  // does: it was written so) is refused by name.
  tensor = good + crcField("abcdefgX");
  writeRawCheckpoint(dir, std::string("\x08\x02\x2a", 3) + char(tensor.size()) + tensor);
  EXPECT_FALSE(readCheckpoint(dir, state, error));
  EXPECT_TRUE(contains(error, "tensor 'w' does not match its checksum")) << error;
}

TEST(CheckpointTest, EveryFlippedBitIsCaught) {
  std::string dir = makeTempDir();
  std::string error;
  ASSERT_TRUE(writeCheckpoint(dir, sampleState(9), error)) << error;
  std::string whole = readBytes(dir + "/checkpoint.dtck");
  std::string bad = makeTempDir();
  int namedTensor = 0;
  for (size_t byte = 0; byte < whole.size(); ++byte)
    for (int bit = 0; bit < 8; ++bit) {
      std::string flipped = whole;
      flipped[byte] = char(flipped[byte] ^ (1 << bit));
      writeBytes(bad + "/checkpoint.dtck", flipped);
      CheckpointState state;
      EXPECT_FALSE(readCheckpoint(bad, state, error)) << "bit " << bit << " of byte " << byte;
      EXPECT_TRUE(contains(error, "checkpoint.dtck: ")) << error;
      namedTensor += contains(error, "damaged: 'fc1.weight'");
    }
  // A flip inside a tensor's data names the tensor.
  EXPECT_GE(namedTensor, 24 * 8);
}

TEST(CheckpointTest, TheReplacedFileIsKeptAsThePrevious) {
  std::string dir = makeTempDir();
  std::string error;
  CheckpointState state;
  ASSERT_TRUE(writeCheckpoint(dir, sampleState(1), error)) << error;
  EXPECT_FALSE(readCheckpoint(dir, 0, 1, state, error, true));
  EXPECT_TRUE(contains(error, "no previous checkpoint")) << error;
  ASSERT_TRUE(writeCheckpoint(dir, sampleState(2), error)) << error;
  ASSERT_TRUE(writeCheckpoint(dir, sampleState(3), error)) << error;
  ASSERT_TRUE(readCheckpoint(dir, 0, 1, state, error, true)) << error;
  expectSameState(state, sampleState(2));
  ASSERT_TRUE(readCheckpoint(dir, state, error)) << error;
  expectSameState(state, sampleState(3));
  EXPECT_EQ(state.dtcVersion, kDtcVersion);
}

TEST(CheckpointTest, InconsistentStateIsNotWritten) {
  std::string dir = makeTempDir();
  CheckpointState state = sampleState(1);
  state.tensorBytes[1].pop_back();
  std::string error;
  EXPECT_FALSE(writeCheckpoint(dir, state, error));
  EXPECT_TRUE(
      contains(error, "tensor 'fc1.weight.adam_m': holds 11 bytes but bf16[2,3] needs 12"));
  state = sampleState(1);
  state.tensorBytes.pop_back();
  EXPECT_FALSE(writeCheckpoint(dir, state, error));
  EXPECT_TRUE(contains(error, "4 tensor types but 3"));
  state = sampleState(1);
  state.tensorTypes[2].first = "fc1.weight";
  EXPECT_FALSE(writeCheckpoint(dir, state, error));
  EXPECT_TRUE(contains(error, "'fc1.weight' appears twice"));
  EXPECT_FALSE(exists(dir + "/checkpoint.dtck"));
  EXPECT_FALSE(exists(dir + "/checkpoint.dtck.tmp"));
  // A folder that is a file.
  writeBytes(dir + "/file", "x");
  EXPECT_FALSE(writeCheckpoint(dir + "/file", sampleState(1), error));
  EXPECT_TRUE(contains(error, "not a folder"));
}

TEST(CheckpointTest, InterruptedWriteLeavesThePreviousCheckpoint) {
  std::string dir = makeTempDir();
  CheckpointState first = sampleState(100), second = sampleState(200);
  std::string error;
  ASSERT_TRUE(writeCheckpoint(dir, first, error)) << error;
  std::string secondFile;
  {
    std::string other = makeTempDir();
    ASSERT_TRUE(writeCheckpoint(other, second, error)) << error;
    secondFile = readBytes(other + "/checkpoint.dtck");
  }
  // A crash before the rename leaves some prefix of the new file, or all of
  // it, in checkpoint.dtck.tmp; the old checkpoint is what a resume reads.
  for (size_t size : {size_t(0), size_t(10), secondFile.size() / 2, secondFile.size()}) {
    writeBytes(dir + "/checkpoint.dtck.tmp", secondFile.substr(0, size));
    CheckpointState read;
    ASSERT_TRUE(readCheckpoint(dir, read, error)) << error;
    expectSameState(read, first);
  }
  // The next write replaces the leftover and then the checkpoint.
  ASSERT_TRUE(writeCheckpoint(dir, second, error)) << error;
  EXPECT_FALSE(exists(dir + "/checkpoint.dtck.tmp"));
  CheckpointState read;
  ASSERT_TRUE(readCheckpoint(dir, read, error)) << error;
  expectSameState(read, second);
}

TEST(CheckpointTest, EachRankHasAFileOfItsOwn) {
  std::string dir = makeTempDir();
  CheckpointState state = sampleState(7);
  state.mesh = {2, 2};
  state.rank = 3;
  std::string error;
  ASSERT_TRUE(writeCheckpoint(dir, state, error)) << error;
  EXPECT_TRUE(exists(dir + "/checkpoint.rank-3.dtck"));
  EXPECT_FALSE(exists(dir + "/checkpoint.dtck"));
  CheckpointState read;
  ASSERT_TRUE(readCheckpoint(dir, 3, 4, read, error)) << error;
  expectSameState(state, read);

  // Another rank's file, or another rank count's, is a message saying so.
  EXPECT_FALSE(readCheckpoint(dir, 2, 4, read, error));
  EXPECT_TRUE(contains(error, "checkpoint.rank-2.dtck: no checkpoint of rank 2 of 4; the "
                              "folder holds the files of 1 rank (checkpoint.rank-R.dtck)"))
      << error;
  EXPECT_FALSE(readCheckpoint(dir, read, error));
  EXPECT_TRUE(contains(error, "no checkpoint of a single-rank run; the folder holds the files "
                              "of 1 rank"))
      << error;
  writeBytes(dir + "/checkpoint.rank-2.dtck", readBytes(dir + "/checkpoint.rank-3.dtck"));
  EXPECT_FALSE(readCheckpoint(dir, 2, 4, read, error));
  EXPECT_TRUE(contains(error, "the file holds rank 3's parameters, not rank 2's")) << error;
}

//===----------------------------------------------------------------------===//
// Padded parameters (ParameterSource.model_shape) going back into a model
// and across checkpoints
//===----------------------------------------------------------------------===//

namespace {

/// The value at (r, c) of the tests' [3,5] model weight (never zero).
float modelValue(int64_t r, int64_t c) { return float(10 * r + c + 1); }

/// [rows, cols] of `value`, row-major.
std::vector<float> matrix(int64_t rows, int64_t cols,
                          const std::function<float(int64_t, int64_t)> &value) {
  std::vector<float> values;
  for (int64_t r = 0; r < rows; ++r)
    for (int64_t c = 0; c < cols; ++c)
      values.push_back(value(r, c));
  return values;
}

std::vector<char> bytesOf(const std::vector<float> &values) {
  const char *at = reinterpret_cast<const char *>(values.data());
  return {at, at + values.size() * 4};
}

/// The model's [3,5] weight padded to [4,8].
float paddedValue(int64_t r, int64_t c) { return r < 3 && c < 5 ? modelValue(r, c) : 0.f; }

} // namespace

TEST(ModelExportTest, PaddedWeightsAreCroppedToTheModel) {
  std::string dir = makeTempDir(), modelPath = dir + "/model.onnx", error;
  ::onnx::ModelProto model;
  model.set_ir_version(9);
  model.mutable_graph()->set_name("g");
  for (auto [name, rows, cols] : {std::tuple<const char *, int64_t, int64_t>{"w", 3, 5},
                                  {"v", 1, 4}}) {
    ::onnx::TensorProto *t = model.mutable_graph()->add_initializer();
    t->set_name(name);
    t->set_data_type(::onnx::TensorProto::FLOAT);
    t->add_dims(rows);
    t->add_dims(cols);
    std::vector<char> bytes = bytesOf(matrix(rows, cols, modelValue));
    t->set_raw_data(bytes.data(), bytes.size());
  }
  writeBytes(modelPath, model.SerializeAsString());

  testsupport::SpmdPlanBuilder b({1});
  plan::ParameterSource w, v;
  w.set_initializer("w");
  w.add_model_shape(3);
  w.add_model_shape(5);
  v.set_initializer("v");
  uint32_t wId = b.parameter(w, plan::F32, {4, 8}), vId = b.parameter(v, plan::F32, {1, 4});
  b.output(wId, "w");
  b.output(vId, "v");
  ASSERT_TRUE(plan::validatePlan(b.plan, error)) << error;
  auto executor = Executor::create(b.plan, 0, modelPath, 1, error);
  ASSERT_TRUE(executor) << error;
  auto *weight = reinterpret_cast<float *>(executor->bufferData(wId));
  EXPECT_EQ(std::vector<float>(weight, weight + 32), matrix(4, 8, paddedValue));

  // "Trained": every value changes, the padding's too (cropped, not checked).
  auto trained = [](int64_t r, int64_t c) { return float(1000 + 8 * r + c); };
  std::vector<float> values = matrix(4, 8, trained);
  std::memcpy(weight, values.data(), 32 * 4);
  int replaced = 0;
  ASSERT_TRUE(train::exportTrainedModel(b.plan, *executor, modelPath, dir + "/out.onnx", nullptr,
                                        replaced, error))
      << error;
  EXPECT_EQ(replaced, 2);
  ::onnx::ModelProto out;
  ASSERT_TRUE(out.ParseFromString(readBytes(dir + "/out.onnx")));
  const ::onnx::TensorProto &exported = out.graph().initializer(0);
  ASSERT_EQ(exported.name(), "w");
  EXPECT_EQ(std::vector<int64_t>(exported.dims().begin(), exported.dims().end()),
            (std::vector<int64_t>{3, 5}));
  std::vector<float> cropped(exported.raw_data().size() / 4);
  std::memcpy(cropped.data(), exported.raw_data().data(), exported.raw_data().size());
  EXPECT_EQ(cropped, matrix(3, 5, trained));
  // An unpadded weight goes back as it is.
  const ::onnx::TensorProto &unpadded = out.graph().initializer(1);
  std::vector<float> vValues(4);
  ASSERT_EQ(unpadded.raw_data().size(), 16u);
  std::memcpy(vValues.data(), unpadded.raw_data().data(), 16);
  EXPECT_EQ(vValues, matrix(1, 4, modelValue));
}

// A checkpoint written before the plan padded a weight resumes into the
// padded plan: the model's values where it has them, zeros elsewhere.
TEST(ReshardTest, PadsACheckpointFromBeforeThePadding) {
  std::string dir = makeTempDir(), error;
  CheckpointState state;
  state.step = 5;
  state.tensorTypes = {{"w", tensorType(plan::F32, {3, 5})}};
  state.tensorBytes = {bytesOf(matrix(3, 5, modelValue))};
  ASSERT_TRUE(writeCheckpoint(dir, state, error)) << error;

  struct Case {
    std::vector<int64_t> shape, start; // the part's, in the padded [4,8]
  };
  for (const Case &c : std::vector<Case>{{{4, 8}, {0, 0}},    // whole
                                         {{2, 4}, {2, 4}},    // straddling the padding
                                         {{1, 8}, {3, 0}}}) { // all padding
    SCOPED_TRACE(::testing::Message() << "part at " << c.start[0] << "," << c.start[1]);
    std::vector<float> part(size_t(c.shape[0] * c.shape[1]), -1);
    std::vector<WantedPart> wanted = {
        {"w", tensorType(plan::F32, c.shape), {{4, 8}, c.start},
         reinterpret_cast<char *>(part.data()), {3, 5}}};
    Resharded read;
    ASSERT_TRUE(readResharded(dir, wanted, read, error)) << error;
    EXPECT_EQ(read.step, 5);
    EXPECT_EQ(part, matrix(c.shape[0], c.shape[1], [&](int64_t r, int64_t col) {
                return paddedValue(c.start[0] + r, c.start[1] + col);
              }));
  }
  // Without the plan saying it pads, a smaller tensor is another model's.
  std::vector<float> whole(32);
  std::vector<WantedPart> unpadded = {
      {"w", tensorType(plan::F32, {4, 8}), {}, reinterpret_cast<char *>(whole.data()), {}}};
  Resharded read;
  EXPECT_FALSE(readResharded(dir, unpadded, read, error));
  EXPECT_TRUE(contains(error, "tensor 'w' is f32[3,5] in the checkpoint but f32[4,8] in this "
                              "plan: a checkpoint of another model"));
}

// A padded plan's checkpoint (two ranks' column halves) resumes into a plan
// that does not pad: cropped, when what it crops away is zero.
TEST(ReshardTest, CropsAPaddedCheckpointWhosePaddingIsZero) {
  std::string dir = makeTempDir(), error;
  auto write = [&](const std::function<float(int64_t, int64_t)> &value) {
    for (int64_t rank = 0; rank < 2; ++rank) {
      CheckpointState state;
      state.step = 9;
      state.mesh = {2};
      state.rank = rank;
      state.tensorTypes = {{"w", tensorType(plan::F32, {4, 4})}};
      state.tensorParts = {{{4, 8}, {0, 4 * rank}}};
      state.tensorBytes = {bytesOf(
          matrix(4, 4, [&](int64_t r, int64_t c) { return value(r, 4 * rank + c); }))};
      ASSERT_TRUE(writeCheckpoint(dir, state, error)) << error;
    }
  };
  // A zero's sign is no value: -0 in the padding is still padding.
  write([](int64_t r, int64_t c) { return r == 3 && c == 0 ? -0.f : paddedValue(r, c); });
  std::vector<float> whole(15, -1);
  std::vector<WantedPart> wanted = {
      {"w", tensorType(plan::F32, {3, 5}), {}, reinterpret_cast<char *>(whole.data()), {}}};
  Resharded read;
  ASSERT_TRUE(readResharded(dir, wanted, read, error)) << error;
  EXPECT_EQ(whole, matrix(3, 5, modelValue));

  write([](int64_t r, int64_t c) { return r == 1 && c == 6 ? 0.5f : paddedValue(r, c); });
  EXPECT_FALSE(readResharded(dir, wanted, read, error));
  EXPECT_TRUE(contains(error, "tensor 'w' is f32[4,8] in the checkpoint but f32[3,5] in this "
                              "plan, and what lies past the plan's is not zero (at [1,6])"));
}
