//===- OnnxFormatTest.cpp - the shared ONNX TensorProto decoder -----------===//
//
// formats/onnx: the one external-data check (a location inside the model's
// folder, numbers that parse, a file long enough) and the one TensorProto
// decoder, which the importer and the runtime's ParameterReader both use.
//
//===----------------------------------------------------------------------===//
#include "formats/onnx/ExternalData.h"
#include "formats/onnx/TensorProto.h"
#include "runtime/ParameterReader.h"

#include "tests/unit/TestFiles.h"

#include <gtest/gtest.h>

#include <cstring>
#include <sys/stat.h>

using namespace dtc;
using namespace dtc::formats::onnx;
using dtc::testsupport::writeBytes;
using ::onnx::TensorProto;

namespace {

std::string makeTempDir() { return testsupport::makeTempDir("dtc-onnx-format"); }

::testing::AssertionResult contains(const std::string &text, const std::string &part) {
  if (text.find(part) != std::string::npos)
    return ::testing::AssertionSuccess();
  return ::testing::AssertionFailure() << "'" << text << "' does not contain '" << part << "'";
}

/// A FLOAT [2, 3] tensor (24 bytes) in external data.
TensorProto externalTensor(const std::string &location, const std::string &offset = "",
                           const std::string &length = "") {
  TensorProto t;
  t.set_name("w");
  t.set_data_type(TensorProto::FLOAT);
  t.add_dims(2);
  t.add_dims(3);
  t.set_data_location(TensorProto::EXTERNAL);
  auto entry = [&](const char *key, const std::string &value) {
    auto *e = t.add_external_data();
    e->set_key(key);
    e->set_value(value);
  };
  entry("location", location);
  if (!offset.empty())
    entry("offset", offset);
  if (!length.empty())
    entry("length", length);
  return t;
}

TEST(OnnxFormatTest, ExternalLocationsStayInsideTheModelsFolder) {
  std::string why;
  for (const char *good : {"w.bin", "sub/w.bin", "./w.bin", "a..b.bin", "..w", "w..", "sub/..x/w"})
    EXPECT_TRUE(checkExternalLocation(good, why)) << good << ": " << why;
  struct Bad {
    std::string location, why;
  };
  for (const Bad &bad : {Bad{"../x", "'..' component"}, Bad{"..", "'..' component"},
                         Bad{"sub/../../x", "'..' component"}, Bad{"sub/..", "'..' component"},
                         Bad{"..\\x", "'..' component"}, Bad{"/etc/passwd", "absolute path"},
                         Bad{"/", "absolute path"}, Bad{"", "empty"},
                         Bad{std::string("w\0/../x", 7), "NUL byte"}}) {
    EXPECT_FALSE(checkExternalLocation(bad.location, why)) << bad.location;
    EXPECT_TRUE(contains(why, bad.why));
  }
}

TEST(OnnxFormatTest, ResolvesExternalDataAndChecksItOnce) {
  std::string dir = makeTempDir(), error;
  writeBytes(dir + "/w.bin", std::string(40, 'x'));
  ExternalData data;
  ASSERT_TRUE(resolveExternalData(externalTensor("w.bin", "16", "24"), dir, 24, "tensor 'w'",
                                  data, error))
      << error;
  EXPECT_EQ(data.location, "w.bin");
  EXPECT_EQ(data.path, dir + "/w.bin");
  EXPECT_EQ(data.offset, 16);
  EXPECT_EQ(data.length, 24);
  EXPECT_EQ(data.fileSize, 40);
  // A folder given with its trailing slash, and the current folder.
  ASSERT_TRUE(resolveExternalData(externalTensor("w.bin"), dir + "/", 24, "w", data, error));
  EXPECT_EQ(data.path, dir + "/w.bin");
  EXPECT_EQ(joinModelPath("", "w.bin"), "w.bin");
  EXPECT_EQ(joinModelPath(".", "w.bin"), "w.bin");

  // Each way out of the model's folder is refused before any file is looked at.
  mkdir((dir + "/model").c_str(), 0755);
  auto refuses = [&](const TensorProto &t, const std::string &mentions) {
    std::string message;
    ExternalData ignored;
    EXPECT_FALSE(resolveExternalData(t, dir + "/model", 24, "tensor 'w'", ignored, message));
    EXPECT_TRUE(contains(message, mentions));
  };
  refuses(externalTensor("../w.bin"),
          "tensor 'w': external data location '../w.bin' has a '..' component; it must be a "
          "relative path inside the model's folder");
  refuses(externalTensor(dir + "/w.bin"), "is an absolute path");
  refuses(externalTensor("sub/../../w.bin"), "has a '..' component");

  // Offset and length past the end of the file.
  std::string inside = dir + "/model";
  writeBytes(inside + "/w.bin", std::string(40, 'x'));
  auto refusesInside = [&](const TensorProto &t, const std::string &mentions) {
    std::string message;
    ExternalData ignored;
    EXPECT_FALSE(resolveExternalData(t, inside, 24, "tensor 'w'", ignored, message));
    EXPECT_TRUE(contains(message, mentions));
  };
  refusesInside(externalTensor("w.bin", "17"),
                "tensor 'w': external data file '" + inside +
                    "/w.bin' is too short (needs 24 bytes at offset 17): it has 40 bytes");
  refusesInside(externalTensor("w.bin", "41"), "is too short (needs 24 bytes at offset 41)");
  // An offset near INT64_MAX must not wrap around when added to the length.
  refusesInside(externalTensor("w.bin", "9223372036854775807"), "is too short");
  EXPECT_TRUE(resolveExternalData(externalTensor("w.bin", "16"), inside, 24, "w", data, error))
      << error;

  // Numbers that do not parse, a length that disagrees with the shape.
  refusesInside(externalTensor("w.bin", "-1"),
                "external data offset '-1' is not a non-negative integer");
  refusesInside(externalTensor("w.bin", "8x"), "offset '8x' is not a non-negative integer");
  refusesInside(externalTensor("w.bin", "0", "99999999999999999999"),
                "length '99999999999999999999' is not a non-negative integer");
  refusesInside(externalTensor("w.bin", "0", "20"),
                "external data length 20 does not match its shape (24 bytes)");

  // No location, no file, not a file.
  TensorProto noLocation = externalTensor("w.bin");
  noLocation.mutable_external_data()->Clear();
  refusesInside(noLocation, "external data has no location");
  refusesInside(externalTensor("none.bin"),
                "external data file '" + inside + "/none.bin' not found");
  mkdir((inside + "/dir.bin").c_str(), 0755);
  refusesInside(externalTensor("dir.bin"), "is not a regular file");
}

TEST(OnnxFormatTest, ReadsTensorBytesInlineTypedAndExternal) {
  std::string dir = makeTempDir(), error, bytes;
  float values[6] = {1, 2, 3, 4, 5, 6};
  writeBytes(dir + "/w.bin", std::string(8, '\0') + std::string(reinterpret_cast<char *>(values), 24));
  TensorInfo info;
  TensorProto ext = externalTensor("w.bin", "8");
  ASSERT_TRUE(describeTensor(ext, "w", info, error)) << error;
  EXPECT_EQ(info.count, 6);
  EXPECT_EQ(info.bytes, 24);
  ASSERT_TRUE(readTensorBytes(ext, info, dir, "w", bytes, error)) << error;
  EXPECT_EQ(bytes, std::string(reinterpret_cast<char *>(values), 24));

  // The same values in float_data, and as FLOAT16 bits in int32_data.
  TensorProto typed;
  typed.set_data_type(TensorProto::FLOAT);
  typed.add_dims(6);
  for (float v : values)
    typed.add_float_data(v);
  ASSERT_TRUE(describeTensor(typed, "t", info, error)) << error;
  ASSERT_TRUE(readTensorBytes(typed, info, dir, "t", bytes, error)) << error;
  EXPECT_EQ(bytes, std::string(reinterpret_cast<char *>(values), 24));

  TensorProto half;
  half.set_data_type(TensorProto::FLOAT16);
  half.add_dims(2);
  half.add_int32_data(0x3c00); // 1.0
  half.add_int32_data(0xc000); // -2.0
  ASSERT_TRUE(describeTensor(half, "h", info, error)) << error;
  ASSERT_TRUE(readTensorBytes(half, info, dir, "h", bytes, error)) << error;
  EXPECT_EQ(bytes, std::string("\x00\x3c\x00\xc0", 4));

  // Refusals: types, segments, dims, sizes.
  TensorProto complex;
  complex.set_data_type(TensorProto::COMPLEX64);
  EXPECT_FALSE(describeTensor(complex, "c", info, error));
  EXPECT_TRUE(contains(error, "c: data type COMPLEX64 is not supported"));
  TensorProto unknown;
  unknown.set_data_type(99);
  EXPECT_FALSE(describeTensor(unknown, "u", info, error));
  EXPECT_TRUE(contains(error, "u: data type 99 is not supported"));
  TensorProto huge;
  huge.set_data_type(TensorProto::FLOAT);
  for (int i = 0; i < 4; ++i)
    huge.add_dims(int64_t(1) << 20);
  EXPECT_FALSE(describeTensor(huge, "big", info, error));
  EXPECT_TRUE(contains(error, "are too large"));
  TensorProto segment = typed;
  segment.mutable_segment()->set_begin(0);
  EXPECT_FALSE(describeTensor(segment, "s", info, error));
  EXPECT_TRUE(contains(error, "segmented tensors are not supported"));
  TensorProto shortRaw;
  shortRaw.set_data_type(TensorProto::INT64);
  shortRaw.add_dims(2);
  shortRaw.set_raw_data(std::string(12, '\0'));
  ASSERT_TRUE(describeTensor(shortRaw, "r", info, error)) << error;
  EXPECT_FALSE(checkInlineData(shortRaw, info, "r", error));
  EXPECT_TRUE(contains(error, "r: raw_data holds 12 bytes but INT64 [2] needs 16"));
}

// The runtime reads parameters through the same check: a model whose
// initializer points outside its folder is refused, not read.
TEST(OnnxFormatTest, ParameterReaderRefusesLocationsOutsideTheModel) {
  std::string dir = makeTempDir(), error;
  mkdir((dir + "/model").c_str(), 0755);
  writeBytes(dir + "/secret.bin", std::string(24, 's'));
  ::onnx::ModelProto model;
  model.set_ir_version(9);
  auto *graph = model.mutable_graph();
  *graph->add_initializer() = externalTensor("../secret.bin");
  graph->mutable_initializer(0)->set_name("escape");
  *graph->add_initializer() = externalTensor(dir + "/secret.bin");
  graph->mutable_initializer(1)->set_name("absolute");
  *graph->add_initializer() = externalTensor("w.bin", "8");
  graph->mutable_initializer(2)->set_name("short");
  writeBytes(dir + "/model/w.bin", std::string(24, '\0'));
  writeBytes(dir + "/model/m.onnx", model.SerializeAsString());

  runtime::ParameterReader reader;
  ASSERT_TRUE(reader.open(dir + "/model/m.onnx", error)) << error;
  plan::TensorType type;
  type.set_dtype(plan::F32);
  type.add_shape(2);
  type.add_shape(3);
  std::vector<float> out(6);
  auto refuses = [&](const std::string &name, const std::string &mentions) {
    plan::ParameterSource source;
    source.set_initializer(name);
    std::string message;
    EXPECT_FALSE(reader.read(source, type, out.data(), message));
    EXPECT_TRUE(contains(message, mentions));
  };
  refuses("escape", "initializer 'escape': external data location '../secret.bin' has a '..' "
                    "component");
  refuses("absolute", "is an absolute path");
  refuses("short", "w.bin' is too short (needs 24 bytes at offset 8): it has 24 bytes");
}

} // namespace
