// core/dispatch/op.cc — the op registry.
#include "core/dispatch/op.h"

#include <map>
#include <memory>
#include <mutex>

#include "core/base/error.h"

namespace tessel {
namespace {

struct Registry {
  std::mutex mu;
  std::map<std::string, std::unique_ptr<OpDef>, std::less<>> ops;
  std::map<std::string, Kernel, std::less<>> pending_cuda;  // SetCudaKernel before RegisterOp
};
Registry& GetRegistry() {
  static auto* r = new Registry();
  return *r;
}

}  // namespace

const OpDef& RegisterOp(OpDef def) {
  Registry& r = GetRegistry();
  std::lock_guard<std::mutex> lock(r.mu);
  TESSEL_INTERNAL_ASSERT(!def.name.empty(), "op without a name");
  TESSEL_INTERNAL_ASSERT(r.ops.find(def.name) == r.ops.end(), "op '", def.name, "' registered twice");
  if (auto p = r.pending_cuda.find(def.name); p != r.pending_cuda.end()) {
    TESSEL_INTERNAL_ASSERT(!def.cuda, "op '", def.name, "' has a CUDA kernel twice");
    def.cuda = std::move(p->second);
    r.pending_cuda.erase(p);
  }
  auto owned = std::make_unique<OpDef>(std::move(def));
  const OpDef& ref = *owned;
  r.ops.emplace(ref.name, std::move(owned));
  return ref;
}

void SetCudaKernel(std::string_view name, Kernel kernel) {
  Registry& r = GetRegistry();
  std::lock_guard<std::mutex> lock(r.mu);
  if (auto it = r.ops.find(name); it != r.ops.end()) {
    TESSEL_INTERNAL_ASSERT(!it->second->cuda, "op '", name, "' has a CUDA kernel twice");
    it->second->cuda = std::move(kernel);
    return;
  }
  TESSEL_INTERNAL_ASSERT(r.pending_cuda.find(name) == r.pending_cuda.end(), "op '", name,
                         "' has a CUDA kernel twice");
  r.pending_cuda.emplace(std::string(name), std::move(kernel));
}

const OpDef* FindOp(std::string_view name) {
  Registry& r = GetRegistry();
  std::lock_guard<std::mutex> lock(r.mu);
  auto it = r.ops.find(name);
  return it == r.ops.end() ? nullptr : it->second.get();
}

const OpDef& GetOp(std::string_view name) {
  const OpDef* op = FindOp(name);
  TESSEL_INTERNAL_ASSERT(op != nullptr, "op '", name, "' is not registered (is its library linked?)");
  return *op;
}

std::vector<const OpDef*> AllOps() {
  Registry& r = GetRegistry();
  std::lock_guard<std::mutex> lock(r.mu);
  std::vector<const OpDef*> out;
  for (const auto& [name, def] : r.ops) out.push_back(def.get());
  return out;
}

std::set<std::string> OpsWithoutCudaKernel(const std::set<std::string>& names) {
  std::set<std::string> out;
  for (const std::string& name : names) {
    if (!GetOp(name).cuda) out.insert(name);
  }
  return out;
}

}  // namespace tessel
