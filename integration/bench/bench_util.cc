#include "integration/bench/bench_util.h"

#include <time.h>

#include <algorithm>
#include <cerrno>
#include <cstdio>

#include "absl/strings/str_cat.h"
#include "common/sys/errors.h"

namespace walship::bench {

int64_t NowNs() {
  timespec ts;
  clock_gettime(CLOCK_MONOTONIC, &ts);
  return int64_t{ts.tv_sec} * 1000000000 + ts.tv_nsec;
}

int64_t Pct(const std::vector<int64_t>& sorted, double p) {
  if (sorted.empty()) return 0;
  size_t i = static_cast<size_t>(p / 100.0 * static_cast<double>(sorted.size()));
  return sorted[std::min(i, sorted.size() - 1)];
}

std::string SelfStatsJson() {
  long long hwm = -1, read_bytes = -1;  // NOLINT
  char line[256];
  if (FILE* f = fopen("/proc/self/status", "r")) {
    while (fgets(line, sizeof(line), f)) sscanf(line, "VmHWM: %lld", &hwm);
    fclose(f);
  }
  if (FILE* f = fopen("/proc/self/io", "r")) {
    while (fgets(line, sizeof(line), f)) sscanf(line, "read_bytes: %lld", &read_bytes);
    fclose(f);
  }
  return absl::StrCat("\"vmhwm_kb\":", hwm, ",\"read_bytes\":", read_bytes);
}

std::string LatencyJson(std::vector<int64_t> ns) {
  std::sort(ns.begin(), ns.end());
  return absl::StrCat("{\"count\":", ns.size(), ",\"p50_us\":", Pct(ns, 50) / 1000.0,
                      ",\"p90_us\":", Pct(ns, 90) / 1000.0, ",\"p99_us\":", Pct(ns, 99) / 1000.0,
                      ",\"max_us\":", ns.empty() ? 0 : ns.back() / 1000.0, "}");
}

absl::Status WriteText(const std::string& path, const std::string& text) {
  if (path.empty()) return absl::OkStatus();
  FILE* f = fopen(path.c_str(), "w");
  if (f == nullptr) return sys::ErrnoToStatus(errno, absl::StrCat("open ", path));
  size_t n = fwrite(text.data(), 1, text.size(), f);
  if (fclose(f) != 0 || n != text.size()) {
    return sys::ErrnoToStatus(errno, absl::StrCat("write ", path));
  }
  return absl::OkStatus();
}

}  // namespace walship::bench
