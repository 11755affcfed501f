// core/autograd/anomaly.h — torch's anomaly mode (torch.autograd.detect_anomaly / set_detect_anomaly): while it
// is on with check_nan, every backward function's outputs are checked as the engine produces them, and the first
// one holding a NaN fails the backward at once, naming the function and the output ("Function 'MulBackward0'
// returned nan values in its 0th output.", torch's words), instead of the NaN spreading silently into every
// gradient below it. Off by default: the check reads every gradient once (a full pass over its memory).
//
// Invariant: process-wide, as torch's flag (rank threads share it); checking never changes a gradient.
// DTensor gradients (whose shards live in dtensor/, above this layer) are not checked; their dense producers
// and the local computations around them are.
//
// Example:
//   SetAnomalyMode(true);
//   Backward(loss);   // kFailedPrecondition "Function 'DivBackward0' returned nan values in its 1th output."
#pragma once

#include <cstddef>
#include <memory>
#include <string>

#include "core/autograd/node.h"

namespace tessel::autograd {

void SetAnomalyMode(bool enabled, bool check_nan = true);
bool AnomalyModeEnabled();
bool AnomalyCheckNan();

// torch's "Error detected in MulBackward0. Traceback of forward call that caused the error: ...": while anomaly
// mode is on, every node records the stack of the forward call that made it (`provider`, installed by a front end:
// the Python face gives the interpreter's stack), and a node whose backward fails (an error, or a NaN found by
// CheckAnomaly) hands its name and that stack to `reporter` (the Python face warns, as torch) before the error
// propagates. Without a provider (a C++ program) nodes record nothing and errors name the node alone.
using ForwardTraceProvider = std::string (*)();
using AnomalyTraceReporter = void (*)(const std::string& node_name, const std::string& trace);
void SetForwardTraceHooks(ForwardTraceProvider provider, AnomalyTraceReporter reporter);

namespace internal {
// The forward stack a node made now records (null unless anomaly mode is on and a provider is installed).
std::unique_ptr<std::string> ForwardTrace();
// Hands `node`'s recorded stack to the reporter (nothing when it has none).
void ReportForwardTrace(const Node& node);
// Fails (kFailedPrecondition) when anomaly mode checks NaN and one of `outputs` (node's gradients for its
// inputs) holds one; nothing otherwise.
void CheckAnomaly(const Node& node, const TensorList& outputs);
}  // namespace internal

}  // namespace tessel::autograd
