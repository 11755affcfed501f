// checkpoint/storage.cc — POSIX files (open/pread/write/fsync/rename/flock) behind tessel::Error.
#include "checkpoint/storage.h"

#include <dirent.h>
#include <fcntl.h>
#include <sys/file.h>
#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <filesystem>
#include <system_error>

#include "core/base/error.h"

namespace tessel::checkpoint {
namespace {

std::string ErrnoText(int err) { return std::error_code(err, std::generic_category()).message(); }

[[noreturn]] void ThrowOsError(std::string_view what, const std::string& path, int err) {
  const ErrorCode code = err == ENOENT ? ErrorCode::kNotFound : ErrorCode::kFailedPrecondition;
  TESSEL_FAIL(code, "checkpoint storage: ", what, " '", path, "' failed: ", ErrnoText(err));
}

}  // namespace

File File::OpenForRead(const std::string& path) {
  const int fd = ::open(path.c_str(), O_RDONLY | O_CLOEXEC);
  if (fd < 0) ThrowOsError("open", path, errno);
  File f(fd, path);
  struct stat st {};
  // open(O_RDONLY) succeeds on a directory; its reads would then report a size and "truncated".
  TESSEL_CHECK_CODE(ErrorCode::kDataLoss, ::fstat(fd, &st) != 0 || !S_ISDIR(st.st_mode), "checkpoint storage: '",
                    path, "' is a directory, not a file");
  return f;
}

File File::Create(const std::string& path) {
  const int fd = ::open(path.c_str(), O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0644);
  if (fd < 0) ThrowOsError("create", path, errno);
  return File(fd, path);
}

File::File(File&& other) noexcept : fd_(other.fd_), path_(std::move(other.path_)), write_pos_(other.write_pos_) {
  other.fd_ = -1;
}

File& File::operator=(File&& other) noexcept {
  if (this != &other) {
    if (fd_ >= 0) ::close(fd_);
    fd_ = other.fd_;
    path_ = std::move(other.path_);
    write_pos_ = other.write_pos_;
    other.fd_ = -1;
  }
  return *this;
}

File::~File() {
  if (fd_ >= 0) ::close(fd_);
}

int64_t File::Size() const {
  struct stat st;
  if (::fstat(fd_, &st) != 0) ThrowOsError("stat", path_, errno);
  return static_cast<int64_t>(st.st_size);
}

void File::ReadAt(int64_t offset, void* buf, int64_t n) const {
  TESSEL_INTERNAL_ASSERT(fd_ >= 0, "read from a closed file ", path_);
  auto* p = static_cast<char*>(buf);
  int64_t done = 0;
  while (done < n) {
    const ssize_t r = ::pread(fd_, p + done, static_cast<size_t>(n - done), static_cast<off_t>(offset + done));
    if (r < 0) {
      if (errno == EINTR) continue;
      ThrowOsError("read", path_, errno);
    }
    TESSEL_CHECK_CODE(ErrorCode::kDataLoss, r > 0, "checkpoint storage: '", path_, "' is truncated: reading bytes [",
                      offset, ", ", offset + n, ") but the file has ", Size(), " bytes");
    done += r;
  }
}

int64_t File::Write(const void* buf, int64_t n) {
  TESSEL_INTERNAL_ASSERT(fd_ >= 0, "write to a closed file ", path_);
  const int64_t at = write_pos_;
  const auto* p = static_cast<const char*>(buf);
  int64_t done = 0;
  while (done < n) {
    const ssize_t w = ::write(fd_, p + done, static_cast<size_t>(n - done));
    if (w < 0) {
      if (errno == EINTR) continue;
      ThrowOsError("write", path_, errno);
    }
    done += w;
  }
  write_pos_ += n;
  return at;
}

void File::Sync() {
  if (::fsync(fd_) != 0) ThrowOsError("fsync", path_, errno);
}

void File::Close() {
  if (fd_ < 0) return;
  const int fd = fd_;
  fd_ = -1;
  if (::close(fd) != 0) ThrowOsError("close", path_, errno);
}

std::string JoinPath(std::string_view dir, std::string_view name) {
  std::string out(dir);
  if (!out.empty() && out.back() != '/') out += '/';
  out += name;
  return out;
}

bool PathExists(const std::string& path) {
  struct stat st;
  return ::stat(path.c_str(), &st) == 0;
}

void MakeDirs(const std::string& dir) {
  std::error_code ec;
  std::filesystem::create_directories(dir, ec);
  TESSEL_CHECK_CODE(ErrorCode::kFailedPrecondition, !ec, "checkpoint storage: cannot create directory '", dir,
                    "': ", ec.message());
}

std::vector<std::string> ListDir(const std::string& dir) {
  DIR* d = ::opendir(dir.c_str());
  if (d == nullptr) ThrowOsError("list directory", dir, errno);
  std::vector<std::string> names;
  while (const dirent* e = ::readdir(d)) {
    const std::string name = e->d_name;
    if (name != "." && name != "..") names.push_back(name);
  }
  ::closedir(d);
  std::sort(names.begin(), names.end());
  return names;
}

void RenameFile(const std::string& from, const std::string& to) {
  if (::rename(from.c_str(), to.c_str()) != 0) ThrowOsError("rename to '" + to + "' of", from, errno);
}

void RemoveFileIfExists(const std::string& path) {
  if (::unlink(path.c_str()) != 0 && errno != ENOENT) ThrowOsError("remove", path, errno);
}

void SyncDir(const std::string& dir) {
  const int fd = ::open(dir.c_str(), O_RDONLY | O_DIRECTORY | O_CLOEXEC);
  if (fd < 0) ThrowOsError("open directory", dir, errno);
  const int rc = ::fsync(fd);
  const int err = errno;
  ::close(fd);
  // Some file systems (tmpfs in old kernels) reject fsync on directories; there is nothing to flush.
  if (rc != 0 && err != EINVAL) ThrowOsError("fsync directory", dir, err);
}

std::string ReadWholeFile(const std::string& path) {
  File f = File::OpenForRead(path);
  std::string s(static_cast<size_t>(f.Size()), '\0');
  f.ReadAt(0, s.data(), static_cast<int64_t>(s.size()));
  return s;
}

void WriteFileAtomically(const std::string& path, std::string_view content, std::string_view tmp_suffix, bool sync) {
  const std::string tmp = path + std::string(tmp_suffix);
  File f = File::Create(tmp);
  f.Write(content.data(), static_cast<int64_t>(content.size()));
  if (sync) f.Sync();
  f.Close();
  RenameFile(tmp, path);
  if (sync) SyncDir(std::filesystem::path(path).parent_path().string());
}

DirLock DirLock::Acquire(const std::string& dir, std::string_view holder) {
  const std::string path = JoinPath(dir, kLockFileName);
  const int fd = ::open(path.c_str(), O_RDWR | O_CREAT | O_CLOEXEC, 0644);
  if (fd < 0) ThrowOsError("open lock file", path, errno);
  if (::flock(fd, LOCK_EX | LOCK_NB) != 0) {
    const int err = errno;
    char buf[256] = {0};
    const ssize_t n = ::pread(fd, buf, sizeof(buf) - 1, 0);
    ::close(fd);
    TESSEL_CHECK_CODE(ErrorCode::kFailedPrecondition, err == EWOULDBLOCK, "checkpoint storage: flock '", path,
                      "' failed: ", ErrnoText(err));
    TESSEL_FAIL(ErrorCode::kAborted, "checkpoint save: another save is writing into '", dir, "' (lock held by ",
                n > 0 ? std::string(buf, static_cast<size_t>(n)) : std::string("an unknown holder"),
                "); two saves must not race into one directory. HINT: wait for it, or save into another directory");
  }
  if (::ftruncate(fd, 0) == 0) {
    [[maybe_unused]] const ssize_t w = ::pwrite(fd, holder.data(), holder.size(), 0);
  }
  return DirLock(fd);
}

std::optional<DirLock> DirLock::TryAcquire(const std::string& dir, std::string_view holder) {
  const std::string path = JoinPath(dir, kLockFileName);
  const int fd = ::open(path.c_str(), O_RDWR | O_CREAT | O_CLOEXEC, 0644);
  if (fd < 0) return std::nullopt;
  if (::flock(fd, LOCK_EX | LOCK_NB) != 0) {
    ::close(fd);
    return std::nullopt;
  }
  if (::ftruncate(fd, 0) == 0) {
    [[maybe_unused]] const ssize_t w = ::pwrite(fd, holder.data(), holder.size(), 0);
  }
  return DirLock(fd);
}

DirLock::DirLock(DirLock&& other) noexcept : fd_(other.fd_) { other.fd_ = -1; }

DirLock& DirLock::operator=(DirLock&& other) noexcept {
  if (this != &other) {
    if (fd_ >= 0) ::close(fd_);
    fd_ = other.fd_;
    other.fd_ = -1;
  }
  return *this;
}

DirLock::~DirLock() {
  if (fd_ >= 0) ::close(fd_);  // closing the last descriptor releases the flock
}

}  // namespace tessel::checkpoint
