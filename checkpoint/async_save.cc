// checkpoint/async_save.cc — snapshot into reusable staging buffers, then FinishSave on a worker thread.
#include "checkpoint/async_save.h"

#include <chrono>
#include <cstring>
#include <vector>

#include "checkpoint/internal/save_engine.h"
#include "core/base/error.h"
#include "core/base/parallel.h"
#include "core/base/stream_copy.h"
#include "core/memory/allocator.h"
#include "core/tensor/copy.h"
#include "core/tensor/factory.h"

namespace tessel::checkpoint {
namespace {

// Copies `src` into `dst` (same shape and dtype; dst contiguous host memory), in parallel with streaming
// stores when src is contiguous host memory: the staging copy is read only by the writer thread, later.
// A device src goes through CopyInto (device-aware, pinned staging).
void SnapshotCopy(const Tensor& dst, const Tensor& src) {
  if (!src.is_contiguous() || !src.device().is_cpu()) {
    CopyInto(dst, src);
    return;
  }
  const int64_t n = src.numel() * ElementSize(src.dtype());
  const char* s = static_cast<const char*>(src.raw_data());
  char* d = static_cast<char*>(dst.raw_data());
  constexpr int64_t kGrain = int64_t{4} << 20;
  ParallelFor(0, (n + kGrain - 1) / kGrain, 1, [&](int64_t begin, int64_t end) {
    for (int64_t i = begin; i < end; ++i) {
      StreamCopy(d + i * kGrain, s + i * kGrain, std::min(kGrain, n - i * kGrain));
    }
  });
}

}  // namespace

AsyncSaver::AsyncSaver(const comm::ProcessGroupPtr& world) {
  if (world == nullptr) return;
  std::vector<int> all(static_cast<size_t>(world->size()));
  for (int r = 0; r < world->size(); ++r) all[static_cast<size_t>(r)] = r;
  group_ = world->NewGroup(all);
  group_->set_name(world->name() + ".async_ckpt");
}

AsyncSaver::~AsyncSaver() { JoinWorker(); }

void AsyncSaver::JoinWorker() {
  if (worker_.joinable()) worker_.join();
}

void AsyncSaver::Wait() {
  JoinWorker();
  if (pending_.valid()) pending_.get();
}

std::shared_future<SaveResult> AsyncSaver::Save(const StateDict& state_dict, const std::string& dir,
                                                const SaveOptions& options) {
  const auto t0 = std::chrono::steady_clock::now();
  JoinWorker();  // a second save waits for the first; the first's error stays on its future
  auto prepared = std::make_shared<internal::PreparedSave>(internal::PrepareSave(state_dict, dir, group_, options));
  std::vector<bool> mine(prepared->entries.size(), false);
  for (int i : prepared->global.writes[static_cast<size_t>(prepared->rank)]) mine[static_cast<size_t>(i)] = true;
  // The snapshot (a staging allocation that doubles this rank's footprint, the copies) can fail on one rank
  // (out of memory): every rank learns it before any worker starts. It used to throw on that rank only,
  // after PrepareSave had moved metadata.json aside, while the others' workers waited in FinishSave's
  // first exchange until the timeout.
  std::exception_ptr snapshot_error;
  try {
    for (size_t i = 0; i < prepared->entries.size(); ++i) {
      internal::SaveEntry& e = prepared->entries[i];
      if (e.kind != ItemKind::kTensor) continue;
      if (!mine[i]) {
        e.shard.local = Tensor();  // another rank writes it: no copy, no reference kept
        continue;
      }
      Tensor& buf = staging_[e.fqn];
      if (!buf.defined() || buf.sizes() != e.shard.local.sizes() || buf.dtype() != e.shard.local.dtype()) {
        memory::LedgerScope ledger(memory::Ledger::kOther);
        buf = Empty(e.shard.local.sizes(), e.shard.local.dtype());
      }
      SnapshotCopy(buf, e.shard.local);
      e.shard.local = buf;
    }
    if (options.on_stage) options.on_stage(SaveStage::kSnapshotted);
  } catch (...) {
    snapshot_error = std::current_exception();
  }
  internal::AgreeBeforeWriting(*prepared, group_, snapshot_error);
  std::promise<SaveResult> promise;
  pending_ = promise.get_future().share();
  const Device device = CurrentDevice();
  worker_ = std::thread([prepared, group = group_, device, promise = std::move(promise)]() mutable {
    DeviceGuard guard(device);
    NumThreadsGuard threads(1);  // background I/O must not take the training's cores
    try {
      promise.set_value(internal::FinishSave(*prepared, group));
    } catch (...) {
      promise.set_exception(std::current_exception());
    }
  });
  last_stall_seconds_ = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
  return pending_;
}

}  // namespace tessel::checkpoint
