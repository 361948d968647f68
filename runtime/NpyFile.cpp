//===- NpyFile.cpp - NumPy .npy files -------------------------------------===//
#include "runtime/NpyFile.h"

#include "formats/onnx/TensorProto.h"

#include <charconv>
#include <cstdint>
#include <string_view>
#include <vector>

namespace dtc::runtime {

using formats::onnx::dimsToString;

namespace {

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

} // namespace

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
  const ElementType *element = elementTypeOfNpy(descr);
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

} // namespace dtc::runtime
