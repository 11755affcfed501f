// pipelining/action.cc — the action IR's text form (see action.h).
#include "pipelining/action.h"

#include <algorithm>
#include <array>
#include <cctype>
#include <iterator>
#include <sstream>
#include <tuple>

#include "core/base/error.h"

namespace tessel::pipelining {
namespace {

struct KindName {
  ActionKind kind;
  std::string_view name;
};

// ParseAction cuts the kind token out whole (between the stage digits and the microbatch digits), so the
// lookup is an exact match and the order here does not matter.
constexpr std::array<KindName, 11> kKindNames = {{
    {ActionKind::kForward, "F"},
    {ActionKind::kFullBackward, "B"},
    {ActionKind::kBackwardInput, "I"},
    {ActionKind::kBackwardWeight, "W"},
    {ActionKind::kSendF, "SEND_F"},
    {ActionKind::kRecvF, "RECV_F"},
    {ActionKind::kSendB, "SEND_B"},
    {ActionKind::kRecvB, "RECV_B"},
    {ActionKind::kUnshard, "UNSHARD"},
    {ActionKind::kReshard, "RESHARD"},
    {ActionKind::kReduceGrad, "REDUCE_GRAD"},
}};

std::string_view Trim(std::string_view s) {
  while (!s.empty() && std::isspace(static_cast<unsigned char>(s.front()))) s.remove_prefix(1);
  while (!s.empty() && std::isspace(static_cast<unsigned char>(s.back()))) s.remove_suffix(1);
  return s;
}

// Parses a non-empty run of decimal digits that fits an int; std::nullopt otherwise.
std::optional<int> ParseIndex(std::string_view digits) {
  if (digits.empty() || digits.size() > 9) return std::nullopt;
  int v = 0;
  for (char c : digits) {
    if (c < '0' || c > '9') return std::nullopt;
    v = v * 10 + (c - '0');
  }
  return v;
}

bool IsCanonicalIndex(std::string_view digits) { return digits.size() == 1 || digits.front() != '0'; }

}  // namespace

std::string_view ActionKindName(ActionKind kind) {
  for (const KindName& k : kKindNames) {
    if (k.kind == kind) return k.name;
  }
  TESSEL_INTERNAL_ASSERT(false, "ActionKindName: unknown kind ", static_cast<int>(kind));
}

std::optional<ActionKind> ParseActionKind(std::string_view name) {
  for (const KindName& k : kKindNames) {
    if (k.name == name) return k.kind;
  }
  return std::nullopt;
}

bool IsCompute(ActionKind kind) {
  return kind == ActionKind::kForward || kind == ActionKind::kFullBackward || kind == ActionKind::kBackwardInput ||
         kind == ActionKind::kBackwardWeight;
}

bool IsComm(ActionKind kind) {
  return kind == ActionKind::kSendF || kind == ActionKind::kRecvF || kind == ActionKind::kSendB ||
         kind == ActionKind::kRecvB;
}

bool HasMicrobatch(ActionKind kind) { return IsCompute(kind) || IsComm(kind); }

bool operator<(const Action& a, const Action& b) {
  return std::tuple(a.stage, static_cast<int>(a.kind), a.microbatch.value_or(-1)) <
         std::tuple(b.stage, static_cast<int>(b.kind), b.microbatch.value_or(-1));
}

size_t ActionHash::operator()(const Action& a) const {
  const size_t h = static_cast<size_t>(a.stage) * 1000003u + static_cast<size_t>(a.kind) * 10007u;
  return h ^ static_cast<size_t>(a.microbatch.value_or(-1) + 1) * 0x9e3779b97f4a7c15ull;
}

std::string ToString(const Action& a) {
  std::string s = std::to_string(a.stage);
  s += ActionKindName(a.kind);
  if (a.microbatch.has_value()) s += std::to_string(*a.microbatch);
  return s;
}

std::ostream& operator<<(std::ostream& os, const Action& a) { return os << ToString(a); }

Action ParseAction(std::string_view text) {
  const std::string_view s = Trim(text);
  auto bad = [&](std::string_view why) {
    TESSEL_FAIL(ErrorCode::kInvalidArgument, "pipeline action '", text, "': ", why,
                "; expected <stage><kind>[<microbatch>] such as 2F0, 0W3, 1SEND_B2, 1UNSHARD");
  };
  size_t i = 0;
  while (i < s.size() && std::isdigit(static_cast<unsigned char>(s[i]))) ++i;
  if (i == 0) bad("no stage index");
  size_t j = s.size();
  while (j > i && std::isdigit(static_cast<unsigned char>(s[j - 1]))) --j;
  const std::string_view stage_digits = s.substr(0, i), kind_name = s.substr(i, j - i), mb_digits = s.substr(j);
  const std::optional<ActionKind> kind = ParseActionKind(kind_name);
  if (!kind.has_value()) bad(Str("unknown kind '", kind_name, "'"));
  const std::optional<int> stage = ParseIndex(stage_digits);
  if (!stage.has_value() || !IsCanonicalIndex(stage_digits)) bad("stage index is not a canonical integer");
  Action a{*stage, *kind, std::nullopt};
  if (HasMicrobatch(*kind)) {
    if (mb_digits.empty()) bad(Str(ActionKindName(*kind), " needs a microbatch index"));
    const std::optional<int> mb = ParseIndex(mb_digits);
    if (!mb.has_value() || !IsCanonicalIndex(mb_digits)) bad("microbatch index is not a canonical integer");
    a.microbatch = *mb;
  } else if (!mb_digits.empty()) {
    bad(Str(ActionKindName(*kind), " takes no microbatch index"));
  }
  return a;
}

std::optional<Action> ParseSlot(std::string_view text) {
  if (Trim(text).empty()) return std::nullopt;
  return ParseAction(text);
}

std::string ToString(const RankProgram& r) {
  std::string s;
  for (size_t i = 0; i < r.size(); ++i) {
    if (i > 0) s += ',';
    if (r[i].has_value()) s += ToString(*r[i]);
  }
  return s;
}

void AppendSlots(std::string_view cell, RankProgram& r) {
  const std::string_view s = Trim(cell);
  if (s.empty() || s.front() != '(') {
    r.push_back(ParseSlot(s));
    return;
  }
  const size_t close = s.find(')');
  TESSEL_CHECK(close != std::string_view::npos && s.substr(close + 1) == "OVERLAP_F_B", "pipeline action '", cell,
               "': a grouped cell must read (<action>;<action>...)OVERLAP_F_B, as PyTorch's DualPipeV dump writes it");
  std::string_view subs = s.substr(1, close - 1);
  while (true) {
    const size_t semi = subs.find(';');
    r.push_back(ParseAction(subs.substr(0, semi)));
    if (semi == std::string_view::npos) break;
    subs.remove_prefix(semi + 1);
  }
}

RankProgram ParseRankProgram(std::string_view text) {
  RankProgram r;
  if (Trim(text).empty()) return r;
  size_t begin = 0;
  while (true) {
    const size_t comma = text.find(',', begin);
    AppendSlots(text.substr(begin, comma == std::string_view::npos ? std::string_view::npos : comma - begin), r);
    if (comma == std::string_view::npos) break;
    begin = comma + 1;
  }
  return r;
}

RankProgram WithoutIdle(const RankProgram& r) {
  RankProgram out;
  std::copy_if(r.begin(), r.end(), std::back_inserter(out), [](const auto& a) { return a.has_value(); });
  return out;
}

int64_t CountActions(const Program& p, const std::function<bool(const Action&)>& pred) {
  int64_t n = 0;
  for (const RankProgram& r : p) {
    for (const auto& a : r) n += (a.has_value() && pred(*a)) ? 1 : 0;
  }
  return n;
}

std::string DescribeNextActions(const Program& p, const std::vector<size_t>& next, std::string_view position,
                                std::string_view why) {
  std::string out;
  for (size_t r = 0; r < p.size() && r < next.size(); ++r) {
    if (next[r] < p[r].size() && p[r][next[r]].has_value()) {
      out += Str("\n  rank ", r, ", ", position, " ", next[r], ": ", ToString(*p[r][next[r]]), why);
    }
  }
  return out;
}

std::string FormatProgram(const Program& p, std::optional<int> error_step) {
  size_t num_steps = 0;
  for (const RankProgram& r : p) num_steps = std::max(num_steps, r.size());
  const int label_width = static_cast<int>(std::to_string(num_steps == 0 ? 0 : num_steps - 1).size());
  std::vector<size_t> width(p.size());
  for (size_t rank = 0; rank < p.size(); ++rank) {
    width[rank] = std::string("Rank ").size() + std::to_string(rank).size();
    for (const auto& a : p[rank]) width[rank] = std::max(width[rank], a ? ToString(*a).size() : 0);
  }
  auto pad = [](std::string s, size_t w) { return s.size() < w ? s + std::string(w - s.size(), ' ') : s; };
  std::ostringstream os;
  os << std::string(label_width + 7, ' ');
  for (size_t rank = 0; rank < p.size(); ++rank) os << pad("Rank " + std::to_string(rank), width[rank]) << ' ';
  os << '\n';
  for (size_t step = 0; step < num_steps; ++step) {
    std::string label = std::to_string(step);
    os << "Step " << std::string(label_width - label.size(), '0') << label << ": ";
    for (size_t rank = 0; rank < p.size(); ++rank) {
      const bool has = step < p[rank].size() && p[rank][step].has_value();
      os << pad(has ? ToString(*p[rank][step]) : "", width[rank]) << ' ';
    }
    if (error_step.has_value() && static_cast<size_t>(*error_step) == step) os << "<-- ERROR HERE";
    os << '\n';
  }
  return os.str();
}

}  // namespace tessel::pipelining
