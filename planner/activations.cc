// planner/activations.cc — the terms listed in activations.h.
#include "planner/activations.h"

#include <algorithm>

#include "planner/pipeline.h"
#include "planner/sharding.h"

namespace tessel::planner {
namespace {

// fp32 statistics a tessel norm keeps per token: LayerNorm's mean and rstd, RMSNorm's rstd.
int64_t NormStatBytes(const ModelSpec& m) { return m.rmsnorm ? 4 : 8; }

// Tessel's nn::GPT outside its blocks (see activations.h), per microbatch.
int64_t TesselExtraBytes(const ModelSpec& m, const Layout& l, int64_t stage) {
  const int64_t sb = l.seq_len * l.MicroBatchSize(), e = ElementSize(l.param_dtype), h = m.d_model;
  const int64_t seq_divisor = l.sequence_parallel ? l.tp : 1;
  int64_t bytes = 0;
  if (stage == 0) {
    bytes += 2 * e * sb * h / seq_divisor + 8 * l.seq_len;  // wte's output, block 0's input; positions
    if (m.learned_positions) bytes += e * l.seq_len * h;    // wpe's output, once per microbatch
  }
  if (stage == l.pp - 1) {
    const int64_t v = ChunkSize(m.vocab_size, l.tp, 0);
    const int64_t ln_f = e * sb * h / seq_divisor + NormStatBytes(m) * sb;  // ln_f's output and statistics
    const int64_t cross_entropy = 2 * e * sb * v, head = e * sb * v + e * v * h + e * sb * h;
    // The last block's backward: ln_f and the head are freed, the MLP's weight gradient and three
    // activation gradients are live (GELU; SwiGLU's moment stays below the head's where measured).
    // A tied head's weight gradient stays live (an activation) until the embedding's adds to it.
    const int64_t tied = m.tie_embeddings ? e * v * h : 0;
    const int64_t last_block = m.swiglu ? 0 : e * h * m.ffn_hidden / l.tp + 3 * e * sb * h - ln_f + tied;
    bytes += ln_f + 4 + std::max({cross_entropy, head, last_block});  // + the loss
  }
  return bytes;
}

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
  if (m.saved == ModelSpec::SavedTensors::kTessel) {
    t.sequence_region += 2 * e * sbh + 2 * NormStatBytes(m) * s * b;
    t.tp_region += e * sbh;
  }
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
  if (m.saved == ModelSpec::SavedTensors::kTessel) return TesselExtraBytes(m, l, stage);
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
