// `stepserve gguf inspect FILE [--all-metadata]`: what a GGUF file (or split set) holds:
// architecture and key hyperparameters, all metadata, the tensor table, bytes per type, shards.
// The hyperparameter summary only reads keys generically; the model binding interprets them.
#include <cstdio>
#include <map>
#include <string>
#include <string_view>
#include <vector>

#include "absl/strings/str_format.h"
#include "engine/gguf/gguf_reader.h"
#include "server/args.h"
#include "server/subcommand.h"

namespace stepserve::cli {
namespace {

using gguf::Array;
using gguf::GgufFile;
using gguf::Metadata;
using gguf::Value;

std::string HumanBytes(uint64_t bytes) {
  const char* units[] = {"B", "KiB", "MiB", "GiB", "TiB"};
  double v = static_cast<double>(bytes);
  int u = 0;
  while (v >= 1024.0 && u < 4) {
    v /= 1024.0;
    ++u;
  }
  if (u == 0) return absl::StrFormat("%d B", bytes);
  return absl::StrFormat("%.2f %s", v, units[u]);
}

// A per-layer value (scalar or array) in a few words. With a same-length bool pattern (true =
// sliding-window layer) the distinct values are split by layer kind: "64 (full) / 96 (swa)".
std::string PerLayerSummary(const Value& value, const Value* swa_pattern) {
  const Array* array = value.AsArray();
  if (array == nullptr) return value.ToString();
  if (array->elems.empty()) return "[] (0 layers)";
  const Array* pattern = swa_pattern != nullptr ? swa_pattern->AsArray() : nullptr;
  bool split = pattern != nullptr && pattern->elem_type == gguf::ValueType::kBool &&
               pattern->elems.size() == array->elems.size();
  std::vector<std::string> full, swa, all;
  auto add_unique = [](std::vector<std::string>& list, std::string s) {
    for (const std::string& x : list) {
      if (x == s) return;
    }
    list.push_back(std::move(s));
  };
  for (size_t i = 0; i < array->elems.size(); ++i) {
    std::string s = array->elems[i].ToString();
    add_unique(all, s);
    if (split) {
      const bool* is_swa = std::get_if<bool>(&pattern->elems[i].storage());
      add_unique(is_swa != nullptr && *is_swa ? swa : full, s);
    }
  }
  auto join = [](const std::vector<std::string>& list) {
    std::string out;
    for (size_t i = 0; i < list.size(); ++i) out += (i > 0 ? "," : "") + list[i];
    return out;
  };
  std::string out;
  if (all.size() == 1) {
    out = all[0];
  } else if (split) {
    if (!full.empty()) out += join(full) + " (full)";
    if (!swa.empty()) out += std::string(out.empty() ? "" : " / ") + join(swa) + " (swa)";
  } else {
    out = join(all);
  }
  return absl::StrFormat("%s  [%d layers]", out, array->elems.size());
}

std::string PatternSummary(const Value& value) {
  const Array* array = value.AsArray();
  if (array == nullptr || array->elem_type != gguf::ValueType::kBool) return value.ToString();
  std::string bits;
  size_t n_swa = 0;
  for (const Value& e : array->elems) {
    bool b = std::get<bool>(e.storage());
    n_swa += b ? 1 : 0;
    bits.push_back(b ? 'S' : 'F');
  }
  if (bits.size() > 64) bits = bits.substr(0, 64) + "...";
  return absl::StrFormat("%d swa / %d full  %s", n_swa, array->elems.size() - n_swa, bits);
}

void PrintHyperparameters(const GgufFile& file) {
  const Metadata& md = file.metadata();
  std::string arch = file.architecture();
  std::printf("architecture: %s\n", arch.empty() ? "(none)" : arch.c_str());
  if (const Value* name = md.Find("general.name")) {
    std::printf("name:         %s\n", name->ToString().c_str());
  }
  if (arch.empty()) return;
  const Value* pattern = md.Find(arch + ".attention.sliding_window_pattern");
  struct Row {
    const char* label;
    std::vector<std::string> keys;  // first present wins... all present are shown, joined
    bool per_layer;
  };
  const std::vector<Row> rows = {
      {"block count", {"block_count"}, false},
      {"nextn layers", {"nextn_predict_layers"}, false},
      {"context length", {"context_length"}, false},
      {"embedding length", {"embedding_length"}, false},
      {"feed forward length", {"feed_forward_length"}, true},
      {"heads", {"attention.head_count"}, true},
      {"kv heads", {"attention.head_count_kv"}, true},
      {"key length", {"attention.key_length", "attention.key_length_swa"}, false},
      {"value length", {"attention.value_length", "attention.value_length_swa"}, false},
      {"rms norm eps", {"attention.layer_norm_rms_epsilon"}, false},
      {"sliding window", {"attention.sliding_window"}, false},
      {"expert count", {"expert_count"}, false},
      {"experts used", {"expert_used_count"}, false},
      {"expert width", {"expert_feed_forward_length"}, true},
      {"shared expert width", {"expert_shared_feed_forward_length"}, false},
      {"rope freq base", {"rope.freq_base", "rope.freq_base_swa"}, false},
      {"rope dims", {"rope.dimension_count", "rope.dimension_count_swa"}, false},
  };
  std::printf("hyperparameters:\n");
  for (const Row& row : rows) {
    std::string text;
    for (size_t k = 0; k < row.keys.size(); ++k) {
      const Value* v = md.Find(arch + "." + row.keys[k]);
      if (v == nullptr) continue;
      if (!text.empty()) text += " / ";
      text += row.per_layer ? PerLayerSummary(*v, pattern) : v->ToString();
      if (k > 0) text += " (swa)";
    }
    if (!text.empty()) std::printf("  %-22s %s\n", row.label, text.c_str());
  }
  if (pattern != nullptr)
    std::printf("  %-22s %s\n", "swa pattern", PatternSummary(*pattern).c_str());
  if (const Value* tokens = md.Find("tokenizer.ggml.tokens")) {
    if (const Array* a = tokens->AsArray()) {
      std::printf("  %-22s %zu\n", "vocab size", a->elems.size());
    }
  }
}

int RunInspect(int argc, char** argv) {
  std::string path;
  bool all_metadata = false;
  ArgParser parser("stepserve gguf inspect", "Describe a GGUF file or split set.");
  parser.AddPositional("file", &path, "the .gguf file (any shard of a split set)");
  parser.AddBool("all-metadata", &all_metadata, "print arrays in full instead of summarised");
  int exit_code = 0;
  if (!ParseOrExit(parser, argc, argv, &exit_code)) return exit_code;

  auto opened = GgufFile::Open(path);
  if (!opened.ok()) {
    std::fprintf(stderr, "stepserve gguf inspect: %s\n",
                 std::string(opened.status().message()).c_str());
    return 1;
  }
  const GgufFile& file = **opened;
  PrintHyperparameters(file);

  const Metadata& md = file.metadata();
  size_t max_elems = all_metadata ? static_cast<size_t>(-1) : 8;
  std::printf("\nmetadata (%zu keys):\n", md.size());
  for (const auto& [key, value] : md.entries()) {
    std::string type(gguf::ValueTypeName(value.type()));
    if (const Array* a = value.AsArray()) {
      type = absl::StrFormat("arr[%s,%d]", gguf::ValueTypeName(a->elem_type), a->elems.size());
    }
    std::printf("  %-48s %-14s %s\n", key.c_str(), type.c_str(), value.ToString(max_elems).c_str());
  }

  std::printf("\ntensors (%zu):\n", file.tensors().size());
  std::printf("  %-48s %-8s %-24s %14s %5s\n", "name", "type", "shape", "bytes", "shard");
  std::map<std::string, std::pair<size_t, uint64_t>> per_type;
  for (const gguf::TensorInfo& t : file.tensors()) {
    std::string type(GgmlTypeName(t.type));
    std::printf("  %-48s %-8s %-24s %14llu %5d\n", t.name.c_str(), type.c_str(),
                t.ShapeString().c_str(), static_cast<unsigned long long>(t.nbytes), t.shard);
    auto& [count, bytes] = per_type[type];
    ++count;
    bytes += t.nbytes;
  }
  std::printf("\nbytes per type:\n");
  for (const auto& [type, cb] : per_type) {
    std::printf("  %-8s %6zu tensors %14llu bytes (%s)\n", type.c_str(), cb.first,
                static_cast<unsigned long long>(cb.second), HumanBytes(cb.second).c_str());
  }
  uint64_t total = file.total_tensor_bytes();
  std::printf("total: %zu tensors, %llu bytes (%s)\n", file.tensors().size(),
              static_cast<unsigned long long>(total), HumanBytes(total).c_str());

  std::printf("\nshards (%zu):\n", file.shards().size());
  for (size_t i = 0; i < file.shards().size(); ++i) {
    const gguf::ShardInfo& s = file.shards()[i];
    std::printf("  %zu: %s  v%u  %lld tensors  %lld kv  alignment %u  data at %llu  %llu bytes\n",
                i, s.path.c_str(), s.version, static_cast<long long>(s.n_tensors),
                static_cast<long long>(s.n_kv), s.alignment,
                static_cast<unsigned long long>(s.data_offset),
                static_cast<unsigned long long>(s.file_size));
  }
  return 0;
}

int RunGguf(int argc, char** argv) {
  const char* usage =
      "usage: stepserve gguf inspect FILE [--all-metadata]\n"
      "  inspect   describe a GGUF file or split set\n";
  if (argc < 2) {
    std::fputs(usage, stderr);
    return 2;
  }
  std::string_view verb = argv[1];
  if (verb == "--help" || verb == "-h" || verb == "help") {
    std::fputs(usage, stdout);
    return 0;
  }
  if (verb == "inspect") return RunInspect(argc - 1, argv + 1);
  std::fprintf(stderr, "stepserve gguf: unknown verb '%s'\n%s", argv[1], usage);
  return 2;
}

}  // namespace

STEPSERVE_SUBCOMMAND("gguf", "GGUF tools: `gguf inspect FILE` describes a model file", RunGguf);

}  // namespace stepserve::cli
