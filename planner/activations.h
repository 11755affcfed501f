// planner/activations.h — the activations ledger, analytic: the bytes a transformer block saves for
// backward, after Korthikanti et al. 2022, "Reducing Activation Recomputation in Large Transformer
// Models" (section 4), generalized term by term so it covers SwiGLU, flash attention and no dropout.
//
// Invariant: for the paper's model (GELU MLP of width 4h, dropout, eager attention, 16-bit
// activations) BlockActivationBytes is exactly s·b·h·(34 + 5·a·s/h) with no parallelism, the
// paper's s·b·h·(10 + 24/t + 5·a·s/(h·t)) under TP, and s·b·h/t·(34 + 5·a·s/h) under TP + SP
// (activations_test.cc pins all three).
//
// Terms per block, for one microbatch of b sequences of s tokens, e = bytes of the activation dtype
// (the parameter dtype), masks 1 byte:
//   sequence region (÷ t only with sequence parallelism): ln1 input, QKV input, ln2 input, MLP input
//     (4·e·sbh), dropout masks after attention and MLP (2·sbh, with dropout)
//   tensor-parallel region (÷ t): Q, K, V and the output projection's input (4·e·sbh), the MLP's
//     hidden tensors (GELU: its input and output, 2·e·sbF; SwiGLU: w1 and w3 outputs, silu output,
//     their product, 4·e·sbF)
//   attention core (÷ t): eager: softmax output e·as²b, with dropout its mask as²b and output e·as²b;
//     flash attention: only the fp32 log-sum-exp, 4·asb
// Tessel's own saved tensors (ModelSpec::SavedTensors::kTessel, nn::GPT's ops as they are), on top:
// the residual adds keep nothing (their gradients need only shapes), the attention keeps its
// output and the [B, T, C] copy the output projection reads (+e·sbh, tp region; none when the rank runs
// one head: the reshape is then a view), and each norm its
// fp32 statistics (LayerNorm mean and rstd 8·sb, RMSNorm 4·sb; a norm keeps its statistics, not its
// output). Outside the blocks: on the first stage block 0's input (e·sbh) and the int64 positions (8·s)
// (the embeddings' outputs are only added); on the last stage the
// head's input (ln_f's output; under SP its all-gathered copy, whole) and ln_f's statistics, the loss
// (4 B), and the largest of three backward moments: cross-entropy's (the logits and their gradient,
// 2·e·sbV, on the rank's vocab piece under loss parallelism, which reads the logits in place),
// the head's (on the rank's vocab piece V/t: the logits' gradient, its weight gradient — an
// activation until accumulated into .grad — e·V·h/t, and its input's gradient e·sbh), and, for a GELU
// MLP, the last block's (ln_f and the head freed; in the MLP's output projection the weight gradient
// e·h·F/t, the GELU output's gradient e·sbF/t and the incoming gradient e·sbh/d — under SP plus its
// all-gathered copy e·sbh — live, the block's output freed, −e·sbh/d, where d = t with SP, else 1: at
// t = 1, e·h·F + 4·e·sbh; with tied embeddings also the head's weight gradient e·V·h/t, kept until the
// embedding's gradient is added to it). SwiGLU's last-block moment is taken as GELU's (its product's
// backward keeps more): it sets the peak only for small vocabularies, where the ledger is under-counted
// by up to 6% (V 61, h 32; exact at V 256, h 128). A backward moment is a transient
// of one microbatch: it is counted once per stage, not per microbatch in flight; on the other stages
// of a pipeline it is the GELU block's own (the same terms, ln_f's not subtracted:
// tests/planner_grid_test.cc holds it to measurement). With several microbatches in
// flight on the last stage (GPipe) each other one keeps the logits its loss saved (e·sbV).
// Under TP, the loss's V is the rank's vocab piece with loss parallelism and the whole vocabulary
// without (the logits are all-gathered); under SP the QKV and MLP inputs are kept all-gathered (whole,
// not ÷ t: the column-parallel linears save PrepareModuleInput's gathered tensor), and so is the head's
// input, while the norms' sequence-sharded outputs are not kept (tests/tp_memory_test.cc holds TP, TP +
// SP and FSDP × TP to the byte).
// activations_measured_test.cc holds this to the allocator's peak to the byte for GELU / SwiGLU,
// LayerNorm / RMSNorm, batches 1-8 and vocabularies where each moment sets the peak.
// Checkpointing: selective drops the attention core (recomputed); full keeps only the block input
// (e·sbh, ÷ t with SP) and adds one block's full set, the working set while it is recomputed (for
// tessel's GPT with the recomputed block's backward transient — four activation gradients 4·e·sbh,
// on the last stage the last block's moment — in place of the backward moment when larger).
// Outside the blocks, per microbatch: the embedding dropout mask (first stage, with dropout) and, on
// the last stage, ln_f's and the head's inputs (2·e·sbh, sequence region) plus the logits (e·sbV)
// and the loss's fp32 softmax (4·sbV), both ÷ t (vocab-parallel head).
//
// Example:
//   int64_t bytes = ActivationsBytes(ModelPreset("llama-7b"), layout, /*stage=*/0);
#pragma once

#include <cstdint>

#include "planner/layout.h"
#include "planner/model_spec.h"

namespace tessel::planner {

// One block, one microbatch, one tp rank, under `layout`'s tp, sp and checkpointing.
int64_t BlockActivationBytes(const ModelSpec& model, const Layout& layout);

// Bytes stage `stage` saves per microbatch outside its blocks (embedding mask, final norm, head, loss;
// not the backward moment).
int64_t ExtraActivationBytes(const ModelSpec& model, const Layout& layout, int64_t stage);

// The ledger's peak on a rank of stage `stage`: microbatches in flight (planner/pipeline.h) times
// (its blocks + extras), plus (tessel's GPT) the backward moment once, plus the recompute working set
// under full checkpointing.
int64_t ActivationsBytes(const ModelSpec& model, const Layout& layout, int64_t stage);

}  // namespace tessel::planner
