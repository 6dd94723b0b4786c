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

absl::Status ValidateEtcdTls(const EtcdTls& tls) {
  if (tls.cert_file.empty() != tls.key_file.empty()) {
    return absl::InvalidArgumentError(
        "--leader-etcd-cert and --leader-etcd-key go together (a client certificate and its "
        "key)");
  }
  if (tls.ca_file.empty() && !tls.cert_file.empty()) {
    return absl::InvalidArgumentError(
        "--leader-etcd-cert needs --leader-etcd-ca (the CA etcd's certificate chains to)");
  }
  return absl::OkStatus();
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
               "The file whose first line is --leader-etcd-user's password (read at start).");
}

absl::StatusOr<std::shared_ptr<grpc::ChannelCredentials>> EtcdCredentials(sys::SysCalls& sys,
                                                                          const EtcdTls& tls) {
  if (tls.ca_file.empty()) return grpc::InsecureChannelCredentials();
  grpc::SslCredentialsOptions opts;
  auto load = [&sys](absl::string_view flag, const std::string& path,
                     std::string* into) -> absl::Status {
    if (path.empty()) return absl::OkStatus();
    absl::StatusOr<std::string> text = sys::ReadFileToString(sys, path);
    if (!text.ok()) {
      return absl::InvalidArgumentError(
          absl::StrCat("--", flag, "=", path, ": ", text.status().message()));
    }
    *into = *std::move(text);
    return absl::OkStatus();
  };
  WALSHIP_RETURN_IF_ERROR(load("leader-etcd-ca", tls.ca_file, &opts.pem_root_certs));
  WALSHIP_RETURN_IF_ERROR(load("leader-etcd-cert", tls.cert_file, &opts.pem_cert_chain));
  WALSHIP_RETURN_IF_ERROR(load("leader-etcd-key", tls.key_file, &opts.pem_private_key));
  return grpc::SslCredentials(opts);
}

absl::StatusOr<std::unique_ptr<LeaderKey>> LeaderKey::Make(sys::SysCalls& sys, Clock& clock,
                                                          const LeaderKeyConfig& config,
                                                          absl::Duration timeout) {
  WALSHIP_ASSIGN_OR_RETURN(std::vector<std::string> endpoints, ParseEtcdEndpoints(config.etcd));
  WALSHIP_ASSIGN_OR_RETURN(std::shared_ptr<grpc::ChannelCredentials> credentials,
                           EtcdCredentials(sys, config.tls));
  std::optional<EtcdUser> user;
  if (!config.user.empty()) {
    absl::StatusOr<std::string> text = sys::ReadFileToString(sys, config.password_file);
    if (!text.ok()) {
      return absl::InvalidArgumentError(absl::StrCat(
          "--leader-etcd-password-file=", config.password_file, ": ", text.status().message()));
    }
    std::string password(text->substr(0, text->find_first_of("\r\n")));
    user = EtcdUser{config.user, std::move(password)};
  }
  return std::make_unique<LeaderKey>(clock, std::move(endpoints), std::move(credentials),
                                     config.key, timeout, std::move(user));
}

LeaderKey::LeaderKey(Clock& clock, std::vector<std::string> endpoints,
                     std::shared_ptr<grpc::ChannelCredentials> credentials, std::string key,
                     absl::Duration timeout, std::optional<EtcdUser> user)
    : clock_(clock), key_(std::move(key)), timeout_(timeout), user_(std::move(user)) {
  // The channels live as long as their owner: an etcd that comes back is
  // asked again within a second, not after gRPC's reconnect backoff grew
  // (up to two minutes by default).
  grpc::ChannelArguments args;
  args.SetInt(GRPC_ARG_INITIAL_RECONNECT_BACKOFF_MS, 100);
  args.SetInt(GRPC_ARG_MIN_RECONNECT_BACKOFF_MS, 100);
  args.SetInt(GRPC_ARG_MAX_RECONNECT_BACKOFF_MS, 1000);
  for (std::string& e : endpoints) {
    std::shared_ptr<grpc::Channel> channel = grpc::CreateCustomChannel(e, credentials, args);
    endpoints_.push_back(Endpoint{std::move(e), etcdserverpb::KV::NewStub(channel),
                                  etcdserverpb::Auth::NewStub(channel)});
  }
  absl::MutexLock lock(&token_mu_);
  tokens_.resize(endpoints_.size());
}

grpc::Status LeaderKey::RangeWithToken(size_t i, const etcdserverpb::RangeRequest& req,
                                       const std::string& token, bool wait_for_ready,
                                       etcdserverpb::RangeResponse* resp) {
  grpc::ClientContext ctx;
  ctx.set_deadline(absl::ToChronoTime(clock_.Now() + timeout_));
  ctx.set_wait_for_ready(wait_for_ready);
  if (!token.empty()) ctx.AddMetadata("token", token);
  return endpoints_[i].kv->Range(&ctx, req, resp);
}

grpc::Status LeaderKey::Authenticate(size_t i, bool wait_for_ready, std::string* token) {
  grpc::ClientContext ctx;
  ctx.set_deadline(absl::ToChronoTime(clock_.Now() + timeout_));
  ctx.set_wait_for_ready(wait_for_ready);
  etcdserverpb::AuthenticateRequest req;
  req.set_name(user_->name);
  req.set_password(user_->password);
  etcdserverpb::AuthenticateResponse resp;
  grpc::Status s = endpoints_[i].auth->Authenticate(&ctx, req, &resp);
  if (!s.ok()) {
    return grpc::Status(s.error_code(),
                        absl::StrCat("authenticating as ", user_->name, ": ", s.error_message()));
  }
  *token = resp.token();
  absl::MutexLock lock(&token_mu_);
  tokens_[i] = *token;
  return s;
}

grpc::Status LeaderKey::Range(size_t i, const etcdserverpb::RangeRequest& req,
                              bool wait_for_ready, etcdserverpb::RangeResponse* resp) {
  if (!user_.has_value()) return RangeWithToken(i, req, "", wait_for_ready, resp);
  std::string token;
  {
    absl::MutexLock lock(&token_mu_);
    token = tokens_[i];
  }
  if (token.empty()) {
    if (grpc::Status a = Authenticate(i, wait_for_ready, &token); !a.ok()) return a;
  }
  grpc::Status s = RangeWithToken(i, req, token, wait_for_ready, resp);
  // etcd no longer takes the token: unused for --auth-token-ttl ("invalid
  // auth token", UNAUTHENTICATED), or older than a change to its users
  // ("revision of auth store is old"): a new one, once. Not when etcd was
  // not reached at all.
  if (!s.ok() && s.error_code() != grpc::StatusCode::UNAVAILABLE &&
      s.error_code() != grpc::StatusCode::DEADLINE_EXCEEDED) {
    if (grpc::Status a = Authenticate(i, wait_for_ready, &token); !a.ok()) return a;
    s = RangeWithToken(i, req, token, wait_for_ready, resp);
  }
  return s;
}

absl::StatusOr<etcdserverpb::RangeResponse> LeaderKey::Query(
    const etcdserverpb::RangeRequest& req) {
  std::vector<std::string> errors;
  for (size_t i = 0; i < endpoints_.size(); ++i) {
    etcdserverpb::RangeResponse resp;
    // Wait (up to the deadline) for a connection rather than fail at once
    // on a channel in backoff: with the poll engine (grpc_polling.h) only a
    // waiting call drives a reconnect, so an etcd that came back would
    // otherwise never be reached again. A call that waited in vain says
    // only "deadline exceeded"; one that does not wait says why the
    // channel cannot connect (refused, a certificate etcd or we reject).
    grpc::Status s = Range(i, req, /*wait_for_ready=*/true, &resp);
    if (s.error_code() == grpc::StatusCode::DEADLINE_EXCEEDED) {
      s = Range(i, req, /*wait_for_ready=*/false, &resp);
    }
    if (s.ok()) return resp;
    errors.push_back(absl::StrCat(endpoints_[i].address, ": ", s.error_message(),
                                  " (gRPC code ", static_cast<int>(s.error_code()), ")"));
  }
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
