#include "status/status_watch.h"

#include <algorithm>
#include <cmath>

#include "absl/strings/str_format.h"

namespace walship {
namespace status {

std::string FormatBytes(double bytes) {
  if (!(bytes > 0)) return "0 B";
  static const char* const kUnits[] = {"B", "kB", "MB", "GB", "TB", "PB", "EB"};
  int unit = 0;
  while (bytes >= 999.5 && unit < 6) {
    bytes /= 1000;
    ++unit;
  }
  if (unit == 0) return absl::StrFormat("%.0f B", bytes);
  if (bytes >= 99.95) return absl::StrFormat("%.0f %s", bytes, kUnits[unit]);
  if (bytes >= 9.995) return absl::StrFormat("%.1f %s", bytes, kUnits[unit]);
  return absl::StrFormat("%.2f %s", bytes, kUnits[unit]);
}

std::string FormatRate(double bytes_per_sec) { return FormatBytes(bytes_per_sec) + "/s"; }

std::string FormatEta(absl::Duration d) {
  if (d <= absl::ZeroDuration()) return "0s";
  int64_t s = absl::ToInt64Seconds(absl::Ceil(d, absl::Seconds(1)));
  if (s >= 100 * 3600) return ">99h";
  if (s < 60) return absl::StrFormat("%ds", s);
  if (s < 3600) return absl::StrFormat("%dm%02ds", s / 60, s % 60);
  return absl::StrFormat("%dh%02dm", s / 3600, (s % 3600) / 60);
}

std::string ProgressBar(double fraction, int width) {
  if (width < 0) width = 0;
  if (!(fraction > 0)) fraction = 0;
  fraction = std::min(fraction, 1.0);
  int full = static_cast<int>(std::lround(fraction * width));
  return "[" + std::string(full, '#') + std::string(width - full, '.') + "]";
}

Progress ReplicaTracker::Update(const Sample& s) {
  Progress p;
  if (s.lag_bytes == 0) {
    peak_lag_ = 0;
  } else {
    peak_lag_ = std::max(peak_lag_, s.lag_bytes);
  }
  if (prev_ && s.time > prev_->time && s.bytes_sent >= prev_->bytes_sent) {
    double secs = absl::ToDoubleSeconds(s.time - prev_->time);
    p.have_rate = true;
    p.bytes_per_sec = static_cast<double>(s.bytes_sent - prev_->bytes_sent) / secs;
    p.catchup_per_sec =
        (static_cast<double>(prev_->lag_bytes) - static_cast<double>(s.lag_bytes)) / secs;
    p.moving = s.bytes_sent > prev_->bytes_sent;
  }
  if (p.moving && s.lag_bytes > 0) {
    p.show_progress = true;
    p.fraction_done = 1.0 - static_cast<double>(s.lag_bytes) / static_cast<double>(peak_lag_);
    if (p.catchup_per_sec > 0) {
      p.eta = absl::Seconds(static_cast<double>(s.lag_bytes) / p.catchup_per_sec);
    }
  }
  prev_ = s;
  return p;
}

std::string ProgressLine(const Progress& p, uint64_t lag_bytes, int bar_width) {
  if (!p.show_progress) return "";
  std::string line = absl::StrFormat("%s %3.0f%%  lag %s  ", ProgressBar(p.fraction_done, bar_width),
                                     std::floor(p.fraction_done * 100),
                                     FormatBytes(static_cast<double>(lag_bytes)));
  if (p.eta) {
    return line + absl::StrFormat("catching up at %s  ETA %s", FormatRate(p.catchup_per_sec),
                                  FormatEta(*p.eta));
  }
  return line + "not catching up (the source grows as fast)  ETA -";
}

}  // namespace status
}  // namespace walship
