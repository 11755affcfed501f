// checkpoint/save_plan.cc — global save planning: validation, de-duplication, balancing.
#include "checkpoint/save_plan.h"

#include <algorithm>
#include <bit>
#include <map>
#include <nlohmann/json.hpp>
#include <utility>

#include "checkpoint/chunk_index.h"
#include "core/base/error.h"

namespace tessel::checkpoint {
namespace {

using Json = nlohmann::json;

struct Holder {
  int rank;
  int item;
};
// (fqn, chunk offsets) → the ranks holding that chunk.
using HolderMap = std::map<std::pair<std::string, Shape>, std::vector<Holder>>;

std::string_view KindName(ItemKind k) {
  switch (k) {
    case ItemKind::kTensor:
      return "tensor";
    case ItemKind::kBytes:
      return "bytes";
    case ItemKind::kValue:
      return "value";
  }
  return "?";
}

// Ranks must agree on what each FQN is.
void CheckConsistent(const WriteItem& a, int rank_a, const WriteItem& b, int rank_b) {
  const std::string where = Str("save: '", a.fqn, "' on ranks ", rank_a, " and ", rank_b);
  TESSEL_CHECK(a.kind == b.kind, where, " is a ", KindName(a.kind), " and a ", KindName(b.kind));
  if (a.kind == ItemKind::kTensor) {
    TESSEL_CHECK(a.dtype == b.dtype && a.global_shape == b.global_shape, where, " has global ", DTypeName(a.dtype), " ",
                 ShapeStr(a.global_shape), " vs ", DTypeName(b.dtype), " ", ShapeStr(b.global_shape));
  } else {
    TESSEL_CHECK(a.content_hash == b.content_hash, where, " holds different ", KindName(a.kind),
                 " content; a key is saved once for all ranks. HINT: save per-rank state under per-rank keys "
                 "(e.g. '",
                 a.fqn, ".rank", rank_b, "')");
  }
}

HolderMap CollectHolders(std::span<const LocalSavePlan> plans) {
  HolderMap holders;
  std::map<std::string, Holder> first_of_fqn;
  for (const LocalSavePlan& p : plans) {
    for (size_t i = 0; i < p.items.size(); ++i) {
      const WriteItem& it = p.items[i];
      auto [first, inserted] = first_of_fqn.emplace(it.fqn, Holder{p.rank, static_cast<int>(i)});
      if (!inserted) {
        CheckConsistent(plans[static_cast<size_t>(first->second.rank)].items[static_cast<size_t>(first->second.item)],
                        first->second.rank, it, p.rank);
      }
      if (it.kind == ItemKind::kTensor && Volume(it.box) == 0) continue;  // empty shards write nothing
      auto& list = holders[{it.fqn, it.kind == ItemKind::kTensor ? it.box.offsets : Shape{}}];
      if (!list.empty() && it.kind == ItemKind::kTensor) {
        const WriteItem& other = plans[static_cast<size_t>(list[0].rank)].items[static_cast<size_t>(list[0].item)];
        TESSEL_CHECK(other.box == it.box, "save: '", it.fqn, "' chunks ", BoxToString(other.box), " (rank ",
                     list[0].rank, ") and ", BoxToString(it.box), " (rank ", p.rank, ") start together but differ");
      }
      list.push_back({p.rank, static_cast<int>(i)});
    }
  }
  return holders;
}

// The chosen chunks of each tensor must tile it: no overlap and full volume.
void CheckTiling(std::span<const LocalSavePlan> plans, const HolderMap& holders) {
  std::map<std::string, std::vector<std::pair<Box, int>>> per_fqn;
  std::map<std::string, Shape> shapes;
  for (const LocalSavePlan& p : plans) {
    for (const WriteItem& it : p.items) {
      if (it.kind == ItemKind::kTensor) shapes[it.fqn] = it.global_shape;
    }
  }
  for (const auto& [key, list] : holders) {
    const WriteItem& it = plans[static_cast<size_t>(list[0].rank)].items[static_cast<size_t>(list[0].item)];
    if (it.kind == ItemKind::kTensor) per_fqn[key.first].push_back({it.box, list[0].rank});
  }
  for (const auto& [fqn, shape] : shapes) {
    const auto& chunks = per_fqn[fqn];
    std::vector<Box> boxes;
    int64_t volume = 0;
    for (const auto& [b, r] : chunks) {
      boxes.push_back(b);
      volume += Volume(b);
    }
    const ChunkIndex index(boxes);
    for (size_t i = 0; i < boxes.size(); ++i) {
      for (int j : index.Overlapping(boxes[i])) {
        TESSEL_CHECK(static_cast<size_t>(j) == i, "save: chunks of '", fqn, "' overlap: ", BoxToString(boxes[i]),
                     " (rank ", chunks[i].second, ") and ", BoxToString(boxes[static_cast<size_t>(j)]), " (rank ",
                     chunks[static_cast<size_t>(j)].second, ")");
      }
    }
    TESSEL_CHECK(volume == NumElements(shape), "save: the ranks' chunks of '", fqn, "' cover ", volume, " of the ",
                 NumElements(shape), " elements of ", ShapeStr(shape),
                 "; every part of a tensor must be held by some rank");
  }
}

}  // namespace

GlobalSavePlan PlanGlobalSave(std::span<const LocalSavePlan> plans) {
  for (size_t r = 0; r < plans.size(); ++r) {
    TESSEL_INTERNAL_ASSERT(plans[r].rank == static_cast<int>(r), "plans must be in rank order");
  }
  const HolderMap holders = CollectHolders(plans);
  CheckTiling(plans, holders);
  GlobalSavePlan g;
  g.writes.resize(plans.size());
  g.bytes_per_rank.assign(plans.size(), 0);
  std::vector<std::pair<const HolderMap::key_type*, const std::vector<Holder>*>> shared;
  for (const auto& [key, list] : holders) {
    if (list.size() == 1) {
      g.writes[static_cast<size_t>(list[0].rank)].push_back(list[0].item);
      g.bytes_per_rank[static_cast<size_t>(list[0].rank)] +=
          plans[static_cast<size_t>(list[0].rank)].items[static_cast<size_t>(list[0].item)].nbytes;
    } else {
      shared.push_back({&key, &list});
    }
  }
  auto nbytes = [&](const std::vector<Holder>* l) {
    return plans[static_cast<size_t>((*l)[0].rank)].items[static_cast<size_t>((*l)[0].item)].nbytes;
  };
  std::stable_sort(shared.begin(), shared.end(),
                   [&](const auto& a, const auto& b) { return nbytes(a.second) > nbytes(b.second); });
  for (const auto& [key, list] : shared) {
    const Holder* best = &(*list)[0];
    for (const Holder& h : *list) {
      if (g.bytes_per_rank[static_cast<size_t>(h.rank)] < g.bytes_per_rank[static_cast<size_t>(best->rank)]) best = &h;
    }
    g.writes[static_cast<size_t>(best->rank)].push_back(best->item);
    g.bytes_per_rank[static_cast<size_t>(best->rank)] += nbytes(list);
  }
  for (size_t r = 0; r < plans.size(); ++r) {
    auto& w = g.writes[r];
    const auto& items = plans[r].items;
    std::sort(w.begin(), w.end(), [&](int a, int b) {
      const WriteItem& x = items[static_cast<size_t>(a)];
      const WriteItem& y = items[static_cast<size_t>(b)];
      return x.fqn != y.fqn ? x.fqn < y.fqn : x.box.offsets < y.box.offsets;
    });
  }
  return g;
}

std::string EncodeLocalPlan(const LocalSavePlan& plan) {
  Json items = Json::array();
  for (const WriteItem& it : plan.items) {
    Json j{{"fqn", it.fqn},
           {"kind", static_cast<int>(it.kind)},
           {"dtype", static_cast<int>(it.dtype)},
           {"shape", it.global_shape},
           {"offsets", it.box.offsets},
           {"sizes", it.box.sizes},
           {"layout", it.layout},
           {"nbytes", it.nbytes},
           {"hash", it.content_hash}};
    if (it.kind == ItemKind::kValue) {
      j["vtype"] = it.value.index();
      if (const auto* d = std::get_if<double>(&it.value)) {
        j["value"] = std::bit_cast<uint64_t>(*d);  // exact, NaN/Inf included
      } else {
        std::visit([&](const auto& v) { j["value"] = v; }, it.value);
      }
    }
    items.push_back(std::move(j));
  }
  return Json{{"rank", plan.rank}, {"save_id", plan.save_id}, {"error", plan.error}, {"items", items}}.dump();
}

LocalSavePlan DecodeLocalPlan(std::string_view text) {
  const Json j = Json::parse(text);
  LocalSavePlan p;
  p.rank = j.at("rank").get<int>();
  p.save_id = j.at("save_id").get<std::string>();
  p.error = j.at("error").get<std::string>();
  for (const Json& x : j.at("items")) {
    WriteItem it;
    it.fqn = x.at("fqn").get<std::string>();
    it.kind = static_cast<ItemKind>(x.at("kind").get<int>());
    it.dtype = static_cast<DType>(x.at("dtype").get<int>());
    it.global_shape = x.at("shape").get<Shape>();
    it.box = {x.at("offsets").get<Shape>(), x.at("sizes").get<Shape>()};
    it.layout = x.at("layout").get<std::string>();
    it.nbytes = x.at("nbytes").get<int64_t>();
    it.content_hash = x.at("hash").get<uint64_t>();
    if (it.kind == ItemKind::kValue) {
      const int vt = x.at("vtype").get<int>();
      if (vt == 0) it.value = x.at("value").get<int64_t>();
      if (vt == 1) it.value = std::bit_cast<double>(x.at("value").get<uint64_t>());
      if (vt == 2) it.value = x.at("value").get<std::string>();
    }
    p.items.push_back(std::move(it));
  }
  return p;
}

}  // namespace tessel::checkpoint
