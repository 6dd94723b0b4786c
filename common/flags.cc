#include "common/flags.h"

#include <cstdio>

#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"

namespace walship {

FlagSet::FlagSet(std::string usage) : usage_(std::move(usage)) {}

void FlagSet::String(const std::string& name, std::string* target,
                     const std::string& help) {
  flags_.push_back({name, help, target->empty() ? "\"\"" : *target, false,
                    [target](const std::string& v) {
                      *target = v;
                      return true;
                    }});
}

void FlagSet::Int(const std::string& name, int64_t* target, const std::string& help) {
  flags_.push_back({name, help, std::to_string(*target), false,
                    [target](const std::string& v) { return absl::SimpleAtoi(v, target); }});
}

void FlagSet::Uint(const std::string& name, uint64_t* target, const std::string& help) {
  flags_.push_back({name, help, std::to_string(*target), false,
                    [target](const std::string& v) { return absl::SimpleAtoi(v, target); }});
}

void FlagSet::Bool(const std::string& name, bool* target, const std::string& help) {
  flags_.push_back({name, help, *target ? "true" : "false", true,
                    [target](const std::string& v) { return absl::SimpleAtob(v, target); }});
}

const FlagSet::Flag* FlagSet::Find(const std::string& name) const {
  for (const Flag& f : flags_) {
    if (f.name == name) return &f;
  }
  return nullptr;
}

absl::StatusOr<std::vector<std::string>> FlagSet::Parse(int argc, char** argv,
                                                        int first) {
  std::vector<std::string> positional;
  for (int i = first; i < argc; ++i) {
    std::string arg = argv[i];
    if (arg == "--") {
      for (++i; i < argc; ++i) positional.push_back(argv[i]);
      break;
    }
    if (arg == "--help" || arg == "-h") {
      help_requested_ = true;
      return positional;
    }
    if (arg.size() < 3 || arg.compare(0, 2, "--") != 0) {
      positional.push_back(arg);
      continue;
    }
    std::string name = arg.substr(2);
    std::string value;
    bool has_value = false;
    size_t eq = name.find('=');
    if (eq != std::string::npos) {
      value = name.substr(eq + 1);
      name = name.substr(0, eq);
      has_value = true;
    }
    const Flag* f = Find(name);
    if (f == nullptr) {
      return absl::InvalidArgumentError(
          absl::StrCat("unknown flag --", name, " (see --help)"));
    }
    if (!has_value) {
      if (f->is_bool) {
        value = "true";
      } else if (i + 1 < argc) {
        value = argv[++i];
      } else {
        return absl::InvalidArgumentError(absl::StrCat("flag --", name, " needs a value"));
      }
    }
    if (!f->set(value)) {
      return absl::InvalidArgumentError(
          absl::StrCat("bad value \"", value, "\" for --", name));
    }
  }
  return positional;
}

std::optional<int> FlagSet::ParseOrExitStatus(int argc, char** argv,
                                              const std::string& program, int error_status) {
  auto args = Parse(argc, argv);
  if (help_requested_) {
    std::fputs(Usage().c_str(), stdout);
    return 0;
  }
  if (!args.ok()) {
    std::fprintf(stderr, "%s: %s\n", program.c_str(),
                 std::string(args.status().message()).c_str());
    return error_status;
  }
  if (!args->empty()) {
    std::fprintf(stderr, "%s: unexpected argument \"%s\" (see --help)\n", program.c_str(),
                 (*args)[0].c_str());
    return error_status;
  }
  return std::nullopt;
}

std::string FlagSet::Usage() const {
  std::string out = absl::StrCat(usage_, "\n\nFlags:\n");
  for (const Flag& f : flags_) {
    absl::StrAppend(&out, "  --", f.name, f.is_bool ? "" : "=VALUE",
                    "  (default: ", f.default_text, ")\n      ", f.help, "\n");
  }
  absl::StrAppend(&out, "  --help\n      Show this help.\n");
  return out;
}

}  // namespace walship
