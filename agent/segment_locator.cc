#include "agent/segment_locator.h"

#include <sys/stat.h>

#include "absl/strings/str_cat.h"
#include "common/sys/file_util.h"

namespace walship::agent {

std::string SegmentLocator::Path(sys::SysCalls& sys, const std::string& name) const {
  if (dirs_.size() > 1) {
    for (const std::string& d : dirs_) {
      std::string path = absl::StrCat(d, "/", name);
      sys::FileFacts st;  // per frame: never the times (file_util.h)
      if (sys::DescribePath(sys, path, &st).ok()) return path;
    }
  }
  return absl::StrCat(dirs_.front(), "/", name);
}

}  // namespace walship::agent
