// pipelining/action.h — the schedule IR: one `Action` (stage · kind · microbatch), a rank's program (a list of
// optional actions, an empty slot = idle) and a whole program (one list per rank, index = pipeline rank).
//
// Semantics follow PyTorch's torch/distributed/pipelining/schedules.py (`_Action`, `_ComputationType`):
//   F  forward of one microbatch through one stage        B  full backward (inputs and weights)
//   I  backward for the stage's inputs only (sends dX)    W  backward for the weights (the deferred dW work)
//   SEND_F / RECV_F  activations to/from the next/previous stage; SEND_B / RECV_B  gradients the other way
//   UNSHARD / RESHARD  all-gather / free a fully_shard-ed stage's parameters (no microbatch)
//   REDUCE_GRAD  the stage's cross-microbatch gradient reduction, after its last backward (no microbatch)
//
// Invariant: the compact text form round-trips exactly: `ParseAction(ToString(a)) == a` and
// `ToString(ParseAction(s)) == s` for every well-formed `s` ("1F0", "0W3", "2SEND_B2", "1UNSHARD").
// Compute kinds (F, B, I, W) and SEND/RECV always carry a microbatch; UNSHARD/RESHARD/REDUCE_GRAD never do.
//
// Example:
//   Action a = ParseAction("2SEND_B2");      // {stage 2, kSendB, microbatch 2}
//   ToString(a) == "2SEND_B2";
//   RankProgram r = ParseRankProgram("0F0,0F1,,0B0,0B1");   // slot 2 is idle
//   FormatProgram(program);                   // a step × rank grid for error messages and logs
#pragma once

#include <cstdint>
#include <functional>
#include <optional>
#include <ostream>
#include <string>
#include <string_view>
#include <vector>

namespace tessel::pipelining {

enum class ActionKind {
  kForward,         // "F"
  kFullBackward,    // "B"
  kBackwardInput,   // "I"
  kBackwardWeight,  // "W"
  kSendF,           // "SEND_F"
  kRecvF,           // "RECV_F"
  kSendB,           // "SEND_B"
  kRecvB,           // "RECV_B"
  kUnshard,         // "UNSHARD"
  kReshard,         // "RESHARD"
  kReduceGrad,      // "REDUCE_GRAD"
};

// "F", "B", "I", "W", "SEND_F", ... (PyTorch's `_ComputationType` values).
std::string_view ActionKindName(ActionKind kind);
// The inverse of ActionKindName; std::nullopt for an unknown name.
std::optional<ActionKind> ParseActionKind(std::string_view name);

// F, B, I or W (what PyTorch calls `is_compute_op`).
bool IsCompute(ActionKind kind);
// SEND_F, RECV_F, SEND_B, RECV_B.
bool IsComm(ActionKind kind);
// Kinds that carry a microbatch index (compute and comm); UNSHARD/RESHARD/REDUCE_GRAD do not.
bool HasMicrobatch(ActionKind kind);

struct Action {
  int stage = 0;
  ActionKind kind = ActionKind::kForward;
  std::optional<int> microbatch;  // set iff HasMicrobatch(kind)

  friend bool operator==(const Action&, const Action&) = default;
  // Orders by (stage, kind, microbatch) so actions can key ordered containers.
  friend bool operator<(const Action& a, const Action& b);
};

// Hash for unordered containers.
struct ActionHash {
  size_t operator()(const Action& a) const;
};

// Builders that read like the text form: F(1, 0) is "1F0".
inline Action F(int stage, int mb) { return {stage, ActionKind::kForward, mb}; }
inline Action B(int stage, int mb) { return {stage, ActionKind::kFullBackward, mb}; }
inline Action I(int stage, int mb) { return {stage, ActionKind::kBackwardInput, mb}; }
inline Action W(int stage, int mb) { return {stage, ActionKind::kBackwardWeight, mb}; }

// "1F0", "2SEND_B2", "1UNSHARD".
std::string ToString(const Action& a);
std::ostream& operator<<(std::ostream& os, const Action& a);

// Parses the compact form `<stage><KIND>[<microbatch>]`, surrounding whitespace allowed.
// Throws kInvalidArgument naming the text for anything else, including a microbatch on
// UNSHARD/RESHARD/REDUCE_GRAD or a missing one on F/B/I/W/SEND/RECV.
Action ParseAction(std::string_view text);
// Like ParseAction, but an empty (all-whitespace) text is an idle slot.
std::optional<Action> ParseSlot(std::string_view text);

// One rank's program in time order; std::nullopt = idle slot.
using RankProgram = std::vector<std::optional<Action>>;
// A whole program, index = pipeline rank.
using Program = std::vector<RankProgram>;

// Appends the slots of one cell to `r`: ParseSlot's one, or the actions of PyTorch's overlapped cell
// `(<action>;<action>...)OVERLAP_F_B` (DualPipeV's dump) one after the other, as tessel's programs have no
// overlapped action (its actions run in that order on the rank; their timing within the cell is lost).
void AppendSlots(std::string_view cell, RankProgram& r);

// Comma-separated slots, an idle slot is empty: "0F0,0F1,,0B0,0B1". Round-trips with ParseRankProgram.
std::string ToString(const RankProgram& r);
RankProgram ParseRankProgram(std::string_view text);

// The program without its idle slots (the order of actions is all that lowered programs keep).
RankProgram WithoutIdle(const RankProgram& r);

// Number of actions (non-idle slots) satisfying `pred` across the program.
int64_t CountActions(const Program& p, const std::function<bool(const Action&)>& pred);

// One line "\n  rank R, <position> N: <action><why>" per rank r whose next[r] indexes an action of p[r]: how
// the passes, the verifier and the simulator name the actions a stuck program is blocked on.
std::string DescribeNextActions(const Program& p, const std::vector<size_t>& next, std::string_view position,
                                std::string_view why);

// A step × rank grid ("Step 03: 0F1 1B0 ...") with an optional "<-- ERROR HERE" marker on one step, for
// error messages and logs (PyTorch's _format_pipeline_order).
std::string FormatProgram(const Program& p, std::optional<int> error_step = std::nullopt);

}  // namespace tessel::pipelining
