// kvindex_tokenize_check: compares our ids with Hugging Face's on a corpus
// (driven by tokenize_exactness.sh).
//
//   kvindex_tokenize_check TOKENIZER_DIR CORPUS.jsonl REFERENCE.bin [INVALID.bin]
//
// CORPUS.jsonl: one JSON string per line (a document). REFERENCE.bin: per
// document, uint32 add_special_tokens, uint32 n, n uint32 ids (little-endian),
// written by hf_reference.mjs. INVALID.bin: byte strings that are not UTF-8,
// each preceded by its uint32 length: every one must be refused, not encoded.
// Every document also goes through a PrefixCache as three growing prompts
// (its first third, two thirds, all of it): each must give what Encode
// gives, the last what Hugging Face gives; then as an edit of the cached
// document (its first two thirds, a space, its middle third): what Encode
// gives.
// Prints each mismatch (first differing position with context) and a summary;
// exits 1 on any mismatch.
#include <cstdio>
#include <cstring>
#include <fstream>
#include <iostream>
#include <nlohmann/json.hpp>
#include <string>
#include <vector>

#include "shared/tokenize/prefix_cache.h"
#include "shared/tokenize/tokenizer.h"

namespace {

bool ReadAll(const char* path, std::string* out) {
  std::ifstream in(path, std::ios::binary);
  if (!in) return false;
  out->assign(std::istreambuf_iterator<char>(in), std::istreambuf_iterator<char>());
  return true;
}

uint32_t U32(const std::string& data, size_t* pos) {
  uint32_t v = 0;
  if (*pos + 4 <= data.size()) std::memcpy(&v, data.data() + *pos, 4);
  *pos += 4;
  return v;
}

std::string Ids(const std::vector<uint32_t>& ids, size_t from, size_t to) {
  std::string s;
  for (size_t i = from; i < to && i < ids.size(); ++i) s += std::to_string(ids[i]) + " ";
  return s;
}

}  // namespace

int main(int argc, char** argv) {
  if (argc < 4) {
    std::fprintf(stderr, "usage: %s TOKENIZER_DIR CORPUS.jsonl REFERENCE.bin [INVALID.bin]\n",
                 argv[0]);
    return 2;
  }
  auto tokenizer = kvindex::tokenize::Tokenizer::Load(argv[1]);
  if (!tokenizer.ok()) {
    std::fprintf(stderr, "load: %s\n", tokenizer.status().ToString().c_str());
    return 1;
  }
  std::string reference;
  if (!ReadAll(argv[3], &reference)) {
    std::fprintf(stderr, "cannot read %s\n", argv[3]);
    return 1;
  }
  std::ifstream corpus(argv[2], std::ios::binary);
  if (!corpus) {
    std::fprintf(stderr, "cannot read %s\n", argv[2]);
    return 1;
  }
  size_t pos = 0, docs = 0, mismatches = 0, tokens = 0, bytes = 0, cache_mismatches = 0;
  kvindex::tokenize::PrefixCache cache(tokenizer->get(), {.max_entries = 16});
  auto boundary = [](const std::string& text, size_t at) {
    while (at < text.size() && (static_cast<unsigned char>(text[at]) & 0xC0) == 0x80) ++at;
    return at;
  };
  std::string line;
  while (std::getline(corpus, line)) {
    if (pos >= reference.size()) {
      std::fprintf(stderr, "reference ends before the corpus (document %zu)\n", docs);
      return 1;
    }
    std::string text = nlohmann::json::parse(line).get<std::string>();
    bool add_special = U32(reference, &pos) != 0;
    uint32_t n = U32(reference, &pos);
    std::vector<uint32_t> expected(n);
    for (uint32_t i = 0; i < n; ++i) expected[i] = U32(reference, &pos);
    auto ids = (*tokenizer)->Encode(text, add_special);
    ++docs;
    bytes += text.size();
    tokens += n;
    for (size_t cut :
         {boundary(text, text.size() / 3), boundary(text, text.size() * 2 / 3), text.size()}) {
      std::string prompt = text.substr(0, cut);
      auto cached = cache.Encode(prompt, add_special);
      auto direct = cut == text.size() ? ids : (*tokenizer)->Encode(prompt, add_special);
      if (!cached.ok() || !direct.ok() || *cached != *direct ||
          (cut == text.size() && *cached != expected)) {
        if (++cache_mismatches <= 5) {
          std::printf("doc %zu: the prefix cache differs on its first %zu bytes\n", docs - 1, cut);
        }
      }
    }
    {
      const size_t third = boundary(text, text.size() / 3);
      const size_t two_thirds = boundary(text, text.size() * 2 / 3);
      const std::string edited =
          text.substr(0, two_thirds) + " " + text.substr(third, two_thirds - third);
      auto cached = cache.Encode(edited, add_special);
      auto direct = (*tokenizer)->Encode(edited, add_special);
      if (!cached.ok() || !direct.ok() || *cached != *direct) {
        if (++cache_mismatches <= 5) {
          std::printf("doc %zu: the prefix cache differs on an edit at byte %zu\n", docs - 1,
                      two_thirds);
        }
      }
    }
    if (ids.ok() && *ids == expected) continue;
    ++mismatches;
    if (mismatches > 20) continue;
    if (!ids.ok()) {
      std::printf("doc %zu: error %s\n", docs - 1, ids.status().ToString().c_str());
      continue;
    }
    size_t at = 0;
    while (at < ids->size() && at < expected.size() && (*ids)[at] == expected[at]) ++at;
    size_t from = at > 5 ? at - 5 : 0;
    std::printf(
        "doc %zu (%zu bytes, add_special=%d): first difference at token %zu of %zu/%zu\n"
        "  ours: %s\n  hf:   %s\n  text: %s\n",
        docs - 1, text.size(), add_special, at, ids->size(), expected.size(),
        Ids(*ids, from, at + 8).c_str(), Ids(expected, from, at + 8).c_str(),
        nlohmann::json(text.substr(0, 300)).dump().c_str());
  }
  size_t invalid = 0, accepted = 0;
  if (argc > 4) {
    std::string data;
    if (!ReadAll(argv[4], &data)) {
      std::fprintf(stderr, "cannot read %s\n", argv[4]);
      return 1;
    }
    for (size_t p = 0; p + 4 <= data.size();) {
      uint32_t len = U32(data, &p);
      std::string bad = data.substr(p, len);
      p += len;
      ++invalid;
      if ((*tokenizer)->Encode(bad).ok()) {
        ++accepted;
        std::printf("invalid UTF-8 accepted (%u bytes)\n", len);
      }
    }
  }
  const auto stats = cache.stats();
  std::printf(
      "%s: %zu documents, %zu bytes, %zu tokens, %zu mismatches; %zu invalid inputs, %zu "
      "accepted; prefix cache: %zu mismatches, %llu hits, %llu misses, %llu bytes reused\n",
      argv[1], docs, bytes, tokens, mismatches, invalid, accepted, cache_mismatches,
      static_cast<unsigned long long>(stats.hits), static_cast<unsigned long long>(stats.misses),
      static_cast<unsigned long long>(stats.bytes_reused));
  return mismatches == 0 && cache_mismatches == 0 && accepted == 0 && docs > 0 ? 0 : 1;
}
