// Name resolution in ListenTcp / ConnectTcp goes through the seam: its
// failure is kUnavailable with the resolver's own words, and every list it
// returns is freed through the seam that made it.
#include "common/net.h"

#include <netdb.h>

#include <string>

#include "absl/strings/str_cat.h"
#include "common/sys/syscalls.h"
#include "gtest/gtest.h"

namespace walship {
namespace {

// Counts Getaddrinfo / Freeaddrinfo; fails Getaddrinfo with `fail` when set.
class ResolverSysCalls : public sys::RealSysCalls {
 public:
  sys::SysResult Getaddrinfo(const char* node, const char* service, const addrinfo* hints,
                             addrinfo** res) override {
    ++resolved_;
    if (fail_ != 0) return {-1, fail_};
    return RealSysCalls::Getaddrinfo(node, service, hints, res);
  }
  void Freeaddrinfo(addrinfo* res) override {
    ++freed_;
    RealSysCalls::Freeaddrinfo(res);
  }

  int fail_ = 0;
  int resolved_ = 0;
  int freed_ = 0;
};

TEST(NetTest, AResolverFailureIsUnavailableInItsOwnWords) {
  ResolverSysCalls sys;
  sys.fail_ = EAI_AGAIN;
  auto fd = ConnectTcp(sys, HostPort{"db-1.example", 5432}, absl::Seconds(1));
  EXPECT_EQ(fd.status().code(), absl::StatusCode::kUnavailable) << fd.status();
  EXPECT_EQ(fd.status().message(),
            absl::StrCat("cannot resolve db-1.example:5432: ", gai_strerror(EAI_AGAIN)));
  EXPECT_EQ(sys.freed_, 0) << "nothing to free after a failure";
}

TEST(NetTest, EveryResolvedListIsFreedThroughTheSeam) {
  ResolverSysCalls sys;
  uint16_t port = 0;
  auto listener = ListenTcp(sys, HostPort{"127.0.0.1", 0}, 4, &port);
  ASSERT_TRUE(listener.ok()) << listener.status();
  ASSERT_NE(port, 0);
  auto client = ConnectTcp(sys, HostPort{"127.0.0.1", port}, absl::Seconds(5));
  ASSERT_TRUE(client.ok()) << client.status();
  EXPECT_EQ(sys.resolved_, 2);
  EXPECT_EQ(sys.freed_, 2);
}

}  // namespace
}  // namespace walship
