// format_options.h: a WAL format's own options, as the agent's core holds them.
//
// Each format (wal_format.h) keeps the values of its flags in one subclass of
// FormatOptions: the flags it declares (RegisterFlags) are its config-file
// keys too, and its Validate() is the only place that knows what they mean.
// AgentOptions::format_options holds one such object per format, so the core
// carries them without naming any.
//
// Thread-safety: none needed; an object is written only while main() parses
// flags, then read.
#ifndef WALSHIP_AGENT_FORMAT_OPTIONS_H_
#define WALSHIP_AGENT_FORMAT_OPTIONS_H_

#include "absl/status/status.h"
#include "absl/strings/string_view.h"
#include "common/flags.h"

namespace walship::agent {

class FormatOptions {
 public:
  virtual ~FormatOptions() = default;

  // Declares the format's flags in `flags`, each writing into this object
  // (which must outlive the parse). Their names, defaults and help are what
  // operators type, keep in config files and read in the documentation:
  // never rename one.
  virtual void RegisterFlags(FlagSet& flags) = 0;

  // After parsing. `selected`: the agent runs this format (--format names
  // it). kInvalidArgument naming the first bad flag: a bad value, a
  // combination the format needs (e.g. "--format=postgres needs
  // --pg-conninfo"), or, when not selected, a flag set that only this
  // format reads (see OnlyForFormat).
  virtual absl::Status Validate(bool selected) const = 0;
};

// kInvalidArgument "--FLAG is only for --format=FORMAT", then `why` in
// parentheses when given: a format's flag set while another format runs.
absl::Status OnlyForFormat(absl::string_view flag, absl::string_view format,
                           absl::string_view why = "");

}  // namespace walship::agent

#endif  // WALSHIP_AGENT_FORMAT_OPTIONS_H_
