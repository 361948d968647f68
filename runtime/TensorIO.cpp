//===- TensorIO.cpp - tensors in and out of files -------------------------===//
//
// Everything here reads untrusted bytes: every size is checked before it is
// used, so a truncated or foreign file is a message, never a crash.
//
//===----------------------------------------------------------------------===//
#include "runtime/TensorIO.h"
#include "plan/DType.h"
#include "plan/PlanLoader.h"

#include "onnx.pb.h"

#include <cerrno>
#include <cmath>
#include <charconv>
#include <cstdint>
#include <cstdio>
#include <cstring>
#include <fcntl.h>
#include <mutex>
#include <string_view>
#include <sys/stat.h>
#include <unistd.h>
#include <unordered_map>
#include <vector>

using ::onnx::TensorProto;

namespace dtc::runtime {

// Element bytes are stored little-endian in every format read here; the host
// order is used as is.
static_assert(__BYTE_ORDER__ == __ORDER_LITTLE_ENDIAN__,
              "TensorIO assumes a little-endian host");

namespace {

/// The TensorProto field that carries a type's values when raw_data is not
/// used.
enum class TypedField { Float, Double, Int32, Int64, Uint64 };

struct ElementType {
  int32_t onnxType;
  plan::DType dtype;
  int64_t bytes;
  const char *npyDescr; // nullptr: NumPy has no such dtype
  TypedField field;
};

constexpr ElementType kElementTypes[] = {
    {TensorProto::FLOAT, plan::F32, 4, "<f4", TypedField::Float},
    {TensorProto::DOUBLE, plan::F64, 8, "<f8", TypedField::Double},
    {TensorProto::FLOAT16, plan::F16, 2, "<f2", TypedField::Int32},
    {TensorProto::BFLOAT16, plan::BF16, 2, nullptr, TypedField::Int32},
    {TensorProto::INT64, plan::I64, 8, "<i8", TypedField::Int64},
    {TensorProto::INT32, plan::I32, 4, "<i4", TypedField::Int32},
    {TensorProto::INT16, plan::I16, 2, "<i2", TypedField::Int32},
    {TensorProto::INT8, plan::I8, 1, "|i1", TypedField::Int32},
    {TensorProto::UINT8, plan::U8, 1, "|u1", TypedField::Int32},
    {TensorProto::UINT16, plan::U16, 2, "<u2", TypedField::Int32},
    {TensorProto::UINT32, plan::U32, 4, "<u4", TypedField::Uint64},
    {TensorProto::UINT64, plan::U64, 8, "<u8", TypedField::Uint64},
    {TensorProto::BOOL, plan::BOOL, 1, "|b1", TypedField::Int32},
};

const ElementType *byOnnxType(int32_t type) {
  for (const ElementType &e : kElementTypes)
    if (e.onnxType == type)
      return &e;
  return nullptr;
}

const ElementType *byDType(plan::DType dtype) {
  for (const ElementType &e : kElementTypes)
    if (e.dtype == dtype)
      return &e;
  return nullptr;
}

/// One-byte types have no byte order, so '<i1', '>i1', '=i1' and '|i1' all
/// name the same dtype.
const ElementType *byNpyDescr(std::string_view descr) {
  for (const ElementType &e : kElementTypes) {
    if (!e.npyDescr)
      continue;
    std::string_view want = e.npyDescr;
    if (descr == want)
      return &e;
    if (e.bytes == 1 && descr.size() == 3 && descr.substr(1) == want.substr(1) &&
        std::strchr("<>=|", descr[0]))
      return &e;
  }
  return nullptr;
}

std::string onnxTypeName(int32_t type) {
  if (TensorProto::DataType_IsValid(type))
    return TensorProto::DataType_Name(TensorProto::DataType(type));
  return "data type " + std::to_string(type);
}

template <typename Dims> std::string dimsToString(const Dims &dims) {
  std::string s = "[";
  for (auto d : dims) {
    if (s.size() > 1)
      s += ", ";
    s += std::to_string(d);
  }
  return s + "]";
}

std::string systemError() { return std::strerror(errno); }

bool endsWith(std::string_view s, std::string_view suffix) {
  return s.size() >= suffix.size() &&
         s.substr(s.size() - suffix.size()) == suffix;
}

enum class FileKind { TensorProto, Npy, Unknown };

FileKind fileKind(const std::string &path) {
  if (endsWith(path, ".pb"))
    return FileKind::TensorProto;
  if (endsWith(path, ".npy"))
    return FileKind::Npy;
  return FileKind::Unknown;
}

std::string unknownKindError(const std::string &path) {
  return path + ": unknown tensor file type; expected a .pb (ONNX TensorProto) "
                "or .npy (NumPy) file";
}

/// Element count of `dims`, or -1 with `error` when a dim is negative or the
/// count overflows.
template <typename Dims>
int64_t countElements(const Dims &dims, const std::string &label,
                      std::string &error) {
  plan::TensorType type;
  for (auto d : dims) {
    if (d < 0) {
      error = label + ": negative dim in " + dimsToString(dims);
      return -1;
    }
    type.add_shape(d);
  }
  int64_t count = elementCount(type);
  if (count < 0)
    error = label + ": dims " + dimsToString(dims) + " are too large";
  return count;
}

} // namespace

bool readWholeFile(const std::string &path, std::string &data,
                   std::string &error) {
  int fd = ::open(path.c_str(), O_RDONLY | O_CLOEXEC);
  if (fd < 0) {
    error = "cannot open " + path + ": " + systemError();
    return false;
  }
  struct stat st;
  if (fstat(fd, &st) != 0 || !S_ISREG(st.st_mode)) {
    error = "cannot read " + path + ": not a regular file";
    ::close(fd);
    return false;
  }
  data.resize(size_t(st.st_size));
  size_t done = 0;
  while (done < data.size()) {
    ssize_t n = ::read(fd, data.data() + done, data.size() - done);
    if (n < 0 && errno == EINTR)
      continue;
    if (n <= 0) {
      error = "cannot read " + path + ": " +
              (n < 0 ? systemError() : "file shrank while reading");
      ::close(fd);
      return false;
    }
    done += size_t(n);
  }
  ::close(fd);
  return true;
}

bool writeFileAtomically(const std::string &path, const std::string &tmp,
                         std::initializer_list<std::string_view> pieces, std::string &error) {
  int fd = ::open(tmp.c_str(), O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0644);
  if (fd < 0) {
    error = "cannot write " + path + ": cannot create " + tmp + ": " + systemError();
    return false;
  }
  auto fail = [&](const std::string &what) {
    error = what + ": " + systemError();
    ::close(fd);
    std::remove(tmp.c_str());
    return false;
  };
  for (std::string_view piece : pieces) {
    size_t done = 0;
    while (done < piece.size()) {
      ssize_t n = ::write(fd, piece.data() + done, piece.size() - done);
      if (n < 0 && errno == EINTR)
        continue;
      if (n <= 0)
        return fail("cannot write " + tmp);
      done += size_t(n);
    }
  }
  if (::fsync(fd) != 0)
    return fail("cannot sync " + tmp);
  if (::close(fd) != 0) {
    error = "cannot write " + tmp + ": " + systemError();
    std::remove(tmp.c_str());
    return false;
  }
  if (std::rename(tmp.c_str(), path.c_str()) != 0) {
    error = "cannot rename " + tmp + " to " + path + ": " + systemError();
    std::remove(tmp.c_str());
    return false;
  }
  return true;
}

namespace {

//===----------------------------------------------------------------------===//
// TensorProto
//===----------------------------------------------------------------------===//

/// The element type and count of `t`, refusing what the runtime cannot hold.
bool describeTensor(const TensorProto &t, const std::string &label,
                    const ElementType *&element, int64_t &count,
                    std::string &error) {
  if (t.data_type() == TensorProto::STRING) {
    error = label + ": string tensors are not supported";
    return false;
  }
  element = byOnnxType(t.data_type());
  if (!element) {
    error = label + ": " + onnxTypeName(t.data_type()) + " is not supported";
    return false;
  }
  if (t.has_segment()) {
    error = label + ": segmented tensors are not supported";
    return false;
  }
  count = countElements(t.dims(), label, error);
  return count >= 0;
}

const char *typedFieldName(TypedField field) {
  switch (field) {
  case TypedField::Float:
    return "float_data";
  case TypedField::Double:
    return "double_data";
  case TypedField::Int32:
    return "int32_data";
  case TypedField::Int64:
    return "int64_data";
  case TypedField::Uint64:
    return "uint64_data";
  }
  return "?";
}

/// Appends the low `width` bytes of each value's bits.
template <typename Values, typename ToBits>
void appendValues(const Values &values, int64_t width, ToBits toBits,
                  std::string &out) {
  size_t at = out.size();
  out.resize(at + size_t(values.size()) * size_t(width));
  for (const auto &v : values) {
    uint64_t bits = toBits(v);
    std::memcpy(&out[at], &bits, size_t(width));
    at += size_t(width);
  }
}

/// The bytes of a tensor whose data is inside the proto: raw_data as is, a
/// typed field converted into `storage`.
bool inlineBytes(const TensorProto &t, const ElementType &element,
                 int64_t count, const std::string &label, std::string &storage,
                 std::string_view &bytes, std::string &error) {
  int64_t need = count * element.bytes;
  if (t.has_raw_data()) {
    if (int64_t(t.raw_data().size()) != need) {
      error = label + ": raw_data holds " + std::to_string(t.raw_data().size()) +
              " bytes but " + onnxTypeName(t.data_type()) + " " +
              dimsToString(t.dims()) + " needs " + std::to_string(need);
      return false;
    }
    bytes = t.raw_data();
    return true;
  }
  int64_t have = 0;
  switch (element.field) {
  case TypedField::Float:
    have = t.float_data_size();
    break;
  case TypedField::Double:
    have = t.double_data_size();
    break;
  case TypedField::Int32:
    have = t.int32_data_size();
    break;
  case TypedField::Int64:
    have = t.int64_data_size();
    break;
  case TypedField::Uint64:
    have = t.uint64_data_size();
    break;
  }
  if (have != count) {
    error = label + ": " + typedFieldName(element.field) + " holds " +
            std::to_string(have) + " values but " +
            onnxTypeName(t.data_type()) + " " + dimsToString(t.dims()) +
            " needs " + std::to_string(count);
    return false;
  }
  storage.clear();
  storage.reserve(size_t(need));
  int64_t width = element.bytes;
  switch (element.field) {
  case TypedField::Float:
    appendValues(t.float_data(), width, [](float v) {
      uint32_t bits;
      std::memcpy(&bits, &v, 4);
      return uint64_t(bits);
    }, storage);
    break;
  case TypedField::Double:
    appendValues(t.double_data(), width, [](double v) {
      uint64_t bits;
      std::memcpy(&bits, &v, 8);
      return bits;
    }, storage);
    break;
  case TypedField::Int32: // also 8/16-bit ints, bool and halves, in the low bits
    appendValues(t.int32_data(), width,
                 [](int32_t v) { return uint64_t(uint32_t(v)); }, storage);
    break;
  case TypedField::Int64:
    appendValues(t.int64_data(), width,
                 [](int64_t v) { return uint64_t(v); }, storage);
    break;
  case TypedField::Uint64:
    appendValues(t.uint64_data(), width, [](uint64_t v) { return v; }, storage);
    break;
  }
  bytes = storage;
  return true;
}

bool readTensorProto(const std::string &path, const std::string &data,
                     HostTensor &tensor, std::string &error) {
  TensorProto t;
  if (!t.ParseFromString(data)) {
    error = path + ": not an ONNX TensorProto (truncated or corrupt)";
    return false;
  }
  std::string label =
      t.name().empty() ? path : path + ": tensor '" + t.name() + "'";
  if (t.data_type() == TensorProto::UNDEFINED) {
    error = label + ": no data type (truncated, or not a TensorProto?)";
    return false;
  }
  const ElementType *element;
  int64_t count;
  if (!describeTensor(t, label, element, count, error))
    return false;
  if (t.data_location() == TensorProto::EXTERNAL) {
    error = label + ": data is in an external file; only tensors with their "
                    "data inside the .pb file can be read";
    return false;
  }
  std::string storage;
  std::string_view bytes;
  if (!inlineBytes(t, *element, count, label, storage, bytes, error))
    return false;
  tensor.name = t.name();
  tensor.type.Clear();
  tensor.type.set_dtype(element->dtype);
  for (int64_t d : t.dims())
    tensor.type.add_shape(d);
  tensor.bytes.assign(bytes.begin(), bytes.end());
  return true;
}

//===----------------------------------------------------------------------===//
// NumPy .npy
//===----------------------------------------------------------------------===//

constexpr std::string_view kNpyMagic = "\x93NUMPY";

/// The header is a Python dict literal, e.g.
/// {'descr': '<f4', 'fortran_order': False, 'shape': (2, 3), }
/// This parses exactly the literals that can appear in it.
class NpyHeaderParser {
public:
  explicit NpyHeaderParser(std::string_view text) : text_(text) {}

  bool parse(std::string &descr, bool &fortranOrder,
             std::vector<int64_t> &shape, std::string &why) {
    bool haveDescr = false, haveOrder = false, haveShape = false;
    if (!consume('{'))
      return fail("expected '{'", why);
    while (!consume('}')) {
      std::string key;
      if (!parseString(key))
        return fail("expected a quoted key", why);
      if (!consume(':'))
        return fail("expected ':' after '" + key + "'", why);
      if (key == "descr") {
        if (!parseString(descr))
          return fail("'descr' must be a dtype string (structured dtypes are "
                      "not supported)",
                      why);
        haveDescr = true;
      } else if (key == "fortran_order") {
        if (!parseBool(fortranOrder))
          return fail("'fortran_order' must be True or False", why);
        haveOrder = true;
      } else if (key == "shape") {
        if (!parseShape(shape))
          return fail("'shape' must be a tuple of non-negative integers", why);
        haveShape = true;
      } else {
        return fail("unexpected key '" + key + "'", why);
      }
      if (!consume(',')) {
        if (!consume('}'))
          return fail("expected ',' or '}'", why);
        break;
      }
    }
    skipSpace();
    if (pos_ != text_.size())
      return fail("unexpected text after the dict", why);
    if (!haveDescr || !haveOrder || !haveShape)
      return fail("it needs the keys 'descr', 'fortran_order' and 'shape'",
                  why);
    return true;
  }

private:
  bool fail(const std::string &what, std::string &why) {
    why = what;
    return false;
  }

  void skipSpace() {
    while (pos_ < text_.size() &&
           (text_[pos_] == ' ' || text_[pos_] == '\t' || text_[pos_] == '\n' ||
            text_[pos_] == '\r'))
      ++pos_;
  }

  bool consume(char c) {
    skipSpace();
    if (pos_ < text_.size() && text_[pos_] == c) {
      ++pos_;
      return true;
    }
    return false;
  }

  bool consumeWord(std::string_view word) {
    skipSpace();
    if (text_.substr(pos_, word.size()) != word)
      return false;
    pos_ += word.size();
    return true;
  }

  bool parseString(std::string &out) {
    skipSpace();
    if (pos_ >= text_.size() || (text_[pos_] != '\'' && text_[pos_] != '"'))
      return false;
    char quote = text_[pos_];
    size_t end = text_.find(quote, pos_ + 1);
    if (end == std::string_view::npos)
      return false;
    std::string_view body = text_.substr(pos_ + 1, end - pos_ - 1);
    if (body.find('\\') != std::string_view::npos)
      return false;
    out.assign(body);
    pos_ = end + 1;
    return true;
  }

  bool parseBool(bool &out) {
    if (consumeWord("True"))
      return out = true, true;
    if (consumeWord("False"))
      return out = false, true;
    return false;
  }

  /// (), (n,), (a, b, ...); Python 2 wrote longs as "3L".
  bool parseShape(std::vector<int64_t> &shape) {
    shape.clear();
    if (!consume('('))
      return false;
    if (consume(')'))
      return true;
    while (true) {
      skipSpace();
      int64_t dim = 0;
      const char *begin = text_.data() + pos_, *end = text_.data() + text_.size();
      if (begin == end || *begin < '0' || *begin > '9')
        return false;
      auto [next, ec] = std::from_chars(begin, end, dim);
      if (ec != std::errc())
        return false;
      pos_ += size_t(next - begin);
      if (pos_ < text_.size() && text_[pos_] == 'L')
        ++pos_;
      shape.push_back(dim);
      bool comma = consume(',');
      if (consume(')'))
        return shape.size() > 1 || comma; // "(3)" is an int, not a tuple
      if (!comma)
        return false;
    }
  }

  std::string_view text_;
  size_t pos_ = 0;
};

bool readNpy(const std::string &path, const std::string &data,
             HostTensor &tensor, std::string &error) {
  std::string_view file = data;
  if (file.size() < 8 || file.substr(0, 6) != kNpyMagic) {
    error = path + ": not a NumPy .npy file (no \\x93NUMPY magic)";
    return false;
  }
  unsigned major = uint8_t(file[6]), minor = uint8_t(file[7]);
  if (major < 1 || major > 3 || minor != 0) {
    error = path + ": .npy format version " + std::to_string(major) + "." +
            std::to_string(minor) + " is not supported (1.0, 2.0, 3.0 are)";
    return false;
  }
  size_t lengthBytes = major == 1 ? 2 : 4;
  if (file.size() < 8 + lengthBytes) {
    error = path + ": truncated .npy header";
    return false;
  }
  uint64_t headerLength = 0;
  for (size_t i = 0; i < lengthBytes; ++i)
    headerLength |= uint64_t(uint8_t(file[8 + i])) << (8 * i);
  size_t dataStart = 8 + lengthBytes + headerLength;
  if (file.size() < dataStart) {
    error = path + ": truncated .npy header (it says " +
            std::to_string(headerLength) + " bytes, the file has " +
            std::to_string(file.size() - 8 - lengthBytes) + ")";
    return false;
  }
  std::string descr, why;
  bool fortranOrder = false;
  std::vector<int64_t> shape;
  NpyHeaderParser parser(file.substr(8 + lengthBytes, headerLength));
  if (!parser.parse(descr, fortranOrder, shape, why)) {
    error = path + ": corrupt .npy header: " + why;
    return false;
  }
  if (fortranOrder) {
    error = path + ": Fortran-order arrays are not supported; save a C-order "
                   "array (np.ascontiguousarray)";
    return false;
  }
  const ElementType *element = byNpyDescr(descr);
  if (!element) {
    if (!descr.empty() && descr[0] == '>')
      error = path + ": big-endian dtype '" + descr +
              "' is not supported; convert with .astype('<" + descr.substr(1) +
              "')";
    else
      error = path + ": dtype '" + descr + "' is not supported";
    return false;
  }
  int64_t count = countElements(shape, path, error);
  if (count < 0)
    return false;
  uint64_t need = uint64_t(count) * uint64_t(element->bytes);
  uint64_t have = file.size() - dataStart;
  if (have != need) {
    error = path + ": shape " + dimsToString(shape) + " of '" + descr +
            "' needs " + std::to_string(need) + " data bytes but the file has " +
            std::to_string(have) + (have < need ? " (truncated)" : "");
    return false;
  }
  tensor.name.clear();
  tensor.type.Clear();
  tensor.type.set_dtype(element->dtype);
  for (int64_t d : shape)
    tensor.type.add_shape(d);
  tensor.bytes.assign(file.begin() + dataStart, file.end());
  return true;
}

/// The header NumPy's np.save writes, byte for byte: the dict, spare room
/// for the first dim to grow, padding so that the data starts at a multiple
/// of 64 bytes.
std::string npyHeader(const char *descr, const plan::TensorType &type) {
  std::string shape = "(";
  for (int i = 0; i < type.shape_size(); ++i)
    shape += (i ? ", " : "") + std::to_string(type.shape(i));
  shape += type.shape_size() == 1 ? ",)" : ")";
  std::string dict = std::string("{'descr': '") + descr +
                     "', 'fortran_order': False, 'shape': " + shape + ", }";
  constexpr size_t kGrowthAxisMaxDigits = 21;
  if (type.shape_size() > 0) {
    size_t digits = std::to_string(type.shape(0)).size();
    if (digits < kGrowthAxisMaxDigits)
      dict.append(kGrowthAxisMaxDigits - digits, ' ');
  }
  for (unsigned major : {1u, 2u}) {
    size_t lengthBytes = major == 1 ? 2 : 4;
    size_t unpadded = 8 + lengthBytes + dict.size() + 1; // + '\n'
    size_t padding = 64 - unpadded % 64;
    size_t headerLength = dict.size() + padding + 1;
    if (major == 1 && headerLength > 0xffff)
      continue;
    std::string header(kNpyMagic);
    header += char(major);
    header += char(0);
    for (size_t i = 0; i < lengthBytes; ++i)
      header += char((headerLength >> (8 * i)) & 0xff);
    header += dict;
    header.append(padding, ' ');
    header += '\n';
    return header;
  }
  return {};
}

/// Checks that `tensor` is writable: a known dtype and as many bytes as its
/// type needs.
bool checkHostTensor(const std::string &path, const HostTensor &tensor,
                     const ElementType *&element, std::string &error) {
  element = byDType(tensor.type.dtype());
  if (!element) {
    error = "cannot write " + path + ": " + std::string(dtypeName(tensor.type.dtype())) +
            " is not a tensor element type";
    return false;
  }
  int64_t count = countElements(tensor.type.shape(), "cannot write " + path, error);
  if (count < 0)
    return false;
  if (int64_t(tensor.bytes.size()) != count * element->bytes) {
    error = "cannot write " + path + ": the tensor holds " +
            std::to_string(tensor.bytes.size()) + " bytes but " +
            std::string(dtypeName(element->dtype)) + " " + dimsToString(tensor.type.shape()) +
            " needs " + std::to_string(count * element->bytes);
    return false;
  }
  return true;
}

} // namespace

bool readTensorFile(const std::string &path, HostTensor &tensor,
                    std::string &error) {
  FileKind kind = fileKind(path);
  if (kind == FileKind::Unknown) {
    error = unknownKindError(path);
    return false;
  }
  std::string data;
  if (!readWholeFile(path, data, error))
    return false;
  return kind == FileKind::TensorProto ? readTensorProto(path, data, tensor, error)
                                       : readNpy(path, data, tensor, error);
}

bool writeTensorFile(const std::string &path, const HostTensor &tensor,
                     std::string &error) {
  FileKind kind = fileKind(path);
  if (kind == FileKind::Unknown) {
    error = unknownKindError(path);
    return false;
  }
  const ElementType *element;
  if (!checkHostTensor(path, tensor, element, error))
    return false;
  std::string_view bytes(tensor.bytes.data(), tensor.bytes.size());
  if (kind == FileKind::Npy) {
    if (!element->npyDescr) {
      error = "cannot write " + path + ": NumPy has no " +
              std::string(dtypeName(element->dtype)) + " dtype; write a .pb file instead";
      return false;
    }
    std::string header = npyHeader(element->npyDescr, tensor.type);
    return writeFileAtomically(path, path + ".tmp." + std::to_string(::getpid()), {header, bytes},
                               error);
  }
  TensorProto t;
  if (!tensor.name.empty())
    t.set_name(tensor.name);
  for (int64_t d : tensor.type.shape())
    t.add_dims(d);
  t.set_data_type(element->onnxType);
  t.set_raw_data(bytes.data(), bytes.size());
  std::string serialized;
  if (!t.SerializeToString(&serialized)) {
    error = "cannot write " + path + ": the tensor is too large for a "
                                    "TensorProto (2 GB); use .npy";
    return false;
  }
  return writeFileAtomically(path, path + ".tmp." + std::to_string(::getpid()), {serialized},
                             error);
}

//===----------------------------------------------------------------------===//
// ParameterReader
//===----------------------------------------------------------------------===//

namespace {

/// Where an initializer's bytes are in its external file.
struct ExternalData {
  std::string location; // relative to the model's folder
  int64_t offset = 0;
  int64_t length = -1; // -1: not given
};

bool parseCount(const std::string &text, int64_t &value) {
  const char *end = text.data() + text.size();
  auto [next, ec] = std::from_chars(text.data(), end, value);
  return ec == std::errc() && next == end && value >= 0;
}

bool externalDataOf(const TensorProto &t, const std::string &label,
                    ExternalData &ref, std::string &error) {
  for (const auto &entry : t.external_data()) {
    if (entry.key() == "location") {
      ref.location = entry.value();
    } else if ((entry.key() == "offset" && !parseCount(entry.value(), ref.offset)) ||
               (entry.key() == "length" && !parseCount(entry.value(), ref.length))) {
      error = label + ": external data " + entry.key() + " '" + entry.value() +
              "' is not a non-negative integer";
      return false;
    }
  }
  if (ref.location.empty()) {
    error = label + ": external data has no location";
    return false;
  }
  return true;
}

/// Calls `run(sourceByteOffset, byteLength)` for each contiguous run of the
/// slice (starts, sizes) of a row-major tensor with `dims`, in row-major
/// order of the slice.
template <typename Run>
bool forEachRun(const std::vector<int64_t> &dims,
                const std::vector<int64_t> &starts,
                const std::vector<int64_t> &sizes, int64_t elementBytes,
                Run run) {
  size_t rank = dims.size();
  // Trailing dims taken whole are contiguous with the last partial one.
  size_t inner = rank;
  while (inner > 0 && starts[inner - 1] == 0 && sizes[inner - 1] == dims[inner - 1])
    --inner;
  // suffix[d]: the element count of dims d.. together (dim d - 1's stride).
  std::vector<int64_t> suffix(rank + 1, 1);
  for (size_t d = rank; d-- > 0;)
    suffix[d] = suffix[d + 1] * dims[d];
  if (inner == 0)
    return run(0, suffix[0] * elementBytes);
  int64_t runBytes = sizes[inner - 1] * suffix[inner] * elementBytes;
  // An odometer over the dims before the run's dim.
  size_t outer = inner - 1;
  std::vector<int64_t> index(starts.begin(), starts.begin() + outer);
  while (true) {
    int64_t offset = starts[outer] * suffix[outer + 1];
    for (size_t d = 0; d < outer; ++d)
      offset += index[d] * suffix[d + 1];
    if (!run(offset * elementBytes, runBytes))
      return false;
    size_t d = outer;
    while (d > 0) {
      --d;
      if (++index[d] < starts[d] + sizes[d])
        break;
      index[d] = starts[d];
      if (d == 0)
        return true;
    }
    if (outer == 0)
      return true;
  }
}

} // namespace

namespace {

/// Calls `copy(offset in the tensor, offset in the dense slice, bytes)` for
/// each contiguous run of the part of a tensor that copySlice describes.
template <typename Copy>
void forEachSliceRun(const std::vector<int64_t> &dims, const std::vector<int64_t> &starts,
                     const std::vector<int64_t> &sizes, int64_t elementBytes, Copy copy) {
  for (int64_t size : sizes)
    if (size == 0)
      return;
  int64_t dense = 0;
  forEachRun(dims, starts, sizes, elementBytes, [&](int64_t offset, int64_t length) {
    copy(offset, dense, size_t(length));
    dense += length;
    return true;
  });
}

} // namespace

void copySlice(const void *tensor, const std::vector<int64_t> &dims,
               const std::vector<int64_t> &starts, const std::vector<int64_t> &sizes,
               int64_t elementBytes, void *out) {
  forEachSliceRun(dims, starts, sizes, elementBytes, [&](int64_t at, int64_t to, size_t n) {
    std::memcpy(static_cast<char *>(out) + to, static_cast<const char *>(tensor) + at, n);
  });
}

void pasteSlice(const void *slice, const std::vector<int64_t> &dims,
                const std::vector<int64_t> &starts, const std::vector<int64_t> &sizes,
                int64_t elementBytes, void *tensor) {
  forEachSliceRun(dims, starts, sizes, elementBytes, [&](int64_t at, int64_t from, size_t n) {
    std::memcpy(static_cast<char *>(tensor) + at, static_cast<const char *>(slice) + from, n);
  });
}

struct ParameterReader::Model {
  std::string path;
  std::string dir; // the model's folder, "" for the current one
  ::onnx::ModelProto proto;
  std::unordered_map<std::string, const TensorProto *> initializers;

  struct OpenFile {
    int fd = -1;
    int64_t size = 0;
  };
  std::mutex filesMutex; // read() may run on several threads
  std::unordered_map<std::string, OpenFile> files;

  ~Model() {
    for (auto &entry : files)
      ::close(entry.second.fd);
  }

  bool openFile(const std::string &filePath, OpenFile &file, std::string &error) {
    std::lock_guard<std::mutex> lock(filesMutex);
    auto it = files.find(filePath);
    if (it != files.end()) {
      file = it->second;
      return true;
    }
    int fd = ::open(filePath.c_str(), O_RDONLY | O_CLOEXEC);
    if (fd < 0) {
      error = "cannot open " + filePath + ": " + systemError();
      return false;
    }
    struct stat st;
    if (fstat(fd, &st) != 0 || !S_ISREG(st.st_mode)) {
      error = "cannot read " + filePath + ": not a regular file";
      ::close(fd);
      return false;
    }
    file = {fd, int64_t(st.st_size)};
    files.emplace(filePath, file);
    return true;
  }
};

ParameterReader::ParameterReader() = default;
ParameterReader::~ParameterReader() = default;

bool ParameterReader::open(const std::string &modelPath, std::string &error) {
  auto model = std::make_unique<Model>();
  model->path = modelPath;
  size_t slash = modelPath.find_last_of('/');
  if (slash != std::string::npos)
    model->dir = modelPath.substr(0, slash == 0 ? 1 : slash);
  std::string data;
  if (!readWholeFile(modelPath, data, error))
    return false;
  if (!model->proto.ParseFromString(data)) {
    error = modelPath + ": not an ONNX model (cannot parse a ModelProto)";
    if (data.size() > (size_t(1) << 31))
      error += "; models over 2 GB must keep their initializers in external "
               "data files";
    return false;
  }
  if (!model->proto.has_graph()) {
    error = modelPath + ": not an ONNX model (it has no graph)";
    return false;
  }
  for (const TensorProto &t : model->proto.graph().initializer()) {
    if (!model->initializers.emplace(t.name(), &t).second) {
      error = modelPath + ": two initializers are named '" + t.name() + "'";
      return false;
    }
  }
  model_ = std::move(model);
  return true;
}

bool ParameterReader::dims(const std::string &initializer, std::vector<int64_t> &dims,
                           std::string &error) const {
  if (!model_) {
    error = "cannot read initializer '" + initializer + "': no model is open";
    return false;
  }
  auto found = model_->initializers.find(initializer);
  if (found == model_->initializers.end()) {
    error = model_->path + ": no initializer named '" + initializer +
            "' (the plan needs it; was it compiled from this model?)";
    return false;
  }
  dims.assign(found->second->dims().begin(), found->second->dims().end());
  return true;
}

bool ParameterReader::read(const plan::ParameterSource &source,
                           const plan::TensorType &type, void *out,
                           std::string &error) {
  if (!model_) {
    error = "cannot read initializer '" + source.initializer() +
            "': no model is open";
    return false;
  }
  const Model &model = *model_;
  auto found = model.initializers.find(source.initializer());
  if (found == model.initializers.end()) {
    error = model.path + ": no initializer named '" + source.initializer() +
            "' (the plan needs it; was it compiled from this model?)";
    return false;
  }
  const TensorProto &t = *found->second;
  std::string label = model.path + ": initializer '" + t.name() + "'";
  const ElementType *element;
  int64_t count;
  if (!describeTensor(t, label, element, count, error))
    return false;
  if (element->dtype != type.dtype()) {
    error = label + " is " + onnxTypeName(t.data_type()) + " but the plan reads it as " +
            dtypeName(type.dtype());
    return false;
  }

  // The slice, checked against the initializer's dims.
  std::vector<int64_t> dims(t.dims().begin(), t.dims().end()), starts, sizes;
  if (source.slice_size() == 0) {
    starts.assign(dims.size(), 0);
    sizes = dims;
  } else {
    if (size_t(source.slice_size()) != dims.size()) {
      error = label + " has rank " + std::to_string(dims.size()) +
              " but the plan slices " + std::to_string(source.slice_size()) +
              " dims";
      return false;
    }
    for (size_t d = 0; d < dims.size(); ++d) {
      int64_t start = source.slice(int(d)).start(), size = source.slice(int(d)).size();
      if (start < 0 || size < 0 || start > dims[d] || size > dims[d] - start) {
        error = label + " " + dimsToString(dims) + ": slice [" +
                std::to_string(start) + ", " + std::to_string(start + size) +
                ") of dim " + std::to_string(d) + " is out of bounds";
        return false;
      }
      starts.push_back(start);
      sizes.push_back(size);
    }
  }
  int64_t sliceCount = 1;
  for (int64_t s : sizes)
    sliceCount *= s; // bounded by the initializer's checked count
  int64_t wantCount = elementCount(type);
  if (sliceCount != wantCount) {
    error = label + ": the slice " + dimsToString(sizes) + " has " +
            std::to_string(sliceCount) + " elements but the plan's buffer " +
            dimsToString(type.shape()) + " holds " + std::to_string(wantCount);
    return false;
  }

  bool external = t.data_location() == TensorProto::EXTERNAL;
  ExternalData ref;
  if (external && !externalDataOf(t, label, ref, error))
    return false;
  if (!source.file().empty() &&
      (!external || source.file() != ref.location || source.offset() != ref.offset)) {
    error = label + ": the plan reads it from " + source.file() + " at offset " +
            std::to_string(source.offset()) + " but the model has it " +
            (external ? "in " + ref.location + " at offset " +
                            std::to_string(ref.offset)
                      : std::string("inside the model")) +
            "; recompile the plan for this model";
    return false;
  }
  if (sliceCount == 0)
    return true;

  char *dst = static_cast<char *>(out);
  int64_t tensorBytes = count * element->bytes;
  if (!external) {
    std::string storage;
    std::string_view bytes;
    if (!inlineBytes(t, *element, count, label, storage, bytes, error))
      return false;
    return forEachRun(dims, starts, sizes, element->bytes,
                      [&](int64_t offset, int64_t length) {
                        std::memcpy(dst, bytes.data() + offset, size_t(length));
                        dst += length;
                        return true;
                      });
  }

  if (ref.length >= 0 && ref.length != tensorBytes) {
    error = label + ": external data length " + std::to_string(ref.length) +
            " does not match " + onnxTypeName(t.data_type()) + " " +
            dimsToString(dims) + " (" + std::to_string(tensorBytes) + " bytes)";
    return false;
  }
  std::string filePath = model.dir.empty() ? ref.location
                         : model.dir.back() == '/' ? model.dir + ref.location
                                                   : model.dir + "/" + ref.location;
  Model::OpenFile file;
  if (!model_->openFile(filePath, file, error)) {
    error = label + ": " + error;
    return false;
  }
  if (file.size < ref.offset || file.size - ref.offset < tensorBytes) {
    error = label + ": external data file " + filePath + " has " +
            std::to_string(file.size) + " bytes, too short for " +
            std::to_string(tensorBytes) + " bytes at offset " +
            std::to_string(ref.offset);
    return false;
  }
  return forEachRun(dims, starts, sizes, element->bytes,
                    [&](int64_t offset, int64_t length) {
                      int64_t at = ref.offset + offset;
                      while (length > 0) {
                        ssize_t n = ::pread(file.fd, dst, size_t(length), off_t(at));
                        if (n < 0 && errno == EINTR)
                          continue;
                        if (n <= 0) {
                          error = label + ": cannot read " + filePath + ": " +
                                  (n < 0 ? systemError() : "file shrank");
                          return false;
                        }
                        dst += n;
                        at += n;
                        length -= n;
                      }
                      return true;
                    });
}

namespace {

uint64_t splitMix64(uint64_t x) {
  x += 0x9e3779b97f4a7c15ULL;
  x = (x ^ (x >> 30)) * 0xbf58476d1ce4e5b9ULL;
  x = (x ^ (x >> 27)) * 0x94d049bb133111ebULL;
  return x ^ (x >> 31);
}

/// A standard normal from element `index` alone (Box-Muller on two hashed
/// uniforms), so a shard draws the same values the whole tensor would.
float seededNormal(uint64_t seed, uint64_t index) {
  uint64_t bits = splitMix64(seed ^ splitMix64(index));
  double u1 = (double((bits >> 11) | 1) ) * 0x1.0p-53; // (0, 1)
  double u2 = double(splitMix64(bits) >> 11) * 0x1.0p-53;
  return float(std::sqrt(-2.0 * std::log(u1)) * std::cos(6.283185307179586 * u2));
}

} // namespace

void fillSeeded(const plan::ParameterSource &source, const plan::TensorType &type, void *out) {
  const plan::SeededInit &init = source.seeded();
  float *values = static_cast<float *>(out);
  int rank = type.shape_size();
  int64_t count = 1;
  for (int64_t d : type.shape())
    count *= d;
  // Walk the slice's elements in order, keeping the whole tensor's flat index.
  std::vector<int64_t> index(size_t(rank), 0), strides(size_t(rank), 1);
  for (int d = rank - 2; d >= 0; --d)
    strides[size_t(d)] = strides[size_t(d) + 1] * init.shape(d + 1);
  auto start = [&](int d) { return source.slice_size() ? source.slice(d).start() : 0; };
  for (int64_t i = 0; i < count; ++i) {
    uint64_t flat = 0;
    for (int d = 0; d < rank; ++d)
      flat += uint64_t((start(d) + index[size_t(d)]) * strides[size_t(d)]);
    values[i] = init.std() == 0
                    ? float(init.mean())
                    : float(init.mean() + init.std() * seededNormal(init.seed(), flat));
    for (int d = rank - 1; d >= 0 && ++index[size_t(d)] == type.shape(d); --d)
      index[size_t(d)] = 0;
  }
}

} // namespace dtc::runtime
