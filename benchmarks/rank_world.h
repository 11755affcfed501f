// benchmarks/rank_world.h — RankWorld: a persistent threads-backend world for timed multi-rank figures.
// Each rank builds its state once (`make`), then runs the step function it returned on command, so a
// timed Run() measures steps, not thread start-up, mesh creation or parallelization.
//
// Invariant: Run(n) returns after every rank ran n steps, or rethrows (as kAborted) the first rank error;
// the destructor stops and joins the ranks.
//
// Example:
//   RankWorld world(2, [](const comm::ProcessGroupPtr& pg) {
//     auto model = std::make_shared<Model>(pg);
//     return [model] { model->Step(); };
//   }, /*threads_per_rank=*/1);
//   world.Run(16);
#pragma once

#include <condition_variable>
#include <cstdint>
#include <functional>
#include <mutex>
#include <string>
#include <thread>

#include "comm/process_group.h"

namespace tessel::bench {

class RankWorld {
 public:
  using StepFn = std::function<void()>;
  using MakeFn = std::function<StepFn(const comm::ProcessGroupPtr& world)>;
  RankWorld(int world_size, MakeFn make, int threads_per_rank = 0);
  ~RankWorld();
  RankWorld(const RankWorld&) = delete;
  RankWorld& operator=(const RankWorld&) = delete;

  void Run(int steps);

 private:
  void RankLoop(const comm::ProcessGroupPtr& world);
  void Fail(const std::string& what);

  const int world_size_;
  const MakeFn make_;
  std::mutex mu_;
  std::condition_variable cv_;
  int64_t generation_ = 0;
  int steps_ = 0;
  int done_ = 0;
  bool stop_ = false;
  std::string error_;
  std::thread host_;
};

}  // namespace tessel::bench
