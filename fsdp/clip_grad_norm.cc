// fsdp/clip_grad_norm.cc — one-all-reduce global-norm gradient clipping for sharded gradients.
#include "fsdp/clip_grad_norm.h"

#include <algorithm>
#include <cmath>
#include <map>
#include <optional>
#include <string>
#include <vector>

#include "core/autograd/grad_mode.h"
#include "core/base/error.h"
#include "core/memory/allocator.h"
#include "core/ops/elementwise.h"
#include "core/tensor/copy.h"
#include "core/tensor/factory.h"
#include "dtensor/dtensor_impl.h"
#include "dtensor/redistribute.h"
#include "dtensor/sharding_rule.h"
#include "fsdp/state.h"

namespace tessel::fsdp {
namespace {

double SumOfSquares(const Tensor& t) {
  Tensor c = t;
  if (!t.is_contiguous()) {
    c = Empty(t.sizes(), t.dtype(), t.device());
    CopyInto(c, t);
  }
  // kLanes independent partial sums (element i into lane i % kLanes, then the lanes in order): the
  // compiler vectorizes them, where one running sum waits on each add's latency (3% of a TP step's
  // samples at d_model 64). The order is fixed, so the norm is the same on every run.
  constexpr int kLanes = 8;
  double lanes[kLanes] = {};
  const int64_t n = c.numel();
  TESSEL_DISPATCH_FLOATING_TYPES(c.dtype(), "clip_grad_norm", [&] {
    const scalar_t* data = static_cast<const scalar_t*>(c.raw_data());
    int64_t i = 0;
    for (; i + kLanes <= n; i += kLanes) {
      for (int l = 0; l < kLanes; ++l) {
        const double v = static_cast<double>(ToCompute(data[i + l]));
        lanes[l] += v * v;
      }
    }
    for (; i < n; ++i) {
      const double v = static_cast<double>(ToCompute(data[i]));
      lanes[i % kLanes] += v * v;
    }
  });
  double total = 0;
  for (double lane : lanes) total += lane;
  return total;
}

// The local tensor and how many ranks of the group hold a copy of each of its elements. A DTensor on a sub-mesh
// of the group counts as replicated over the group's other sub-meshes of its shape: FSDP's plain parameters live
// on mesh["dp"] of a (dp, tp) mesh (torch's layout), one copy per tp coordinate.
std::pair<Tensor, double> LocalAndCopies(const Tensor& grad, int world_size) {
  const dtensor::DTensorImpl* d = dtensor::AsDTensorImpl(grad);
  if (d == nullptr) return {grad, static_cast<double>(world_size)};
  double copies = 1;
  for (int a = 0; a < d->mesh().ndim(); ++a) {
    TESSEL_INTERNAL_ASSERT(!dtensor::IsPartial(d->spec().placement(a)), "clip_grad_norm: Partial gradient ",
                           d->spec().ToString(), " left unreduced");
    if (!dtensor::IsShard(d->spec().placement(a))) copies *= static_cast<double>(d->mesh().size(a));
  }
  TESSEL_CHECK(world_size % d->mesh().size() == 0, "clip_grad_norm: a gradient lives on ", d->mesh().ToString(),
               " but the norm is reduced over a group of ", world_size, " ranks");
  return {d->local(), copies * static_cast<double>(world_size / d->mesh().size())};
}

// A Partial gradient's local values are summands, not elements (squaring them is not the norm): such a
// gradient (a Replicate parameter fed by sequence-sharded activations, e.g. a norm weight under sequence
// parallelism) is moved to its parameter's layout (Replicate on a Partial axis where the parameter is not
// a DTensor of the same mesh) and stored back as the .grad, on the grads ledger: the reduction the
// optimizer step would otherwise run, moved here. Per mesh, the all_reduces share flat buckets (one per
// axis, op and dtype: dtensor/redistribute.h), as the foreach optimizer's would.
void ReducePartialGrads(const TensorList& params) {
  struct Group {
    const dtensor::DeviceMesh* mesh = nullptr;
    TensorList params, grads;
    std::vector<std::optional<dtensor::ShardingState>> wants;
  };
  // By mesh, in the order the meshes first appear in params: the same on every rank (a map keyed by the
  // mesh's text would order a dp mesh over ranks [0, 2] and one over [1, 3] differently against a shared
  // dp x tp mesh, and the ranks' collectives would pair up wrongly).
  std::vector<std::pair<std::string, Group>> groups;
  for (const Tensor& p : params) {
    const Tensor g = p.grad();
    const dtensor::DTensorImpl* d = g.defined() ? dtensor::AsDTensorImpl(g) : nullptr;
    if (d == nullptr) continue;
    const std::vector<dtensor::Placement>& placements = d->spec().placements();
    if (std::none_of(placements.begin(), placements.end(), dtensor::IsPartial)) continue;
    const dtensor::DTensorImpl* pd = dtensor::AsDTensorImpl(p);
    const dtensor::DTensorSpec& layout = pd != nullptr && pd->mesh() == d->mesh() ? pd->spec() : d->spec();
    // (a Partial parameter's gradient is reduced whole)
    dtensor::ShardingState want = dtensor::PartialToReplicate(dtensor::StateOf(layout));
    const std::string key = d->mesh().ToString();
    auto it = std::find_if(groups.begin(), groups.end(), [&](const auto& g) { return g.first == key; });
    Group& group = it != groups.end() ? it->second : groups.emplace_back(key, Group{}).second;
    group.mesh = &d->mesh();
    group.params.push_back(p);
    group.grads.push_back(g);
    group.wants.push_back(std::move(want));
  }
  memory::LedgerScope grads_ledger(memory::Ledger::kGrads);
  for (auto& [key, group] : groups) {
    const TensorList locals = dtensor::ExecuteRedistributesCoalesced(group.grads, group.wants, *group.mesh);
    for (size_t i = 0; i < locals.size(); ++i) {
      const dtensor::DTensorSpec& src = dtensor::AsDTensorImpl(group.grads[i])->spec();
      dtensor::DTensorSpec dst(src.mesh_ptr(), group.wants[i]->placements, src.shape(), src.dtype(),
                               group.wants[i]->order);
      Tensor(group.params[i]).set_grad(dtensor::MakeDTensor(locals[i], std::move(dst), *group.mesh));
    }
  }
}

}  // namespace

double ClipGradNorm(const TensorList& params, double max_norm, const comm::ProcessGroupPtr& world) {
  // Any max_norm, as torch's: 0 zeroes the gradients (a "freeze" idiom), a negative one flips their sign.
  NoGradGuard no_grad;
  ReducePartialGrads(params);
  double local_sq = 0;
  for (const Tensor& p : params) {
    const Tensor g = p.grad();
    if (!g.defined()) continue;
    auto [local, copies] = LocalAndCopies(g, world->size());
    local_sq += SumOfSquares(local) / copies;
  }
  Tensor total = Full({1}, local_sq, DType::kFloat64);
  world->AllReduce(total, comm::ReduceOp::kSum)->Wait();
  const double norm = std::sqrt(total.item<double>());
  // torch's clamp(coef, max=1): a NaN norm (a NaN gradient anywhere) makes every gradient NaN rather than
  // leaving the finite ones to step, as a comparison 'coef < 1' did.
  const double coef = max_norm / (norm + 1e-6);
  if (std::isnan(coef) || coef < 1.0) {
    for (const Tensor& p : params) {
      const Tensor g = p.grad();
      if (g.defined()) MulScalarInPlace(LocalAndCopies(g, world->size()).first, coef);
    }
  }
  return norm;
}

double ClipGradNorm(const FSDPModule& root, double max_norm) {
  FsdpState& state = root.state();
  CommContext& ctx = state.context();
  const dtensor::DeviceMesh& mesh = state.mesh_info().mesh;
  if (!ctx.norm_group) {
    ctx.norm_group = mesh.ndim() == 1 ? mesh.axis_group(0) : mesh.Flatten(mesh.axis_names(), "fsdp_norm").axis_group(0);
  }
  // The sharded parameters of every group (what holds .grad after backward, whatever the modules point
  // at now), then any parameter no group manages.
  TensorList params;
  std::vector<const TensorImpl*> seen;
  for (auto& [fqn, m] : root.module().NamedModules()) {
    const FsdpState* s = FsdpState::Of(*m);
    if (s == nullptr || s->group() == nullptr) continue;
    for (const FsdpParam* p : s->group()->params()) {
      params.push_back(p->sharded_param());
      seen.push_back(p->sharded_param().impl());
      if (p->unsharded_param().defined()) seen.push_back(p->unsharded_param().impl());
    }
  }
  for (const Tensor& p : root.module().Parameters()) {
    if (std::find(seen.begin(), seen.end(), p.impl()) == seen.end()) params.push_back(p);
  }
  return ClipGradNorm(params, max_norm, ctx.norm_group);
}

}  // namespace tessel::fsdp
