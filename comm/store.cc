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

void Store::Wait(const std::vector<std::string>& keys, std::chrono::milliseconds timeout) {
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
      std::this_thread::sleep_for(backoff);
      backoff = std::min(backoff * 2, std::chrono::milliseconds(50));
    }
  }
}

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
  const int lock_fd = ::open((path + ".lock").c_str(), O_CREAT | O_RDWR, 0644);
  TESSEL_CHECK_CODE(ErrorCode::kFailedPrecondition, lock_fd >= 0, "file store: cannot open lock for '", key, "': ",
                    std::strerror(errno));
  ::flock(lock_fd, LOCK_EX);
  int64_t value = 0;
  const std::vector<char> old = ReadAll(path);
  if (old.size() == sizeof(value)) std::memcpy(&value, old.data(), sizeof(value));
  value += delta;
  std::vector<char> bytes(sizeof(value));
  std::memcpy(bytes.data(), &value, sizeof(value));
  WriteAtomically(path, bytes);
  ::flock(lock_fd, LOCK_UN);
  ::close(lock_fd);
  return value;
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
    std::vector<char>& bytes = values_[key];
    if (bytes.size() == sizeof(value)) std::memcpy(&value, bytes.data(), sizeof(value));
    value += delta;
    bytes.resize(sizeof(value));
    std::memcpy(bytes.data(), &value, sizeof(value));
  }
  changed_.notify_all();
  return value;
}

PrefixStore::PrefixStore(std::string prefix, std::shared_ptr<Store> inner)
    : prefix_(std::move(prefix)), inner_(std::move(inner)) {
  TESSEL_CHECK(inner_ != nullptr, "PrefixStore '", prefix_, "': no store to prefix");
}

}  // namespace tessel::comm
