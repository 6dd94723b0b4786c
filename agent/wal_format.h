// wal_format.h: how a WAL format plugs into walship-agent.
//
// A format (append-only segment directories, PostgreSQL's pg_wal, ...) lives
// in its own files and hands the agent one registration, a WalFormat:
//   * its --format name, and a sentence for --format's help;
//   * its options (format_options.h): its flags, which are also its
//     config-file keys, and their validation;
//   * the constructor of its WalSource (wal_source.h).
// The agent's core (agent_options.h, main.cc, agent.cc) reaches formats only
// through a WalFormatRegistry and names none but the default ("append",
// AgentOptions::format). The formats built into walship-agent are listed
// once, in KnownWalFormats() (wal_source_factory.h).
//
// Adding a format: a folder with its source, a `FooOptions : FormatOptions`
// and a `void RegisterFooFormat(WalFormatRegistry&)` that calls
//   registry.Add(MakeWalFormat<FooOptions>("foo", "sentence for --help", make));
// then one line in wal_source_factory.cc. Its flags appear in --help, in
// --print-config and as config-file keys where the registration list puts
// them; a flag name already taken (by the core or another format) stops
// every parse with kInternal (FlagSet).
//
// Thread-safety: a registry is filled once, then only read (any thread).
#ifndef WALSHIP_AGENT_WAL_FORMAT_H_
#define WALSHIP_AGENT_WAL_FORMAT_H_

#include <functional>
#include <memory>
#include <string>
#include <vector>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/string_view.h"
#include "agent/agent_options.h"
#include "agent/format_options.h"
#include "agent/segment_catalog.h"
#include "agent/wal_source.h"
#include "common/clock.h"
#include "common/flags.h"
#include "common/sys/syscalls.h"

namespace walship::agent {

// What a format's source is built from. All references outlive the source.
struct SourceContext {
  sys::SysCalls& sys;
  // The core's options (wal_dir, stream_id, ack_interval, allow_replicas),
  // validated.
  const AgentOptions& agent;
  SegmentCatalog& catalog;
  Clock& clock;
};

using WalSourceMaker = std::function<absl::StatusOr<std::unique_ptr<WalSource>>(
    const SourceContext& context, const FormatOptions& options)>;

struct WalFormat {
  // --format=NAME.
  std::string name;
  // Follows "NAME: " in --format's help; a sentence or two ending in '.'.
  std::string description;
  // A new options object holding the format's defaults.
  std::function<std::shared_ptr<FormatOptions>()> new_options;
  // A new, not yet started source, from options of this format (validated).
  WalSourceMaker new_source;
};

// A WalFormat whose options are an `Options` (a default-constructible
// FormatOptions), built by `new_source`. Options of another type under this
// format's name (a caller's mistake) are kInternal, never a wrong cast.
template <class Options>
WalFormat MakeWalFormat(
    std::string name, std::string description,
    std::function<absl::StatusOr<std::unique_ptr<WalSource>>(const SourceContext&,
                                                              const Options&)>
        new_source) {
  WalFormat f;
  f.name = name;
  f.description = std::move(description);
  f.new_options = [] { return std::make_shared<Options>(); };
  f.new_source = [name, new_source = std::move(new_source)](
                     const SourceContext& context, const FormatOptions& options)
      -> absl::StatusOr<std::unique_ptr<WalSource>> {
    const auto* typed = dynamic_cast<const Options*>(&options);
    if (typed == nullptr) {
      return absl::InternalError(
          absl::StrCat("the options given for format ", name, " are not its own"));
    }
    return new_source(context, *typed);
  };
  return f;
}

class WalFormatRegistry {
 public:
  // Adds `format` after those added before (the order of --help). A name
  // added twice aborts: the list is fixed in code, and its test runs it.
  void Add(WalFormat format);

  // nullptr when no format is called `name`.
  const WalFormat* Find(absl::string_view name) const;
  const std::vector<WalFormat>& formats() const { return formats_; }
  // "append, postgres": every name, in order.
  std::string Names() const;

  // --format's help: `intro`, then " NAME: description" for each format.
  std::string FormatHelp(absl::string_view intro) const;

  // Gives every format a fresh options object (its defaults) in
  // `options.format_options`, and registers its flags in `flags`, format
  // after format. The flags write into those objects: parse before copying
  // `options` anywhere.
  void RegisterFlags(FlagSet& flags, AgentOptions& options) const;

  // kInvalidArgument naming the first bad flag: --format names no format
  // here ("--format=X is not supported (supported: ...)"), the core's
  // options (AgentOptions::Validate), then each format's own, the selected
  // one and the others (FormatOptions::Validate).
  absl::Status Validate(const AgentOptions& options) const;

  // A new, not yet started source for `options.format` with its options
  // (or its defaults when `options.format_options` has none), publishing
  // into `catalog`; `sys`, `options`, `catalog` and `clock` must outlive it.
  // kInvalidArgument for a format not registered here.
  absl::StatusOr<std::unique_ptr<WalSource>> MakeSource(sys::SysCalls& sys,
                                                        const AgentOptions& options,
                                                        SegmentCatalog& catalog,
                                                        Clock& clock) const;

 private:
  // The options `options` holds for `format`, or its defaults.
  std::shared_ptr<const FormatOptions> OptionsOf(const WalFormat& format,
                                                 const AgentOptions& options) const;
  absl::Status UnknownFormat(absl::string_view name) const;

  std::vector<WalFormat> formats_;
};

}  // namespace walship::agent

#endif  // WALSHIP_AGENT_WAL_FORMAT_H_
