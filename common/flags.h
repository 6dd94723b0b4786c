// flags.h: a small command-line parser for the walship binaries.
//
// Flags are spelled the way operators type them (--wal-dir=DIR, --wal-dir DIR,
// --verbose / --verbose=false); --help prints every flag with its default and
// help text. Binaries register flags that write straight into their options
// struct, then call Validate() on it: libraries never read flags.
//
// Not thread-safe; use from main() only. Registered targets must outlive
// Parse().
#ifndef WALSHIP_COMMON_FLAGS_H_
#define WALSHIP_COMMON_FLAGS_H_

#include <cstdint>
#include <functional>
#include <optional>
#include <string>
#include <vector>

#include "absl/status/statusor.h"

namespace walship {

class FlagSet {
 public:
  // `usage` opens the --help text.
  explicit FlagSet(std::string usage);

  void String(const std::string& name, std::string* target, const std::string& help);
  void Int(const std::string& name, int64_t* target, const std::string& help);
  void Uint(const std::string& name, uint64_t* target, const std::string& help);
  void Bool(const std::string& name, bool* target, const std::string& help);

  // Parses argv[first, argc). Returns the positional arguments (everything
  // not starting with "--", and everything after a bare "--").
  // kInvalidArgument for an unknown flag, a missing or malformed value.
  // --help / -h sets help_requested() and stops parsing.
  absl::StatusOr<std::vector<std::string>> Parse(int argc, char** argv, int first = 1);

  // For binaries without positional arguments: parses argv, prints --help
  // or "PROGRAM: error" as needed, and returns the status main() should exit
  // with now (0 after --help, `error_status` after a usage error), or
  // nullopt to carry on.
  std::optional<int> ParseOrExitStatus(int argc, char** argv, const std::string& program,
                                       int error_status);

  bool help_requested() const { return help_requested_; }
  std::string Usage() const;

 private:
  struct Flag {
    std::string name;
    std::string help;
    std::string default_text;
    bool is_bool = false;
    std::function<bool(const std::string&)> set;
  };
  const Flag* Find(const std::string& name) const;

  std::string usage_;
  std::vector<Flag> flags_;
  bool help_requested_ = false;
};

}  // namespace walship

#endif  // WALSHIP_COMMON_FLAGS_H_
