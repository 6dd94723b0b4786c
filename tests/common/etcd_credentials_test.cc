// The leader key's credential files, read again when they change on disk
// (common/etcd_credentials.h). Rotation against a real etcd is
// integration/drill/pg_leader_etcd_test.py's.
#include "common/etcd_credentials.h"

#include <unistd.h>

#include <cstdio>
#include <cstdlib>
#include <fstream>
#include <string>

#include "gtest/gtest.h"

namespace walship {
namespace {

std::string Dir() {
  const char* tmp = std::getenv("TEST_TMPDIR");
  return tmp != nullptr ? tmp : "/tmp";
}

void Write(const std::string& path, const std::string& text) {
  std::ofstream(path, std::ios::trunc) << text;
}

TEST(EtcdCredentialFilesTest, APasswordFileRewrittenIsReadAgain) {
  const std::string pw = Dir() + "/password";
  Write(pw, "first\nignored\n");
  EtcdCredentialFiles files(sys::DefaultSysCalls(), EtcdTls{}, "walship", pw);
  absl::StatusOr<EtcdSecrets> s = files.Load();
  ASSERT_TRUE(s.ok()) << s.status();
  ASSERT_TRUE(s->user.has_value());
  EXPECT_EQ(s->user->name, "walship");
  EXPECT_EQ(s->user->password, "first");
  EXPECT_FALSE(files.Changed());
  EXPECT_EQ(files.Describe(), "--leader-etcd-password-file=" + pw);

  // Rewritten in place with another length: changed.
  Write(pw, "second-one\n");
  EXPECT_TRUE(files.Changed());
  s = files.Load();
  ASSERT_TRUE(s.ok()) << s.status();
  EXPECT_EQ(s->user->password, "second-one");
  EXPECT_FALSE(files.Changed());

  // Replaced by a rename (another inode), same size: changed.
  Write(pw + ".new", "third-one!\n");
  ASSERT_EQ(::rename((pw + ".new").c_str(), pw.c_str()), 0);
  EXPECT_TRUE(files.Changed());
  EXPECT_EQ(files.Load()->user->password, "third-one!");

  // Gone: changed, and a Load() names the flag; it stays changed until a
  // Load() succeeds.
  ASSERT_EQ(::unlink(pw.c_str()), 0);
  EXPECT_TRUE(files.Changed());
  s = files.Load();
  EXPECT_EQ(s.status().code(), absl::StatusCode::kInvalidArgument);
  EXPECT_NE(s.status().message().find("--leader-etcd-password-file=" + pw),
            absl::string_view::npos)
      << s.status();
  EXPECT_TRUE(files.Changed());
  Write(pw, "fourth\n");
  EXPECT_EQ(files.Load()->user->password, "fourth");
  EXPECT_FALSE(files.Changed());
}

TEST(EtcdCredentialFilesTest, NoFilesNeverChange) {
  EtcdCredentialFiles files(sys::DefaultSysCalls(), EtcdTls{}, "", "");
  absl::StatusOr<EtcdSecrets> s = files.Load();
  ASSERT_TRUE(s.ok()) << s.status();
  EXPECT_FALSE(s->user.has_value());
  EXPECT_NE(s->credentials, nullptr);
  EXPECT_FALSE(files.Changed());
  EXPECT_EQ(files.Describe(), "");
}

TEST(EtcdCredentialFilesTest, AMissingCaNamesItsFlag) {
  EtcdTls tls;
  tls.ca_file = Dir() + "/no-such-ca.pem";
  EtcdCredentialFiles files(sys::DefaultSysCalls(), tls, "", "");
  absl::StatusOr<EtcdSecrets> s = files.Load();
  EXPECT_EQ(s.status().code(), absl::StatusCode::kInvalidArgument);
  EXPECT_NE(s.status().message().find("--leader-etcd-ca="), absl::string_view::npos)
      << s.status();
}

}  // namespace
}  // namespace walship
