// planner/activations.cc — the terms listed in activations.h.
#include "planner/activations.h"

#include "planner/pipeline.h"
#include "planner/sharding.h"

namespace tessel::planner {
namespace {

struct BlockTerms {
  int64_t sequence_region = 0, tp_region = 0, attention_core = 0, block_input = 0;  // bytes, undivided
};

BlockTerms Terms(const ModelSpec& m, const Layout& l) {
  const int64_t b = l.MicroBatchSize(), s = l.seq_len, h = m.d_model, a = m.n_heads, f = m.ffn_hidden;
  const int64_t e = ElementSize(l.param_dtype), sbh = s * b * h;
  BlockTerms t;
  t.sequence_region = 4 * e * sbh + (m.dropout ? 2 * sbh : 0);
  t.tp_region = 4 * e * sbh + (m.swiglu ? 4 : 2) * e * s * b * f;
  t.attention_core = m.flash_attention ? 4 * a * s * b : (e + (m.dropout ? 1 + e : 0)) * a * s * s * b;
  t.block_input = e * sbh;
  return t;
}

// The full (un-checkpointed) block on one tp rank; `core` says whether the attention core is kept.
int64_t Divided(const BlockTerms& t, const Layout& l, bool core) {
  const int64_t seq_divisor = l.sequence_parallel ? l.tp : 1;
  return t.sequence_region / seq_divisor + t.tp_region / l.tp + (core ? t.attention_core / l.tp : 0);
}

}  // namespace

int64_t BlockActivationBytes(const ModelSpec& m, const Layout& l) {
  const BlockTerms t = Terms(m, l);
  switch (l.ac) {
    case ActivationCheckpointing::kNone: return Divided(t, l, /*core=*/true);
    case ActivationCheckpointing::kSelective: return Divided(t, l, /*core=*/false);
    case ActivationCheckpointing::kFull: return t.block_input / (l.sequence_parallel ? l.tp : 1);
  }
  return 0;
}

int64_t ExtraActivationBytes(const ModelSpec& m, const Layout& l, int64_t stage) {
  const int64_t b = l.MicroBatchSize(), s = l.seq_len, e = ElementSize(l.param_dtype);
  const int64_t seq_divisor = l.sequence_parallel ? l.tp : 1;
  int64_t bytes = 0;
  if (stage == 0 && m.dropout) bytes += s * b * m.d_model / seq_divisor;
  if (stage == l.pp - 1) {
    bytes += 2 * e * s * b * m.d_model / seq_divisor;
    bytes += (e + 4) * s * b * ChunkSize(m.vocab_size, l.tp, 0);  // the largest vocab piece (tp rank 0)
  }
  return bytes;
}

int64_t ActivationsBytes(const ModelSpec& m, const Layout& l, int64_t stage) {
  const int64_t in_flight = InFlightMicrobatches(l, stage);
  const int64_t blocks = BlocksOfStage(m, l, stage).count;
  int64_t bytes = in_flight * (blocks * BlockActivationBytes(m, l) + ExtraActivationBytes(m, l, stage));
  if (l.ac == ActivationCheckpointing::kFull && blocks > 0) bytes += Divided(Terms(m, l), l, /*core=*/true);
  return bytes;
}

}  // namespace tessel::planner
