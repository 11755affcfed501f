// comm/backends/gloo_wait_monitor.h — WaitMonitor: deadlock detection for the gloo backend across
// processes (collectives issued on different groups in different orders), through the rendezvous store.
//
// Invariant: a rank raises a deadlock only for a cycle of comm/wait_graph.h that runs through one of its
// own callers blocked right now. Each process keeps its callers' blocked calls and the calls it issued per
// group; once a caller has waited kQuiet, its monitor thread publishes that snapshot to the store
// ("<prefix>wait/<rank>"), reads the peers' snapshots and looks for a cycle. A peer's snapshot may be older
// than its state, but a peer blocked on a call that waits for a frozen caller stays blocked, so a cycle that
// closes on a caller blocked now is a certain deadlock (calls that already have a verdict are left out: they
// are about to raise, not to wait). Sends and receives take part as in wait_graph.h: the p2p queue counts
// each op on its channel, and a batch registers its ops with named peers (a gloo send waits for its receive,
// as a receive for its send). The verdict
// goes to the store
// ("<prefix>deadlock/<group>/<seq>") for every call of the cycle, so every rank waiting in those calls raises
// it even if the rank that found it has moved on; the waiting header exchanges are aborted at once
// (kAborted with the verdict, the group broken). Cost: nothing until a wait lasts kQuiet; then a few store
// round trips per rank every kPeriod while it lasts. The same thread probes the connections of data
// transfers that last longer than kProbeAfter and aborts them when a peer is known gone (no store traffic).
//
// Example (gloo.cc):
//   monitor->NoteIssued(prefix, seq);                              // the user thread issued call seq
//   monitor->BeginExchange(prefix, seq, {recv.get(), send.get()});  // the comm thread waits for headers
//   if (auto verdict = monitor->deadlock(prefix, seq)) Break(ErrorCode::kAborted, *verdict);
#pragma once

#include <gloo/transport/unbound_buffer.h>

#include <chrono>
#include <condition_variable>
#include <functional>
#include <map>
#include <memory>
#include <mutex>
#include <optional>
#include <string>
#include <thread>
#include <vector>

#include "comm/store.h"
#include "comm/wait_graph.h"

namespace tessel::comm::gloo_internal {

class WaitMonitor {
 public:
  static constexpr std::chrono::milliseconds kQuiet{300};
  static constexpr std::chrono::milliseconds kPeriod{200};
  static constexpr std::chrono::milliseconds kProbeAfter{100};

  WaitMonitor(std::shared_ptr<Store> store, std::string prefix, int global_rank, int world_size);
  ~WaitMonitor();
  WaitMonitor(const WaitMonitor&) = delete;
  WaitMonitor& operator=(const WaitMonitor&) = delete;

  // The calling thread issued call `seq` of group `key` (seq -1: it made its handle of the group).
  void NoteIssued(const std::string& key, int64_t seq);
  // This rank's p2p queue of the group with P2PIssuerKey `issuer_key` is about to post an op on the channel
  // `channel` (wait_graph.h): counts it and returns its index there.
  int64_t NotePosted(const std::string& channel, const std::string& issuer_key);
  // Where the launcher records a worker process that exited (GlooOptions::departed_prefix; "" = nowhere), and what
  // it recorded for `global_rank` ("exited with exit code 0"), or nullopt.
  void set_exit_prefix(std::string prefix) { exit_prefix_ = std::move(prefix); }
  bool records_exits() const { return !exit_prefix_.empty(); }
  std::optional<std::string> Exited(int global_rank) const;
  // A batch of sends and receives of this rank's p2p queue of the group with `issuer_key` submitted, started or
  // finished: wait_graph.h's NoteBatch (the ticket of a submitted one).
  int64_t NoteBatch(const std::string& issuer_key, BatchEvent event);
  // The calling thread blocks in Wait on `wait` (rank, and thread except for p2p, filled in here) until
  // EndBlockedWait.
  int64_t BeginBlockedWait(BlockedCall wait);
  void EndBlockedWait(int64_t handle);
  // The comm thread waits in the header exchange of call `seq` of group `key`: a verdict aborts `buffers`.
  void BeginExchange(const std::string& key, int64_t seq, std::vector<gloo::transport::UnboundBuffer*> buffers);
  void EndExchange(const std::string& key, int64_t seq);
  std::optional<std::string> deadlock(const std::string& key, int64_t seq);
  // deadlock(key, seq), or else the verdict a peer's monitor published in the store for that call (recorded here
  // too): for a call that failed because a peer closed its connection, which a peer that found the deadlock does
  // once it raises and exits, before this rank's own round read the verdict. Reads the store: failure paths only.
  std::optional<std::string> PublishedDeadlock(const std::string& key, int64_t seq);
  // The comm thread moves the data of call `seq` of group `key` through `buffers`. Once that has lasted
  // kProbeAfter, every kPeriod `probe` names the group ranks whose connection is known closed (gloo.cc,
  // "In flight"); when it names any, `buffers`' waits are aborted and EndTransfer returns those ranks.
  // Called again for the same call, it replaces the buffer list (the transfer posted more).
  void BeginTransfer(const std::string& key, int64_t seq, std::vector<gloo::transport::UnboundBuffer*> buffers,
                     std::function<std::vector<int>()> probe);
  std::vector<int> EndTransfer(const std::string& key, int64_t seq);

 private:
  using Clock = std::chrono::steady_clock;
  void Run();
  void Round(std::unique_lock<std::mutex>& lock);
  void AwaitPeersSawVerdict(const std::vector<std::pair<std::pair<std::string, int64_t>, std::string>>& found,
                            const std::vector<BlockedCall>& mine, bool told);
  void ProbeTransfers();  // under mu_
  std::string Snapshot() const;
  // Records `verdict` for (key, seq) and aborts its exchange, if any. Under mu_.
  void Record(const std::pair<std::string, int64_t>& call, const std::string& verdict);

  std::shared_ptr<Store> store_;
  const std::string prefix_;
  const int rank_;
  const int world_size_;
  std::mutex mu_;
  std::condition_variable cv_;
  bool stop_ = false;
  IssueMap issued_;  // this rank's entries only
  std::map<int64_t, std::pair<BlockedCall, Clock::time_point>> blocked_;
  int64_t next_handle_ = 0;
  std::map<std::pair<std::string, int64_t>, std::vector<gloo::transport::UnboundBuffer*>> exchanges_;
  std::map<std::pair<std::string, int64_t>, std::string> verdicts_;
  struct Transfer {
    std::vector<gloo::transport::UnboundBuffer*> buffers;
    std::function<std::vector<int>()> probe;
    Clock::time_point start;
    std::vector<int> dead;  // non-empty once the waits were aborted
  };
  std::map<std::pair<std::string, int64_t>, Transfer> transfers_;
  std::string published_;  // the snapshot last written to the store ("" = none)
  std::string exit_prefix_;  // set once, before any group of the world exists
  std::thread thread_;     // last: started once everything above exists
};

// One batch of sends and receives of a group, as the wait-for graph sees it (wait_graph.h). Post() counts an
// op on its channel before the backend posts it (peer -1, a receive from any rank, stays out of the graph);
// Block() registers every other op as a blocked call of the group's p2p queue and counts the batch started
// (NoteBatch; a batch with a receive from any rank, which no channel counts, only at its end); the destructor
// counts it started if not yet, then finished; Watch() lists the batch's
// buffers, which a verdict on any of its ops aborts (the queue may be waiting on another op of the batch
// than the one judged); verdict() is that verdict. The destructor unregisters everything.
//
// Example (gloo_p2p.cc's RunP2P):
//   P2PBatchWatch graph(*monitor, prefix, my_global_rank);
//   for (op : ops) { graph.Post(peer, is_send, tag, name); post(op); }
//   graph.Block(label);
//   graph.Watch(buffers);  // again whenever the batch posts another buffer
//   if (!wait()) if (auto v = graph.verdict()) fail(*v);
class P2PBatchWatch {
 public:
  P2PBatchWatch(WaitMonitor& monitor, const std::string& group_key, int global_rank);
  ~P2PBatchWatch();
  P2PBatchWatch(const P2PBatchWatch&) = delete;
  P2PBatchWatch& operator=(const P2PBatchWatch&) = delete;

  void Post(int peer, bool is_send, int tag, std::string call);
  void Block(const std::string& label);
  void Watch(const std::vector<gloo::transport::UnboundBuffer*>& buffers);
  std::optional<std::string> verdict() const;

 private:
  struct Op {
    std::string channel;
    int64_t index;
    int peer;
    std::string call;
  };
  WaitMonitor& monitor_;
  const std::string group_key_;
  const std::string issuer_;
  const int rank_;
  std::vector<Op> ops_;  // those with a named peer
  std::vector<int64_t> handles_;
  bool started_ = false;
  bool any_source_ = false;
};

}  // namespace tessel::comm::gloo_internal
