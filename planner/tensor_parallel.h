// planner/tensor_parallel.h — the tensor-parallel terms of the plan that are not parameter pieces
// (those are planner/sharding.h's, the activation splits planner/activations.h's): the comm buffer
// and the bytes the tp axis moves per step.
//
// Invariant (Megatron's f / g operators): each block's forward runs two tp collectives on an
// activation of N = e·s·b·h bytes (attention output and MLP output: all-reduces, or with sequence
// parallelism an all-gather before and a reduce-scatter after each parallel region — the same bytes
// per rank), and its backward two more; a ring all-reduce sends 2·(t − 1)/t·N per rank. Full
// checkpointing reruns the forward's two. The vocab-parallel embedding all-reduces its output once
// (first stage; under SP also wpe's [T, C] output reduce-scattered and its gradient all-gathered); the
// column-parallel head all-reduces its input's gradient (last stage); the vocab-parallel loss
// all-reduces three fp32 values per token (max, sum of exponentials, target logit), and without loss
// parallelism the vocab-sharded logits are all-gathered instead. Under SP the norms' Partial weight
// gradients are all-reduced once per step. tests/planner_grid_test.cc holds this to the comm tracer.
//
// Example:
//   int64_t sent = TpAxisBytes(model, layout, /*stage=*/0);
#pragma once

#include <cstdint>

#include "planner/layout.h"
#include "planner/model_spec.h"

namespace tessel::planner {

// The tp staging buffers (dtensor/redistribute.cc stages a gather or scatter along a dim other than 0:
// the gathered whole or the scattered input, t·(n / t) rows when t divides n; else also the padded
// local piece, (t + 1)·ceil(n / t) rows), one collective at a time.
// `sequence`: with sequence parallelism, an activation's all-gather / reduce-scatter along the sequence
// (e·s·b·h when t divides s), live in the blocks' backward next to fully_shard's buffers; `logits`: on
// the last stage without loss parallelism, the logits' all-gather along the vocabulary (e·V·b·s when t
// divides V), at the end of forward, when fully_shard stages no reduce-scatter. All 0 with t = 1;
// plain TP's all-reduces copy into activations.
struct TpCommBuffers {
  int64_t sequence = 0, logits = 0;
};
TpCommBuffers TpCommBufferBytes(const ModelSpec& model, const Layout& layout, int64_t stage);

int64_t TpAxisBytes(const ModelSpec& model, const Layout& layout, int64_t stage);

}  // namespace tessel::planner
