// checkpoint/storage.h — the file layer under checkpoints: an RAII file handle with exact positional
// reads and appending writes, directory helpers (create, list, rename, fsync) and the save lock.
//
// Invariant: every failure is a tessel::Error naming the path and the system's reason: a missing file is
// kNotFound, a read past the end of a file (a truncated file) is kDataLoss, any other OS error is
// kFailedPrecondition (permissions, full disk: the caller can fix it). A File never leaks its
// descriptor (closed by the destructor; Close() reports close-time errors such as a failed flush).
//
// Example:
//   File f = File::Create(JoinPath(dir, "x.tmp"));
//   f.Write(buf, n);
//   f.Sync();
//   f.Close();
//   RenameFile(JoinPath(dir, "x.tmp"), JoinPath(dir, "x"));
//   SyncDir(dir);                                    // the rename itself is now durable
#pragma once

#include <cstdint>
#include <optional>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

namespace tessel::checkpoint {

class File {
 public:
  // kNotFound when `path` does not exist.
  static File OpenForRead(const std::string& path);
  // Creates or truncates `path` for writing.
  static File Create(const std::string& path);

  File(File&& other) noexcept;
  File& operator=(File&& other) noexcept;
  File(const File&) = delete;
  File& operator=(const File&) = delete;
  ~File();

  const std::string& path() const { return path_; }
  bool is_open() const { return fd_ >= 0; }
  int64_t Size() const;
  // Reads exactly `n` bytes at `offset`; kDataLoss ("truncated") if the file ends first.
  void ReadAt(int64_t offset, void* buf, int64_t n) const;
  // Appends `n` bytes (retrying short writes); returns the offset they were written at.
  int64_t Write(const void* buf, int64_t n);
  int64_t write_position() const { return write_pos_; }
  void Sync();
  void Close();

 private:
  File(int fd, std::string path) : fd_(fd), path_(std::move(path)) {}
  int fd_ = -1;
  std::string path_;
  int64_t write_pos_ = 0;
};

std::string JoinPath(std::string_view dir, std::string_view name);
bool PathExists(const std::string& path);
void MakeDirs(const std::string& dir);
// Names (not paths) of the entries of `dir`, sorted.
std::vector<std::string> ListDir(const std::string& dir);
void RenameFile(const std::string& from, const std::string& to);
void RemoveFileIfExists(const std::string& path);
// fsync of a directory, so renames and creations inside it survive a power loss.
void SyncDir(const std::string& dir);
std::string ReadWholeFile(const std::string& path);
// Writes `content` to `path` atomically: `path` + tmp_suffix, fsync (when `sync`), rename, fsync dir.
void WriteFileAtomically(const std::string& path, std::string_view content, std::string_view tmp_suffix, bool sync);

// An exclusive advisory lock (flock) on DIR/.tessel-ckpt.lock, held by the rank that coordinates a save.
// The kernel drops it when the process dies, so a crashed save never blocks the next one. Two saves into
// one directory (in one process or several) cannot both hold it: Acquire throws kAborted naming the
// directory and the holder's description.
class DirLock {
 public:
  static DirLock Acquire(const std::string& dir, std::string_view holder);
  // Like Acquire, but nullopt (never an error) when the lock is held or the lock file cannot be
  // created (a read-only checkpoint): for a loader's optional cleanup.
  static std::optional<DirLock> TryAcquire(const std::string& dir, std::string_view holder);
  DirLock(DirLock&& other) noexcept;
  DirLock& operator=(DirLock&& other) noexcept;
  DirLock(const DirLock&) = delete;
  DirLock& operator=(const DirLock&) = delete;
  ~DirLock();

 private:
  explicit DirLock(int fd) : fd_(fd) {}
  int fd_ = -1;
};

inline constexpr std::string_view kLockFileName = ".tessel-ckpt.lock";

}  // namespace tessel::checkpoint
