#include "services/bench/tokenize/tokenize_bench.h"

#include <malloc.h>

#include <CLI/CLI.hpp>
#include <chrono>
#include <cstdio>
#include <filesystem>
#include <fstream>
#include <iostream>
#include <nlohmann/json.hpp>
#include <sstream>
#include <string>
#include <vector>

#include "services/bench/host/host_info.h"
#include "shared/config/cli.h"
#include "shared/tokenize/prefix_cache.h"
#include "shared/tokenize/registry.h"
#include "shared/tokenize/tokenizer.h"
#include "shared/tokenize/utf8.h"

namespace kvindex::bench {
namespace {

using Clock = std::chrono::steady_clock;
using tokenize::Tokenizer;

size_t RssBytes() {
  std::ifstream status("/proc/self/status");
  std::string line;
  while (std::getline(status, line)) {
    if (line.rfind("VmRSS:", 0) == 0) return std::stoull(line.substr(6)) * 1024;
  }
  return 0;
}

// Real text: documentation and headers Debian installs, valid UTF-8 only.
std::string DefaultText(size_t bytes) {
  std::string text;
  for (const char* root : {"/usr/share/common-licenses", "/usr/include/c++", "/usr/share/doc"}) {
    std::error_code ec;
    for (auto it = std::filesystem::recursive_directory_iterator(root, ec);
         !ec && it != std::filesystem::recursive_directory_iterator() && text.size() < bytes;
         it.increment(ec)) {
      if (!it->is_regular_file(ec) || it->file_size(ec) > (1 << 20)) continue;
      std::ifstream in(it->path(), std::ios::binary);
      std::string data((std::istreambuf_iterator<char>(in)), std::istreambuf_iterator<char>());
      if (data.find('\0') != std::string::npos ||
          tokenize::FindInvalidUtf8(data) != std::string::npos) {
        continue;
      }
      text += data;
    }
  }
  return text;
}

// `text` cut to at most `bytes` at a code point boundary.
std::string Prefix(const std::string& text, size_t bytes) {
  size_t n = std::min(bytes, text.size());
  while (n > 0 && n < text.size() && (static_cast<unsigned char>(text[n]) & 0xC0) == 0x80) --n;
  return text.substr(0, n);
}

struct Timing {
  double seconds = 0;  // per encode
  size_t tokens = 0;
};

Timing Time(const Tokenizer& tok, const std::string& input) {
  Timing t;
  t.tokens = tok.Encode(input)->size();
  size_t runs = 0;
  const auto start = Clock::now();
  double elapsed = 0;
  while (elapsed < 0.3 || runs < 3) {
    auto ids = tok.Encode(input);
    ++runs;
    elapsed = std::chrono::duration<double>(Clock::now() - start).count();
  }
  t.seconds = elapsed / static_cast<double>(runs);
  return t;
}

// The encodes `--profile-32k` counts: callgrind's --toggle-collect names
// this function, so the instructions of exactly `runs` warm encodes of the
// prompt are counted, load-independent.
[[gnu::noinline]] size_t ProfiledEncodes(const Tokenizer& tok, const std::string& prompt,
                                         int runs) {
  size_t tokens = 0;
  for (int i = 0; i < runs; ++i) tokens += tok.Encode(prompt)->size();
  return tokens;
}

// One turn after the first of the 20-turn conversation (callgrind names it
// too: the instructions of turns 2-20).
[[gnu::noinline]] StatusOr<std::vector<uint32_t>> ProfiledTurn(tokenize::PrefixCache* cache,
                                                               const std::string& prompt) {
  return cache->Encode(prompt);
}

// 20-turn conversation through the prefix cache: each turn appends the
// end-of-turn token and ~1 KB of new text to the previous prompt.
nlohmann::ordered_json Conversation(const Tokenizer& tok, const std::string& text, bool* exact) {
  tokenize::PrefixCache cache(&tok, {});
  std::string prompt;
  double new_seconds = 0;
  size_t new_bytes = 0;
  *exact = true;
  const std::string sep = tok.eos_token().empty() ? "\n" : tok.eos_token() + "\n";
  for (int turn = 0; turn < 20; ++turn) {
    std::string added = sep + Prefix(text.substr(size_t(turn) * 4096), 1024);
    while (tokenize::FindInvalidUtf8(added) != std::string::npos) added.pop_back();
    prompt += added;
    const auto start = Clock::now();
    auto ids = turn == 0 ? cache.Encode(prompt) : ProfiledTurn(&cache, prompt);
    const double s = std::chrono::duration<double>(Clock::now() - start).count();
    if (turn > 0) {
      new_seconds += s;
      new_bytes += added.size();
    }
    *exact = *exact && ids.ok() && *ids == *tok.Encode(prompt);
  }
  auto stats = cache.stats();
  return {{"us_per_new_kb", new_seconds * 1e6 / (static_cast<double>(new_bytes) / 1024)},
          {"final_prompt_bytes", prompt.size()},
          {"hits", stats.hits},
          {"bytes_reused", stats.bytes_reused},
          {"bytes_encoded", stats.bytes_encoded},
          {"exact", *exact}};
}

}  // namespace

int RunTokenizeBench(int argc, char** argv) {
  std::vector<std::string> specs;
  std::string text_file,
      hf_modules = std::string(KVINDEX_SOURCE_ROOT) + "/.cache/tokenize-ref/node/node_modules";
  bool json = false, no_hf = false;
  int profile_runs = 0;
  CLI::App app{"Tokenizer throughput per model next to Hugging Face tokenizers (Node binding)",
               "kvindex-bench tokenize"};
  app.add_option("--tokenizer", specs, "MODEL=DIR (repeatable)")->required();
  app.add_option("--text-file", text_file,
                 "Input text (default: 1 MB from /usr/share, /usr/include)");
  app.add_option("--hf-node-modules", hf_modules,
                 "node_modules with `tokenizers` (shared/tokenize/exactness/fetch-reference.sh)")
      ->capture_default_str();
  app.add_flag("--no-hf", no_hf, "Skip the Hugging Face baseline");
  app.add_flag("--json", json, "Print one JSON object per model");
  app.add_option("--profile-32k", profile_runs,
                 "Only encode the ~32k-token prompt this many times (warm word caches) in "
                 "ProfiledEncodes, then the 20-turn conversation (turns 2-20 in ProfiledTurn), "
                 "for valgrind --tool=callgrind --toggle-collect=*ProfiledEncodes* "
                 "--toggle-collect=*ProfiledTurn*");
  if (std::optional<int> exit_code = config::Parse(app, argc, argv)) return *exit_code;

  std::string text;
  if (!text_file.empty()) {
    std::ifstream in(text_file, std::ios::binary);
    text.assign(std::istreambuf_iterator<char>(in), std::istreambuf_iterator<char>());
  } else {
    text = DefaultText(size_t{1} << 20);
  }
  if (text.size() < (size_t{1} << 20) || tokenize::FindInvalidUtf8(text) != std::string::npos) {
    std::cerr << "kvindex-bench tokenize: need at least 1 MB of UTF-8 text\n";
    return 1;
  }
  const std::vector<std::pair<std::string, std::string>> inputs = {
      {"1KB", Prefix(text, 1024)},
      {"32KB", Prefix(text, 32 * 1024)},
      {"1MB", Prefix(text, size_t{1} << 20)}};
  const std::string tmp = std::filesystem::temp_directory_path() /
                          ("kvindex-bench-tokenize-" + std::to_string(::getpid()));
  std::filesystem::create_directories(tmp);
  for (const auto& [name, input] : inputs) std::ofstream(tmp + "/" + name + ".txt") << input;
  const bool hf = !no_hf && std::filesystem::exists(hf_modules + "/tokenizers");

  int rc = 0;
  for (const std::string& spec : specs) {
    std::string model, dir;
    if (Status s = tokenize::TokenizerRegistry::ParseSpec(spec, &model, &dir); !s.ok()) {
      std::cerr << "kvindex-bench tokenize: " << s.message() << '\n';
      return 2;
    }
    malloc_trim(0);
    const size_t rss0 = RssBytes();
    const auto load_start = Clock::now();
    auto loaded = Tokenizer::Load(dir);
    const double load_ms =
        std::chrono::duration<double, std::milli>(Clock::now() - load_start).count();
    if (!loaded.ok()) {
      std::cerr << "kvindex-bench tokenize: " << loaded.status().message() << '\n';
      rc = 1;
      continue;
    }
    const size_t rss = RssBytes() - rss0;
    const Tokenizer& tok = **loaded;
    nlohmann::ordered_json j = {{"model", model}, {"load_ms", load_ms}, {"rss_bytes", rss}};

    if (profile_runs > 0) {
      const std::string& all = inputs[2].second;
      const double ratio =
          static_cast<double>(all.size()) / static_cast<double>(tok.Encode(all)->size());
      const std::string prompt = Prefix(text, static_cast<size_t>(32768 * ratio));
      const size_t tokens = ProfiledEncodes(tok, prompt, profile_runs);
      bool exact = true;
      const nlohmann::ordered_json turns = Conversation(tok, text, &exact);
      std::printf("%s: %d encodes of a %zu-byte prompt, %zu tokens each; conversation %s\n",
                  model.c_str(), profile_runs, prompt.size(),
                  tokens / static_cast<size_t>(profile_runs), turns.dump().c_str());
      if (!exact) rc = 1;
      continue;
    }

    nlohmann::ordered_json sizes = nlohmann::ordered_json::array();
    std::vector<double> ours_mbps;
    for (const auto& [name, input] : inputs) {
      Timing t = Time(tok, input);
      double mbps = static_cast<double>(input.size()) / t.seconds / 1e6;
      ours_mbps.push_back(mbps);
      sizes.push_back({{"input", name},
                       {"bytes", input.size()},
                       {"tokens", t.tokens},
                       {"mb_per_s", mbps},
                       {"tokens_per_s", static_cast<double>(t.tokens) / t.seconds}});
    }

    // A ~32k-token prompt: the prefix of the text holding 32768 tokens.
    {
      auto all = tok.Encode(inputs[2].second);
      double ratio =
          static_cast<double>(inputs[2].second.size()) / static_cast<double>(all->size());
      std::string prompt = Prefix(text, static_cast<size_t>(32768 * ratio));
      Timing t = Time(tok, prompt);
      j["prompt_32k"] = {{"bytes", prompt.size()}, {"tokens", t.tokens}, {"ms", t.seconds * 1e3}};
    }

    {
      bool exact = true;
      j["conversation_20_turns"] = Conversation(tok, text, &exact);
      if (!exact) rc = 1;
    }

    if (hf) {
      std::string command = "node '" + std::string(KVINDEX_TOKENIZE_HF_BENCH) + "' '" + hf_modules +
                            "' '" + dir + "/tokenizer.json'";
      for (const auto& [name, input] : inputs) command += " '" + tmp + "/" + name + ".txt'";
      std::string out;
      if (FILE* pipe = popen(command.c_str(), "r")) {
        char buffer[4096];
        size_t n;
        while ((n = fread(buffer, 1, sizeof(buffer), pipe)) > 0) out.append(buffer, n);
        pclose(pipe);
      }
      try {
        auto h = nlohmann::json::parse(out);
        j["hf"] = h;
        for (size_t i = 0; i < sizes.size() && i < h["inputs"].size(); ++i) {
          double hf_mbps = h["inputs"][i]["mb_per_s"].get<double>();
          sizes[i]["hf_mb_per_s"] = hf_mbps;
          sizes[i]["speedup"] = ours_mbps[i] / hf_mbps;
          if (h["inputs"][i]["tokens"].get<size_t>() != sizes[i]["tokens"].get<size_t>()) {
            sizes[i]["token_count_differs_from_hf"] = true;
            rc = 1;
          }
        }
      } catch (const nlohmann::json::exception&) {
        j["hf"] = "failed: " + out.substr(0, 200);
      }
    }
    j["sizes"] = sizes;
    j["host"] = HostJson();
    if (json) {
      std::cout << j.dump() << std::endl;
    } else {
      std::printf(
          "%s: load %.0f ms, RSS +%.1f MB, 32k-token prompt %.2f ms, next turn %.1f us/KB\n",
          model.c_str(), load_ms, static_cast<double>(rss) / 1e6,
          j["prompt_32k"]["ms"].get<double>(),
          j["conversation_20_turns"]["us_per_new_kb"].get<double>());
      for (const auto& s : sizes) {
        std::printf("  %-5s %8.2f MB/s %10.0f tokens/s", s["input"].get<std::string>().c_str(),
                    s["mb_per_s"].get<double>(), s["tokens_per_s"].get<double>());
        if (s.contains("hf_mb_per_s")) {
          std::printf("   HF %6.2f MB/s  x%.2f", s["hf_mb_per_s"].get<double>(),
                      s["speedup"].get<double>());
        }
        std::printf("\n");
      }
      std::fflush(stdout);
    }
  }
  std::filesystem::remove_all(tmp);
  return rc;
}

}  // namespace kvindex::bench
