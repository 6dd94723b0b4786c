// Copyright walship authors.

#include "common/sys/errors.h"

#include <errno.h>

#include "absl/status/status.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"

namespace walship {
namespace sys {
namespace {

using ::testing::HasSubstr;

struct Mapping {
  int err;
  absl::StatusCode code;
};

class ErrnoToStatusTest : public ::testing::TestWithParam<Mapping> {};

TEST_P(ErrnoToStatusTest, MapsByWhatTheCallerDoesNext) {
  const absl::Status s = ErrnoToStatus(GetParam().err, "ctx");
  EXPECT_EQ(s.code(), GetParam().code) << s;
  EXPECT_EQ(ErrnoToStatusCode(GetParam().err), GetParam().code);
}

INSTANTIATE_TEST_SUITE_P(
    Table, ErrnoToStatusTest,
    ::testing::Values(Mapping{EPIPE, absl::StatusCode::kUnavailable},
                      Mapping{ECONNRESET, absl::StatusCode::kUnavailable},
                      Mapping{ECONNREFUSED, absl::StatusCode::kUnavailable},
                      Mapping{ECONNABORTED, absl::StatusCode::kUnavailable},
                      Mapping{ENOTCONN, absl::StatusCode::kUnavailable},
                      Mapping{ETIMEDOUT, absl::StatusCode::kUnavailable},
                      Mapping{EHOSTUNREACH, absl::StatusCode::kUnavailable},
                      Mapping{ENETUNREACH, absl::StatusCode::kUnavailable},
                      Mapping{EAGAIN, absl::StatusCode::kUnavailable},
                      Mapping{EWOULDBLOCK, absl::StatusCode::kUnavailable},
                      Mapping{ENOENT, absl::StatusCode::kNotFound},
                      Mapping{EEXIST, absl::StatusCode::kAlreadyExists},
                      Mapping{EACCES, absl::StatusCode::kPermissionDenied},
                      Mapping{EPERM, absl::StatusCode::kPermissionDenied},
                      Mapping{EROFS, absl::StatusCode::kPermissionDenied},
                      Mapping{ENOSPC, absl::StatusCode::kResourceExhausted},
                      Mapping{EDQUOT, absl::StatusCode::kResourceExhausted},
                      Mapping{EMFILE, absl::StatusCode::kResourceExhausted},
                      Mapping{ENFILE, absl::StatusCode::kResourceExhausted},
                      Mapping{ENOMEM, absl::StatusCode::kResourceExhausted},
                      Mapping{EIO, absl::StatusCode::kDataLoss},
                      Mapping{EINVAL, absl::StatusCode::kInvalidArgument},
                      Mapping{ENAMETOOLONG, absl::StatusCode::kInvalidArgument},
                      Mapping{EBADF, absl::StatusCode::kInvalidArgument},
                      Mapping{ENOSYS, absl::StatusCode::kUnimplemented},
                      Mapping{EOPNOTSUPP, absl::StatusCode::kUnimplemented},
                      Mapping{ENOTSUP, absl::StatusCode::kUnimplemented},
                      Mapping{EXDEV, absl::StatusCode::kFailedPrecondition},
                      Mapping{EFBIG, absl::StatusCode::kOutOfRange},
                      Mapping{EDOM, absl::StatusCode::kInternal},
                      Mapping{0, absl::StatusCode::kInternal}));

TEST(ErrnoToStatusTest, MessageIsContextStrerrorAndNumber) {
  const absl::Status s = ErrnoToStatus(ENOENT, "open /x/y");
  EXPECT_EQ(s.message(), "open /x/y: No such file or directory (errno 2)");
}

TEST(ErrnoToStatusTest, ErrnoZeroIsNeverOk) {
  const absl::Status s = ErrnoToStatus(0, "lost");
  EXPECT_FALSE(s.ok());
  EXPECT_EQ(s.message(), "lost: unknown error (errno 0)");
}

TEST(ErrnoToStatusTest, UnknownErrnoStillFormats) {
  const absl::Status s = ErrnoToStatus(9999, "ctx");
  EXPECT_EQ(s.code(), absl::StatusCode::kInternal);
  EXPECT_THAT(s.message(), HasSubstr("(errno 9999)"));
}

TEST(SysErrorTest, OkResultIsOk) {
  EXPECT_TRUE(SysError(SysResult{0, 0}, "fsync").ok());
  EXPECT_TRUE(SysError(SysResult{17, 0}, "read").ok());
}

TEST(SysErrorTest, FailedResultUsesItsErrno) {
  const absl::Status s = SysError(SysResult{-1, EIO}, "fsync seg");
  EXPECT_EQ(s.code(), absl::StatusCode::kDataLoss);
  EXPECT_THAT(s.message(), HasSubstr("fsync seg: "));
  EXPECT_THAT(s.message(), HasSubstr("(errno 5)"));
}

}  // namespace
}  // namespace sys
}  // namespace walship
