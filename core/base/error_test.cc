#include "core/base/error.h"

#include <gtest/gtest.h>

namespace tessel {
namespace {

TEST(ErrorTest, CheckThrowsInvalidArgumentWithMessage) {
  try {
    TESSEL_CHECK(1 == 2, "matmul: shapes ", 3, "x", 4);
    FAIL() << "no throw";
  } catch (const Error& e) {
    EXPECT_EQ(e.code(), ErrorCode::kInvalidArgument);
    EXPECT_STREQ(e.what(), "matmul: shapes 3x4");
  }
}

TEST(ErrorTest, CheckCodeKeepsTheGivenCode) {
  try {
    TESSEL_CHECK_CODE(ErrorCode::kOutOfRange, false, "dim 5 out of range");
    FAIL() << "no throw";
  } catch (const Error& e) {
    EXPECT_EQ(e.code(), ErrorCode::kOutOfRange);
  }
}

TEST(ErrorTest, InternalAssertSaysPleaseReport) {
  try {
    TESSEL_INTERNAL_ASSERT(false, "bad state");
    FAIL() << "no throw";
  } catch (const Error& e) {
    EXPECT_EQ(e.code(), ErrorCode::kInternal);
    EXPECT_NE(std::string(e.what()).find("please report"), std::string::npos);
    EXPECT_NE(std::string(e.what()).find("bad state"), std::string::npos);
  }
}

TEST(ErrorTest, CodeNamesFollowAbseil) {
  EXPECT_EQ(ErrorCodeName(ErrorCode::kDeadlineExceeded), "DEADLINE_EXCEEDED");
  EXPECT_EQ(ErrorCodeName(ErrorCode::kDataLoss), "DATA_LOSS");
}

}  // namespace
}  // namespace tessel
