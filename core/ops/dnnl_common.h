// core/ops/dnnl_common.h — internal to core/ops: what every oneDNN caller here shares (gemm_dnnl.cc,
// conv.cc): the one CPU engine, the OpenMP cap and the primitive cache.
//
// Invariant: oneDNN work runs on the calling thread only. Debian builds oneDNN on OpenMP; a caller
// holds OneOmpThread while it executes primitives, so no libgomp team spins against tessel's worker
// pool (core/base/parallel.h), which stays the only parallelism: callers split their work over it.
//
// Example:
//   const OneOmpThread one_thread;
//   prim.execute(stream, args);
#pragma once

#include <cstddef>
#include <map>
#include <memory>
#include <mutex>
#include <oneapi/dnnl/dnnl.hpp>
#include <optional>
#include <utility>

namespace tessel {

// The process's oneDNN CPU engine.
const dnnl::engine& DnnlEngine();

// Caps the calling thread's OpenMP team at one thread while in scope.
class OneOmpThread {
 public:
  OneOmpThread();
  ~OneOmpThread();
  OneOmpThread(const OneOmpThread&) = delete;
  OneOmpThread& operator=(const OneOmpThread&) = delete;

 private:
  int saved_;
};

// Primitives (or whatever a caller builds once per shape) by key, shared by every thread. Get(key, make)
// returns the cached entry or stores make()'s; creations run one at a time under their own mutex, so
// threads that miss the same key at once (a GEMM split along K gives its threads equal shapes) create it
// once: the second finds the first's entry. (Concurrent creation of one primitive is legal in oneDNN, but
// its own primitive cache, not instrumented, then reads as a data race to ThreadSanitizer.) Lookups of
// cached keys take only the entries' mutex. A full cache (max_entries) is emptied before it grows.
template <typename Key, typename Value>
class PrimitiveCache {
 public:
  explicit PrimitiveCache(size_t max_entries) : max_entries_(max_entries) {}

  template <typename Make>
  std::shared_ptr<const Value> Get(const Key& key, Make make) {
    if (auto hit = Find(key)) return *hit;
    std::lock_guard<std::mutex> creating(create_mu_);
    if (auto hit = Find(key)) return *hit;  // another thread created it meanwhile
    std::shared_ptr<const Value> made = make();  // outside mu_
    std::lock_guard<std::mutex> lock(mu_);
    if (entries_.size() >= max_entries_) entries_.clear();
    return entries_.emplace(key, std::move(made)).first->second;
  }

  // fn(key, entry) for every entry, under the entries' mutex.
  template <typename Fn>
  void ForEach(Fn fn) {
    std::lock_guard<std::mutex> lock(mu_);
    for (const auto& [key, value] : entries_) fn(key, value);
  }

  void Clear() {
    std::lock_guard<std::mutex> lock(mu_);
    entries_.clear();
  }

 private:
  // A copy of the entry (an entry may be a null pointer: "no primitive for this key"); nullopt if absent.
  std::optional<std::shared_ptr<const Value>> Find(const Key& key) {
    std::lock_guard<std::mutex> lock(mu_);
    auto it = entries_.find(key);
    if (it == entries_.end()) return std::nullopt;
    return it->second;
  }

  std::mutex mu_, create_mu_;
  std::map<Key, std::shared_ptr<const Value>> entries_;
  const size_t max_entries_;
};

}  // namespace tessel
