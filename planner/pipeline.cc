// planner/pipeline.cc — the closed forms of pipeline.h.
#include "planner/pipeline.h"

#include <algorithm>

namespace tessel::planner {
namespace {

int64_t BoundaryBytes(const ModelSpec& m, const Layout& l) {
  const int64_t bytes = ElementSize(l.param_dtype) * l.seq_len * l.MicroBatchSize() * m.d_model;
  return l.sequence_parallel ? bytes / l.tp : bytes;
}

}  // namespace

int64_t InFlightMicrobatches(const Layout& l, int64_t stage) {
  if (l.pp == 1) return 1;
  if (l.schedule == Schedule::kGPipe) return l.num_microbatches;
  return std::min(l.pp - stage, l.num_microbatches);
}

double BubbleFactor(const Layout& l) {
  if (l.pp == 1) return 1.0;
  return static_cast<double>(l.num_microbatches + l.pp - 1) / static_cast<double>(l.num_microbatches);
}

int64_t PpCommBufferBytes(const ModelSpec& m, const Layout& l, int64_t stage) {
  if (l.pp == 1) return 0;
  const int64_t neighbours = (stage > 0 ? 1 : 0) + (stage < l.pp - 1 ? 1 : 0);
  return neighbours * l.num_microbatches * BoundaryBytes(m, l);
}

int64_t PpInputGradBytes(const ModelSpec& m, const Layout& l, int64_t stage) {
  return l.pp > 1 && stage > 0 ? BoundaryBytes(m, l) : 0;
}

int64_t PpAxisBytes(const ModelSpec& m, const Layout& l, int64_t stage) {
  if (l.pp == 1) return 0;
  const int64_t directions = (stage < l.pp - 1 ? 1 : 0) + (stage > 0 ? 1 : 0);
  return directions * l.num_microbatches * BoundaryBytes(m, l);
}

}  // namespace tessel::planner
