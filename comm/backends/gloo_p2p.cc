// comm/backends/gloo_p2p.cc — GlooProcessGroup's sends and receives (BatchP2P, RecvAnySource): each batch on the
// group's p2p queue, every send preceded by its descriptor and answered by the receiver's verdict, and the
// wait-for graph's view of the batch (P2PBatchWatch, P2PCallerWait). The collectives are in gloo.cc.
#include <exception>
#include <string>
#include <vector>

#include "comm/backends/gloo_group.h"

namespace tessel::comm::gloo_internal {

WorkPtr GlooProcessGroup::BatchP2P(const std::vector<P2POp>& ops) {
  CheckP2POps(ops, rank_, size(), DeviceType::kCpu);
  TraceP2POps(ops, name());
  const std::string label = GroupLabel(name(), global_ranks());
  return SubmitP2P([this, ops, timeout = timeout(), label] { RunP2P(ops, label, timeout); });
}

WorkPtr GlooProcessGroup::RecvAnySource(const Tensor& tensor, int tag) {
  return IssueRecvAnySource(*this, tensor, [&](std::shared_ptr<int> source) {
    const std::string label = GroupLabel(name(), global_ranks());
    return SubmitP2P([this, tensor, tag, source, timeout = timeout(), label] {
      RunP2P({P2POp{P2POp::Kind::kRecv, tensor, kAnySource, tag}}, label, timeout, source.get());
    });
  });
}

WorkPtr GlooProcessGroup::SubmitP2P(std::function<void()> run) {
  // Queued before it is handed over (RunP2P's P2PBatchWatch counts it started), and the caller's wait for it is a
  // node of the wait-for graph (P2PCallerWait): a send against a peer's collective is then a deadlock found at once.
  const std::string issuer = P2PIssuerKey(prefix_);
  const int64_t ticket = monitor_->NoteBatch(issuer, BatchEvent::kSubmitted);
  BlockedCall wait = P2PCallerWait(global_ranks_[rank_], issuer, GroupLabel(name(), global_ranks()), ticket);
  return TrackBlockingWaitIn(monitor_, std::move(wait), p2p_thread_.Get().Submit(std::move(run)));
}

void GlooProcessGroup::RunP2P(std::vector<P2POp> ops, const std::string& label, milliseconds timeout, int* any_source) {
  if (const std::optional<std::string> broken = Broken()) {
    const std::string issuer = P2PIssuerKey(prefix_);  // (the batch ends here: P2PBatchWatch below never exists)
    monitor_->NoteBatch(issuer, BatchEvent::kStarted);
    monitor_->NoteBatch(issuer, BatchEvent::kFinished);
    TESSEL_FAIL(ErrorCode::kAborted, "p2p on ", label, " cannot run: the group is unusable: ", *broken);
  }
  std::vector<std::unique_ptr<gloo::transport::UnboundBuffer>> bufs;
  const auto deadline = Clock::now() + timeout;
  size_t current = 0;  // the op being posted, then the one being waited on
  // Each send is preceded by a descriptor (bytes, dtype) on a slot of its own; each receive reads the
  // descriptor before it posts its buffer, sends its own back as the verdict, and raises kAborted "p2p
  // mismatch" on a difference, after taking the sender's payload into scratch so the pair's stream stays in
  // step (the group stays usable); the sender reads the verdict and raises the same message, so both sides
  // fail, as the threads backend's (which matches both sides in one place). Gloo itself compares nothing: a
  // shorter send left the tail of the receive stale, another dtype was read bit for bit, and a longer send
  // aborted the receiving process inside gloo. A gloo send is not eager: it completes once its receiver
  // posted the receive (measured: a lone 16-byte send waits for it), as a threads send does; the verdict
  // leaves the receiver before that, so waiting for it costs a send no extra round trip.
  struct Desc {
    int64_t bytes = 0, dtype = 0;
    bool operator==(const Desc&) const = default;
  };
  // This rank's descriptors, its receives' senders' and its sends' verdicts, in one heap block that an abort
  // hands to KeepAborted with the buffers that point into it (read and written with memcpy).
  const size_t n_ops = ops.size();
  std::vector<char> desc_store(3 * n_ops * sizeof(Desc));
  enum Which : size_t { kMine = 0, kTheirs = 1, kVerdict = 2 };
  auto desc_at = [&](Which w, size_t i) { return desc_store.data() + (w * n_ops + i) * sizeof(Desc); };
  auto desc = [&](Which w, size_t i) {
    Desc d;
    std::memcpy(&d, desc_at(w, i), sizeof(Desc));
    return d;
  };
  auto mismatch_message = [&](int sender, int receiver, int tag, const Desc& sent, const Desc& posted) {
    return Str("p2p mismatch on ", label, ": rank ", sender, " posted send to rank ", receiver, " (tag ", tag, ", ",
               sent.bytes, " B) ", DTypeName(static_cast<DType>(sent.dtype)), " but rank ", receiver,
               " posted recv from rank ", sender, " (global ", global_ranks_[sender], ", tag ", tag, ", ",
               posted.bytes, " B) ", DTypeName(static_cast<DType>(posted.dtype)));
  };
  std::vector<std::unique_ptr<gloo::transport::UnboundBuffer>> desc_bufs(ops.size()), verdict_bufs(ops.size());
  std::vector<std::vector<char>> scratch(ops.size());
  std::string mismatch;
  // A failed batch's buffers, the tensors and descriptors they point into and the scratch stay with the group
  // (Gloo's thread may still move bytes for a live pair).
  auto keep_alive = [&] {
    std::vector<Tensor> tensors;
    for (const P2POp& op : ops) tensors.push_back(op.tensor);
    KeepAborted(desc_bufs, {});
    KeepAborted(verdict_bufs, {});
    scratch.push_back(std::move(desc_store));
    KeepAborted(bufs, std::move(tensors), {}, std::move(scratch));
  };
  // Deadlock detection (gloo_wait_monitor.h's P2PBatchWatch): a send waits for its receive here too.
  gloo_internal::P2PBatchWatch graph(*monitor_, prefix_, global_ranks_[rank_]);
  try {
    for (current = 0; current < ops.size(); ++current) {  // post everything before waiting: no send/send deadlock
      const P2POp& op = ops[current];
      graph.Post(op.peer == kAnySource ? -1 : global_ranks_[op.peer], op.kind == P2POp::Kind::kSend, op.tag,
                 P2PName(op));
      const Desc own{op.tensor.numel() * ElementSize(op.tensor.dtype()), static_cast<int64_t>(op.tensor.dtype())};
      std::memcpy(desc_at(kMine, current), &own, sizeof(Desc));
      if (op.kind == P2POp::Kind::kSend) {
        desc_bufs[current] = context_->createUnboundBuffer(desc_at(kMine, current), sizeof(Desc));
        desc_bufs[current]->send(op.peer, P2PDescSlot(op.tag));
        bufs.push_back(context_->createUnboundBuffer(op.tensor.raw_data(), static_cast<size_t>(own.bytes)));
        bufs.back()->send(op.peer, P2PSlot(op.tag));
        verdict_bufs[current] = context_->createUnboundBuffer(desc_at(kVerdict, current), sizeof(Desc));
        verdict_bufs[current]->recv(op.peer, P2PVerdictSlot(op.tag));
      } else {
        desc_bufs[current] = context_->createUnboundBuffer(desc_at(kTheirs, current), sizeof(Desc));
        if (op.peer == kAnySource) {
          desc_bufs[current]->recv(OtherRanks(), P2PDescSlot(op.tag));  // gloo takes the first to arrive
        } else {
          desc_bufs[current]->recv(op.peer, P2PDescSlot(op.tag));
        }
        bufs.emplace_back();  // posted once the descriptor is in
      }
    }
    // The liveness probe (file comment, "In flight") may abort any of these waits: a wait that returns
    // false ends the batch, and the peer the probe found closed is named.
    const std::string probe_key = prefix_ + "p2p";
    std::vector<int> peers;  // only these ranks' connections matter to this batch
    for (const P2POp& op : ops) {
      if (op.peer != kAnySource) peers.push_back(op.peer);
    }
    if (std::any_of(ops.begin(), ops.end(), [](const P2POp& op) { return op.peer == kAnySource; })) {
      peers = OtherRanks();
    }
    const int64_t probe_seq = next_p2p_++;
    auto watch = [&] {
      std::vector<gloo::transport::UnboundBuffer*> raw;
      for (const auto* list : {&desc_bufs, &bufs, &verdict_bufs}) {
        for (const auto& b : *list) {
          if (b != nullptr) raw.push_back(b.get());
        }
      }
      monitor_->BeginTransfer(probe_key, probe_seq, raw, [this, peers] { return ClosedPeers(peers); });
      graph.Watch(raw);  // a deadlock verdict on any op of the batch aborts these waits too
    };
    struct Unwatch {
      gloo_internal::WaitMonitor& monitor;
      const std::string& key;
      int64_t seq;
      ~Unwatch() { monitor.EndTransfer(key, seq); }
    };
    auto aborted = [&] {
      std::vector<int> found = monitor_->EndTransfer(probe_key, probe_seq);
      keep_alive();
      if (std::optional<std::string> verdict = graph.verdict()) Break(ErrorCode::kAborted, *verdict);
      if (found.empty()) found = ClosedPeers(peers);
      Break(ErrorCode::kAborted, Str("p2p on ", label, " failed at ", P2PName(ops[current]),
                                     ": the connection to rank(s) ", PeerList(found),
                                     " closed while data was in flight (the process exited or died)"));
    };
    graph.Block(label);
    watch();
    Unwatch unwatch{*monitor_, probe_key, probe_seq};
    for (current = 0; current < ops.size(); ++current) {
      const P2POp& op = ops[current];
      if (op.kind == P2POp::Kind::kSend) continue;
      int from = op.peer;
      if (!desc_bufs[current]->waitRecv(op.peer == kAnySource ? &from : nullptr, Remaining(deadline))) aborted();
      if (op.peer == kAnySource) {  // the payload comes from the rank whose descriptor arrived
        ops[current].peer = from;
        *any_source = from;
      }
      verdict_bufs[current] = context_->createUnboundBuffer(desc_at(kMine, current), sizeof(Desc));
      verdict_bufs[current]->send(op.peer, P2PVerdictSlot(op.tag));  // to the rank the descriptor came from
      void* into = op.tensor.raw_data();
      const Desc sent = desc(kTheirs, current), own = desc(kMine, current);
      if (!(sent == own)) {
        if (mismatch.empty()) mismatch = mismatch_message(op.peer, rank_, op.tag, sent, own);
        scratch[current].resize(static_cast<size_t>(std::max<int64_t>(sent.bytes, 1)));
        into = scratch[current].data();
      }
      bufs[current] = context_->createUnboundBuffer(into, static_cast<size_t>(sent.bytes));
      bufs[current]->recv(op.peer, P2PSlot(op.tag));
      watch();  // the new receive joins the watched buffers
    }
    for (current = 0; current < ops.size(); ++current) {
      bool done = true;
      if (ops[current].kind == P2POp::Kind::kSend) {
        done = desc_bufs[current]->waitSend(Remaining(deadline)) && bufs[current]->waitSend(Remaining(deadline)) &&
               verdict_bufs[current]->waitRecv(Remaining(deadline));
        const Desc own = desc(kMine, current), posted = desc(kVerdict, current);
        if (done && !(own == posted) && mismatch.empty()) {
          mismatch = mismatch_message(rank_, ops[current].peer, ops[current].tag, own, posted);
        }
      } else {
        done = bufs[current]->waitRecv(Remaining(deadline)) && verdict_bufs[current]->waitSend(Remaining(deadline));
      }
      if (!done) aborted();
    }
  } catch (const Error&) {
    throw;  // aborted by the liveness probe: already named the peer
  } catch (const std::exception& e) {
    keep_alive();  // as aborted(): another pair's buffers may still be live
    FailP2P(e, ops, current, label, timeout, deadline);
  }
  if (!mismatch.empty()) TESSEL_FAIL(ErrorCode::kAborted, mismatch);
}

void GlooProcessGroup::FailP2P(const std::exception& e, const std::vector<P2POp>& ops, size_t current,
                               const std::string& label, milliseconds timeout, Clock::time_point deadline) {
  const std::string what = current < ops.size() ? P2PName(ops[current]) : "a p2p op";
  if (Clock::now() >= deadline) {
    Break(ErrorCode::kDeadlineExceeded,
          Str("p2p on ", label, " timed out after ", timeout.count(), " ms: ", what,
              " did not complete (the peer never posted the matching call, is stuck, or died while the data was in "
              "flight)"));
  }
  if (dynamic_cast<const gloo::IoException*>(&e) != nullptr && current < ops.size() &&
      ops[current].peer != kAnySource) {
    // Gloo fails a pair's pending operations when its connection closes: as in the collectives, say so
    // (at once, not at the timeout) and name the peer.
    const int peer = ops[current].peer;
    Break(ErrorCode::kAborted, Str("p2p on ", label, " failed at ", what, ": the connection to rank ", peer,
                                   " (global ", global_ranks_[peer], ") closed (the process exited or died): ",
                                   e.what()));
  }
  Break(ErrorCode::kAborted, Str("p2p on ", label, " failed at ", what, ": ", e.what()));
}

std::string GlooProcessGroup::P2PName(const P2POp& op) const {
  if (op.peer == kAnySource) {
    return Str("recv from any rank (tag ", op.tag, ", ", op.tensor.numel() * ElementSize(op.tensor.dtype()), " B)");
  }
  return Str(op.kind == P2POp::Kind::kSend ? "send to rank " : "recv from rank ", op.peer, " (global ",
             global_ranks_[op.peer], ", tag ", op.tag, ", ", op.tensor.numel() * ElementSize(op.tensor.dtype()), " B)");
}

}  // namespace tessel::comm::gloo_internal
