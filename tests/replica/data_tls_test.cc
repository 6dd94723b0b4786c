// CheckAgentDataTls: the replica's side of the handshake's agreement on TLS
// on the data socket (replica/data_tls.h).
#include "replica/data_tls.h"

#include "absl/strings/match.h"
#include "common/reason.h"
#include "gtest/gtest.h"

namespace walship::replica {
namespace {

TEST(CheckAgentDataTlsTest, AgreementPasses) {
  EXPECT_TRUE(CheckAgentDataTls(true, walship::v1::DATA_TLS_ON, "a:1").ok());
  EXPECT_TRUE(CheckAgentDataTls(false, walship::v1::DATA_TLS_OFF, "a:1").ok());
  // An older agent (field unset) serves plaintext: fine for a plaintext replica.
  EXPECT_TRUE(CheckAgentDataTls(false, walship::v1::DATA_TLS_UNSPECIFIED, "a:1").ok());
}

TEST(CheckAgentDataTlsTest, AnOlderAgentIsRefusedRatherThanSentTheTokenInPlaintext) {
  absl::Status s = CheckAgentDataTls(true, walship::v1::DATA_TLS_UNSPECIFIED, "a:1");
  EXPECT_EQ(s.code(), absl::StatusCode::kFailedPrecondition) << s;
  EXPECT_EQ(ReasonOf(s), Reason::kDataTlsMismatch);
  EXPECT_TRUE(absl::StrContains(s.message(), "too old to know --data-tls")) << s;
}

TEST(CheckAgentDataTlsTest, EitherMismatchIsRefusedWithItsReason) {
  for (auto [mine, agent] : {std::make_pair(true, walship::v1::DATA_TLS_OFF),
                             std::make_pair(false, walship::v1::DATA_TLS_ON)}) {
    absl::Status s = CheckAgentDataTls(mine, agent, "a:1");
    EXPECT_EQ(s.code(), absl::StatusCode::kFailedPrecondition) << s;
    EXPECT_EQ(ReasonOf(s), Reason::kDataTlsMismatch);
    EXPECT_TRUE(absl::StrContains(s.message(), "give both the same --data-tls")) << s;
  }
}

}  // namespace
}  // namespace walship::replica
