//===- TensorIOTest.cpp - .pb/.npy files and parameter reading ------------===//
#include "runtime/TensorIO.h"
#include "runtime/ParameterReader.h"
#include "runtime/SeededParameters.h"
#include "runtime/TensorSlices.h"

#include "onnx.pb.h"
#include "tests/unit/SpmdPlanBuilder.h"
#include "tests/unit/TestFiles.h"

#include <gtest/gtest.h>

#include <cmath>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <dirent.h>
#include <fstream>
#include <sstream>
#include <vector>

using namespace dtc;
using namespace dtc::runtime;
using ::onnx::TensorProto;

namespace {

std::string makeTempDir() { return testsupport::makeTempDir("tensorio"); }

using testsupport::readBytes;
using testsupport::writeBytes;

int64_t bytesOf(plan::DType dtype) {
  switch (dtype) {
  case plan::F64:
  case plan::I64:
  case plan::U64:
    return 8;
  case plan::F32:
  case plan::I32:
  case plan::U32:
    return 4;
  case plan::F16:
  case plan::BF16:
  case plan::I16:
  case plan::U16:
    return 2;
  default:
    return 1;
  }
}

/// A tensor of `dtype` and `shape` with distinct byte patterns (bools 0/1).
HostTensor patternTensor(plan::DType dtype, std::vector<int64_t> shape,
                         std::string name = "t") {
  HostTensor t;
  t.name = std::move(name);
  t.type.set_dtype(dtype);
  int64_t count = 1;
  for (int64_t d : shape) {
    t.type.add_shape(d);
    count *= d;
  }
  t.bytes.resize(size_t(count * bytesOf(dtype)));
  for (size_t i = 0; i < t.bytes.size(); ++i)
    t.bytes[i] = dtype == plan::BOOL ? char(i % 3 == 0) : char(i * 37 + 11);
  return t;
}

template <typename T> HostTensor valuesTensor(plan::DType dtype,
                                              std::vector<int64_t> shape,
                                              const std::vector<T> &values) {
  HostTensor t;
  t.type.set_dtype(dtype);
  for (int64_t d : shape)
    t.type.add_shape(d);
  t.bytes.resize(values.size() * sizeof(T));
  if (!values.empty())
    std::memcpy(t.bytes.data(), values.data(), t.bytes.size());
  return t;
}

void expectSameTensor(const HostTensor &a, const HostTensor &b) {
  EXPECT_EQ(a.type.dtype(), b.type.dtype());
  EXPECT_EQ(std::vector<int64_t>(a.type.shape().begin(), a.type.shape().end()),
            std::vector<int64_t>(b.type.shape().begin(), b.type.shape().end()));
  EXPECT_EQ(a.bytes, b.bytes);
}

/// An .npy header as NumPy writes it: magic, version, length, the dict
/// padded with spaces and a newline to a multiple of 64 bytes.
std::string npyFile(const std::string &dict, const std::string &data,
                    int major = 1) {
  size_t lengthBytes = major == 1 ? 2 : 4;
  size_t padding = 64 - (8 + lengthBytes + dict.size() + 1) % 64;
  size_t headerLength = dict.size() + padding + 1;
  std::string file = std::string("\x93NUMPY", 6) + char(major) + char(0);
  for (size_t i = 0; i < lengthBytes; ++i)
    file += char((headerLength >> (8 * i)) & 0xff);
  return file + dict + std::string(padding, ' ') + "\n" + data;
}

bool readFails(const std::string &path, const std::string &mentions) {
  HostTensor t;
  std::string error;
  bool ok = readTensorFile(path, t, error);
  EXPECT_FALSE(ok) << path;
  EXPECT_NE(error.find(mentions), std::string::npos)
      << "error '" << error << "' does not mention '" << mentions << "'";
  return !ok;
}

const plan::DType kAllDTypes[] = {plan::F32, plan::F64, plan::F16, plan::BF16,
                                  plan::I64, plan::I32, plan::I16, plan::I8,
                                  plan::U8,  plan::U16, plan::U32, plan::U64,
                                  plan::BOOL};
const std::vector<int64_t> kShapes[] = {{}, {5}, {2, 3, 4}, {0}, {3, 0, 2}};

TEST(TensorIOTest, RoundTripsEveryDTypeAndShape) {
  std::string dir = makeTempDir();
  for (plan::DType dtype : kAllDTypes) {
    for (const auto &shape : kShapes) {
      for (const char *ext : {".pb", ".npy"}) {
        if (dtype == plan::BF16 && std::string(ext) == ".npy")
          continue;
        SCOPED_TRACE(plan::DType_Name(dtype) + " rank " +
                     std::to_string(shape.size()) + ext);
        HostTensor in = patternTensor(dtype, shape, "input_0");
        std::string path = dir + "/t" + ext, error;
        ASSERT_TRUE(writeTensorFile(path, in, error)) << error;
        HostTensor back;
        ASSERT_TRUE(readTensorFile(path, back, error)) << error;
        expectSameTensor(in, back);
        if (std::string(ext) == ".pb")
          EXPECT_EQ(back.name, "input_0");
      }
    }
  }
}

TEST(TensorIOTest, WriteIsAtomicAndLeavesNoTemporary) {
  std::string dir = makeTempDir(), path = dir + "/out.npy", error;
  ASSERT_TRUE(writeTensorFile(path, patternTensor(plan::F32, {100}), error));
  // Overwriting replaces the file whole.
  HostTensor small = patternTensor(plan::I8, {2});
  ASSERT_TRUE(writeTensorFile(path, small, error)) << error;
  HostTensor back;
  ASSERT_TRUE(readTensorFile(path, back, error)) << error;
  expectSameTensor(small, back);
  DIR *d = opendir(dir.c_str());
  int entries = 0;
  while (dirent *e = readdir(d))
    if (e->d_name[0] != '.')
      ++entries;
  closedir(d);
  EXPECT_EQ(entries, 1);
}

TEST(TensorIOTest, WriteErrors) {
  std::string dir = makeTempDir(), error;
  EXPECT_FALSE(writeTensorFile(dir + "/x.txt", patternTensor(plan::F32, {2}), error));
  EXPECT_NE(error.find("x.txt"), std::string::npos);
  EXPECT_NE(error.find(".pb"), std::string::npos);
  EXPECT_NE(error.find(".npy"), std::string::npos);

  EXPECT_FALSE(writeTensorFile(dir + "/b.npy", patternTensor(plan::BF16, {2}), error));
  EXPECT_NE(error.find("bf16"), std::string::npos) << error;

  HostTensor wrongSize = patternTensor(plan::F32, {2, 3});
  wrongSize.bytes.pop_back();
  EXPECT_FALSE(writeTensorFile(dir + "/w.pb", wrongSize, error));
  EXPECT_NE(error.find("23 bytes"), std::string::npos) << error;

  EXPECT_FALSE(writeTensorFile(dir + "/no/such/dir/x.pb",
                               patternTensor(plan::F32, {2}), error));
  EXPECT_NE(error.find("no/such/dir/x.pb"), std::string::npos) << error;
}

TEST(TensorIOTest, ReadsTypedTensorProtoFields) {
  std::string dir = makeTempDir(), error;
  auto check = [&](const TensorProto &t, const HostTensor &want) {
    std::string path = dir + "/typed.pb";
    writeBytes(path, t.SerializeAsString());
    HostTensor back;
    ASSERT_TRUE(readTensorFile(path, back, error)) << error;
    expectSameTensor(want, back);
    EXPECT_EQ(back.name, t.name());
  };

  TensorProto f;
  f.set_name("x");
  f.set_data_type(TensorProto::FLOAT);
  f.add_dims(2);
  f.add_dims(2);
  for (float v : {1.5f, -2.0f, 3.25f, 0.0f})
    f.add_float_data(v);
  check(f, valuesTensor<float>(plan::F32, {2, 2}, {1.5f, -2.0f, 3.25f, 0.0f}));

  TensorProto i64;
  i64.set_data_type(TensorProto::INT64);
  i64.add_dims(3);
  for (int64_t v : {int64_t(-1), int64_t(1) << 40, int64_t(7)})
    i64.add_int64_data(v);
  check(i64, valuesTensor<int64_t>(plan::I64, {3},
                                   {-1, int64_t(1) << 40, 7}));

  TensorProto d;
  d.set_data_type(TensorProto::DOUBLE);
  d.add_double_data(0.125); // rank 0
  check(d, valuesTensor<double>(plan::F64, {}, {0.125}));

  TensorProto i8;
  i8.set_data_type(TensorProto::INT8);
  i8.add_dims(3);
  for (int v : {-128, 0, 127})
    i8.add_int32_data(v);
  check(i8, valuesTensor<int8_t>(plan::I8, {3}, {-128, 0, 127}));

  TensorProto half;
  half.set_data_type(TensorProto::FLOAT16);
  half.add_dims(2);
  half.add_int32_data(0x3c00); // 1.0
  half.add_int32_data(0xc000); // -2.0
  check(half, valuesTensor<uint16_t>(plan::F16, {2}, {0x3c00, 0xc000}));

  TensorProto b;
  b.set_data_type(TensorProto::BOOL);
  b.add_dims(3);
  for (int v : {1, 0, 1})
    b.add_int32_data(v);
  check(b, valuesTensor<uint8_t>(plan::BOOL, {3}, {1, 0, 1}));

  TensorProto u32;
  u32.set_data_type(TensorProto::UINT32);
  u32.add_dims(2);
  u32.add_uint64_data(0xffffffffu);
  u32.add_uint64_data(5);
  check(u32, valuesTensor<uint32_t>(plan::U32, {2}, {0xffffffffu, 5}));
}

TEST(TensorIOTest, TensorProtoErrors) {
  std::string dir = makeTempDir(), path = dir + "/bad.pb";
  auto writeProto = [&](const TensorProto &t) {
    writeBytes(path, t.SerializeAsString());
  };

  TensorProto s;
  s.set_data_type(TensorProto::STRING);
  s.add_dims(1);
  s.add_string_data("hi");
  writeProto(s);
  readFails(path, "string tensors are not supported");

  TensorProto ext;
  ext.set_name("w");
  ext.set_data_type(TensorProto::FLOAT);
  ext.add_dims(2);
  ext.set_data_location(TensorProto::EXTERNAL);
  auto *loc = ext.add_external_data();
  loc->set_key("location");
  loc->set_value("w.bin");
  writeProto(ext);
  readFails(path, "external file");

  TensorProto c;
  c.set_data_type(TensorProto::COMPLEX64);
  c.add_dims(1);
  c.add_float_data(1);
  c.add_float_data(2);
  writeProto(c);
  readFails(path, "COMPLEX64 is not supported");

  TensorProto neg;
  neg.set_data_type(TensorProto::FLOAT);
  neg.add_dims(-2);
  writeProto(neg);
  readFails(path, "negative dim");

  TensorProto shortRaw;
  shortRaw.set_name("y");
  shortRaw.set_data_type(TensorProto::FLOAT);
  shortRaw.add_dims(2);
  shortRaw.add_dims(3);
  shortRaw.set_raw_data(std::string(20, '\0'));
  writeProto(shortRaw);
  readFails(path, "raw_data holds 20 bytes but FLOAT [2, 3] needs 24");

  TensorProto fewTyped;
  fewTyped.set_data_type(TensorProto::FLOAT);
  fewTyped.add_dims(3);
  fewTyped.add_float_data(1);
  writeProto(fewTyped);
  readFails(path, "float_data holds 1 values");

  // The right count in the wrong field is still missing data.
  TensorProto wrongField;
  wrongField.set_data_type(TensorProto::FLOAT);
  wrongField.add_dims(1);
  wrongField.add_int32_data(1);
  writeProto(wrongField);
  readFails(path, "float_data holds 0 values");

  writeBytes(path, "\xff\xff\xff garbage");
  readFails(path, "not an ONNX TensorProto");
}

TEST(TensorIOTest, ReadErrorsNameTheFile) {
  std::string dir = makeTempDir();
  readFails(dir + "/missing.pb", dir + "/missing.pb");
  readFails(dir + "/missing.npy", "No such file");
  writeBytes(dir + "/t.bin", "x");
  readFails(dir + "/t.bin", "expected a .pb (ONNX TensorProto) or .npy");
}

TEST(TensorIOTest, TruncatedFilesFailAtEveryLength) {
  std::string dir = makeTempDir(), error;
  const HostTensor tensors[] = {
      patternTensor(plan::F32, {2, 3}, "input_0"),
      patternTensor(plan::I64, {}, ""),
      patternTensor(plan::BOOL, {5}, "mask"),
      patternTensor(plan::F16, {1, 1, 3}, "h"),
  };
  for (const HostTensor &tensor : tensors) {
    for (const char *ext : {".pb", ".npy"}) {
      std::string whole = dir + "/whole" + ext, cut = dir + "/cut" + ext;
      ASSERT_TRUE(writeTensorFile(whole, tensor, error)) << error;
      std::string bytes = readBytes(whole);
      for (size_t length = 0; length < bytes.size(); ++length) {
        SCOPED_TRACE(std::string(ext) + " cut to " + std::to_string(length));
        writeBytes(cut, bytes.substr(0, length));
        HostTensor t;
        EXPECT_FALSE(readTensorFile(cut, t, error));
        EXPECT_NE(error.find(cut), std::string::npos) << error;
      }
    }
  }
}

TEST(TensorIOTest, CorruptBytesAreReadOrRefusedNeverACrash) {
  std::string dir = makeTempDir(), error;
  HostTensor tensor = patternTensor(plan::I32, {2, 2}, "x");
  for (const char *ext : {".pb", ".npy"}) {
    std::string whole = dir + "/whole" + ext, bad = dir + "/bad" + ext;
    ASSERT_TRUE(writeTensorFile(whole, tensor, error)) << error;
    std::string bytes = readBytes(whole);
    for (size_t at = 0; at < bytes.size(); ++at) {
      for (int value : {0x00, 0xff, 0x80, bytes[at] ^ 0x01}) {
        std::string corrupt = bytes;
        corrupt[at] = char(value);
        writeBytes(bad, corrupt);
        HostTensor t;
        if (readTensorFile(bad, t, error)) {
          int64_t count = 1;
          for (int64_t d : t.type.shape())
            count *= d;
          EXPECT_EQ(int64_t(t.bytes.size()), count * bytesOf(t.type.dtype()));
        } else {
          EXPECT_NE(error.find(bad), std::string::npos) << error;
        }
      }
    }
  }
}

TEST(TensorIOTest, ReadsNpyAsNumPyWritesIt) {
  std::string dir = makeTempDir(), path = dir + "/np.npy", error;
  std::vector<float> values = {0, 1, 2, 3.5f, -4, 5};
  std::string data(reinterpret_cast<const char *>(values.data()), 24);

  // NumPy 1.x, and version 2.0 and 3.0 of the format.
  for (int major : {1, 2, 3}) {
    writeBytes(path, npyFile("{'descr': '<f4', 'fortran_order': False, "
                             "'shape': (2, 3), }",
                             data, major));
    HostTensor t;
    ASSERT_TRUE(readTensorFile(path, t, error)) << error;
    expectSameTensor(valuesTensor<float>(plan::F32, {2, 3}, values), t);
  }

  // Keys in any order, Python 2 longs, rank 0 and rank 1.
  writeBytes(path, npyFile("{'shape': (6L,), 'fortran_order': False, "
                           "\"descr\": '<f4'}",
                           data));
  HostTensor t;
  ASSERT_TRUE(readTensorFile(path, t, error)) << error;
  expectSameTensor(valuesTensor<float>(plan::F32, {6}, values), t);

  writeBytes(path, npyFile("{'descr': '|u1', 'fortran_order': False, "
                           "'shape': (), }",
                           "\x2a"));
  ASSERT_TRUE(readTensorFile(path, t, error)) << error;
  expectSameTensor(valuesTensor<uint8_t>(plan::U8, {}, {42}), t);

  writeBytes(path, npyFile("{'descr': '|b1', 'fortran_order': False, "
                           "'shape': (0, 4), }",
                           ""));
  ASSERT_TRUE(readTensorFile(path, t, error)) << error;
  expectSameTensor(valuesTensor<uint8_t>(plan::BOOL, {0, 4}, {}), t);
}

TEST(TensorIOTest, WritesNpyByteForByteAsNumPy) {
  // What NumPy 2 np.save writes for np.arange(6, dtype='<f4').reshape(2, 3):
  // the dict, 20 spare spaces for the first dim to grow, padding to 128.
  std::string dict = "{'descr': '<f4', 'fortran_order': False, "
                     "'shape': (2, 3), }" +
                     std::string(20, ' ');
  std::vector<float> values = {0, 1, 2, 3, 4, 5};
  std::string data(reinterpret_cast<const char *>(values.data()), 24);
  std::string expected = npyFile(dict, data);
  ASSERT_EQ(expected.size(), 128u + 24u);

  std::string dir = makeTempDir(), path = dir + "/ours.npy", error;
  ASSERT_TRUE(writeTensorFile(
      path, valuesTensor<float>(plan::F32, {2, 3}, values), error))
      << error;
  EXPECT_EQ(readBytes(path), expected);

  // Rank 0 has no first dim, so no spare room.
  ASSERT_TRUE(writeTensorFile(path, valuesTensor<double>(plan::F64, {}, {1.0}),
                              error));
  EXPECT_EQ(readBytes(path),
            npyFile("{'descr': '<f8', 'fortran_order': False, 'shape': (), }",
                    std::string("\0\0\0\0\0\0\xf0\x3f", 8)));
}

TEST(TensorIOTest, NpyErrors) {
  std::string dir = makeTempDir(), path = dir + "/bad.npy";
  std::string data(24, '\0');
  writeBytes(path, npyFile("{'descr': '<f4', 'fortran_order': True, "
                           "'shape': (2, 3), }",
                           data));
  readFails(path, "Fortran-order");

  writeBytes(path, npyFile("{'descr': '>f4', 'fortran_order': False, "
                           "'shape': (2, 3), }",
                           data));
  readFails(path, "big-endian dtype '>f4'");

  writeBytes(path, npyFile("{'descr': '<c8', 'fortran_order': False, "
                           "'shape': (3,), }",
                           data));
  readFails(path, "dtype '<c8' is not supported");

  writeBytes(path, npyFile("{'descr': [('a', '<f4')], 'fortran_order': "
                           "False, 'shape': (6,), }",
                           data));
  readFails(path, "structured dtypes");

  writeBytes(path, "\x93NUMPX\x01\x00" + data);
  readFails(path, "not a NumPy .npy file");

  std::string wrongVersion = npyFile(
      "{'descr': '<f4', 'fortran_order': False, 'shape': (6,), }", data);
  wrongVersion[6] = 4;
  writeBytes(path, wrongVersion);
  readFails(path, "version 4.0");

  writeBytes(path, npyFile("{'descr': '<f4', 'fortran_order': False, "
                           "'shape': (2, 3), }",
                           data + "xx"));
  readFails(path, "needs 24 data bytes but the file has 26");

  writeBytes(path, npyFile("{'descr': '<f4', 'fortran_order': False, "
                           "'shape': (-1, 6), }",
                           data));
  readFails(path, "'shape' must be a tuple");

  writeBytes(path, npyFile("{'descr': '<f4', 'shape': (6,), }", data));
  readFails(path, "needs the keys");

  writeBytes(path, npyFile("{'descr': '<f4', 'fortran_order': False, "
                           "'shape': (99999999999, 99999999999, 99999), }",
                           data));
  readFails(path, "too large");
}

//===----------------------------------------------------------------------===//
// ParameterReader
//===----------------------------------------------------------------------===//

class ParameterReaderTest : public testing::Test {
protected:
  /// A 4x6 float initializer inside the model ("inline", values i), the same
  /// shape in weights.bin at offset 16 ("external", values 100 + i), and a
  /// 2x3 int64 one in int64_data ("typed", values 10 * i), and a 3x4x5
  /// float one in cube.bin ("cube", values 1000 + i).
  void SetUp() override {
    dir = makeTempDir();
    modelPath = dir + "/model.onnx";
    std::vector<float> inlineValues(24), externalValues(24);
    for (int i = 0; i < 24; ++i) {
      inlineValues[i] = float(i);
      externalValues[i] = float(100 + i);
    }
    ::onnx::ModelProto model;
    model.set_ir_version(9);
    auto *graph = model.mutable_graph();
    graph->set_name("g");

    TensorProto *inl = graph->add_initializer();
    inl->set_name("inline");
    inl->set_data_type(TensorProto::FLOAT);
    inl->add_dims(4);
    inl->add_dims(6);
    inl->set_raw_data(inlineValues.data(), 24 * sizeof(float));

    TensorProto *ext = graph->add_initializer();
    ext->set_name("external");
    ext->set_data_type(TensorProto::FLOAT);
    ext->add_dims(4);
    ext->add_dims(6);
    ext->set_data_location(TensorProto::EXTERNAL);
    auto entry = [&](const char *key, const std::string &value) {
      auto *e = ext->add_external_data();
      e->set_key(key);
      e->set_value(value);
    };
    entry("location", "weights.bin");
    entry("offset", "16");
    entry("length", "96");
    writeBytes(dir + "/weights.bin",
               std::string(16, 'x') +
                   std::string(reinterpret_cast<const char *>(externalValues.data()),
                               96));

    TensorProto *typed = graph->add_initializer();
    typed->set_name("typed");
    typed->set_data_type(TensorProto::INT64);
    typed->add_dims(2);
    typed->add_dims(3);
    for (int i = 0; i < 6; ++i)
      typed->add_int64_data(10 * i);

    TensorProto *cube = graph->add_initializer();
    cube->set_name("cube");
    cube->set_data_type(TensorProto::FLOAT);
    for (int64_t d : {3, 4, 5})
      cube->add_dims(d);
    cube->set_data_location(TensorProto::EXTERNAL);
    auto *location = cube->add_external_data();
    location->set_key("location");
    location->set_value("cube.bin");
    std::vector<float> cubeValues(60);
    for (int i = 0; i < 60; ++i)
      cubeValues[i] = float(1000 + i);
    writeBytes(dir + "/cube.bin",
               std::string(reinterpret_cast<const char *>(cubeValues.data()),
                           60 * sizeof(float)));

    writeBytes(modelPath, model.SerializeAsString());
    std::string error;
    ASSERT_TRUE(reader.open(modelPath, error)) << error;
  }

  static plan::ParameterSource source(
      const std::string &name,
      std::vector<std::pair<int64_t, int64_t>> slice = {}) {
    plan::ParameterSource s;
    s.set_initializer(name);
    for (auto [start, size] : slice) {
      auto *d = s.add_slice();
      d->set_start(start);
      d->set_size(size);
    }
    return s;
  }

  static plan::TensorType type(plan::DType dtype, std::vector<int64_t> shape) {
    plan::TensorType t;
    t.set_dtype(dtype);
    for (int64_t d : shape)
      t.add_shape(d);
    return t;
  }

  void expectReadFails(const plan::ParameterSource &s, const plan::TensorType &t,
                       const std::string &mentions) {
    std::vector<char> out(1024);
    std::string error;
    EXPECT_FALSE(reader.read(s, t, out.data(), error));
    EXPECT_NE(error.find(mentions), std::string::npos)
        << "error '" << error << "' does not mention '" << mentions << "'";
  }

  std::string dir, modelPath;
  ParameterReader reader;
};

TEST_F(ParameterReaderTest, ReadsWholeInitializers) {
  std::string error;
  for (auto [name, base] : {std::pair<const char *, float>{"inline", 0.f},
                            {"external", 100.f}}) {
    std::vector<float> out(24, -1);
    ASSERT_TRUE(reader.read(source(name), type(plan::F32, {4, 6}), out.data(),
                            error))
        << error;
    for (int i = 0; i < 24; ++i)
      EXPECT_EQ(out[i], base + i) << name << " element " << i;
  }
  // The plan may flatten a parameter; only the element count must agree.
  std::vector<int64_t> typedOut(6);
  ASSERT_TRUE(reader.read(source("typed"), type(plan::I64, {6}),
                          typedOut.data(), error))
      << error;
  EXPECT_EQ(typedOut, (std::vector<int64_t>{0, 10, 20, 30, 40, 50}));
}

TEST_F(ParameterReaderTest, ReadsSlices) {
  std::string error;
  for (auto [name, base] : {std::pair<const char *, float>{"inline", 0.f},
                            {"external", 100.f}}) {
    SCOPED_TRACE(name);
    // Rows 1..2, columns 2..4.
    std::vector<float> out(6, -1);
    ASSERT_TRUE(reader.read(source(name, {{1, 2}, {2, 3}}),
                            type(plan::F32, {2, 3}), out.data(), error))
        << error;
    EXPECT_EQ(out, (std::vector<float>{base + 8, base + 9, base + 10,
                                       base + 14, base + 15, base + 16}));
    // Whole rows are one contiguous run.
    std::vector<float> rows(12, -1);
    ASSERT_TRUE(reader.read(source(name, {{2, 2}, {0, 6}}),
                            type(plan::F32, {2, 6}), rows.data(), error))
        << error;
    for (int i = 0; i < 12; ++i)
      EXPECT_EQ(rows[i], base + 12 + i);
    // One column.
    std::vector<float> column(4, -1);
    ASSERT_TRUE(reader.read(source(name, {{0, 4}, {5, 1}}),
                            type(plan::F32, {4, 1}), column.data(), error))
        << error;
    EXPECT_EQ(column, (std::vector<float>{base + 5, base + 11, base + 17,
                                          base + 23}));
  }
  std::vector<int64_t> typedOut(2);
  ASSERT_TRUE(reader.read(source("typed", {{0, 2}, {1, 1}}),
                          type(plan::I64, {2, 1}), typedOut.data(), error))
      << error;
  EXPECT_EQ(typedOut, (std::vector<int64_t>{10, 40}));
}

TEST_F(ParameterReaderTest, ReadsEvery3DSlice) {
  std::string error;
  std::vector<float> out;
  int slices = 0;
  for (int64_t s0 = 0; s0 < 3; ++s0)
    for (int64_t n0 = 1; s0 + n0 <= 3; ++n0)
      for (int64_t s1 = 0; s1 < 4; ++s1)
        for (int64_t n1 = 1; s1 + n1 <= 4; ++n1)
          for (int64_t s2 = 0; s2 < 5; ++s2)
            for (int64_t n2 = 1; s2 + n2 <= 5; ++n2) {
              out.assign(size_t(n0 * n1 * n2), -1);
              ASSERT_TRUE(reader.read(
                  source("cube", {{s0, n0}, {s1, n1}, {s2, n2}}),
                  type(plan::F32, {n0, n1, n2}), out.data(), error))
                  << error;
              size_t at = 0;
              for (int64_t i = s0; i < s0 + n0; ++i)
                for (int64_t j = s1; j < s1 + n1; ++j)
                  for (int64_t k = s2; k < s2 + n2; ++k)
                    ASSERT_EQ(out[at++], float(1000 + i * 20 + j * 5 + k))
                        << "slice from " << s0 << "," << s1 << "," << s2
                        << " size " << n0 << "," << n1 << "," << n2;
              ++slices;
            }
  EXPECT_EQ(slices, 6 * 10 * 15);
  // An empty slice reads nothing.
  EXPECT_TRUE(reader.read(source("cube", {{1, 0}, {0, 4}, {0, 5}}),
                          type(plan::F32, {0, 4, 5}), nullptr, error))
      << error;
}

TEST_F(ParameterReaderTest, ChecksThePlansExternalFile) {
  std::string error;
  std::vector<float> out(24);
  plan::ParameterSource agrees = source("external");
  agrees.set_file("weights.bin");
  agrees.set_offset(16);
  EXPECT_TRUE(reader.read(agrees, type(plan::F32, {4, 6}), out.data(), error))
      << error;

  plan::ParameterSource otherOffset = agrees;
  otherOffset.set_offset(0);
  expectReadFails(otherOffset, type(plan::F32, {4, 6}),
                  "in weights.bin at offset 16");

  plan::ParameterSource notExternal = source("inline");
  notExternal.set_file("weights.bin");
  expectReadFails(notExternal, type(plan::F32, {4, 6}), "inside the model");
}

TEST_F(ParameterReaderTest, Errors) {
  expectReadFails(source("nope"), type(plan::F32, {1}),
                  "model.onnx: no initializer named 'nope'");
  expectReadFails(source("inline"), type(plan::F16, {4, 6}),
                  "initializer 'inline' is FLOAT but the plan reads it as f16");
  expectReadFails(source("inline", {{3, 2}, {0, 6}}), type(plan::F32, {2, 6}),
                  "slice [3, 5) of dim 0 is out of bounds");
  expectReadFails(source("inline", {{0, 1}, {-1, 2}}), type(plan::F32, {1, 2}),
                  "out of bounds");
  expectReadFails(source("inline", {{0, 4}}), type(plan::F32, {4}),
                  "has rank 2 but the plan slices 1 dims");
  expectReadFails(source("inline", {{0, 2}, {0, 6}}), type(plan::F32, {4, 6}),
                  "has 12 elements but the plan's buffer [4, 6] holds 24");

  // External data file cut short.
  writeBytes(dir + "/weights.bin", std::string(100, 'x'));
  ParameterReader fresh;
  std::string error;
  ASSERT_TRUE(fresh.open(modelPath, error)) << error;
  std::vector<float> out(24);
  EXPECT_FALSE(fresh.read(source("external"), type(plan::F32, {4, 6}),
                          out.data(), error));
  EXPECT_NE(error.find("weights.bin' is too short (needs 96 bytes at offset 16): "
                       "it has 100 bytes"),
            std::string::npos)
      << error;

  std::remove((dir + "/weights.bin").c_str());
  ParameterReader missing;
  ASSERT_TRUE(missing.open(modelPath, error)) << error;
  EXPECT_FALSE(missing.read(source("external"), type(plan::F32, {4, 6}),
                            out.data(), error));
  EXPECT_NE(error.find("external data file '" + dir + "/weights.bin' not found"),
            std::string::npos)
      << error;
}

// A padded parameter (ParameterSource.model_shape): the plan's whole is
// larger than the initializer, sliced in the padded coordinates; what lies
// in the model is read, the rest is zeros.
TEST_F(ParameterReaderTest, ReadsPaddedParameters) {
  auto padded = [](const std::string &name, std::vector<std::pair<int64_t, int64_t>> slice,
                   std::vector<int64_t> model = {4, 6}) {
    plan::ParameterSource s = source(name, std::move(slice));
    for (int64_t d : model)
      s.add_model_shape(d);
    return s;
  };
  std::string error;
  for (auto [name, base] : {std::pair<const char *, float>{"inline", 0.f},
                            {"external", 100.f}}) {
    SCOPED_TRACE(name);
    // The whole, [4,6] padded to [6,8].
    std::vector<float> out(48, -1);
    ASSERT_TRUE(reader.read(padded(name, {}), type(plan::F32, {6, 8}), out.data(), error))
        << error;
    for (int i = 0; i < 6; ++i)
      for (int j = 0; j < 8; ++j)
        EXPECT_EQ(out[size_t(i * 8 + j)], i < 4 && j < 6 ? base + float(i * 6 + j) : 0.f)
            << i << "," << j;
    // A shard straddling the padding in both dims: rows 2..4, columns 4..7.
    std::vector<float> straddles(12, -1);
    ASSERT_TRUE(reader.read(padded(name, {{2, 3}, {4, 4}}), type(plan::F32, {3, 4}),
                            straddles.data(), error))
        << error;
    EXPECT_EQ(straddles, (std::vector<float>{base + 16, base + 17, 0, 0, base + 22, base + 23,
                                             0, 0, 0, 0, 0, 0}));
    // Shards all in the padding: rows 4..5, and columns 6..7.
    for (auto slice : {std::vector<std::pair<int64_t, int64_t>>{{4, 2}, {0, 8}},
                       std::vector<std::pair<int64_t, int64_t>>{{0, 6}, {6, 2}}}) {
      std::vector<float> zeros(slice[0].second * slice[1].second, -1);
      ASSERT_TRUE(reader.read(padded(name, slice),
                              type(plan::F32, {slice[0].second, slice[1].second}),
                              zeros.data(), error))
          << error;
      EXPECT_EQ(zeros, std::vector<float>(zeros.size(), 0.f));
    }
  }
  // Not padded at all: the plain read.
  std::vector<float> same(24, -1);
  ASSERT_TRUE(reader.read(padded("inline", {}), type(plan::F32, {4, 6}), same.data(), error))
      << error;
  for (int i = 0; i < 24; ++i)
    EXPECT_EQ(same[size_t(i)], float(i));

  // The initializer is not the model's shape the plan pads.
  expectReadFails(padded("inline", {}, {4, 5}), type(plan::F32, {6, 8}),
                  "initializer 'inline' is [4, 6] but the plan pads it from [4, 5]");
  // A padded parameter is never flattened.
  expectReadFails(padded("inline", {}), type(plan::F32, {48}),
                  "is not of the padded parameter's rank");
  expectReadFails(padded("inline", {{0, 2}, {0, 8}}), type(plan::F32, {6, 8}),
                  "slice [0, +2) of dim 0 is not a part of the plan's buffer [6, 8]");
  // An all-padding shard still reads from the file the plan names.
  plan::ParameterSource moved = padded("external", {{4, 2}, {0, 8}});
  moved.set_file("weights.bin");
  moved.set_offset(0);
  expectReadFails(moved, type(plan::F32, {2, 8}), "in weights.bin at offset 16");
}

// Every slice of a [3,4,5] initializer padded to [4,6,7]: each element the
// model's where it has one, else zero.
TEST_F(ParameterReaderTest, ReadsEveryPadded3DSlice) {
  std::string error;
  std::vector<int64_t> model = {3, 4, 5}, whole = {4, 6, 7};
  std::vector<float> out;
  int slices = 0;
  for (int64_t s0 = 0; s0 < 4; ++s0)
    for (int64_t n0 = 1; s0 + n0 <= 4; ++n0)
      for (int64_t s1 = 0; s1 < 6; ++s1)
        for (int64_t n1 = 1; s1 + n1 <= 6; ++n1)
          for (int64_t s2 = 0; s2 < 7; ++s2)
            for (int64_t n2 = 1; s2 + n2 <= 7; ++n2) {
              plan::ParameterSource s = source("cube", {{s0, n0}, {s1, n1}, {s2, n2}});
              for (int64_t d : model)
                s.add_model_shape(d);
              out.assign(size_t(n0 * n1 * n2), -1);
              ASSERT_TRUE(reader.read(s, type(plan::F32, {n0, n1, n2}), out.data(), error))
                  << error;
              size_t at = 0;
              for (int64_t i = s0; i < s0 + n0; ++i)
                for (int64_t j = s1; j < s1 + n1; ++j)
                  for (int64_t k = s2; k < s2 + n2; ++k) {
                    bool inside = i < 3 && j < 4 && k < 5;
                    ASSERT_EQ(out[at++], inside ? float(1000 + i * 20 + j * 5 + k) : 0.f)
                        << "element " << i << "," << j << "," << k << " of the slice from "
                        << s0 << "," << s1 << "," << s2 << " size " << n0 << "," << n1 << ","
                        << n2;
                  }
              ++slices;
            }
  EXPECT_EQ(slices, 10 * 21 * 28);
}

TEST(ParameterReaderOpenTest, RefusesWhatIsNotAModel) {
  std::string dir = makeTempDir(), error;
  ParameterReader reader;
  EXPECT_FALSE(reader.open(dir + "/none.onnx", error));
  EXPECT_NE(error.find("none.onnx"), std::string::npos) << error;

  writeBytes(dir + "/junk.onnx", "\xff\xff\xff\xff junk");
  EXPECT_FALSE(reader.open(dir + "/junk.onnx", error));
  EXPECT_NE(error.find("junk.onnx: not an ONNX model"), std::string::npos)
      << error;

  // A TensorProto is not a model.
  ASSERT_TRUE(writeTensorFile(dir + "/t.pb", patternTensor(plan::F32, {2}),
                              error));
  EXPECT_FALSE(reader.open(dir + "/t.pb", error));
  EXPECT_NE(error.find("t.pb: not an ONNX model"), std::string::npos) << error;

  ::onnx::ModelProto noGraph;
  noGraph.set_ir_version(9);
  writeBytes(dir + "/empty.onnx", noGraph.SerializeAsString());
  EXPECT_FALSE(reader.open(dir + "/empty.onnx", error));
  EXPECT_NE(error.find("empty.onnx: not an ONNX model (it has no graph)"),
            std::string::npos)
      << error;

  std::vector<char> out(8);
  plan::ParameterSource s;
  s.set_initializer("w");
  plan::TensorType t;
  t.set_dtype(plan::F32);
  EXPECT_FALSE(reader.read(s, t, out.data(), error));
  EXPECT_NE(error.find("no model is open"), std::string::npos) << error;
}

// A generated model's parameter: a shard draws exactly the values of its
// part of the whole tensor, and the values are normal(mean, std).
TEST(TensorIOTest, SeededParametersShardConsistently) {
  plan::ParameterSource whole;
  plan::SeededInit *init = whole.mutable_seeded();
  init->set_mean(0.5);
  init->set_std(0.02);
  init->set_seed(1234);
  init->add_shape(64);
  init->add_shape(96);
  plan::TensorType type;
  type.set_dtype(plan::F32);
  type.add_shape(64);
  type.add_shape(96);
  std::vector<float> all(64 * 96);
  fillSeeded(whole, type, all.data());
  double sum = 0, squares = 0;
  for (float v : all) {
    sum += v;
    squares += (v - 0.5) * (v - 0.5);
  }
  EXPECT_NEAR(sum / double(all.size()), 0.5, 0.002);
  EXPECT_NEAR(std::sqrt(squares / double(all.size())), 0.02, 0.001);

  plan::ParameterSource shard = whole;
  shard.add_slice()->set_start(16);
  shard.mutable_slice(0)->set_size(8);
  shard.add_slice()->set_start(32);
  shard.mutable_slice(1)->set_size(48);
  plan::TensorType shardType = type;
  shardType.set_shape(0, 8);
  shardType.set_shape(1, 48);
  std::vector<float> part(8 * 48);
  fillSeeded(shard, shardType, part.data());
  for (int i = 0; i < 8; ++i)
    for (int j = 0; j < 48; ++j)
      ASSERT_EQ(part[size_t(i * 48 + j)], all[size_t((16 + i) * 96 + 32 + j)]) << i << "," << j;

  init->set_seed(1235); // another parameter draws other values
  std::vector<float> other(64 * 96);
  fillSeeded(whole, type, other.data());
  EXPECT_NE(other[0], all[0]);
}

// A padded generated parameter draws the unpadded tensor's values inside
// the model's shape, whole or sharded, and zeros past it.
TEST(TensorIOTest, SeededPaddedParametersMatchTheUnpadded) {
  plan::ParameterSource model;
  plan::SeededInit *init = model.mutable_seeded();
  init->set_mean(0.5);
  init->set_std(0.02);
  init->set_seed(99);
  init->add_shape(5);
  init->add_shape(7);
  std::vector<float> unpadded(35);
  fillSeeded(model, testsupport::tensorType(plan::F32, {5, 7}), unpadded.data());

  plan::ParameterSource padded = model;
  padded.mutable_seeded()->set_shape(0, 8);
  padded.mutable_seeded()->set_shape(1, 8);
  padded.add_model_shape(5);
  padded.add_model_shape(7);
  auto expected = [&](int64_t i, int64_t j) {
    return i < 5 && j < 7 ? unpadded[size_t(i * 7 + j)] : 0.f;
  };
  std::vector<float> whole(64, -1);
  fillSeeded(padded, testsupport::tensorType(plan::F32, {8, 8}), whole.data());
  for (int64_t i = 0; i < 8; ++i)
    for (int64_t j = 0; j < 8; ++j)
      ASSERT_EQ(whole[size_t(i * 8 + j)], expected(i, j)) << i << "," << j;
  // A shard straddling the padding: rows 4..7, columns 4..7.
  plan::ParameterSource shard = padded;
  for (int d = 0; d < 2; ++d) {
    plan::DimSlice *slice = shard.add_slice();
    slice->set_start(4);
    slice->set_size(4);
  }
  std::vector<float> part(16, -1);
  fillSeeded(shard, testsupport::tensorType(plan::F32, {4, 4}), part.data());
  for (int64_t i = 0; i < 4; ++i)
    for (int64_t j = 0; j < 4; ++j)
      ASSERT_EQ(part[size_t(i * 4 + j)], expected(4 + i, 4 + j)) << i << "," << j;
}

// padInPlace against pasting the small tensor into zeros, for every pair
// of shapes up to [3,3,3] in [3,4,4].
TEST(TensorIOTest, PadInPlaceIsAPasteIntoZeros) {
  std::vector<int64_t> outer = {3, 4, 4};
  int cases = 0;
  for (int64_t a = 0; a <= 3; ++a)
    for (int64_t b = 0; b <= 4; ++b)
      for (int64_t c = 0; c <= 4; ++c) {
        std::vector<int64_t> inner = {a, b, c};
        std::vector<float> data(48, -1), want(48, 0);
        for (int64_t i = 0; i < a * b * c; ++i)
          data[size_t(i)] = float(i + 1);
        if (a * b * c > 0)
          pasteSlice(data.data(), outer, {0, 0, 0}, inner, 4, want.data());
        padInPlace(data.data(), inner, outer, 4);
        ASSERT_EQ(data, want) << "inner " << a << "," << b << "," << c;
        ++cases;
      }
  EXPECT_EQ(cases, 4 * 5 * 5);
  // Two bytes an element, and a scalar (nothing to spread).
  std::vector<uint16_t> halves = {1, 2, 3, 4, 0, 0};
  padInPlace(halves.data(), {2, 2}, {2, 3}, 2);
  EXPECT_EQ(halves, (std::vector<uint16_t>{1, 2, 0, 3, 4, 0}));
  float scalar = 7;
  padInPlace(&scalar, {}, {}, 4);
  EXPECT_EQ(scalar, 7.f);
}

TEST(TensorIOTest, PasteSliceIsTheInverseOfCopySlice) {
  // A [3, 4, 5] tensor cut into four parts ([2, 3] along dims 1 and 2,
  // unequal) and pasted back into zeros: the tensor again.
  std::vector<int64_t> dims = {3, 4, 5};
  std::vector<float> tensor(60), again(60, 0.0f);
  for (size_t i = 0; i < tensor.size(); ++i)
    tensor[i] = float(i);
  for (int64_t r : {0, 2})
    for (int64_t c : {0, 3}) {
      std::vector<int64_t> starts = {0, r, c}, sizes = {3, 2, c ? 2 : 3};
      std::vector<float> part(size_t(3 * 2 * sizes[2]));
      copySlice(tensor.data(), dims, starts, sizes, 4, part.data());
      EXPECT_EQ(part[1], tensor[size_t(r * 5 + c + 1)]);
      pasteSlice(part.data(), dims, starts, sizes, 4, again.data());
    }
  EXPECT_EQ(again, tensor);
  // A slice that spans nothing writes nothing.
  std::vector<float> untouched(60, -1.0f);
  pasteSlice(tensor.data(), dims, {0, 0, 0}, {3, 0, 5}, 4, untouched.data());
  EXPECT_EQ(untouched, std::vector<float>(60, -1.0f));
}

} // namespace
