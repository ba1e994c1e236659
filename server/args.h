// A small command-line flag parser shared by every subcommand: `--name value`, `--name=value`,
// boolean `--name` / `--name=false`, positional arguments, required flags and generated usage.
// Errors name the flag and the offending value; nothing is silently ignored.
#ifndef STEPSERVE_SERVER_ARGS_H_
#define STEPSERVE_SERVER_ARGS_H_

#include <cstdint>
#include <functional>
#include <string>
#include <vector>

#include "absl/status/status.h"

namespace stepserve::cli {

class ArgParser {
 public:
  ArgParser(std::string program, std::string description);

  // Each Add* registers a flag written as `--name`. `out` keeps its value as the default.
  void AddString(std::string name, std::string* out, std::string help, bool required = false);
  void AddInt(std::string name, int64_t* out, std::string help, bool required = false);
  void AddDouble(std::string name, double* out, std::string help, bool required = false);
  void AddBool(std::string name, bool* out, std::string help);
  // A flag that may repeat; each occurrence appends.
  void AddRepeated(std::string name, std::vector<std::string>* out, std::string help);
  // Positional arguments are filled in order.
  void AddPositional(std::string name, std::string* out, std::string help, bool required = true);

  // argv[0] is the program or subcommand name and is skipped.
  absl::Status Parse(int argc, char** argv);
  // True after Parse saw --help or -h; the caller prints Usage() and exits 0.
  bool help_requested() const { return help_requested_; }
  // Whether a flag was given explicitly on the command line.
  bool WasSet(const std::string& name) const;
  std::string Usage() const;

 private:
  struct Option {
    std::string name;
    std::string help;
    std::string default_text;
    bool is_bool = false;
    bool required = false;
    bool positional = false;
    bool set = false;
    std::function<absl::Status(const std::string&)> assign;
  };
  Option* Find(const std::string& name);

  std::string program_;
  std::string description_;
  std::vector<Option> options_;
  bool help_requested_ = false;
};

// Runs `parser.Parse`; on --help prints usage to stdout and returns 0 through `exit_code`; on an
// error prints the message and usage to stderr and returns 2. Returns true when the caller
// should go on.
bool ParseOrExit(ArgParser& parser, int argc, char** argv, int* exit_code);

}  // namespace stepserve::cli

#endif  // STEPSERVE_SERVER_ARGS_H_
