//===- MultiRankTest.cpp - SPMD plans on a 2x2 mesh, one rank each --------===//
//
// ctest runs it under mpirun on 4 ranks (MpiTestMain.h). Each test builds a
// small SPMD plan by hand, as the compiler writes them, and every rank runs
// its part and checks its own results exactly: collectives along every kind
// of dim and group (an all-slice undone by an all-gather), sharded
// parameters and inputs, a sharded matmul against the same matmul on one
// rank, point-to-point transfers, and two pipeline stages run in either
// schedule's order with micro-batches' stashes kept apart.
//
//===----------------------------------------------------------------------===//
#include "runtime/Executor.h"
#include "plan/PipelineSchedule.h"
#include "plan/PlanLoader.h"
#include "plan/Sharding.h"
#include "runtime/comm/MeshGroups.h"
#include "tests/unit/MpiTestMain.h"
#include "tests/unit/SpmdPlanBuilder.h"
#include "tests/unit/TestFiles.h"

#include "onnx.pb.h"

#include <gtest/gtest.h>

#include <cstring>
#include <functional>

using namespace dtc;
using namespace dtc::runtime;
using testsupport::SpmdPlanBuilder;

namespace {

Communicator *world = nullptr;

/// Every rank's `ok`, and-ed: after a failure on one rank, all ranks leave
/// together instead of waiting for it in a collective.
bool onEveryRank(bool ok) {
  int64_t all = ok;
  std::string error;
  EXPECT_TRUE(world->allReduce(&all, 1, plan::I64, Reduction::Min, error)) << error;
  return all == 1;
}

/// This rank's coordinates on the 2x2 mesh.
int rowOf() { return world->rank() / 2; }
int colOf() { return world->rank() % 2; }

template <typename T>
HostTensor tensorOf(plan::DType dtype, const std::vector<int64_t> &shape,
                    const std::function<T(int64_t)> &value) {
  HostTensor t;
  t.type = testsupport::tensorType(dtype, shape);
  int64_t count = elementCount(t.type);
  t.bytes.resize(size_t(count) * sizeof(T));
  for (int64_t i = 0; i < count; ++i) {
    T v = value(i);
    std::memcpy(t.bytes.data() + i * sizeof(T), &v, sizeof(T));
  }
  return t;
}

HostTensor floats(const std::vector<int64_t> &shape, const std::function<float(int64_t)> &value) {
  return tensorOf<float>(plan::F32, shape, value);
}

template <typename T = float> std::vector<T> valuesOf(const HostTensor &t) {
  std::vector<T> values(t.bytes.size() / sizeof(T));
  std::memcpy(values.data(), t.bytes.data(), t.bytes.size());
  return values;
}

/// Runs `plan` on this rank of the mesh with the whole `inputs`; its
/// outputs, or none when any rank failed (with this rank's failure
/// reported).
std::vector<HostTensor> runOnMesh(const plan::Plan &plan, const std::vector<HostTensor> &inputs,
                                  const std::string &model = "") {
  std::string error;
  bool valid = validatePlan(plan, error);
  EXPECT_TRUE(valid) << error;
  if (!valid) // the same on every rank
    return {};
  std::unique_ptr<MeshGroups> groups =
      MeshGroups::create(*world, plan::meshAxisSizes(plan.mesh()), error);
  EXPECT_TRUE(groups) << error;
  if (!groups)
    return {};
  auto executor = Executor::create(plan, world->rank(), model, 1, error, groups.get());
  EXPECT_TRUE(executor) << error;
  bool ok = executor != nullptr;
  for (size_t i = 0; ok && i < inputs.size(); ++i) {
    ok = executor->setInput(int(i), inputs[i], error);
    EXPECT_TRUE(ok) << error;
  }
  if (!onEveryRank(ok))
    return {};
  ok = executor->run(error);
  EXPECT_TRUE(ok) << error;
  if (!onEveryRank(ok))
    return {};
  std::vector<HostTensor> outputs;
  for (int o = 0; o < plan.outputs_size(); ++o)
    outputs.push_back(executor->output(o));
  return outputs;
}

/// The whole tensor's values on the rank's part: the rows and columns of a
/// [rows, cols] tensor starting at (row0, col0).
std::vector<float> block(const std::function<float(int64_t, int64_t)> &whole, int64_t row0,
                         int64_t rows, int64_t col0, int64_t cols) {
  std::vector<float> values;
  for (int64_t r = 0; r < rows; ++r)
    for (int64_t c = 0; c < cols; ++c)
      values.push_back(whole(row0 + r, col0 + c));
  return values;
}

TEST(MultiRank, AllReduceOverEachAxisAndBoth) {
  // Rank r holds row r of x (4x3): x[r][c] = 10 r + c.
  SpmdPlanBuilder b({2, 2});
  uint32_t x = b.input("x", plan::F32, {4, 3}, {{0, 1}, {}});
  struct Case {
    std::vector<uint32_t> axes;
    plan::ReduceKind reduction;
    std::vector<int> rows; // the rows reduced, on this rank
  };
  int i = rowOf(), j = colOf();
  std::vector<Case> cases = {{{0}, plan::REDUCE_SUM, {j, 2 + j}},
                             {{1}, plan::REDUCE_SUM, {2 * i, 2 * i + 1}},
                             {{0, 1}, plan::REDUCE_SUM, {0, 1, 2, 3}},
                             {{1}, plan::REDUCE_MAX, {2 * i + 1}},
                             {{1, 0}, plan::REDUCE_MIN, {0}}};
  for (const Case &c : cases) {
    uint32_t out = b.buffer(plan::F32, {1, 3});
    b.collective(plan::ALL_REDUCE, c.axes, x, out, 0, 0, c.reduction);
    b.output(out, "out");
  }
  auto whole = [](int64_t r, int64_t c) { return float(10 * r + c); };
  std::vector<HostTensor> outputs =
      runOnMesh(b.plan, {floats({4, 3}, [&](int64_t k) { return whole(k / 3, k % 3); })});
  ASSERT_EQ(outputs.size(), cases.size());
  for (size_t k = 0; k < cases.size(); ++k) {
    std::vector<float> expected(3, 0);
    for (int c = 0; c < 3; ++c)
      for (int r : cases[k].rows)
        expected[size_t(c)] += cases[k].reduction == plan::REDUCE_SUM ? whole(r, c) : 0;
    if (cases[k].reduction != plan::REDUCE_SUM)
      expected = block(whole, cases[k].rows[0], 1, 0, 3);
    EXPECT_EQ(valuesOf(outputs[k]), expected) << "case " << k;
  }
}

TEST(MultiRank, AllGatherAlongLeadingAndInnerDims) {
  auto x = [](int64_t r, int64_t c) { return float(100 * r + c); }; // 2x8
  auto y = [](int64_t r, int64_t c) { return float(10 * r + c); };  // 4x3
  SpmdPlanBuilder b({2, 2});
  // Dim 1 in 2 parts over axis 1; in 4 over both axes, listed either way;
  // one gathered into bytes overlapping its input; dim 0 over axis 0.
  uint32_t x1 = b.input("x1", plan::F32, {2, 8}, {{}, {1}});
  uint32_t x2 = b.input("x2", plan::F32, {2, 8}, {{}, {1, 0}});
  uint32_t x3 = b.input("x3", plan::F32, {2, 8}, {{}, {0, 1}});
  uint32_t y1 = b.input("y1", plan::F32, {4, 3}, {{0}, {}});
  uint32_t y2 = b.input("y2", plan::F32, {4, 3}, {{1, 0}, {}});
  uint32_t g1 = b.buffer(plan::F32, {2, 8}), g2 = b.buffer(plan::F32, {2, 8});
  uint32_t g3 = b.bufferAt(x3, plan::F32, {2, 8});
  uint32_t g4 = b.buffer(plan::F32, {4, 3}), g5 = b.buffer(plan::F32, {4, 3});
  b.collective(plan::ALL_GATHER, {1}, x1, g1, 1);
  b.collective(plan::ALL_GATHER, {1, 0}, x2, g2, 1);
  b.collective(plan::ALL_GATHER, {0, 1}, x3, g3, 1);
  b.collective(plan::ALL_GATHER, {0}, y1, g4, 0);
  b.collective(plan::ALL_GATHER, {1, 0}, y2, g5, 0);
  for (uint32_t g : {g1, g2, g3, g4, g5})
    b.output(g, "g");
  HostTensor xs = floats({2, 8}, [&](int64_t k) { return x(k / 8, k % 8); });
  HostTensor ys = floats({4, 3}, [&](int64_t k) { return y(k / 3, k % 3); });
  std::vector<HostTensor> outputs = runOnMesh(b.plan, {xs, xs, xs, ys, ys});
  ASSERT_EQ(outputs.size(), 5u);
  for (int k = 0; k < 3; ++k)
    EXPECT_EQ(valuesOf(outputs[size_t(k)]), block(x, 0, 2, 0, 8)) << "gather " << k;
  for (int k = 3; k < 5; ++k)
    EXPECT_EQ(valuesOf(outputs[size_t(k)]), block(y, 0, 4, 0, 3)) << "gather " << k;
}

TEST(MultiRank, ReduceScatterAlongAnInnerDim) {
  // Rank r holds z[r] (2x4) of z (4x2x4): z[r][a][c] = 100 r + 10 a + c.
  auto z = [](int64_t r, int64_t a, int64_t c) { return float(100 * r + 10 * a + c); };
  SpmdPlanBuilder b({2, 2});
  uint32_t in = b.input("z", plan::F32, {4, 2, 4}, {{0, 1}, {}, {}});
  uint32_t s1 = b.buffer(plan::F32, {1, 2, 2}), s2 = b.buffer(plan::F32, {1, 2, 1});
  b.collective(plan::REDUCE_SCATTER, {1}, in, s1, 2);
  b.collective(plan::REDUCE_SCATTER, {1, 0}, in, s2, 2);
  uint32_t s3 = b.bufferAt(in, plan::F32, {1, 2, 2}); // in place, last
  b.collective(plan::REDUCE_SCATTER, {1}, in, s3, 2, 0, plan::REDUCE_MAX);
  for (uint32_t s : {s1, s2, s3})
    b.output(s, "s");
  std::vector<HostTensor> outputs = runOnMesh(
      b.plan, {floats({4, 2, 4}, [&](int64_t k) { return z(k / 8, k / 4 % 2, k % 4); })});
  ASSERT_EQ(outputs.size(), 3u);
  int i = rowOf(), j = colOf();
  std::vector<float> sum, all, max;
  for (int a = 0; a < 2; ++a) {
    for (int c = 0; c < 2; ++c) {
      sum.push_back(z(2 * i, a, 2 * j + c) + z(2 * i + 1, a, 2 * j + c));
      max.push_back(z(2 * i + 1, a, 2 * j + c));
    }
    // Over axes {1, 0}, this rank is part j * 2 + i.
    all.push_back(z(0, a, 2 * j + i) + z(1, a, 2 * j + i) + z(2, a, 2 * j + i) +
                  z(3, a, 2 * j + i));
  }
  EXPECT_EQ(valuesOf(outputs[0]), sum);
  EXPECT_EQ(valuesOf(outputs[1]), all);
  EXPECT_EQ(valuesOf(outputs[2]), max);
}

TEST(MultiRank, BucketsEqualTheirMembersSentAlone) {
  // Each kind of bucket beside its members run one at a time: all-reduces
  // of two shapes; all-gathers along a leading and an inner dim over axes
  // listed out of order; reduce-scatters likewise, one member written over
  // its own input.
  auto x = [](int64_t k) { return float(k % 13) - 6.0f; };
  SpmdPlanBuilder b({2, 2});
  uint32_t a = b.input("a", plan::F32, {4, 6}, {{}, {}});
  uint32_t c = b.input("c", plan::F32, {8}, {{}});
  uint32_t p = b.input("p", plan::F32, {4, 6}, {{1, 0}, {}});
  uint32_t q = b.input("q", plan::F32, {4, 8}, {{}, {1, 0}});
  struct Pair {
    std::vector<uint32_t> alone, together;
  };
  auto buffers = [&](const std::vector<std::vector<int64_t>> &shapes) {
    Pair pair;
    for (const auto &shape : shapes) {
      pair.alone.push_back(b.buffer(plan::F32, shape));
      pair.together.push_back(b.buffer(plan::F32, shape));
    }
    return pair;
  };
  Pair reduced = buffers({{4, 6}, {8}});
  b.collective(plan::ALL_REDUCE, {0, 1}, a, reduced.alone[0]);
  b.collective(plan::ALL_REDUCE, {0, 1}, c, reduced.alone[1]);
  b.bucket(plan::ALL_REDUCE, {0, 1}, {a, c}, reduced.together);
  Pair gathered = buffers({{4, 6}, {4, 8}});
  b.collective(plan::ALL_GATHER, {1, 0}, p, gathered.alone[0], 0);
  b.collective(plan::ALL_GATHER, {1, 0}, q, gathered.alone[1], 1);
  b.bucket(plan::ALL_GATHER, {1, 0}, {p, q}, gathered.together, {0, 1});
  Pair scattered = buffers({{1, 6}, {4, 2}});
  b.collective(plan::REDUCE_SCATTER, {1, 0}, a, scattered.alone[0], 0);
  b.collective(plan::REDUCE_SCATTER, {1, 0}, gathered.alone[1], scattered.alone[1], 1);
  // The second member over its own input (the plan loader allows a member
  // that, and no other overlap).
  uint32_t copy = b.buffer(plan::F32, {4, 8});
  b.instruction({gathered.alone[1]}, copy).mutable_copy();
  uint32_t inPlace = b.bufferAt(copy, plan::F32, {4, 2});
  b.bucket(plan::REDUCE_SCATTER, {1, 0}, {a, copy}, {scattered.together[0], inPlace}, {0, 1});
  scattered.together[1] = inPlace;
  for (const Pair *pair : {&reduced, &gathered, &scattered})
    for (size_t m = 0; m < pair->alone.size(); ++m) {
      b.output(pair->alone[m], "alone");
      b.output(pair->together[m], "together");
    }
  int rank = world->rank();
  std::vector<HostTensor> outputs = runOnMesh(
      b.plan, {floats({4, 6}, [&](int64_t k) { return x(k + rank); }),
               floats({8}, [&](int64_t k) { return x(3 * k + rank); }),
               floats({4, 6}, [&](int64_t k) { return x(5 * k); }),
               floats({4, 8}, [&](int64_t k) { return x(7 * k + 1); })});
  ASSERT_EQ(outputs.size(), 12u);
  for (size_t k = 0; k < 12; k += 2) {
    EXPECT_EQ(valuesOf(outputs[k]), valuesOf(outputs[k + 1])) << "member " << k / 2;
    EXPECT_GT(outputs[k].bytes.size(), 0u);
  }
}

TEST(MultiRank, AllToAll) {
  // Rank r holds w[r] (2x6) of w (4x2x6), int32: w[r][a][c] = 100 r + 10 a + c.
  auto w = [](int64_t r, int64_t a, int64_t c) { return int32_t(100 * r + 10 * a + c); };
  SpmdPlanBuilder b({2, 2});
  uint32_t in = b.input("w", plan::I32, {4, 2, 6}, {{0, 1}, {}, {}});
  uint32_t t1 = b.buffer(plan::I32, {1, 4, 3}), t2 = b.buffer(plan::I32, {1, 2, 6}),
           t3 = b.buffer(plan::I32, {2, 1, 6});
  b.collective(plan::ALL_TO_ALL, {1}, in, t1, 2, 1); // inner dims both ways
  b.collective(plan::ALL_TO_ALL, {0}, in, t2, 2, 2); // split and concatenated on one dim
  b.collective(plan::ALL_TO_ALL, {1}, in, t3, 1, 0); // blocks contiguous both ways
  for (uint32_t t : {t1, t2, t3})
    b.output(t, "t");
  std::vector<HostTensor> outputs = runOnMesh(
      b.plan, {tensorOf<int32_t>(plan::I32, {4, 2, 6},
                                 [&](int64_t k) { return w(k / 12, k / 6 % 2, k % 6); })});
  ASSERT_EQ(outputs.size(), 3u);
  int i = rowOf(), j = colOf();
  std::vector<int32_t> e1, e2, e3;
  for (int p = 0; p < 2; ++p) // from the group's member p, its block for this rank
    for (int a = 0; a < 2; ++a)
      for (int c = 0; c < 3; ++c)
        e1.push_back(w(2 * i + p, a, 3 * j + c));
  for (int a = 0; a < 2; ++a)
    for (int p = 0; p < 2; ++p)
      for (int c = 0; c < 3; ++c)
        e2.push_back(w(2 * p + j, a, 3 * i + c));
  for (int p = 0; p < 2; ++p)
    for (int c = 0; c < 6; ++c)
      e3.push_back(w(2 * i + p, j, c));
  EXPECT_EQ(valuesOf<int32_t>(outputs[0]), e1);
  EXPECT_EQ(valuesOf<int32_t>(outputs[1]), e2);
  EXPECT_EQ(valuesOf<int32_t>(outputs[2]), e3);
}

TEST(MultiRank, AllSliceKeepsTheRanksPartAndAllGatherUndoesIt) {
  // z (4x6) and w (2x4, int32) are whole on every rank: z[r][c] = 10 r + c.
  auto z = [](int64_t r, int64_t c) { return float(10 * r + c); };
  SpmdPlanBuilder b({2, 2});
  uint32_t in = b.input("z", plan::F32, {4, 6});
  uint32_t w = b.input("w", plan::I32, {2, 4});
  uint32_t s1 = b.buffer(plan::F32, {2, 6}), s2 = b.buffer(plan::F32, {4, 3}),
           s3 = b.buffer(plan::F32, {1, 6}), s4 = b.buffer(plan::F32, {1, 6}),
           s5 = b.buffer(plan::I32, {2, 2});
  b.collective(plan::ALL_SLICE, {0}, in, s1, 0);
  b.collective(plan::ALL_SLICE, {1}, in, s2, 1);
  b.collective(plan::ALL_SLICE, {0, 1}, in, s3, 0);
  b.collective(plan::ALL_SLICE, {1, 0}, in, s4, 0);
  b.collective(plan::ALL_SLICE, {1}, w, s5, 1);
  // Gathered over the same axes, in the same order: the whole tensor again.
  uint32_t g1 = b.buffer(plan::F32, {4, 6}), g2 = b.buffer(plan::F32, {4, 6}),
           g3 = b.buffer(plan::F32, {4, 6}), g4 = b.buffer(plan::F32, {4, 6});
  b.collective(plan::ALL_GATHER, {0}, s1, g1, 0);
  b.collective(plan::ALL_GATHER, {1}, s2, g2, 1);
  b.collective(plan::ALL_GATHER, {0, 1}, s3, g3, 0);
  b.collective(plan::ALL_GATHER, {1, 0}, s4, g4, 0);
  uint32_t s6 = b.bufferAt(in, plan::F32, {2, 6}); // in place, last
  b.collective(plan::ALL_SLICE, {1}, in, s6, 0);
  for (uint32_t o : {s1, s2, s3, s4, s5, g1, g2, g3, g4, s6})
    b.output(o, "o");
  std::vector<HostTensor> outputs =
      runOnMesh(b.plan, {floats({4, 6}, [&](int64_t k) { return z(k / 6, k % 6); }),
                         tensorOf<int32_t>(plan::I32, {2, 4},
                                           [](int64_t k) { return int32_t(k * 7 - 20); })});
  ASSERT_EQ(outputs.size(), 10u);
  int i = rowOf(), j = colOf();
  EXPECT_EQ(valuesOf(outputs[0]), block(z, 2 * i, 2, 0, 6));
  EXPECT_EQ(valuesOf(outputs[1]), block(z, 0, 4, 3 * j, 3));
  EXPECT_EQ(valuesOf(outputs[2]), block(z, 2 * i + j, 1, 0, 6)); // part i * 2 + j
  EXPECT_EQ(valuesOf(outputs[3]), block(z, 2 * j + i, 1, 0, 6)); // over {1, 0}: j * 2 + i
  std::vector<int32_t> ints;
  for (int r = 0; r < 2; ++r)
    for (int c = 0; c < 2; ++c)
      ints.push_back(int32_t((r * 4 + 2 * j + c) * 7 - 20));
  EXPECT_EQ(valuesOf<int32_t>(outputs[4]), ints);
  for (int k = 5; k < 9; ++k)
    EXPECT_EQ(valuesOf(outputs[size_t(k)]), block(z, 0, 4, 0, 6)) << "round trip " << k - 5;
  EXPECT_EQ(valuesOf(outputs[9]), block(z, 2 * j, 2, 0, 6));
}

/// An ONNX model of float initializers (name, dims), element k = `value`(k
/// as row, col of a 2-D shape).
std::string writeModel(const std::vector<std::pair<std::string, std::vector<int64_t>>> &inits,
                       const std::function<float(int64_t, int64_t)> &value) {
  ::onnx::ModelProto model;
  model.set_ir_version(9);
  model.mutable_graph()->set_name("g");
  for (const auto &[name, dims] : inits) {
    ::onnx::TensorProto *t = model.mutable_graph()->add_initializer();
    t->set_name(name);
    t->set_data_type(::onnx::TensorProto::FLOAT);
    for (int64_t d : dims)
      t->add_dims(d);
    for (int64_t k = 0; k < dims[0] * dims[1]; ++k)
      t->add_float_data(value(k / dims[1], k % dims[1]));
  }
  // Each rank is a process of its own: a folder of its own.
  std::string path = testsupport::makeTempDir("multirank") + "/model.onnx";
  testsupport::writeBytes(path, model.SerializeAsString());
  return path;
}

plan::ParameterSource initializer(const std::string &name) {
  plan::ParameterSource source;
  source.set_initializer(name);
  return source;
}

TEST(MultiRank, ShardedParametersFromOnnx) {
  auto value = [](int64_t r, int64_t c) { return float(10 * r + c); };
  std::string model = writeModel({{"w", {3, 4}}, {"v", {4, 4}}}, value);
  SpmdPlanBuilder b({2, 2});
  b.output(b.parameter(initializer("w"), plan::F32, {3, 4}, {{}, {1}}), "w");
  b.output(b.parameter(initializer("v"), plan::F32, {4, 4}, {{0}, {1}}), "v");
  std::vector<HostTensor> outputs = runOnMesh(b.plan, {}, model);
  ASSERT_EQ(outputs.size(), 2u);
  int i = rowOf(), j = colOf();
  EXPECT_EQ(valuesOf(outputs[0]), block(value, 0, 3, 2 * j, 2));
  EXPECT_EQ(valuesOf(outputs[1]), block(value, 2 * i, 2, 2 * j, 2));

  // A model whose initializer the parts do not tile.
  std::string wider = writeModel({{"w", {3, 6}}, {"v", {4, 4}}}, value);
  std::string error;
  auto groups = MeshGroups::create(*world, {2, 2}, error);
  ASSERT_TRUE(groups) << error;
  EXPECT_FALSE(Executor::create(b.plan, world->rank(), wider, 1, error, groups.get()));
  EXPECT_NE(error.find("parameter 'w': the model's initializer is [3,6], not cut into [1,2] "
                       "parts of the plan's [3,2]"),
            std::string::npos)
      << error;
}

TEST(MultiRank, ShardedPaddedParameterFromOnnx) {
  // A [3,5] initializer padded to [4,8], each rank a [2,4] block: rank
  // (0,0) all model, (0,1) columns 4..7 (one of the model's), (1,*) row 3
  // padding.
  auto value = [](int64_t r, int64_t c) { return float(10 * r + c + 1); };
  std::string model = writeModel({{"w", {3, 5}}}, value);
  plan::ParameterSource w = initializer("w");
  w.add_model_shape(3);
  w.add_model_shape(5);
  SpmdPlanBuilder b({2, 2});
  b.output(b.parameter(w, plan::F32, {4, 8}, {{0}, {1}}), "w");
  std::vector<HostTensor> outputs = runOnMesh(b.plan, {}, model);
  ASSERT_EQ(outputs.size(), 1u);
  auto padded = [&](int64_t r, int64_t c) { return r < 3 && c < 5 ? value(r, c) : 0.f; };
  EXPECT_EQ(valuesOf(outputs[0]), block(padded, 2 * rowOf(), 2, 4 * colOf(), 4));

  // A model whose initializer is not the shape the plan pads.
  std::string other = writeModel({{"w", {3, 6}}}, value);
  std::string error;
  auto groups = MeshGroups::create(*world, {2, 2}, error);
  ASSERT_TRUE(groups) << error;
  EXPECT_FALSE(Executor::create(b.plan, world->rank(), other, 1, error, groups.get()));
  EXPECT_NE(error.find("parameter 'w': " + other +
                       ": initializer 'w' is [3, 6] but the plan pads it from [3, 5]"),
            std::string::npos)
      << error;
}

TEST(MultiRank, ShardedSeededParameter) {
  plan::ParameterSource source = initializer("s");
  source.mutable_seeded()->set_mean(0.5);
  source.mutable_seeded()->set_std(2);
  source.mutable_seeded()->set_seed(7);
  for (int64_t d : {4, 6})
    source.mutable_seeded()->add_shape(d);
  SpmdPlanBuilder b({2, 2});
  // Dim 0 over axis 1, dim 1 over axis 0.
  b.output(b.parameter(source, plan::F32, {4, 6}, {{1}, {0}}), "s");
  std::vector<HostTensor> outputs = runOnMesh(b.plan, {});
  ASSERT_EQ(outputs.size(), 1u);
  std::vector<float> whole(24);
  fillSeeded(source, testsupport::tensorType(plan::F32, {4, 6}), whole.data());
  auto value = [&](int64_t r, int64_t c) { return whole[size_t(r * 6 + c)]; };
  EXPECT_EQ(valuesOf(outputs[0]), block(value, 2 * colOf(), 2, 3 * rowOf(), 3));
}

TEST(MultiRank, ShardedInputFromTheWholeTensor) {
  auto value = [](int64_t r, int64_t c) { return float(10 * r + c); };
  SpmdPlanBuilder b({2, 2});
  b.output(b.input("x", plan::F32, {4, 6}, {{0}, {1}}), "x");
  HostTensor x = floats({4, 6}, [&](int64_t k) { return value(k / 6, k % 6); });
  std::vector<HostTensor> outputs = runOnMesh(b.plan, {x});
  ASSERT_EQ(outputs.size(), 1u);
  EXPECT_EQ(valuesOf(outputs[0]), block(value, 2 * rowOf(), 2, 3 * colOf(), 3));

  // The input is given whole, never as the rank's part.
  std::string error;
  auto groups = MeshGroups::create(*world, {2, 2}, error);
  ASSERT_TRUE(groups) << error;
  auto executor = Executor::create(b.plan, world->rank(), "", 1, error, groups.get());
  ASSERT_TRUE(executor) << error;
  EXPECT_FALSE(executor->setInput(0, floats({2, 3}, [](int64_t) { return 0.f; }), error));
  EXPECT_NE(error.find("input 'x': expected f32[4,6], given f32[2,3]"), std::string::npos)
      << error;
}

TEST(MultiRank, RowShardedMatMulThenGatherEqualsOneRank) {
  // Small integers: every summation order gives the same floats.
  auto x = [](int64_t k) { return float((k * 5) % 7 - 3); };
  std::vector<float> w(15);
  for (int k = 0; k < 15; ++k)
    w[size_t(k)] = float(k % 5 - 2);

  SpmdPlanBuilder sharded({2, 2});
  uint32_t xs = sharded.input("x", plan::F32, {8, 5}, {{0, 1}, {}});
  uint32_t ws = sharded.constant(w, {5, 3});
  uint32_t ys = sharded.buffer(plan::F32, {2, 3});
  sharded.instruction({xs, ws}, ys).mutable_matmul();
  uint32_t gathered = sharded.buffer(plan::F32, {8, 3});
  sharded.collective(plan::ALL_GATHER, {0, 1}, ys, gathered, 0);
  sharded.output(gathered, "y");

  SpmdPlanBuilder single({1});
  uint32_t x1 = single.input("x", plan::F32, {8, 5});
  uint32_t w1 = single.constant(w, {5, 3});
  uint32_t y1 = single.buffer(plan::F32, {8, 3});
  single.instruction({x1, w1}, y1).mutable_matmul();
  single.output(y1, "y");

  HostTensor input = floats({8, 5}, x);
  std::vector<HostTensor> outputs = runOnMesh(sharded.plan, {input});
  ASSERT_EQ(outputs.size(), 1u);
  std::string error;
  auto alone = Executor::create(single.plan, 0, "", 1, error);
  ASSERT_TRUE(alone) << error;
  ASSERT_TRUE(alone->setInput(0, input, error)) << error;
  ASSERT_TRUE(alone->run(error)) << error;
  EXPECT_EQ(valuesOf(outputs[0]), valuesOf(alone->output(0)));
}

TEST(MultiRank, SendAndReceiveBetweenPairs) {
  // Ranks 0-1 and 2-3 swap their rows of x: the even rank sends first,
  // the odd one receives first (sends are buffered, receives wait; each
  // meets its match in program order).
  SpmdPlanBuilder b({2, 2});
  uint32_t x = b.input("x", plan::F32, {4, 3}, {{0, 1}, {}});
  uint32_t y = b.buffer(plan::F32, {1, 3});
  b.output(y, "y");
  plan::RankProgram shared = b.plan.ranks(0);
  b.plan.clear_ranks();
  b.plan.clear_program_of_rank();
  for (int r = 0; r < 4; ++r) {
    plan::RankProgram *p = b.plan.add_ranks();
    *p = shared;
    b.plan.add_program_of_rank(uint32_t(r));
    int peer = r ^ 1;
    plan::Instruction send, recv;
    send.add_inputs(x);
    send.mutable_send()->set_peer(peer);
    recv.add_outputs(y);
    recv.mutable_recv()->set_peer(peer);
    *p->add_instructions() = r % 2 ? recv : send;
    *p->add_instructions() = r % 2 ? send : recv;
  }
  auto whole = [](int64_t k) { return float(10 * k + 1); };
  std::vector<HostTensor> out = runOnMesh(b.plan, {floats({4, 3}, whole)});
  ASSERT_EQ(out.size(), 1u);
  int peer = world->rank() ^ 1;
  EXPECT_EQ(valuesOf(out[0]), block([&](int64_t r, int64_t c) { return whole(r * 3 + c); },
                                    peer, 1, 0, 3));

  // One process has no peer to send to.
  std::string error;
  EXPECT_FALSE(Executor::create(b.plan, 0, "", 1, error));
  EXPECT_NE(error.find("send to rank 1: this rank runs alone (run the plan's ranks with dtc "
                       "run -n N)"),
            std::string::npos)
      << error;
}

/// One node of an elementwise expression: op over earlier nodes (INPUT:
/// over the instruction's input `args[0]`), with a constant's value.
struct Node {
  plan::ExprOp op;
  std::vector<uint32_t> args;
  double value = 0;
};

void elementwise(SpmdPlanBuilder &b, const std::vector<uint32_t> &inputs, uint32_t output,
                 const std::vector<Node> &nodes) {
  plan::Elementwise *e = b.instruction(inputs, output).mutable_elementwise();
  for (const Node &n : nodes) {
    plan::ExprNode *node = e->add_nodes();
    node->set_op(n.op);
    for (uint32_t a : n.args)
      node->add_args(a);
    node->set_value(n.value);
    node->set_dtype(plan::F32);
  }
}

/// A stashed buffer of `n` floats after the program's others, with room
/// for `slots` copies.
uint32_t stashed(SpmdPlanBuilder &b, int64_t n, const std::string &name, int64_t slots) {
  uint32_t id = b.buffer(plan::F32, {n}, name);
  plan::RankProgram &program = *b.program;
  program.mutable_buffers(int(id))->set_stash(1);
  plan::Stash *stash = program.add_stashes();
  stash->set_offset(program.buffers(int(id)).offset());
  stash->set_bytes(n * 4);
  stash->set_slots(uint32_t(slots));
  program.set_arena_bytes(program.buffers(int(id)).offset() + slots * n * 4);
  return id;
}

plan::Transfer toStage(int64_t stage) {
  plan::Transfer t;
  t.mutable_along()->set_axis(0);
  t.mutable_along()->set_coordinate(stage);
  return t;
}

/// Two pipeline stages along axis 0 of the 2x2 mesh that exchange `n`
/// floats each way per micro-batch. Stage 0's forward keeps s = x (stashed)
/// and sends it; stage 1's receives it as h (stashed) and computes the
/// loss, sum(h); its backward sends g = 2h back, and stage 0's computes
/// echo = 10 s + g: 12 x while the stash still holds the micro-batch's s.
plan::Plan twoStagePlan(plan::PipelineSchedule schedule, int64_t microBatches, int64_t n) {
  SpmdPlanBuilder first({2, 2}), second({2, 2});
  uint32_t x = first.input("x", plan::F32, {n});
  uint32_t g = first.buffer(plan::F32, {n}, "g");
  uint32_t echo = first.buffer(plan::F32, {n}, "echo");
  uint32_t s = stashed(first, n, "s", plan::stashSlots(schedule, 2, 0, microBatches));
  first.instruction({x}, s).mutable_copy();
  plan::Instruction *send = first.program->add_instructions();
  send->add_inputs(s);
  *send->mutable_send() = toStage(1);
  *first.instruction({}, g).mutable_recv() = toStage(1);
  elementwise(first, {s, g}, echo,
              {{plan::INPUT, {0}}, {plan::INPUT, {1}}, {plan::CONSTANT, {}, 10},
               {plan::MUL, {0, 2}}, {plan::ADD, {3, 1}}});
  first.program->set_forward_end(2);
  first.program->set_accumulate_end(4);

  uint32_t loss = second.buffer(plan::F32, {1}, "loss");
  uint32_t back = second.buffer(plan::F32, {n}, "g");
  uint32_t h = stashed(second, n, "h", plan::stashSlots(schedule, 2, 1, microBatches));
  *second.instruction({}, h).mutable_recv() = toStage(0);
  plan::Reduce *sum = second.instruction({h}, loss).mutable_reduce();
  sum->set_kind(plan::REDUCE_SUM);
  sum->add_axes(0);
  elementwise(second, {h}, back,
              {{plan::INPUT, {0}}, {plan::CONSTANT, {}, 2}, {plan::MUL, {0, 1}}});
  plan::Instruction *sendBack = second.program->add_instructions();
  sendBack->add_inputs(back);
  *sendBack->mutable_send() = toStage(0);
  second.program->set_forward_end(2);
  second.program->set_accumulate_end(4);
  second.program->add_outputs(loss);
  second.program->add_outputs(plan::kNoBuffer);

  plan::TensorType lossType = testsupport::tensorType(plan::F32, {1});
  first.output(echo, "loss", &lossType);
  first.program->set_outputs(0, plan::kNoBuffer);
  first.output(echo, "echo");
  plan::Plan plan = first.plan;
  *plan.add_ranks() = *second.program;
  plan.clear_program_of_rank();
  for (uint32_t stage : {0, 0, 1, 1})
    plan.add_program_of_rank(stage);
  plan.mutable_training()->set_micro_batches(microBatches);
  plan::Pipeline *pipeline = plan.mutable_training()->mutable_pipeline();
  pipeline->set_stages(2);
  pipeline->set_schedule(schedule);
  pipeline->set_axis(0);
  return plan;
}

TEST(MultiRank, PipelineStagesKeepEachMicroBatchsStashUnderEitherSchedule) {
  // 128 KiB each way: more than MPI sends eagerly, so that 1F1B's first
  // stage, sending micro-batch 1's activations while the second sends
  // micro-batch 0's gradients back, would wait forever on rendezvous sends.
  const int64_t n = 32768, microBatches = 4;
  int64_t stage = rowOf();
  auto input = [&](int64_t step, int64_t m) {
    return floats({n}, [&](int64_t i) {
      return float(step + m + 1) + 0.5f * float(colOf()) + float(i % 7);
    });
  };
  // Per schedule, what this rank saw: stage 1 each forward's loss, stage 0
  // each backward's echo.
  std::vector<std::vector<float>> seen;
  for (auto schedule : {plan::GPIPE, plan::ONE_F_ONE_B}) {
    SCOPED_TRACE(plan::scheduleName(schedule));
    plan::Plan plan = twoStagePlan(schedule, microBatches, n);
    std::string error;
    bool valid = validatePlan(plan, error);
    EXPECT_TRUE(valid) << error;
    if (!onEveryRank(valid))
      return;
    std::unique_ptr<MeshGroups> groups =
        MeshGroups::create(*world, plan::meshAxisSizes(plan.mesh()), error);
    ASSERT_TRUE(groups) << error;
    auto executor = Executor::create(plan, world->rank(), "", 1, error, groups.get());
    EXPECT_TRUE(executor) << error;
    if (!onEveryRank(executor != nullptr))
      return;
    EXPECT_TRUE(executor->pipelined());
    EXPECT_EQ(executor->hasOutput(0), stage == 1);
    EXPECT_EQ(executor->hasOutput(1), stage == 0);
    seen.emplace_back();
    bool ok = true;
    for (int64_t step = 0; step < 2 && ok; ++step) {
      for (const plan::PipelineTask &task :
           plan::pipelineOrder(schedule, 2, stage, microBatches)) {
        HostTensor x = input(step, task.microBatch);
        if (task.forward) {
          ok = executor->setInput(0, x, error) && executor->runForward(task.microBatch, error);
          EXPECT_TRUE(ok) << error;
          if (!ok)
            break;
          executor->applyForwardUpdates();
          if (stage == 1) {
            double sum = 0;
            for (float v : valuesOf(x))
              sum += v;
            std::vector<float> loss = valuesOf(executor->output(0));
            EXPECT_EQ(loss, std::vector<float>{float(sum)}) << "micro-batch " << task.microBatch;
            seen.back().insert(seen.back().end(), loss.begin(), loss.end());
          }
          continue;
        }
        ok = executor->runBackward(task.microBatch, error);
        EXPECT_TRUE(ok) << error;
        if (!ok)
          break;
        executor->applyMicroBatchUpdates();
        if (stage == 0) {
          std::vector<float> echo = valuesOf(executor->output(1)), xs = valuesOf(x);
          ASSERT_EQ(echo.size(), xs.size());
          size_t wrong = 0;
          for (size_t i = 0; i < xs.size(); ++i)
            wrong += echo[i] != 12 * xs[i];
          EXPECT_EQ(wrong, 0u) << "of micro-batch " << task.microBatch << "'s echoed values";
          seen.back().insert(seen.back().end(), echo.begin(), echo.end());
        }
      }
      ok = ok && executor->runStepEnd(error) && world->completeSends(error);
      EXPECT_TRUE(ok) << error;
    }
    // Another stage's output is no tensor.
    HostTensor other = executor->output(stage == 0 ? 0 : 1);
    EXPECT_TRUE(other.bytes.empty());
    EXPECT_EQ(other.type.shape_size(), 0);
    if (!onEveryRank(ok))
      return;
  }
  ASSERT_EQ(seen.size(), 2u);
  EXPECT_TRUE(seen[0] == seen[1]); // GPipe's and 1F1B's, bit for bit
}

TEST(MultiRank, CollectivesWithoutCommunicators) {
  // Without the mesh's communicators, a collective among several ranks
  // cannot run; one over size-1 axes is a copy, and an all-slice needs
  // none.
  SpmdPlanBuilder b({2, 2});
  uint32_t x = b.input("x", plan::F32, {4, 3}, {{0, 1}, {}});
  uint32_t out = b.buffer(plan::F32, {1, 3});
  b.collective(plan::ALL_REDUCE, {0}, x, out);
  b.output(out, "out");
  std::string error;
  EXPECT_FALSE(Executor::create(b.plan, world->rank(), "", 1, error));
  EXPECT_NE(error.find("instruction 0: ALL_REDUCE over 2 ranks needs their communicator; run "
                       "the plan under MPI (dtc run -n)"),
            std::string::npos)
      << error;

  SpmdPlanBuilder alone({1, 1});
  uint32_t y = alone.input("y", plan::F32, {2, 3}, {{0}, {1}});
  uint32_t gathered = alone.buffer(plan::F32, {2, 3});
  alone.collective(plan::ALL_GATHER, {0, 1}, y, gathered, 1);
  alone.output(gathered, "y");
  ASSERT_TRUE(validatePlan(alone.plan, error)) << error;
  auto executor = Executor::create(alone.plan, 0, "", 1, error);
  ASSERT_TRUE(executor) << error;
  HostTensor input = floats({2, 3}, [](int64_t k) { return float(k); });
  ASSERT_TRUE(executor->setInput(0, input, error)) << error;
  ASSERT_TRUE(executor->run(error)) << error;
  EXPECT_EQ(valuesOf(executor->output(0)), valuesOf(input));

  SpmdPlanBuilder sliced({2, 2});
  uint32_t z = sliced.input("z", plan::F32, {2, 4});
  uint32_t part = sliced.buffer(plan::F32, {2, 1});
  sliced.collective(plan::ALL_SLICE, {0, 1}, z, part, 1);
  sliced.output(part, "part");
  auto slicer = Executor::create(sliced.plan, world->rank(), "", 1, error);
  ASSERT_TRUE(slicer) << error;
  HostTensor whole = floats({2, 4}, [](int64_t k) { return float(k); });
  ASSERT_TRUE(slicer->setInput(0, whole, error)) << error;
  ASSERT_TRUE(slicer->run(error)) << error;
  int r = world->rank();
  EXPECT_EQ(valuesOf(slicer->output(0)), (std::vector<float>{float(r), float(4 + r)}));
}

} // namespace

int main(int argc, char **argv) {
  return testsupport::runTestsOnEveryRank(argc, argv, "dtc-multirank-tests", world);
}
