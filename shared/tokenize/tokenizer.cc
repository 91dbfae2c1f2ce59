#include "shared/tokenize/tokenizer.h"

#include <algorithm>
#include <optional>
#if defined(__GLIBC__)
#include <malloc.h>
#endif
#include <fstream>
#include <nlohmann/json.hpp>
#include <sstream>

#include "absl/container/flat_hash_map.h"
#include "absl/strings/str_cat.h"
#include "shared/tokenize/chat_encoder.h"
#include "shared/tokenize/utf8.h"

namespace kvindex::tokenize {
namespace {

StatusOr<std::string> ReadFile(const std::string& path, bool* missing) {
  std::ifstream in(path, std::ios::binary);
  if (!in) {
    if (missing != nullptr) *missing = true;
    return absl::NotFoundError(absl::StrCat("cannot open ", path));
  }
  std::ostringstream buffer;
  buffer << in.rdbuf();
  return buffer.str();
}

// tokenizer_config.json writes a token as a string or as an AddedToken object.
std::string TokenString(const nlohmann::json& config, const char* key) {
  if (!config.contains(key)) return "";
  const auto& value = config.at(key);
  if (value.is_string()) return value.get<std::string>();
  if (value.is_object() && value.contains("content")) return value.at("content").get<std::string>();
  return "";
}

constexpr std::string_view kMetaspace = "\xE2\x96\x81";  // U+2581, SentencePiece's space
constexpr char32_t kNoCodePoint = 0x110000;

// The last code point of non-empty valid UTF-8 `text`.
char32_t LastCodePoint(std::string_view text) {
  size_t last = text.size() - 1;
  while (last > 0 && (static_cast<unsigned char>(text[last]) & 0xC0) == 0x80) --last;
  size_t len = 0;
  return DecodeUtf8(text, last, &len);
}

}  // namespace

Tokenizer::~Tokenizer() = default;

StatusOr<std::unique_ptr<Tokenizer>> Tokenizer::Load(const std::string& dir) {
  StatusOr<std::unique_ptr<Tokenizer>> loaded;
  {
    KVINDEX_ASSIGN_OR_RETURN(std::string tokenizer_json,
                             ReadFile(dir + "/tokenizer.json", nullptr));
    bool missing = false;
    auto config = ReadFile(dir + "/tokenizer_config.json", &missing);
    if (!config.ok() && !missing) return config.status();
    loaded = FromJson(tokenizer_json, config.ok() ? *config : std::string());
  }
#if defined(__GLIBC__)
  // The files and their JSON trees (several times the files' size) are
  // freed by now; hand those pages back to the system rather than leaving
  // them in the process's RSS (glibc keeps freed heap otherwise).
  malloc_trim(0);
#endif
  if (!loaded.ok()) {
    return absl::Status(loaded.status().code(),
                        absl::StrCat(dir, "/tokenizer.json: ", loaded.status().message()));
  }
  return loaded;
}

StatusOr<std::unique_ptr<Tokenizer>> Tokenizer::FromJson(std::string_view tokenizer_json,
                                                         std::string_view config_json) {
  std::unique_ptr<Tokenizer> tok(new Tokenizer());
  try {
    auto root = nlohmann::json::parse(tokenizer_json);
    if (!root.is_object() || !root.contains("model")) {
      return absl::InvalidArgumentError("not a tokenizer.json (no model)");
    }
    if (root.contains("truncation") && !root["truncation"].is_null()) {
      return absl::UnimplementedError("truncation is not supported");
    }
    KVINDEX_ASSIGN_OR_RETURN(tok->normalizer_,
                             Normalizer::FromJson(root.value("normalizer", nlohmann::json())));
    KVINDEX_ASSIGN_OR_RETURN(tok->pre_tokenizer_,
                             PreTokenizer::FromJson(root.value("pre_tokenizer", nlohmann::json())));
    KVINDEX_ASSIGN_OR_RETURN(Bpe bpe,
                             Bpe::FromJson(root.at("model"), tok->pre_tokenizer_.byte_level()));
    tok->bpe_ = std::make_unique<Bpe>(std::move(bpe));

    std::vector<AddedToken> raw, normalized;
    std::vector<std::string> raw_patterns, normalized_patterns;
    // HF ignores the ids written here: a token in the model's vocabulary
    // keeps that id, another takes the next one after the vocabulary and the
    // added tokens so far (AddedVocabulary::add_tokens).
    absl::flat_hash_map<std::string, uint32_t> added_ids;
    int64_t max_added = -1;
    const auto vocab_size = static_cast<int64_t>(tok->bpe_->vocab_size());
    for (const auto& entry : root.value("added_tokens", nlohmann::json::array())) {
      AddedToken token;
      token.content = entry.at("content").get<std::string>();
      if (added_ids.contains(token.content)) continue;
      uint32_t id = 0;
      if (!tok->bpe_->FindToken(token.content, &id)) {
        id = static_cast<uint32_t>(max_added >= vocab_size || vocab_size == 0 ? max_added + 1
                                                                              : vocab_size);
      }
      max_added = std::max<int64_t>(max_added, id);
      added_ids[token.content] = id;
      token.id = id;
      token.single_word = entry.value("single_word", false);
      token.lstrip = entry.value("lstrip", false);
      token.rstrip = entry.value("rstrip", false);
      token.normalized = entry.value("normalized", false);
      token.special = entry.value("special", false);
      if (FindInvalidUtf8(token.content) != std::string_view::npos) {
        return absl::InvalidArgumentError("added token is not valid UTF-8");
      }
      if (token.normalized) {
        std::string pattern = token.content;
        KVINDEX_RETURN_IF_ERROR(tok->normalizer_.Apply(&pattern));
        normalized_patterns.push_back(std::move(pattern));
        normalized.push_back(std::move(token));
      } else {
        raw_patterns.push_back(token.content);
        raw.push_back(std::move(token));
      }
    }
    tok->raw_added_.Build(raw, raw_patterns);
    tok->normalized_added_.Build(normalized, normalized_patterns);
    KVINDEX_RETURN_IF_ERROR(tok->LoadPostProcessor(root.value("post_processor", nlohmann::json())));
    tok->resume_margin_ =
        std::max<size_t>({4, tok->raw_added_.max_bytes(), tok->normalized_added_.max_bytes()});
    tok->line_checkpoints_ = tok->normalizer_.empty() && tok->pre_tokenizer_.LinesAreBoundaries();
    tok->InitSpaceCheckpoints();

    if (!config_json.empty()) {
      auto config = nlohmann::json::parse(config_json);
      if (config.is_object()) {
        if (config.contains("chat_template") && config["chat_template"].is_string()) {
          tok->chat_template_ = config["chat_template"].get<std::string>();
        }
        tok->bos_token_ = TokenString(config, "bos_token");
        tok->eos_token_ = TokenString(config, "eos_token");
        StatusOr<std::unique_ptr<ChatEncoder>> chat = ChatEncoder::FromConfig(config);
        if (chat.ok()) {
          tok->chat_ = std::move(*chat);
          tok->chat_status_ = absl::OkStatus();
        } else {
          tok->chat_status_ = absl::FailedPreconditionError(chat.status().message());
        }
      }
    }
  } catch (const nlohmann::json::exception& e) {
    return absl::InvalidArgumentError(absl::StrCat("malformed tokenizer file: ", e.what()));
  }
  return tok;
}

void Tokenizer::InitSpaceCheckpoints() {
  if (pre_tokenizer_.byte_level() || !bpe_->splits_at_metaspace() || !normalized_added_.empty()) {
    return;
  }
  std::optional<Normalizer::Charwise> charwise = normalizer_.CharwiseImages();
  if (!charwise.has_value()) return;
  auto space = charwise->images.find(U' ');
  if (space == charwise->images.end() || !space->second.starts_with(kMetaspace)) return;
  // No space left after normalization: the pre-tokenizer keeps each part whole.
  if (charwise->prepended.find(' ') != std::string::npos) return;
  for (const auto& [cp, image] : charwise->images) {
    if (image.find(' ') != std::string::npos) return;
    image_last_[cp] = image.empty() ? kNoCodePoint : LastCodePoint(image);
  }
  if (!pre_tokenizer_.KeepsWholeWithout(' ')) return;
  space_checkpoints_ = true;
}

Status Tokenizer::LoadPostProcessor(const nlohmann::json& spec) {
  if (spec.is_null()) return Status();
  const std::string type = spec.value("type", std::string());
  if (type == "Sequence") {
    for (const auto& inner : spec.at("processors"))
      KVINDEX_RETURN_IF_ERROR(LoadPostProcessor(inner));
    return Status();
  }
  if (type == "ByteLevel") return Status();  // offsets only
  std::vector<uint32_t> before, after;
  if (type == "TemplateProcessing") {
    const auto& specials = spec.at("special_tokens");
    bool seen_sequence = false;
    for (const auto& item : spec.at("single")) {
      if (item.contains("Sequence")) {
        if (item["Sequence"].value("id", std::string("A")) != "A") {
          return absl::InvalidArgumentError("TemplateProcessing single uses sequence B");
        }
        seen_sequence = true;
        continue;
      }
      const std::string name = item.at("SpecialToken").at("id").get<std::string>();
      if (!specials.contains(name)) {
        return absl::InvalidArgumentError(
            absl::StrCat("TemplateProcessing: no special token ", name));
      }
      for (const auto& id : specials.at(name).at("ids")) {
        (seen_sequence ? after : before).push_back(id.get<uint32_t>());
      }
    }
  } else if (type == "BertProcessing" || type == "RobertaProcessing") {
    before.push_back(spec.at("cls").at(1).get<uint32_t>());
    after.push_back(spec.at("sep").at(1).get<uint32_t>());
  } else {
    return absl::UnimplementedError(absl::StrCat("unsupported post_processor type ", type));
  }
  // A later processor wraps what the earlier ones made.
  before.insert(before.end(), prefix_ids_.begin(), prefix_ids_.end());
  prefix_ids_ = std::move(before);
  suffix_ids_.insert(suffix_ids_.end(), after.begin(), after.end());
  return Status();
}

StatusOr<std::vector<uint32_t>> Tokenizer::Encode(std::string_view text,
                                                  bool add_special_tokens) const {
  std::vector<uint32_t> ids;
  ids.reserve(text.size() / 3 + 8);
  if (add_special_tokens) ids = prefix_ids_;
  KVINDEX_RETURN_IF_ERROR(EncodeBody(text, &ids));
  if (add_special_tokens) ids.insert(ids.end(), suffix_ids_.begin(), suffix_ids_.end());
  return ids;
}

Status Tokenizer::EncodeBody(std::string_view text, std::vector<uint32_t>* ids, bool at_start,
                             std::vector<Checkpoint>* checkpoints, bool inside) const {
  size_t bad = FindInvalidUtf8(text);
  if (bad != std::string_view::npos) {
    return absl::InvalidArgumentError(absl::StrCat("text is not valid UTF-8 at byte ", bad));
  }
  if (text.size() > UINT32_MAX) return absl::InvalidArgumentError("text longer than 4 GiB");
  const Resume resume{text.data(), ids->size(), checkpoints};
  const Resume* r = checkpoints != nullptr ? &resume : nullptr;
  if (raw_added_.empty()) return EncodeNormalized(text, at_start, inside, ids, r);
  std::vector<AddedTokenMatcher::Segment> segments;
  raw_added_.Split(text, &segments);
  for (const auto& segment : segments) {
    if (segment.id >= 0) {
      ids->push_back(static_cast<uint32_t>(segment.id));
      if (r != nullptr && !segment.rstrip) {
        checkpoints->push_back({static_cast<uint32_t>(segment.end),
                                static_cast<uint32_t>(ids->size() - resume.first_id), false});
      }
    } else {
      KVINDEX_RETURN_IF_ERROR(
          EncodeNormalized(text.substr(segment.start, segment.end - segment.start),
                           at_start && segment.start == 0, inside && segment.start == 0, ids, r));
    }
  }
  return Status();
}

Status Tokenizer::EncodeNormalized(std::string_view piece, bool at_start, bool inside,
                                   std::vector<uint32_t>* ids, const Resume* resume) const {
  if (resume != nullptr && space_checkpoints_) {
    return EncodeInParts(piece, at_start, inside, ids, resume);
  }
  std::string normalized;
  if (!normalizer_.empty()) {
    normalized.assign(piece);
    KVINDEX_RETURN_IF_ERROR(normalizer_.Apply(&normalized, !inside));
    piece = normalized;
    resume = nullptr;  // offsets no longer map to the caller's text
  }
  if (normalized_added_.empty()) return EncodePlain(piece, at_start, ids, resume);
  std::vector<AddedTokenMatcher::Segment> segments;
  normalized_added_.Split(piece, &segments);
  for (const auto& segment : segments) {
    if (segment.id >= 0) {
      ids->push_back(static_cast<uint32_t>(segment.id));
      // Without a normalizer `piece` is the caller's text: offsets hold.
      if (resume != nullptr && !segment.rstrip) {
        resume->out->push_back({static_cast<uint32_t>(piece.data() + segment.end - resume->base),
                                static_cast<uint32_t>(ids->size() - resume->first_id), false});
      }
    } else {
      KVINDEX_RETURN_IF_ERROR(EncodePlain(piece.substr(segment.start, segment.end - segment.start),
                                          at_start && segment.start == 0, ids, resume));
    }
  }
  return Status();
}

Status Tokenizer::EncodeInParts(std::string_view piece, bool at_start, bool inside,
                                std::vector<uint32_t>* ids, const Resume* resume) const {
  // The normalizer maps character by character and the pre-tokenizer keeps
  // its output whole (InitSpaceCheckpoints): the piece's normalized text is
  // the parts' normalized texts one after the other, and BPE cuts that word
  // at each part's start (a "▁" no merge joins to the character before it),
  // so BPE on the parts gives its ids.
  std::string normalized;
  size_t start = 0;
  auto encode_part = [&](size_t end) -> Status {
    normalized.assign(piece.substr(start, end - start));
    KVINDEX_RETURN_IF_ERROR(normalizer_.Apply(&normalized, start == 0 && !inside));
    return EncodePlain(normalized, at_start && start == 0, ids, nullptr);
  };
  for (size_t p = piece.find(' ', kCheckpointSpacing); p != std::string_view::npos;
       p = piece.find(' ', std::max(p + 1, start + kCheckpointSpacing))) {
    // A whitespace character before the cut may be swallowed by an added
    // token's rstrip / lstrip in a longer text: not a point to resume at.
    char32_t before = LastCodePoint(piece.substr(0, p));
    if (IsUnicodeWhitespace(before)) continue;
    if (auto image = image_last_.find(before); image != image_last_.end()) before = image->second;
    if (!bpe_->SafeBeforeMetaspace(before)) continue;
    KVINDEX_RETURN_IF_ERROR(encode_part(p));
    resume->out->push_back({static_cast<uint32_t>(piece.data() + p - resume->base),
                            static_cast<uint32_t>(ids->size() - resume->first_id), true});
    start = p;
  }
  return encode_part(piece.size());
}

Status Tokenizer::EncodePlain(std::string_view piece, bool at_start, std::vector<uint32_t>* ids,
                              const Resume* resume) const {
  if (piece.empty()) return Status();
  std::deque<std::string> arena;
  thread_local std::vector<Piece> words;
  words.clear();
  KVINDEX_RETURN_IF_ERROR(pre_tokenizer_.Split(Piece{piece, at_start}, &arena, &words));
  const bool lines = resume != nullptr && line_checkpoints_;
  for (const Piece& word : words) {
    if (lines && word.text.data() > resume->base && word.text.data()[-1] == '\n' &&
        !IsUnicodeWhitespace(static_cast<unsigned char>(word.text[0]))) {
      resume->out->push_back({static_cast<uint32_t>(word.text.data() - resume->base),
                              static_cast<uint32_t>(ids->size() - resume->first_id), true});
    }
    bpe_->Encode(word.text, ids);
  }
  return Status();
}

}  // namespace kvindex::tokenize
