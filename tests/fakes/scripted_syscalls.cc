// Copyright walship authors.

#include "tests/fakes/scripted_syscalls.h"

#include <fcntl.h>
#include <sys/stat.h>

#include <algorithm>
#include <cstring>
#include <utility>

#include "absl/strings/str_cat.h"

namespace walship {
namespace sys {

void ScriptedSysCalls::Append(Op op, std::vector<SysResult> results) {
  absl::MutexLock lock(&mu_);
  auto& fifo = scripts_[op];
  fifo.insert(fifo.end(), results.begin(), results.end());
}

void ScriptedSysCalls::ScriptSendFile(std::vector<SysResult> results) {
  Append(Op::kSendFile, std::move(results));
}

void ScriptedSysCalls::ScriptSplice(std::vector<SysResult> results) {
  Append(Op::kSplice, std::move(results));
}

void ScriptedSysCalls::ScriptRead(std::vector<SysResult> results) {
  Append(Op::kRead, std::move(results));
}

void ScriptedSysCalls::ScriptWrite(std::vector<SysResult> results) {
  Append(Op::kWrite, std::move(results));
}

void ScriptedSysCalls::ScriptSend(std::vector<SysResult> results) {
  Append(Op::kSend, std::move(results));
}

void ScriptedSysCalls::ScriptPread(std::vector<SysResult> results) {
  Append(Op::kPread, std::move(results));
}

void ScriptedSysCalls::ScriptPwrite(std::vector<SysResult> results) {
  Append(Op::kPwrite, std::move(results));
}

void ScriptedSysCalls::ScriptPoll(std::vector<SysResult> results) {
  Append(Op::kPoll, std::move(results));
}

size_t ScriptedSysCalls::remaining(Op op) const {
  absl::MutexLock lock(&mu_);
  auto it = scripts_.find(op);
  return it == scripts_.end() ? 0 : it->second.size();
}

bool ScriptedSysCalls::AllScriptsConsumed() const {
  absl::MutexLock lock(&mu_);
  for (const auto& [op, fifo] : scripts_) {
    if (!fifo.empty()) return false;
  }
  return true;
}

std::vector<ScriptedSysCalls::Call> ScriptedSysCalls::calls() const {
  absl::MutexLock lock(&mu_);
  return calls_;
}

std::vector<ScriptedSysCalls::Call> ScriptedSysCalls::calls(Op op) const {
  absl::MutexLock lock(&mu_);
  std::vector<Call> out;
  for (const Call& c : calls_) {
    if (c.op == op) out.push_back(c);
  }
  return out;
}

void ScriptedSysCalls::ClearCalls() {
  absl::MutexLock lock(&mu_);
  calls_.clear();
}

std::string ScriptedSysCalls::Output(int fd) const {
  absl::MutexLock lock(&mu_);
  auto it = output_.find(fd);
  return it == output_.end() ? std::string() : it->second;
}

size_t ScriptedSysCalls::PipeModelSize(int fd) const {
  absl::MutexLock lock(&mu_);
  int key = fd;
  if (auto it = pipe_read_to_write_.find(fd); it != pipe_read_to_write_.end()) {
    key = it->second;
  }
  auto it = pipe_model_.find(key);
  return it == pipe_model_.end() ? 0 : it->second.size();
}

std::vector<std::string> ScriptedSysCalls::violations() const {
  absl::MutexLock lock(&mu_);
  return violations_;
}

char ScriptedSysCalls::PatternByte(uint64_t pos) {
  // Position-dependent and aperiodic over small ranges, so an off-by-N offset
  // or a duplicated/dropped chunk changes the bytes.
  uint64_t x = pos * 0x9E3779B97F4A7C15ull;
  x ^= x >> 29;
  return static_cast<char>(x & 0xff);
}

std::string ScriptedSysCalls::Pattern(uint64_t pos, size_t n) {
  std::string out(n, '\0');
  for (size_t i = 0; i < n; ++i) out[i] = PatternByte(pos + i);
  return out;
}

std::optional<SysResult> ScriptedSysCalls::Next(Op op) {
  absl::MutexLock lock(&mu_);
  auto it = scripts_.find(op);
  if (it == scripts_.end() || it->second.empty()) return std::nullopt;
  SysResult r = it->second.front();
  it->second.pop_front();
  return r;
}

void ScriptedSysCalls::Record(Call call) {
  absl::MutexLock lock(&mu_);
  calls_.push_back(std::move(call));
}

size_t ScriptedSysCalls::Effect(const char* what, const SysResult& r,
                                size_t asked) {
  const uint64_t rc = static_cast<uint64_t>(r.rc);
  if (rc > asked) {
    violations_.push_back(absl::StrCat(what, ": scripted rc ", r.rc,
                                       " exceeds the requested ", asked));
    return asked;
  }
  return static_cast<size_t>(rc);
}

std::string ScriptedSysCalls::TakeStream(int fd, size_t n) {
  uint64_t& pos = stream_pos_[fd];
  std::string bytes = Pattern(pos, n);
  pos += n;
  return bytes;
}

void ScriptedSysCalls::WriteAt(int fd, int64_t offset,
                               absl::string_view bytes) {
  std::string& image = output_[fd];
  const size_t end = static_cast<size_t>(offset) + bytes.size();
  if (image.size() < end) image.resize(end, '\0');
  std::memcpy(&image[static_cast<size_t>(offset)], bytes.data(), bytes.size());
}

bool ScriptedSysCalls::IsFifo(int fd) {
  struct stat st;
  return RealSysCalls::Fstat(fd, &st).ok() && S_ISFIFO(st.st_mode);
}

int ScriptedSysCalls::PipeKeyForReadEnd(int fd) {
  auto it = pipe_read_to_write_.find(fd);
  // The fd number may have been reused since Pipe2 handed it out.
  if (it == pipe_read_to_write_.end() || !IsFifo(fd)) return -1;
  return it->second;
}

int ScriptedSysCalls::PipeKeyForWriteEnd(int fd) {
  if (pipe_write_to_read_.count(fd) == 0 || !IsFifo(fd)) return -1;
  return fd;
}

SysResult ScriptedSysCalls::SendFile(int out_fd, int in_fd, off_t* offset,
                                     size_t count) {
  Call call;
  call.op = Op::kSendFile;
  call.fd = out_fd;
  call.fd2 = in_fd;
  call.len = count;
  if (offset != nullptr) call.offset = *offset;
  std::optional<SysResult> scripted = Next(Op::kSendFile);
  if (!scripted) {
    call.result = RealSysCalls::SendFile(out_fd, in_fd, offset, count);
  } else {
    call.scripted = true;
    call.result = *scripted;
    if (scripted->rc >= 0) {
      absl::MutexLock lock(&mu_);
      const size_t n = Effect("sendfile", *scripted, count);
      output_[out_fd] +=
          offset != nullptr ? Pattern(*offset, n) : TakeStream(in_fd, n);
      if (offset != nullptr) *offset += scripted->rc;
    }
  }
  Record(call);
  return call.result;
}

SysResult ScriptedSysCalls::Splice(int fd_in, off_t* off_in, int fd_out,
                                   off_t* off_out, size_t len,
                                   unsigned int flags) {
  Call call;
  call.op = Op::kSplice;
  call.fd = fd_in;
  call.fd2 = fd_out;
  call.len = len;
  if (off_in != nullptr) call.offset = *off_in;
  if (off_out != nullptr) call.offset2 = *off_out;
  call.flags = static_cast<int>(flags);
  std::optional<SysResult> scripted = Next(Op::kSplice);
  if (!scripted) {
    call.result =
        RealSysCalls::Splice(fd_in, off_in, fd_out, off_out, len, flags);
  } else {
    call.scripted = true;
    call.result = *scripted;
    if (scripted->rc >= 0) {
      absl::MutexLock lock(&mu_);
      const size_t n = Effect("splice", *scripted, len);

      std::string bytes;
      if (const int key = PipeKeyForReadEnd(fd_in); key >= 0) {
        std::string& model = pipe_model_[key];
        if (model.size() < n) {
          violations_.push_back(absl::StrCat("splice: took ", n,
                                             " bytes from pipe fd ", fd_in,
                                             " holding only ", model.size()));
          model.resize(n, '\0');
        }
        bytes = model.substr(0, n);
        model.erase(0, n);
      } else if (off_in != nullptr) {
        bytes = Pattern(*off_in, n);
      } else {
        bytes = TakeStream(fd_in, n);
      }

      if (const int key = PipeKeyForWriteEnd(fd_out); key >= 0) {
        std::string& model = pipe_model_[key];
        const SysResult capacity = RealSysCalls::Fcntl(fd_out, F_GETPIPE_SZ, 0);
        if (capacity.ok() &&
            model.size() + n > static_cast<uint64_t>(capacity.rc)) {
          violations_.push_back(absl::StrCat(
              "splice: put ", n, " bytes into pipe fd ", fd_out, " holding ",
              model.size(), " with capacity ", capacity.rc));
        }
        model += bytes;
      } else if (off_out != nullptr) {
        WriteAt(fd_out, *off_out, bytes);
      } else {
        output_[fd_out] += bytes;
      }

      if (off_in != nullptr) *off_in += scripted->rc;
      if (off_out != nullptr) *off_out += scripted->rc;
    }
  }
  Record(call);
  return call.result;
}

SysResult ScriptedSysCalls::Read(int fd, void* buf, size_t n) {
  Call call;
  call.op = Op::kRead;
  call.fd = fd;
  call.len = n;
  std::optional<SysResult> scripted = Next(Op::kRead);
  if (!scripted) {
    call.result = RealSysCalls::Read(fd, buf, n);
  } else {
    call.scripted = true;
    call.result = *scripted;
    if (scripted->rc >= 0) {
      absl::MutexLock lock(&mu_);
      const std::string bytes = TakeStream(fd, Effect("read", *scripted, n));
      std::memcpy(buf, bytes.data(), bytes.size());
    }
  }
  Record(call);
  return call.result;
}

SysResult ScriptedSysCalls::Write(int fd, const void* buf, size_t n) {
  Call call;
  call.op = Op::kWrite;
  call.fd = fd;
  call.len = n;
  std::optional<SysResult> scripted = Next(Op::kWrite);
  if (!scripted) {
    call.result = RealSysCalls::Write(fd, buf, n);
  } else {
    call.scripted = true;
    call.result = *scripted;
    if (scripted->rc >= 0) {
      absl::MutexLock lock(&mu_);
      output_[fd].append(static_cast<const char*>(buf),
                         Effect("write", *scripted, n));
    }
  }
  Record(call);
  return call.result;
}

SysResult ScriptedSysCalls::Send(int fd, const void* buf, size_t n, int flags) {
  Call call;
  call.op = Op::kSend;
  call.fd = fd;
  call.len = n;
  call.flags = flags;
  std::optional<SysResult> scripted = Next(Op::kSend);
  if (!scripted) {
    call.result = RealSysCalls::Send(fd, buf, n, flags);
  } else {
    call.scripted = true;
    call.result = *scripted;
    if (scripted->rc >= 0) {
      absl::MutexLock lock(&mu_);
      output_[fd].append(static_cast<const char*>(buf),
                         Effect("send", *scripted, n));
    }
  }
  Record(call);
  return call.result;
}

SysResult ScriptedSysCalls::Pread(int fd, void* buf, size_t n, off_t off) {
  Call call;
  call.op = Op::kPread;
  call.fd = fd;
  call.len = n;
  call.offset = off;
  std::optional<SysResult> scripted = Next(Op::kPread);
  if (!scripted) {
    call.result = RealSysCalls::Pread(fd, buf, n, off);
  } else {
    call.scripted = true;
    call.result = *scripted;
    if (scripted->rc >= 0) {
      absl::MutexLock lock(&mu_);
      const std::string bytes = Pattern(off, Effect("pread", *scripted, n));
      std::memcpy(buf, bytes.data(), bytes.size());
    }
  }
  Record(call);
  return call.result;
}

SysResult ScriptedSysCalls::Pwrite(int fd, const void* buf, size_t n,
                                   off_t off) {
  Call call;
  call.op = Op::kPwrite;
  call.fd = fd;
  call.len = n;
  call.offset = off;
  std::optional<SysResult> scripted = Next(Op::kPwrite);
  if (!scripted) {
    call.result = RealSysCalls::Pwrite(fd, buf, n, off);
  } else {
    call.scripted = true;
    call.result = *scripted;
    if (scripted->rc >= 0) {
      absl::MutexLock lock(&mu_);
      WriteAt(fd, off,
              absl::string_view(static_cast<const char*>(buf),
                                Effect("pwrite", *scripted, n)));
    }
  }
  Record(call);
  return call.result;
}

SysResult ScriptedSysCalls::Poll(struct pollfd* fds, nfds_t n, int timeout_ms) {
  Call call;
  call.op = Op::kPoll;
  call.fd = n > 0 ? fds[0].fd : -1;
  call.events = n > 0 ? fds[0].events : 0;
  call.len = n;
  call.flags = timeout_ms;
  std::optional<SysResult> scripted = Next(Op::kPoll);
  if (!scripted) {
    call.result = RealSysCalls::Poll(fds, n, timeout_ms);
  } else {
    call.scripted = true;
    call.result = *scripted;
    if (scripted->rc >= 0) {
      for (nfds_t i = 0; i < n; ++i) {
        fds[i].revents =
            static_cast<int64_t>(i) < scripted->rc ? fds[i].events : 0;
      }
    }
  }
  Record(call);
  return call.result;
}

SysResult ScriptedSysCalls::Pipe2(int fds[2], int flags) {
  const SysResult r = RealSysCalls::Pipe2(fds, flags);
  if (r.ok()) {
    absl::MutexLock lock(&mu_);
    // Forget whatever these fd numbers meant before (they may be reused).
    pipe_write_to_read_.erase(fds[0]);
    pipe_read_to_write_.erase(fds[1]);
    pipe_model_.erase(fds[1]);
    pipe_read_to_write_[fds[0]] = fds[1];
    pipe_write_to_read_[fds[1]] = fds[0];
  }
  return r;
}

}  // namespace sys
}  // namespace walship
