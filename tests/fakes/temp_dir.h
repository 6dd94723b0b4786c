// temp_dir.h: fresh, empty directories for hermetic tests.
#ifndef WALSHIP_TESTS_FAKES_TEMP_DIR_H_
#define WALSHIP_TESTS_FAKES_TEMP_DIR_H_

#include <string>

namespace walship::testing {

// Returns $TEST_TMPDIR/name (or /tmp/name outside Bazel), removed and
// re-created empty. Aborts the test binary if that fails.
std::string FreshTempDir(const std::string& name);

}  // namespace walship::testing

#endif  // WALSHIP_TESTS_FAKES_TEMP_DIR_H_
