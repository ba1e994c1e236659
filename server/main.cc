// stepserve: one binary, many subcommands (`stepserve help` lists them).
#include <cstdio>
#include <cstring>
#include <string_view>

#include "server/subcommand.h"

namespace {

void PrintUsage(FILE* out) {
  std::fprintf(out, "usage: stepserve <command> [options]\n\ncommands:\n");
  for (const auto& subcommand : stepserve::cli::Subcommands()) {
    std::fprintf(out, "  %-14.*s %.*s\n", static_cast<int>(subcommand.name.size()),
                 subcommand.name.data(), static_cast<int>(subcommand.summary.size()),
                 subcommand.summary.data());
  }
  std::fprintf(out, "\n`stepserve <command> --help` describes a command's options.\n");
}

}  // namespace

int main(int argc, char** argv) {
  if (argc < 2) {
    PrintUsage(stderr);
    return 2;
  }
  std::string_view name = argv[1];
  if (name == "help" || name == "--help" || name == "-h") {
    PrintUsage(stdout);
    return 0;
  }
  if (name == "version" || name == "--version") {
    std::printf("stepserve %s\n", STEPSERVE_VERSION);
    return 0;
  }
  const stepserve::cli::Subcommand* subcommand = stepserve::cli::FindSubcommand(name);
  if (subcommand == nullptr) {
    std::fprintf(stderr, "stepserve: unknown command '%s'\n\n", argv[1]);
    PrintUsage(stderr);
    return 2;
  }
  return subcommand->run(argc - 1, argv + 1);
}
