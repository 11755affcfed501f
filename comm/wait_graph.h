// comm/wait_graph.h — FindDeadlock: the wait-for graph of callers blocked in Work::Wait, shared by the
// threads and gloo backends to turn "collectives issued on different groups in different orders" and
// "sends and receives that wait on each other" (a rank that left a pipeline step midway), also a send or receive
// against a collective, into an immediate error instead of a wait for the group timeout.
//
// Invariant: a reported cycle is a certain deadlock, given that each rank issues the calls of one group
// from one thread. A thread blocked on call `seq` of group G waits for every member of G that has not
// issued call `seq` yet, i.e. for that member's thread issuing on G; when the threads so reached are all
// blocked and lead back to the start, none of them can ever issue what the previous one waits for. The
// message names every call, group and rank, from the lowest rank on, so every rank of the cycle reports
// the same text whichever found it. Point to point is the same graph with one "group" per channel: a p2p
// thread blocked on the k-th receive of a channel waits for the sender's thread while the sender has posted
// at most k sends on it (and conversely for a send that waits for its receive). A rank's sends and receives
// on a group are posted in order by one queue (the backend's p2p CommThread: its worker, or a caller that
// runs the queued ops while it waits), so the graph's node for them is that queue (P2PPosterId), not an OS
// thread; the queue counts a post before it makes it, so a stale count can only hide an edge. A queue that is
// not blocked and has nothing queued waits for the thread that feeds it, the rank's thread issuing on the group
// (one thread per group, as above); a caller blocked on its own sends and receives waits for its queue.
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
#include <memory>
#include <optional>
#include <span>
#include <string>
#include <utility>
#include <vector>

#include "comm/work.h"

namespace tessel::comm {

// A thread of `rank` blocked in Wait on call `seq` of group `key` (`members`: the group's global ranks).
// Point to point: a backend's p2p queue (`thread` P2PPosterId) blocked on an unmatched send or receive,
// `key` its channel (P2PChannelKey), `seq` the op's index among this rank's posts on the channel (the k-th
// send of a channel matches its k-th receive), `members` the peer alone, `issuer_key` P2PIssuerKey of the
// group. A thread holds one entry per op it waits on (a batch); it is stuck if any of them is.
struct BlockedCall {
  int rank = 0;
  uint64_t thread = 0;
  std::string key;
  int64_t seq = 0;
  std::string call;   // DescribeCall(desc, true), or the p2p op's name
  std::string label;  // GroupLabel
  std::vector<int> members;
  // p2p: where a member's p2p thread is recorded when it has posted nothing on `key` yet ("" for collectives).
  std::string issuer_key;
  // A caller waiting for its own sends and receives (P2PCallerWait): the node of its rank it waits for, its
  // p2p queue (P2PPosterId); `members` is empty then.
  std::optional<uint64_t> local_target;
};

// The channel of a send from global rank `src` to global rank `dst` with `tag` on the group `group_key`: both
// ranks count their posts under it (the sender its sends, the receiver its receives).
std::string P2PChannelKey(const std::string& group_key, int src, int dst, int tag);
// The channel of an op that global rank `me` posts to or from global rank `peer`.
inline std::string P2POpChannel(const std::string& group_key, int me, int peer, bool is_send, int tag) {
  return P2PChannelKey(group_key, is_send ? me : peer, is_send ? peer : me, tag);
}
// Under this key a rank records the thread that posts its sends and receives on the group.
std::string P2PIssuerKey(const std::string& group_key);
// The "thread" of the wait-for graph that posts a rank's sends and receives on the group with `issuer_key`.
uint64_t P2PPosterId(const std::string& issuer_key);

// Per (global rank, group key): the thread issuing on the group and how many calls it issued. Under a p2p
// issuer key, the rank's batches of sends and receives on the group (NoteBatch): `queued` counts those handed to
// its p2p queue and not started yet (while any is, the queue may still post without its feeder) or holding a
// receive from any rank (never counted on a channel); `submitted` and `finished` number them in queue order (a
// caller waits for batch k only while finished <= k); `feeder` is the thread that hands them over.
struct IssueState {
  uint64_t thread = 0;
  int64_t issued = 0;
  int64_t queued = 0;
  int64_t submitted = 0;
  int64_t finished = 0;
  uint64_t feeder = 0;
};
using IssueMap = std::map<std::pair<int, std::string>, IssueState>;

// Counts a post of `rank`'s p2p queue on `channel` in `issued` (recording the queue under `issuer_key` too);
// returns the post's index on the channel. The backends call it before they post.
int64_t CountPost(IssueMap& issued, int rank, const std::string& channel, const std::string& issuer_key);
// A batch of sends and receives of `rank` on the group of `issuer_key`: kSubmitted by the thread that hands it to
// the p2p queue (before it is queued; returns the batch's ticket, its index in queue order), kStarted by the
// queue once its posts are counted (for a batch with a receive from any rank: once it is done), kFinished before
// its Work completes.
enum class BatchEvent { kSubmitted, kStarted, kFinished };
int64_t NoteBatch(IssueMap& issued, int rank, const std::string& issuer_key, BatchEvent event);
// The blocked call of a thread of `rank` that waits for its own sends and receives on the group of `issuer_key`
// (a send / recv / batch's Work::Wait): an edge to the rank's p2p queue. With it, and with an idle queue leading
// to the thread that feeds it (the one issuing on the group), a send whose peer sits in a collective on the group
// (a barrier after a pipeline step one rank left early) closes a cycle: rank 0 waits for its send, the send for
// rank 1's queue, the queue for rank 1's thread, that thread in the barrier for rank 0.
// `ticket`: the batch it waits for (NoteBatch's kSubmitted): the edge holds only until that batch finished, so a
// caller not yet woken from a finished batch never stands for a wait on the queue's next one.
BlockedCall P2PCallerWait(int rank, const std::string& issuer_key, std::string label, int64_t ticket);

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
// TrackBlockingWait that registers `wait` in `graph` (the threads backend's ThreadsWorld, gloo's WaitMonitor:
// BeginBlockedWait(wait) -> handle, EndBlockedWait(handle)) while the caller blocks.
template <typename Graph>
WorkPtr TrackBlockingWaitIn(std::shared_ptr<Graph> graph, BlockedCall wait, WorkPtr inner) {
  return TrackBlockingWait(
      std::move(inner), [graph, wait = std::move(wait)] { return graph->BeginBlockedWait(wait); },
      [graph](int64_t handle) { graph->EndBlockedWait(handle); });
}

}  // namespace tessel::comm
