// receive_policy.h: after a DATA frame, who makes it durable, and when.
//
// The replica's receiver thread reads frames off the data socket; a flush
// cycle (fdatasync, walship.progress, acknowledgement) makes them durable.
// Under a commit-by-commit load each wake-up of a second thread costs a
// scheduling delay on saturated CPUs, and each cycle costs a sync and an
// acknowledgement that every process on the path (agent, walsender) handles.
// So, as pg_receivewal does, the receiver reads what is already waiting
// before it syncs, and syncs itself when the socket is empty; only a
// backlog goes to the flusher thread, so that receiving goes on during the
// fdatasync.
//
//   kSyncNow  the socket is empty: run the cycle now (on this thread, unless
//             one is running).
//   kReadOn   the whole next DATA frame is already in the socket and the
//             bytes waiting for a sync stay within `max_deferred`: read it
//             first, one cycle covers both. Reading it cannot block, so the
//             sync it waits for is at most one frame's copy away.
//   kHandOff  anything else (a backlog, a frame still arriving, a frame of
//             another type, an error): wake the flusher and read on.
//
// The peek reads nothing out of the socket; a header that does not decode
// is left for the receiver's own read to reject.
#ifndef WALSHIP_REPLICA_RECEIVE_POLICY_H_
#define WALSHIP_REPLICA_RECEIVE_POLICY_H_

#include <cstddef>
#include <cstdint>

#include "common/sys/syscalls.h"

namespace walship::replica {

enum class AfterFrame { kSyncNow, kReadOn, kHandOff };

// `deferred`: payload bytes received since the receiver last synced or
// handed off, including the frame just read. `max_payload`: the session's
// frame limit, for decoding the peeked header.
AfterFrame DecideAfterFrame(sys::SysCalls& sys, int sock, uint64_t deferred,
                            uint64_t max_deferred, uint32_t max_payload);

// The same inside TLS, where the socket holds encrypted records and the
// next header cannot be peeked: kSyncNow when neither the socket nor the
// TLS layer (`buffered` decrypted bytes) holds anything, else kHandOff.
AfterFrame DecideAfterTlsFrame(sys::SysCalls& sys, int sock, size_t buffered);

}  // namespace walship::replica

#endif  // WALSHIP_REPLICA_RECEIVE_POLICY_H_
