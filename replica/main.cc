// walship-replica: keeps a durable, byte-exact copy of an agent's WAL stream.
#include "common/sys/syscalls.h"
#include "replica/replica_main.h"

int main(int argc, char** argv) {
  return walship::replica::ReplicaMain(argc, argv, walship::sys::DefaultSysCalls());
}
