// comm/process_group.cc — ReduceOp names, the default (unsupported) BatchP2P and CachedSubgroup.
#include "comm/process_group.h"

#include <algorithm>
#include <cstdint>
#include <vector>

#include "comm/collective.h"
#include "comm/tracer.h"
#include "core/base/error.h"
#include "core/tensor/factory.h"

namespace tessel::comm {

std::string_view ReduceOpName(ReduceOp op) {
  switch (op) {
    case ReduceOp::kSum: return "sum";
    case ReduceOp::kAvg: return "avg";
    case ReduceOp::kMax: return "max";
    case ReduceOp::kMin: return "min";
    case ReduceOp::kProduct: return "product";
  }
  return "unknown";
}

std::shared_ptr<ProcessGroup> ProcessGroup::CachedSubgroup(const std::string& key,
                                                         const std::function<std::shared_ptr<ProcessGroup>()>& make) {
  std::lock_guard<std::mutex> lock(subgroups_mu_);
  std::shared_ptr<ProcessGroup>& g = subgroups_[key];
  if (g == nullptr) g = make();
  return g;
}

WorkPtr ProcessGroup::BatchP2P(const std::vector<P2POp>& /*ops*/) {
  TESSEL_FAIL(ErrorCode::kUnimplemented, "batch_p2p: the ", backend_name(), " backend does not implement it");
}

std::shared_ptr<ProcessGroup> ProcessGroup::MakeMemberGroup(const NewGroupMembers& /*members*/,
                                                           const std::string& /*key_suffix*/,
                                                           const std::string& /*name_suffix*/) {
  TESSEL_FAIL(ErrorCode::kUnimplemented, "new_group(use_local_synchronization=True): the ", backend_name(),
              " backend does not implement it; create the group on every rank");
}

std::shared_ptr<ProcessGroup> ProcessGroup::NewGroupAgreed(const std::vector<int>& ranks,
                                                           const std::string& key_prefix) {
  const NewGroupMembers members = CheckNewGroupRanks(*this, ranks);
  const int64_t id = next_group_id_++;  // every member calls NewGroup in the same order (checked here)
  AgreeOnNewGroup(*this, id, ranks);
  if (members.my_index < 0) return nullptr;
  return MakeMemberGroup(members, Str(key_prefix, id, "[", members.rank_list, "]"), Str(id));
}

std::shared_ptr<ProcessGroup> ProcessGroup::NewGroupAmongMembers(const std::vector<int>& ranks) {
  const NewGroupMembers members = CheckNewGroupRanks(*this, ranks);
  TESSEL_CHECK(members.my_index >= 0, "new_group(use_local_synchronization=True): rank ", rank(), " of ",
               GroupLabel(name(), global_ranks()), " is not in [", members.rank_list, "]; only members call it");
  const int64_t k = local_group_counts_[members.rank_list]++;
  const std::string suffix = Str("local[", members.rank_list, "]#", k);
  std::shared_ptr<ProcessGroup> group = MakeMemberGroup(members, suffix, suffix);
  AgreeOnNewGroup(*group, k, ranks);
  return group;
}

NewGroupMembers CheckNewGroupRanks(const ProcessGroup& parent, const std::vector<int>& ranks) {
  TESSEL_CHECK(!ranks.empty(), "new_group: empty rank list on ", GroupLabel(parent.name(), parent.global_ranks()));
  NewGroupMembers m;
  for (size_t i = 0; i < ranks.size(); ++i) {
    const int r = ranks[i];
    TESSEL_CHECK(r >= 0 && r < parent.size(), "new_group: rank ", r, " is not in ",
                 GroupLabel(parent.name(), parent.global_ranks()));
    TESSEL_CHECK(std::count(ranks.begin(), ranks.end(), r) == 1, "new_group: rank ", r, " listed twice");
    m.globals.push_back(parent.global_ranks()[static_cast<size_t>(r)]);
    m.rank_list += Str(i == 0 ? "" : ",", r);
    if (r == parent.rank()) m.my_index = static_cast<int>(i);
  }
  return m;
}

WorkPtr ProcessGroup::RecvAnySource(const Tensor& /*tensor*/, int /*tag*/) {
  TESSEL_FAIL(ErrorCode::kUnimplemented, "recv from any rank (src=None): the ", backend_name(),
              " backend does not support it (as in PyTorch); pass the source rank");
}

void AgreeOnNewGroup(ProcessGroup& parent, int64_t id, const std::vector<int>& ranks) {
  const int world = parent.size();
  if (world == 1) return;
  uint64_t hash = 1469598103934665603ull;  // FNV-1a over the list
  for (int r : ranks) hash = (hash ^ static_cast<uint64_t>(r)) * 1099511628211ull;
  constexpr int64_t kFields = 5;
  const std::vector<int64_t> mine{id, static_cast<int64_t>(ranks.size()), static_cast<int64_t>(hash >> 1),
                                  ranks.empty() ? -1 : ranks.front(), ranks.empty() ? -1 : ranks.back()};
  Tensor all = Empty({world * kFields}, DType::kInt64);
  try {
    CommTracerPause pause;
    parent.AllGather(all, FromVector<int64_t>(mine))->Wait();
  } catch (const Error& e) {
    TESSEL_FAIL(e.code(), "new_group #", id, " on ", GroupLabel(parent.name(), parent.global_ranks()),
                ": the members' agreement exchange failed: ", e.what());
  }
  const std::vector<int64_t> v = all.ToVector<int64_t>();
  auto describe = [&](int r) {
    const int64_t* f = v.data() + r * kFields;
    return Str("rank ", r, " (global ", parent.global_ranks()[static_cast<size_t>(r)], ") is at its new_group #", f[0],
               " with ", f[1], " ranks [", f[3], ", ..., ", f[4], "]");
  };
  for (int r = 0; r < world; ++r) {
    const int64_t* f = v.data() + r * kFields;
    if (f[0] == mine[0] && f[1] == mine[1] && f[2] == mine[2]) continue;
    TESSEL_FAIL(ErrorCode::kInvalidArgument, "new_group on ", GroupLabel(parent.name(), parent.global_ranks()),
                ": the ranks disagree: ", describe(parent.rank()), " but ", describe(r),
                ". Every rank of the group must call new_group with the same rank list, in the same order");
  }
}

}  // namespace tessel::comm
