// The importer's API on bytes: every failure carries a message, and
// external data and --shape options are checked.
#include "frontends/onnx/OnnxImporter.h"
#include "onnx.pb.h"

#include "mlir/IR/MLIRContext.h"

#include <gtest/gtest.h>

#include <cstdio>
#include <fstream>

using namespace dtc::onnx;

namespace {

::onnx::ModelProto reluModel() {
  ::onnx::ModelProto model;
  model.set_ir_version(8);
  auto *opset = model.add_opset_import();
  opset->set_version(17);
  auto *graph = model.mutable_graph();
  graph->set_name("g");
  auto *node = graph->add_node();
  node->set_op_type("Relu");
  node->set_name("relu_1");
  node->add_input("x");
  node->add_output("y");
  for (auto *info : {graph->add_input(), graph->add_output()}) {
    info->set_name(info == &graph->input(0) ? "x" : "y");
    auto *tensor = info->mutable_type()->mutable_tensor_type();
    tensor->set_elem_type(::onnx::TensorProto::FLOAT);
    tensor->mutable_shape()->add_dim()->set_dim_param("batch");
    tensor->mutable_shape()->add_dim()->set_dim_value(4);
  }
  return model;
}

std::string import(const ::onnx::ModelProto &model, const ImportOptions &options,
                   bool &ok) {
  mlir::MLIRContext context;
  std::string bytes = model.SerializeAsString(), error;
  auto module = importOnnxBytes(context, bytes.data(), bytes.size(), "m.onnx",
                                ".", options, error);
  ok = bool(module);
  return error;
}

TEST(OnnxImporter, BindsSymbolicDims) {
  ImportOptions options;
  std::string error;
  ASSERT_TRUE(parseShapeOption("batch=3", options, error)) << error;
  bool ok;
  EXPECT_EQ(import(reluModel(), options, ok), "");
  EXPECT_TRUE(ok);
}

TEST(OnnxImporter, UnboundSymbolNamesInputAndSymbol) {
  bool ok;
  std::string error = import(reluModel(), {}, ok);
  EXPECT_FALSE(ok);
  EXPECT_NE(error.find("'x'"), std::string::npos) << error;
  EXPECT_NE(error.find("'batch'"), std::string::npos) << error;
}

TEST(OnnxImporter, TruncatedBytesFailWithMessage) {
  auto model = reluModel();
  std::string bytes = model.SerializeAsString();
  for (size_t cut : {size_t(1), bytes.size() / 2, bytes.size() - 1}) {
    mlir::MLIRContext context;
    std::string error;
    auto module = importOnnxBytes(context, bytes.data(), cut, "m.onnx", ".", {}, error);
    EXPECT_FALSE(module);
    EXPECT_FALSE(error.empty());
  }
}

TEST(OnnxImporter, UnknownOpNamesNode) {
  auto model = reluModel();
  model.mutable_graph()->mutable_node(0)->set_op_type("FancyOp");
  ImportOptions options;
  options.shapes["batch"] = {1};
  bool ok;
  std::string error = import(model, options, ok);
  EXPECT_FALSE(ok);
  EXPECT_NE(error.find("1 ONNX op type this dtc does not support: FancyOp (1 node, 'relu_1')"),
            std::string::npos)
      << error;
}

TEST(OnnxImporter, ShapeOptionParsing) {
  ImportOptions options;
  std::string error;
  EXPECT_TRUE(parseShapeOption("input_ids=2x128", options, error));
  EXPECT_EQ(options.shapes["input_ids"], (std::vector<int64_t>{2, 128}));
  EXPECT_FALSE(parseShapeOption("x=2xx3", options, error));
  EXPECT_FALSE(parseShapeOption("=2", options, error));
  EXPECT_FALSE(parseShapeOption("x=-1", options, error));
  EXPECT_FALSE(error.empty());
}

TEST(OnnxImporter, ExternalDataIsCheckedAgainstShape) {
  // A 2x4 float initializer stored in a side file that is too short.
  std::string dir = ::testing::TempDir();
  {
    std::ofstream out(dir + "/weights.bin", std::ios::binary);
    out << std::string(16, '\0');
  }
  auto model = reluModel();
  auto *graph = model.mutable_graph();
  auto *w = graph->add_initializer();
  w->set_name("w");
  w->set_data_type(::onnx::TensorProto::FLOAT);
  w->add_dims(2);
  w->add_dims(4);
  w->set_data_location(::onnx::TensorProto::EXTERNAL);
  auto *loc = w->add_external_data();
  loc->set_key("location");
  loc->set_value("weights.bin");
  auto *node = graph->mutable_node(0);
  node->set_op_type("Add");
  node->add_input("w");
  mlir::MLIRContext context;
  std::string bytes = model.SerializeAsString(), error;
  ImportOptions options;
  options.shapes["batch"] = {2};
  auto module = importOnnxBytes(context, bytes.data(), bytes.size(), "m.onnx", dir,
                                options, error);
  EXPECT_FALSE(module);
  EXPECT_NE(error.find("too short"), std::string::npos) << error;
  {
    std::ofstream out(dir + "/weights.bin", std::ios::binary);
    out << std::string(32, '\0');
  }
  error.clear();
  module = importOnnxBytes(context, bytes.data(), bytes.size(), "m.onnx", dir,
                           options, error);
  EXPECT_TRUE(module) << error;
}

} // namespace
