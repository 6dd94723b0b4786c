// The userspace TLS path's read side (common/net/tls_bio.h): the socket is
// read a buffer at a time through the syscall seam, and OpenSSL's small
// reads (a 5-byte header, then a body) are served from memory.
#include "common/net/tls_bio.h"

#include <openssl/bio.h>

#include <cerrno>
#include <string>

#include "gtest/gtest.h"
#include "tests/fakes/scripted_syscalls.h"

namespace walship::net {
namespace {

using Op = sys::ScriptedSysCalls::Op;
using sys::ScriptedSysCalls;

constexpr int kSock = 900;  // never touched: every Read is scripted
constexpr size_t kCapacity = 4096;

std::string ReadN(ReadAhead& ra, size_t n, int* rc, bool* retry) {
  std::string out(n, '\0');
  *rc = ra.Read(out.data(), n, retry);
  out.resize(*rc > 0 ? static_cast<size_t>(*rc) : 0);
  return out;
}

TEST(ReadAheadTest, OneReadOfTheWholeBufferServesManySmallReads) {
  ScriptedSysCalls sys;
  sys.ScriptRead({{1000, 0}});
  ReadAhead ra(sys, kSock, kCapacity);
  int rc;
  bool retry;
  EXPECT_EQ(ReadN(ra, 5, &rc, &retry), ScriptedSysCalls::Pattern(0, 5));
  EXPECT_EQ(ReadN(ra, 600, &rc, &retry), ScriptedSysCalls::Pattern(5, 600));
  EXPECT_EQ(ra.buffered(), 395u);
  // Fewer bytes than asked: what the buffer holds, without another read.
  EXPECT_EQ(ReadN(ra, 600, &rc, &retry), ScriptedSysCalls::Pattern(605, 395));
  EXPECT_EQ(ra.buffered(), 0u);
  ASSERT_EQ(sys.calls(Op::kRead).size(), 1u);
  EXPECT_EQ(sys.calls(Op::kRead)[0].fd, kSock);
  EXPECT_EQ(sys.calls(Op::kRead)[0].len, kCapacity);
  EXPECT_TRUE(sys.AllScriptsConsumed());
}

TEST(ReadAheadTest, EintrIsRetriedEagainAsksForARetryAnErrorKeepsItsErrno) {
  ScriptedSysCalls sys;
  sys.ScriptRead({{-1, EINTR}, {10, 0}, {-1, EAGAIN}, {-1, ECONNRESET}});
  ReadAhead ra(sys, kSock, kCapacity);
  int rc;
  bool retry;
  EXPECT_EQ(ReadN(ra, 10, &rc, &retry), ScriptedSysCalls::Pattern(0, 10));
  EXPECT_FALSE(retry);
  ReadN(ra, 10, &rc, &retry);
  EXPECT_EQ(rc, -1);
  EXPECT_TRUE(retry);
  errno = 0;
  ReadN(ra, 10, &rc, &retry);
  EXPECT_EQ(rc, -1);
  EXPECT_FALSE(retry);
  EXPECT_EQ(errno, ECONNRESET);
  EXPECT_FALSE(ra.eof());
  EXPECT_TRUE(sys.AllScriptsConsumed());
}

TEST(ReadAheadTest, TheBioReportsPendingBytesRetriesAndTheEnd) {
  ScriptedSysCalls sys;
  sys.ScriptRead({{-1, EAGAIN}, {8, 0}, {0, 0}});
  ReadAhead ra(sys, kSock, kCapacity);
  BIO* bio = NewReadAheadBio(&ra);
  ASSERT_NE(bio, nullptr);
  char buf[16];
  EXPECT_EQ(BIO_read(bio, buf, 5), -1);
  EXPECT_TRUE(BIO_should_retry(bio));
  EXPECT_TRUE(BIO_should_read(bio));
  EXPECT_EQ(BIO_read(bio, buf, 5), 5);
  EXPECT_FALSE(BIO_should_retry(bio));
  EXPECT_EQ(BIO_pending(bio), 3);
  EXPECT_EQ(BIO_eof(bio), 0);
  EXPECT_EQ(BIO_read(bio, buf, 16), 3);
  EXPECT_EQ(std::string(buf, 3), ScriptedSysCalls::Pattern(5, 3));
  EXPECT_EQ(BIO_read(bio, buf, 16), 0);
  EXPECT_FALSE(BIO_should_retry(bio));
  EXPECT_EQ(BIO_eof(bio), 1);
  BIO_free(bio);
}

TEST(GatherBioTest, EveryWriteIsAppended) {
  std::vector<char> out;
  BIO* bio = NewGatherBio(&out);
  ASSERT_NE(bio, nullptr);
  EXPECT_EQ(BIO_write(bio, "abc", 3), 3);
  EXPECT_EQ(BIO_write(bio, "defg", 4), 4);
  EXPECT_EQ(BIO_flush(bio), 1);
  EXPECT_EQ(std::string(out.begin(), out.end()), "abcdefg");
  BIO_free(bio);
}

}  // namespace
}  // namespace walship::net
