// comm/store.h — rendezvous key-value stores: TcpStore (rank 0 serves at MASTER_ADDR:MASTER_PORT,
// the role of PyTorch's TCPStore), FileStore (a directory on a filesystem all ranks share), HashStore
// (one process's threads) and PrefixStore (a namespace in another store), PyTorch's four.
//
// Invariant: a key, once Set, is visible to every client of the store; Get and Wait block until the
// key exists or the timeout passes, then throw kDeadlineExceeded naming the key(s) still missing.
// Nothing waits forever. Add is atomic across all clients (a counter for barriers and ids).
//
// Example:
//   auto store = std::make_shared<TcpStore>("10.0.0.1", 29500, /*is_server=*/rank == 0, seconds(300));
//   store->Set("nccl/id", id_bytes);                        // rank 0
//   std::vector<char> id = store->Get("nccl/id", seconds(60));   // every rank
#pragma once

#include <chrono>
#include <functional>
#include <condition_variable>
#include <cstdint>
#include <map>
#include <memory>
#include <mutex>
#include <optional>
#include <string>
#include <vector>

namespace tessel::comm {

class Store {
 public:
  virtual ~Store() = default;
  virtual void Set(const std::string& key, const std::vector<char>& value) = 0;
  // Waits up to `timeout` for `key`.
  virtual std::vector<char> Get(const std::string& key, std::chrono::milliseconds timeout) = 0;
  // True when `key` is set (no waiting).
  virtual bool Check(const std::string& key) = 0;
  // Adds `delta` to the integer at `key` (absent counts as 0; kept as decimal text, as PyTorch's) and
  // returns the new value; a key holding anything but an integer is kInvalidArgument.
  virtual int64_t Add(const std::string& key, int64_t delta) = 0;
  // PyTorch's compare_set, atomic across clients: `key` becomes `desired` when it holds `expected`, or
  // when it is absent and `expected` is empty; returns what it holds afterwards (`expected` when it is
  // absent and `expected` is not empty: nothing is set then).
  virtual std::vector<char> CompareSet(const std::string& key, const std::vector<char>& expected,
                                       const std::vector<char>& desired) = 0;
  // Removes `key`; whether it was set.
  virtual bool DeleteKey(const std::string& key) = 0;
  // Keys set in the store, every client's (internal rendezvous keys included, as PyTorch's num_keys).
  virtual int64_t NumKeys() = 0;
  // Waits up to `timeout` until every key is set (polls Check with backoff). `between_polls` (if any) runs after
  // each unsuccessful poll; an exception from it ends the wait (a rendezvous that learns a peer will never come).
  void Wait(const std::vector<std::string>& keys, std::chrono::milliseconds timeout,
            const std::function<void()>& between_polls = {});
  // Where this store lives, for error messages ("tcp store 10.0.0.1:29500").
  virtual std::string Describe() const = 0;
  // Whether this process serves the store to others (a TcpStore's server): its exit takes the store away from them.
  virtual bool ServesHere() const { return false; }
};

namespace internal {
// A counter's value as Add keeps it: decimal text, as PyTorch's stores (so get() of a counter reads "5").
// Parsing an empty value gives 0; anything but an integer is kInvalidArgument naming the key.
std::vector<char> CounterBytes(int64_t value);
int64_t ParseCounter(const std::vector<char>& bytes, const std::string& key);
// Store::CompareSet on one value (`slot` empty: the key is absent); updates `slot`, returns the result.
std::vector<char> CompareSetSlot(std::optional<std::vector<char>>& slot, const std::vector<char>& expected,
                                 const std::vector<char>& desired);
}  // namespace internal

class TcpStore final : public Store {
 public:
  // `is_server`: this process also serves the store, listening on all interfaces at `port` (0 picks
  // a free port; see port()). Clients retry connecting to host:port until `timeout`.
  TcpStore(std::string host, int port, bool is_server, std::chrono::milliseconds timeout);
  ~TcpStore() override;
  TcpStore(const TcpStore&) = delete;
  TcpStore& operator=(const TcpStore&) = delete;

  void Set(const std::string& key, const std::vector<char>& value) override;
  std::vector<char> Get(const std::string& key, std::chrono::milliseconds timeout) override;
  bool Check(const std::string& key) override;
  int64_t Add(const std::string& key, int64_t delta) override;
  std::vector<char> CompareSet(const std::string& key, const std::vector<char>& expected,
                               const std::vector<char>& desired) override;
  bool DeleteKey(const std::string& key) override;
  int64_t NumKeys() override;
  std::string Describe() const override;
  bool ServesHere() const override { return server_ != nullptr; }
  int port() const { return port_; }

 private:
  class Server;
  // One request/reply exchange on the client socket (serialized by mu_); returns the reply status.
  bool Request(uint8_t op, const std::string& key, const std::vector<char>& value, std::vector<char>* reply);

  std::string host_;
  int port_;
  std::unique_ptr<Server> server_;
  std::mutex mu_;
  int fd_ = -1;
};

class FileStore final : public Store {
 public:
  // Creates `dir` if needed. Every rank must pass the same directory (shared filesystem).
  explicit FileStore(std::string dir);

  void Set(const std::string& key, const std::vector<char>& value) override;
  std::vector<char> Get(const std::string& key, std::chrono::milliseconds timeout) override;
  bool Check(const std::string& key) override;
  int64_t Add(const std::string& key, int64_t delta) override;
  std::vector<char> CompareSet(const std::string& key, const std::vector<char>& expected,
                               const std::vector<char>& desired) override;
  bool DeleteKey(const std::string& key) override;
  int64_t NumKeys() override;
  std::string Describe() const override { return "file store " + dir_; }

 private:
  std::string PathOf(const std::string& key) const;
  std::string dir_;
};

// In one process (PyTorch's HashStore): threads sharing it rendezvous through it; Get waits on a condition
// variable instead of polling.
class HashStore final : public Store {
 public:
  void Set(const std::string& key, const std::vector<char>& value) override;
  std::vector<char> Get(const std::string& key, std::chrono::milliseconds timeout) override;
  bool Check(const std::string& key) override;
  int64_t Add(const std::string& key, int64_t delta) override;
  std::vector<char> CompareSet(const std::string& key, const std::vector<char>& expected,
                               const std::vector<char>& desired) override;
  bool DeleteKey(const std::string& key) override;
  int64_t NumKeys() override;
  std::string Describe() const override { return "hash store"; }

 private:
  std::mutex mu_;
  std::condition_variable changed_;
  std::map<std::string, std::vector<char>> values_;
};

// Every key of `inner` under "<prefix>/" (PyTorch's PrefixStore): groups or jobs sharing one store.
class PrefixStore final : public Store {
 public:
  PrefixStore(std::string prefix, std::shared_ptr<Store> inner);
  void Set(const std::string& key, const std::vector<char>& value) override { inner_->Set(Key(key), value); }
  std::vector<char> Get(const std::string& key, std::chrono::milliseconds timeout) override {
    return inner_->Get(Key(key), timeout);
  }
  bool Check(const std::string& key) override { return inner_->Check(Key(key)); }
  int64_t Add(const std::string& key, int64_t delta) override { return inner_->Add(Key(key), delta); }
  std::vector<char> CompareSet(const std::string& key, const std::vector<char>& expected,
                               const std::vector<char>& desired) override {
    return inner_->CompareSet(Key(key), expected, desired);
  }
  bool DeleteKey(const std::string& key) override { return inner_->DeleteKey(Key(key)); }
  int64_t NumKeys() override { return inner_->NumKeys(); }  // the whole store's, as PyTorch's
  std::string Describe() const override { return inner_->Describe() + " under prefix '" + prefix_ + "'"; }
  bool ServesHere() const override { return inner_->ServesHere(); }
  const std::shared_ptr<Store>& inner() const { return inner_; }

 private:
  std::string Key(const std::string& key) const { return prefix_ + "/" + key; }
  std::string prefix_;
  std::shared_ptr<Store> inner_;
};

}  // namespace tessel::comm
