#include "server/args.h"

#include <cstdio>

#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"

namespace stepserve::cli {

ArgParser::ArgParser(std::string program, std::string description)
    : program_(std::move(program)), description_(std::move(description)) {}

void ArgParser::AddString(std::string name, std::string* out, std::string help, bool required) {
  options_.push_back({.name = std::move(name), .help = std::move(help), .default_text = *out,
                      .required = required, .assign = [out](const std::string& v) {
                        *out = v;
                        return absl::OkStatus();
                      }});
}

void ArgParser::AddInt(std::string name, int64_t* out, std::string help, bool required) {
  std::string flag = name;
  options_.push_back({.name = std::move(name), .help = std::move(help),
                      .default_text = absl::StrCat(*out), .required = required,
                      .assign = [out, flag](const std::string& v) {
                        if (!absl::SimpleAtoi(v, out)) {
                          return absl::InvalidArgumentError(
                              absl::StrFormat("--%s: '%s' is not an integer", flag, v));
                        }
                        return absl::OkStatus();
                      }});
}

void ArgParser::AddDouble(std::string name, double* out, std::string help, bool required) {
  std::string flag = name;
  options_.push_back({.name = std::move(name), .help = std::move(help),
                      .default_text = absl::StrCat(*out), .required = required,
                      .assign = [out, flag](const std::string& v) {
                        if (!absl::SimpleAtod(v, out)) {
                          return absl::InvalidArgumentError(
                              absl::StrFormat("--%s: '%s' is not a number", flag, v));
                        }
                        return absl::OkStatus();
                      }});
}

void ArgParser::AddBool(std::string name, bool* out, std::string help) {
  std::string flag = name;
  options_.push_back({.name = std::move(name), .help = std::move(help),
                      .default_text = *out ? "true" : "false", .is_bool = true,
                      .assign = [out, flag](const std::string& v) {
                        if (!absl::SimpleAtob(v, out)) {
                          return absl::InvalidArgumentError(
                              absl::StrFormat("--%s: '%s' is not true or false", flag, v));
                        }
                        return absl::OkStatus();
                      }});
}

void ArgParser::AddRepeated(std::string name, std::vector<std::string>* out, std::string help) {
  options_.push_back({.name = std::move(name), .help = std::move(help),
                      .assign = [out](const std::string& v) {
                        out->push_back(v);
                        return absl::OkStatus();
                      }});
}

void ArgParser::AddPositional(std::string name, std::string* out, std::string help,
                              bool required) {
  options_.push_back({.name = std::move(name), .help = std::move(help), .default_text = *out,
                      .required = required, .positional = true,
                      .assign = [out](const std::string& v) {
                        *out = v;
                        return absl::OkStatus();
                      }});
}

ArgParser::Option* ArgParser::Find(const std::string& name) {
  for (Option& option : options_) {
    if (!option.positional && option.name == name) return &option;
  }
  return nullptr;
}

bool ArgParser::WasSet(const std::string& name) const {
  for (const Option& option : options_) {
    if (option.name == name) return option.set;
  }
  return false;
}

absl::Status ArgParser::Parse(int argc, char** argv) {
  size_t next_positional = 0;
  for (int i = 1; i < argc; ++i) {
    std::string arg = argv[i];
    if (arg == "--help" || arg == "-h") {
      help_requested_ = true;
      return absl::OkStatus();
    }
    if (arg.size() > 2 && arg.compare(0, 2, "--") == 0) {
      std::string name = arg.substr(2);
      std::string value;
      bool has_value = false;
      if (size_t eq = name.find('='); eq != std::string::npos) {
        value = name.substr(eq + 1);
        name = name.substr(0, eq);
        has_value = true;
      }
      Option* option = Find(name);
      if (option == nullptr) {
        return absl::InvalidArgumentError(absl::StrFormat("unknown flag --%s", name));
      }
      if (!has_value) {
        if (option->is_bool) {
          value = "true";
        } else if (i + 1 < argc) {
          value = argv[++i];
        } else {
          return absl::InvalidArgumentError(absl::StrFormat("--%s needs a value", name));
        }
      }
      if (absl::Status status = option->assign(value); !status.ok()) return status;
      option->set = true;
      continue;
    }
    // Positional argument.
    size_t seen = 0;
    Option* target = nullptr;
    for (Option& option : options_) {
      if (!option.positional) continue;
      if (seen++ == next_positional) {
        target = &option;
        break;
      }
    }
    if (target == nullptr) {
      return absl::InvalidArgumentError(absl::StrFormat("unexpected argument '%s'", arg));
    }
    ++next_positional;
    if (absl::Status status = target->assign(arg); !status.ok()) return status;
    target->set = true;
  }
  for (const Option& option : options_) {
    if (option.required && !option.set) {
      return absl::InvalidArgumentError(option.positional
                                            ? absl::StrFormat("missing argument %s", option.name)
                                            : absl::StrFormat("missing required flag --%s",
                                                              option.name));
    }
  }
  return absl::OkStatus();
}

std::string ArgParser::Usage() const {
  std::string usage = absl::StrCat("usage: stepserve ", program_);
  for (const Option& option : options_) {
    if (option.positional) absl::StrAppend(&usage, " ", option.required ? "" : "[", option.name,
                                           option.required ? "" : "]");
  }
  absl::StrAppend(&usage, " [options]\n\n", description_, "\n\noptions:\n");
  for (const Option& option : options_) {
    std::string left = option.positional ? option.name
                                         : absl::StrCat("--", option.name,
                                                        option.is_bool ? "" : " VALUE");
    std::string right = option.help;
    if (option.required && !option.positional) absl::StrAppend(&right, " (required)");
    if (!option.default_text.empty() && !option.required) {
      absl::StrAppend(&right, " [default: ", option.default_text, "]");
    }
    absl::StrAppend(&usage, absl::StrFormat("  %-26s %s\n", left, right));
  }
  return usage;
}

bool ParseOrExit(ArgParser& parser, int argc, char** argv, int* exit_code) {
  absl::Status status = parser.Parse(argc, argv);
  if (!status.ok()) {
    std::fprintf(stderr, "error: %s\n\n%s", std::string(status.message()).c_str(),
                 parser.Usage().c_str());
    *exit_code = 2;
    return false;
  }
  if (parser.help_requested()) {
    std::fputs(parser.Usage().c_str(), stdout);
    *exit_code = 0;
    return false;
  }
  return true;
}

}  // namespace stepserve::cli
