// core/base/error.h — tessel's one error model: `tessel::Error` with an abseil-style code, and the
// three check macros.
//
// Invariant: every failure a caller can see is a `tessel::Error` whose code follows absl::StatusCode's
// meanings and whose message names the op and the offending shapes/values. Bindings map codes to Python
// exceptions in one table (bindings/errors_py.cc).
//
//   TESSEL_CHECK(cond, ...)            bad input or state the caller can fix   → kInvalidArgument (always on)
//   TESSEL_CHECK_CODE(code, cond, ...) same with an explicit code (kOutOfRange, kFailedPrecondition, ...)
//   TESSEL_INTERNAL_ASSERT(cond, ...)  a tessel bug                            → kInternal, "please report"
//   TESSEL_DCHECK(cond, ...)           hot-path check, compiled out under NDEBUG
//
// Example:
//   TESSEL_CHECK(a.dim() == 2, "matmul: expected 2-D, got ", ShapeStr(a.sizes()));
//   try { ... } catch (const tessel::Error& e) { if (e.code() == ErrorCode::kInvalidArgument) ... }
#pragma once

#include <sstream>
#include <stdexcept>
#include <string>
#include <string_view>
#include <utility>

namespace tessel {

// Codes keep absl::StatusCode's meanings (absl/status/status.h).
enum class ErrorCode {
  kInvalidArgument,     // bad input regardless of state → ValueError
  kFailedPrecondition,  // input fine, object state wrong → RuntimeError
  kOutOfRange,          // index/dim past the end → IndexError
  kUnimplemented,       // not supported (yet) → NotImplementedError
  kDeadlineExceeded,    // a peer never arrived → TimeoutError
  kDataLoss,            // corrupt or partial file → RuntimeError
  kNotFound,            // missing key/file → KeyError / FileNotFoundError
  kAborted,             // a peer failed or ranks disagreed → RuntimeError
  kInternal,            // a tessel bug → RuntimeError
};

std::string_view ErrorCodeName(ErrorCode code);

class Error : public std::runtime_error {
 public:
  Error(ErrorCode code, std::string message);
  ErrorCode code() const { return code_; }

 private:
  ErrorCode code_;
};

// Concatenates any streamable values: Str("dim ", 3, " of ", shape_str).
template <typename... Args>
std::string Str(const Args&... args) {
  std::ostringstream os;
  (os << ... << args);
  return os.str();
}

namespace detail {
[[noreturn]] void ThrowError(ErrorCode code, const char* file, int line, std::string message);
[[noreturn]] void ThrowInternal(const char* cond, const char* file, int line, std::string message);
}  // namespace detail

}  // namespace tessel

#define TESSEL_CHECK_CODE(code, cond, ...)                                                    \
  do {                                                                                        \
    if (__builtin_expect(!(cond), 0)) {                                                       \
      ::tessel::detail::ThrowError((code), __FILE__, __LINE__, ::tessel::Str(__VA_ARGS__));   \
    }                                                                                         \
  } while (0)

#define TESSEL_CHECK(cond, ...) TESSEL_CHECK_CODE(::tessel::ErrorCode::kInvalidArgument, cond, __VA_ARGS__)

#define TESSEL_FAIL(code, ...) ::tessel::detail::ThrowError((code), __FILE__, __LINE__, ::tessel::Str(__VA_ARGS__))

#define TESSEL_INTERNAL_ASSERT(cond, ...)                                                        \
  do {                                                                                           \
    if (__builtin_expect(!(cond), 0)) {                                                          \
      ::tessel::detail::ThrowInternal(#cond, __FILE__, __LINE__, ::tessel::Str("" __VA_OPT__(, ) __VA_ARGS__)); \
    }                                                                                            \
  } while (0)

#ifdef NDEBUG
#define TESSEL_DCHECK(cond, ...) \
  do {                           \
  } while (0)
#else
#define TESSEL_DCHECK(cond, ...) TESSEL_INTERNAL_ASSERT(cond, __VA_ARGS__)
#endif
