// temp_dir.h: fresh, empty directories for hermetic tests, and whole-file
// reads and writes inside them.
#ifndef WALSHIP_TESTS_FAKES_TEMP_DIR_H_
#define WALSHIP_TESTS_FAKES_TEMP_DIR_H_

#include <string>

namespace walship::testing {

// Returns $TEST_TMPDIR/name (or /tmp/name outside Bazel), removed and
// re-created empty. Aborts the test binary if that fails.
std::string FreshTempDir(const std::string& name);

// The file's bytes; empty if it cannot be read.
std::string ReadFile(const std::string& path);
// Replaces the file's contents with `bytes`.
void WriteFile(const std::string& path, const std::string& bytes);

}  // namespace walship::testing

#endif  // WALSHIP_TESTS_FAKES_TEMP_DIR_H_
