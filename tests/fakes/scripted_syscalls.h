// Copyright walship authors.
//
// -----------------------------------------------------------------------------
// File: scripted_syscalls.h
// -----------------------------------------------------------------------------
//
// `ScriptedSysCalls` is a `RealSysCalls` whose data-moving calls (SendFile,
// Splice, Read, Write, Send, Pread, Pwrite) and Poll can be told what the
// kernel answers, one result at a time, so that loop bookkeeping can be
// checked against short transfers, EINTR, EAGAIN, EOF and errors:
//
//   ScriptedSysCalls sys;
//   sys.ScriptSendFile({{1, 0}, {10, 0}, {-1, EAGAIN}, {20, 0}, {0, 0}});
//   sys.ScriptPoll({{1, 0}});
//   EXPECT_EQ(SendFileFully(sys, kSock, kFile, 100, 40, {}).code(),
//             absl::StatusCode::kDataLoss);
//   // sys.calls(Op::kSendFile)[i].offset == 100, 101, 111, 111, 131
//   // sys.Output(kSock) == ScriptedSysCalls::Pattern(100, 31)
//
// Scripts: each Op has a FIFO of results. A call pops the next result of its
// Op; when that FIFO is empty the call falls through to the real syscall.
// Every call, scripted or not, is recorded in `calls()`.
//
// A scripted result with rc >= 0 behaves as if the kernel had done exactly
// that much, so callers' offsets and buffers can be checked:
//   * Offsets passed by pointer (sendfile's *offset, splice's *off_in and
//     *off_out) are advanced by rc.
//   * Sources produce deterministic bytes from `Pattern()`: a positioned read
//     (Pread, SendFile or Splice with an offset) yields Pattern(offset, rc),
//     as if every file held PatternByte(i) at byte i; a stream read (Read,
//     Splice from a non-pipe fd without offset) yields the next rc bytes of
//     Pattern() for that fd, starting at 0.
//   * Sinks never touch the real fd: Write, Send and offset-less SendFile /
//     Splice output append to `Output(fd)`; Pwrite and Splice with *off_out
//     write into `Output(fd)` at that offset (zero-filling any gap).
//   * Pipes created through this object's Pipe2 are modelled in memory for
//     scripted splices: a scripted splice into the write end appends to the
//     model, one out of the read end takes from it. Taking more than the model
//     holds, or putting in more than the pipe's real capacity (F_GETPIPE_SZ),
//     is recorded in `violations()`. Do not mix scripted and real splices on
//     the same pipe within one transfer: the model and the kernel pipe would
//     disagree.
//   * Poll with rc > 0 sets `revents = events` on the first rc entries; rc 0
//     (timeout) clears every revents.
//   * rc larger than the requested length is returned as scripted (to test
//     the caller's guard) but recorded as a violation and its data effect is
//     clamped to the requested length.
// A scripted result with rc < 0 has no effect besides being returned.
//
// Thread-safety: all methods are thread-safe; real fall-through calls are
// made without holding the internal lock, so a blocking real call does not
// block other threads' scripted calls. Scripts are global to the object,
// not per fd or per thread.

#ifndef WALSHIP_TESTS_FAKES_SCRIPTED_SYSCALLS_H_
#define WALSHIP_TESTS_FAKES_SCRIPTED_SYSCALLS_H_

#include <cstddef>
#include <cstdint>
#include <deque>
#include <map>
#include <optional>
#include <string>
#include <vector>

#include "absl/base/thread_annotations.h"
#include "absl/strings/string_view.h"
#include "absl/synchronization/mutex.h"
#include "common/sys/syscalls.h"

namespace walship {
namespace sys {

class ScriptedSysCalls : public RealSysCalls {
 public:
  enum class Op {
    kSendFile,
    kSplice,
    kRead,
    kWrite,
    kSend,
    kPread,
    kPwrite,
    kPoll
  };

  // One recorded call. Fields follow the argument order of the syscall.
  struct Call {
    Op op = Op::kRead;
    // SendFile: out_fd; Splice: fd_in; Poll: fds[0].fd; others: fd.
    int fd = -1;
    // SendFile: in_fd; Splice: fd_out; others: -1.
    int fd2 = -1;
    // Bytes requested (count/len/n); Poll: number of pollfds.
    size_t len = 0;
    // The offset as passed in, before the call: SendFile *offset, Splice
    // *off_in, Pread/Pwrite off. nullopt when no offset (null pointer).
    std::optional<int64_t> offset;
    // Splice *off_out as passed in.
    std::optional<int64_t> offset2;
    // Send/Splice flags; Poll: timeout in milliseconds.
    int flags = 0;
    // Poll: fds[0].events.
    short events = 0;  // NOLINT(runtime/int)
    bool scripted = false;
    SysResult result = {0, 0};
  };

  ScriptedSysCalls() = default;

  // Appends results to the Op's FIFO.
  void ScriptSendFile(std::vector<SysResult> results);
  void ScriptSplice(std::vector<SysResult> results);
  void ScriptRead(std::vector<SysResult> results);
  void ScriptWrite(std::vector<SysResult> results);
  void ScriptSend(std::vector<SysResult> results);
  void ScriptPread(std::vector<SysResult> results);
  void ScriptPwrite(std::vector<SysResult> results);
  void ScriptPoll(std::vector<SysResult> results);

  // Script entries of `op` not consumed yet.
  size_t remaining(Op op) const;
  // True when every script has been consumed.
  bool AllScriptsConsumed() const;

  std::vector<Call> calls() const;
  std::vector<Call> calls(Op op) const;
  void ClearCalls();

  // Bytes that scripted sink calls delivered to `fd` (see file comment).
  std::string Output(int fd) const;
  // Bytes a scripted pipe model currently holds for a pipe whose read or
  // write end is `fd`.
  size_t PipeModelSize(int fd) const;
  // Inconsistencies seen while applying scripted results; tests normally
  // assert this is empty.
  std::vector<std::string> violations() const;

  // The deterministic byte at `pos` of every scripted source, and `n` of
  // them starting at `pos`.
  static char PatternByte(uint64_t pos);
  static std::string Pattern(uint64_t pos, size_t n);

  // Overrides.
  SysResult SendFile(int out_fd, int in_fd, off_t* offset,
                     size_t count) override;
  SysResult Splice(int fd_in, off_t* off_in, int fd_out, off_t* off_out,
                   size_t len, unsigned int flags) override;
  SysResult Read(int fd, void* buf, size_t n) override;
  SysResult Write(int fd, const void* buf, size_t n) override;
  SysResult Send(int fd, const void* buf, size_t n, int flags) override;
  SysResult Pread(int fd, void* buf, size_t n, off_t off) override;
  SysResult Pwrite(int fd, const void* buf, size_t n, off_t off) override;
  SysResult Poll(struct pollfd* fds, nfds_t n, int timeout_ms) override;
  SysResult Pipe2(int fds[2], int flags) override;

 private:
  void Append(Op op, std::vector<SysResult> results) ABSL_LOCKS_EXCLUDED(mu_);
  std::optional<SysResult> Next(Op op) ABSL_LOCKS_EXCLUDED(mu_);
  void Record(Call call) ABSL_LOCKS_EXCLUDED(mu_);
  // Clamps a scripted rc to the requested length, noting a violation.
  size_t Effect(const char* what, const SysResult& r, size_t asked)
      ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  std::string TakeStream(int fd, size_t n) ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  void WriteAt(int fd, int64_t offset, absl::string_view bytes)
      ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  // If `fd` is the read (write) end of a pipe made by Pipe2, the write end's
  // fd, used as the model's key; otherwise -1.
  int PipeKeyForReadEnd(int fd) ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  int PipeKeyForWriteEnd(int fd) ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  bool IsFifo(int fd);

  mutable absl::Mutex mu_;
  std::map<Op, std::deque<SysResult>> scripts_ ABSL_GUARDED_BY(mu_);
  std::vector<Call> calls_ ABSL_GUARDED_BY(mu_);
  std::map<int, std::string> output_ ABSL_GUARDED_BY(mu_);
  std::map<int, uint64_t> stream_pos_ ABSL_GUARDED_BY(mu_);
  // Pipe2 results: read end -> write end, and write end -> read end.
  std::map<int, int> pipe_read_to_write_ ABSL_GUARDED_BY(mu_);
  std::map<int, int> pipe_write_to_read_ ABSL_GUARDED_BY(mu_);
  // Keyed by the write end.
  std::map<int, std::string> pipe_model_ ABSL_GUARDED_BY(mu_);
  std::vector<std::string> violations_ ABSL_GUARDED_BY(mu_);
};

}  // namespace sys
}  // namespace walship

#endif  // WALSHIP_TESTS_FAKES_SCRIPTED_SYSCALLS_H_
