// Registry of `stepserve <subcommand>` entry points. Each subcommand file in server/cli/ registers
// itself with STEPSERVE_SUBCOMMAND so main.cc never needs editing when one is added.
#ifndef STEPSERVE_SERVER_SUBCOMMAND_H_
#define STEPSERVE_SERVER_SUBCOMMAND_H_

#include <string_view>
#include <vector>

namespace stepserve::cli {

// Runs a subcommand. argv[0] is the subcommand's own name; the return value is the exit code.
using SubcommandFn = int (*)(int argc, char** argv);

struct Subcommand {
  std::string_view name;     // e.g. "make-model"
  std::string_view summary;  // one line for `stepserve help`
  SubcommandFn run;
};

bool RegisterSubcommand(const Subcommand& subcommand);
// Sorted by name.
std::vector<Subcommand> Subcommands();
const Subcommand* FindSubcommand(std::string_view name);

}  // namespace stepserve::cli

#define STEPSERVE_SUBCOMMAND(name, summary, fn)                       \
  [[maybe_unused]] static const bool stepserve_subcommand_registered_ = \
      ::stepserve::cli::RegisterSubcommand({name, summary, fn})

#endif  // STEPSERVE_SERVER_SUBCOMMAND_H_
