//===- MultiRankRunTest.cpp - dtc run on plans for several ranks ----------===//
//
// Writes small SPMD plans for a 2x2 mesh (with their model, inputs and
// training data) and runs `dtc run` on them as a user would: dtc starts the
// 4 ranks under mpirun itself. Checks the outputs, that rank 0 alone
// prints, training with a checkpoint per rank and resume, training two
// pipeline stages (losses, checkpoints and the export of both stages'
// weights), and the messages for a wrong rank count, a bad collective, a
// rank failing alone, and a checkpoint of another mesh; and that `dtc plan`
// shows each split.
//
//===----------------------------------------------------------------------===//
#include "plan/PipelineSchedule.h"
#include "runtime/TensorIO.h"
#include "tests/unit/SpmdPlanBuilder.h"
#include "tests/unit/TestFiles.h"

#include "onnx.pb.h"

#include <gtest/gtest.h>

#include <tuple>

#include <cmath>
#include <cstdio>
#include <cstring>
#include <filesystem>
#include <regex>
#include <sys/wait.h>

using namespace dtc;
using namespace dtc::runtime;
using testsupport::SpmdPlanBuilder;
using testsupport::tensorType;

namespace {

struct Result {
  int status;
  std::string output; // stdout and stderr
};

Result runDtc(const std::string &arguments) {
  std::string command = std::string(DTC_EXECUTABLE) + " " + arguments + " 2>&1";
  FILE *pipe = ::popen(command.c_str(), "r");
  if (!pipe)
    return {-1, "popen failed"};
  Result result{0, ""};
  char chunk[4096];
  while (size_t n = std::fread(chunk, 1, sizeof chunk, pipe))
    result.output.append(chunk, n);
  int status = ::pclose(pipe);
  result.status = WIFEXITED(status) ? WEXITSTATUS(status) : 128 + WTERMSIG(status);
  return result;
}

testing::AssertionResult contains(const std::string &text, const std::string &part) {
  if (text.find(part) != std::string::npos)
    return testing::AssertionSuccess();
  return testing::AssertionFailure() << "'" << text << "' does not contain '" << part << "'";
}

size_t count(const std::string &text, const std::string &part) {
  size_t n = 0;
  for (size_t at = text.find(part); at != std::string::npos; at = text.find(part, at + 1))
    ++n;
  return n;
}

HostTensor floats(const std::vector<int64_t> &shape, const std::vector<float> &values) {
  HostTensor t;
  t.type = tensorType(plan::F32, shape);
  t.bytes.assign(reinterpret_cast<const char *>(values.data()),
                 reinterpret_cast<const char *>(values.data() + values.size()));
  return t;
}

void writeTensor(const std::string &path, const HostTensor &tensor) {
  std::string error;
  ASSERT_TRUE(writeTensorFile(path, tensor, error)) << error;
}

void writePlan(const std::string &path, const plan::Plan &plan) {
  testsupport::writeBytes(path, plan.SerializeAsString());
}

struct Initializer {
  std::string name;
  std::vector<int64_t> dims;
  std::vector<float> values;
};

/// An ONNX model holding float initializers.
void writeModel(const std::string &path, const std::vector<Initializer> &initializers) {
  ::onnx::ModelProto model;
  model.set_ir_version(9);
  model.mutable_graph()->set_name("g");
  for (const Initializer &init : initializers) {
    ::onnx::TensorProto *t = model.mutable_graph()->add_initializer();
    t->set_name(init.name);
    t->set_data_type(::onnx::TensorProto::FLOAT);
    for (int64_t d : init.dims)
      t->add_dims(d);
    for (float v : init.values)
      t->add_float_data(v);
  }
  testsupport::writeBytes(path, model.SerializeAsString());
}

void writeModel(const std::string &path, const std::string &name,
                const std::vector<int64_t> &dims, const std::vector<float> &values) {
  writeModel(path, {{name, dims, values}});
}

plan::ParameterSource initializer(const std::string &name) {
  plan::ParameterSource source;
  source.set_initializer(name);
  return source;
}

class MultiRankRun : public testing::Test {
protected:
  void SetUp() override { dir = testsupport::makeTempDir("multirank-run"); }

  /// A regression data set in dir/data: `samples` rows of two features
  /// (x.npy) and a near-linear label (labels.npy); returns both.
  std::pair<std::vector<float>, std::vector<float>> writeLinearData(int samples) {
    std::vector<float> x(samples * 2), labels(samples);
    for (int n = 0; n < samples; ++n) {
      x[size_t(2 * n)] = float(n % 5 - 2);
      x[size_t(2 * n + 1)] = float(n % 3) * 0.5f;
      labels[size_t(n)] = x[size_t(2 * n)] - 2 * x[size_t(2 * n + 1)] + 0.25f * float(n % 4);
    }
    std::filesystem::create_directory(dir + "/data");
    writeTensor(dir + "/data/x.npy", floats({samples, 2}, x));
    writeTensor(dir + "/data/labels.npy", floats({samples, 1}, labels));
    return {x, labels};
  }

  std::string dir;
};

/// y = x w on a 2x2 mesh: x (8x4) by rows over axis 0, w (4x6) by columns
/// over axis 1; y's parts gathered by columns, then by rows.
void buildMatMul(SpmdPlanBuilder &b, const std::string &model) {
  b.plan.set_model(model);
  uint32_t x = b.input("x", plan::F32, {8, 4}, {{0}, {}});
  uint32_t w = b.parameter(initializer("w"), plan::F32, {4, 6}, {{}, {1}});
  uint32_t y = b.buffer(plan::F32, {4, 3});
  b.instruction({x, w}, y).mutable_matmul();
  uint32_t columns = b.buffer(plan::F32, {4, 6});
  b.collective(plan::ALL_GATHER, {1}, y, columns, 1);
  uint32_t whole = b.buffer(plan::F32, {8, 6});
  b.collective(plan::ALL_GATHER, {0}, columns, whole, 0);
  b.output(whole, "y");
}

TEST_F(MultiRankRun, RunsFourRanksAndRankZeroWritesTheOutputs) {
  std::vector<float> x(32), w(24), y(48, 0.f);
  for (int k = 0; k < 32; ++k)
    x[size_t(k)] = float(k % 5 - 2);
  for (int k = 0; k < 24; ++k)
    w[size_t(k)] = float(k % 7 - 3);
  for (int r = 0; r < 8; ++r)
    for (int c = 0; c < 6; ++c)
      for (int k = 0; k < 4; ++k)
        y[size_t(r * 6 + c)] += x[size_t(r * 4 + k)] * w[size_t(k * 6 + c)];
  writeModel(dir + "/model.onnx", "w", {4, 6}, w);
  SpmdPlanBuilder b({2, 2});
  buildMatMul(b, dir + "/model.onnx");
  writePlan(dir + "/plan.dtcp", b.plan);
  std::filesystem::create_directory(dir + "/in");
  writeTensor(dir + "/in/input_0.pb", floats({8, 4}, x));

  Result run = runDtc("run " + dir + "/plan.dtcp -n 4 --inputs " + dir + "/in --outputs " +
                      dir + "/out --repeat 2 --threads 1");
  ASSERT_EQ(run.status, 0) << run.output;
  // Rank 0 alone prints.
  EXPECT_EQ(count(run.output, "run: 2 runs on 1 threads per rank, 4 ranks"), 1u) << run.output;
  HostTensor out;
  std::string error;
  ASSERT_TRUE(readTensorFile(dir + "/out/output_0.pb", out, error)) << error;
  std::vector<float> got(out.bytes.size() / 4);
  std::memcpy(got.data(), out.bytes.data(), out.bytes.size());
  EXPECT_EQ(got, y);

  // -n defaults to the plan's rank count.
  run = runDtc("run " + dir + "/plan.dtcp --inputs " + dir + "/in --outputs " + dir + "/out2");
  ASSERT_EQ(run.status, 0) << run.output;
  EXPECT_EQ(testsupport::readBytes(dir + "/out2/output_0.pb"),
            testsupport::readBytes(dir + "/out/output_0.pb"));

  // The profile of an SPMD plan: each instruction's slowest rank, printed once.
  run = runDtc("run " + dir + "/plan.dtcp --inputs " + dir + "/in --profile --threads 1");
  ASSERT_EQ(run.status, 0) << run.output;
  EXPECT_EQ(count(run.output, "profile (the slowest of 4 ranks per instruction): 1 runs"), 1u)
      << run.output;
}

TEST_F(MultiRankRun, WrongRankCountIsAUsageError) {
  writeModel(dir + "/model.onnx", "w", {4, 6}, std::vector<float>(24, 1.f));
  SpmdPlanBuilder b({2, 2});
  buildMatMul(b, dir + "/model.onnx");
  writePlan(dir + "/plan.dtcp", b.plan);
  Result run = runDtc("run " + dir + "/plan.dtcp -n 3");
  EXPECT_EQ(run.status, 1);
  EXPECT_TRUE(contains(run.output, "dtc: -n 3, but " + dir +
                                       "/plan.dtcp is a plan for 4 ranks (mesh 2x2): give -n 4 "
                                       "or leave -n out"));
}

TEST_F(MultiRankRun, ExportOfAnInferencePlanIsAUsageErrorBeforeRanksStart) {
  writeModel(dir + "/model.onnx", "w", {4, 6}, std::vector<float>(24, 1.f));
  SpmdPlanBuilder b({2, 2});
  buildMatMul(b, dir + "/model.onnx");
  writePlan(dir + "/plan.dtcp", b.plan);
  Result run = runDtc("run " + dir + "/plan.dtcp --export " + dir + "/out.onnx");
  EXPECT_EQ(run.status, 1);
  EXPECT_EQ(count(run.output, "is an inference plan: --data, --steps and --export need a plan "
                              "compiled with --train"),
            1u)
      << run.output;
}

TEST_F(MultiRankRun, BadCollectiveIsAPlanError) {
  writeModel(dir + "/model.onnx", "w", {4, 6}, std::vector<float>(24, 1.f));
  SpmdPlanBuilder b({2, 2});
  buildMatMul(b, dir + "/model.onnx");
  b.program->mutable_instructions(1)->mutable_collective()->set_axis(0);
  writePlan(dir + "/plan.dtcp", b.plan);
  Result run = runDtc("run " + dir + "/plan.dtcp -n 4");
  EXPECT_EQ(run.status, 1);
  EXPECT_TRUE(contains(run.output, "error: " + dir + "/plan.dtcp: rank 0, instruction 1: "
                                   "ALL_GATHER over mesh axes {1} (2 ranks) along dim 0: input "
                                   "f32[4,3], output f32[4,6]"));
}

TEST_F(MultiRankRun, RankFailingAloneEndsTheJob) {
  // Rank 3's index is out of range: it fails while the others wait for it
  // in the gather that follows.
  SpmdPlanBuilder b({2, 2});
  uint32_t table = b.constant({1, 2, 3, 4, 5, 6}, {3, 2});
  uint32_t index = b.input("index", plan::I64, {4}, {{0, 1}});
  uint32_t rows = b.buffer(plan::F32, {1, 2});
  b.instruction({table, index}, rows).mutable_gather()->set_axis(0);
  uint32_t all = b.buffer(plan::F32, {4, 2});
  b.collective(plan::ALL_GATHER, {0, 1}, rows, all, 0);
  b.output(all, "rows");
  writePlan(dir + "/plan.dtcp", b.plan);
  std::filesystem::create_directory(dir + "/in");
  HostTensor indices;
  indices.type = tensorType(plan::I64, {4});
  std::vector<int64_t> values = {0, 1, 2, 7};
  indices.bytes.assign(reinterpret_cast<const char *>(values.data()),
                       reinterpret_cast<const char *>(values.data() + 4));
  writeTensor(dir + "/in/index.pb", indices);
  Result run = runDtc("run " + dir + "/plan.dtcp --inputs " + dir + "/in");
  EXPECT_NE(run.status, 0) << run.output;
  EXPECT_TRUE(contains(run.output, "error: rank 3: instruction 0: gather: index 7"));
  EXPECT_EQ(count(run.output, "error: rank"), 1u) << run.output;
}

TEST_F(MultiRankRun, ErrorsEveryRankFindsArePrintedOnce) {
  // Every rank misses the same input: the job prints that once, as one
  // process would, ends without MPI's abort, and exits 1.
  SpmdPlanBuilder b({2, 2});
  uint32_t table = b.constant({1, 2, 3, 4, 5, 6}, {3, 2});
  uint32_t index = b.input("index", plan::I64, {4}, {{0, 1}});
  uint32_t rows = b.buffer(plan::F32, {1, 2});
  b.instruction({table, index}, rows).mutable_gather()->set_axis(0);
  b.output(rows, "rows");
  writePlan(dir + "/plan.dtcp", b.plan);
  std::filesystem::create_directory(dir + "/empty");
  Result run = runDtc("run " + dir + "/plan.dtcp --inputs " + dir + "/empty");
  EXPECT_EQ(run.status, 1) << run.output;
  EXPECT_EQ(count(run.output, "missing input 'index'"), 1u) << run.output;
  EXPECT_EQ(count(run.output, "error: "), 1u) << run.output;
  EXPECT_FALSE(contains(run.output, "rank 0")) << run.output;
  EXPECT_FALSE(contains(run.output, "MPI_ABORT")) << run.output;
  EXPECT_FALSE(contains(run.output, "non-zero")) << run.output;
}

TEST_F(MultiRankRun, PlanShowsHowEachValueIsSplit) {
  // The matmul on a mesh of axes dp and tp, with a weight split over both
  // and a whole one that each rank slices.
  SpmdPlanBuilder b({2, 2});
  b.plan.mutable_mesh()->mutable_axes(0)->set_name("dp");
  b.plan.mutable_mesh()->mutable_axes(1)->set_name("tp");
  buildMatMul(b, dir + "/model.onnx");
  b.parameter(initializer("v"), plan::F32, {8, 4}, {{0, 1}, {}});
  uint32_t u = b.parameter(initializer("u"), plan::F32, {4, 4});
  uint32_t part = b.buffer(plan::F32, {4, 2});
  b.collective(plan::ALL_SLICE, {1}, u, part, 1);
  b.output(part, "part");
  writePlan(dir + "/plan.dtcp", b.plan);
  Result shown = runDtc("plan --full " + dir + "/plan.dtcp");
  ASSERT_EQ(shown.status, 0) << shown.output;
  EXPECT_TRUE(contains(shown.output, "mesh: dp=2 x tp=2 (4 ranks, one program for all)"));
  EXPECT_TRUE(contains(shown.output, "f32[8/dp,4]\n")); // the input x
  // w: 48 of 96 bytes, v: 32 of 128, u: 64.
  EXPECT_TRUE(contains(shown.output,
                       "rank 0 parameters: 2 split (dp, tp), 1 replicated; 144 B per rank of "
                       "288 B\n"));
  EXPECT_TRUE(contains(shown.output, "%2 = matmul(%0:f32[8/dp,4], %1:f32[4,6/tp])  : f32[4,3]"));
  EXPECT_TRUE(contains(shown.output,
                       "%7 = all_slice(%6) mesh_axes=[1] axis=1 (local)  : f32[4,2]"));
  EXPECT_TRUE(contains(shown.output, "f32[8/(dp,tp),4]       parameter 'v'"));
  // The summary: each parameter whole over the axes that split it, and the
  // all-slice among the step's communication.
  Result summary = runDtc("plan " + dir + "/plan.dtcp");
  ASSERT_EQ(summary.status, 0) << summary.output;
  EXPECT_TRUE(contains(summary.output, "parameters: 3 tensors, 72 values, 2 split over the mesh"))
      << summary.output;
  EXPECT_TRUE(contains(summary.output, "  v f32[8/(dp,tp),4]\n")) << summary.output;
  EXPECT_TRUE(contains(summary.output, "all_slice over tp x1 (")) << summary.output;
  // A plan without costs (written by hand) has no prediction to show.
  EXPECT_FALSE(contains(summary.output, "predicted step")) << summary.output;
}

/// An elementwise instruction over `inputs` into `out`: node i < inputs is
/// input i, then `nodes` (op, argument nodes, constant), each f32.
using ExprNodes = std::vector<std::tuple<plan::ExprOp, std::vector<uint32_t>, double>>;
void expression(SpmdPlanBuilder &b, const std::vector<uint32_t> &inputs, uint32_t out,
                const ExprNodes &nodes) {
  plan::Elementwise *e = b.instruction(inputs, out).mutable_elementwise();
  for (uint32_t i = 0; i < inputs.size(); ++i) {
    plan::ExprNode *node = e->add_nodes();
    node->set_op(plan::INPUT);
    node->add_args(i);
    node->set_dtype(plan::F32);
  }
  for (const auto &[op, args, value] : nodes) {
    plan::ExprNode *node = e->add_nodes();
    node->set_op(op);
    for (uint32_t a : args)
      node->add_args(a);
    node->set_value(value);
    node->set_dtype(plan::F32);
  }
}

/// Linear regression with a per-sample bias, trained with SGD on `mesh`
/// (2x2, 4x1 or 1x1): the batch of 4 split over every rank, w replicated,
/// the biases (acc) split like the batch, so that each rank's checkpoint
/// holds parameters of its own.
void buildTraining(SpmdPlanBuilder &b, const std::string &model) {
  int64_t ranks = 1;
  for (const plan::MeshAxis &axis : b.plan.mesh().axes())
    ranks *= axis.size();
  int64_t batch = 4 / ranks;
  b.plan.set_model(model);
  uint32_t x = b.input("x", plan::F32, {4, 2}, {{0, 1}, {}});
  uint32_t labels = b.input("labels", plan::F32, {4, 1}, {{0, 1}, {}}, plan::LABELS);
  uint32_t lr = b.input("optimizer.lr", plan::F32, {}, {}, plan::LEARNING_RATE);
  uint32_t w = b.parameter(initializer("w"), plan::F32, {2, 1});
  plan::ParameterSource zeros = initializer("acc");
  zeros.set_zeros(true);
  uint32_t acc = b.parameter(zeros, plan::F32, {4, 1}, {{0, 1}, {}});

  uint32_t predicted = b.buffer(plan::F32, {batch, 1});
  b.instruction({x, w}, predicted).mutable_matmul();
  uint32_t diff = b.buffer(plan::F32, {batch, 1});
  expression(b, {predicted, acc, labels}, diff, {{plan::ADD, {0, 1}, 0}, {plan::SUB, {3, 2}, 0}});
  uint32_t square = b.buffer(plan::F32, {batch, 1});
  expression(b, {diff}, square,
             {{plan::MUL, {0, 0}, 0}, {plan::CONSTANT, {}, 0.25}, {plan::MUL, {1, 2}, 0}});
  uint32_t partial = b.buffer(plan::F32, {1, 1});
  plan::Reduce *sum = b.instruction({square}, partial).mutable_reduce();
  sum->set_kind(plan::REDUCE_SUM);
  sum->add_axes(0);
  uint32_t loss = b.buffer(plan::F32, {1, 1});
  b.collective(plan::ALL_REDUCE, {0, 1}, partial, loss);
  uint32_t gradPart = b.buffer(plan::F32, {2, 1});
  b.instruction({x, diff}, gradPart).mutable_matmul()->set_transpose_lhs(true);
  uint32_t grad = b.buffer(plan::F32, {2, 1});
  b.collective(plan::ALL_REDUCE, {0, 1}, gradPart, grad);
  // new = old - lr * gradient * 2 / batch
  ExprNodes step = {
      {plan::MUL, {1, 2}, 0}, {plan::CONSTANT, {}, 0.5}, {plan::MUL, {3, 4}, 0},
      {plan::SUB, {0, 5}, 0}};
  uint32_t newW = b.buffer(plan::F32, {2, 1});
  expression(b, {w, lr, grad}, newW, step);
  uint32_t newAcc = b.buffer(plan::F32, {batch, 1});
  expression(b, {acc, lr, diff}, newAcc, step);
  b.output(loss, "loss");
  b.output(newW, "w.new");
  plan::TensorType wholeAcc = tensorType(plan::F32, {4, 1});
  b.output(newAcc, "acc.new", &wholeAcc);

  plan::Training *t = b.plan.mutable_training();
  t->set_loss("mse");
  t->set_optimizer("sgd");
  t->set_learning_rate(0.1);
  t->set_schedule("constant");
  for (auto [output, buffer] : {std::pair<uint32_t, uint32_t>{1, w}, {2, acc}}) {
    plan::ParameterUpdate *update = t->add_updates();
    update->set_output(output);
    update->set_buffer(buffer);
  }
}

std::vector<double> lossesOf(const std::string &output) {
  std::vector<double> losses;
  std::regex line(R"(step \d+ loss ([-0-9.e+]+))");
  for (auto it = std::sregex_iterator(output.begin(), output.end(), line);
       it != std::sregex_iterator(); ++it)
    losses.push_back(std::stod((*it)[1]));
  return losses;
}

TEST_F(MultiRankRun, TrainsWithACheckpointPerRank) {
  const int samples = 16;
  std::vector<float> x, labels;
  std::tie(x, labels) = writeLinearData(samples);
  std::vector<float> w0 = {0.5f, -0.25f};
  writeModel(dir + "/model.onnx", "w", {2, 1}, w0);
  for (auto [name, mesh] : {std::pair<std::string, std::vector<int64_t>>{"train", {2, 2}},
                            {"train-4x1", {4, 1}},
                            {"train-1", {1, 1}}}) {
    SpmdPlanBuilder b(mesh);
    buildTraining(b, dir + "/model.onnx");
    writePlan(dir + "/" + name + ".dtcp", b.plan);
  }
  std::string common = "run " + dir + "/train.dtcp --data " + dir + "/data --no-shuffle ";

  Result whole = runDtc(common + "--steps 4");
  ASSERT_EQ(whole.status, 0) << whole.output;
  std::vector<double> losses = lossesOf(whole.output);
  ASSERT_EQ(losses.size(), 4u) << whole.output; // rank 0 alone prints

  // The same steps on one process, in double.
  std::vector<double> w(w0.begin(), w0.end()), acc(samples, 0.0), expected;
  for (int step = 0; step < 4; ++step) {
    double loss = 0, g0 = 0, g1 = 0;
    for (int k = 0; k < 4; ++k) {
      int n = step * 4 + k;
      double d = x[size_t(2 * n)] * w[0] + x[size_t(2 * n + 1)] * w[1] + acc[size_t(k)] -
                 labels[size_t(n)];
      loss += 0.25 * d * d;
      g0 += x[size_t(2 * n)] * d;
      g1 += x[size_t(2 * n + 1)] * d;
      acc[size_t(k)] -= 0.1 * d * 0.5;
    }
    w[0] -= 0.1 * g0 * 0.5;
    w[1] -= 0.1 * g1 * 0.5;
    expected.push_back(loss);
  }
  for (size_t s = 0; s < 4; ++s)
    EXPECT_NEAR(losses[s], expected[s], 1e-5 + 1e-5 * expected[s]) << "step " << s + 1;

  // Two steps, a checkpoint (a file per rank), two more from it: the same
  // losses as the uninterrupted run, digit for digit.
  std::string ck = dir + "/ck";
  Result first = runDtc(common + "--steps 2 --checkpoint " + ck);
  ASSERT_EQ(first.status, 0) << first.output;
  for (int r = 0; r < 4; ++r)
    EXPECT_TRUE(std::filesystem::exists(ck + "/checkpoint.rank-" + std::to_string(r) + ".dtck"));
  Result resumed = runDtc(common + "--steps 4 --checkpoint " + ck + " --resume");
  ASSERT_EQ(resumed.status, 0) << resumed.output;
  std::vector<double> after = lossesOf(resumed.output);
  ASSERT_EQ(after.size(), 2u) << resumed.output;
  EXPECT_EQ(after[0], losses[2]);
  EXPECT_EQ(after[1], losses[3]);

  // A run stopped while its ranks were writing: checkpoints every step to
  // step 3, then rank 2's step-3 file is lost (its write never happened;
  // it still has step 2's as its previous file). Every rank resumes from
  // step 2, with the uninterrupted losses.
  std::string torn = dir + "/torn";
  Result three = runDtc(common + "--steps 3 --checkpoint " + torn + " --checkpoint-every 1");
  ASSERT_EQ(three.status, 0) << three.output;
  std::filesystem::copy_file(torn + "/checkpoint.rank-1.dtck.previous", dir + "/rank-1-step-2");
  std::filesystem::rename(torn + "/checkpoint.rank-2.dtck.previous",
                          torn + "/checkpoint.rank-2.dtck");
  Result recovered = runDtc(common + "--steps 4 --checkpoint " + torn + " --resume");
  ASSERT_EQ(recovered.status, 0) << recovered.output;
  EXPECT_TRUE(contains(recovered.output, "resuming all from step 2")) << recovered.output;
  std::vector<double> redone = lossesOf(recovered.output);
  ASSERT_EQ(redone.size(), 2u) << recovered.output;
  EXPECT_EQ(redone[0], losses[2]);
  EXPECT_EQ(redone[1], losses[3]);
  // Files two steps apart cannot resume together.
  Result five = runDtc(common + "--steps 4 --checkpoint " + torn + " --checkpoint-every 1");
  ASSERT_EQ(five.status, 0) << five.output;
  std::filesystem::copy_file(dir + "/rank-1-step-2", torn + "/checkpoint.rank-1.dtck",
                             std::filesystem::copy_options::overwrite_existing);
  std::filesystem::remove(torn + "/checkpoint.rank-1.dtck.previous");
  Result apart = runDtc(common + "--steps 4 --checkpoint " + torn + " --resume");
  EXPECT_NE(apart.status, 0);
  EXPECT_TRUE(contains(apart.output, "holds step 4, another rank step 2, and its previous file "
                                     "is not of step 2: the ranks cannot resume together"))
      << apart.output;

  // A checkpoint of another mesh, or of another rank count: converted as
  // it is read, the losses going on as the uninterrupted run's.
  std::string two = dir + "/ck-two";
  ASSERT_EQ(runDtc(common + "--steps 2 --checkpoint " + two).status, 0);
  for (std::string other : {"train-4x1", "train-1"}) {
    std::string copy = dir + "/ck-" + other;
    std::filesystem::copy(two, copy);
    Result converted = runDtc("run " + dir + "/" + other + ".dtcp --data " + dir +
                              "/data --no-shuffle --steps 4 --checkpoint " + copy + " --resume");
    EXPECT_EQ(converted.status, 0) << converted.output;
    EXPECT_TRUE(contains(converted.output, "was written by another split of the model (mesh "
                                           "2x2, 4 ranks); converted to this plan's (mesh " +
                                               std::string(other == "train-1" ? "1x1, 1 rank"
                                                                              : "4x1, 4 ranks")))
        << converted.output;
    std::vector<double> went = lossesOf(converted.output);
    ASSERT_EQ(went.size(), 2u) << converted.output;
    EXPECT_NEAR(went[0], losses[2], 1e-5 * std::abs(losses[2])) << other;
    EXPECT_NEAR(went[1], losses[3], 1e-5 * std::abs(losses[3])) << other;
  }

  // The weights are replicated: rank 0 exports them, once.
  Result exported = runDtc(common + "--steps 1 --export " + dir + "/out.onnx");
  EXPECT_EQ(exported.status, 0) << exported.output;
  EXPECT_EQ(count(exported.output, "with 1 trained initializers"), 1u) << exported.output;
  EXPECT_TRUE(std::filesystem::exists(dir + "/out.onnx"));
}

/// Marks `ids`, the program's last buffers, stashed, with room for `slots`
/// copies of them.
void stash(SpmdPlanBuilder &b, const std::vector<uint32_t> &ids, int64_t slots) {
  plan::RankProgram &program = *b.program;
  int64_t begin = program.buffers(int(ids.front())).offset(), end = program.arena_bytes();
  for (uint32_t id : ids)
    program.mutable_buffers(int(id))->set_stash(1);
  plan::Stash *stash = program.add_stashes();
  stash->set_offset(begin);
  stash->set_bytes(end - begin);
  stash->set_slots(uint32_t(slots));
  program.set_arena_bytes(begin + slots * (end - begin));
}

plan::Transfer toStage(int64_t stage) {
  plan::Transfer t;
  t.mutable_along()->set_axis(0);
  t.mutable_along()->set_coordinate(stage);
  return t;
}

/// y = (x w1) w2 trained with SGD on mean squared error (0.25 d^2 summed
/// over a micro-batch's 4 rows), as 2 pipeline stages (mesh axis pp) of 2
/// data-parallel ranks (axis dp), 2 micro-batches a step: stage 0 computes
/// h = x w1 and sends it, stage 1 the rest and the loss; stage 1's backward
/// sends dL/dh back. Each stage accumulates its gradient per micro-batch
/// (an update copied into the accumulator after each backward part),
/// all-reduces it over dp and steps once per step.
plan::Plan pipelinedTraining(plan::PipelineSchedule schedule, const std::string &model) {
  const int64_t microBatches = 2;
  SpmdPlanBuilder first({2, 2}), second({2, 2});
  auto common = [&](SpmdPlanBuilder &b, const std::string &w, const std::vector<int64_t> &shape,
                    uint32_t &weight, uint32_t &accumulator) {
    b.plan.set_model(model);
    b.input("x", plan::F32, {4, 2}, {{1}, {}});
    b.input("labels", plan::F32, {4, 1}, {{1}, {}}, plan::LABELS);
    uint32_t lr = b.input("optimizer.lr", plan::F32, {}, {}, plan::LEARNING_RATE);
    weight = b.parameter(initializer(w), plan::F32, shape);
    plan::ParameterSource zeros = initializer(w + ".grad");
    zeros.set_zeros(true);
    zeros.set_accumulator(true);
    accumulator = b.parameter(zeros, plan::F32, shape);
    return lr;
  };
  // new = old - lr * gradient / micro-batches
  ExprNodes step = {{plan::MUL, {1, 2}, 0}, {plan::CONSTANT, {}, 1.0 / microBatches},
                    {plan::MUL, {3, 4}, 0}, {plan::SUB, {0, 5}, 0}};

  uint32_t w1, acc1;
  uint32_t lr = common(first, "w1", {2, 2}, w1, acc1);
  uint32_t h = first.buffer(plan::F32, {2, 2}), gh = first.buffer(plan::F32, {2, 2});
  uint32_t gw1 = first.buffer(plan::F32, {2, 2}), acc1New = first.buffer(plan::F32, {2, 2});
  uint32_t sum1 = first.buffer(plan::F32, {2, 2}), w1New = first.buffer(plan::F32, {2, 2});
  uint32_t xs = first.buffer(plan::F32, {2, 2}, "x.kept");
  stash(first, {xs}, plan::stashSlots(schedule, 2, 0, microBatches));
  first.instruction({0}, xs).mutable_copy(); // x: buffer 0
  first.instruction({xs, w1}, h).mutable_matmul();
  plan::Instruction *send = first.program->add_instructions();
  send->add_inputs(h);
  *send->mutable_send() = toStage(1);
  first.program->set_forward_end(3);
  *first.instruction({}, gh).mutable_recv() = toStage(1);
  first.instruction({xs, gh}, gw1).mutable_matmul()->set_transpose_lhs(true);
  expression(first, {acc1, gw1}, acc1New, {{plan::ADD, {0, 1}, 0}});
  first.program->set_accumulate_end(6);
  first.collective(plan::ALL_REDUCE, {1}, acc1, sum1);
  expression(first, {w1, lr, sum1}, w1New, step);

  uint32_t w2, acc2;
  lr = common(second, "w2", {2, 1}, w2, acc2);
  uint32_t y = second.buffer(plan::F32, {2, 1}), square = second.buffer(plan::F32, {2, 1});
  uint32_t part = second.buffer(plan::F32, {1, 1}), loss = second.buffer(plan::F32, {1, 1});
  uint32_t gy = second.buffer(plan::F32, {2, 1}), gw2 = second.buffer(plan::F32, {2, 1});
  uint32_t acc2New = second.buffer(plan::F32, {2, 1}), back = second.buffer(plan::F32, {2, 2});
  uint32_t sum2 = second.buffer(plan::F32, {2, 1}), w2New = second.buffer(plan::F32, {2, 1});
  uint32_t hs = second.buffer(plan::F32, {2, 2}, "h.kept");
  uint32_t labels = second.buffer(plan::F32, {2, 1}, "labels.kept");
  uint32_t d = second.buffer(plan::F32, {2, 1}, "d");
  stash(second, {hs, labels, d}, plan::stashSlots(schedule, 2, 1, microBatches));
  *second.instruction({}, hs).mutable_recv() = toStage(0);
  second.instruction({hs, w2}, y).mutable_matmul();
  second.instruction({1}, labels).mutable_copy(); // labels: buffer 1
  expression(second, {y, labels}, d, {{plan::SUB, {0, 1}, 0}});
  expression(second, {d}, square,
             {{plan::MUL, {0, 0}, 0}, {plan::CONSTANT, {}, 0.25}, {plan::MUL, {1, 2}, 0}});
  plan::Reduce *sum = second.instruction({square}, part).mutable_reduce();
  sum->set_kind(plan::REDUCE_SUM);
  sum->add_axes(0);
  second.collective(plan::ALL_REDUCE, {1}, part, loss);
  second.program->set_forward_end(7);
  expression(second, {d}, gy, {{plan::CONSTANT, {}, 0.5}, {plan::MUL, {0, 1}, 0}});
  second.instruction({hs, gy}, gw2).mutable_matmul()->set_transpose_lhs(true);
  expression(second, {acc2, gw2}, acc2New, {{plan::ADD, {0, 1}, 0}});
  second.instruction({gy, w2}, back).mutable_matmul()->set_transpose_rhs(true);
  plan::Instruction *sendBack = second.program->add_instructions();
  sendBack->add_inputs(back);
  *sendBack->mutable_send() = toStage(0);
  second.program->set_accumulate_end(12);
  second.collective(plan::ALL_REDUCE, {1}, acc2, sum2);
  expression(second, {w2, lr, sum2}, w2New, step);

  // The graph's outputs: the loss, then each stage's new weight and
  // accumulation, which the other stage leaves to it.
  std::vector<std::tuple<std::string, uint32_t, uint32_t, uint32_t>> outputs = {
      {"loss", 1, loss, 0}, {"w1.new", 0, w1New, w1}, {"w1.grad.new", 0, acc1New, acc1},
      {"w2.new", 1, w2New, w2}, {"w2.grad.new", 1, acc2New, acc2}};
  plan::Plan plan = first.plan;
  plan.clear_ranks();
  *plan.add_ranks() = *first.program;
  *plan.add_ranks() = *second.program;
  for (auto &[name, stage, id, parameter] : outputs) {
    plan::Tensor *tensor = plan.add_outputs();
    tensor->set_name(name);
    plan::RankProgram *program = plan.mutable_ranks(int(stage));
    *tensor->mutable_type() = program->buffers(int(id)).type();
    program->add_outputs(id);
    plan.mutable_ranks(1 - int(stage))->add_outputs(plan::kNoBuffer);
    if (name != "loss") {
      plan::ParameterUpdate *update = program->add_updates();
      update->set_output(uint32_t(plan.outputs_size() - 1));
      update->set_buffer(parameter);
    }
  }
  plan.mutable_mesh()->mutable_axes(0)->set_name("pp");
  plan.mutable_mesh()->mutable_axes(1)->set_name("dp");
  plan.clear_program_of_rank();
  for (uint32_t stage : {0, 0, 1, 1})
    plan.add_program_of_rank(stage);
  plan::Training *t = plan.mutable_training();
  t->set_loss("mse");
  t->set_optimizer("sgd");
  t->set_learning_rate(0.1);
  t->set_schedule("constant");
  t->set_micro_batches(microBatches);
  t->mutable_pipeline()->set_stages(2);
  t->mutable_pipeline()->set_schedule(schedule);
  t->mutable_pipeline()->set_axis(0);
  return plan;
}

std::vector<float> initializerValues(const std::string &path, const std::string &name) {
  ::onnx::ModelProto model;
  EXPECT_TRUE(model.ParseFromString(testsupport::readBytes(path))) << path;
  for (const ::onnx::TensorProto &init : model.graph().initializer())
    if (init.name() == name) {
      std::vector<float> values(init.raw_data().size() / 4);
      std::memcpy(values.data(), init.raw_data().data(), values.size() * 4);
      return values;
    }
  ADD_FAILURE() << path << " has no initializer '" << name << "'";
  return {};
}

TEST_F(MultiRankRun, TrainsPipelineStagesLikeOneDevice) {
  const int samples = 32, steps = 4;
  std::vector<float> x, labels;
  std::tie(x, labels) = writeLinearData(samples);
  std::vector<float> w1Start = {0.5f, -0.25f, 0.3f, 0.8f}, w2Start = {0.7f, -0.4f};
  writeModel(dir + "/model.onnx", {{"w1", {2, 2}, w1Start}, {"w2", {2, 1}, w2Start}});
  for (auto schedule : {plan::GPIPE, plan::ONE_F_ONE_B})
    writePlan(dir + "/" + plan::scheduleName(schedule) + ".dtcp",
              pipelinedTraining(schedule, dir + "/model.onnx"));
  auto run = [&](const std::string &schedule, const std::string &flags) {
    return runDtc("run " + dir + "/" + schedule + ".dtcp --data " + dir + "/data --no-shuffle " +
                  flags);
  };

  // The same steps on one device, in double: each step's batch of 8 rows
  // as 2 micro-batches of 4.
  std::vector<double> w1(w1Start.begin(), w1Start.end()), w2(w2Start.begin(), w2Start.end());
  std::vector<double> expected;
  for (int step = 0; step < steps; ++step) {
    double loss = 0, g1[4] = {}, g2[2] = {};
    for (int n = step * 8; n < step * 8 + 8; ++n) {
      const float *in = &x[size_t(2 * n)];
      double h[2] = {in[0] * w1[0] + in[1] * w1[2], in[0] * w1[1] + in[1] * w1[3]};
      double d = h[0] * w2[0] + h[1] * w2[1] - labels[size_t(n)];
      loss += 0.25 * d * d / 2; // the mean of the micro-batches' sums
      for (int j = 0; j < 2; ++j) {
        g2[j] += h[j] * 0.5 * d;
        for (int i = 0; i < 2; ++i)
          g1[2 * i + j] += in[i] * 0.5 * d * w2[j];
      }
    }
    for (int k = 0; k < 4; ++k)
      w1[size_t(k)] -= 0.1 * g1[k] / 2;
    for (int k = 0; k < 2; ++k)
      w2[size_t(k)] -= 0.1 * g2[k] / 2;
    expected.push_back(loss);
  }

  Result oneF = run("1f1b", "--steps 4");
  ASSERT_EQ(oneF.status, 0) << oneF.output;
  EXPECT_TRUE(contains(oneF.output, "batch 8 (2 micro-batches of 4) through 2 pipeline stages "
                                    "(1f1b)"))
      << oneF.output;
  std::vector<double> losses = lossesOf(oneF.output);
  ASSERT_EQ(losses.size(), size_t(steps)) << oneF.output; // rank 0 alone prints
  for (size_t s = 0; s < losses.size(); ++s)
    EXPECT_NEAR(losses[s], expected[s], 1e-5 + 1e-5 * expected[s]) << "step " << s + 1;
  Result gpipe = run("gpipe", "--steps 4");
  ASSERT_EQ(gpipe.status, 0) << gpipe.output;
  EXPECT_EQ(lossesOf(gpipe.output), losses);

  // Two steps, a checkpoint (each rank its stage's parameters), two more
  // from it: the uninterrupted losses.
  std::string ck = dir + "/ck";
  Result first = run("1f1b", "--steps 2 --checkpoint " + ck);
  ASSERT_EQ(first.status, 0) << first.output;
  for (int r = 0; r < 4; ++r)
    EXPECT_TRUE(std::filesystem::exists(ck + "/checkpoint.rank-" + std::to_string(r) + ".dtck"));
  Result resumed = run("1f1b", "--steps 4 --checkpoint " + ck + " --resume");
  ASSERT_EQ(resumed.status, 0) << resumed.output;
  EXPECT_EQ(lossesOf(resumed.output), std::vector<double>(losses.begin() + 2, losses.end()));

  // The export holds both stages' weights, trained.
  Result exported = run("1f1b", "--steps 4 --export " + dir + "/out.onnx");
  ASSERT_EQ(exported.status, 0) << exported.output;
  EXPECT_EQ(count(exported.output, "with 2 trained initializers"), 1u) << exported.output;
  for (auto &[name, want] : {std::pair<std::string, std::vector<double>>{"w1", w1}, {"w2", w2}}) {
    std::vector<float> got = initializerValues(dir + "/out.onnx", name);
    ASSERT_EQ(got.size(), want.size()) << name;
    for (size_t k = 0; k < got.size(); ++k)
      EXPECT_NEAR(got[k], want[k], 1e-5) << name << "[" << k << "]";
  }
}

} // namespace
