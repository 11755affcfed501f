// core/base/error.cc — Error construction and the throw helpers behind the check macros.
#include "core/base/error.h"

namespace tessel {

std::string_view ErrorCodeName(ErrorCode code) {
  switch (code) {
    case ErrorCode::kInvalidArgument: return "INVALID_ARGUMENT";
    case ErrorCode::kFailedPrecondition: return "FAILED_PRECONDITION";
    case ErrorCode::kOutOfRange: return "OUT_OF_RANGE";
    case ErrorCode::kUnimplemented: return "UNIMPLEMENTED";
    case ErrorCode::kDeadlineExceeded: return "DEADLINE_EXCEEDED";
    case ErrorCode::kDataLoss: return "DATA_LOSS";
    case ErrorCode::kNotFound: return "NOT_FOUND";
    case ErrorCode::kAborted: return "ABORTED";
    case ErrorCode::kInternal: return "INTERNAL";
  }
  return "UNKNOWN";
}

Error::Error(ErrorCode code, std::string message) : std::runtime_error(std::move(message)), code_(code) {}

namespace detail {

void ThrowError(ErrorCode code, const char* /*file*/, int /*line*/, std::string message) {
  throw Error(code, std::move(message));
}

void ThrowInternal(const char* cond, const char* file, int line, std::string message) {
  throw Error(ErrorCode::kInternal,
              Str("internal error: ", cond, " failed at ", file, ":", line, (message.empty() ? "" : ": "), message,
                  " (this is a tessel bug; please report it)"));
}

}  // namespace detail
}  // namespace tessel
