#include "common/etcd_credentials.h"

#include <utility>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "common/status_macros.h"
#include "common/sys/file_util.h"

namespace walship {

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

EtcdCredentialFiles::EtcdCredentialFiles(sys::SysCalls& sys, EtcdTls tls, std::string user,
                                         std::string password_file)
    : sys_(sys), tls_(std::move(tls)), user_(std::move(user)),
      password_file_(std::move(password_file)) {
  for (File f : {File{"leader-etcd-ca", tls_.ca_file}, File{"leader-etcd-cert", tls_.cert_file},
                 File{"leader-etcd-key", tls_.key_file},
                 File{"leader-etcd-password-file", password_file_}}) {
    if (!f.path.empty()) files_.push_back(std::move(f));
  }
  seen_.resize(files_.size());
}

EtcdCredentialFiles::Seen EtcdCredentialFiles::Look(const std::string& path) const {
  struct stat st {};
  if (!sys_.Stat(path.c_str(), &st).ok()) return Seen{};
  return Seen{st.st_ino, st.st_size,
              static_cast<int64_t>(st.st_mtim.tv_sec) * 1000000000 + st.st_mtim.tv_nsec};
}

absl::StatusOr<EtcdSecrets> EtcdCredentialFiles::Load() {
  // What the files are before they are read: a file replaced while it is
  // read shows as changed at the next look, and is read again.
  std::vector<Seen> seen;
  for (const File& f : files_) seen.push_back(Look(f.path));
  EtcdSecrets out;
  WALSHIP_ASSIGN_OR_RETURN(out.credentials, EtcdCredentials(sys_, tls_));
  if (!user_.empty()) {
    absl::StatusOr<std::string> text = sys::ReadFileToString(sys_, password_file_);
    if (!text.ok()) {
      return absl::InvalidArgumentError(absl::StrCat(
          "--leader-etcd-password-file=", password_file_, ": ", text.status().message()));
    }
    out.user = EtcdUser{user_, text->substr(0, text->find_first_of("\r\n"))};
  }
  seen_ = std::move(seen);
  return out;
}

bool EtcdCredentialFiles::Changed() const {
  for (size_t i = 0; i < files_.size(); ++i) {
    if (!(Look(files_[i].path) == seen_[i])) return true;
  }
  return false;
}

std::string EtcdCredentialFiles::Describe() const {
  return absl::StrJoin(files_, ", ", [](std::string* s, const File& f) {
    absl::StrAppend(s, "--", f.flag, "=", f.path);
  });
}

}  // namespace walship
