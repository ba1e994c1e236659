#include "server/subcommand.h"

#include <algorithm>

namespace stepserve::cli {
namespace {

// Function-local static: registrations run during static initialisation of other files.
std::vector<Subcommand>& Registry() {
  static auto* registry = new std::vector<Subcommand>();
  return *registry;
}

}  // namespace

bool RegisterSubcommand(const Subcommand& subcommand) {
  Registry().push_back(subcommand);
  return true;
}

std::vector<Subcommand> Subcommands() {
  std::vector<Subcommand> sorted = Registry();
  std::sort(sorted.begin(), sorted.end(),
            [](const Subcommand& a, const Subcommand& b) { return a.name < b.name; });
  return sorted;
}

const Subcommand* FindSubcommand(std::string_view name) {
  for (const Subcommand& subcommand : Registry()) {
    if (subcommand.name == name) return &subcommand;
  }
  return nullptr;
}

}  // namespace stepserve::cli
