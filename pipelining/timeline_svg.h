// pipelining/timeline_svg.h — the timeline picture of a simulated program: one lane per rank, one box per
// action from its simulated start to end, colored by kind (F, B, I, W, UNSHARD/RESHARD, REDUCE_GRAD), labeled
// with the stage and microbatch, and a legend with the makespan and bubble.
//
// Invariant: the picture is a pure function of the SimulationResult (same input, same bytes), so it can be
// checked into docs and diffed; it is a self-contained SVG 1.1 document with no scripts or external refs.
//
// Example:
//   SimulationResult r = Simulate(prog, where);
//   std::string svg = TimelineSvg(r, "ZBVZeroBubble pp=4 m=8");
#pragma once

#include <string>
#include <string_view>

#include "pipelining/simulator.h"

namespace tessel::pipelining {

std::string TimelineSvg(const SimulationResult& result, std::string_view title);

}  // namespace tessel::pipelining
