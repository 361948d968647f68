//===- TrainerTest.cpp - the training loop's schedule ---------------------===//
#include "runtime/train/Trainer.h"

#include <gtest/gtest.h>

using namespace dtc;

namespace {

plan::Training schedule(const std::string &kind, int64_t warmup, int64_t total) {
  plan::Training t;
  t.set_learning_rate(0.1);
  t.set_schedule(kind);
  t.set_warmup_steps(warmup);
  t.set_total_steps(total);
  return t;
}

TEST(Trainer, ConstantScheduleKeepsThePeak) {
  plan::Training t = schedule("constant", 0, 0);
  for (int64_t step : {0, 1, 1000})
    EXPECT_DOUBLE_EQ(runtime::train::scheduledLearningRate(t, step), 0.1);
}

TEST(Trainer, CosineScheduleWarmsUpThenDecaysToZero) {
  plan::Training t = schedule("cosine", 4, 14);
  using runtime::train::scheduledLearningRate;
  EXPECT_DOUBLE_EQ(scheduledLearningRate(t, 0), 0.025); // linear warm-up, 1/4 of the peak
  EXPECT_DOUBLE_EQ(scheduledLearningRate(t, 3), 0.1);   // the peak at the last warm-up step
  EXPECT_DOUBLE_EQ(scheduledLearningRate(t, 4), 0.1);   // the decay starts from the peak
  EXPECT_NEAR(scheduledLearningRate(t, 9), 0.05, 1e-12); // half-way
  EXPECT_NEAR(scheduledLearningRate(t, 14), 0.0, 1e-12);
  EXPECT_NEAR(scheduledLearningRate(t, 100), 0.0, 1e-12); // and stays there
  for (int64_t step = 4; step < 14; ++step)
    EXPECT_GT(scheduledLearningRate(t, step), scheduledLearningRate(t, step + 1));
}

} // namespace
