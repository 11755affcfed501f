// checkpoint/async_save.h — AsyncSaver: checkpoint saves that block training only for a snapshot.
// Same role as PyTorch's torch.distributed.checkpoint.async_save (staging + a background writer).
//
// Invariant: Save() returns once this rank's share of the state (only the chunks the save plan assigns
// to it) is copied into staging memory; training may then change every tensor freely. The background
// thread writes and commits exactly that snapshot (same atomic commit as save.h). At most one save is
// in flight per saver: a second Save() first waits for the previous one. A save's error (on any rank)
// surfaces on its future, never on a later call. The saver talks through its own process group, made
// at construction, so its background collectives never interleave with the training's.
//
// Example:
//   AsyncSaver saver(world);                          // collective
//   for (int step = 0; ...; ++step) {
//     TrainStep();
//     if (step % 100 == 0) futures.push_back(saver.Save(sd, Str(root, "/step_", step)));   // collective
//   }
//   saver.Wait();                                     // rethrows the last save's error, if any
//   futures.back().get().total_bytes;
#pragma once

#include <future>
#include <map>
#include <string>
#include <thread>

#include "checkpoint/save.h"
#include "checkpoint/state_dict.h"
#include "comm/process_group.h"

namespace tessel::checkpoint {

// Not thread-safe: one thread (the training loop) calls Save/Wait.
class AsyncSaver {
 public:
  // Collective over `world` (nullptr: a single process).
  explicit AsyncSaver(const comm::ProcessGroupPtr& world);
  // Waits for the in-flight save (its error stays on its future).
  ~AsyncSaver();
  AsyncSaver(const AsyncSaver&) = delete;
  AsyncSaver& operator=(const AsyncSaver&) = delete;

  // Collective. Waits for the previous save, plans (one small all_gather), snapshots, starts the writer.
  // Planning errors (a Partial DTensor, inconsistent ranks) are thrown here, before anything is staged.
  std::shared_future<SaveResult> Save(const StateDict& state_dict, const std::string& dir,
                                      const SaveOptions& options = {});
  // Waits for the in-flight save, rethrowing its error.
  void Wait();
  // Seconds the last Save() blocked its caller (waiting for the previous save + plan + snapshot).
  double last_stall_seconds() const { return last_stall_seconds_; }

 private:
  void JoinWorker();

  comm::ProcessGroupPtr group_;
  std::thread worker_;
  std::shared_future<SaveResult> pending_;
  std::map<std::string, Tensor> staging_;  // snapshot buffers, reused across saves by FQN
  double last_stall_seconds_ = 0;
};

}  // namespace tessel::checkpoint
