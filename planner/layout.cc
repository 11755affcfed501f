// planner/layout.cc — Verify (the checklist is in the header), names and parsers.
#include "planner/layout.h"

#include <algorithm>
#include <utility>

#include "core/base/error.h"

namespace tessel::planner {

std::string Layout::ToString() const {
  std::string s = Str("pp", pp);
  if (pp > 1 || num_microbatches > 1) s += Str("(", ScheduleName(schedule), ",m", num_microbatches, ")");
  s += Str(" dp_replicate", dp_replicate, " dp_shard", dp_shard, " zero", zero_stage, " tp", tp);
  if (sequence_parallel) s += "+sp";
  if (loss_parallel) s += "+lp";
  return s + Str(" ac=", AcName(ac));
}

void Verify(const Layout& l, const ModelSpec& m, int64_t world) {
  m.Validate();
  const std::string where = Str("layout ", l.ToString(), " of ", m.name, ": ");
  auto positive = [&](const char* field, int64_t v) { TESSEL_CHECK(v >= 1, where, field, " must be >= 1, got ", v); };
  positive("pp", l.pp);
  positive("dp_replicate", l.dp_replicate);
  positive("dp_shard", l.dp_shard);
  positive("tp", l.tp);
  positive("num_microbatches", l.num_microbatches);
  positive("global_batch", l.global_batch);
  positive("seq_len", l.seq_len);
  TESSEL_CHECK(l.zero_stage >= 0 && l.zero_stage <= 3, where, "zero_stage must be 0, 1, 2 or 3, got ", l.zero_stage);
  TESSEL_CHECK(l.WorldSize() == world, where, "pp*dp_replicate*dp_shard*tp = ", l.pp, "*", l.dp_replicate, "*",
               l.dp_shard, "*", l.tp, " = ", l.WorldSize(), " but the world size is ", world);
  TESSEL_CHECK(l.zero_stage > 0 || l.dp_shard == 1, where, "zero_stage 0 replicates everything, so dp_shard must be 1",
               " (got ", l.dp_shard, "); use dp_replicate for plain data parallelism");
  TESSEL_CHECK(m.n_heads % l.tp == 0, where, "n_heads ", m.n_heads, " is not divisible by tp ", l.tp);
  TESSEL_CHECK(m.ffn_hidden % l.tp == 0, where, "ffn_hidden ", m.ffn_hidden, " is not divisible by tp ", l.tp);
  TESSEL_CHECK(l.pp <= m.n_layers, where, "pp ", l.pp, " exceeds n_layers ", m.n_layers,
               " (every pipeline stage needs a block)");
  // What the job cannot run is not a layout (the search ranked gpt2-small at pp 2 first, which
  // pipelining/model_split.cc refuses): a tied embedding would live on two stages, and loss parallelism is
  // not composed with a pipeline (examples/gpt/parallel_gpt.cc).
  TESSEL_CHECK_CODE(ErrorCode::kUnimplemented, !m.tie_embeddings || l.pp == 1, where,
                    "tied embeddings (wte = lm_head) with pp > 1: the weight would live on two stages, which tessel's "
                    "pipelining does not synchronize");
  TESSEL_CHECK_CODE(ErrorCode::kUnimplemented, !l.loss_parallel || l.pp == 1, where,
                    "loss_parallel with pp > 1 is not supported by the pipelined GPT");
  TESSEL_CHECK(!l.sequence_parallel || l.tp > 1, where, "sequence_parallel needs tp > 1");
  TESSEL_CHECK(!l.sequence_parallel || l.seq_len % l.tp == 0, where, "seq_len ", l.seq_len,
               " is not divisible by tp ", l.tp, " (sequence_parallel shards the sequence)");
  const int64_t split = l.Dp() * l.num_microbatches;
  TESSEL_CHECK(l.global_batch % split == 0, where, "global_batch ", l.global_batch,
               " is not divisible by dp_replicate*dp_shard*num_microbatches = ", split);
  TESSEL_CHECK(!m.learned_positions || l.seq_len <= m.max_seq_len, where, "seq_len ", l.seq_len,
               " exceeds the model's learned positions (max_seq_len ", m.max_seq_len, ")");
  // The activations' counts multiply the whole batch's tokens by the widths and layers: keep them inside int64.
  const long double tokens = static_cast<long double>(l.global_batch) * l.seq_len;
  const long double widest = std::max({m.d_model, m.ffn_hidden, m.vocab_size, l.seq_len});
  TESSEL_CHECK(tokens * widest * (m.n_layers + 1) * 64 < 9.2e18L, where, "global_batch ", l.global_batch, " x seq_len ",
               l.seq_len, " is too large: the activation byte counts would overflow int64");
  for (const auto& [field, dtype] : {std::pair<const char*, DType>{"param_dtype", l.param_dtype},
                                     {"reduce_dtype", l.reduce_dtype}, {"optim_dtype", l.optim_dtype}}) {
    TESSEL_CHECK(IsFloating(dtype), where, field, " must be a floating dtype, got ", dtype);
  }
}

int64_t ChunkSize(int64_t n, int64_t num_chunks, int64_t index) {
  const int64_t chunk = (n + num_chunks - 1) / num_chunks;
  return std::clamp<int64_t>(n - index * chunk, 0, chunk);
}

std::string_view ScheduleName(Schedule s) { return s == Schedule::kGPipe ? "gpipe" : "1f1b"; }

std::string_view AcName(ActivationCheckpointing ac) {
  switch (ac) {
    case ActivationCheckpointing::kNone: return "none";
    case ActivationCheckpointing::kSelective: return "selective";
    case ActivationCheckpointing::kFull: return "full";
  }
  return "?";
}

Schedule ParseSchedule(const std::string& name) {
  if (name == "gpipe") return Schedule::kGPipe;
  TESSEL_CHECK(name == "1f1b", "planner: schedule must be 'gpipe' or '1f1b', got '", name, "'");
  return Schedule::k1F1B;
}

ActivationCheckpointing ParseAc(const std::string& name) {
  if (name == "none") return ActivationCheckpointing::kNone;
  if (name == "selective") return ActivationCheckpointing::kSelective;
  TESSEL_CHECK(name == "full", "planner: activation checkpointing must be 'none', 'selective' or 'full', got '", name,
               "'");
  return ActivationCheckpointing::kFull;
}

DType ParseFloatDType(const std::string& name) {
  if (name == "float32" || name == "fp32") return DType::kFloat32;
  if (name == "bfloat16" || name == "bf16") return DType::kBFloat16;
  TESSEL_CHECK(name == "float16" || name == "fp16", "planner: dtype must be float32, bfloat16 or float16, got '",
               name, "'");
  return DType::kFloat16;
}

}  // namespace tessel::planner
