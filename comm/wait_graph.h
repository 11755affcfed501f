// comm/wait_graph.h — FindDeadlock: the wait-for graph of callers blocked in Work::Wait, shared by the
// threads and gloo backends to turn "collectives issued on different groups in different orders" into an
// immediate error instead of a wait for the group timeout.
//
// Invariant: a reported cycle is a certain deadlock, given that each rank issues the calls of one group
// from one thread. A thread blocked on call `seq` of group G waits for every member of G that has not
// issued call `seq` yet, i.e. for that member's thread issuing on G; when the threads so reached are all
// blocked and lead back to the start, none of them can ever issue what the previous one waits for. The
// message names every call, group and rank, from the lowest rank on, so every rank of the cycle reports
// the same text whichever found it.
//
// Example:
//   std::vector<BlockedCall> blocked = {{.rank = 0, .thread = t0, .key = "sub", .seq = 0, ...},
//                                       {.rank = 1, .thread = t1, .key = "world", .seq = 0, ...}};
//   IssueMap issued = {{{0, "sub"}, {t0, 1}}, {{1, "sub"}, {t1, 0}}, {{0, "world"}, {t0, 0}}, {{1, "world"}, {t1, 1}}};
//   std::optional<Deadlock> d = FindDeadlock(blocked, issued, 0, t0);   // rank 0 <-> rank 1
#pragma once

#include <cstdint>
#include <functional>
#include <map>
#include <optional>
#include <span>
#include <string>
#include <utility>
#include <vector>

#include "comm/work.h"

namespace tessel::comm {

// A thread of `rank` blocked in Wait on call `seq` of group `key` (`members`: the group's global ranks).
struct BlockedCall {
  int rank = 0;
  uint64_t thread = 0;
  std::string key;
  int64_t seq = 0;
  std::string call;   // DescribeCall(desc, true)
  std::string label;  // GroupLabel
  std::vector<int> members;
};

// Per (global rank, group key): the thread issuing on the group and how many calls it issued.
struct IssueState {
  uint64_t thread = 0;
  int64_t issued = 0;
};
using IssueMap = std::map<std::pair<int, std::string>, IssueState>;

struct Deadlock {
  std::string message;
  std::vector<std::pair<std::string, int64_t>> calls;  // (group key, seq) of every call in the cycle
};

// The cycle through thread `start_thread` of `start_rank` (which must be in `blocked`), if any.
std::optional<Deadlock> FindDeadlock(std::span<const BlockedCall> blocked, const IssueMap& issued, int start_rank,
                                     uint64_t start_thread);

// Whether the blocked call `w` waits for any peer (a member that has not issued its call yet): without such
// an edge `w` cannot be on a cycle, so FindDeadlock from it finds nothing. The backends check this first;
// it costs a few map lookups, where FindDeadlock copies the blocked set (most waits have no edge: every
// member already issued the call).
bool WaitsOnAPeer(const BlockedCall& w, const IssueMap& issued);

// A thread id as the graph's (and the gloo snapshots') number.
uint64_t ThisThreadId();

// `inner` whose Wait(), when the work is not complete yet, runs begin() before blocking and end(its result)
// after (also when the wait throws): how a backend learns which call each caller is blocked on.
WorkPtr TrackBlockingWait(WorkPtr inner, std::function<int64_t()> begin, std::function<void(int64_t)> end);

}  // namespace tessel::comm
