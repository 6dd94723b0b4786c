#include "common/flags.h"

#include <fcntl.h>

#include <cerrno>
#include <cstdio>
#include <cstring>

#include <toml++/toml.h>

#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "absl/strings/str_split.h"
#include "common/sys/file_util.h"
#include "common/sys/unique_fd.h"

namespace walship {
namespace {

// A TOML basic string: quotes, backslashes and control characters escaped;
// other bytes (UTF-8) as they are.
std::string TomlQuote(const std::string& s) {
  std::string out = "\"";
  for (unsigned char c : s) {
    switch (c) {
      case '"': out += "\\\""; break;
      case '\\': out += "\\\\"; break;
      case '\n': out += "\\n"; break;
      case '\t': out += "\\t"; break;
      default:
        if (c < 0x20 || c == 0x7f) {
          out += absl::StrFormat("\\u%04X", c);
        } else {
          out += static_cast<char>(c);
        }
    }
  }
  return out + "\"";
}

const char* TomlTypeName(const toml::node& v) {
  switch (v.type()) {
    case toml::node_type::string: return "a string";
    case toml::node_type::integer: return "an integer";
    case toml::node_type::floating_point: return "a float";
    case toml::node_type::boolean: return "a boolean";
    case toml::node_type::table: return "a table";
    case toml::node_type::array: return "an array";
    default: return "a date or time";
  }
}

// Word-wraps `text` into "# " comment lines of at most ~78 columns.
std::string CommentLines(const std::string& text) {
  std::string out, line;
  for (absl::string_view word : absl::StrSplit(text, absl::ByAnyChar(" \n"), absl::SkipEmpty())) {
    if (!line.empty() && line.size() + 1 + word.size() > 76) {
      absl::StrAppend(&out, "# ", line, "\n");
      line.clear();
    }
    if (!line.empty()) line += ' ';
    absl::StrAppend(&line, word);
  }
  if (!line.empty()) absl::StrAppend(&out, "# ", line, "\n");
  return out;
}

}  // namespace

FlagSet::FlagSet(std::string usage) : usage_(std::move(usage)) {}

void FlagSet::Add(Flag flag) {
  if (duplicate_.empty() && Find(flag.name) != nullptr) duplicate_ = flag.name;
  flags_.push_back(std::move(flag));
}

void FlagSet::String(const std::string& name, std::string* target,
                     const std::string& help) {
  Add({name, help, target->empty() ? "\"\"" : *target, false,
                    [target](const std::string& v) {
                      *target = v;
                      return true;
                    },
                    Kind::kString, [target] { return TomlQuote(*target); }});
}

void FlagSet::Int(const std::string& name, int64_t* target, const std::string& help) {
  Add({name, help, std::to_string(*target), false,
                    [target](const std::string& v) { return absl::SimpleAtoi(v, target); },
                    Kind::kInt, [target] { return std::to_string(*target); }});
}

void FlagSet::Uint(const std::string& name, uint64_t* target, const std::string& help) {
  Add({name, help, std::to_string(*target), false,
                    [target](const std::string& v) { return absl::SimpleAtoi(v, target); },
                    Kind::kUint, [target] { return std::to_string(*target); }});
}

void FlagSet::Bool(const std::string& name, bool* target, const std::string& help) {
  Add({name, help, *target ? "true" : "false", true,
       [target](const std::string& v) { return absl::SimpleAtob(v, target); }, Kind::kBool,
       [target] { return std::string(*target ? "true" : "false"); }});
}

void FlagSet::Milliseconds(const std::string& name, absl::Duration* target,
                           const std::string& help) {
  WholeUnits(name, target, absl::Milliseconds(1), help);
}

void FlagSet::Microseconds(const std::string& name, absl::Duration* target,
                           const std::string& help) {
  WholeUnits(name, target, absl::Microseconds(1), help);
}

void FlagSet::WholeUnits(const std::string& name, absl::Duration* target, absl::Duration unit,
                         const std::string& help) {
  auto text = [target, unit] {
    absl::Duration rest;
    return std::to_string(absl::IDivDuration(*target, unit, &rest));
  };
  Add({name, help, text(), false,
       [target, unit](const std::string& v) {
         int64_t n = 0;
         if (!absl::SimpleAtoi(v, &n)) return false;
         *target = n * unit;
         return true;
       },
       Kind::kInt, text});
}

void FlagSet::EnableConfigFile(sys::SysCalls& sys) {
  if (config_sys_ != nullptr) return;
  config_sys_ = &sys;
  Add({"config", "TOML file of flag values (keys are flag names, e.g. "
                              "wal-dir = \"/x\"); flags on the command line override it.",
                    "none", false,
                    [this](const std::string& v) {
                      config_path_ = v;  // already applied by Parse()'s first pass
                      return true;
                    },
                    Kind::kString, nullptr});
  Add({"print-config",
                    "Print the effective configuration (every flag, as a file --config "
                    "loads) and exit.",
                    "false", true,
                    [this](const std::string& v) { return absl::SimpleAtob(v, &print_config_); },
                    Kind::kBool, nullptr});
}

absl::Status FlagSet::ApplyConfig(const std::string& toml_text,
                                  const std::string& source_name) {
  toml::table table;
  try {
    table = toml::parse(toml_text, source_name);
  } catch (const toml::parse_error& e) {
    return absl::InvalidArgumentError(absl::StrFormat(
        "config file %s:%d:%d: %s", source_name, e.source().begin.line,
        e.source().begin.column, std::string(e.description())));
  }
  for (auto&& [key, node] : table) {
    const std::string name(key.str());
    auto fail = [&](const std::string& why) {
      return absl::InvalidArgumentError(
          absl::StrCat("config file ", source_name, ": key \"", name, "\": ", why));
    };
    const Flag* f = Find(name);
    if (f == nullptr || !f->get) {
      return fail(f == nullptr ? "unknown key (keys are flag names, see --help)"
                               : "not allowed in a config file");
    }
    std::string value;
    switch (f->kind) {
      case Kind::kString:
        if (!node.is_string()) return fail(absl::StrCat("expected a string, got ", TomlTypeName(node)));
        value = node.as_string()->get();
        break;
      case Kind::kInt:
        if (!node.is_integer()) return fail(absl::StrCat("expected an integer, got ", TomlTypeName(node)));
        value = std::to_string(node.as_integer()->get());
        break;
      case Kind::kUint:
        if (!node.is_integer()) return fail(absl::StrCat("expected an integer, got ", TomlTypeName(node)));
        if (node.as_integer()->get() < 0) return fail("expected a non-negative integer");
        value = std::to_string(node.as_integer()->get());
        break;
      case Kind::kBool:
        if (!node.is_boolean()) return fail(absl::StrCat("expected true or false, got ", TomlTypeName(node)));
        value = node.as_boolean()->get() ? "true" : "false";
        break;
    }
    if (!f->set(value)) return fail(absl::StrCat("bad value ", value));
  }
  return absl::OkStatus();
}

absl::Status FlagSet::ApplyConfigFile(sys::SysCalls& sys, const std::string& path) {
  sys::SysResult opened;
  do {
    opened = sys.Open(path.c_str(), O_RDONLY | O_CLOEXEC, 0);
  } while (!opened.ok() && opened.err == EINTR);
  if (!opened.ok()) {
    return absl::NotFoundError(
        absl::StrCat("cannot read config file ", path, ": ", std::strerror(opened.err)));
  }
  const sys::UniqueFd fd(static_cast<int>(opened.rc));
  absl::StatusOr<std::string> text = sys::ReadToEnd(sys, fd.get(), path);
  if (!text.ok()) {
    return absl::InvalidArgumentError(absl::StrCat("cannot read config file ", path));
  }
  return ApplyConfig(*text, path);
}

std::string FlagSet::ConfigText() const {
  std::string out;
  for (const Flag& f : flags_) {
    if (!f.get) continue;
    absl::StrAppend(&out, CommentLines(f.help), f.name, " = ", f.get(), "\n\n");
  }
  return out;
}

const FlagSet::Flag* FlagSet::Find(const std::string& name) const {
  for (const Flag& f : flags_) {
    if (f.name == name) return &f;
  }
  return nullptr;
}

absl::StatusOr<std::vector<std::string>> FlagSet::Parse(int argc, char** argv,
                                                        int first) {
  if (!duplicate_.empty()) {
    return absl::InternalError(
        absl::StrCat("flag --", duplicate_, " is registered twice (a bug in this program)"));
  }
  std::vector<std::string> positional;
  if (config_sys_ != nullptr) {
    // First pass: find --config (the last one wins) so the file's values can
    // be overridden by every other flag, wherever they appear.
    std::string path;
    bool have = false;
    for (int i = first; i < argc; ++i) {
      std::string arg = argv[i];
      if (arg == "--" || arg == "--help" || arg == "-h") break;
      if (arg.compare(0, 9, "--config=") == 0) {
        path = arg.substr(9);
        have = true;
      } else if (arg == "--config" && i + 1 < argc) {
        path = argv[++i];
        have = true;
      } else if (arg.size() > 2 && arg.compare(0, 2, "--") == 0 &&
                 arg.find('=') == std::string::npos) {
        const Flag* f = Find(arg.substr(2));
        if (f != nullptr && !f->is_bool) ++i;  // skip its value
      }
    }
    if (have) {
      if (absl::Status s = ApplyConfigFile(*config_sys_, path); !s.ok()) return s;
    }
  }
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
  if (print_config_) {
    std::printf("# %s: effective configuration (load with --config=FILE)\n\n%s",
                program.c_str(), ConfigText().c_str());
    return 0;
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
