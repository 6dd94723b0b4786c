#include "common/leader_key.h"

#include "absl/strings/ascii.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "absl/strings/str_split.h"
#include "absl/strings/strip.h"
#include "common/net.h"
#include "common/reason.h"
#include "common/status_macros.h"
#include "common/sys/file_util.h"
#include "spdlog/spdlog.h"

namespace walship {

std::string DescribeLeaderView(const LeaderView& view, absl::string_view key) {
  switch (view.state) {
    case LeaderView::State::kNamed:
      return absl::StrCat("etcd names ", view.member, " as the leader (key ", key, ")");
    case LeaderView::State::kAbsent:
      return absl::StrCat("etcd has no leader (key ", key, " absent)");
    case LeaderView::State::kUnreadable:
      break;
  }
  return absl::StrCat("cannot read the leader key ", key, " from etcd: ", view.error);
}

absl::string_view RefusalWaitsFor(const LeaderView& view) {
  switch (view.state) {
    case LeaderView::State::kNamed:
      return "";
    case LeaderView::State::kAbsent:
      return " until etcd names one";
    case LeaderView::State::kUnreadable:
      break;
  }
  return " until etcd answers";
}

absl::Status CheckLeader(const LeaderView& view, absl::string_view agent,
                         absl::string_view member, absl::string_view key) {
  if (view.state == LeaderView::State::kNamed && view.member == member) {
    return absl::OkStatus();
  }
  return WithReason(absl::UnavailableError(absl::StrCat(
                        "agent ", agent, " (member ", member, "): ",
                        DescribeLeaderView(view, key), ": not following it",
                        RefusalWaitsFor(view))),
                    Reason::kNotLeader);
}

bool LeaderMovedAway(const LeaderView& view, absl::string_view member) {
  return view.state == LeaderView::State::kNamed && view.member != member;
}

absl::StatusOr<std::vector<std::string>> ParseEtcdEndpoints(absl::string_view text) {
  std::vector<std::string> out;
  for (absl::string_view part : absl::StrSplit(text, ',')) {
    const std::string entry(absl::StripAsciiWhitespace(part));
    if (entry.find("://") != std::string::npos) {
      return absl::InvalidArgumentError(absl::StrCat(
          "etcd endpoint \"", entry,
          "\": give HOST:PORT, without a scheme (TLS: --leader-etcd-ca)"));
    }
    if (auto hp = ParseHostPort(entry); !hp.ok()) {
      return absl::InvalidArgumentError(
          absl::StrCat("etcd endpoint \"", entry, "\": ", hp.status().message()));
    }
    out.push_back(entry);
  }
  return out;
}

absl::Status LeaderKeyConfig::Validate() const {
  if (etcd.empty()) {
    if (key.empty() && tls.ca_file.empty() && tls.cert_file.empty() && tls.key_file.empty() &&
        user.empty() && password_file.empty()) {
      return absl::OkStatus();
    }
    return absl::InvalidArgumentError("--leader-key and --leader-etcd-* need --leader-etcd");
  }
  WALSHIP_RETURN_IF_ERROR(ValidateEtcdTls(tls));
  if (user.empty() != password_file.empty()) {
    return absl::InvalidArgumentError(
        "--leader-etcd-user and --leader-etcd-password-file go together (an etcd user and the "
        "file holding its password)");
  }
  if (auto e = ParseEtcdEndpoints(etcd); !e.ok()) {
    return absl::InvalidArgumentError(absl::StrCat("--leader-etcd: ", e.status().message()));
  }
  if (key.empty()) {
    return absl::InvalidArgumentError(
        "--leader-etcd needs --leader-key, the key naming the leader (Patroni: "
        "/service/SCOPE/leader)");
  }
  return absl::OkStatus();
}

std::string LeaderKeyConfig::Describe() const {
  return absl::StrCat("key ", key, " at ", etcd, " (", tls.ca_file.empty() ? "plaintext" : "TLS",
                      ")", user.empty() ? "" : absl::StrCat(", as etcd user ", user));
}

void LeaderKeyConfig::LogStart(absl::string_view what) const {
  spdlog::info("{}: {}", std::string(what), Describe());
  if (PasswordInPlaintext()) {
    spdlog::warn("--leader-etcd-user without --leader-etcd-ca: the password goes to etcd in "
                 "plaintext");
  }
}

void RegisterLeaderKeyFlags(FlagSet& flags, LeaderKeyConfig* config, absl::string_view gates) {
  flags.String("leader-etcd", &config->etcd,
               absl::StrCat("HOST:PORT[,HOST:PORT...] of the HA manager's etcd (v3): ", gates,
                            " Empty: not asked."));
  flags.String("leader-key", &config->key,
               "With --leader-etcd: the key whose value is the leader's member name (Patroni: "
               "/service/SCOPE/leader, or NAMESPACE/SCOPE/leader).");
  flags.String("leader-etcd-ca", &config->tls.ca_file,
               "PEM CA bundle etcd's certificate must chain to: --leader-etcd over TLS. Empty: "
               "plaintext.");
  flags.String("leader-etcd-cert", &config->tls.cert_file,
               "With --leader-etcd-ca: a client certificate, for an etcd that asks for one "
               "(--client-cert-auth); with --leader-etcd-key.");
  flags.String("leader-etcd-key", &config->tls.key_file,
               "The private key of --leader-etcd-cert.");
  flags.String("leader-etcd-user", &config->user,
               "For an etcd with authentication on: the user the key is read as (it needs read "
               "access to the key); with --leader-etcd-password-file.");
  flags.String("leader-etcd-password-file", &config->password_file,
               "The file whose first line is --leader-etcd-user's password (read at start, and "
               "again when it changes on disk, as are the TLS files).");
}

absl::StatusOr<std::unique_ptr<LeaderKey>> LeaderKey::Make(sys::SysCalls& sys, Clock& clock,
                                                          const LeaderKeyConfig& config,
                                                          absl::Duration timeout) {
  return MakeFromFiles(sys, clock, config, timeout, /*await=*/false);
}

absl::StatusOr<std::unique_ptr<LeaderKey>> LeaderKey::MakeAwaitingFiles(
    sys::SysCalls& sys, Clock& clock, const LeaderKeyConfig& config, absl::Duration timeout) {
  return MakeFromFiles(sys, clock, config, timeout, /*await=*/true);
}

absl::StatusOr<std::unique_ptr<LeaderKey>> LeaderKey::MakeFromFiles(
    sys::SysCalls& sys, Clock& clock, const LeaderKeyConfig& config, absl::Duration timeout,
    bool await) {
  WALSHIP_ASSIGN_OR_RETURN(std::vector<std::string> endpoints, ParseEtcdEndpoints(config.etcd));
  auto files = std::make_unique<EtcdCredentialFiles>(sys, config.tls, config.user,
                                                     config.password_file);
  absl::StatusOr<EtcdSecrets> secrets = files->Load();
  if (!secrets.ok() && !await) return secrets.status();
  std::unique_ptr<LeaderKey> key;
  if (secrets.ok()) {
    key = std::make_unique<LeaderKey>(clock, std::move(endpoints),
                                      std::move(secrets->credentials), config.key, timeout,
                                      std::move(secrets->user));
  } else {
    spdlog::error("leader key: {}; no read of etcd until the file can be read",
                  std::string(secrets.status().message()));
    key = std::make_unique<LeaderKey>(clock, std::vector<std::string>{}, nullptr, config.key,
                                      timeout);
  }
  absl::MutexLock lock(&key->conn_mu_);
  if (!secrets.ok()) {
    key->addresses_ = std::move(endpoints);  // for the connection made once they can be read
    key->conn_->unusable = absl::UnavailableError(absl::StrCat(
        "the etcd credentials cannot be read: ", secrets.status().message()));
    key->reload_failed_ = true;  // warned above
  }
  key->files_ = std::move(files);
  return key;
}

LeaderKey::LeaderKey(Clock& clock, std::vector<std::string> endpoints,
                     std::shared_ptr<grpc::ChannelCredentials> credentials, std::string key,
                     absl::Duration timeout, std::optional<EtcdUser> user)
    : clock_(clock), key_(std::move(key)), timeout_(timeout), addresses_(std::move(endpoints)) {
  absl::MutexLock lock(&conn_mu_);
  conn_ = Connect(addresses_, credentials, std::move(user));
}

std::shared_ptr<LeaderKey::Connection> LeaderKey::Connect(
    const std::vector<std::string>& addresses,
    const std::shared_ptr<grpc::ChannelCredentials>& credentials, std::optional<EtcdUser> user) {
  // The channels live as long as their connection: an etcd that comes back
  // is asked again within a second, not after gRPC's reconnect backoff grew
  // (up to two minutes by default).
  grpc::ChannelArguments args;
  args.SetInt(GRPC_ARG_INITIAL_RECONNECT_BACKOFF_MS, 100);
  args.SetInt(GRPC_ARG_MIN_RECONNECT_BACKOFF_MS, 100);
  args.SetInt(GRPC_ARG_MAX_RECONNECT_BACKOFF_MS, 1000);
  auto c = std::make_shared<Connection>();
  for (const std::string& e : addresses) {
    std::shared_ptr<grpc::Channel> channel = grpc::CreateCustomChannel(e, credentials, args);
    c->endpoints.push_back(
        Endpoint{e, etcdserverpb::KV::NewStub(channel), etcdserverpb::Auth::NewStub(channel)});
  }
  c->user = std::move(user);
  absl::MutexLock lock(&c->mu);
  c->tokens.resize(c->endpoints.size());
  return c;
}

std::shared_ptr<LeaderKey::Connection> LeaderKey::Current() {
  absl::MutexLock lock(&conn_mu_);
  if (files_ == nullptr || !files_->Changed()) return conn_;
  absl::StatusOr<EtcdSecrets> secrets = files_->Load();
  if (secrets.ok()) {
    conn_ = Connect(addresses_, secrets->credentials, std::move(secrets->user));
    spdlog::info("leader key: {} changed on disk: read again", files_->Describe());
    reload_failed_ = false;
  } else if (!reload_failed_) {
    spdlog::warn("leader key: {} changed on disk but cannot be read: {}; reading with the ones "
                 "read before",
                 files_->Describe(), std::string(secrets.status().message()));
    reload_failed_ = true;
  }
  return conn_;
}

grpc::Status LeaderKey::RangeWithToken(Connection& c, size_t i,
                                       const etcdserverpb::RangeRequest& req,
                                       const std::string& token, bool wait_for_ready,
                                       etcdserverpb::RangeResponse* resp) {
  grpc::ClientContext ctx;
  ctx.set_deadline(absl::ToChronoTime(clock_.Now() + timeout_));
  ctx.set_wait_for_ready(wait_for_ready);
  if (!token.empty()) ctx.AddMetadata("token", token);
  return c.endpoints[i].kv->Range(&ctx, req, resp);
}

grpc::Status LeaderKey::Authenticate(Connection& c, size_t i, bool wait_for_ready,
                                     std::string* token) {
  grpc::ClientContext ctx;
  ctx.set_deadline(absl::ToChronoTime(clock_.Now() + timeout_));
  ctx.set_wait_for_ready(wait_for_ready);
  etcdserverpb::AuthenticateRequest req;
  req.set_name(c.user->name);
  req.set_password(c.user->password);
  etcdserverpb::AuthenticateResponse resp;
  grpc::Status s = c.endpoints[i].auth->Authenticate(&ctx, req, &resp);
  if (!s.ok()) {
    return grpc::Status(s.error_code(),
                        absl::StrCat("authenticating as ", c.user->name, ": ", s.error_message()));
  }
  *token = resp.token();
  absl::MutexLock lock(&c.mu);
  c.tokens[i] = *token;
  return s;
}

grpc::Status LeaderKey::Range(Connection& c, size_t i, const etcdserverpb::RangeRequest& req,
                              bool wait_for_ready, etcdserverpb::RangeResponse* resp) {
  if (!c.user.has_value()) return RangeWithToken(c, i, req, "", wait_for_ready, resp);
  std::string token;
  {
    absl::MutexLock lock(&c.mu);
    token = c.tokens[i];
  }
  if (token.empty()) {
    if (grpc::Status a = Authenticate(c, i, wait_for_ready, &token); !a.ok()) return a;
  }
  grpc::Status s = RangeWithToken(c, i, req, token, wait_for_ready, resp);
  // etcd no longer takes the token: unused for --auth-token-ttl ("invalid
  // auth token", UNAUTHENTICATED), or older than a change to its users
  // ("revision of auth store is old"): a new one, once. Not when etcd was
  // not reached at all.
  if (!s.ok() && s.error_code() != grpc::StatusCode::UNAVAILABLE &&
      s.error_code() != grpc::StatusCode::DEADLINE_EXCEEDED) {
    if (grpc::Status a = Authenticate(c, i, wait_for_ready, &token); !a.ok()) return a;
    s = RangeWithToken(c, i, req, token, wait_for_ready, resp);
  }
  return s;
}

absl::StatusOr<etcdserverpb::RangeResponse> LeaderKey::Query(
    const etcdserverpb::RangeRequest& req) {
  std::shared_ptr<Connection> c = Current();
  std::vector<std::string> errors;
  for (size_t i = 0; i < c->endpoints.size(); ++i) {
    etcdserverpb::RangeResponse resp;
    // Wait (up to the deadline) for a connection rather than fail at once
    // on a channel in backoff: with the poll engine (grpc_polling.h) only a
    // waiting call drives a reconnect, so an etcd that came back would
    // otherwise never be reached again. A call that waited in vain says
    // only "deadline exceeded"; one that does not wait says why the
    // channel cannot connect (refused, a certificate etcd or we reject).
    grpc::Status s = Range(*c, i, req, /*wait_for_ready=*/true, &resp);
    if (s.error_code() == grpc::StatusCode::DEADLINE_EXCEEDED) {
      s = Range(*c, i, req, /*wait_for_ready=*/false, &resp);
    }
    if (s.ok()) return resp;
    errors.push_back(absl::StrCat(c->endpoints[i].address, ": ", s.error_message(),
                                  " (gRPC code ", static_cast<int>(s.error_code()), ")"));
  }
  if (!c->unusable.ok()) return c->unusable;
  return absl::UnavailableError(errors.empty() ? "no endpoint" : absl::StrJoin(errors, "; "));
}

LeaderView LeaderKey::Ask() {
  etcdserverpb::RangeRequest req;
  req.set_key(key_);
  absl::StatusOr<etcdserverpb::RangeResponse> resp = Query(req);
  LeaderView v;
  if (!resp.ok()) {
    v.error = std::string(resp.status().message());
  } else if (resp->kvs_size() == 0) {
    v.state = LeaderView::State::kAbsent;
  } else {
    v.state = LeaderView::State::kNamed;
    v.member = resp->kvs(0).value();
  }
  return v;
}

absl::StatusOr<std::vector<LeaderKey::KeyValue>> LeaderKey::ReadPrefix(const std::string& prefix) {
  etcdserverpb::RangeRequest req;
  req.set_key(prefix);
  // etcd's prefix range: up to the prefix with its last byte incremented
  // (a last byte of 0xff is dropped first; "\0" alone means every key).
  std::string end = prefix;
  while (!end.empty() && static_cast<unsigned char>(end.back()) == 0xff) end.pop_back();
  if (end.empty()) {
    end.assign(1, '\0');
  } else {
    end.back() = static_cast<char>(static_cast<unsigned char>(end.back()) + 1);
  }
  req.set_range_end(end);
  WALSHIP_ASSIGN_OR_RETURN(etcdserverpb::RangeResponse resp, Query(req));
  std::vector<KeyValue> out;
  for (const etcdserverpb::KeyValue& kv : resp.kvs()) out.push_back({kv.key(), kv.value()});
  return out;
}

std::string PatroniMembersPrefix(absl::string_view leader_key) {
  const size_t slash = leader_key.rfind('/');
  const absl::string_view dir =
      slash == absl::string_view::npos ? absl::string_view() : leader_key.substr(0, slash + 1);
  return absl::StrCat(dir, "members/");
}

std::string MemberOfKey(absl::string_view key, absl::string_view prefix) {
  if (!absl::ConsumePrefix(&key, prefix) || key.find('/') != absl::string_view::npos) return "";
  return std::string(key);
}

LeaderKey::Reading LeaderKey::Read() {
  Reading r;
  r.view = Ask();
  absl::MutexLock lock(&mu_);
  r.changed = !last_.has_value() || last_->state != r.view.state ||
              last_->member != r.view.member;
  last_ = r.view;
  return r;
}

}  // namespace walship
