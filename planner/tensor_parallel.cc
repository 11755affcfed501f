// planner/tensor_parallel.cc — the tp comm buffer and traffic of tensor_parallel.h.
#include "planner/tensor_parallel.h"


#include "planner/pipeline.h"
#include "planner/sharding.h"

namespace tessel::planner {

TpCommBuffers TpCommBufferBytes(const ModelSpec& m, const Layout& l, int64_t stage) {
  const int64_t t = l.tp;
  if (t == 1) return {};
  const int64_t e = ElementSize(l.param_dtype), b = l.MicroBatchSize();
  // A gather or scatter along a dim other than 0 is staged: (t + 1) pieces of ceil(extent / t) rows.
  auto staged = [t](int64_t extent, int64_t rest) { return (t + 1) * ((extent + t - 1) / t) * rest; };
  TpCommBuffers out;
  if (l.sequence_parallel) out.sequence = e * staged(l.seq_len, b * m.d_model);
  if (!l.loss_parallel && stage == l.pp - 1) out.logits = e * staged(m.vocab_size, b * l.seq_len);
  return out;
}

int64_t TpAxisBytes(const ModelSpec& m, const Layout& l, int64_t stage) {
  const int64_t t = l.tp;
  if (t == 1) return 0;
  const int64_t tokens = l.seq_len * l.MicroBatchSize();
  const int64_t n = ElementSize(l.param_dtype) * tokens * m.d_model;  // one activation
  const int64_t all_reduce = 2 * (t - 1) * n / t;
  const int64_t per_block = (l.ac == ActivationCheckpointing::kFull ? 6 : 4) * all_reduce;
  int64_t per_microbatch = BlocksOfStage(m, l, stage).count * per_block;
  if (stage == 0) per_microbatch += all_reduce;
  if (stage == l.pp - 1) per_microbatch += 3 * 2 * (t - 1) * 4 * tokens / t;
  return l.num_microbatches * per_microbatch;
}

}  // namespace tessel::planner
