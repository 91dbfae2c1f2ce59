#include "shared/tokenize/normalizer.h"

#include <utf8proc.h>

#include <algorithm>
#include <cstdlib>
#include <cstring>
#include <nlohmann/json.hpp>

#include "absl/strings/str_cat.h"
#include "shared/tokenize/utf8.h"

namespace kvindex::tokenize {
namespace {

// Below U+0300 every code point is stable under NFC and NFD quick checks
// fail nowhere; text made only of them needs no composition pass.
bool BelowCombiningMarks(const std::string& text) {
  for (size_t i = 0; i < text.size(); ++i) {
    auto b = static_cast<unsigned char>(text[i]);
    if (b >= 0xCC) return false;  // lead bytes of U+0300 and above
  }
  return true;
}

void Utf8procMap(std::string* text, int options) {
  utf8proc_uint8_t* out = nullptr;
  utf8proc_ssize_t n = utf8proc_map(reinterpret_cast<const utf8proc_uint8_t*>(text->data()),
                                    static_cast<utf8proc_ssize_t>(text->size()), &out,
                                    static_cast<utf8proc_option_t>(options | UTF8PROC_STABLE));
  if (n >= 0) text->assign(reinterpret_cast<char*>(out), static_cast<size_t>(n));
  std::free(out);  // valid UTF-8 in, so utf8proc cannot fail but out of memory
}

void ReplaceAll(std::string* text, std::string_view from, std::string_view to) {
  if (from.size() == 1) {
    // One byte (" " -> "▁"): a count, then one pass writing the result, no
    // search call and no append per occurrence.
    const char c = from[0];
    const size_t hits = static_cast<size_t>(std::count(text->begin(), text->end(), c));
    if (hits == 0) return;
    std::string out(text->size() - hits + hits * to.size(), '\0');
    char* o = out.data();
    for (char b : *text) {
      if (b == c) {
        std::memcpy(o, to.data(), to.size());
        o += to.size();
      } else {
        *o++ = b;
      }
    }
    *text = std::move(out);
    return;
  }
  if (from.empty() || text->find(from) == std::string::npos) return;
  std::string out;
  out.reserve(text->size());
  size_t pos = 0;
  for (size_t hit; (hit = text->find(from, pos)) != std::string::npos; pos = hit + from.size()) {
    out.append(*text, pos, hit - pos);
    out.append(to);
  }
  out.append(*text, pos, std::string::npos);
  *text = std::move(out);
}

}  // namespace

StatusOr<Normalizer> Normalizer::FromJson(const nlohmann::json& spec) {
  Normalizer normalizer;
  if (!spec.is_null()) KVINDEX_RETURN_IF_ERROR(Add(spec, &normalizer.steps_));
  return normalizer;
}

Status Normalizer::Add(const nlohmann::json& spec, std::vector<Step>* steps) {
  if (!spec.is_object() || !spec.contains("type")) {
    return absl::InvalidArgumentError("normalizer without a type");
  }
  const std::string type = spec.at("type").get<std::string>();
  if (type == "Sequence") {
    for (const auto& inner : spec.at("normalizers")) KVINDEX_RETURN_IF_ERROR(Add(inner, steps));
    return Status();
  }
  Step step{};
  if (type == "NFC") {
    step.kind = Kind::kNfc;
  } else if (type == "NFD") {
    step.kind = Kind::kNfd;
  } else if (type == "NFKC") {
    step.kind = Kind::kNfkc;
  } else if (type == "NFKD") {
    step.kind = Kind::kNfkd;
  } else if (type == "Prepend") {
    step.kind = Kind::kPrepend;
    step.content = spec.at("prepend").get<std::string>();
  } else if (type == "Strip") {
    step.kind = Kind::kStrip;
    step.strip_left = spec.value("strip_left", false);
    step.strip_right = spec.value("strip_right", false);
  } else if (type == "Replace") {
    step.content = spec.at("content").get<std::string>();
    const auto& pattern = spec.at("pattern");
    if (pattern.contains("String")) {
      step.kind = Kind::kReplaceString;
      step.pattern = pattern.at("String").get<std::string>();
    } else if (pattern.contains("Regex")) {
      step.kind = Kind::kReplaceRegex;
      KVINDEX_ASSIGN_OR_RETURN(auto regex, Regex::Compile(pattern.at("Regex").get<std::string>()));
      step.regex = std::move(regex);
    } else {
      return absl::InvalidArgumentError("Replace normalizer without String or Regex pattern");
    }
  } else {
    return absl::UnimplementedError(absl::StrCat("unsupported normalizer type ", type));
  }
  steps->push_back(std::move(step));
  return Status();
}

std::optional<Normalizer::Charwise> Normalizer::CharwiseImages() const {
  if (steps_.empty()) return std::nullopt;
  Charwise charwise;
  std::vector<char32_t> replaced;
  for (const Step& step : steps_) {
    if (step.kind == Kind::kPrepend) continue;
    if (step.kind != Kind::kReplaceString || step.pattern.empty()) return std::nullopt;
    size_t len = 0;
    const char32_t cp = DecodeUtf8(step.pattern, 0, &len);
    if (len != step.pattern.size()) return std::nullopt;
    replaced.push_back(cp);
  }
  for (char32_t cp : replaced) {
    std::string image;
    AppendUtf8(cp, &image);
    // Replace steps cannot fail (no regex).
    if (!Apply(&image, /*segment_start=*/false).ok()) return std::nullopt;
    charwise.images[cp] = std::move(image);
  }
  // Prepend acts on a non-empty text only: its image is read off one
  // character's, that character's own image taken away.
  std::string probe = "a";
  if (!Apply(&probe).ok() || !probe.ends_with('a')) return std::nullopt;
  probe.pop_back();
  charwise.prepended = std::move(probe);
  return charwise;
}

Status Normalizer::Apply(std::string* text, bool segment_start) const {
  for (const Step& step : steps_) {
    switch (step.kind) {
      case Kind::kNfc:
        if (!BelowCombiningMarks(*text)) Utf8procMap(text, UTF8PROC_COMPOSE);
        break;
      case Kind::kNfd:
        Utf8procMap(text, UTF8PROC_DECOMPOSE);
        break;
      case Kind::kNfkc:
        Utf8procMap(text, UTF8PROC_COMPOSE | UTF8PROC_COMPAT);
        break;
      case Kind::kNfkd:
        Utf8procMap(text, UTF8PROC_DECOMPOSE | UTF8PROC_COMPAT);
        break;
      case Kind::kPrepend:
        if (segment_start && !text->empty()) text->insert(0, step.content);
        break;
      case Kind::kReplaceString:
        ReplaceAll(text, step.pattern, step.content);
        break;
      case Kind::kReplaceRegex: {
        std::string out;
        size_t last = 0;
        bool any = false;
        KVINDEX_RETURN_IF_ERROR(step.regex->ForEachMatch(*text, [&](size_t start, size_t end) {
          any = true;
          out.append(*text, last, start - last);
          out.append(step.content);
          last = end;
        }));
        if (any) {
          out.append(*text, last, std::string::npos);
          *text = std::move(out);
        }
        break;
      }
      case Kind::kStrip: {
        size_t begin = 0, end = text->size();
        size_t len = 0;
        while (step.strip_left && begin < end &&
               IsUnicodeWhitespace(DecodeUtf8(*text, begin, &len)))
          begin += len;
        while (step.strip_right && end > begin) {
          size_t p = end - 1;
          while (p > begin && (static_cast<unsigned char>((*text)[p]) & 0xC0) == 0x80) --p;
          if (!IsUnicodeWhitespace(DecodeUtf8(*text, p, &len))) break;
          end = p;
        }
        *text = text->substr(begin, end - begin);
        break;
      }
    }
  }
  return Status();
}

}  // namespace kvindex::tokenize
