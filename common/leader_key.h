// leader_key.h: the cluster's leader as the HA manager's etcd names it.
//
// With several agents, the agents themselves say which node is a primary
// (agent_list.h). What they cannot say is which primary the cluster chose:
// a stale old primary started again answers as a primary, and a replica
// still before the fork point that reaches only that one's agent would take
// its tail. An HA manager that keeps its leader in etcd knows: Patroni's
// etcd3 DCS holds the leader's member name under NAMESPACE/SCOPE/leader
// (/service/SCOPE/leader by default) while the leader holds its lease.
//
// With --leader-etcd and --leader-key, and a member name on every --agent
// entry (NAME=HOST:PORT), the replica asks that key:
//   * before each handshake: it starts a session only with the agent of the
//     member the key names; an agent of another member, no key, or no
//     answer from etcd is a refusal of its own (kUnavailable,
//     Reason::kNotLeader; the rotation moves on, and backs off once every
//     agent was tried). Patroni itself demotes a leader that cannot reach
//     etcd, so while etcd is unreadable there is no leader to follow.
//   * during a session (the leader watch, every leader_check_interval): the
//     session ends as soon as the key names another member. A missing key
//     or an unreadable etcd does not end it: its agent's node is still a
//     primary whose WAL is durable there, and leaving would only hold
//     synchronous commits back.
//
// The read is etcd's KV.Range of the one key (proto/etcd_kv.proto), a
// linearizable read over gRPC, plaintext or TLS (EtcdTls: the CA that signs
// etcd's certificate, and a client certificate where etcd asks for one),
// asking each endpoint in turn until one answers within the timeout. With
// etcd's authentication on, as a user (EtcdUser): a token from
// Auth.Authenticate rides on each read, and is asked for again when etcd no
// longer takes it; without a user such an etcd answers with an error, and
// the key is unreadable.
//
// The replica may also take its agents from the HA manager's member keys
// (ReadPrefix; Patroni keeps each member's state as JSON under
// NAMESPACE/SCOPE/members/NAME, beside the leader key, with the tags of its
// configuration: replica/agent_list.h AgentsFromMembers).
//
// Thread-safety: LeaderKey is safe to use from several threads (the run
// loop and the leader watch); the functions are pure.
#ifndef WALSHIP_COMMON_LEADER_KEY_H_
#define WALSHIP_COMMON_LEADER_KEY_H_

#include <memory>
#include <optional>
#include <string>
#include <utility>
#include <vector>

#include <grpcpp/grpcpp.h>

#include "absl/base/thread_annotations.h"
#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/strings/string_view.h"
#include "absl/synchronization/mutex.h"
#include "absl/time/time.h"
#include "common/clock.h"
#include "common/etcd_credentials.h"
#include "common/flags.h"
#include "common/sys/syscalls.h"
#include "proto/etcd_kv.grpc.pb.h"

namespace walship {

// What one read of the leader key found.
struct LeaderView {
  enum class State { kNamed, kAbsent, kUnreadable };
  State state = State::kUnreadable;
  // kNamed: the key's value, the leader's member name.
  std::string member;
  // kUnreadable: why, for each endpoint asked.
  std::string error;
};

// One line for logs: "etcd names db2 as the leader (key K)", "etcd has no
// leader (key K absent)", or "cannot read the leader key K from etcd: ...".
std::string DescribeLeaderView(const LeaderView& view, absl::string_view key);

// What a refusal for `view` waits for, to end its message: empty when the
// view names a member, " until etcd names one" when the key is absent, " until
// etcd answers" when it is unreadable.
absl::string_view RefusalWaitsFor(const LeaderView& view);

// Before a handshake with `agent`, the agent of `member`: OK when `view`
// names `member`; otherwise kUnavailable with Reason::kNotLeader, naming the
// agent, its member and what the view says.
absl::Status CheckLeader(const LeaderView& view, absl::string_view agent,
                         absl::string_view member, absl::string_view key);

// During a session with the agent of `member`: true only when `view` names
// another member (see the top of this file).
bool LeaderMovedAway(const LeaderView& view, absl::string_view member);

// The flags that ask for the leader key (--leader-etcd, --leader-key,
// --leader-etcd-ca/-cert/-key and --leader-etcd-user/-password-file), as
// walship-agent and walship-replica take them.
struct LeaderKeyConfig {
  // HOST:PORT[,...] of the HA manager's etcd; empty: the key is not asked.
  std::string etcd;
  // The key whose value is the leader's member name (Patroni's etcd3 DCS:
  // /service/SCOPE/leader).
  std::string key;
  EtcdTls tls;
  // --leader-etcd-user, --leader-etcd-password-file: for an etcd with
  // authentication on, the user (with read access to the key) and a file
  // whose first line is its password; both or neither.
  std::string user;
  std::string password_file;

  bool enabled() const { return !etcd.empty(); }
  // For the start-up line: "key K at E (TLS)", ", as etcd user U" when one
  // is given.
  std::string Describe() const;
  // A user's password would cross the network in plaintext (no
  // --leader-etcd-ca): worth a warning.
  bool PasswordInPlaintext() const { return !user.empty() && tls.ca_file.empty(); }
  // The start-up line, "`what`: Describe()", and the warning when
  // PasswordInPlaintext().
  void LogStart(absl::string_view what) const;
  // OK when none of the flags is given, or when etcd's endpoints parse, the
  // key is given and the TLS and user flags go together; kInvalidArgument
  // naming the flag otherwise.
  absl::Status Validate() const;
};

// The seven flags, into `config`. `gates` ends the --leader-etcd help: what
// the key decides for the program ("serve replicas only while ...").
void RegisterLeaderKeyFlags(FlagSet& flags, LeaderKeyConfig* config, absl::string_view gates);

// The endpoints of a --leader-etcd value: HOST:PORT entries separated by
// commas. kInvalidArgument for an empty list or an entry that is not
// HOST:PORT.
absl::StatusOr<std::vector<std::string>> ParseEtcdEndpoints(absl::string_view text);

// Where Patroni keeps its members beside `leader_key`: the key's directory
// and "members/" (/service/main/leader -> /service/main/members/).
std::string PatroniMembersPrefix(absl::string_view leader_key);

// The member a key under `prefix` (PatroniMembersPrefix) is for: its name
// after the prefix; empty for a key outside the prefix or deeper under it.
std::string MemberOfKey(absl::string_view key, absl::string_view prefix);

class LeaderKey {
 public:
  // For a validated `config` (LeaderKeyConfig::Validate): its TLS files and
  // password file read now (kInvalidArgument naming the flag of one that
  // cannot be), and again before a read once one changed on disk
  // (etcd_credentials.h); `timeout` for each endpoint's answer.
  static absl::StatusOr<std::unique_ptr<LeaderKey>> Make(sys::SysCalls& sys, Clock& clock,
                                                         const LeaderKeyConfig& config,
                                                         absl::Duration timeout);

  // As Make(), but files that cannot be read now do not stop it: until they
  // can, every read fails naming the file, and they are tried again before
  // each read. For a daemon whose start already checked them, so that one
  // replaced at that moment costs a few failed reads, not a restart.
  static absl::StatusOr<std::unique_ptr<LeaderKey>> MakeAwaitingFiles(
      sys::SysCalls& sys, Clock& clock, const LeaderKeyConfig& config, absl::Duration timeout);

  // `endpoints` as ParseEtcdEndpoints returns them, reached with
  // `credentials` (EtcdCredentials); `timeout` bounds the wait for each
  // endpoint's answer.
  // With `user` (an etcd with authentication on), each endpoint is asked
  // for a token for it before its first read, and again whenever etcd no
  // longer takes the token (it restarted, or the token expired).
  LeaderKey(Clock& clock, std::vector<std::string> endpoints,
            std::shared_ptr<grpc::ChannelCredentials> credentials, std::string key,
            absl::Duration timeout, std::optional<EtcdUser> user = std::nullopt);

  const std::string& key() const { return key_; }

  struct Reading {
    LeaderView view;
    // The view's state or member differs from the previous Read()'s (or
    // this is the first): worth a log line; repeats are not, whatever
    // their error text.
    bool changed = false;
  };
  // Asks the endpoints in order until one answers.
  Reading Read();

  // One key and its value, as etcd holds them.
  struct KeyValue {
    std::string key;
    std::string value;
  };
  // Every key that starts with `prefix`, in key order, from the first
  // endpoint that answers (a linearizable read, like Read()); kUnavailable
  // naming each endpoint's error when none does.
  absl::StatusOr<std::vector<KeyValue>> ReadPrefix(const std::string& prefix);

 private:
  struct Endpoint {
    std::string address;
    std::unique_ptr<etcdserverpb::KV::Stub> kv;
    std::unique_ptr<etcdserverpb::Auth::Stub> auth;
  };
  // One set of channels to the endpoints, with the user they read as and
  // its tokens; replaced whole when the credential files change.
  struct Connection {
    std::vector<Endpoint> endpoints;
    std::optional<EtcdUser> user;
    // Not OK when there are no endpoints because the credential files could
    // never be read: what every read answers.
    absl::Status unusable;
    absl::Mutex mu;
    // By endpoint; empty: none yet.
    std::vector<std::string> tokens ABSL_GUARDED_BY(mu);
  };
  static std::shared_ptr<Connection> Connect(const std::vector<std::string>& addresses,
                                             const std::shared_ptr<grpc::ChannelCredentials>& c,
                                             std::optional<EtcdUser> user);
  // The connection to read with: a new one first when files_ changed on
  // disk (and can be read; otherwise the one before, with a warning).
  std::shared_ptr<Connection> Current();
  // Make() and MakeAwaitingFiles(): `files` read now; `await` keeps a key
  // whose files cannot be (for now).
  static absl::StatusOr<std::unique_ptr<LeaderKey>> MakeFromFiles(
      sys::SysCalls& sys, Clock& clock, const LeaderKeyConfig& config, absl::Duration timeout,
      bool await);

  LeaderView Ask();
  // `req` at the endpoints in order until one answers; kUnavailable with
  // every endpoint's error otherwise.
  absl::StatusOr<etcdserverpb::RangeResponse> Query(const etcdserverpb::RangeRequest& req);
  // One KV.Range at endpoint `i` of `c` within timeout_, with its user's
  // token (authenticating first when it has none, and once more when etcd
  // refuses the one it has).
  grpc::Status Range(Connection& c, size_t i, const etcdserverpb::RangeRequest& req,
                     bool wait_for_ready, etcdserverpb::RangeResponse* resp);
  grpc::Status RangeWithToken(Connection& c, size_t i, const etcdserverpb::RangeRequest& req,
                              const std::string& token, bool wait_for_ready,
                              etcdserverpb::RangeResponse* resp);
  // A new token for c.user from endpoint `i` into *token (and c.tokens).
  grpc::Status Authenticate(Connection& c, size_t i, bool wait_for_ready, std::string* token);

  Clock& clock_;
  const std::string key_;
  const absl::Duration timeout_;
  absl::Mutex mu_;
  std::optional<LeaderView> last_ ABSL_GUARDED_BY(mu_);
  absl::Mutex conn_mu_;
  // The endpoints (none while files_ could never be read).
  std::vector<std::string> addresses_ ABSL_GUARDED_BY(conn_mu_);
  std::shared_ptr<Connection> conn_ ABSL_GUARDED_BY(conn_mu_);
  // Make()'s: the TLS and password files, read again when they change;
  // null for a LeaderKey built from credentials.
  std::unique_ptr<EtcdCredentialFiles> files_ ABSL_GUARDED_BY(conn_mu_);
  // The last change of files_ could not be read (warned once).
  bool reload_failed_ ABSL_GUARDED_BY(conn_mu_) = false;
};

}  // namespace walship

#endif  // WALSHIP_COMMON_LEADER_KEY_H_
