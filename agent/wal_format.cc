#include "agent/wal_format.h"

#include <cstdio>
#include <cstdlib>
#include <utility>

#include "absl/strings/str_join.h"
#include "common/status_macros.h"

namespace walship::agent {

void WalFormatRegistry::Add(WalFormat format) {
  if (Find(format.name) != nullptr) {
    std::fprintf(stderr, "WalFormatRegistry: format %s added twice\n", format.name.c_str());
    std::abort();
  }
  formats_.push_back(std::move(format));
}

const WalFormat* WalFormatRegistry::Find(absl::string_view name) const {
  for (const WalFormat& f : formats_) {
    if (f.name == name) return &f;
  }
  return nullptr;
}

std::string WalFormatRegistry::Names() const {
  return absl::StrJoin(formats_, ", ",
                       [](std::string* out, const WalFormat& f) { out->append(f.name); });
}

std::string WalFormatRegistry::FormatHelp(absl::string_view intro) const {
  std::string help(intro);
  for (const WalFormat& f : formats_) absl::StrAppend(&help, " ", f.name, ": ", f.description);
  return help;
}

void WalFormatRegistry::RegisterFlags(FlagSet& flags, AgentOptions& options) const {
  for (const WalFormat& f : formats_) {
    std::shared_ptr<FormatOptions> own = f.new_options();
    own->RegisterFlags(flags);
    options.format_options[f.name] = std::move(own);
  }
}

absl::Status WalFormatRegistry::UnknownFormat(absl::string_view name) const {
  return absl::InvalidArgumentError(
      absl::StrCat("--format=", name, " is not supported (supported: ", Names(), ")"));
}

std::shared_ptr<const FormatOptions> WalFormatRegistry::OptionsOf(
    const WalFormat& format, const AgentOptions& options) const {
  auto it = options.format_options.find(format.name);
  if (it != options.format_options.end() && it->second != nullptr) return it->second;
  return format.new_options();
}

absl::Status WalFormatRegistry::Validate(const AgentOptions& options) const {
  if (Find(options.format) == nullptr) return UnknownFormat(options.format);
  WALSHIP_RETURN_IF_ERROR(options.Validate());
  for (const WalFormat& f : formats_) {
    WALSHIP_RETURN_IF_ERROR(OptionsOf(f, options)->Validate(f.name == options.format));
  }
  return absl::OkStatus();
}

absl::StatusOr<std::unique_ptr<WalSource>> WalFormatRegistry::MakeSource(
    sys::SysCalls& sys, const AgentOptions& options, SegmentCatalog& catalog,
    Clock& clock) const {
  const WalFormat* f = Find(options.format);
  if (f == nullptr) return UnknownFormat(options.format);
  const SourceContext context{sys, options, catalog, clock};
  return f->new_source(context, *OptionsOf(*f, options));
}

}  // namespace walship::agent
