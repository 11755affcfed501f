// pipelining/timeline_svg.cc — the SVG timeline of a simulation (see timeline_svg.h).
#include "pipelining/timeline_svg.h"

#include <algorithm>
#include <cstdio>
#include <string>

namespace tessel::pipelining {
namespace {

constexpr double kLabelWidth = 70, kLaneHeight = 28, kTop = 34, kMaxPlotWidth = 1200;

struct KindStyle {
  const char* name;
  const char* color;
};

// One color per family; SEND/RECV take no rank time and are not drawn.
KindStyle StyleOf(ActionKind kind) {
  switch (kind) {
    case ActionKind::kForward: return {"F forward", "#4e79a7"};
    case ActionKind::kFullBackward: return {"B full backward", "#e15759"};
    case ActionKind::kBackwardInput: return {"I backward (input)", "#f28e2b"};
    case ActionKind::kBackwardWeight: return {"W backward (weight)", "#59a14f"};
    case ActionKind::kUnshard:
    case ActionKind::kReshard: return {"UNSHARD / RESHARD", "#b07aa1"};
    case ActionKind::kReduceGrad: return {"REDUCE_GRAD", "#9c755f"};
    default: return {"comm", "#bab0ac"};
  }
}

std::string Num(double v) {
  char buf[32];
  std::snprintf(buf, sizeof(buf), "%.2f", v);
  return buf;
}

std::string Escape(std::string_view s) {
  std::string out;
  for (char c : s) {
    switch (c) {
      case '&': out += "&amp;"; break;
      case '<': out += "&lt;"; break;
      case '>': out += "&gt;"; break;
      case '"': out += "&quot;"; break;
      default: out += c;
    }
  }
  return out;
}

std::string Box(const TimedAction& t, double scale) {
  const KindStyle style = StyleOf(t.action.kind);
  const double x = kLabelWidth + t.start * scale, w = std::max((t.end - t.start) * scale, 1.0);
  const double y = kTop + t.rank * kLaneHeight;
  const std::string label = t.action.microbatch.has_value()                ? std::to_string(*t.action.microbatch)
                            : t.action.kind == ActionKind::kReduceGrad ? std::string("R")
                                                                       : std::string("U");
  std::string s = "<g><title>rank " + std::to_string(t.rank) + ": " + ToString(t.action) + " [" + Num(t.start) +
                  ", " + Num(t.end) + ")</title>";
  s += "<rect x=\"" + Num(x) + "\" y=\"" + Num(y + 2) + "\" width=\"" + Num(w) + "\" height=\"" +
       Num(kLaneHeight - 4) + "\" fill=\"" + style.color + "\" stroke=\"#ffffff\" stroke-width=\"0.5\"/>";
  if (w >= 9) {
    s += "<text x=\"" + Num(x + w / 2) + "\" y=\"" + Num(y + kLaneHeight / 2 + 4) +
         "\" text-anchor=\"middle\" font-size=\"10\" fill=\"#ffffff\">" + Escape(label) + "</text>";
  }
  return s + "</g>\n";
}

std::string Legend(const SimulationResult& r, double y) {
  const ActionKind kinds[] = {ActionKind::kForward,        ActionKind::kFullBackward, ActionKind::kBackwardInput,
                              ActionKind::kBackwardWeight, ActionKind::kUnshard,      ActionKind::kReduceGrad};
  std::string s;
  double x = kLabelWidth;
  for (ActionKind k : kinds) {
    const KindStyle style = StyleOf(k);
    s += "<rect x=\"" + Num(x) + "\" y=\"" + Num(y) + "\" width=\"12\" height=\"12\" fill=\"" + style.color + "\"/>";
    s += "<text x=\"" + Num(x + 16) + "\" y=\"" + Num(y + 10) + "\" font-size=\"11\">" + Escape(style.name) +
         "</text>\n";
    x += 16 + 7.0 * std::string(style.name).size() + 14;
  }
  s += "<text x=\"" + Num(kLabelWidth) + "\" y=\"" + Num(y + 30) + "\" font-size=\"11\">makespan " + Num(r.makespan) +
       ", bubble " + Num(100 * r.bubble) + "% (mean idle fraction over ranks); box labels are microbatch numbers" +
       "</text>\n";
  return s;
}

}  // namespace

std::string TimelineSvg(const SimulationResult& result, std::string_view title) {
  const int num_ranks = static_cast<int>(result.busy.size());
  const double scale = result.makespan > 0 ? std::clamp(kMaxPlotWidth / result.makespan, 4.0, 40.0) : 1.0;
  const double width = kLabelWidth + result.makespan * scale + 20;
  const double legend_y = kTop + num_ranks * kLaneHeight + 14;
  const double height = legend_y + 44;
  std::string s = "<?xml version=\"1.0\" encoding=\"UTF-8\"?>\n";
  s += "<svg xmlns=\"http://www.w3.org/2000/svg\" version=\"1.1\" width=\"" + Num(std::max(width, 760.0)) +
       "\" height=\"" + Num(height) + "\" font-family=\"sans-serif\">\n";
  s += "<rect x=\"0\" y=\"0\" width=\"100%\" height=\"100%\" fill=\"#ffffff\"/>\n";
  s += "<text x=\"" + Num(kLabelWidth) + "\" y=\"20\" font-size=\"14\">" + Escape(title) + "</text>\n";
  for (int r = 0; r < num_ranks; ++r) {
    const double y = kTop + r * kLaneHeight;
    s += "<rect x=\"" + Num(kLabelWidth) + "\" y=\"" + Num(y + 2) + "\" width=\"" + Num(result.makespan * scale) +
         "\" height=\"" + Num(kLaneHeight - 4) + "\" fill=\"#f2f2f2\"/>";
    s += "<text x=\"8\" y=\"" + Num(y + kLaneHeight / 2 + 4) + "\" font-size=\"12\">rank " + std::to_string(r) +
         "</text>\n";
  }
  for (const TimedAction& t : result.timeline) {
    if (!IsComm(t.action.kind) && t.end > t.start) s += Box(t, scale);
  }
  s += Legend(result, legend_y);
  return s + "</svg>\n";
}

}  // namespace tessel::pipelining
