//===- DataSet.cpp - training batches from files --------------------------===//
//
// .npy data sets are read whole at open, converted to the fields' dtypes;
// a token file, which may be much larger than the model, is memory-mapped and
// its windows converted as batches are filled.
//
//===----------------------------------------------------------------------===//
#include "runtime/train/DataSet.h"
#include "runtime/Executor.h"
#include "plan/PlanLoader.h"
#include "runtime/TensorIO.h"
#include "plan/DType.h"

#include <algorithm>
#include <cerrno>
#include <cstring>
#include <fcntl.h>
#include <limits>
#include <numeric>
#include <random>
#include <sys/mman.h>
#include <sys/stat.h>
#include <type_traits>
#include <unistd.h>

namespace dtc::runtime::train {

static_assert(__BYTE_ORDER__ == __ORDER_LITTLE_ENDIAN__,
              "data files are little-endian and read in the host's order");

namespace {

bool isInteger(plan::DType dtype) {
  switch (dtype) {
  case plan::I64:
  case plan::I32:
  case plan::I16:
  case plan::I8:
  case plan::U64:
  case plan::U32:
  case plan::U16:
  case plan::U8: return true;
  default: return false;
  }
}

template <typename T> int64_t loadAs(const char *p) {
  T value;
  std::memcpy(&value, p, sizeof value);
  return int64_t(value);
}

/// The integer element of `dtype` at `p`; false for a u64 beyond int64.
bool loadInteger(const char *p, plan::DType dtype, int64_t &value) {
  switch (dtype) {
  case plan::I64: value = loadAs<int64_t>(p); return true;
  case plan::I32: value = loadAs<int32_t>(p); return true;
  case plan::I16: value = loadAs<int16_t>(p); return true;
  case plan::I8: value = loadAs<int8_t>(p); return true;
  case plan::U32: value = loadAs<uint32_t>(p); return true;
  case plan::U16: value = loadAs<uint16_t>(p); return true;
  case plan::U8: value = loadAs<uint8_t>(p); return true;
  case plan::U64: {
    uint64_t u;
    std::memcpy(&u, p, 8);
    value = int64_t(u);
    return u <= uint64_t(std::numeric_limits<int64_t>::max());
  }
  default: return false;
  }
}

template <typename T> bool storeAs(int64_t value, char *p) {
  using Limits = std::numeric_limits<T>;
  bool fits = std::is_signed_v<T>
                  ? value >= int64_t(Limits::min()) && value <= int64_t(Limits::max())
                  : value >= 0 && uint64_t(value) <= uint64_t(Limits::max());
  T t = T(value);
  std::memcpy(p, &t, sizeof t);
  return fits;
}

/// Writes `value` as `dtype` at `p`; false when it does not fit.
bool storeInteger(int64_t value, plan::DType dtype, char *p) {
  switch (dtype) {
  case plan::I64: return storeAs<int64_t>(value, p);
  case plan::I32: return storeAs<int32_t>(value, p);
  case plan::I16: return storeAs<int16_t>(value, p);
  case plan::I8: return storeAs<int8_t>(value, p);
  case plan::U64: return storeAs<uint64_t>(value, p);
  case plan::U32: return storeAs<uint32_t>(value, p);
  case plan::U16: return storeAs<uint16_t>(value, p);
  case plan::U8: return storeAs<uint8_t>(value, p);
  default: return false;
  }
}

/// Whether a file of `file` dtype can feed a field of `field` dtype.
bool convertible(plan::DType file, plan::DType field) {
  return file == field || (isInteger(file) && isInteger(field)) ||
         (file == plan::F64 && field == plan::F32);
}

/// "f32[N,64]": the field's type with any sample count, for messages.
std::string samplesType(const plan::TensorType &type) {
  std::string s = std::string(dtypeName(type.dtype())) + "[N";
  for (int i = 1; i < type.shape_size(); ++i)
    s += "," + std::to_string(type.shape(i));
  return s + "]";
}

/// `tensor`'s elements in dtype `to`, into `out`; false with `error` when an
/// integer does not fit (naming its sample: `sampleElements` per sample).
bool convertElements(const HostTensor &tensor, plan::DType to, int64_t sampleElements,
                     const std::string &path, std::vector<char> &out, std::string &error) {
  plan::DType from = tensor.type.dtype();
  int64_t fromBytes = dtypeBytes(from), toBytes = dtypeBytes(to);
  int64_t count = int64_t(tensor.bytes.size()) / fromBytes;
  out.resize(size_t(count * toBytes));
  const char *src = tensor.bytes.data();
  char *dst = out.data();
  if (from == plan::F64) { // to f32: the one float conversion there is
    for (int64_t i = 0; i < count; ++i) {
      double d;
      std::memcpy(&d, src + i * 8, 8);
      float f = float(d);
      std::memcpy(dst + i * 4, &f, 4);
    }
    return true;
  }
  for (int64_t i = 0; i < count; ++i) {
    int64_t value = 0;
    bool loaded = loadInteger(src + i * fromBytes, from, value);
    if (!loaded || !storeInteger(value, to, dst + i * toBytes)) {
      std::string shown = loaded ? std::to_string(value) : std::to_string(uint64_t(value));
      error = path + ": sample " + std::to_string(i / std::max<int64_t>(sampleElements, 1)) +
              " has value " + shown + ", which does not fit the field's " + dtypeName(to);
      return false;
    }
  }
  return true;
}

/// Bounded integers in [0, n) from `gen` by rejection: the same on every
/// platform, unlike std::uniform_int_distribution.
uint64_t uniformBelow(std::mt19937_64 &gen, uint64_t n) {
  // Draws below `threshold` (2^64 mod n) would make small results likelier.
  uint64_t threshold = (0 - n) % n;
  for (;;) {
    uint64_t r = gen();
    if (r >= threshold)
      return r % n;
  }
}

std::string systemError() { return std::strerror(errno); }

} // namespace

/// A read-only mapping of a token file.
struct DataSet::TokenFile {
  std::string path;
  const unsigned char *data = nullptr;
  size_t size = 0;
  int tokenBytes = 2;
  int64_t seq = 0;

  ~TokenFile() {
    if (data)
      ::munmap(const_cast<unsigned char *>(data), size);
  }

  uint32_t token(int64_t index) const {
    const unsigned char *p = data + index * tokenBytes;
    if (tokenBytes == 2)
      return uint32_t(p[0]) | uint32_t(p[1]) << 8;
    return uint32_t(p[0]) | uint32_t(p[1]) << 8 | uint32_t(p[2]) << 16 | uint32_t(p[3]) << 24;
  }
};

DataSet::~DataSet() = default;

bool DataSet::setFields(const std::vector<FieldSpec> &fields, const std::string &label,
                        std::string &error) {
  if (fields.empty()) {
    error = label + ": a data set needs at least one field";
    return false;
  }
  for (const FieldSpec &spec : fields) {
    const plan::TensorType &type = spec.type;
    std::string what = label + ": field '" + spec.name + "'";
    int64_t count = elementCount(type);
    if (dtypeBytes(type.dtype()) == 0 || count < 0) {
      error = what + " has no valid type (" + typeToString(type) + ")";
      return false;
    }
    if (type.shape_size() == 0 || type.shape(0) <= 0) {
      error = what + " (" + typeToString(type) + ") has no batch dim";
      return false;
    }
    if (!fields_.empty() && type.shape(0) != batch_) {
      error = what + " has batch " + std::to_string(type.shape(0)) + " but field '" +
              fields_[0].spec.name + "' has " + std::to_string(batch_);
      return false;
    }
    batch_ = type.shape(0);
    Field field;
    field.spec = spec;
    field.sampleBytes = count / batch_ * dtypeBytes(type.dtype());
    fields_.push_back(std::move(field));
  }
  return true;
}

std::unique_ptr<DataSet> DataSet::openNpyDir(const std::string &dir,
                                             const std::vector<FieldSpec> &fields,
                                             std::string &error) {
  std::unique_ptr<DataSet> set(new DataSet);
  if (!set->setFields(fields, dir, error))
    return nullptr;
  for (size_t f = 0; f < set->fields_.size(); ++f) {
    Field &field = set->fields_[f];
    const plan::TensorType &want = field.spec.type;
    field.source = dir + "/" + field.spec.name + ".npy";
    HostTensor tensor;
    if (!readTensorFile(field.source, tensor, error))
      return nullptr;
    const plan::TensorType &got = tensor.type;
    bool shapeMatches = got.shape_size() == want.shape_size();
    for (int d = 1; shapeMatches && d < want.shape_size(); ++d)
      shapeMatches = got.shape(d) == want.shape(d);
    if (!shapeMatches || !convertible(got.dtype(), want.dtype())) {
      error = field.source + ": expected " + samplesType(want) + " for field '" +
              field.spec.name + "' (N samples), got " + typeToString(got);
      return nullptr;
    }
    int64_t samples = got.shape(0);
    if (f > 0 && samples != set->samples_) {
      error = field.source + " has " + std::to_string(samples) + " samples but " +
              set->fields_[0].source + " has " + std::to_string(set->samples_) +
              "; every file needs the same sample count";
      return nullptr;
    }
    set->samples_ = samples;
    if (got.dtype() == want.dtype()) {
      field.data = std::move(tensor.bytes);
    } else {
      int64_t sampleElements = field.sampleBytes / dtypeBytes(want.dtype());
      if (!convertElements(tensor, want.dtype(), sampleElements, field.source, field.data,
                           error))
        return nullptr;
    }
  }
  if (set->samples_ < set->batch_) {
    error = dir + ": data set has " + std::to_string(set->samples_) +
            " samples, fewer than one batch of " + std::to_string(set->batch_);
    return nullptr;
  }
  return set;
}

std::unique_ptr<DataSet> DataSet::openTokens(const std::string &path, int tokenBytes,
                                             const std::vector<FieldSpec> &fields,
                                             std::string &error) {
  if (tokenBytes != 2 && tokenBytes != 4) {
    error = path + ": token size " + std::to_string(tokenBytes) +
            " bytes is not supported (2 for uint16, 4 for uint32)";
    return nullptr;
  }
  if (fields.size() != 2) {
    error = path + ": a token data set has two fields (ids, labels), given " +
            std::to_string(fields.size());
    return nullptr;
  }
  std::unique_ptr<DataSet> set(new DataSet);
  if (!set->setFields(fields, path, error))
    return nullptr;
  for (const FieldSpec &spec : fields) {
    const plan::TensorType &type = spec.type;
    bool integer = type.dtype() == plan::I64 || type.dtype() == plan::I32;
    if (!integer || type.shape_size() != 2 || type.shape(1) < 1 ||
        type.shape(1) != fields[0].type.shape(1)) {
      error = path + ": field '" + spec.name + "' is " + typeToString(type) +
              "; token fields are i64 or i32 [batch, seq], both of the same seq";
      return nullptr;
    }
  }
  for (Field &field : set->fields_)
    field.source = path;

  auto tokens = std::make_unique<TokenFile>();
  tokens->path = path;
  tokens->tokenBytes = tokenBytes;
  tokens->seq = fields[0].type.shape(1);
  int fd = ::open(path.c_str(), O_RDONLY | O_CLOEXEC);
  if (fd < 0) {
    error = "cannot open " + path + ": " + systemError();
    return nullptr;
  }
  struct stat st;
  if (::fstat(fd, &st) != 0 || !S_ISREG(st.st_mode)) {
    error = "cannot read " + path + ": not a regular file";
    ::close(fd);
    return nullptr;
  }
  tokens->size = size_t(st.st_size);
  if (tokens->size % size_t(tokenBytes) != 0) {
    error = path + ": " + std::to_string(tokens->size) + " bytes is not a multiple of the " +
            std::to_string(tokenBytes) + "-byte token size";
    ::close(fd);
    return nullptr;
  }
  int64_t count = int64_t(tokens->size) / tokenBytes;
  set->samples_ = count / (tokens->seq + 1);
  if (set->samples_ < set->batch_) {
    error = path + ": data set has " + std::to_string(set->samples_) +
            " samples (windows of " + std::to_string(tokens->seq + 1) + " tokens in " +
            std::to_string(count) + "), fewer than one batch of " +
            std::to_string(set->batch_);
    ::close(fd);
    return nullptr;
  }
  // Truncating the file while it is mapped would fault on the next batch;
  // token files are written once, before training.
  void *map = ::mmap(nullptr, tokens->size, PROT_READ, MAP_PRIVATE, fd, 0);
  ::close(fd);
  if (map == MAP_FAILED) {
    error = "cannot map " + path + ": " + systemError();
    return nullptr;
  }
  tokens->data = static_cast<const unsigned char *>(map);
  set->tokens_ = std::move(tokens);
  return set;
}

bool DataSet::copySample(size_t f, int64_t sample, char *out, std::string &error) const {
  const Field &field = fields_[f];
  if (!tokens_) {
    std::memcpy(out, field.data.data() + sample * field.sampleBytes,
                size_t(field.sampleBytes));
    return true;
  }
  // Window `sample`: ids from its first token, labels from its second.
  plan::DType dtype = field.spec.type.dtype();
  int64_t width = dtypeBytes(dtype);
  int64_t first = sample * (tokens_->seq + 1) + int64_t(f);
  for (int64_t t = 0; t < tokens_->seq; ++t) {
    uint32_t token = tokens_->token(first + t);
    if (!storeInteger(token, dtype, out + t * width)) {
      error = field.source + ": token " + std::to_string(token) + " at " +
              std::to_string(first + t) + " does not fit the field's " + dtypeName(dtype);
      return false;
    }
  }
  return true;
}

bool DataSet::fillBatch(int64_t step, void *const *outputs, std::string &error,
                        const std::vector<std::pair<int64_t, int64_t>> *rows) {
  if (step < 0) {
    error = "batch " + std::to_string(step) + " requested; steps count from 0";
    return false;
  }
  if (!usageError_.empty()) {
    error = usageError_;
    return false;
  }
  int64_t perEpoch = batchesPerEpoch();
  int64_t epoch = step / perEpoch;
  int64_t first = step % perEpoch * batch_;
  if (shuffle_ && orderEpoch_ != epoch) {
    order_ = permutation(samples_, seed_, epoch);
    orderEpoch_ = epoch;
  }
  for (size_t f = 0; f < fields_.size(); ++f) {
    const Field &field = fields_[f];
    plan::DType dtype = field.spec.type.dtype();
    int64_t width = dtypeBytes(dtype);
    char *out = static_cast<char *>(outputs[f]);
    int64_t begin = rows ? (*rows)[f].first : 0;
    int64_t end = rows ? begin + (*rows)[f].second : batch_;
    if (begin < 0 || end > batch_ || begin > end) {
      error = "rows [" + std::to_string(begin) + ", " + std::to_string(end) +
              ") of a batch of " + std::to_string(batch_) + " requested";
      return false;
    }
    for (int64_t i = begin; i < end; ++i, out += field.sampleBytes) {
      int64_t sample = shuffle_ ? order_[size_t(first + i)] : first + i;
      if (!copySample(f, sample, out, error))
        return false;
      if (!field.labelRange)
        continue;
      const LabelRange &range = *field.labelRange;
      for (int64_t at = 0; at < field.sampleBytes; at += width) {
        int64_t label = 0;
        bool loaded = loadInteger(out + at, dtype, label);
        if (loaded && ((label >= 0 && label < range.classes) || label == range.ignoreIndex))
          continue;
        error = field.source + ": sample " + std::to_string(sample) + " has label " +
                (loaded ? std::to_string(label) : std::to_string(uint64_t(label))) +
                ", outside [0, " + std::to_string(range.classes) + ")";
        // A negative label is an ignore value (Hugging Face's is -100) the
        // plan was not compiled to leave out.
        if (loaded && label < 0)
          error += range.ignoreIndex
                       ? " and not the ignored label " + std::to_string(*range.ignoreIndex)
                       : "; to leave such labels out of the loss (Hugging Face marks padding "
                         "with -100), compile with --ignore-index " + std::to_string(label);
        return false;
      }
    }
  }
  return true;
}

void DataSet::setShuffle(bool shuffle, uint64_t seed) {
  shuffle_ = shuffle;
  seed_ = seed;
  orderEpoch_ = -1;
  order_.clear();
}

void DataSet::setLabelRange(size_t field, int64_t classes,
                            std::optional<int64_t> ignoreIndex) {
  // A caller's mistake, not the data's: kept for fillBatch to report.
  if (field >= fields_.size()) {
    usageError_ = "label range set for field " + std::to_string(field) +
                  " of a data set with " + std::to_string(fields_.size()) + " fields";
    return;
  }
  if (!isInteger(fields_[field].spec.type.dtype())) {
    usageError_ = "label range set for field '" + fields_[field].spec.name + "' of type " +
                  typeToString(fields_[field].spec.type) + "; labels are integers";
    return;
  }
  fields_[field].labelRange = LabelRange{classes, ignoreIndex};
}

std::vector<int64_t> DataSet::permutation(int64_t samples, uint64_t seed, int64_t epoch) {
  std::vector<int64_t> order(size_t(std::max<int64_t>(samples, 0)));
  std::iota(order.begin(), order.end(), int64_t(0));
  std::mt19937_64 gen(seed ^ (uint64_t(epoch) * 0x9E3779B97F4A7C15ull));
  for (int64_t i = samples - 1; i > 0; --i)
    std::swap(order[size_t(i)], order[uniformBelow(gen, uint64_t(i) + 1)]);
  return order;
}

} // namespace dtc::runtime::train
