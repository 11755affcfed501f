// core/tensor/hook_list.h — a tensor's (or a graph node output's) gradient hooks in registration order, each
// removable again by the id Add returned: torch's RemovableHandle.remove() takes the hook out for good. Before,
// a removed Python hook stayed in its list as a pass-through, so a loop that registered and removed one per
// step (gradient logging, register_multi_grad_hook in data-parallel wrappers) grew the list, kept every
// closure alive, and ran them all on each backward (20,000 register / remove pairs: one backward 16 µs ->
// 5.5 ms).
//
// Invariant: ForEach visits the hooks present when it starts, in registration order, and stops at the first
// call that returns false; a hook may add or remove hooks (its own too) while the list runs: ForEach walks a
// copy taken under the list's lock, and hooks run outside it. An empty list (what nearly every graph node's outputs
// have) is seen from an atomic count, without the lock.
//
// Example:
//   const uint64_t id = meta.hooks.Add(std::move(hook));
//   meta.hooks.ForEach([&](const TensorHook& h) { g = h(g); return g.defined(); });
//   meta.hooks.Remove(id);
#pragma once

#include <atomic>
#include <cstdint>
#include <mutex>
#include <utility>
#include <vector>

namespace tessel {

template <typename Fn>
class HookList {
 public:
  HookList() = default;
  HookList(const HookList& other) : entries_(other.Entries()), count_(entries_.size()) {}
  HookList& operator=(const HookList& other) {
    if (this != &other) {
      auto copy = other.Entries();
      const std::lock_guard<std::mutex> lock(mu_);
      entries_ = std::move(copy);
      count_.store(entries_.size(), std::memory_order_release);
    }
    return *this;
  }

  uint64_t Add(Fn fn) {
    static std::atomic<uint64_t> next_id{1};
    const uint64_t id = next_id.fetch_add(1, std::memory_order_relaxed);
    const std::lock_guard<std::mutex> lock(mu_);
    entries_.emplace_back(id, std::move(fn));
    count_.store(entries_.size(), std::memory_order_release);
    return id;
  }
  // Whether the hook was still here. The hook is destroyed after the lock is released (a Python hook's release
  // takes the GIL, which a hook running on another thread may hold while it waits for this list).
  bool Remove(uint64_t id) {
    Fn removed;
    {
      const std::lock_guard<std::mutex> lock(mu_);
      for (auto it = entries_.begin(); it != entries_.end(); ++it) {
        if (it->first == id) {
          removed = std::move(it->second);
          entries_.erase(it);
          count_.store(entries_.size(), std::memory_order_release);
          break;
        }
      }
    }
    return static_cast<bool>(removed);
  }
  bool empty() const { return count_.load(std::memory_order_acquire) == 0; }
  template <typename F>
  void ForEach(F&& f) const {
    if (empty()) return;
    const std::vector<std::pair<uint64_t, Fn>> snapshot = Entries();
    for (const auto& entry : snapshot) {
      if (!f(entry.second)) return;
    }
  }

 private:
  std::vector<std::pair<uint64_t, Fn>> Entries() const {
    const std::lock_guard<std::mutex> lock(mu_);
    return entries_;
  }

  mutable std::mutex mu_;  // registration (a Python thread) against a backward's reads (an engine thread)
  std::vector<std::pair<uint64_t, Fn>> entries_;
  std::atomic<size_t> count_{0};  // entries_.size(), written under mu_
};

}  // namespace tessel
