// etcd_credentials.h: how walship reaches the HA manager's etcd: TLS files,
// an etcd user, and those files read again when they change on disk.
//
// The flags --leader-etcd-ca/-cert/-key and --leader-etcd-user/
// --leader-etcd-password-file (common/leader_key.h) name files an operator
// replaces to rotate a certificate or a password. EtcdCredentialFiles reads
// them at start and again whenever one of them changed (its inode, size or
// modification time), so that a daemon keeps reading the leader key across
// a rotation without a restart. A change that cannot be read (a file
// missing, half written) keeps the credentials loaded before.
//
// Thread-safety: the functions are pure; an EtcdCredentialFiles is used
// under its owner's lock.
#ifndef WALSHIP_COMMON_ETCD_CREDENTIALS_H_
#define WALSHIP_COMMON_ETCD_CREDENTIALS_H_

#include <sys/stat.h>

#include <memory>
#include <optional>
#include <string>
#include <vector>

#include <grpcpp/grpcpp.h>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "common/sys/syscalls.h"

namespace walship {

// --leader-etcd-ca, --leader-etcd-cert, --leader-etcd-key.
struct EtcdTls {
  // PEM bundle of the CAs etcd's certificate must chain to; empty:
  // plaintext.
  std::string ca_file;
  // This replica's client certificate and key, for an etcd that asks for
  // one (--client-cert-auth); both or neither.
  std::string cert_file;
  std::string key_file;
};

// kInvalidArgument, naming the flags, when a certificate comes without its
// key (or the other way round), or either without the CA.
absl::Status ValidateEtcdTls(const EtcdTls& tls);

// The channel credentials `tls` asks for, its files read now (plaintext when
// tls.ca_file is empty); kInvalidArgument naming the flag of a file that
// cannot be read.
absl::StatusOr<std::shared_ptr<grpc::ChannelCredentials>> EtcdCredentials(sys::SysCalls& sys,
                                                                          const EtcdTls& tls);

// An etcd user: its name and password.
struct EtcdUser {
  std::string name;
  std::string password;
};

// What the files give: the channel credentials and the user, if any.
struct EtcdSecrets {
  std::shared_ptr<grpc::ChannelCredentials> credentials;
  std::optional<EtcdUser> user;
};

// See the top of this file.
class EtcdCredentialFiles {
 public:
  // `user` and `password_file` both empty: no user.
  EtcdCredentialFiles(sys::SysCalls& sys, EtcdTls tls, std::string user,
                      std::string password_file);

  // Reads every file now and notes what they are on disk;
  // kInvalidArgument naming the flag of a file that cannot be read.
  absl::StatusOr<EtcdSecrets> Load();

  // True when a file is no longer what the last Load() read (replaced,
  // rewritten, gone). Costs a stat(2) of each file.
  bool Changed() const;

  // "--leader-etcd-cert=F, --leader-etcd-password-file=G": the files, for
  // logs; empty when there are none.
  std::string Describe() const;

 private:
  struct File {
    const char* flag;
    std::string path;
  };
  // What a file is on disk: inode, size, modification time; all zero when
  // it cannot be stat'ed.
  struct Seen {
    ino_t ino = 0;
    off_t size = 0;
    int64_t mtime_ns = 0;
    bool operator==(const Seen& o) const {
      return ino == o.ino && size == o.size && mtime_ns == o.mtime_ns;
    }
  };
  Seen Look(const std::string& path) const;

  sys::SysCalls& sys_;
  const EtcdTls tls_;
  const std::string user_;
  const std::string password_file_;
  std::vector<File> files_;
  std::vector<Seen> seen_;
};

}  // namespace walship

#endif  // WALSHIP_COMMON_ETCD_CREDENTIALS_H_
