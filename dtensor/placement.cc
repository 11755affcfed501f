// dtensor/placement.cc — string forms, parsing and the backward placement rule of Placement.
#include "dtensor/placement.h"

#include <cctype>
#include <optional>

#include "core/base/error.h"

namespace tessel::dtensor {
namespace {

std::optional<comm::ReduceOp> ParseReduceOp(std::string_view s) {
  for (comm::ReduceOp op : {comm::ReduceOp::kSum, comm::ReduceOp::kAvg, comm::ReduceOp::kMax,
                            comm::ReduceOp::kMin, comm::ReduceOp::kProduct}) {
    if (s == comm::ReduceOpName(op)) return op;
  }
  return std::nullopt;
}

std::string_view Trim(std::string_view s) {
  while (!s.empty() && std::isspace(static_cast<unsigned char>(s.front()))) s.remove_prefix(1);
  while (!s.empty() && std::isspace(static_cast<unsigned char>(s.back()))) s.remove_suffix(1);
  return s;
}

// One placement token, e.g. "S(0)", "Shard(dim=0)", "R", "Replicate()", "P", "P(avg)", "Partial(sum)".
std::optional<Placement> ParseOne(std::string_view tok) {
  const size_t open = tok.find('(');
  const std::string_view head = tok.substr(0, open);
  std::string_view arg;
  if (open != std::string_view::npos) {
    if (tok.back() != ')') return std::nullopt;
    arg = Trim(tok.substr(open + 1, tok.size() - open - 2));
  }
  if (head == "R" || head == "Replicate") {
    if (!arg.empty()) return std::nullopt;
    return Replicate{};
  }
  if (head == "P" || head == "Partial") {
    if (arg.empty()) return Partial{};
    std::optional<comm::ReduceOp> op = ParseReduceOp(arg);
    if (!op) return std::nullopt;
    return Partial{*op};
  }
  if (head == "S" || head == "Shard") {
    if (arg.substr(0, 4) == "dim=") arg.remove_prefix(4);
    if (arg.empty()) return std::nullopt;
    int64_t dim = 0;
    size_t i = 0;
    const bool negative = arg[0] == '-';
    if (negative) i = 1;
    if (i == arg.size()) return std::nullopt;
    for (; i < arg.size(); ++i) {
      if (!std::isdigit(static_cast<unsigned char>(arg[i]))) return std::nullopt;
      dim = dim * 10 + (arg[i] - '0');
    }
    return Shard{negative ? -dim : dim};
  }
  return std::nullopt;
}

}  // namespace

std::string Shard::ToString() const { return Str("S(", dim, ")"); }
std::string Shard::ToLongString() const { return Str("Shard(dim=", dim, ")"); }
std::string Partial::ToString() const { return Str("P(", comm::ReduceOpName(reduce_op), ")"); }
std::string Partial::ToLongString() const { return Str("Partial(", comm::ReduceOpName(reduce_op), ")"); }

bool IsSupportedPartialOp(comm::ReduceOp op) {
  return op == comm::ReduceOp::kSum || op == comm::ReduceOp::kAvg || op == comm::ReduceOp::kMax ||
         op == comm::ReduceOp::kMin;
}

std::string ToString(const Placement& p) {
  return std::visit([](const auto& v) { return v.ToString(); }, p);
}

std::string ToLongString(const Placement& p) {
  return std::visit([](const auto& v) { return v.ToLongString(); }, p);
}

std::string PlacementsToString(std::span<const Placement> placements) {
  std::string s = "[";
  for (size_t i = 0; i < placements.size(); ++i) {
    if (i) s += ", ";
    s += ToString(placements[i]);
  }
  return s + "]";
}

std::vector<Placement> ParsePlacements(std::string_view text) {
  std::vector<Placement> out;
  size_t i = 0;
  while (i < text.size()) {
    const char c = text[i];
    if (c == ',' || std::isspace(static_cast<unsigned char>(c))) {
      ++i;
      continue;
    }
    size_t j = i;
    int depth = 0;
    while (j < text.size() && (depth > 0 || (text[j] != ',' && !std::isspace(static_cast<unsigned char>(text[j]))))) {
      if (text[j] == '(') ++depth;
      if (text[j] == ')') --depth;
      ++j;
    }
    std::optional<Placement> p = ParseOne(text.substr(i, j - i));
    TESSEL_CHECK(p.has_value(), "ParsePlacements: cannot parse '", text.substr(i, j - i), "' in \"", text,
                 "\"; expected S(d), R, P(op) or Shard(dim=d), Replicate(), Partial(op)");
    out.push_back(*p);
    i = j;
  }
  return out;
}

std::ostream& operator<<(std::ostream& os, const Shard& p) { return os << p.ToString(); }
std::ostream& operator<<(std::ostream& os, const Replicate& p) { return os << p.ToString(); }
std::ostream& operator<<(std::ostream& os, const Partial& p) { return os << p.ToString(); }
std::ostream& operator<<(std::ostream& os, const Placement& p) { return os << ToString(p); }

Placement GradPlacement(const Placement& grad, const Placement& forward_src) {
  // A Partial source's gradient stays Replicate (or Shard): turning it back into Partial would only
  // force a reduction later, which is never cheaper (PyTorch's Redistribute.backward does the same).
  // A Partial gradient of another reduce op (e.g. P(sum) into a P(avg) source) must be reduced too:
  // Partial(op1) -> Partial(op2) is not a legal transition.
  if (IsPartial(forward_src) && (!IsPartial(grad) || !(grad == forward_src))) return Replicate{};
  return forward_src;
}

std::vector<Placement> LocalGradPlacements(const std::vector<Placement>& forward) {
  std::vector<Placement> out;
  for (const Placement& p : forward) out.push_back(IsPartial(p) ? Placement(Replicate{}) : p);
  return out;
}

}  // namespace tessel::dtensor
