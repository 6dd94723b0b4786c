#include "agent/segment_locator.h"

#include <sys/stat.h>

#include "absl/strings/str_cat.h"

namespace walship::agent {

std::string SegmentLocator::Path(sys::SysCalls& sys, const std::string& name) const {
  if (dirs_.size() > 1) {
    for (const std::string& d : dirs_) {
      std::string path = absl::StrCat(d, "/", name);
      struct stat st;
      if (sys.Lstat(path.c_str(), &st).ok()) return path;
    }
  }
  return absl::StrCat(dirs_.front(), "/", name);
}

}  // namespace walship::agent
