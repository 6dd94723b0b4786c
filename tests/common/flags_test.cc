// FlagSet: command-line parsing, --config TOML files, --print-config.
#include "common/flags.h"

#include <cstdlib>
#include <fstream>
#include <string>
#include <vector>

#include "gmock/gmock.h"
#include "common/sys/syscalls.h"
#include "gtest/gtest.h"
#include "tests/fakes/temp_dir.h"

namespace walship {
namespace {

using ::testing::HasSubstr;

struct Opts {
  std::string dir = "/default";
  int64_t timeout = 30;
  uint64_t rate = 0;
  bool verbose = false;
};

void Register(FlagSet* f, Opts* o) {
  f->String("wal-dir", &o->dir, "A directory, with \"quotes\".");
  f->Int("timeout-ms", &o->timeout, "A signed number.");
  f->Uint("max-rate", &o->rate, "An unsigned number.");
  f->Bool("verbose", &o->verbose, "A switch.");
  f->EnableConfigFile(sys::DefaultSysCalls());
}

std::string WriteFile(const std::string& name, const std::string& text) {
  const char* tmp = std::getenv("TEST_TMPDIR");
  std::string path = std::string(tmp ? tmp : "/tmp") + "/" + name;
  std::ofstream(path) << text;
  return path;
}

absl::StatusOr<std::vector<std::string>> ParseArgs(FlagSet* f, std::vector<std::string> args) {
  std::vector<char*> argv;
  static std::string prog = "prog";
  argv.push_back(prog.data());
  for (std::string& a : args) argv.push_back(a.data());
  return f->Parse(static_cast<int>(argv.size()), argv.data());
}

TEST(FlagsConfigTest, FileSetsEveryType) {
  std::string path = WriteFile("all.toml",
                               "wal-dir = \"/x\"\ntimeout-ms = -5\nmax-rate = 1000000\n"
                               "verbose = true\n");
  Opts o;
  FlagSet f("usage");
  Register(&f, &o);
  ASSERT_TRUE(ParseArgs(&f, {"--config=" + path}).ok());
  EXPECT_EQ(o.dir, "/x");
  EXPECT_EQ(o.timeout, -5);
  EXPECT_EQ(o.rate, 1000000u);
  EXPECT_TRUE(o.verbose);
}

TEST(FlagsConfigTest, CommandLineWinsRegardlessOfOrder) {
  std::string path = WriteFile("prec.toml", "wal-dir = \"/file\"\nmax-rate = 5000\n");
  for (bool config_first : {true, false}) {
    Opts o;
    FlagSet f("usage");
    Register(&f, &o);
    std::vector<std::string> args = {"--max-rate=7000"};
    if (config_first) {
      args.insert(args.begin(), {"--config", path});
    } else {
      args.push_back("--config=" + path);
    }
    ASSERT_TRUE(ParseArgs(&f, args).ok());
    EXPECT_EQ(o.rate, 7000u) << "config first: " << config_first;
    EXPECT_EQ(o.dir, "/file");
  }
}

TEST(FlagsConfigTest, UnknownKeyNamesKeyAndFile) {
  std::string path = WriteFile("unknown.toml", "wal-dir = \"/x\"\nmax-rates = 1\n");
  Opts o;
  FlagSet f("usage");
  Register(&f, &o);
  auto r = ParseArgs(&f, {"--config=" + path});
  ASSERT_EQ(r.status().code(), absl::StatusCode::kInvalidArgument);
  EXPECT_THAT(std::string(r.status().message()), HasSubstr("\"max-rates\""));
  EXPECT_THAT(std::string(r.status().message()), HasSubstr(path));
  EXPECT_THAT(std::string(r.status().message()), HasSubstr("unknown key"));
}

TEST(FlagsConfigTest, WrongTypesAreRefused) {
  const std::vector<std::pair<std::string, std::string>> cases = {
      {"max-rate = \"1000\"\n", "max-rate"},  {"max-rate = -1\n", "max-rate"},
      {"timeout-ms = 1.5\n", "timeout-ms"},   {"verbose = \"yes\"\n", "verbose"},
      {"wal-dir = 3\n", "wal-dir"},           {"[wal-dir]\nx = 1\n", "wal-dir"},
      {"config = \"/other\"\n", "config"},
  };
  for (const auto& [text, key] : cases) {
    std::string path = WriteFile("bad.toml", text);
    Opts o;
    FlagSet f("usage");
    Register(&f, &o);
    auto r = ParseArgs(&f, {"--config=" + path});
    ASSERT_EQ(r.status().code(), absl::StatusCode::kInvalidArgument) << text;
    EXPECT_THAT(std::string(r.status().message()), HasSubstr("\"" + key + "\"")) << text;
    EXPECT_THAT(std::string(r.status().message()), HasSubstr(path)) << text;
  }
}

TEST(FlagsConfigTest, SyntaxErrorNamesFileAndLine) {
  std::string path = WriteFile("syntax.toml", "wal-dir = \"/x\"\nmax-rate = = 1\n");
  Opts o;
  FlagSet f("usage");
  Register(&f, &o);
  auto r = ParseArgs(&f, {"--config=" + path});
  ASSERT_EQ(r.status().code(), absl::StatusCode::kInvalidArgument);
  EXPECT_THAT(std::string(r.status().message()), HasSubstr(path + ":2:"));
}

TEST(FlagsConfigTest, MissingFileIsNotFound) {
  Opts o;
  FlagSet f("usage");
  Register(&f, &o);
  auto r = ParseArgs(&f, {"--config=/nonexistent/walship.toml"});
  EXPECT_EQ(r.status().code(), absl::StatusCode::kNotFound);
}

TEST(FlagsConfigTest, ADirectoryIsNoConfigFile) {
  Opts o;
  FlagSet f("usage");
  Register(&f, &o);
  const std::string dir = testing::FreshTempDir("config-dir");
  auto r = ParseArgs(&f, {"--config=" + dir});
  EXPECT_EQ(r.status().code(), absl::StatusCode::kInvalidArgument) << r.status();
  EXPECT_EQ(r.status().message(), "cannot read config file " + dir);
}

// Reads of a descriptor fail with EIO.
class FailingReadSysCalls : public sys::RealSysCalls {
 public:
  sys::SysResult Read(int, void*, size_t) override { return {-1, EIO}; }
};

TEST(FlagsConfigTest, AReadErrorNamesTheFile) {
  std::string path = WriteFile("unreadable.toml", "verbose = true\n");
  Opts o;
  FlagSet f("usage");
  Register(&f, &o);
  FailingReadSysCalls sys;
  absl::Status s = f.ApplyConfigFile(sys, path);
  EXPECT_EQ(s.code(), absl::StatusCode::kInvalidArgument) << s;
  EXPECT_EQ(s.message(), "cannot read config file " + path);
  EXPECT_FALSE(o.verbose);
}

TEST(FlagsConfigTest, AMissingFileIsNamedWithTheReason) {
  Opts o;
  FlagSet f("usage");
  Register(&f, &o);
  absl::Status s = f.ApplyConfigFile(sys::DefaultSysCalls(), "/nonexistent/walship.toml");
  EXPECT_EQ(s.code(), absl::StatusCode::kNotFound);
  EXPECT_EQ(s.message(),
            "cannot read config file /nonexistent/walship.toml: No such file or directory");
}

TEST(FlagsConfigTest, PrintConfigRoundTrips) {
  Opts a;
  FlagSet fa("usage");
  Register(&fa, &a);
  ASSERT_TRUE(ParseArgs(&fa, {"--wal-dir=/we\"ird\\path\tx", "--timeout-ms=-7",
                              "--max-rate=18446744073709551", "--verbose", "--print-config"})
                  .ok());
  EXPECT_TRUE(fa.print_config_requested());
  std::string text = fa.ConfigText();
  EXPECT_THAT(text, HasSubstr("timeout-ms = -7\n"));
  EXPECT_THAT(text, HasSubstr("verbose = true\n"));
  EXPECT_THAT(text, HasSubstr("# A signed number.\n"));
  EXPECT_THAT(text, ::testing::Not(HasSubstr("print-config =")));
  EXPECT_THAT(text, ::testing::Not(HasSubstr("config =")));

  Opts b;
  FlagSet fb("usage");
  Register(&fb, &b);
  ASSERT_TRUE(fb.ApplyConfig(text, "printed").ok()) << text;
  EXPECT_EQ(b.dir, a.dir);
  EXPECT_EQ(b.timeout, a.timeout);
  EXPECT_EQ(b.rate, a.rate);
  EXPECT_EQ(b.verbose, a.verbose);
  EXPECT_EQ(fb.ConfigText(), text);
}

TEST(FlagsConfigTest, ConfigDisabledByDefault) {
  Opts o;
  FlagSet f("usage");
  f.String("wal-dir", &o.dir, "d");
  auto r = ParseArgs(&f, {"--config=/x"});
  EXPECT_EQ(r.status().code(), absl::StatusCode::kInvalidArgument);
  EXPECT_THAT(std::string(r.status().message()), HasSubstr("unknown flag --config"));
}

TEST(FlagsTest, MillisecondsAreWholeMillisecondsEverywhere) {
  absl::Duration interval = absl::Milliseconds(1500);
  FlagSet f("usage");
  f.Milliseconds("interval-ms", &interval, "A pause.");
  f.EnableConfigFile(sys::DefaultSysCalls());
  EXPECT_THAT(f.Usage(), HasSubstr("--interval-ms=VALUE  (default: 1500)\n"));
  ASSERT_TRUE(ParseArgs(&f, {"--interval-ms=250"}).ok());
  EXPECT_EQ(interval, absl::Milliseconds(250));
  EXPECT_THAT(f.ConfigText(), HasSubstr("interval-ms = 250\n"));
  ASSERT_TRUE(f.ApplyConfig("interval-ms = 7\n", "t.toml").ok());
  EXPECT_EQ(interval, absl::Milliseconds(7));
  EXPECT_FALSE(f.ApplyConfig("interval-ms = \"7\"\n", "t.toml").ok());
  auto bad = ParseArgs(&f, {"--interval-ms=1s"});
  EXPECT_EQ(bad.status().code(), absl::StatusCode::kInvalidArgument);
  EXPECT_EQ(interval, absl::Milliseconds(7)) << "a bad value leaves the last good one";
}

TEST(FlagsTest, MicrosecondsAreWholeMicroseconds) {
  absl::Duration slice = absl::Microseconds(100);
  FlagSet f("usage");
  f.Microseconds("slice-us", &slice, "A slice.");
  f.EnableConfigFile(sys::DefaultSysCalls());
  EXPECT_THAT(f.Usage(), HasSubstr("--slice-us=VALUE  (default: 100)\n"));
  ASSERT_TRUE(ParseArgs(&f, {"--slice-us=2500"}).ok());
  EXPECT_EQ(slice, absl::Microseconds(2500));
  EXPECT_THAT(f.ConfigText(), HasSubstr("slice-us = 2500\n"));
  ASSERT_TRUE(f.ApplyConfig("slice-us = 0\n", "t.toml").ok());
  EXPECT_EQ(slice, absl::ZeroDuration());
}

TEST(FlagsTest, ANameRegisteredTwiceFailsEveryParse) {
  Opts o;
  FlagSet f("usage");
  Register(&f, &o);
  std::string again;
  f.String("max-rate", &again, "A second flag of that name.");
  auto r = ParseArgs(&f, {"--wal-dir=/x"});
  EXPECT_EQ(r.status().code(), absl::StatusCode::kInternal);
  EXPECT_THAT(std::string(r.status().message()), HasSubstr("--max-rate is registered twice"));
}

}  // namespace
}  // namespace walship
