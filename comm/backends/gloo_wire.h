// comm/backends/gloo_wire.h — what the gloo backend (gloo.cc) puts on the wire besides the payload: the slots
// of its own traffic, the collective header every member exchanges before the data (EncodeHeader /
// DecodeHeader of a CollectiveDesc), and the gloo::rendezvous::Store over a comm::Store that Gloo's
// rendezvous uses. Internal to the backend.
#pragma once

#include <gloo/rendezvous/store.h>

#include <algorithm>
#include <chrono>
#include <cstdint>
#include <cstring>
#include <functional>
#include <optional>
#include <string>
#include <utility>
#include <vector>

#include "comm/collective.h"
#include "comm/store.h"
#include "core/base/error.h"

namespace tessel::comm::gloo_internal {

// Slots of our own traffic; Gloo's collectives use prefixes 0x01–0x08 (gloo/types.h).
inline uint64_t HeaderSlot(int64_t seq) {
  return (uint64_t{0x20} << 56) | ((static_cast<uint64_t>(seq) & 0xffffffffu) << 24);
}
inline uint64_t P2PSlot(int tag) { return (uint64_t{0x21} << 56) | (uint64_t{static_cast<uint32_t>(tag)} << 24); }
// The slot of a send's descriptor (its bytes and dtype), which travels ahead of the payload.
inline uint64_t P2PDescSlot(int tag) {
  return (uint64_t{0x22} << 56) | (uint64_t{static_cast<uint32_t>(tag)} << 24);
}
// The slot of a receive's descriptor, sent back to its sender as the verdict on the pair.
inline uint64_t P2PVerdictSlot(int tag) {
  return (uint64_t{0x25} << 56) | (uint64_t{static_cast<uint32_t>(tag)} << 24);
}

// The data of call seq, phase `step` (all_reduce has two), and the liveness sentinels' slot (never sent to).
inline uint64_t DataSlot(int64_t seq, int step) {
  return (uint64_t{0x23} << 56) | ((static_cast<uint64_t>(seq) & 0xffffffffu) << 24) | static_cast<uint64_t>(step);
}
constexpr uint64_t kLivenessSlot = uint64_t{0x24} << 56;

// gloo::rendezvous::Store over a comm::Store, with a key prefix per group. Gloo's full-mesh rendezvous waits for the
// key named by each peer's group rank; `exited(group rank)` says why a peer will never set it (the launcher saw its
// process exit), and the wait then fails at once naming it instead of waiting out the timeout.
class GlooStoreAdapter final : public gloo::rendezvous::Store {
 public:
  using ExitedFn = std::function<std::optional<std::string>(int group_rank)>;
  GlooStoreAdapter(comm::Store& store, std::string prefix, std::chrono::milliseconds timeout, ExitedFn exited = {})
      : store_(store), prefix_(std::move(prefix)), timeout_(timeout), exited_(std::move(exited)) {}
  void set(const std::string& key, const std::vector<char>& data) override { store_.Set(prefix_ + key, data); }
  std::vector<char> get(const std::string& key) override {
    wait({key}, timeout_);
    return store_.Get(prefix_ + key, timeout_);
  }
  void wait(const std::vector<std::string>& keys) override { wait(keys, timeout_); }
  void wait(const std::vector<std::string>& keys, const std::chrono::milliseconds& timeout) override {
    std::vector<std::string> full;
    for (const std::string& k : keys) full.push_back(prefix_ + k);
    const std::chrono::milliseconds limit = timeout.count() > 0 ? timeout : timeout_;
    if (!exited_) return store_.Wait(full, limit);
    using Clock = std::chrono::steady_clock;
    Clock::time_point next_ask = Clock::now() + kAskEvery;
    // Between the store's polls, every kAskEvery: has a missing peer's process already exited?
    store_.Wait(full, limit, [&] {
      if (Clock::now() < next_ask) return;
      next_ask = Clock::now() + kAskEvery;
      for (size_t i = 0; i < keys.size(); ++i) {
        const std::optional<int> peer = GroupRankOfKey(keys[i]);
        if (!peer || store_.Check(full[i])) continue;
        if (const std::optional<std::string> why = exited_(*peer)) {
          TESSEL_FAIL(ErrorCode::kAborted, "rank ", *peer, " ", *why, " before it joined this group's rendezvous (",
                      store_.Describe(), "): it never will (the launcher saw its process exit)");
        }
      }
    });
  }

 private:
  static constexpr std::chrono::milliseconds kAskEvery{200};
  // Gloo's connectFullMesh names each rank's key by its group rank alone.
  static std::optional<int> GroupRankOfKey(const std::string& key) {
    const bool digits = std::all_of(key.begin(), key.end(), [](char c) { return c >= '0' && c <= '9'; });
    if (key.empty() || key.size() > 9 || !digits) return std::nullopt;
    return std::stoi(key);
  }
  comm::Store& store_;
  std::string prefix_;
  std::chrono::milliseconds timeout_;
  ExitedFn exited_;
};

// ---- header: [seq, kind, dtype, bytes, root, op, row_bytes, sender, in_splits(W), out_splits(W), ndim,
//               shape(kMaxDescDims)] ----
constexpr int kFixedFields = 8;

// After the shape: the label's hash, then the tail of its text (LabelTail), NUL-padded.
constexpr size_t kLabelWords = 1 + kMaxLabelWireBytes / sizeof(int64_t);
static_assert(kMaxLabelWireBytes % sizeof(int64_t) == 0);

inline std::vector<int64_t> EncodeHeader(const CollectiveDesc& d, int rank, int world) {
  std::vector<int64_t> h(kFixedFields + 2 * world + 1 + kMaxDescDims + kLabelWords, 0);
  h[0] = d.seq, h[1] = static_cast<int64_t>(d.kind), h[2] = static_cast<int64_t>(d.dtype), h[3] = d.bytes;
  h[4] = d.root, h[5] = d.op ? static_cast<int64_t>(*d.op) : -1, h[6] = d.row_bytes, h[7] = rank;
  for (size_t j = 0; j < d.input_splits.size(); ++j) h[kFixedFields + j] = d.input_splits[j];
  for (size_t j = 0; j < d.output_splits.size(); ++j) h[kFixedFields + world + j] = d.output_splits[j];
  const size_t at = kFixedFields + 2 * world;
  h[at] = static_cast<int64_t>(d.shape.size());  // (DescShape keeps at most kMaxDescDims)
  for (size_t j = 0; j < d.shape.size(); ++j) h[at + 1 + j] = d.shape[j];
  h[at + 1 + kMaxDescDims] = static_cast<int64_t>(d.label_hash);
  const std::string tail = LabelTail(d.label, kMaxLabelWireBytes);
  std::memcpy(h.data() + at + 2 + kMaxDescDims, tail.data(), tail.size());
  return h;
}

inline CollectiveDesc DecodeHeader(const std::vector<int64_t>& h, int world) {
  CollectiveDesc d;
  d.seq = h[0], d.kind = static_cast<CollectiveKind>(h[1]), d.dtype = static_cast<DType>(h[2]), d.bytes = h[3];
  d.root = static_cast<int>(h[4]);
  if (h[5] >= 0) d.op = static_cast<ReduceOp>(h[5]);
  d.row_bytes = h[6];
  if (d.kind == CollectiveKind::kAllToAll) {
    d.input_splits.assign(h.begin() + kFixedFields, h.begin() + kFixedFields + world);
    d.output_splits.assign(h.begin() + kFixedFields + world, h.begin() + kFixedFields + 2 * world);
  }
  const size_t at = kFixedFields + 2 * world;
  d.shape.assign(h.begin() + at + 1, h.begin() + at + 1 + h[at]);
  d.label_hash = static_cast<uint64_t>(h[at + 1 + kMaxDescDims]);
  const char* label = reinterpret_cast<const char*>(h.data() + at + 2 + kMaxDescDims);
  d.label.assign(label, strnlen(label, kMaxLabelWireBytes));
  return d;
}

}  // namespace tessel::comm::gloo_internal
