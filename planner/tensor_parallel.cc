// planner/tensor_parallel.cc — the tp comm buffer and traffic of tensor_parallel.h.
#include "planner/tensor_parallel.h"


#include "planner/pipeline.h"
#include "planner/sharding.h"

namespace tessel::planner {

TpCommBuffers TpCommBufferBytes(const ModelSpec& m, const Layout& l, int64_t stage) {
  const int64_t t = l.tp;
  if (t == 1) return {};
  const int64_t e = ElementSize(l.param_dtype), b = l.MicroBatchSize();
  // A gather or scatter along a dim other than 0 is staged: t pieces of extent / t rows when t divides
  // the extent, else (t + 1) padded pieces of ceil(extent / t) rows.
  auto staged = [t](int64_t extent, int64_t rest) {
    return (extent % t == 0 ? t : t + 1) * ((extent + t - 1) / t) * rest;
  };
  TpCommBuffers out;
  if (l.sequence_parallel) out.sequence = e * staged(l.seq_len, b * m.d_model);
  if (!l.loss_parallel && stage == l.pp - 1) out.logits = e * staged(m.vocab_size, b * l.seq_len);
  return out;
}

namespace {

// Parameters of one norm (ln_f's: weight, and bias for LayerNorm), whose gradients come out Partial
// under sequence parallelism.
int64_t NormNumel(const ModelSpec& m) {
  int64_t n = 0;
  for (const auto& [fqn, shape] : m.ParameterShapes()) {
    if (fqn.rfind("ln_f.", 0) == 0) n += NumElements(shape);
  }
  return n;
}

}  // namespace

int64_t TpAxisBytes(const ModelSpec& m, const Layout& l, int64_t stage) {
  const int64_t t = l.tp;
  if (t == 1) return 0;
  const int64_t tokens = l.seq_len * l.MicroBatchSize(), e = ElementSize(l.param_dtype);
  const int64_t n = e * tokens * m.d_model;  // one activation
  const int64_t all_reduce = 2 * (t - 1) * n / t;  // or, under SP, an all-gather + reduce-scatter pair
  const int64_t per_block = (l.ac == ActivationCheckpointing::kFull ? 6 : 4) * all_reduce;
  const int64_t blocks = BlocksOfStage(m, l, stage).count;
  int64_t per_microbatch = blocks * per_block;
  if (stage == 0) {
    per_microbatch += all_reduce;  // wte's output
    // SP: wpe's [T, C] output reduce-scattered, its gradient all-gathered.
    if (l.sequence_parallel && m.learned_positions) per_microbatch += 2 * (t - 1) * e * l.seq_len * m.d_model / t;
  }
  if (stage == l.pp - 1) {
    per_microbatch += all_reduce;  // the head's input gradient
    // The loss: with loss parallelism its statistics; without, the all-gather of the vocab-sharded logits.
    per_microbatch += l.loss_parallel ? 3 * 2 * (t - 1) * 4 * tokens / t
                                      : (t - 1) * e * tokens * ChunkSize(m.vocab_size, t, 0);
  }
  int64_t bytes = l.num_microbatches * per_microbatch;
  if (l.sequence_parallel) {  // the norms' Partial gradients, all-reduced once per step
    const int64_t norms = 2 * blocks + (stage == l.pp - 1 ? 1 : 0);
    bytes += norms * 2 * (t - 1) * e * NormNumel(m) / t;
  }
  return bytes;
}

}  // namespace tessel::planner
