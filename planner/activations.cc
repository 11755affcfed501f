// planner/activations.cc — the terms listed in activations.h.
#include "planner/activations.h"

#include <algorithm>

#include "planner/pipeline.h"
#include "planner/sharding.h"

namespace tessel::planner {
namespace {

// fp32 statistics a tessel norm keeps per token: LayerNorm's mean and rstd, RMSNorm's rstd.
int64_t NormStatBytes(const ModelSpec& m) { return m.rmsnorm ? 4 : 8; }

// The vocabulary the loss sees per rank: the rank's piece under loss parallelism; without it the head's
// vocab-sharded output is all-gathered and the loss sees whole logits.
int64_t LossVocab(const ModelSpec& m, const Layout& l) {
  return l.loss_parallel ? ChunkSize(m.vocab_size, l.tp, 0) : m.vocab_size;
}

// The vocabulary of the head's own output piece: the rank's vocab shard under TP (column-parallel head),
// whatever the loss sees.
int64_t HeadVocab(const ModelSpec& m, const Layout& l) { return ChunkSize(m.vocab_size, l.tp, 0); }

// The head's input (ln_f's output, or under SP its all-gathered copy: the norm keeps only its
// statistics) and ln_f's statistics (on the sequence shard under SP).
int64_t LnFBytes(const ModelSpec& m, const Layout& l) {
  const int64_t sb = l.seq_len * l.MicroBatchSize(), e = ElementSize(l.param_dtype), h = m.d_model;
  const bool sp = l.sequence_parallel && l.tp > 1;
  return e * sb * h + NormStatBytes(m) * sb / (sp ? l.tp : 1);
}

// Tessel's nn::GPT outside its blocks (see activations.h), saved per microbatch.
int64_t TesselExtraBytes(const ModelSpec& m, const Layout& l, int64_t stage) {
  const int64_t sb = l.seq_len * l.MicroBatchSize(), e = ElementSize(l.param_dtype), h = m.d_model;
  const int64_t seq_divisor = l.sequence_parallel ? l.tp : 1;
  int64_t bytes = 0;
  if (stage == 0) {
    bytes += e * sb * h / seq_divisor + 8 * l.seq_len;  // block 0's input; positions
  }
  if (stage == l.pp - 1) bytes += LnFBytes(m, l) + 4;  // ln_f's output and statistics; the loss
  return bytes;
}

// Tessel's nn::GPT: transients of one microbatch's backward (see activations.h). A GELU block's, in its
// MLP's output projection: the weight gradient (an activation until accumulated into .grad), the GELU
// output's gradient, and the gradient flowing in (the residual stream's, on the sequence shard under SP,
// plus under SP its all-gathered copy), less the block's output, freed by then (at tp 1 and F = 4h:
// e·hF + 4·e·sbh). SwiGLU's moment stays below the head's where measured.
int64_t TesselBlockMomentBytes(const ModelSpec& m, const Layout& l) {
  const int64_t sb = l.seq_len * l.MicroBatchSize(), e = ElementSize(l.param_dtype), h = m.d_model;
  const bool sp = l.sequence_parallel && l.tp > 1;
  const int64_t sbh_seq = e * sb * h / (sp ? l.tp : 1), f_local = m.ffn_hidden / l.tp;
  const int64_t grad_in = sbh_seq + (sp ? e * sb * h : 0);
  // SwiGLU's is taken as GELU's (its product's backward keeps more, unmodeled: activations.h).
  return e * h * f_local + e * sb * f_local + grad_in - sbh_seq;
}

// The last block's backward on the last stage: ln_f and the head are freed; a tied head's weight
// gradient stays live (an activation) until the embedding's adds to it.
int64_t TesselLastBlockMomentBytes(const ModelSpec& m, const Layout& l) {
  const int64_t tied = m.tie_embeddings ? ElementSize(l.param_dtype) * HeadVocab(m, l) * m.d_model : 0;
  return TesselBlockMomentBytes(m, l) - LnFBytes(m, l) + tied;
}

// The largest transient of one microbatch's backward on the stage, once per stage whatever the
// microbatches in flight: the block's on the other stages of a pipeline; on the last, the largest of
// cross-entropy's, the head's and the last block's.
int64_t TesselBackwardMomentBytes(const ModelSpec& m, const Layout& l, int64_t stage) {
  if (stage < l.pp - 1) return TesselBlockMomentBytes(m, l);
  const int64_t sb = l.seq_len * l.MicroBatchSize(), e = ElementSize(l.param_dtype), h = m.d_model;
  const int64_t v = LossVocab(m, l), head_v = HeadVocab(m, l);
  // Loss parallel adds nothing: the vocab-sharded loss reads its logits in place (dtensor/rules/loss.cc).
  const int64_t cross_entropy = 2 * e * sb * v, head = e * sb * head_v + e * head_v * h + e * sb * h;
  return std::max({cross_entropy, head, TesselLastBlockMomentBytes(m, l)});
}

struct BlockTerms {
  int64_t sequence_region = 0, tp_region = 0, attention_core = 0, block_input = 0;  // bytes, undivided
  // The part of sequence_region that tessel keeps all-gathered under SP (whole, not ÷ t): the QKV and
  // MLP inputs, which the column-parallel linears save after PrepareModuleInput's all-gather
  // (Megatron instead saves the shard and gathers again in backward).
  int64_t sp_gathered = 0;
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
    t.sequence_region += 2 * NormStatBytes(m) * s * b;
    // The output projection reads a [B, T, C] copy of the attention's [B, H, T, D] output, unless the
    // rank runs one head (then the transpose is already contiguous and the reshape is a view).
    if (a / l.tp > 1) t.tp_region += e * sbh;
    t.sp_gathered = 2 * e * sbh;
  }
  return t;
}

// The full (un-checkpointed) block on one tp rank; `core` says whether the attention core is kept.
int64_t Divided(const BlockTerms& t, const Layout& l, bool core) {
  const int64_t seq_divisor = l.sequence_parallel ? l.tp : 1;
  const int64_t gathered = l.sequence_parallel ? t.sp_gathered : 0;
  return (t.sequence_region - gathered) / seq_divisor + gathered + t.tp_region / l.tp +
         (core ? t.attention_core / l.tp : 0);
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
  const int64_t working_set = l.ac == ActivationCheckpointing::kFull && blocks > 0 ? Divided(Terms(m, l), l, true) : 0;
  if (m.saved != ModelSpec::SavedTensors::kTessel) return bytes + working_set;
  // Tessel's GPT: the moment of one microbatch's backward, or under full checkpointing the block being
  // recomputed (its full set) with that block's backward transient — four activation gradients, or on
  // the last stage the last block's moment — whichever is larger (cross-entropy's and the head's
  // moments end before any block is recomputed).
  const int64_t e = ElementSize(l.param_dtype), sb = l.seq_len * l.MicroBatchSize();
  int64_t moment = TesselBackwardMomentBytes(m, l, stage);
  if (working_set > 0) {
    // (SwiGLU's last-block moment is not modeled: there the whole stage moment is added, an upper bound.)
    const int64_t block_grads = stage < l.pp - 1 ? 4 * e * sb * m.d_model / (l.sequence_parallel ? l.tp : 1)
                                : m.swiglu   ? moment
                                             : TesselLastBlockMomentBytes(m, l);
    moment = std::max(moment, working_set + block_grads);
  }
  // The last stage's other microbatches in flight (GPipe) keep the logits the loss saved (e·sbV each);
  // the moment's microbatch is already counted in it.
  if (stage == l.pp - 1) bytes += (in_flight - 1) * e * sb * LossVocab(m, l);
  return bytes + moment;
}

}  // namespace tessel::planner
