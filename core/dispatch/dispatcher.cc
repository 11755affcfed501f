// core/dispatch/dispatcher.cc — Dispatch: distributed handler or device kernel.
#include "core/dispatch/dispatcher.h"

#include <atomic>
#include <chrono>

#include "core/base/error.h"
#include "core/dispatch/profiler.h"
#include "core/tensor/tensor_impl.h"

namespace tessel {
namespace {
std::atomic<DistributedHandler> distributed_handler{nullptr};
std::atomic<ImplicitReplicator> implicit_replicator{nullptr};
}  // namespace

namespace {
thread_local bool implicit_replication = false;
}  // namespace

ImplicitReplicationGuard::ImplicitReplicationGuard() : previous_(implicit_replication) { implicit_replication = true; }
ImplicitReplicationGuard::~ImplicitReplicationGuard() { implicit_replication = previous_; }
bool ImplicitReplicationEnabled() { return implicit_replication; }

void SetImplicitReplicator(ImplicitReplicator replicator) {
  ImplicitReplicator expected = nullptr;
  TESSEL_INTERNAL_ASSERT(implicit_replicator.compare_exchange_strong(expected, replicator) || expected == replicator,
                         "SetImplicitReplicator: a second, different replicator");
}

TensorList ReplicateImplicitly(TensorList inputs) {
  if (!implicit_replication) return inputs;
  ImplicitReplicator r = implicit_replicator.load();
  if (r == nullptr) return inputs;
  bool distributed = false, dense = false;
  for (const Tensor& t : inputs) {
    if (!t.defined()) continue;
    (t.is_distributed() ? distributed : dense) = true;
  }
  return distributed && dense ? r(std::move(inputs)) : inputs;
}

void SetDistributedHandler(DistributedHandler handler) {
  DistributedHandler expected = nullptr;
  if (!distributed_handler.compare_exchange_strong(expected, handler)) {
    TESSEL_INTERNAL_ASSERT(expected == handler, "a second distributed handler was installed");
  }
}

std::string DescribeInputs(std::span<const Tensor> inputs) {
  std::string s;
  for (size_t i = 0; i < inputs.size(); ++i) {
    if (i) s += ", ";
    if (!inputs[i].defined()) {
      s += "None";
      continue;
    }
    s += ShapeStr(inputs[i].sizes()) + " " + std::string(DTypeName(inputs[i].dtype()));
    if (inputs[i].is_distributed()) s += " (" + inputs[i].impl()->KindName() + ")";
  }
  return s;
}

TensorList DispatchLocal(const OpDef& op, std::span<const Tensor> inputs, const Attrs& attrs) {
  Device device = CurrentDevice();
  bool found = false;
  for (const Tensor& t : inputs) {
    if (!t.defined()) continue;
    TESSEL_INTERNAL_ASSERT(!t.is_distributed(), op.name, ": DispatchLocal got a distributed input");
    if (!found) {
      device = t.device();
      found = true;
    } else {
      TESSEL_CHECK(t.device().type == device.type, op.name, ": expected all tensors on one device type, got ",
                   DescribeInputs(inputs), " on ", device, " and ", t.device());
    }
  }
  const DeviceType type = device.type;
  const Kernel& k = type == DeviceType::kCpu ? op.cpu : op.cuda;
  TESSEL_CHECK_CODE(ErrorCode::kUnimplemented, static_cast<bool>(k), op.name, ": no ",
                    (type == DeviceType::kCpu ? "CPU" : "CUDA"), " kernel is registered, so it cannot run on ",
                    device, " (inputs: ", DescribeInputs(inputs), "; ", (op.cpu ? "it has a CPU kernel" : "no kernel"),
                    ")");
  if (OpProfiler* prof = OpProfiler::Current()) {
    prof->SyncDevice();
    const auto t0 = std::chrono::steady_clock::now();
    TensorList out = k(inputs, attrs);
    prof->SyncDevice();
    const double seconds = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
    const int64_t start_ns =
        std::chrono::duration_cast<std::chrono::nanoseconds>(t0.time_since_epoch()).count();
    prof->Add(prof->by_shape() ? op.name + " " + DescribeInputs(inputs) : op.name, start_ns, seconds);
    return out;
  }
  return k(inputs, attrs);
}

TensorList Dispatch(const OpDef& op, std::span<const Tensor> inputs, const Attrs& attrs) {
  for (const Tensor& t : inputs) {
    if (t.defined() && t.is_distributed()) {
      DistributedHandler h = distributed_handler.load();
      TESSEL_INTERNAL_ASSERT(h != nullptr, op.name, ": distributed input but no distributed handler is linked");
      return h(op, inputs, attrs);
    }
  }
  return DispatchLocal(op, inputs, attrs);
}

}  // namespace tessel
