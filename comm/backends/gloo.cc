// comm/backends/gloo.cc — GlooProcessGroup: header exchange + Gloo collectives on a comm thread.
#include "comm/backends/gloo.h"

#include <signal.h>

#include <csignal>

#include <gloo/allgather.h>
#include <gloo/allreduce.h>
#include <gloo/alltoall.h>
#include <gloo/alltoallv.h>
#include <gloo/barrier.h>
#include <gloo/broadcast.h>
#include <gloo/common/error.h>
#include <gloo/rendezvous/context.h>
#include <gloo/rendezvous/store.h>
#include <gloo/transport/tcp/device.h>
#include <gloo/transport/unbound_buffer.h>

#include <algorithm>
#include <cstdlib>
#include <optional>

#include "comm/backends/gloo_wait_monitor.h"
#include "comm/collective.h"
#include "comm/comm_thread.h"
#include "comm/reduce.h"
#include "core/base/error.h"
#include "core/base/parallel.h"
#include "core/memory/allocator.h"
#include "core/tensor/tensor_impl.h"

namespace tessel::comm {
namespace {

using Clock = std::chrono::steady_clock;
using std::chrono::milliseconds;

// Slots of our own traffic; Gloo's collectives use prefixes 0x01–0x08 (gloo/types.h).
uint64_t HeaderSlot(int64_t seq) { return (uint64_t{0x20} << 56) | ((static_cast<uint64_t>(seq) & 0xffffffffu) << 24); }
uint64_t P2PSlot(int tag) { return (uint64_t{0x21} << 56) | (uint64_t{static_cast<uint32_t>(tag)} << 24); }
// The slot of a send's descriptor (its bytes and dtype), which travels ahead of the payload.
uint64_t P2PDescSlot(int tag) { return (uint64_t{0x22} << 56) | (uint64_t{static_cast<uint32_t>(tag)} << 24); }

milliseconds Remaining(Clock::time_point deadline) {
  // Rounded up: a gloo wait given the truncated remainder could expire just before `deadline`, and the
  // caller, finding the deadline not yet passed, would report a timeout as a dead peer (kAborted).
  return std::max(milliseconds(1), std::chrono::ceil<milliseconds>(deadline - Clock::now()));
}

// gloo::rendezvous::Store over a comm::Store, with a key prefix per group.
class GlooStoreAdapter final : public gloo::rendezvous::Store {
 public:
  GlooStoreAdapter(comm::Store& store, std::string prefix, milliseconds timeout)
      : store_(store), prefix_(std::move(prefix)), timeout_(timeout) {}
  void set(const std::string& key, const std::vector<char>& data) override { store_.Set(prefix_ + key, data); }
  std::vector<char> get(const std::string& key) override { return store_.Get(prefix_ + key, timeout_); }
  void wait(const std::vector<std::string>& keys) override { wait(keys, timeout_); }
  void wait(const std::vector<std::string>& keys, const milliseconds& timeout) override {
    std::vector<std::string> full;
    for (const std::string& k : keys) full.push_back(prefix_ + k);
    store_.Wait(full, timeout.count() > 0 ? timeout : timeout_);
  }

 private:
  comm::Store& store_;
  std::string prefix_;
  milliseconds timeout_;
};

// ---- header: [seq, kind, dtype, bytes, root, op, row_bytes, sender, in_splits(W), out_splits(W)] ----
constexpr int kFixedFields = 8;

std::vector<int64_t> EncodeHeader(const CollectiveDesc& d, int rank, int world) {
  std::vector<int64_t> h(kFixedFields + 2 * world, 0);
  h[0] = d.seq, h[1] = static_cast<int64_t>(d.kind), h[2] = static_cast<int64_t>(d.dtype), h[3] = d.bytes;
  h[4] = d.root, h[5] = d.op ? static_cast<int64_t>(*d.op) : -1, h[6] = d.row_bytes, h[7] = rank;
  for (size_t j = 0; j < d.input_splits.size(); ++j) h[kFixedFields + j] = d.input_splits[j];
  for (size_t j = 0; j < d.output_splits.size(); ++j) h[kFixedFields + world + j] = d.output_splits[j];
  return h;
}

CollectiveDesc DecodeHeader(const std::vector<int64_t>& h, int world) {
  CollectiveDesc d;
  d.seq = h[0], d.kind = static_cast<CollectiveKind>(h[1]), d.dtype = static_cast<DType>(h[2]), d.bytes = h[3];
  d.root = static_cast<int>(h[4]);
  if (h[5] >= 0) d.op = static_cast<ReduceOp>(h[5]);
  d.row_bytes = h[6];
  if (d.kind == CollectiveKind::kAllToAll) {
    d.input_splits.assign(h.begin() + kFixedFields, h.begin() + kFixedFields + world);
    d.output_splits.assign(h.begin() + kFixedFields + world, h.end());
  }
  return d;
}

// Allocates a staging buffer counted in the "comm buffers" ledger.
std::unique_ptr<memory::Block> Staging(int64_t nbytes, Device device) {
  memory::LedgerScope scope(memory::Ledger::kCommBuffers);
  return memory::Allocate(nbytes, device);
}

// ---- data phase (comm thread, after the headers agreed) --------------------------------------------

void GlooAllReduceRaw(const std::shared_ptr<gloo::Context>& ctx, DType dtype, ReduceOp op, void* data, int64_t n,
                      uint32_t tag, milliseconds timeout) {
  gloo::AllreduceOptions opts(ctx);
  TESSEL_DISPATCH_ALL_TYPES(dtype, "all_reduce", [&] { opts.setOutput(static_cast<scalar_t*>(data), n); });
  const ReduceOp pairwise = op == ReduceOp::kAvg ? ReduceOp::kSum : op;
  opts.setReduceFunction([dtype, pairwise](void* c, const void* a, const void* b, size_t count) {
    const void* inputs[2] = {a, b};
    ReduceRange(dtype, pairwise, c, inputs, 0, static_cast<int64_t>(count));
  });
  opts.setTag(tag);
  opts.setTimeout(timeout);
  gloo::allreduce(opts);
  if (op == ReduceOp::kAvg) DivideInPlace(dtype, data, n, ctx->size);
}

void GlooAllReduce(const std::shared_ptr<gloo::Context>& ctx, const Tensor& t, ReduceOp op, uint32_t tag,
                   milliseconds timeout) {
  const int64_t n = t.numel();
  if (n == 0) return;
  const DType dtype = t.dtype();
  if (dtype != DType::kBFloat16 && dtype != DType::kFloat16) {
    GlooAllReduceRaw(ctx, dtype, op, t.raw_data(), n, tag, timeout);
    return;
  }
  // 16-bit floats: reduce in fp32 on the wire, round once at the end.
  auto staging = Staging(n * 4, t.device());
  float* f = static_cast<float*>(staging->data());
  ToFloat32(dtype, t.raw_data(), f, n);
  GlooAllReduceRaw(ctx, DType::kFloat32, op, f, n, tag, timeout);
  FromFloat32(dtype, f, t.raw_data(), n);
}

void GlooAllGather(const std::shared_ptr<gloo::Context>& ctx, const Tensor& out, const Tensor& in, uint32_t tag,
                   milliseconds timeout) {
  const int64_t bytes = in.numel() * ElementSize(in.dtype());
  if (bytes == 0) return;
  gloo::AllgatherOptions opts(ctx);
  char* out_ptr = static_cast<char*>(out.raw_data());
  char* in_ptr = static_cast<char*>(in.raw_data());
  if (in_ptr != out_ptr + ctx->rank * bytes) opts.setInput(in_ptr, bytes);  // else in place
  opts.setOutput(out_ptr, bytes * ctx->size);
  opts.setTag(tag);
  opts.setTimeout(timeout);
  gloo::allgather(opts);
}

void GlooReduceScatter(const std::shared_ptr<gloo::Context>& ctx, const Tensor& out, const Tensor& in, ReduceOp op,
                       uint32_t tag, milliseconds timeout) {
  const int world = ctx->size;
  const int64_t slice = out.numel() * ElementSize(out.dtype());
  if (slice == 0) return;
  // all_to_all: block j of `staging` is member j's slice for this rank; then reduce in rank order.
  auto staging = Staging(slice * world, out.device());
  char* s = static_cast<char*>(staging->data());
  gloo::AlltoallOptions opts(ctx);
  opts.setInput(static_cast<char*>(in.raw_data()), slice * world);
  opts.setOutput(s, slice * world);
  opts.setTag(tag);
  opts.setTimeout(timeout);
  gloo::alltoall(opts);
  std::vector<const void*> inputs(world);
  for (int j = 0; j < world; ++j) inputs[j] = s + j * slice;
  ParallelReduce(out.dtype(), op, out.raw_data(), inputs, out.numel());
}

void GlooAllToAll(const std::shared_ptr<gloo::Context>& ctx, const Tensor& out, const Tensor& in,
                  const CollectiveDesc& d, uint32_t tag, milliseconds timeout) {
  // No early return for an empty input and output: the splits differ between ranks, and gloo's alltoallv
  // posts a (zero-byte) message to and from every peer whatever the sizes, so a rank with no rows that
  // skipped the call left its peers waiting for those messages until the timeout (an idle expert rank of a
  // MoE all_to_all). It calls alltoallv like every other rank, on a dummy byte when it has no data.
  std::vector<int64_t> in_bytes, out_bytes;
  for (int64_t rows : d.input_splits) in_bytes.push_back(rows * d.row_bytes);
  for (int64_t rows : d.output_splits) out_bytes.push_back(rows * d.row_bytes);
  char dummy_in = 0, dummy_out = 0;
  char* in_ptr = in.numel() > 0 ? static_cast<char*>(in.raw_data()) : &dummy_in;
  char* out_ptr = out.numel() > 0 ? static_cast<char*>(out.raw_data()) : &dummy_out;
  gloo::AlltoallvOptions opts(ctx);
  opts.setInput(in_ptr, in_bytes);
  opts.setOutput(out_ptr, out_bytes);
  opts.setTag(tag);
  opts.setTimeout(timeout);
  gloo::alltoallv(opts);
}

void GlooBroadcast(const std::shared_ptr<gloo::Context>& ctx, const Tensor& t, int root, uint32_t tag,
                   milliseconds timeout) {
  const int64_t bytes = t.numel() * ElementSize(t.dtype());
  if (bytes == 0) return;
  gloo::BroadcastOptions opts(ctx);
  opts.setOutput(static_cast<char*>(t.raw_data()), bytes);
  opts.setRoot(root);
  opts.setTag(tag);
  opts.setTimeout(timeout);
  gloo::broadcast(opts);
}

void GlooBarrier(const std::shared_ptr<gloo::Context>& ctx, uint32_t tag, milliseconds timeout) {
  gloo::BarrierOptions opts(ctx);
  opts.setTag(tag);
  opts.setTimeout(timeout);
  gloo::barrier(opts);
}

std::shared_ptr<gloo::transport::Device> MakeDevice(const GlooOptions& options) {
  gloo::transport::tcp::attr attr;
  const std::string& m = options.master_addr;
  const bool loopback = m == "localhost" || m == "::1" || m.rfind("127.", 0) == 0;
  if (!options.iface.empty()) {
    attr.iface = options.iface;
  } else if (!options.hostname.empty()) {
    attr.hostname = options.hostname;
  } else if (loopback) {
    attr.hostname = "127.0.0.1";
  }
  try {
    return gloo::transport::tcp::CreateDevice(attr);
  } catch (const std::exception& e) {
    TESSEL_FAIL(ErrorCode::kFailedPrecondition, "gloo: cannot create the TCP device (iface '", attr.iface,
                "', hostname '", attr.hostname, "'): ", e.what(), "; set GLOO_SOCKET_IFNAME to a usable interface");
  }
}

// ---- the process group --------------------------------------------------------------------------------

class GlooProcessGroup final : public ProcessGroup {
 public:
  GlooProcessGroup(std::shared_ptr<comm::Store> store, std::shared_ptr<gloo::transport::Device> device,
                   std::string prefix, int rank, std::vector<int> global_ranks, int num_threads, milliseconds timeout,
                   std::shared_ptr<gloo_internal::WaitMonitor> monitor)
      : store_(std::move(store)),
        device_(std::move(device)),
        monitor_(std::move(monitor)),
        prefix_(std::move(prefix)),
        rank_(rank),
        global_ranks_(std::move(global_ranks)),
        num_threads_(num_threads) {
    set_timeout(timeout);
    auto context = std::make_shared<gloo::rendezvous::Context>(rank_, size());
    context->setTimeout(timeout);
    GlooStoreAdapter adapter(*store_, prefix_, timeout);
    try {
      context->connectFullMesh(adapter, device_);
    } catch (const Error&) {
      throw;
    } catch (const std::exception& e) {
      TESSEL_FAIL(ErrorCode::kAborted, "gloo: rank ", rank_, " could not connect to its ", size() - 1,
                  " peers through ", store_->Describe(), ": ", e.what());
    }
    // Every member has connected before any returns (torch's new_group waits on a store barrier too): a
    // member that dropped the group at once (an error before its first collective) closed its pairs while a
    // peer was still connecting, and the peer's next group failed with "connection closed by peer" (a
    // read-only review: 15 of 30 runs).
    if (size() > 1) {
      if (store_->Add(prefix_ + "connected", 1) == size()) store_->Set(prefix_ + "connected_all", {'1'});
      store_->Get(prefix_ + "connected_all", timeout);
    }
    context_ = std::move(context);
    monitor_->NoteIssued(prefix_, -1);  // this thread issues on the group
    thread_ = std::make_unique<CommThread>(num_threads_, CurrentDevice());
  }
  ~GlooProcessGroup() override { thread_.reset(); }

  int rank() const override { return rank_; }
  int size() const override { return static_cast<int>(global_ranks_.size()); }
  const std::vector<int>& global_ranks() const override { return global_ranks_; }
  std::string backend_name() const override { return "gloo"; }

  WorkPtr AllReduce(const Tensor& tensor, ReduceOp op) override {
    CollectiveDesc d = DescribeAllReduce(tensor, op, DeviceType::kCpu);
    return Issue(std::move(d), tensor, [=](auto& ctx, uint32_t tag, milliseconds timeout) {
      GlooAllReduce(ctx, tensor, op, tag, timeout);
    });
  }
  WorkPtr AllGather(const Tensor& output, const Tensor& input) override {
    CollectiveDesc d = DescribeAllGather(output, input, size(), rank(), DeviceType::kCpu);
    return Issue(std::move(d), output, [=](auto& ctx, uint32_t tag, milliseconds timeout) {
      GlooAllGather(ctx, output, input, tag, timeout);
    });
  }
  WorkPtr ReduceScatter(const Tensor& output, const Tensor& input, ReduceOp op) override {
    CollectiveDesc d = DescribeReduceScatter(output, input, op, size(), rank(), DeviceType::kCpu);
    return Issue(std::move(d), output, [=](auto& ctx, uint32_t tag, milliseconds timeout) {
      GlooReduceScatter(ctx, output, input, op, tag, timeout);
    });
  }
  WorkPtr AllToAll(const Tensor& output, const Tensor& input, const std::vector<int64_t>& output_split_sizes,
                   const std::vector<int64_t>& input_split_sizes) override {
    CollectiveDesc d =
        DescribeAllToAll(output, input, output_split_sizes, input_split_sizes, size(), DeviceType::kCpu);
    return Issue(d, output, [=](auto& ctx, uint32_t tag, milliseconds timeout) {
      GlooAllToAll(ctx, output, input, d, tag, timeout);
    });
  }
  WorkPtr Broadcast(const Tensor& tensor, int root) override {
    CollectiveDesc d = DescribeBroadcast(tensor, root, size(), DeviceType::kCpu);
    return Issue(std::move(d), tensor, [=](auto& ctx, uint32_t tag, milliseconds timeout) {
      GlooBroadcast(ctx, tensor, root, tag, timeout);
    });
  }
  WorkPtr Barrier() override {
    return Issue(CollectiveDesc{}, Tensor(),
                 [](auto& ctx, uint32_t tag, milliseconds timeout) { GlooBarrier(ctx, tag, timeout); });
  }
  WorkPtr BatchP2P(const std::vector<P2POp>& ops) override;
  std::shared_ptr<ProcessGroup> NewGroup(const std::vector<int>& ranks) override;

 private:
  using Body = std::function<void(const std::shared_ptr<gloo::Context>&, uint32_t tag, milliseconds timeout)>;
  WorkPtr Issue(CollectiveDesc desc, const Tensor& written, Body body);
  // Comm thread: fails at once if broken, exchanges headers, runs the body, maps Gloo errors.
  void RunChecked(const CollectiveDesc& d, const std::string& label, milliseconds timeout, const Body& body);
  void ExchangeHeaders(const CollectiveDesc& d, const std::string& label, milliseconds timeout);
  // Throws (breaking the group) when any peer's header operation failed: kDeadlineExceeded naming the
  // peers that never came, or kAborted naming the peers whose connection closed.
  void ReportExchangeFailure(const CollectiveDesc& d, const std::string& label, milliseconds timeout,
                             Clock::time_point deadline, const std::vector<int>& peers,
                             const std::vector<std::unique_ptr<gloo::transport::UnboundBuffer>>& recvs,
                             std::vector<bool> came, const std::vector<std::string>& failed);
  void RunP2P(const std::vector<P2POp>& ops, const std::string& label, milliseconds timeout);
  [[noreturn]] void Break(ErrorCode code, const std::string& message);
  std::string VerdictKey(int64_t seq) const { return Str(prefix_, "timeout/", seq); }
  [[noreturn]] void FailP2P(const std::exception& e, const std::vector<P2POp>& ops, size_t current,
                            const std::string& label, milliseconds timeout, Clock::time_point deadline);
  std::string P2PName(const P2POp& op) const;

  std::shared_ptr<comm::Store> store_;
  std::shared_ptr<gloo::transport::Device> device_;
  std::shared_ptr<gloo_internal::WaitMonitor> monitor_;  // one per process: deadlocks across groups
  std::string prefix_;
  const int rank_;
  const std::vector<int> global_ranks_;
  const int num_threads_;
  std::shared_ptr<gloo::Context> context_;
  int64_t next_seq_ = 0;
  int64_t next_group_id_ = 0;
  std::optional<std::string> broken_;  // comm thread only
  std::unique_ptr<CommThread> thread_;
};

WorkPtr GlooProcessGroup::Issue(CollectiveDesc desc, const Tensor& written, Body body) {
  desc.seq = next_seq_++;
  TraceCall(desc, name());
  if (written.defined()) MarkWritten(written);
  const std::string label = GroupLabel(name(), global_ranks());
  monitor_->NoteIssued(prefix_, desc.seq);
  BlockedCall wait{.key = prefix_, .seq = desc.seq, .call = DescribeCall(desc, true), .label = label,
                   .members = global_ranks_};
  WorkPtr work = thread_->Submit([this, desc = std::move(desc), body = std::move(body), timeout = timeout(), label] {
    RunChecked(desc, label, timeout, body);
  });
  return TrackBlockingWait(
      std::move(work), [m = monitor_, wait = std::move(wait)] { return m->BeginBlockedWait(wait); },
      [m = monitor_](int64_t handle) { m->EndBlockedWait(handle); });
}

void GlooProcessGroup::Break(ErrorCode code, const std::string& message) {
  broken_ = message;
  TESSEL_FAIL(code, message);
}

void GlooProcessGroup::RunChecked(const CollectiveDesc& d, const std::string& label, milliseconds timeout,
                                  const Body& body) {
  if (broken_) {
    TESSEL_FAIL(ErrorCode::kAborted, DescribeCall(d, false), " on ", label,
                " cannot run: the group is unusable after an earlier error: ", *broken_);
  }
  ExchangeHeaders(d, label, timeout);
  try {
    body(context_, static_cast<uint32_t>(d.seq), timeout);
  } catch (const Error&) {
    throw;
  } catch (const std::exception& e) {
    // Gloo's own deadline (a peer stuck, or dead while its data was in flight, comm/README.md) is a
    // timeout: kDeadlineExceeded (Python's TimeoutError), not kAborted.
    if (std::string_view(e.what()).find("Timed out") != std::string_view::npos) {
      Break(ErrorCode::kDeadlineExceeded, Str(DescribeCall(d, false), " on ", label, " timed out after ",
                                              timeout.count(), " ms inside gloo (a peer is stuck, or died while the "
                                              "data was in flight): ", e.what()));
    }
    Break(ErrorCode::kAborted, Str(DescribeCall(d, false), " on ", label,
                                   " failed in gloo (a peer process died or the network failed): ", e.what()));
  }
}

void GlooProcessGroup::ExchangeHeaders(const CollectiveDesc& d, const std::string& label, milliseconds timeout) {
  const int world = size();
  if (world == 1) return;
  const std::vector<int64_t> mine = EncodeHeader(d, rank_, world);
  const size_t nbytes = mine.size() * sizeof(int64_t);
  const uint64_t slot = HeaderSlot(d.seq);
  std::vector<int> peers;
  for (int j = 0; j < world; ++j) {
    if (j != rank_) peers.push_back(j);
  }
  const size_t n = peers.size();
  std::vector<std::vector<int64_t>> theirs(n, std::vector<int64_t>(mine.size()));
  std::vector<std::unique_ptr<gloo::transport::UnboundBuffer>> recvs(n), sends(n);
  std::vector<std::string> failed(n);  // per peer: why its operation failed ("" = fine so far)
  std::vector<bool> came(n, false);
  const auto deadline = Clock::now() + timeout;
  // One receive per peer (not any-source): Gloo fails the pending operations of a pair whose connection
  // closes, so a peer that exited or died is reported at once. Every operation is posted and waited on
  // its own, so a dead peer never stops this rank from completing its exchange with the live ones (which
  // then detect the dead peer themselves and name it, instead of timing out on this rank).
  // A deadlock verdict (gloo_wait_monitor.h) aborts these waits; the guard unregisters before they go.
  std::vector<gloo::transport::UnboundBuffer*> raw;
  struct Unregister {
    gloo_internal::WaitMonitor& monitor;
    const std::string& key;
    int64_t seq;
    ~Unregister() { monitor.EndExchange(key, seq); }
  } unregister{*monitor_, prefix_, d.seq};
  auto attempt = [&](size_t k, const auto& op) {
    if (!failed[k].empty()) return;
    try {
      op();
    } catch (const std::exception& e) {
      failed[k] = e.what();
    }
  };
  for (size_t k = 0; k < n; ++k) {
    attempt(k, [&] {
      recvs[k] = context_->createUnboundBuffer(theirs[k].data(), nbytes);
      recvs[k]->recv(peers[k], slot);
    });
  }
  for (size_t k = 0; k < n; ++k) {
    attempt(k, [&] {
      sends[k] = context_->createUnboundBuffer(const_cast<int64_t*>(mine.data()), nbytes);
      sends[k]->send(peers[k], slot);
    });
  }
  for (const auto* list : {&recvs, &sends}) {
    for (const auto& b : *list) {
      if (b != nullptr) raw.push_back(b.get());
    }
  }
  monitor_->BeginExchange(prefix_, d.seq, raw);
  for (size_t k = 0; k < n; ++k) attempt(k, [&] { came[k] = recvs[k]->waitRecv(Remaining(deadline)); });
  for (size_t k = 0; k < n; ++k) attempt(k, [&] { sends[k]->waitSend(Remaining(deadline)); });
  if (auto verdict = monitor_->deadlock(prefix_, d.seq)) Break(ErrorCode::kAborted, *verdict);
  ReportExchangeFailure(d, label, timeout, deadline, peers, recvs, came, failed);
  std::vector<CollectiveDesc> descs(world);
  descs[rank_] = d;
  for (const auto& h : theirs) descs[h[7]] = DecodeHeader(h, world);
  std::vector<const CollectiveDesc*> ptrs;
  for (const CollectiveDesc& x : descs) ptrs.push_back(&x);
  if (auto mismatch = FindMismatch(ptrs, label)) TESSEL_FAIL(ErrorCode::kAborted, *mismatch);
}

void GlooProcessGroup::ReportExchangeFailure(const CollectiveDesc& d, const std::string& label, milliseconds timeout,
                                             Clock::time_point deadline, const std::vector<int>& peers,
                                             const std::vector<std::unique_ptr<gloo::transport::UnboundBuffer>>& recvs,
                                             std::vector<bool> came, const std::vector<std::string>& failed) {
  std::string closed, first_error;
  for (size_t k = 0; k < peers.size(); ++k) {
    if (failed[k].empty()) continue;
    if (first_error.empty()) first_error = failed[k];
    closed += Str(closed.empty() ? "" : ", ", peers[k], " (global ", global_ranks_[peers[k]], ")");
  }
  if (closed.empty()) return;
  if (Clock::now() >= deadline) {
    // After a timeout Gloo fails every pending buffer, but a completed receive still returns at once:
    // that tells the peers that came from those that did not.
    std::string missing;
    for (size_t k = 0; k < peers.size(); ++k) {
      try {
        came[k] = came[k] || (recvs[k] != nullptr && recvs[k]->waitRecv(milliseconds(1)));
      } catch (const std::exception&) {
      }
      if (!came[k]) missing += Str(missing.empty() ? "" : ", ", peers[k], " (global ", global_ranks_[peers[k]], ")");
    }
    const std::string verdict = Str(DescribeCall(d, false), " on ", label, " timed out after ", timeout.count(),
                                    " ms on rank ", rank_, " (global ", global_ranks_[rank_], "): rank(s) ", missing,
                                    " never arrived");
    // For the late ranks: Gloo closes the pairs of a timed-out wait, so a rank arriving afterwards sees a
    // closed connection and would report this live rank as exited or died (a read-only review's finding).
    try {
      store_->Set(VerdictKey(d.seq), std::vector<char>(verdict.begin(), verdict.end()));
    } catch (const std::exception&) {  // best effort: the store's host may be the one that is gone
    }
    Break(ErrorCode::kDeadlineExceeded, verdict);
  }
  // A peer that timed out waiting for this rank left its verdict in the store before closing.
  std::string verdict;
  try {
    if (store_->Check(VerdictKey(d.seq))) {
      const std::vector<char> v = store_->Get(VerdictKey(d.seq), milliseconds(1000));
      verdict.assign(v.begin(), v.end());
    }
  } catch (const std::exception&) {
  }
  if (!verdict.empty()) {
    Break(ErrorCode::kDeadlineExceeded, Str(DescribeCall(d, false), " on ", label, " came too late: rank(s) ", closed,
                                            " gave up waiting for this rank and closed the connection (", verdict,
                                            ")"));
  }
  Break(ErrorCode::kAborted, Str(DescribeCall(d, false), " on ", label, " failed: the connection to rank(s) ", closed,
                                 " closed (the process exited or died): ", first_error));
}

WorkPtr GlooProcessGroup::BatchP2P(const std::vector<P2POp>& ops) {
  CheckP2POps(ops, rank_, size(), DeviceType::kCpu);
  for (const P2POp& op : ops) {
    const bool is_send = op.kind == P2POp::Kind::kSend;
    CommTracer::Record({is_send ? CollectiveKind::kSend : CollectiveKind::kRecv, name(), op.tensor.dtype(),
                        op.tensor.numel() * ElementSize(op.tensor.dtype())});
    if (!is_send) MarkWritten(op.tensor);
  }
  return thread_->Submit([this, ops, timeout = timeout(), label = GroupLabel(name(), global_ranks())] {
    RunP2P(ops, label, timeout);
  });
}

void GlooProcessGroup::RunP2P(const std::vector<P2POp>& ops, const std::string& label, milliseconds timeout) {
  if (broken_) TESSEL_FAIL(ErrorCode::kAborted, "p2p on ", label, " cannot run: the group is unusable: ", *broken_);
  std::vector<std::unique_ptr<gloo::transport::UnboundBuffer>> bufs;
  const auto deadline = Clock::now() + timeout;
  size_t current = 0;  // the op being posted, then the one being waited on
  // Each send is preceded by a descriptor (bytes, dtype) on a slot of its own; each receive reads the
  // descriptor before it posts its buffer, and raises kAborted "p2p mismatch" on a difference, after taking
  // the sender's payload into scratch so the pair's stream stays in step (the group stays usable). Gloo
  // itself compares nothing: a shorter send left the tail of the receive stale, another dtype was read bit
  // for bit, and a longer send aborted the receiving process inside gloo. Sends stay eager (they complete
  // without the receiver, as the pipeline's schedules rely on), so only the receiving side raises; the
  // threads backend, which matches both sides in one place, raises on both.
  struct Desc {
    int64_t bytes = 0, dtype = 0;
    bool operator==(const Desc&) const = default;
  };
  std::vector<Desc> mine(ops.size()), theirs(ops.size());
  std::vector<std::unique_ptr<gloo::transport::UnboundBuffer>> desc_bufs(ops.size());
  std::vector<std::vector<char>> scratch(ops.size());
  std::string mismatch;
  try {
    for (current = 0; current < ops.size(); ++current) {  // post everything before waiting: no send/send deadlock
      const P2POp& op = ops[current];
      mine[current] = {op.tensor.numel() * ElementSize(op.tensor.dtype()), static_cast<int64_t>(op.tensor.dtype())};
      if (op.kind == P2POp::Kind::kSend) {
        desc_bufs[current] = context_->createUnboundBuffer(&mine[current], sizeof(Desc));
        desc_bufs[current]->send(op.peer, P2PDescSlot(op.tag));
        bufs.push_back(context_->createUnboundBuffer(op.tensor.raw_data(), static_cast<size_t>(mine[current].bytes)));
        bufs.back()->send(op.peer, P2PSlot(op.tag));
      } else {
        desc_bufs[current] = context_->createUnboundBuffer(&theirs[current], sizeof(Desc));
        desc_bufs[current]->recv(op.peer, P2PDescSlot(op.tag));
        bufs.emplace_back();  // posted once the descriptor is in
      }
    }
    for (current = 0; current < ops.size(); ++current) {
      const P2POp& op = ops[current];
      if (op.kind == P2POp::Kind::kSend) continue;
      desc_bufs[current]->waitRecv(Remaining(deadline));
      void* into = op.tensor.raw_data();
      if (!(theirs[current] == mine[current])) {
        if (mismatch.empty()) {
          mismatch = Str("p2p mismatch on ", label, ": rank ", op.peer, " posted send to rank ", rank_, " (tag ", op.tag,
                         ", ", theirs[current].bytes, " B) ", DTypeName(static_cast<DType>(theirs[current].dtype)),
                         " but rank ", rank_, " posted ", P2PName(op), " ", DTypeName(op.tensor.dtype()));
        }
        scratch[current].resize(static_cast<size_t>(std::max<int64_t>(theirs[current].bytes, 1)));
        into = scratch[current].data();
      }
      bufs[current] = context_->createUnboundBuffer(into, static_cast<size_t>(theirs[current].bytes));
      bufs[current]->recv(op.peer, P2PSlot(op.tag));
    }
    for (current = 0; current < ops.size(); ++current) {
      if (ops[current].kind == P2POp::Kind::kSend) {
        desc_bufs[current]->waitSend(Remaining(deadline));
        bufs[current]->waitSend(Remaining(deadline));
      } else {
        bufs[current]->waitRecv(Remaining(deadline));
      }
    }
  } catch (const std::exception& e) {
    FailP2P(e, ops, current, label, timeout, deadline);
  }
  if (!mismatch.empty()) TESSEL_FAIL(ErrorCode::kAborted, mismatch);
}

void GlooProcessGroup::FailP2P(const std::exception& e, const std::vector<P2POp>& ops, size_t current,
                               const std::string& label, milliseconds timeout, Clock::time_point deadline) {
  const std::string what = current < ops.size() ? P2PName(ops[current]) : "a p2p op";
  if (Clock::now() >= deadline) {
    Break(ErrorCode::kDeadlineExceeded,
          Str("p2p on ", label, " timed out after ", timeout.count(), " ms: ", what,
              " did not complete (the peer never posted the matching call, is stuck, or died while the data was in "
              "flight)"));
  }
  if (dynamic_cast<const gloo::IoException*>(&e) != nullptr && current < ops.size()) {
    // Gloo fails a pair's pending operations when its connection closes: as in the collectives, say so
    // (at once, not at the timeout) and name the peer.
    const int peer = ops[current].peer;
    Break(ErrorCode::kAborted, Str("p2p on ", label, " failed at ", what, ": the connection to rank ", peer,
                                   " (global ", global_ranks_[peer], ") closed (the process exited or died): ",
                                   e.what()));
  }
  Break(ErrorCode::kAborted, Str("p2p on ", label, " failed at ", what, ": ", e.what()));
}

std::string GlooProcessGroup::P2PName(const P2POp& op) const {
  return Str(op.kind == P2POp::Kind::kSend ? "send to rank " : "recv from rank ", op.peer, " (global ",
             global_ranks_[op.peer], ", tag ", op.tag, ", ", op.tensor.numel() * ElementSize(op.tensor.dtype()), " B)");
}

std::shared_ptr<ProcessGroup> GlooProcessGroup::NewGroup(const std::vector<int>& ranks) {
  TESSEL_CHECK(!ranks.empty(), "new_group: empty rank list on ", GroupLabel(name(), global_ranks()));
  std::vector<int> globals;
  std::string rank_list;
  int my_index = -1;
  for (size_t i = 0; i < ranks.size(); ++i) {
    const int r = ranks[i];
    TESSEL_CHECK(r >= 0 && r < size(), "new_group: rank ", r, " is not in ", GroupLabel(name(), global_ranks()));
    TESSEL_CHECK(std::count(ranks.begin(), ranks.end(), r) == 1, "new_group: rank ", r, " listed twice");
    globals.push_back(global_ranks_[r]);
    rank_list += Str(i == 0 ? "" : ",", r);
    if (r == rank_) my_index = static_cast<int>(i);
  }
  const int64_t id = next_group_id_++;  // every member calls NewGroup in the same order (checked here)
  AgreeOnNewGroup(*this, id, ranks);
  if (my_index < 0) return nullptr;
  auto group = std::make_shared<GlooProcessGroup>(store_, device_, Str(prefix_, "g", id, "[", rank_list, "]/"),
                                                  my_index, globals, num_threads_, timeout(), monitor_);
  group->set_name(Str(name(), ".", id));
  return group;
}

int EnvInt(const char* name, std::optional<int> fallback) {
  const char* v = std::getenv(name);
  if (v == nullptr || *v == '\0') {
    TESSEL_CHECK(fallback.has_value(), "InitProcessGroupFromEnv: ", name,
                 " is not set; start the processes with tessel-run (comm/launcher) or set RANK, WORLD_SIZE, ",
                 "MASTER_ADDR, MASTER_PORT like torchrun");
    return *fallback;
  }
  char* end = nullptr;
  const long x = std::strtol(v, &end, 10);
  TESSEL_CHECK(end != v && *end == '\0', "InitProcessGroupFromEnv: ", name, "='", v, "' is not an integer");
  return static_cast<int>(x);
}

// Gloo's TCP transport writes without MSG_NOSIGNAL, so a write to a peer process that has exited raises
// SIGPIPE, whose default action killed this process (exit code 141) instead of failing the op with the
// "connection to rank N closed" error: a flaky death of the survivors when a rank crashed mid-barrier, and
// a certain one for a send to it. SIGPIPE is ignored (Python, and so PyTorch, does the same at start-up)
// unless the application installed its own handler; the write then fails with EPIPE.
void IgnoreSigpipeUnlessHandled() {
  struct sigaction current {};
  if (sigaction(SIGPIPE, nullptr, &current) == 0 && current.sa_handler == SIG_DFL) std::signal(SIGPIPE, SIG_IGN);
}

}  // namespace

ProcessGroupPtr NewGlooProcessGroup(std::shared_ptr<Store> store, const std::string& prefix, int rank, int world_size,
                                    const GlooOptions& options) {
  TESSEL_CHECK(world_size >= 1 && rank >= 0 && rank < world_size, "gloo: rank ", rank,
               " is not in a world of size ", world_size);
  IgnoreSigpipeUnlessHandled();
  std::vector<int> all(world_size);
  for (int r = 0; r < world_size; ++r) all[r] = r;
  const int threads = options.num_threads > 0 ? options.num_threads : NumThreads();
  auto monitor = std::make_shared<gloo_internal::WaitMonitor>(store, prefix, rank, world_size);
  return std::make_shared<GlooProcessGroup>(std::move(store), MakeDevice(options), prefix, rank, std::move(all),
                                            threads, options.timeout, std::move(monitor));
}

ProcessGroupPtr InitGlooProcessGroup(int rank, int world_size, const GlooOptions& options) {
  TESSEL_CHECK(world_size >= 1 && rank >= 0 && rank < world_size, "gloo: rank ", rank,
               " is not in a world of size ", world_size);
  std::shared_ptr<Store> store;
  std::string prefix = "tessel/";
  if (options.store_dir.empty()) {
    store = std::make_shared<TcpStore>(options.master_addr, options.master_port, rank == 0, options.timeout);
  } else {
    store = std::make_shared<FileStore>(options.store_dir);
    prefix = Str("tessel/", options.master_port, "/");  // jobs sharing a directory need distinct ports
  }
  return NewGlooProcessGroup(std::move(store), prefix, rank, world_size, options);
}

GlooOptions GlooOptionsFromEnv(int* rank, int* world_size) {
  GlooOptions options;
  *rank = EnvInt("RANK", std::nullopt);
  *world_size = EnvInt("WORLD_SIZE", std::nullopt);
  if (const char* a = std::getenv("MASTER_ADDR"); a != nullptr && *a != '\0') options.master_addr = a;
  options.master_port = EnvInt("MASTER_PORT", 29500);
  if (const char* d = std::getenv("TESSEL_STORE_DIR"); d != nullptr) options.store_dir = d;
  if (const char* i = std::getenv("GLOO_SOCKET_IFNAME"); i != nullptr) options.iface = i;
  options.timeout = milliseconds(EnvInt("TESSEL_COMM_TIMEOUT_MS", static_cast<int>(kDefaultTimeout.count())));
  return options;
}

ProcessGroupPtr InitProcessGroupFromEnv() {
  int rank = 0, world_size = 0;
  const GlooOptions options = GlooOptionsFromEnv(&rank, &world_size);
  // Processes of one node share its cores (DESIGN.md "Threads and cores"): never oversubscribe.
  const int local_world = EnvInt("LOCAL_WORLD_SIZE", 1);
  if (local_world > 1) SetNumThreads(std::max(1, HardwareConcurrency() / local_world));
  return InitGlooProcessGroup(rank, world_size, options);
}

}  // namespace tessel::comm
