#include "tests/fakes/temp_dir.h"

#include <sys/stat.h>

#include <cstdio>
#include <cstdlib>
#include <filesystem>

namespace walship::testing {

std::string FreshTempDir(const std::string& name) {
  const char* base = std::getenv("TEST_TMPDIR");
  std::string dir = std::string(base ? base : "/tmp") + "/" + name;
  std::error_code ec;
  std::filesystem::remove_all(dir, ec);
  if (mkdir(dir.c_str(), 0755) != 0) {
    std::perror(dir.c_str());
    std::abort();
  }
  return dir;
}

}  // namespace walship::testing
