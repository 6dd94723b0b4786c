// The WAL format registry (wal_format.h): formats bring their own flags,
// config-file keys, validation and source; the agent runs a format its core
// has never heard of; and the formats built into walship-agent keep their
// flags and their messages for bad combinations.
#include "agent/wal_format.h"

#include <memory>
#include <string>
#include <vector>

#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"
#include "agent/agent.h"
#include "agent/append_format.h"
#include "agent/postgres/postgres_options.h"
#include "agent/wal_source_factory.h"
#include "common/flags.h"
#include "common/metrics.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "tests/fakes/temp_dir.h"

namespace walship::agent {
namespace {

using ::testing::HasSubstr;

// A format no part of the core knows: one flag, one rule, a source that
// shows nothing.
struct ToyOptions final : FormatOptions {
  std::string colour;
  int64_t legs = 4;
  void RegisterFlags(FlagSet& flags) override {
    flags.String("toy-colour", &colour, "toy: its colour.");
    flags.Int("toy-legs", &legs, "toy: how many legs.");
  }
  absl::Status Validate(bool selected) const override {
    if (!selected && !colour.empty()) return OnlyForFormat("toy-colour", "toy");
    if (legs < 0) return absl::InvalidArgumentError("--toy-legs must not be negative");
    return absl::OkStatus();
  }
};

class ToySource final : public WalSource {
 public:
  ToySource(std::string wal_dir, std::string colour)
      : wal_dir_(std::move(wal_dir)), colour_(std::move(colour)) {}
  absl::Status Start() override { return absl::OkStatus(); }
  void Stop() override {}
  std::string StreamId() const override { return "toy-" + colour_; }
  std::string FormatName() const override { return "toy"; }
  std::string wal_dir() const override { return wal_dir_; }
  void DeclareMetrics(MetricsRegistry& metrics) override {
    metrics.Gauge("toy_colour", "toy: its colour.").Set({{"colour", colour_}}, 1);
  }

 private:
  const std::string wal_dir_;
  const std::string colour_;
};

WalFormat ToyFormat() {
  return MakeWalFormat<ToyOptions>(
      "toy", "a toy with legs.",
      [](const SourceContext& c, const ToyOptions& o)
          -> absl::StatusOr<std::unique_ptr<WalSource>> {
        return std::make_unique<ToySource>(c.agent.wal_dir, o.colour);
      });
}

struct PlainOptions final : FormatOptions {
  void RegisterFlags(FlagSet&) override {}
  absl::Status Validate(bool) const override { return absl::OkStatus(); }
};

WalFormat PlainFormat() {
  return MakeWalFormat<PlainOptions>(
      "plain", "nothing to set.",
      [](const SourceContext& c, const PlainOptions&)
          -> absl::StatusOr<std::unique_ptr<WalSource>> {
        return std::make_unique<ToySource>(c.agent.wal_dir, "plain");
      });
}

WalFormatRegistry PlainAndToy() {
  WalFormatRegistry r;
  r.Add(PlainFormat());
  r.Add(ToyFormat());
  return r;
}

absl::Status ParseArgs(FlagSet& f, std::vector<std::string> args) {
  std::vector<char*> argv;
  static std::string prog = "prog";
  argv.push_back(prog.data());
  for (std::string& a : args) argv.push_back(a.data());
  return f.Parse(static_cast<int>(argv.size()), argv.data()).status();
}

AgentOptions Valid(const std::string& format) {
  AgentOptions o;
  o.wal_dir = "/var/lib/app/wal";
  o.format = format;
  o.tls.insecure = true;
  return o;
}

template <class T>
const T& OptionsOf(const AgentOptions& o, const std::string& format) {
  return dynamic_cast<const T&>(*o.format_options.at(format));
}

TEST(WalFormatRegistryTest, HelpListsEveryFormatInOrder) {
  const WalFormatRegistry r = PlainAndToy();
  EXPECT_EQ(r.Names(), "plain, toy");
  EXPECT_EQ(r.FormatHelp("WAL source format."),
            "WAL source format. plain: nothing to set. toy: a toy with legs.");
  ASSERT_NE(r.Find("toy"), nullptr);
  EXPECT_EQ(r.Find("dog"), nullptr);
}

TEST(WalFormatRegistryTest, FlagsAndConfigKeysReachTheFormatsOptions) {
  const WalFormatRegistry r = PlainAndToy();
  AgentOptions o = Valid("toy");
  FlagSet f("usage");
  r.RegisterFlags(f, o);
  ASSERT_TRUE(f.ApplyConfig("toy-legs = 3\n", "toy.toml").ok());
  ASSERT_TRUE(ParseArgs(f, {"--toy-colour=red"}).ok());
  EXPECT_EQ(OptionsOf<ToyOptions>(o, "toy").colour, "red");
  EXPECT_EQ(OptionsOf<ToyOptions>(o, "toy").legs, 3);
  EXPECT_TRUE(r.Validate(o).ok()) << r.Validate(o);
  EXPECT_THAT(f.Usage(), HasSubstr("--toy-colour=VALUE  (default: \"\")\n      toy: its colour."));
  EXPECT_THAT(f.ConfigText(), HasSubstr("toy-legs = 3\n"));
}

TEST(WalFormatRegistryTest, EachFormatValidatesItsOwnFlags) {
  const WalFormatRegistry r = PlainAndToy();
  AgentOptions o = Valid("plain");
  FlagSet f("usage");
  r.RegisterFlags(f, o);
  ASSERT_TRUE(ParseArgs(f, {"--toy-colour=red"}).ok());
  absl::Status s = r.Validate(o);
  EXPECT_TRUE(absl::IsInvalidArgument(s)) << s;
  EXPECT_EQ(s.message(), "--toy-colour is only for --format=toy");

  AgentOptions bad_legs = Valid("toy");
  FlagSet g("usage");
  r.RegisterFlags(g, bad_legs);
  ASSERT_TRUE(ParseArgs(g, {"--toy-legs=-1"}).ok());
  EXPECT_EQ(r.Validate(bad_legs).message(), "--toy-legs must not be negative");
}

TEST(WalFormatRegistryTest, AnUnknownFormatNamesTheKnownOnes) {
  const WalFormatRegistry r = PlainAndToy();
  absl::Status s = r.Validate(Valid("dog"));
  EXPECT_TRUE(absl::IsInvalidArgument(s)) << s;
  EXPECT_EQ(s.message(), "--format=dog is not supported (supported: plain, toy)");
  sys::SysCalls& sys = sys::DefaultSysCalls();
  SegmentCatalog catalog;
  EXPECT_TRUE(absl::IsInvalidArgument(
      r.MakeSource(sys, Valid("dog"), catalog, DefaultClock()).status()));
}

TEST(WalFormatRegistryTest, AFormatWithoutOptionsRunsWithItsDefaults) {
  WalFormatRegistry r;
  r.Add(ToyFormat());
  AgentOptions o = Valid("toy");  // no RegisterFlags: no entry
  EXPECT_TRUE(r.Validate(o).ok());
  SegmentCatalog catalog;
  auto source = r.MakeSource(sys::DefaultSysCalls(), o, catalog, DefaultClock());
  ASSERT_TRUE(source.ok()) << source.status();
  EXPECT_EQ((*source)->StreamId(), "toy-");
}

TEST(WalFormatRegistryTest, OptionsOfAnotherFormatAreRefusedNotCast) {
  WalFormatRegistry r;
  r.Add(ToyFormat());
  AgentOptions o = Valid("toy");
  o.format_options["toy"] = std::make_shared<PlainOptions>();
  SegmentCatalog catalog;
  auto source = r.MakeSource(sys::DefaultSysCalls(), o, catalog, DefaultClock());
  EXPECT_TRUE(absl::IsInternal(source.status())) << source.status();
}

TEST(WalFormatRegistryTest, AFlagNameTakenTwiceFailsEveryParse) {
  WalFormatRegistry r;
  r.Add(ToyFormat());
  AgentOptions o = Valid("toy");
  FlagSet f("usage");
  std::string shadow;
  f.String("toy-colour", &shadow, "the core's own flag of that name");
  r.RegisterFlags(f, o);
  absl::Status s = ParseArgs(f, {});
  EXPECT_TRUE(absl::IsInternal(s)) << s;
  EXPECT_THAT(std::string(s.message()), HasSubstr("--toy-colour is registered twice"));
}

// The agent's core runs a format it has never heard of: its flags were
// validated, its source built, started and asked for its metrics.
TEST(WalFormatRegistryTest, TheAgentRunsAFormatItsCoreDoesNotName) {
  WalFormatRegistry r;
  r.Add(ToyFormat());
  AgentOptions o = Valid("toy");
  o.wal_dir = testing::FreshTempDir("toy-wal");
  FlagSet f("usage");
  r.RegisterFlags(f, o);
  ASSERT_TRUE(ParseArgs(f, {"--toy-legs=-2"}).ok());
  {
    Agent refused(sys::DefaultSysCalls(), o, DefaultClock(), r);
    EXPECT_EQ(refused.Start().message(), "--toy-legs must not be negative");
  }
  ASSERT_TRUE(ParseArgs(f, {"--toy-legs=2", "--toy-colour=green"}).ok());
  Agent agent(sys::DefaultSysCalls(), o, DefaultClock(), r);
  ASSERT_TRUE(agent.Start().ok());
  EXPECT_EQ(agent.metrics().Value("toy_colour", {{"colour", "green"}}), 1);
  agent.Shutdown();
}

// --- The formats built into walship-agent ---

TEST(KnownWalFormatsTest, AppendIsTheDefaultAndListedFirst) {
  EXPECT_EQ(KnownWalFormats().Names(), "append, postgres, etcd, rocksdb, mysql-binlog, sqlite-wal");
  EXPECT_EQ(AgentOptions().format, KnownWalFormats().formats().front().name);
}

// The flags, with their defaults, as operators' configs and the docs name
// them, in the order --help and --print-config list them.
TEST(KnownWalFormatsTest, FormatsKeepTheirFlagsAndDefaults) {
  AgentOptions o;
  FlagSet f("usage");
  KnownWalFormats().RegisterFlags(f, o);
  const std::string text = f.ConfigText();
  const std::vector<std::string> lines = {
      "segment-pattern = \"\"",     "pg-conninfo = \"\"",
      "pg-data = \"\"",             "pg-slot = \"walship\"",
      "state-dir = \"\"",           "max-retained-bytes = 4294967296",
      "pg-feed = true",             "pg-feed-name = \"walship\"",
      "pg-feed-query-interval-ms = 1000", "pg-query-interval-ms = 2"};
  size_t at = 0;
  for (const std::string& line : lines) {
    const size_t found = text.find("\n" + line + "\n", at);
    ASSERT_NE(found, std::string::npos) << line << " missing or out of order in:\n" << text;
    at = found + 1;
  }
}

TEST(KnownWalFormatsTest, ConfigFileKeysReachTheFormats) {
  AgentOptions o;
  FlagSet f("usage");
  KnownWalFormats().RegisterFlags(f, o);
  ASSERT_TRUE(f.ApplyConfig("pg-conninfo = \"host=/run/postgresql\"\n"
                            "pg-query-interval-ms = 5\npg-feed = false\n"
                            "segment-pattern = 'mysql-bin\\.([0-9]{6})'\n",
                            "agent.toml")
                  .ok());
  const auto& pg = OptionsOf<PostgresOptions>(o, "postgres");
  EXPECT_EQ(pg.conninfo, "host=/run/postgresql");
  EXPECT_EQ(pg.query_interval, absl::Milliseconds(5));
  EXPECT_FALSE(pg.feed);
  EXPECT_EQ(OptionsOf<AppendFormatOptions>(o, "append").segment_pattern,
            "mysql-bin\\.([0-9]{6})");
}

// Parses `args` into agent options with every known format's flags and
// validates them as walship-agent does.
absl::Status ValidateArgs(const std::string& format, std::vector<std::string> args) {
  AgentOptions o = Valid(format);
  FlagSet f("usage");
  KnownWalFormats().RegisterFlags(f, o);
  if (absl::Status s = ParseArgs(f, std::move(args)); !s.ok()) return s;
  return KnownWalFormats().Validate(o);
}

TEST(KnownWalFormatsTest, AFlagOfAnotherFormatIsRefusedByName) {
  struct Case {
    std::string format;
    std::vector<std::string> args;
    std::string message;
  };
  const std::vector<Case> cases = {
      {"append", {"--pg-conninfo=host=/run/postgresql"},
       "--pg-conninfo is only for --format=postgres"},
      {"append", {"--pg-data=/var/lib/postgresql/15/main"},
       "--pg-data is only for --format=postgres"},
      {"append", {"--state-dir=/var/lib/walship-agent"},
       "--state-dir is only for --format=postgres (it records replica positions for the "
       "replication slot)"},
      {"postgres",
       {"--pg-conninfo=h", "--state-dir=/s", "--segment-pattern=a"},
       "--segment-pattern is only for --format=append"},
      {"postgres", {}, "--format=postgres needs --pg-conninfo"},
      {"append", {"--segment-pattern=("},
       "--segment-pattern: segment pattern \"(\" is not a valid regular expression"},
      {"append", {"--pg-feed-name="},
       "--pg-feed-name must be 1 to 63 printable ASCII characters without spaces"},
      {"append", {"--pg-query-interval-ms=0"}, "--pg-query-interval-ms must be 1 to 1000"},
      {"postgres",
       {"--pg-conninfo=h", "--state-dir=/s", "--pg-query-interval-ms=1001"},
       "--pg-query-interval-ms must be 1 to 1000"},
      {"append", {"--pg-feed-query-interval-ms=0"},
       "--pg-feed-query-interval-ms must be at least 1"},
      {"append", {"--binlog-basename=mysql-bin"},
       "--binlog-basename is only for --format=mysql-binlog"},
      {"mysql-binlog", {"--binlog-basename=/var/lib/mysql/mysql-bin"},
       "--binlog-basename=/var/lib/mysql/mysql-bin: a base name, without a directory"},
      {"bogus", {}, "--format=bogus is not supported (supported: append, postgres, etcd, rocksdb, mysql-binlog, sqlite-wal)"},
  };
  for (const Case& c : cases) {
    absl::Status s = ValidateArgs(c.format, c.args);
    EXPECT_TRUE(absl::IsInvalidArgument(s)) << c.message << ": " << s;
    EXPECT_TRUE(absl::StartsWith(s.message(), c.message)) << s;
  }
  EXPECT_TRUE(ValidateArgs("append", {"--segment-pattern=seg-([0-9]+)"}).ok());
  EXPECT_TRUE(ValidateArgs("postgres", {"--pg-conninfo=h", "--state-dir=/s"}).ok());
  // Options a format reads whatever runs keep their defaults silently.
  EXPECT_TRUE(ValidateArgs("append", {"--pg-slot=other", "--pg-feed=false"}).ok());
}

// Moved from slot_keeper_test (it validated AgentOptions' own pg_* fields).
TEST(KnownWalFormatsTest, PostgresWithASlotNeedsAStateDir) {
  AgentOptions o;
  o.wal_dir = "/var/lib/postgresql/15/main/pg_wal";
  o.format = "postgres";
  o.tls.insecure = true;
  auto pg = std::make_shared<PostgresOptions>();
  pg->conninfo = "host=/run/postgresql";
  o.format_options["postgres"] = pg;
  absl::Status s = KnownWalFormats().Validate(o);
  EXPECT_TRUE(absl::IsInvalidArgument(s)) << s;
  EXPECT_TRUE(absl::StartsWith(s.message(), "--format=postgres with a replication slot "
                                            "(--pg-slot) needs --state-dir"))
      << s;
  pg->state_dir = "/var/lib/walship-agent";
  EXPECT_TRUE(KnownWalFormats().Validate(o).ok()) << KnownWalFormats().Validate(o);
  pg->state_dir.clear();
  pg->slot.clear();  // no slot: nothing to record
  EXPECT_TRUE(KnownWalFormats().Validate(o).ok()) << KnownWalFormats().Validate(o);

  AgentOptions append;
  append.wal_dir = "/var/lib/app/wal";
  append.tls.insecure = true;
  auto pg_of_append = std::make_shared<PostgresOptions>();
  pg_of_append->state_dir = "/var/lib/walship-agent";
  append.format_options["postgres"] = pg_of_append;
  EXPECT_TRUE(absl::IsInvalidArgument(KnownWalFormats().Validate(append)));
}

}  // namespace
}  // namespace walship::agent
