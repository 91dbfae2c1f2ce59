#include "shared/tokenize/pre_tokenizer.h"

#include <nlohmann/json.hpp>

#include <algorithm>

#include "absl/strings/str_cat.h"

namespace kvindex::tokenize {
namespace {

// GPT-2's pattern, used by ByteLevel when use_regex is set.
constexpr std::string_view kGpt2Pattern =
    R"('s|'t|'re|'ve|'m|'ll|'d| ?\p{L}+| ?\p{N}+| ?[^\s\p{L}\p{N}]+|\s+(?!\S)|\s+)";

struct Span {
  size_t start, end;
  bool is_match;
};

}  // namespace

bool PreTokenizer::LinesAreBoundaries() const {
  static constexpr std::string_view kKnown[] = {
      FastSplit::kLlama3Pattern,
      FastSplit::kQwenPattern,
      // DeepSeek V3 (three splits)
      DeepSeekSplit::kDigitsPattern,
      DeepSeekSplit::kCjkPattern,
      DeepSeekSplit::kWordsPattern,
      // GPT-2 (ByteLevel use_regex)
      kGpt2Pattern,
  };
  if (!byte_level_ || steps_.empty()) return false;
  for (const Step& step : steps_) {
    if (step.kind == Kind::kMetaspace || step.add_prefix_space) return false;
    if (step.kind == Kind::kSplit &&
        (step.regex == nullptr || step.behavior != Behavior::kIsolated || step.invert)) {
      return false;
    }
    if (step.regex == nullptr) continue;
    bool known = false;
    for (std::string_view pattern : kKnown) known = known || step.regex->pattern() == pattern;
    if (!known) return false;
  }
  return true;
}

bool PreTokenizer::KeepsWholeWithout(char absent) const {
  for (const Step& step : steps_) {
    if (step.kind != Kind::kSplit || step.regex != nullptr || step.invert ||
        step.literal.find(absent) == std::string::npos) {
      return false;
    }
  }
  return true;
}

StatusOr<PreTokenizer> PreTokenizer::FromJson(const nlohmann::json& spec) {
  PreTokenizer pre;
  if (!spec.is_null()) KVINDEX_RETURN_IF_ERROR(Add(spec, &pre.steps_, &pre.byte_level_));
  return pre;
}

Status PreTokenizer::Add(const nlohmann::json& spec, std::vector<Step>* steps, bool* byte_level) {
  if (!spec.is_object() || !spec.contains("type")) {
    return absl::InvalidArgumentError("pre_tokenizer without a type");
  }
  const std::string type = spec.at("type").get<std::string>();
  if (type == "Sequence") {
    for (const auto& inner : spec.at("pretokenizers")) {
      KVINDEX_RETURN_IF_ERROR(Add(inner, steps, byte_level));
    }
    return Status();
  }
  Step step{};
  if (type == "Split") {
    step.kind = Kind::kSplit;
    const auto& pattern = spec.at("pattern");
    if (pattern.contains("String")) {
      step.literal = pattern.at("String").get<std::string>();
    } else if (pattern.contains("Regex")) {
      KVINDEX_ASSIGN_OR_RETURN(auto regex, Regex::Compile(pattern.at("Regex").get<std::string>()));
      step.regex = std::move(regex);
    } else {
      return absl::InvalidArgumentError("Split pre_tokenizer without String or Regex pattern");
    }
    const std::string behavior = spec.at("behavior").get<std::string>();
    if (behavior == "Removed") {
      step.behavior = Behavior::kRemoved;
    } else if (behavior == "Isolated") {
      step.behavior = Behavior::kIsolated;
    } else if (behavior == "MergedWithPrevious") {
      step.behavior = Behavior::kMergedWithPrevious;
    } else if (behavior == "MergedWithNext") {
      step.behavior = Behavior::kMergedWithNext;
    } else if (behavior == "Contiguous") {
      step.behavior = Behavior::kContiguous;
    } else {
      return absl::UnimplementedError(absl::StrCat("unsupported Split behavior ", behavior));
    }
    step.invert = spec.value("invert", false);
    // The hand-written matcher serves only where the matches are kept as
    // they are (they tile the text: no gaps to keep or merge).
    if (step.regex != nullptr && step.behavior == Behavior::kIsolated && !step.invert) {
      step.fast = FastSplit::ForPattern(step.regex->pattern());
    }
    // DeepSeek V3's patterns leave gaps: their matcher stands in for PCRE2's
    // matches whatever the behaviour.
    if (step.regex != nullptr) step.find = DeepSeekSplit::ForPattern(step.regex->pattern());
  } else if (type == "ByteLevel") {
    step.kind = Kind::kByteLevel;
    *byte_level = true;
    step.add_prefix_space = spec.value("add_prefix_space", true);
    if (spec.value("use_regex", true)) {
      KVINDEX_ASSIGN_OR_RETURN(auto regex, Regex::Compile(kGpt2Pattern));
      step.regex = std::move(regex);
    }
    // Nothing to do for this step: leave it out of the pipeline.
    if (!step.add_prefix_space && step.regex == nullptr) return Status();
  } else if (type == "Metaspace") {
    step.kind = Kind::kMetaspace;
    step.replacement = spec.value("replacement", std::string("\xE2\x96\x81"));
    std::string scheme = spec.value("prepend_scheme", std::string());
    if (scheme.empty()) scheme = spec.value("add_prefix_space", true) ? "always" : "never";
    if (scheme == "always") {
      step.prepend = Prepend::kAlways;
    } else if (scheme == "first") {
      step.prepend = Prepend::kFirst;
    } else if (scheme == "never") {
      step.prepend = Prepend::kNever;
    } else {
      return absl::UnimplementedError(
          absl::StrCat("unsupported Metaspace prepend_scheme ", scheme));
    }
    step.split = spec.value("split", true);
  } else {
    return absl::UnimplementedError(absl::StrCat("unsupported pre_tokenizer type ", type));
  }
  steps->push_back(std::move(step));
  return Status();
}

Status PreTokenizer::SplitPiece(const Step& step, Piece piece, std::vector<Piece>* out) {
  std::string_view text = piece.text;
  if (text.empty()) return Status();
  if (step.fast.has_value()) {
    for (size_t pos = 0, end; pos < text.size(); pos = end) {
      end = step.fast->MatchEnd(text, pos);
      out->push_back({text.substr(pos, end - pos), piece.at_start && pos == 0});
    }
    return Status();
  }
  // The matches and the gaps between them, in order (HF's Pattern::find_matches).
  // Reused per thread (SplitPiece does not recurse): no allocation per piece.
  thread_local std::vector<Span> spans, merged;
  spans.clear();
  merged.clear();
  size_t prev = 0;
  auto on_match = [&](size_t start, size_t end) {
    if (start != prev) spans.push_back({prev, start, false});
    spans.push_back({start, end, true});
    prev = end;
  };
  if (step.find.has_value()) {
    for (size_t pos = 0, start, end; step.find->Find(text, pos, &start, &end); pos = end) {
      on_match(start, end);
    }
  } else if (step.regex != nullptr) {
    KVINDEX_RETURN_IF_ERROR(step.regex->ForEachMatch(text, on_match));
  } else if (!step.literal.empty()) {
    for (size_t pos = 0, hit; (hit = text.find(step.literal, pos)) != std::string_view::npos;
         pos = hit + step.literal.size()) {
      on_match(hit, hit + step.literal.size());
    }
  }
  if (prev != text.size()) spans.push_back({prev, text.size(), false});
  if (step.invert) {
    for (Span& s : spans) s.is_match = !s.is_match;
  }

  const std::vector<Span>* result = &merged;
  switch (step.behavior) {
    case Behavior::kIsolated:
      result = &spans;
      break;
    case Behavior::kRemoved:
      for (const Span& s : spans) {
        if (!s.is_match) merged.push_back(s);
      }
      break;
    case Behavior::kMergedWithPrevious: {
      bool previous_match = false;
      for (const Span& s : spans) {
        if (s.is_match && !previous_match && !merged.empty()) {
          merged.back().end = s.end;
        } else {
          merged.push_back(s);
        }
        previous_match = s.is_match;
      }
      break;
    }
    case Behavior::kMergedWithNext: {
      bool previous_match = false;
      for (size_t i = spans.size(); i-- > 0;) {
        const Span& s = spans[i];
        if (s.is_match && !previous_match && !merged.empty()) {
          merged.back().start = s.start;
        } else {
          merged.push_back(s);
        }
        previous_match = s.is_match;
      }
      std::reverse(merged.begin(), merged.end());
      break;
    }
    case Behavior::kContiguous: {
      bool previous_match = false;
      for (const Span& s : spans) {
        if (s.is_match == previous_match && !merged.empty()) {
          merged.back().end = s.end;
        } else {
          merged.push_back(s);
        }
        previous_match = s.is_match;
      }
      break;
    }
  }
  for (const Span& s : *result) {
    if (s.end > s.start) {
      out->push_back({text.substr(s.start, s.end - s.start), piece.at_start && s.start == 0});
    }
  }
  return Status();
}

Status PreTokenizer::ApplyStep(const Step& step, const std::vector<Piece>& in,
                               std::deque<std::string>* arena, std::vector<Piece>* out) const {
  for (Piece piece : in) {
    switch (step.kind) {
      case Kind::kSplit:
        KVINDEX_RETURN_IF_ERROR(SplitPiece(step, piece, out));
        break;
      case Kind::kByteLevel: {
        if (step.add_prefix_space && (piece.text.empty() || piece.text.front() != ' ')) {
          arena->push_back(" " + std::string(piece.text));
          piece.text = arena->back();
        }
        if (step.regex == nullptr) {
          out->push_back(piece);
          break;
        }
        Step isolated = {};
        isolated.kind = Kind::kSplit;
        isolated.regex = step.regex;
        isolated.behavior = Behavior::kIsolated;
        KVINDEX_RETURN_IF_ERROR(SplitPiece(isolated, piece, out));
        break;
      }
      case Kind::kMetaspace: {
        std::string text;
        text.reserve(piece.text.size() + 3);
        for (char c : piece.text) {
          if (c == ' ') {
            text.append(step.replacement);
          } else {
            text.push_back(c);
          }
        }
        bool prepend = false;
        if (step.prepend == Prepend::kAlways) {
          prepend = !text.starts_with(step.replacement);
        } else if (step.prepend == Prepend::kFirst) {
          prepend = !text.starts_with(step.replacement) && piece.at_start;
        }
        if (prepend) text.insert(0, step.replacement);
        arena->push_back(std::move(text));
        Piece rewritten{arena->back(), piece.at_start};
        if (!step.split) {
          out->push_back(rewritten);
          break;
        }
        Step split = {};
        split.kind = Kind::kSplit;
        split.literal = step.replacement;
        split.behavior = Behavior::kMergedWithNext;
        KVINDEX_RETURN_IF_ERROR(SplitPiece(split, rewritten, out));
        break;
      }
    }
  }
  return Status();
}

Status PreTokenizer::Split(Piece input, std::deque<std::string>* arena,
                           std::vector<Piece>* out) const {
  if (input.text.empty()) return Status();
  if (steps_.empty()) {
    out->push_back(input);
    return Status();
  }
  std::vector<Piece> current{input};
  std::vector<Piece> next;
  for (size_t i = 0; i < steps_.size(); ++i) {
    std::vector<Piece>* target = i + 1 == steps_.size() ? out : &next;
    KVINDEX_RETURN_IF_ERROR(ApplyStep(steps_[i], current, arena, target));
    if (target == &next) {
      current.swap(next);
      next.clear();
    }
  }
  return Status();
}

}  // namespace kvindex::tokenize
