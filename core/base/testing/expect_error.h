// core/base/testing/expect_error.h — the one test helper for "this call raises that tessel::Error":
// runs `fn` and expects a tessel::Error with `code` whose message contains every fragment.
//
// Example:
//   ExpectErrorContains([&] { Add(a, b); }, ErrorCode::kInvalidArgument, "not broadcastable");
//   ExpectErrorContains([&] { Load(sd, dir); }, ErrorCode::kDataLoss, {"data-00001", "block 3"});
#pragma once

#include <gtest/gtest.h>

#include <functional>
#include <initializer_list>
#include <string>
#include <vector>

#include "core/base/error.h"

namespace tessel::testing {

inline void ExpectErrorContains(const std::function<void()>& fn, ErrorCode code,
                                const std::vector<std::string>& fragments) {
  try {
    fn();
    ADD_FAILURE() << "no error; expected " << ErrorCodeName(code) << " containing each of " << fragments.size()
                  << " fragment(s), first '" << (fragments.empty() ? "" : fragments.front()) << "'";
  } catch (const Error& e) {
    EXPECT_EQ(e.code(), code) << e.what();
    for (const std::string& f : fragments) {
      EXPECT_NE(std::string(e.what()).find(f), std::string::npos) << "missing '" << f << "' in: " << e.what();
    }
  }
}

// A braced list of fragments: {"a", "b"} (also the exact match for a list, so it is never read as
// std::string's iterator-pair constructor).
inline void ExpectErrorContains(const std::function<void()>& fn, ErrorCode code,
                                std::initializer_list<std::string> fragments) {
  ExpectErrorContains(fn, code, std::vector<std::string>(fragments));
}

inline void ExpectErrorContains(const std::function<void()>& fn, ErrorCode code, const std::string& fragment) {
  ExpectErrorContains(fn, code, std::vector<std::string>{fragment});
}

}  // namespace tessel::testing
