// flags.h: a small command-line parser for the walship binaries.
//
// Flags are spelled the way operators type them (--wal-dir=DIR, --wal-dir DIR,
// --verbose / --verbose=false); --help prints every flag with its default and
// help text. Binaries register flags that write straight into their options
// struct, then call Validate() on it: libraries never read flags.
//
// Configuration files: after EnableConfigFile(), --config=FILE loads a TOML
// file whose keys are flag names (`wal-dir = "/x"`, `max-rate = 1000000`,
// `verbose = true`). The file is applied first, then the command line, so a
// flag given on the command line wins wherever --config appears. An unknown
// key, a table, or a value of the wrong type is kInvalidArgument naming the
// file and the key. --print-config prints every flag's effective value as a
// TOML file that --config loads again (see ConfigText()).
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
#include "absl/time/time.h"
#include "common/sys/syscalls.h"

namespace walship {

class FlagSet {
 public:
  // `usage` opens the --help text.
  explicit FlagSet(std::string usage);

  void String(const std::string& name, std::string* target, const std::string& help);
  void Int(const std::string& name, int64_t* target, const std::string& help);
  void Uint(const std::string& name, uint64_t* target, const std::string& help);
  void Bool(const std::string& name, bool* target, const std::string& help);
  // A whole number of milliseconds (--heartbeat-ms=1000, `heartbeat-ms =
  // 1000` in a config file) into `target`; --help shows the default in ms.
  void Milliseconds(const std::string& name, absl::Duration* target, const std::string& help);
  // The same in microseconds (--sched-slice-us=100).
  void Microseconds(const std::string& name, absl::Duration* target, const std::string& help);

  // Registers --config=FILE and --print-config (see the file comment); the
  // file is read through `sys`, which must outlive Parse().
  void EnableConfigFile(sys::SysCalls& sys);

  // Applies a TOML document (`source_name` names it in errors) to the
  // registered flags. kInvalidArgument on a syntax error (with line and
  // column), an unknown key, or a value of the wrong type or out of range; the
  // flags set before the bad key keep their new values.
  absl::Status ApplyConfig(const std::string& toml_text, const std::string& source_name);
  // Reads `path` through `sys` and applies it; kNotFound / kInvalidArgument
  // name the file.
  absl::Status ApplyConfigFile(sys::SysCalls& sys, const std::string& path);

  // Every flag (except --config and --print-config) with its current value,
  // one `name = value` line each, preceded by its help text as `#` comments.
  // Strings are TOML basic strings, numbers integers, booleans true/false.
  // Loading the text with ApplyConfig() sets the same values.
  std::string ConfigText() const;

  // Parses argv[first, argc). Returns the positional arguments (everything
  // not starting with "--", and everything after a bare "--").
  // kInvalidArgument for an unknown flag, a missing or malformed value;
  // kInternal when two flags were registered under one name (a binary's
  // mistake, so every parse fails rather than one of them being ignored).
  // --help / -h sets help_requested() and stops parsing. With
  // EnableConfigFile(), the --config file is applied before any other flag.
  absl::StatusOr<std::vector<std::string>> Parse(int argc, char** argv, int first = 1);

  // For binaries without positional arguments: parses argv, prints --help
  // or "PROGRAM: error" as needed, and returns the status main() should exit
  // with now (0 after --help, `error_status` after a usage error), or
  // nullopt to carry on. --print-config prints ConfigText() and returns 0.
  std::optional<int> ParseOrExitStatus(int argc, char** argv, const std::string& program,
                                       int error_status);

  bool help_requested() const { return help_requested_; }
  bool print_config_requested() const { return print_config_; }
  std::string Usage() const;

 private:
  enum class Kind { kString, kInt, kUint, kBool };
  struct Flag {
    std::string name;
    std::string help;
    std::string default_text;
    bool is_bool = false;
    std::function<bool(const std::string&)> set;
    Kind kind = Kind::kString;
    std::function<std::string()> get;  // current value as TOML; empty: not in configs
  };
  const Flag* Find(const std::string& name) const;
  // A whole number of `unit`s into `target`.
  void WholeUnits(const std::string& name, absl::Duration* target, absl::Duration unit,
                  const std::string& help);
  // Adds `flag`; a name already taken is remembered in duplicate_.
  void Add(Flag flag);

  std::string usage_;
  std::vector<Flag> flags_;
  std::string duplicate_;  // the first name registered twice
  bool help_requested_ = false;
  sys::SysCalls* config_sys_ = nullptr;  // non-null once EnableConfigFile() ran
  std::string config_path_;
  bool print_config_ = false;
};

}  // namespace walship

#endif  // WALSHIP_COMMON_FLAGS_H_
