// planner/pipeline.h — the pipeline-parallel terms of the plan: microbatches in flight per stage
// (the schedule's closed form), the bubble, the p2p buffers, the held input gradients and the bytes the
// pp axis moves.
//
// Invariant: the closed forms below are those of the schedules' steady state, for p stages and m
// microbatches per step: GPipe runs every forward before any backward, so stage s holds m
// microbatches' activations; 1F1B holds at most p − s on stage s (its warm-up depth), min(p − s, m).
// Both idle a fraction (p − 1)/(m + p − 1) of the step (the bubble). With pp == 1 the microbatches
// are gradient accumulation: one in flight.
//
// Example:
//   InFlightMicrobatches(Layout{.pp = 4, .num_microbatches = 8}, /*stage=*/1);   // 3 (1F1B)
#pragma once

#include <cstdint>

#include "planner/layout.h"
#include "planner/model_spec.h"

namespace tessel::planner {

int64_t InFlightMicrobatches(const Layout& layout, int64_t stage);

// Step time over bubble-free time: (m + p − 1) / m.
double BubbleFactor(const Layout& layout);

// The stage's receive buffers: one per microbatch of the step (e·s·b·h each, ÷ tp with sequence
// parallelism) per neighbouring stage — activations from the previous stage, gradients from the next —
// kept across steps (pipelining/stage.h's p2p buffers, like torch's per-microbatch recv buffers).
int64_t PpCommBufferBytes(const ModelSpec& model, const Layout& layout, int64_t stage);

// One microbatch's gradient of the stage input (e·s·b·h, ÷ tp with SP; 0 on the first stage): the stage
// keeps each microbatch's (it is the SEND_B buffer) until the next step, in the grads ledger (autograd
// accumulates it into the input leaf's .grad).
int64_t PpInputGradBytes(const ModelSpec& model, const Layout& layout, int64_t stage);

// Bytes stage `stage` sends over the pp axis per step: each microbatch's activations forward (not the
// last stage) and their gradients backward (not the first stage).
int64_t PpAxisBytes(const ModelSpec& model, const Layout& layout, int64_t stage);

}  // namespace tessel::planner
