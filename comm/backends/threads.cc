// comm/backends/threads.cc — ThreadsProcessGroup (one per rank per group) and RunRanks.
//
// Data movement (no bounce buffer; each member writes only its own output and reads peers' inputs):
//   all_gather      member r copies every peer j's input into its output slice j
//   reduce_scatter  member r reduces slice r of every member's input into its output
//   all_reduce      phase 0: member r reduces chunk r of all buffers into its own chunk r;
//                   phase 1: member r copies chunk j from member j, for every j != r
//   all_to_all      member r copies, from every j, the rows j sends to r into its output
//   broadcast       every non-root member copies the root's buffer
// A barrier ends every phase, so buffers are released only after all peers finished reading them.
// Staged (messages of at most kStagedMaxBytes, the many small collectives of tensor parallelism): each
// member first copies its input into the rendezvous slot; then all_gather / reduce_scatter run as
// above on those copies and all_reduce becomes one phase (member r reduces every copy, in rank order,
// into its whole output: the same values, bit for bit). Nobody reads a member's own buffers, so it
// leaves without a barrier: one synchronization instead of two (three for all_reduce).
#include "comm/backends/threads.h"

#include <algorithm>
#include <cstdio>
#include <exception>
#include <numeric>
#include <thread>
#include <utility>

#include "comm/backends/threads_rendezvous.h"
#include "comm/collective.h"
#include "comm/comm_thread.h"
#include "comm/reduce.h"
#include "core/base/error.h"
#include "core/base/parallel.h"
#include "core/tensor/tensor_impl.h"

namespace tessel::comm {
namespace {

using threads_internal::Executor;
using threads_internal::GroupRendezvous;
using threads_internal::RankCall;
using threads_internal::ThreadsWorld;

// ---- executors (run on each member's comm thread once all members posted) ---------------------------

// Collectives moving at most this many bytes per buffer run staged (see the file comment): the extra
// copy (~10 µs at this size) costs less than the thread wake-ups a barrier needs.
constexpr int64_t kStagedMaxBytes = int64_t{256} << 10;

int64_t ChunkBegin(int64_t n, int world, int r) { return n * r / world; }

void ExecAllReduce(int rank, std::span<const RankCall* const> calls, int phase) {
  const CollectiveDesc& d = calls[rank]->desc;
  const int world = static_cast<int>(calls.size());
  const int64_t elem = ElementSize(d.dtype);
  const int64_t n = d.bytes / elem;
  char* out = static_cast<char*>(calls[rank]->output);
  if (world == 1) return;  // reducing one input is the identity for every op
  if (phase == 0) {
    const int64_t begin = ChunkBegin(n, world, rank), end = ChunkBegin(n, world, rank + 1);
    std::vector<const void*> inputs(world);
    for (int j = 0; j < world; ++j) inputs[j] = static_cast<const char*>(calls[j]->output) + begin * elem;
    ParallelReduce(d.dtype, *d.op, out + begin * elem, inputs, end - begin);
    return;
  }
  for (int j = 0; j < world; ++j) {
    if (j == rank) continue;
    const int64_t begin = ChunkBegin(n, world, j), end = ChunkBegin(n, world, j + 1);
    ParallelCopy(out + begin * elem, static_cast<const char*>(calls[j]->output) + begin * elem, (end - begin) * elem);
  }
}

// Staged all_reduce: calls[j]->input are the slot's copies of every member's buffer.
void ExecAllReduceStaged(int rank, std::span<const RankCall* const> calls, int /*phase*/) {
  const CollectiveDesc& d = calls[rank]->desc;
  std::vector<const void*> inputs(calls.size());
  for (size_t j = 0; j < calls.size(); ++j) inputs[j] = calls[j]->input;
  ParallelReduce(d.dtype, *d.op, calls[rank]->output, inputs, d.bytes / ElementSize(d.dtype));
}

void ExecAllGather(int rank, std::span<const RankCall* const> calls, int /*phase*/) {
  const int64_t bytes = calls[rank]->desc.bytes;
  char* out = static_cast<char*>(calls[rank]->output);
  for (size_t j = 0; j < calls.size(); ++j) ParallelCopy(out + j * bytes, calls[j]->input, bytes);
}

void ExecReduceScatter(int rank, std::span<const RankCall* const> calls, int /*phase*/) {
  const CollectiveDesc& d = calls[rank]->desc;
  const int world = static_cast<int>(calls.size());
  const int64_t slice_bytes = d.bytes / world;
  std::vector<const void*> inputs(world);
  for (int j = 0; j < world; ++j) inputs[j] = static_cast<const char*>(calls[j]->input) + rank * slice_bytes;
  ParallelReduce(d.dtype, *d.op, calls[rank]->output, inputs, slice_bytes / ElementSize(d.dtype));
}

void ExecAllToAll(int rank, std::span<const RankCall* const> calls, int /*phase*/) {
  const CollectiveDesc& mine = calls[rank]->desc;
  const std::vector<int64_t> out_offsets = SplitOffsets(mine.output_splits, mine.row_bytes);
  char* out = static_cast<char*>(calls[rank]->output);
  for (size_t j = 0; j < calls.size(); ++j) {
    const CollectiveDesc& peer = calls[j]->desc;
    const int64_t in_offset = SplitOffsets(peer.input_splits, peer.row_bytes)[rank];
    ParallelCopy(out + out_offsets[j], static_cast<const char*>(calls[j]->input) + in_offset,
                 peer.input_splits[rank] * peer.row_bytes);
  }
}

void ExecBroadcast(int rank, std::span<const RankCall* const> calls, int /*phase*/) {
  const CollectiveDesc& d = calls[rank]->desc;
  if (rank != d.root) ParallelCopy(calls[rank]->output, calls[d.root]->input, d.bytes);
}

void ExecBarrier(int, std::span<const RankCall* const>, int) {}

// ---- the per-rank group ---------------------------------------------------------------------------

class ThreadsProcessGroup final : public ProcessGroup {
 public:
  ThreadsProcessGroup(std::shared_ptr<GroupRendezvous> rendezvous, int rank, int num_threads)
      : rendezvous_(std::move(rendezvous)),
        rank_(rank),
        num_threads_(num_threads),
        p2p_thread_(num_threads, CurrentDevice()),
        thread_(std::make_unique<CommThread>(num_threads, CurrentDevice())) {
    rendezvous_->world()->NoteIssued(global_ranks()[rank_], rendezvous_->key(), -1);  // this thread issues on it
  }

  ~ThreadsProcessGroup() override {
    // An exception unwinding past a group with collectives in flight: fail the world first so the
    // comm thread's waits end now instead of at the timeout.
    if (std::uncaught_exceptions() > 0 && (thread_->busy() || p2p_thread_.busy())) {
      rendezvous_->world()->Abort(rendezvous_->global_ranks()[rank_],
                                  Str("an exception escaped while ", GroupLabel(name(), global_ranks()),
                                      " had collectives in flight"));
    }
    thread_.reset();  // runs (or fails) whatever is queued, then joins
    p2p_thread_.Reset();
  }

  int rank() const override { return rank_; }
  int size() const override { return rendezvous_->size(); }
  const std::vector<int>& global_ranks() const override { return rendezvous_->global_ranks(); }
  ThreadsWorld& world() const { return *rendezvous_->world(); }
  // Until this rank's queued collectives and sends / receives have run (or failed at their timeout): an isend
  // never waited on still goes out before the rank counts as departed (its receiver would fail on it).
  void WaitIdle() const {
    while (thread_->busy() || p2p_thread_.busy()) std::this_thread::sleep_for(std::chrono::milliseconds(1));
  }
  std::string backend_name() const override { return "threads"; }

  WorkPtr AllReduce(const Tensor& tensor, ReduceOp op) override {
    CollectiveDesc d = DescribeAllReduce(tensor, op, DeviceType::kCpu);
    if (Staged(d.bytes)) {
      const int64_t bytes = d.bytes;
      return Issue(std::move(d), {tensor}, tensor.raw_data(), tensor.raw_data(), 1, &ExecAllReduceStaged, bytes);
    }
    return Issue(std::move(d), {tensor}, tensor.raw_data(), tensor.raw_data(), 2, &ExecAllReduce);
  }
  WorkPtr AllGather(const Tensor& output, const Tensor& input) override {
    CollectiveDesc d = DescribeAllGather(output, input, size(), rank(), DeviceType::kCpu);
    const int64_t staged = Staged(d.bytes * size()) ? d.bytes : -1;
    return Issue(std::move(d), {output, input}, input.raw_data(), output.raw_data(), 1, &ExecAllGather, staged);
  }
  WorkPtr ReduceScatter(const Tensor& output, const Tensor& input, ReduceOp op) override {
    CollectiveDesc d = DescribeReduceScatter(output, input, op, size(), rank(), DeviceType::kCpu);
    const int64_t staged = Staged(d.bytes) ? d.bytes : -1;
    return Issue(std::move(d), {output, input}, input.raw_data(), output.raw_data(), 1, &ExecReduceScatter, staged);
  }
  WorkPtr AllToAll(const Tensor& output, const Tensor& input, const std::vector<int64_t>& output_split_sizes,
                   const std::vector<int64_t>& input_split_sizes) override {
    CollectiveDesc d =
        DescribeAllToAll(output, input, output_split_sizes, input_split_sizes, size(), DeviceType::kCpu);
    return Issue(std::move(d), {output, input}, input.raw_data(), output.raw_data(), 1, &ExecAllToAll);
  }
  WorkPtr Broadcast(const Tensor& tensor, int root) override {
    CollectiveDesc d = DescribeBroadcast(tensor, root, size(), DeviceType::kCpu);
    return Issue(std::move(d), {tensor}, tensor.raw_data(), tensor.raw_data(), 1, &ExecBroadcast);
  }
  WorkPtr Barrier() override { return Issue(CollectiveDesc{}, {}, nullptr, nullptr, 1, &ExecBarrier); }
  WorkPtr BatchP2P(const std::vector<P2POp>& ops) override;
  WorkPtr RecvAnySource(const Tensor& tensor, int tag) override;
  // Hands a batch of sends and receives (`run`, which calls RunP2P) to the p2p queue.
  WorkPtr SubmitP2P(std::function<void()> run);
  std::shared_ptr<ProcessGroup> NewGroup(const std::vector<int>& ranks) override {
    return NewGroupAgreed(ranks, "");
  }

 protected:
  // The group of `members` under rendezvous key suffix `key_suffix`, named "<name>.<name_suffix>".
  std::shared_ptr<ProcessGroup> MakeMemberGroup(const NewGroupMembers& members, const std::string& key_suffix,
                                                const std::string& name_suffix) override;

 private:
  // staged_bytes >= 0: staged mode, copying that many bytes of `input` (threads_rendezvous.h).
  WorkPtr Issue(CollectiveDesc desc, std::vector<Tensor> tensors, const void* input, void* output, int num_phases,
                Executor execute, int64_t staged_bytes = -1);
  // Whether a collective whose largest buffer has `bytes` runs staged.
  bool Staged(int64_t bytes) const { return size() > 1 && bytes <= kStagedMaxBytes; }
  std::shared_ptr<GroupRendezvous> rendezvous_;
  const int rank_;
  const int num_threads_;
  int64_t next_seq_ = 0;
  LazyCommThread p2p_thread_;  // sends and receives (comm_thread.h)
  std::unique_ptr<CommThread> thread_;  // last: destroyed first, while the members above are alive
};

WorkPtr ThreadsProcessGroup::Issue(CollectiveDesc desc, std::vector<Tensor> tensors, const void* input, void* output,
                                   int num_phases, Executor execute, int64_t staged_bytes) {
  desc.seq = next_seq_++;
  TraceCall(desc, name());
  if (!tensors.empty()) MarkWritten(tensors.front());  // the first tensor is the one written
  const std::string label = GroupLabel(name(), global_ranks());
  const auto& world = rendezvous_->world();
  world->NoteIssued(global_ranks()[rank_], rendezvous_->key(), desc.seq);
  BlockedCall wait{.rank = global_ranks()[rank_], .key = rendezvous_->key(), .seq = desc.seq,
                   .call = DescribeCall(desc, true), .label = label, .members = global_ranks()};
  WorkPtr work = thread_->Submit([this, desc = std::move(desc), tensors = std::move(tensors), input, output, num_phases,
                                  execute, staged_bytes, timeout = timeout(), label] {
    const RankCall call{desc, input, output};
    rendezvous_->RunCollective(rank_, call, num_phases, execute, timeout, label, staged_bytes);
  });
  return TrackBlockingWaitIn(world, std::move(wait), std::move(work));
}

WorkPtr ThreadsProcessGroup::BatchP2P(const std::vector<P2POp>& ops) {
  CheckP2POps(ops, rank_, size(), DeviceType::kCpu);
  TraceP2POps(ops, name());
  const std::string label = GroupLabel(name(), global_ranks());
  return SubmitP2P([this, ops, timeout = timeout(), label] { rendezvous_->RunP2P(rank_, ops, timeout, label); });
}

WorkPtr ThreadsProcessGroup::RecvAnySource(const Tensor& tensor, int tag) {
  return IssueRecvAnySource(*this, tensor, [&](std::shared_ptr<int> source) {
    const std::string label = GroupLabel(name(), global_ranks());
    return SubmitP2P([this, tensor, tag, source, timeout = timeout(), label] {
      rendezvous_->RunP2P(rank_, {P2POp{P2POp::Kind::kRecv, tensor, kAnySource, tag}}, timeout, label, source.get());
    });
  });
}

WorkPtr ThreadsProcessGroup::SubmitP2P(std::function<void()> run) {
  // Queued before it is handed over (RunP2P counts it started), and the caller's wait for it is a node of the
  // wait-for graph (P2PCallerWait): a send against a peer's collective is then a deadlock found at once.
  const auto& world = rendezvous_->world();
  const int me = global_ranks()[rank_];
  const std::string issuer = P2PIssuerKey(rendezvous_->key());
  const int64_t ticket = world->NoteBatch(me, issuer, BatchEvent::kSubmitted);
  BlockedCall wait = P2PCallerWait(me, issuer, GroupLabel(name(), global_ranks()), ticket);
  return TrackBlockingWaitIn(world, std::move(wait), p2p_thread_.Get().Submit(std::move(run)));
}

std::shared_ptr<ProcessGroup> ThreadsProcessGroup::MakeMemberGroup(const NewGroupMembers& members,
                                                             const std::string& key_suffix,
                                                             const std::string& name_suffix) {
  const std::string key = Str(rendezvous_->key(), "/", key_suffix);
  const auto& world = rendezvous_->world();
  auto group = std::make_shared<ThreadsProcessGroup>(world->GetOrCreateGroup(world, key, members.globals),
                                                     members.my_index, num_threads_);
  group->set_name(Str(name(), ".", name_suffix));
  group->set_timeout(timeout());
  return group;
}

// ---- RunRanks -------------------------------------------------------------------------------------

void RankMain(int rank, const std::shared_ptr<GroupRendezvous>& world_group, int num_threads,
              const RunRanksOptions& options, const std::function<void(ProcessGroupPtr)>& fn,
              std::exception_ptr* error) {
  DeviceGuard device_guard(Device::Cpu(rank));
  NumThreadsGuard threads_guard(num_threads);
  auto pg = std::make_shared<ThreadsProcessGroup>(world_group, rank, num_threads);
  pg->set_timeout(options.timeout);
  try {
    fn(pg);
  } catch (const std::exception& e) {
    *error = std::current_exception();
    world_group->world()->Abort(rank, e.what());
  } catch (...) {
    *error = std::current_exception();
    world_group->world()->Abort(rank, "a non-standard exception");
  }
  pg.reset();  // drains this rank's queued collectives (they fail fast if the world aborted)
  // From now on this rank will never post again: peers still waiting for it fail at once, naming it.
  world_group->world()->MarkExited(rank);
}

}  // namespace

void SetThreadsRankDeparted(const ProcessGroupPtr& group, bool departed) {
  const auto* threads = dynamic_cast<const ThreadsProcessGroup*>(group.get());
  if (threads == nullptr) return;
  const int global = threads->global_ranks()[static_cast<size_t>(threads->rank())];
  if (departed) {
    threads->WaitIdle();
    threads->world().MarkDeparted(global);
  } else {
    threads->world().Rejoin(global, group->timeout());
  }
}

void RunRanks(int world_size, const std::function<void(ProcessGroupPtr world)>& fn, const RunRanksOptions& options) {
  TESSEL_CHECK(world_size >= 1, "RunRanks: world_size must be >= 1, got ", world_size);
  TESSEL_CHECK(options.timeout.count() > 0, "RunRanks: timeout must be positive, got ", options.timeout.count(), " ms");
  const int num_threads =
      options.threads_per_rank > 0 ? options.threads_per_rank : std::max(1, HardwareConcurrency() / world_size);
  auto world = std::make_shared<ThreadsWorld>(world_size, num_threads);
  std::vector<int> all(world_size);
  std::iota(all.begin(), all.end(), 0);
  auto world_group = world->GetOrCreateGroup(world, "world", all);
  std::vector<std::exception_ptr> errors(world_size);
  std::vector<std::thread> threads;
  threads.reserve(world_size);
  for (int r = 0; r < world_size; ++r) {
    threads.emplace_back(RankMain, r, std::cref(world_group), num_threads, std::cref(options), std::cref(fn),
                         &errors[r]);
  }
  for (std::thread& t : threads) t.join();
  const int first = world->first_failed_rank();
  if (first < 0) return;
  if (errors[first]) std::rethrow_exception(errors[first]);
  for (const std::exception_ptr& e : errors) {
    if (e) std::rethrow_exception(e);
  }
  TESSEL_FAIL(ErrorCode::kAborted, world->abort_message());
}

int RunRanksWithRestarts(int world_size, int max_restarts,
                         const std::function<void(ProcessGroupPtr world, int attempt)>& fn,
                         const RunRanksOptions& options) {
  TESSEL_CHECK(max_restarts >= 0, "RunRanksWithRestarts: max_restarts must be >= 0, got ", max_restarts);
  for (int attempt = 0;; ++attempt) {
    try {
      RunRanks(world_size, [&](ProcessGroupPtr world) { fn(std::move(world), attempt); }, options);
      return attempt;
    } catch (const Error& e) {
      if (attempt >= max_restarts) throw;
      std::printf("restarting all %d ranks after attempt %d failed (restart %d of %d): %s\n", world_size, attempt,
                  attempt + 1, max_restarts, e.what());
      std::fflush(stdout);
    }
  }
}

}  // namespace tessel::comm
