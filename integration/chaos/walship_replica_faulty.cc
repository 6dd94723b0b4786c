// walship-replica-faulty: the real walship-replica (ReplicaMain) over the
// fault layer of integration/chaos/fault_syscalls.h. Test builds only.
//
// With WALSHIP_FAULT_DIR=DIR in its environment, every file-system call on
// --dest goes through the crash simulation, and a thread polls DIR for fault
// commands (see FaultChannel; integration/chaos/faultctl.py is the client).
// --dest must then be given on the command line (--dest=DIR or --dest DIR),
// not only in a --config file. Exit status: walship-replica's, or 86
// (kPowerLossExitCode) after an injected power loss. Without the variable it
// is walship-replica.
#include <cstdio>
#include <cstdlib>
#include <memory>
#include <string>

#include "absl/strings/match.h"
#include "common/sys/syscalls.h"
#include "integration/chaos/fault_syscalls.h"
#include "replica/replica_main.h"

namespace {

std::string DestFlag(int argc, char** argv) {
  std::string dest;
  for (int i = 1; i < argc; ++i) {
    std::string a = argv[i];
    for (const char* prefix : {"--dest=", "-dest="}) {
      if (absl::StartsWith(a, prefix)) dest = a.substr(std::string(prefix).size());
    }
    if ((a == "--dest" || a == "-dest") && i + 1 < argc) dest = argv[i + 1];
  }
  while (dest.size() > 1 && dest.back() == '/') dest.pop_back();
  return dest;
}

}  // namespace

int main(int argc, char** argv) {
  const char* dir = std::getenv("WALSHIP_FAULT_DIR");
  if (dir == nullptr || *dir == '\0') {
    return walship::replica::ReplicaMain(argc, argv, walship::sys::DefaultSysCalls());
  }
  const std::string dest = DestFlag(argc, argv);
  if (dest.empty()) {
    std::fprintf(stderr, "walship-replica-faulty: WALSHIP_FAULT_DIR needs --dest on the "
                         "command line\n");
    return 1;
  }
  namespace chaos = walship::chaos;
  chaos::EventLog events(dir);
  chaos::FaultSysCalls sys(dest, [&events](const std::string& id, chaos::FaultKind kind,
                                           const std::string& path) {
    events.Append(id + " fired " + chaos::FaultKindName(kind) + " " + path);
  });
  chaos::FaultChannel channel(dir, sys, events);
  channel.Start();
  return walship::replica::ReplicaMain(argc, argv, sys);
}
