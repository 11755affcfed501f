// benchmarks/rank_world.cc — RankWorld's host thread, rank loop and hand-off.
#include "benchmarks/rank_world.h"

#include <chrono>
#include <exception>

#include "comm/backends/threads.h"
#include "core/base/error.h"

namespace tessel::bench {

RankWorld::RankWorld(int world_size, MakeFn make, int threads_per_rank)
    : world_size_(world_size), make_(std::move(make)) {
  host_ = std::thread([this, threads_per_rank] {
    try {
      comm::RunRanks(world_size_, [this](comm::ProcessGroupPtr world) { RankLoop(world); },
                     {.timeout = std::chrono::milliseconds(60000), .threads_per_rank = threads_per_rank});
    } catch (const std::exception& e) {
      Fail(e.what());
    }
  });
}

RankWorld::~RankWorld() {
  {
    std::lock_guard<std::mutex> lock(mu_);
    stop_ = true;
  }
  cv_.notify_all();
  host_.join();
}

void RankWorld::Fail(const std::string& what) {
  std::lock_guard<std::mutex> lock(mu_);
  if (error_.empty()) error_ = what;
  cv_.notify_all();
}

void RankWorld::Run(int steps) {
  std::unique_lock<std::mutex> lock(mu_);
  steps_ = steps;
  done_ = 0;
  ++generation_;
  cv_.notify_all();
  cv_.wait(lock, [&] { return done_ == world_size_ || !error_.empty(); });
  TESSEL_CHECK_CODE(ErrorCode::kAborted, error_.empty(), "RankWorld: a rank failed: ", error_);
}

void RankWorld::RankLoop(const comm::ProcessGroupPtr& world) {
  StepFn step;
  try {
    step = make_(world);
  } catch (const std::exception& e) {
    Fail(e.what());
    throw;
  }
  int64_t seen = 0;
  while (true) {
    int steps = 0;
    {
      std::unique_lock<std::mutex> lock(mu_);
      cv_.wait(lock, [&] { return stop_ || !error_.empty() || generation_ > seen; });
      if (stop_ || !error_.empty()) return;
      seen = generation_;
      steps = steps_;
    }
    try {
      for (int s = 0; s < steps; ++s) step();
    } catch (const std::exception& e) {
      Fail(e.what());
      throw;
    }
    std::lock_guard<std::mutex> lock(mu_);
    ++done_;
    cv_.notify_all();
  }
}

}  // namespace tessel::bench
