// comm/store.cc — Store::Wait (polling with backoff) and FileStore.
#include "comm/store.h"

#include <fcntl.h>
#include <sys/file.h>
#include <unistd.h>

#include <algorithm>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <iterator>
#include <random>
#include <thread>

#include "core/base/error.h"

namespace tessel::comm {
namespace {
using Clock = std::chrono::steady_clock;
}  // namespace

void Store::Wait(const std::vector<std::string>& keys, std::chrono::milliseconds timeout,
                 const std::function<void()>& between_polls) {
  const auto deadline = Clock::now() + timeout;
  auto backoff = std::chrono::milliseconds(1);
  for (const std::string& key : keys) {
    while (!Check(key)) {
      if (Clock::now() >= deadline) {
        std::string missing;
        for (const std::string& k : keys) {
          if (!Check(k)) missing += Str(missing.empty() ? "'" : ", '", k, "'");
        }
        TESSEL_FAIL(ErrorCode::kDeadlineExceeded, Describe(), ": key(s) ", missing, " not set after ", timeout.count(),
                    " ms (a rank did not reach this rendezvous)");
      }
      if (between_polls) between_polls();
      std::this_thread::sleep_for(backoff);
      backoff = std::min(backoff * 2, std::chrono::milliseconds(50));
    }
  }
}

namespace internal {

std::vector<char> CounterBytes(int64_t value) {
  const std::string text = std::to_string(value);
  return std::vector<char>(text.begin(), text.end());
}

int64_t ParseCounter(const std::vector<char>& bytes, const std::string& key) {
  if (bytes.empty()) return 0;
  const std::string text(bytes.begin(), bytes.end());
  size_t used = 0;
  int64_t value = 0;
  try {
    value = std::stoll(text, &used);
  } catch (const std::exception&) {
    used = 0;
  }
  TESSEL_CHECK(used == text.size(), "store add: key '", key, "' holds ", bytes.size(),
               " bytes that are not an integer (a key set with set() cannot be a counter)");
  return value;
}

std::vector<char> CompareSetSlot(std::optional<std::vector<char>>& slot, const std::vector<char>& expected,
                                 const std::vector<char>& desired) {
  if (!slot) {
    if (!expected.empty()) return expected;  // PyTorch's: absent and something expected: nothing set
    slot = desired;
  } else if (*slot == expected) {
    slot = desired;
  }
  return *slot;
}

}  // namespace internal

// ---- FileStore --------------------------------------------------------------------------------------
// One file per key, named by the key's hex bytes; written to a temporary name and renamed, so a
// reader sees either no file or the whole value. Add serializes through flock on a lock file.

FileStore::FileStore(std::string dir) : dir_(std::move(dir)) {
  std::error_code ec;
  std::filesystem::create_directories(dir_, ec);
  TESSEL_CHECK_CODE(ErrorCode::kFailedPrecondition, std::filesystem::is_directory(dir_),
                    "file store: cannot create directory '", dir_, "': ", ec.message());
}

std::string FileStore::PathOf(const std::string& key) const {
  static const char* kHex = "0123456789abcdef";
  std::string name;
  for (unsigned char c : key) name += {kHex[c >> 4], kHex[c & 15]};
  return dir_ + "/k" + name;
}

namespace {

void WriteAtomically(const std::string& path, const std::vector<char>& value) {
  std::random_device rd;
  const std::string tmp = Str(path, ".tmp.", ::getpid(), ".", rd());
  {
    std::ofstream out(tmp, std::ios::binary);
    out.write(value.data(), static_cast<std::streamsize>(value.size()));
    TESSEL_CHECK_CODE(ErrorCode::kFailedPrecondition, out.good(), "file store: cannot write '", tmp, "'");
  }
  std::error_code ec;
  std::filesystem::rename(tmp, path, ec);
  TESSEL_CHECK_CODE(ErrorCode::kFailedPrecondition, !ec, "file store: cannot rename '", tmp, "' to '", path, "': ",
                    ec.message());
}

// Runs fn with the key's lock file held (flock): FileStore's read-modify-write operations.
template <typename F>
auto UnderKeyLock(const std::string& path, const std::string& key, F&& fn) -> decltype(fn()) {
  const int lock_fd = ::open((path + ".lock").c_str(), O_CREAT | O_RDWR, 0644);
  TESSEL_CHECK_CODE(ErrorCode::kFailedPrecondition, lock_fd >= 0, "file store: cannot open lock for '", key, "': ",
                    std::strerror(errno));
  ::flock(lock_fd, LOCK_EX);
  struct Unlock {
    int fd;
    ~Unlock() {
      ::flock(fd, LOCK_UN);
      ::close(fd);
    }
  } unlock{lock_fd};
  return fn();
}

std::vector<char> ReadAll(const std::string& path) {
  std::ifstream in(path, std::ios::binary);
  return std::vector<char>(std::istreambuf_iterator<char>(in), std::istreambuf_iterator<char>());
}

}  // namespace

void FileStore::Set(const std::string& key, const std::vector<char>& value) { WriteAtomically(PathOf(key), value); }

bool FileStore::Check(const std::string& key) { return std::filesystem::exists(PathOf(key)); }

std::vector<char> FileStore::Get(const std::string& key, std::chrono::milliseconds timeout) {
  Wait({key}, timeout);
  return ReadAll(PathOf(key));
}

int64_t FileStore::Add(const std::string& key, int64_t delta) {
  const std::string path = PathOf(key);
  return UnderKeyLock(path, key, [&] {
    const int64_t value = internal::ParseCounter(ReadAll(path), key) + delta;
    WriteAtomically(path, internal::CounterBytes(value));
    return value;
  });
}


std::vector<char> FileStore::CompareSet(const std::string& key, const std::vector<char>& expected,
                                        const std::vector<char>& desired) {
  const std::string path = PathOf(key);
  return UnderKeyLock(path, key, [&] {
    std::optional<std::vector<char>> slot;
    if (std::filesystem::exists(path)) slot = ReadAll(path);
    const std::optional<std::vector<char>> before = slot;
    std::vector<char> out = internal::CompareSetSlot(slot, expected, desired);
    if (slot != before) WriteAtomically(path, *slot);
    return out;
  });
}

bool FileStore::DeleteKey(const std::string& key) {
  const std::string path = PathOf(key);
  return UnderKeyLock(path, key, [&] {
    std::error_code ec;
    return std::filesystem::remove(path, ec);
  });
}

int64_t FileStore::NumKeys() {
  int64_t n = 0;
  for (const auto& entry : std::filesystem::directory_iterator(dir_)) {
    const std::string name = entry.path().filename().string();
    n += name.size() > 1 && name[0] == 'k' && name.find('.') == std::string::npos;  // not a lock or a temporary
  }
  return n;
}

// ---- HashStore, PrefixStore ----------------------------------------------------------------------------

void HashStore::Set(const std::string& key, const std::vector<char>& value) {
  {
    std::lock_guard<std::mutex> lock(mu_);
    values_[key] = value;
  }
  changed_.notify_all();
}

std::vector<char> HashStore::Get(const std::string& key, std::chrono::milliseconds timeout) {
  std::unique_lock<std::mutex> lock(mu_);
  const bool found = changed_.wait_for(lock, timeout, [&] { return values_.count(key) > 0; });
  TESSEL_CHECK_CODE(ErrorCode::kDeadlineExceeded, found, Describe(), ": key(s) '", key, "' not set after ",
                    timeout.count(), " ms (a rank did not reach this rendezvous)");
  return values_.at(key);
}

bool HashStore::Check(const std::string& key) {
  std::lock_guard<std::mutex> lock(mu_);
  return values_.count(key) > 0;
}

int64_t HashStore::Add(const std::string& key, int64_t delta) {
  int64_t value = 0;
  {
    std::lock_guard<std::mutex> lock(mu_);
    auto it = values_.find(key);
    value = (it == values_.end() ? 0 : internal::ParseCounter(it->second, key)) + delta;
    values_[key] = internal::CounterBytes(value);
  }
  changed_.notify_all();
  return value;
}

std::vector<char> HashStore::CompareSet(const std::string& key, const std::vector<char>& expected,
                                        const std::vector<char>& desired) {
  std::vector<char> out;
  {
    std::lock_guard<std::mutex> lock(mu_);
    std::optional<std::vector<char>> slot;
    if (auto it = values_.find(key); it != values_.end()) slot = it->second;
    out = internal::CompareSetSlot(slot, expected, desired);
    if (slot) values_[key] = *slot;
  }
  changed_.notify_all();
  return out;
}

bool HashStore::DeleteKey(const std::string& key) {
  std::lock_guard<std::mutex> lock(mu_);
  return values_.erase(key) > 0;
}

int64_t HashStore::NumKeys() {
  std::lock_guard<std::mutex> lock(mu_);
  return static_cast<int64_t>(values_.size());
}

PrefixStore::PrefixStore(std::string prefix, std::shared_ptr<Store> inner)
    : prefix_(std::move(prefix)), inner_(std::move(inner)) {
  TESSEL_CHECK(inner_ != nullptr, "PrefixStore '", prefix_, "': no store to prefix");
}

}  // namespace tessel::comm
