// comm/backends/nccl.cc — NcclProcessGroup: RAII wrappers for the NCCL communicator, CUDA stream and
// events; collectives enqueued on the group's stream; host-side waits bounded by the timeout.
#include "comm/backends/nccl.h"

#include <cuda_runtime.h>
#include <nccl.h>

#include <algorithm>
#include <condition_variable>
#include <cstdlib>
#include <cstring>
#include <mutex>
#include <thread>

#include "comm/collective.h"
#include "core/memory/cuda_backend.h"
#include "core/memory/stream.h"
#include "core/base/error.h"

namespace tessel::comm {
namespace {

using Clock = std::chrono::steady_clock;
using std::chrono::milliseconds;

void CheckCuda(cudaError_t e, const char* what) {
  if (e != cudaSuccess) {
    cudaGetLastError();  // clear the sticky-free error state
    TESSEL_FAIL(ErrorCode::kAborted, "nccl backend: ", what, " failed: ", cudaGetErrorString(e));
  }
}

void CheckNccl(ncclResult_t r, const char* what) {
  TESSEL_CHECK_CODE(ErrorCode::kAborted, r == ncclSuccess, "nccl backend: ", what, " failed: ", ncclGetErrorString(r));
}

// ---- RAII handles ----------------------------------------------------------------------------------
struct StreamDeleter {
  void operator()(CUstream_st* s) const { cudaStreamDestroy(s); }
};
struct EventDeleter {
  void operator()(CUevent_st* e) const { cudaEventDestroy(e); }
};
using CudaStreamPtr = std::unique_ptr<CUstream_st, StreamDeleter>;
using CudaEventPtr = std::unique_ptr<CUevent_st, EventDeleter>;

CudaEventPtr MakeEvent() {
  cudaEvent_t e = nullptr;
  CheckCuda(cudaEventCreateWithFlags(&e, cudaEventDisableTiming), "cudaEventCreate");
  return CudaEventPtr(e);
}

// The communicator and stream of one group, shared with its in-flight Works. Destroys the
// communicator normally, or aborts it (never both) when a Work gave up waiting.
class NcclState {
 public:
  NcclState(ncclComm_t comm, int device) : comm_(comm), device_(device) {
    CheckCuda(cudaSetDevice(device_), "cudaSetDevice");
    cudaStream_t s = nullptr;
    CheckCuda(cudaStreamCreateWithFlags(&s, cudaStreamNonBlocking), "cudaStreamCreate");
    stream_.reset(s);
  }
  ~NcclState() {
    std::lock_guard<std::mutex> lock(mu_);
    if (comm_ != nullptr) ncclCommDestroy(comm_);
  }
  NcclState(const NcclState&) = delete;
  NcclState& operator=(const NcclState&) = delete;

  // The communicator (throws kAborted once aborted).
  ncclComm_t comm(const std::string& what) {
    std::lock_guard<std::mutex> lock(mu_);
    TESSEL_CHECK_CODE(ErrorCode::kAborted, comm_ != nullptr, what, ": the NCCL communicator was aborted after an ",
                      "earlier timeout or error: ", abort_reason_);
    return comm_;
  }
  cudaStream_t stream() const { return stream_.get(); }
  int device() const { return device_; }
  void Abort(const std::string& reason) {
    std::lock_guard<std::mutex> lock(mu_);
    if (comm_ == nullptr) return;
    ncclCommAbort(comm_);
    comm_ = nullptr;
    abort_reason_ = reason;
  }
  // ncclSuccess, or the asynchronous error NCCL reported.
  ncclResult_t AsyncError() {
    std::lock_guard<std::mutex> lock(mu_);
    ncclResult_t r = ncclSuccess;
    if (comm_ != nullptr) ncclCommGetAsyncError(comm_, &r);
    return r;
  }

 private:
  std::mutex mu_;
  ncclComm_t comm_;
  const int device_;
  CudaStreamPtr stream_;
  std::string abort_reason_;
};

class NcclWork final : public Work {
 public:
  NcclWork(std::shared_ptr<NcclState> state, CudaEventPtr done, std::vector<Tensor> tensors, std::string what,
           milliseconds timeout)
      : state_(std::move(state)),
        done_(std::move(done)),
        tensors_(std::move(tensors)),
        what_(std::move(what)),
        deadline_(Clock::now() + timeout),
        timeout_(timeout) {}

  bool IsCompleted() override { return cudaEventQuery(done_.get()) != cudaErrorNotReady; }
  // Stream-ordered, no host wait (fully_shard's comm streams). The tensors stay alive through the
  // group's in-flight list; a timeout or NCCL error surfaces at the next Wait() on this group.
  void BlockStream(void* stream) override {
    CheckCuda(cudaStreamWaitEvent(static_cast<cudaStream_t>(stream), done_.get(), 0), "cudaStreamWaitEvent");
  }

  void Wait() override {
    while (true) {
      const cudaError_t q = cudaEventQuery(done_.get());
      if (q == cudaSuccess) break;
      if (q != cudaErrorNotReady) CheckCuda(q, what_.c_str());
      const ncclResult_t async = state_->AsyncError();
      if (async != ncclSuccess && async != ncclInProgress) {
        state_->Abort(Str(what_, ": ", ncclGetErrorString(async)));
        TESSEL_FAIL(ErrorCode::kAborted, what_, " failed in NCCL: ", ncclGetErrorString(async));
      }
      if (Clock::now() >= deadline_) {
        const std::string msg = Str(what_, " timed out after ", timeout_.count(),
                                    " ms: a peer never arrived or called a different collective (NCCL cannot tell which)");
        state_->Abort(msg);
        TESSEL_FAIL(ErrorCode::kDeadlineExceeded, msg);
      }
      std::this_thread::sleep_for(std::chrono::microseconds(50));
    }
    tensors_.clear();
  }

 private:
  std::shared_ptr<NcclState> state_;
  CudaEventPtr done_;
  std::vector<Tensor> tensors_;
  std::string what_;
  Clock::time_point deadline_;
  milliseconds timeout_;
};

ncclDataType_t NcclType(DType dtype) {
  switch (dtype) {
    case DType::kFloat32: return ncclFloat32;
    case DType::kFloat64: return ncclFloat64;
    case DType::kBFloat16: return ncclBfloat16;
    case DType::kFloat16: return ncclFloat16;
    case DType::kInt64: return ncclInt64;
    case DType::kInt32: return ncclInt32;
    case DType::kBool: return ncclUint8;
    case DType::kUInt8: return ncclUint8;
    case DType::kInt8: return ncclInt8;
    case DType::kInt16: break;  // NCCL has no 16-bit integer type
  }
  TESSEL_FAIL(ErrorCode::kUnimplemented, "NCCL: no NCCL data type for ", DTypeName(dtype),
              " (NCCL has none for 16-bit integers); cast to int32 first");
}

ncclRedOp_t NcclOp(ReduceOp op, DType dtype) {
  if (dtype == DType::kBool) {  // 0/1 bytes: or / and
    return op == ReduceOp::kProduct || op == ReduceOp::kMin ? ncclMin : ncclMax;
  }
  switch (op) {
    case ReduceOp::kSum: return ncclSum;
    case ReduceOp::kAvg: return ncclAvg;
    case ReduceOp::kMax: return ncclMax;
    case ReduceOp::kMin: return ncclMin;
    case ReduceOp::kProduct: return ncclProd;
  }
  return ncclSum;
}

size_t Count(const Tensor& t) { return static_cast<size_t>(t.numel()); }

class NcclProcessGroup final : public ProcessGroup {
 public:
  NcclProcessGroup(std::shared_ptr<Store> store, std::shared_ptr<NcclState> state, int rank,
                   std::vector<int> global_ranks)
      : store_(std::move(store)), state_(std::move(state)), rank_(rank), global_ranks_(std::move(global_ranks)) {}

  int rank() const override { return rank_; }
  int size() const override { return static_cast<int>(global_ranks_.size()); }
  const std::vector<int>& global_ranks() const override { return global_ranks_; }
  std::string backend_name() const override { return "nccl"; }

  WorkPtr AllReduce(const Tensor& t, ReduceOp op) override {
    CollectiveDesc d = DescribeAllReduce(t, op, DeviceType::kCuda);
    return Enqueue(d, {t}, [&](ncclComm_t c, cudaStream_t s) {
      return ncclAllReduce(t.raw_data(), t.raw_data(), Count(t), NcclType(t.dtype()), NcclOp(op, t.dtype()), c, s);
    });
  }
  WorkPtr AllGather(const Tensor& out, const Tensor& in) override {
    CollectiveDesc d = DescribeAllGather(out, in, size(), rank(), DeviceType::kCuda);
    return Enqueue(d, {out, in}, [&](ncclComm_t c, cudaStream_t s) {
      return ncclAllGather(in.raw_data(), out.raw_data(), Count(in), NcclType(in.dtype()), c, s);
    });
  }
  WorkPtr ReduceScatter(const Tensor& out, const Tensor& in, ReduceOp op) override {
    CollectiveDesc d = DescribeReduceScatter(out, in, op, size(), rank(), DeviceType::kCuda);
    return Enqueue(d, {out, in}, [&](ncclComm_t c, cudaStream_t s) {
      return ncclReduceScatter(in.raw_data(), out.raw_data(), Count(out), NcclType(in.dtype()), NcclOp(op, in.dtype()),
                               c, s);
    });
  }
  WorkPtr AllToAll(const Tensor& out, const Tensor& in, const std::vector<int64_t>& out_splits,
                   const std::vector<int64_t>& in_splits) override {
    CollectiveDesc d = DescribeAllToAll(out, in, out_splits, in_splits, size(), DeviceType::kCuda);
    return Enqueue(d, {out, in}, [&](ncclComm_t c, cudaStream_t s) {
      const std::vector<int64_t> in_off = SplitOffsets(d.input_splits, d.row_bytes);
      const std::vector<int64_t> out_off = SplitOffsets(d.output_splits, d.row_bytes);
      ncclGroupStart();
      for (int j = 0; j < size(); ++j) {
        ncclSend(static_cast<char*>(in.raw_data()) + in_off[j], d.input_splits[j] * d.row_bytes, ncclUint8, j, c, s);
        ncclRecv(static_cast<char*>(out.raw_data()) + out_off[j], d.output_splits[j] * d.row_bytes, ncclUint8, j, c, s);
      }
      return ncclGroupEnd();
    });
  }
  WorkPtr Broadcast(const Tensor& t, int root) override {
    CollectiveDesc d = DescribeBroadcast(t, root, size(), DeviceType::kCuda);
    return Enqueue(d, {t}, [&](ncclComm_t c, cudaStream_t s) {
      return ncclBroadcast(t.raw_data(), t.raw_data(), Count(t), NcclType(t.dtype()), root, c, s);
    });
  }
  WorkPtr Barrier() override {
    return Enqueue(CollectiveDesc{}, {}, [&](ncclComm_t c, cudaStream_t s) {
      return ncclAllReduce(barrier_buffer(), barrier_buffer(), 1, ncclInt32, ncclSum, c, s);
    });
  }
  WorkPtr BatchP2P(const std::vector<P2POp>& ops) override;
  std::shared_ptr<ProcessGroup> NewGroup(const std::vector<int>& ranks) override;

  ~NcclProcessGroup() override {
    if (barrier_ != nullptr) cudaFree(barrier_);
  }

 private:
  template <typename Launch>
  WorkPtr Enqueue(CollectiveDesc desc, std::vector<Tensor> tensors, Launch&& launch);
  void* barrier_buffer() {
    if (barrier_ == nullptr) CheckCuda(cudaMalloc(&barrier_, sizeof(int)), "cudaMalloc (barrier)");
    return barrier_;
  }

  std::shared_ptr<Store> store_;  // rank 0 serves it: kept alive as long as any group of the job
  std::shared_ptr<NcclState> state_;
  const int rank_;
  const std::vector<int> global_ranks_;
  int64_t next_seq_ = 0;
  int64_t next_group_id_ = 0;
  void* barrier_ = nullptr;
  std::vector<WorkPtr> in_flight_;  // keeps tensors alive until completion even if a Work is dropped
};

template <typename Launch>
WorkPtr NcclProcessGroup::Enqueue(CollectiveDesc desc, std::vector<Tensor> tensors, Launch&& launch) {
  const bool is_p2p = desc.kind == CollectiveKind::kSend || desc.kind == CollectiveKind::kRecv;
  if (!is_p2p) {  // p2p is traced per op by BatchP2P and takes no collective sequence number
    desc.seq = next_seq_++;
    TraceCall(desc, name());
    if (!tensors.empty()) MarkWritten(tensors.front());
  }
  const std::string what = Str(DescribeCall(desc, false), " on ", GroupLabel(name(), global_ranks()));
  CheckCuda(cudaSetDevice(state_->device()), "cudaSetDevice");
  // Order after the work already queued on the caller's current stream (the default stream unless a
  // memory::StreamGuard says otherwise, e.g. fully_shard's all-gather stream), which produced the inputs.
  CudaEventPtr ready = MakeEvent();
  const auto current = static_cast<cudaStream_t>(memory::CurrentStream(Device::Cuda(state_->device())));
  CheckCuda(cudaEventRecord(ready.get(), current), "cudaEventRecord");
  CheckCuda(cudaStreamWaitEvent(state_->stream(), ready.get(), 0), "cudaStreamWaitEvent");
  CheckNccl(launch(state_->comm(what), state_->stream()), what.c_str());
  CudaEventPtr done = MakeEvent();
  CheckCuda(cudaEventRecord(done.get(), state_->stream()), "cudaEventRecord");
  auto work = std::make_shared<NcclWork>(state_, std::move(done), std::move(tensors), what, timeout());
  std::erase_if(in_flight_, [](const WorkPtr& w) { return w->IsCompleted(); });
  in_flight_.push_back(work);
  return work;
}

WorkPtr NcclProcessGroup::BatchP2P(const std::vector<P2POp>& ops) {
  CheckP2POps(ops, rank_, size(), DeviceType::kCuda);
  TraceP2POps(ops, name());
  std::vector<Tensor> tensors;
  for (const P2POp& op : ops) tensors.push_back(op.tensor);
  // NOTE: NCCL matches p2p by posting order per peer; tags are not part of the match.
  CollectiveDesc d;
  d.kind = ops.size() == 1 && ops[0].kind == P2POp::Kind::kSend ? CollectiveKind::kSend : CollectiveKind::kRecv;
  return Enqueue(d, tensors, [&](ncclComm_t c, cudaStream_t s) {
    ncclGroupStart();
    for (const P2POp& op : ops) {
      const size_t bytes = op.tensor.numel() * ElementSize(op.tensor.dtype());
      if (op.kind == P2POp::Kind::kSend) {
        ncclSend(op.tensor.raw_data(), bytes, ncclUint8, op.peer, c, s);
      } else {
        ncclRecv(op.tensor.raw_data(), bytes, ncclUint8, op.peer, c, s);
      }
    }
    return ncclGroupEnd();
  });
}

std::shared_ptr<ProcessGroup> NcclProcessGroup::NewGroup(const std::vector<int>& ranks) {
  NewGroupMembers members = CheckNewGroupRanks(*this, ranks);
  std::vector<int> globals = std::move(members.globals);
  const int my_index = members.my_index;
  // ncclCommSplit is collective over the parent: non-members pass NCCL_SPLIT_NOCOLOR.
  ++next_group_id_;
  ncclComm_t sub = nullptr;
  CheckCuda(cudaSetDevice(state_->device()), "cudaSetDevice");
  CheckNccl(ncclCommSplit(state_->comm("new_group"), my_index < 0 ? NCCL_SPLIT_NOCOLOR : 0, std::max(my_index, 0),
                          &sub, nullptr),
            "ncclCommSplit");
  if (my_index < 0) return nullptr;
  auto group = std::make_shared<NcclProcessGroup>(store_, std::make_shared<NcclState>(sub, state_->device()),
                                                  my_index, std::move(globals));
  group->set_timeout(timeout());
  group->set_name(Str(name(), ".", next_group_id_ - 1));
  return group;
}

int EnvInt(const char* name, int fallback) {
  const char* v = std::getenv(name);
  if (v == nullptr || *v == '\0') return fallback;
  char* end = nullptr;
  const long x = std::strtol(v, &end, 10);
  TESSEL_CHECK(end != v && *end == '\0', "InitNcclProcessGroupFromEnv: ", name, "='", v, "' is not an integer");
  return static_cast<int>(x);
}

}  // namespace

namespace {

// [Note: NCCL init deadline] ncclCommInitRank blocks until every rank of the world joined, and a
// nonblocking communicator (ncclConfig_t.blocking = 0) would make every later NCCL call return
// ncclInProgress, which the collectives here do not poll for. So the blocking init runs on a helper
// thread and the caller waits at most `timeout`: past it, kDeadlineExceeded names the rank, world and
// device, and the helper thread is abandoned (detached; a late communicator leaks — the job is
// expected to exit on this error, as with any rendezvous timeout).
ncclComm_t InitCommWithDeadline(int world_size, const ncclUniqueId& id, int rank, int device, milliseconds timeout) {
  struct Result {
    std::mutex mu;
    std::condition_variable cv;
    bool done = false;
    ncclResult_t r = ncclSuccess;
    ncclComm_t comm = nullptr;
  };
  auto result = std::make_shared<Result>();
  std::thread([result, world_size, id, rank, device] {
    ncclComm_t comm = nullptr;
    ncclResult_t r = cudaSetDevice(device) == cudaSuccess ? ncclCommInitRank(&comm, world_size, id, rank)
                                                          : ncclUnhandledCudaError;
    std::lock_guard<std::mutex> lock(result->mu);
    result->r = r, result->comm = comm, result->done = true;
    result->cv.notify_all();
  }).detach();
  std::unique_lock<std::mutex> lock(result->mu);
  const bool done = result->cv.wait_for(lock, timeout, [&] { return result->done; });
  TESSEL_CHECK_CODE(ErrorCode::kDeadlineExceeded, done, "nccl: communicator creation on rank ", rank, " of ",
                    world_size, " (cuda:", device, ") did not finish within ", timeout.count(),
                    " ms: a peer never joined (check that every rank started with the same MASTER_ADDR and ",
                    "MASTER_PORT, or raise TESSEL_COMM_TIMEOUT_MS)");
  CheckNccl(result->r, "ncclCommInitRank");
  return result->comm;
}

}  // namespace

int CudaDeviceCount() { return memory::CudaDeviceCount(); }

ProcessGroupPtr NewNcclProcessGroup(std::shared_ptr<Store> store, const std::string& prefix, int rank, int world_size,
                                    const NcclOptions& options) {
  TESSEL_CHECK(world_size >= 1 && rank >= 0 && rank < world_size, "nccl: rank ", rank, " not in world of size ",
               world_size);
  const int devices = CudaDeviceCount();
  TESSEL_CHECK_CODE(ErrorCode::kFailedPrecondition, devices > 0, "nccl: no CUDA device is visible");
  const int device = options.device_index >= 0 ? options.device_index : EnvInt("LOCAL_RANK", rank % devices);
  TESSEL_CHECK(device < devices, "nccl: device ", device, " requested but only ", devices, " visible");
  CheckCuda(cudaSetDevice(device), "cudaSetDevice");
  ncclUniqueId id;
  const std::string key = prefix + "nccl_unique_id";
  if (rank == 0) {
    CheckNccl(ncclGetUniqueId(&id), "ncclGetUniqueId");
    store->Set(key, std::vector<char>(id.internal, id.internal + sizeof(id.internal)));
  } else {
    const std::vector<char> bytes = store->Get(key, options.timeout);
    TESSEL_CHECK_CODE(ErrorCode::kDataLoss, bytes.size() == sizeof(id.internal), "nccl: malformed unique id in ",
                      store->Describe());
    std::memcpy(id.internal, bytes.data(), sizeof(id.internal));
  }
  ncclComm_t comm = nullptr;
  comm = InitCommWithDeadline(world_size, id, rank, device, options.timeout);
  std::vector<int> all(world_size);
  for (int r = 0; r < world_size; ++r) all[r] = r;
  auto pg =
      std::make_shared<NcclProcessGroup>(store, std::make_shared<NcclState>(comm, device), rank, std::move(all));
  pg->set_timeout(options.timeout);
  return pg;
}

ProcessGroupPtr InitNcclProcessGroup(int rank, int world_size, const NcclOptions& options) {
  auto store = std::make_shared<TcpStore>(options.master_addr, options.master_port, rank == 0, options.timeout);
  return NewNcclProcessGroup(std::move(store), "tessel/", rank, world_size, options);
}

ProcessGroupPtr InitNcclProcessGroupFromEnv() {
  NcclOptions options;
  const int rank = EnvInt("RANK", -1), world = EnvInt("WORLD_SIZE", -1);
  TESSEL_CHECK(rank >= 0 && world >= 1, "InitNcclProcessGroupFromEnv: RANK and WORLD_SIZE must be set ",
               "(start the processes with tessel-run)");
  if (const char* a = std::getenv("MASTER_ADDR"); a != nullptr && *a != '\0') options.master_addr = a;
  options.master_port = EnvInt("MASTER_PORT", 29500);
  options.timeout = milliseconds(EnvInt("TESSEL_COMM_TIMEOUT_MS", static_cast<int>(kDefaultTimeout.count())));
  return InitNcclProcessGroup(rank, world, options);
}

}  // namespace tessel::comm
