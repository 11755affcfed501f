// dtensor/debug/visualize_sharding.cc — the per-rank table and the block summary.
#include "dtensor/debug/visualize_sharding.h"

#include <algorithm>
#include <map>

#include "core/base/error.h"
#include "dtensor/layout.h"

namespace tessel::dtensor {
namespace {

std::string Range(const DimInterval& iv) {
  if (iv.length == 0) return "empty";
  return Str("[", iv.offset, ", ", iv.offset + iv.length, ")");
}

std::string Coordinate(const std::vector<int64_t>& c) {
  std::string s = "(";
  for (size_t i = 0; i < c.size(); ++i) s += (i ? ", " : "") + std::to_string(c[i]);
  return s + ")";
}

std::string ValueColumn(const DTensorSpec& spec) {
  std::string s;
  for (int a = 0; a < spec.mesh().ndim(); ++a) {
    if (const Partial* p = std::get_if<Partial>(&spec.placement(a))) {
      s +=
          Str(s.empty() ? "" : ", ", "partial(", comm::ReduceOpName(p->reduce_op), ") over ", spec.mesh().axis_name(a));
    }
  }
  return s.empty() ? "full" : s;
}

// Rows of cells, left-aligned in columns two spaces apart (no trailing spaces).
std::string Table(const std::vector<std::vector<std::string>>& rows) {
  std::vector<size_t> width;
  for (const auto& row : rows) {
    if (width.size() < row.size()) width.resize(row.size(), 0);
    for (size_t c = 0; c < row.size(); ++c) width[c] = std::max(width[c], row[c].size());
  }
  std::string out;
  for (const auto& row : rows) {
    std::string line;
    for (size_t c = 0; c < row.size(); ++c) {
      line += row[c];
      if (c + 1 < row.size()) line += std::string(width[c] - row[c].size() + 2, ' ');
    }
    out += line + "\n";
  }
  return out;
}

}  // namespace

std::string VisualizeSharding(const DTensorSpec& spec) {
  std::string out = Str("DTensor ", ShapeStr(spec.shape()), " ", DTypeName(spec.dtype()), ", placements ",
                        PlacementsToString(spec.placements()));
  if (!IsDefaultShardOrder(spec.shard_order())) out += Str(", shard order ", ShardOrderToString(spec.shard_order()));
  out += Str(", mesh ", spec.mesh().ShortString(), "\n");
  std::vector<std::vector<std::string>> rows;
  std::vector<std::string> header = {"rank", "coordinate"};
  for (int64_t d = 0; d < spec.ndim(); ++d) header.push_back(Str("dim ", d));
  header.push_back("value");
  rows.push_back(header);
  const std::string value = ValueColumn(spec);
  std::vector<std::pair<std::string, std::vector<int>>> blocks;  // in first-seen order
  for (const RankRegion& r : AllRankRegions(spec)) {
    std::vector<std::string> row = {std::to_string(r.rank), Coordinate(r.coordinate)};
    std::string block;
    for (size_t d = 0; d < r.intervals.size(); ++d) {
      row.push_back(Range(r.intervals[d]));
      block += (d ? " x " : "") + Range(r.intervals[d]);
    }
    if (block.empty()) block = "scalar";
    row.push_back(value);
    rows.push_back(std::move(row));
    auto it = std::find_if(blocks.begin(), blocks.end(), [&](const auto& b) { return b.first == block; });
    if (it == blocks.end()) {
      blocks.push_back({block, {r.rank}});
    } else {
      it->second.push_back(r.rank);
    }
  }
  out += Table(rows) + "blocks:\n";
  for (const auto& [block, ranks] : blocks) {
    std::string list;
    for (size_t i = 0; i < ranks.size(); ++i) list += (i ? ", " : "") + std::to_string(ranks[i]);
    out += Str("  ", block, ": rank", ranks.size() > 1 ? "s " : " ", list, "\n");
  }
  return out;
}

std::string VisualizeSharding(const DTensor& tensor) { return VisualizeSharding(tensor.spec()); }

}  // namespace tessel::dtensor
