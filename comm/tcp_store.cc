// comm/tcp_store.cc — TcpStore: a tiny TCP key-value server (one poll() thread in rank 0's process)
// and its blocking client.
//
// Wire format (little-endian, one request then one reply per exchange):
//   request: u8 op | u32 key_len | key | u32 value_len | value
//   reply:   u8 status | u32 len | bytes        (status: 1 found/ok, 0 absent)
// Waiting is done by the client polling Check/Get with backoff, so the server never blocks on a key.
#include <netdb.h>
#include <netinet/in.h>
#include <netinet/tcp.h>
#include <poll.h>
#include <sys/socket.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cstring>
#include <map>
#include <thread>

#include "comm/store.h"
#include "core/base/error.h"

namespace tessel::comm {
namespace {

using Clock = std::chrono::steady_clock;

enum Op : uint8_t { kSet = 1, kGet = 2, kCheck = 3, kAdd = 4, kCompareSet = 5, kDelete = 6, kNumKeys = 7 };
constexpr uint32_t kMaxLen = 1u << 30;

bool ReadFull(int fd, void* data, size_t n) {
  char* p = static_cast<char*>(data);
  while (n > 0) {
    const ssize_t got = ::recv(fd, p, n, 0);
    if (got < 0 && errno == EINTR) continue;
    if (got <= 0) return false;
    p += got, n -= static_cast<size_t>(got);
  }
  return true;
}

bool WriteFull(int fd, const void* data, size_t n) {
  const char* p = static_cast<const char*>(data);
  while (n > 0) {
    const ssize_t put = ::send(fd, p, n, MSG_NOSIGNAL);
    if (put < 0 && errno == EINTR) continue;
    if (put <= 0) return false;
    p += put, n -= static_cast<size_t>(put);
  }
  return true;
}

bool ReadBlob(int fd, std::vector<char>* out) {
  uint32_t len = 0;
  if (!ReadFull(fd, &len, 4) || len > kMaxLen) return false;
  out->resize(len);
  return len == 0 || ReadFull(fd, out->data(), len);
}

bool WriteBlob(int fd, const char* data, uint32_t len) { return WriteFull(fd, &len, 4) && WriteFull(fd, data, len); }

void SetTimeouts(int fd, std::chrono::milliseconds timeout) {
  timeval tv{};
  tv.tv_sec = timeout.count() / 1000;
  tv.tv_usec = (timeout.count() % 1000) * 1000;
  ::setsockopt(fd, SOL_SOCKET, SO_RCVTIMEO, &tv, sizeof(tv));
  ::setsockopt(fd, SOL_SOCKET, SO_SNDTIMEO, &tv, sizeof(tv));
}

int64_t DecodeInt(const std::vector<char>& v) {
  int64_t x = 0;
  if (v.size() == sizeof(x)) std::memcpy(&x, v.data(), sizeof(x));
  return x;
}

// Connects to host:port, retrying until `deadline` (the server may start later than its clients).
int Connect(const std::string& host, int port, Clock::time_point deadline) {
  std::string last_error = "no attempt";
  auto backoff = std::chrono::milliseconds(10);
  while (true) {
    addrinfo hints{};
    hints.ai_family = AF_UNSPEC;
    hints.ai_socktype = SOCK_STREAM;
    addrinfo* res = nullptr;
    const int rc = ::getaddrinfo(host.c_str(), std::to_string(port).c_str(), &hints, &res);
    if (rc != 0) {
      last_error = gai_strerror(rc);
    } else {
      for (addrinfo* a = res; a != nullptr; a = a->ai_next) {
        const int fd = ::socket(a->ai_family, a->ai_socktype, a->ai_protocol);
        if (fd < 0) continue;
        if (::connect(fd, a->ai_addr, a->ai_addrlen) == 0) {
          ::freeaddrinfo(res);
          const int one = 1;
          ::setsockopt(fd, IPPROTO_TCP, TCP_NODELAY, &one, sizeof(one));
          return fd;
        }
        last_error = std::strerror(errno);
        ::close(fd);
      }
      ::freeaddrinfo(res);
    }
    TESSEL_CHECK_CODE(ErrorCode::kDeadlineExceeded, Clock::now() + backoff < deadline, "tcp store: cannot connect to ",
                      host, ":", port, " (", last_error,
                      "); is rank 0 running, and are MASTER_ADDR / MASTER_PORT the same on every rank?");
    std::this_thread::sleep_for(backoff);
    backoff = std::min(backoff * 2, std::chrono::milliseconds(200));
  }
}

}  // namespace

// ---- server -------------------------------------------------------------------------------------

class TcpStore::Server {
 public:
  explicit Server(int port) {
    listen_fd_ = ::socket(AF_INET6, SOCK_STREAM, 0);
    const bool v6 = listen_fd_ >= 0;
    if (!v6) listen_fd_ = ::socket(AF_INET, SOCK_STREAM, 0);
    TESSEL_CHECK_CODE(ErrorCode::kFailedPrecondition, listen_fd_ >= 0, "tcp store: socket: ", std::strerror(errno));
    const int one = 1, zero = 0;
    ::setsockopt(listen_fd_, SOL_SOCKET, SO_REUSEADDR, &one, sizeof(one));
    int rc;
    if (v6) {
      ::setsockopt(listen_fd_, IPPROTO_IPV6, IPV6_V6ONLY, &zero, sizeof(zero));  // accept IPv4 too
      sockaddr_in6 addr{};
      addr.sin6_family = AF_INET6;
      addr.sin6_addr = in6addr_any;
      addr.sin6_port = htons(static_cast<uint16_t>(port));
      rc = ::bind(listen_fd_, reinterpret_cast<sockaddr*>(&addr), sizeof(addr));
    } else {
      sockaddr_in addr{};
      addr.sin_family = AF_INET;
      addr.sin_addr.s_addr = htonl(INADDR_ANY);
      addr.sin_port = htons(static_cast<uint16_t>(port));
      rc = ::bind(listen_fd_, reinterpret_cast<sockaddr*>(&addr), sizeof(addr));
    }
    if (rc != 0 || ::listen(listen_fd_, 128) != 0) {
      const std::string why = std::strerror(errno);
      ::close(listen_fd_);
      TESSEL_FAIL(ErrorCode::kFailedPrecondition, "tcp store: cannot listen on port ", port, ": ", why,
                  " (another job on this MASTER_PORT? pick another)");
    }
    sockaddr_storage bound{};
    socklen_t len = sizeof(bound);
    ::getsockname(listen_fd_, reinterpret_cast<sockaddr*>(&bound), &len);
    port_ = ntohs(v6 ? reinterpret_cast<sockaddr_in6*>(&bound)->sin6_port
                     : reinterpret_cast<sockaddr_in*>(&bound)->sin_port);
    TESSEL_CHECK_CODE(ErrorCode::kFailedPrecondition, ::pipe(wake_) == 0, "tcp store: pipe: ", std::strerror(errno));
    thread_ = std::thread([this] { Loop(); });
  }

  ~Server() {
    const char c = 0;
    (void)!::write(wake_[1], &c, 1);
    thread_.join();
    for (int fd : clients_) ::close(fd);
    ::close(listen_fd_);
    ::close(wake_[0]);
    ::close(wake_[1]);
  }

  int port() const { return port_; }

 private:
  void Loop() {
    while (true) {
      std::vector<pollfd> fds = {{wake_[0], POLLIN, 0}, {listen_fd_, POLLIN, 0}};
      for (int fd : clients_) fds.push_back({fd, POLLIN, 0});
      if (::poll(fds.data(), fds.size(), -1) < 0) {
        if (errno == EINTR) continue;
        return;
      }
      if (fds[0].revents != 0) return;
      if (fds[1].revents & POLLIN) {
        const int fd = ::accept(listen_fd_, nullptr, nullptr);
        if (fd >= 0) {
          SetTimeouts(fd, std::chrono::seconds(30));  // a half-sent request cannot stall the server
          // Replies are written in pieces (status, length, value): with Nagle's algorithm each later piece
          // waited for the client's delayed ACK, ~40 ms per request (a gloo new_group made of ~10 store
          // calls took 0.45 s on 2 processes, torch's 1.5 ms).
          const int one = 1;
          ::setsockopt(fd, IPPROTO_TCP, TCP_NODELAY, &one, sizeof(one));
          clients_.push_back(fd);
        }
      }
      for (size_t i = 2; i < fds.size(); ++i) {
        if (fds[i].revents == 0) continue;
        if (!Handle(fds[i].fd)) {
          ::close(fds[i].fd);
          std::erase(clients_, fds[i].fd);
        }
      }
    }
  }

  // Serves one request; false closes the connection (client gone or malformed request).
  bool Handle(int fd) {
    uint8_t op = 0;
    std::vector<char> key_bytes, value;
    if (!ReadFull(fd, &op, 1) || !ReadBlob(fd, &key_bytes) || !ReadBlob(fd, &value)) return false;
    const std::string key(key_bytes.begin(), key_bytes.end());
    uint8_t status = 1;
    std::vector<char> reply;
    switch (op) {
      case kSet: data_[key] = std::move(value); break;
      case kGet:
      case kCheck: {
        auto it = data_.find(key);
        status = it != data_.end();
        if (status && op == kGet) reply = it->second;
        break;
      }
      case kAdd: {  // status 0: the key holds something that is not an integer (left as it is)
        auto& slot = data_[key];
        try {
          slot = internal::CounterBytes(internal::ParseCounter(slot, key) + DecodeInt(value));
          reply = slot;
        } catch (const Error&) {
          status = 0;
        }
        break;
      }
      case kCompareSet: {  // value: [uint32 length of expected][expected][desired]
        uint32_t n = 0;
        if (value.size() < sizeof(n)) return false;
        std::memcpy(&n, value.data(), sizeof(n));
        if (value.size() < sizeof(n) + n) return false;
        const std::vector<char> expected(value.begin() + sizeof(n), value.begin() + sizeof(n) + n);
        const std::vector<char> desired(value.begin() + sizeof(n) + n, value.end());
        std::optional<std::vector<char>> slot;
        if (auto it = data_.find(key); it != data_.end()) slot = it->second;
        reply = internal::CompareSetSlot(slot, expected, desired);
        if (slot) data_[key] = *slot;
        break;
      }
      case kDelete: status = data_.erase(key) > 0; break;
      case kNumKeys: {
        const int64_t n = static_cast<int64_t>(data_.size());
        reply.resize(sizeof(n));
        std::memcpy(reply.data(), &n, sizeof(n));
        break;
      }
      default: return false;
    }
    return WriteFull(fd, &status, 1) && WriteBlob(fd, reply.data(), static_cast<uint32_t>(reply.size()));
  }

  int listen_fd_ = -1;
  int wake_[2] = {-1, -1};
  int port_ = 0;
  std::vector<int> clients_;
  std::map<std::string, std::vector<char>> data_;
  std::thread thread_;
};

// ---- client ---------------------------------------------------------------------------------------

TcpStore::TcpStore(std::string host, int port, bool is_server, std::chrono::milliseconds timeout)
    : host_(std::move(host)), port_(port) {
  TESSEL_CHECK(port >= 0 && port < 65536, "tcp store: bad port ", port);
  if (is_server) {
    server_ = std::make_unique<Server>(port);
    port_ = server_->port();
  } else {
    TESSEL_CHECK(port > 0, "tcp store: a client needs the server's port, got 0");
  }
  fd_ = Connect(is_server ? "127.0.0.1" : host_, port_, Clock::now() + timeout);
}

TcpStore::~TcpStore() {
  if (fd_ >= 0) ::close(fd_);
  server_.reset();
}

std::string TcpStore::Describe() const { return Str("tcp store ", host_, ":", port_); }

bool TcpStore::Request(uint8_t op, const std::string& key, const std::vector<char>& value, std::vector<char>* reply) {
  std::lock_guard<std::mutex> lock(mu_);
  uint8_t status = 0;
  const bool ok = WriteFull(fd_, &op, 1) && WriteBlob(fd_, key.data(), static_cast<uint32_t>(key.size())) &&
                  WriteBlob(fd_, value.data(), static_cast<uint32_t>(value.size())) && ReadFull(fd_, &status, 1) &&
                  ReadBlob(fd_, reply);
  TESSEL_CHECK_CODE(ErrorCode::kAborted, ok, Describe(), ": lost the connection to the store server (rank 0's process) ",
                    "during a request for key '", key, "'");
  return status == 1;
}

void TcpStore::Set(const std::string& key, const std::vector<char>& value) {
  TESSEL_CHECK(value.size() < kMaxLen, Describe(), ": value for '", key, "' is too large");
  std::vector<char> reply;
  Request(kSet, key, value, &reply);
}

bool TcpStore::Check(const std::string& key) {
  std::vector<char> reply;
  return Request(kCheck, key, {}, &reply);
}

std::vector<char> TcpStore::Get(const std::string& key, std::chrono::milliseconds timeout) {
  Wait({key}, timeout);
  std::vector<char> reply;
  Request(kGet, key, {}, &reply);
  return reply;
}

int64_t TcpStore::Add(const std::string& key, int64_t delta) {
  std::vector<char> value(sizeof(delta));
  std::memcpy(value.data(), &delta, sizeof(delta));
  std::vector<char> reply;
  TESSEL_CHECK(Request(kAdd, key, value, &reply), Describe(), ": add: key '", key,
               "' holds a value that is not an integer (a key set with set() cannot be a counter)");
  return internal::ParseCounter(reply, key);
}

std::vector<char> TcpStore::CompareSet(const std::string& key, const std::vector<char>& expected,
                                       const std::vector<char>& desired) {
  TESSEL_CHECK(expected.size() + desired.size() + 4 < kMaxLen, Describe(), ": values for '", key, "' are too large");
  const uint32_t n = static_cast<uint32_t>(expected.size());
  std::vector<char> value(sizeof(n));
  std::memcpy(value.data(), &n, sizeof(n));
  value.insert(value.end(), expected.begin(), expected.end());
  value.insert(value.end(), desired.begin(), desired.end());
  std::vector<char> reply;
  Request(kCompareSet, key, value, &reply);
  return reply;
}

bool TcpStore::DeleteKey(const std::string& key) {
  std::vector<char> reply;
  return Request(kDelete, key, {}, &reply);
}

int64_t TcpStore::NumKeys() {
  std::vector<char> reply;
  Request(kNumKeys, "", {}, &reply);
  return DecodeInt(reply);
}

}  // namespace tessel::comm
