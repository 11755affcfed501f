// pipelining/microbatch.cc — microbatch sizes, views and loss weights.
#include "pipelining/microbatch.h"

#include "core/base/error.h"
#include "core/ops/concat.h"
#include "core/ops/view.h"

namespace tessel::pipelining {

std::vector<int64_t> MicrobatchSizes(int64_t rows, int num_microbatches) {
  TESSEL_CHECK(num_microbatches >= 1, "microbatch split: num_microbatches must be >= 1, got ", num_microbatches);
  TESSEL_CHECK(rows >= num_microbatches, "microbatch split: a batch of ", rows, " rows (dim 0) cannot fill ",
               num_microbatches, " microbatches; use at most ", rows, " microbatches or a larger batch");
  std::vector<int64_t> sizes(num_microbatches, rows / num_microbatches);
  for (int64_t i = 0; i < rows % num_microbatches; ++i) ++sizes[i];
  return sizes;
}

std::vector<Tensor> SplitMicrobatches(const Tensor& batch, int num_microbatches) {
  TESSEL_CHECK(batch.defined() && batch.dim() >= 1, "microbatch split: need a tensor with a batch dim 0, got ",
               batch.defined() ? ShapeStr(batch.sizes()) : std::string("an undefined tensor"));
  std::vector<Tensor> out;
  int64_t start = 0;
  for (int64_t rows : MicrobatchSizes(batch.size(0), num_microbatches)) {
    out.push_back(Narrow(batch, 0, start, rows));
    start += rows;
  }
  return out;
}

std::vector<double> MicrobatchLossWeightsFromCounts(const std::vector<int64_t>& counts, std::vector<double> fallback) {
  int64_t total = 0;
  for (int64_t c : counts) {
    TESSEL_CHECK(c >= 0, "pipeline loss weights: a microbatch's loss denominator must be >= 0, got ", c);
    total += c;
  }
  if (total == 0) return fallback;
  std::vector<double> w;
  for (int64_t c : counts) w.push_back(static_cast<double>(c) / static_cast<double>(total));
  return w;
}

int64_t CountNotIgnored(const Tensor& targets, int64_t ignore_index) {
  int64_t n = 0;
  for (int64_t t : Contiguous(targets).ToVector<int64_t>()) n += t != ignore_index;
  return n;
}

std::vector<double> MicrobatchLossWeights(int64_t rows, int num_microbatches) {
  std::vector<double> w;
  for (int64_t r : MicrobatchSizes(rows, num_microbatches)) w.push_back(static_cast<double>(r) / rows);
  return w;
}

Tensor MergeMicrobatches(const std::vector<Tensor>& microbatches) {
  TESSEL_CHECK(!microbatches.empty(), "MergeMicrobatches: no microbatches");
  return Cat(microbatches, 0);
}

}  // namespace tessel::pipelining
