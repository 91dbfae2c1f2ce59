#include "shared/tokenize/chat_template/lexer.h"

#include <algorithm>
#include <cctype>
#include <cstring>

#include "absl/strings/str_cat.h"
#include "shared/tokenize/chat_template/text.h"

namespace kvindex::chat_template {
namespace {

// \r\n, \r and \n become \n; one trailing newline is dropped
// (keep_trailing_newline=False).
std::string NormalizeNewlines(std::string_view source) {
  std::string out;
  out.reserve(source.size());
  for (size_t i = 0; i < source.size(); ++i) {
    if (source[i] == '\r') {
      out.push_back('\n');
      if (i + 1 < source.size() && source[i + 1] == '\n') ++i;
    } else {
      out.push_back(source[i]);
    }
  }
  if (!out.empty() && out.back() == '\n') out.pop_back();
  return out;
}

bool IsSpaceAt(std::string_view s, size_t pos, size_t* len) {
  size_t p = pos;
  const char32_t cp = NextCodePoint(s, p);
  *len = p - pos;
  return IsPySpace(cp);
}

size_t SkipSpace(std::string_view s, size_t pos) {
  size_t len = 0;
  while (pos < s.size() && IsSpaceAt(s, pos, &len)) pos += len;
  return pos;
}

bool AllSpace(std::string_view s) { return SkipSpace(s, 0) == s.size(); }

// Python's rstrip() (Unicode whitespace).
std::string_view RStripSpace(std::string_view s) {
  std::string stripped = PyStrip(s, nullptr, false, true);
  return s.substr(0, stripped.size());
}

// Decodes a string literal body as Jinja2 does (Python's unicode-escape).
Status DecodeString(std::string_view body, int line, std::string& out) {
  for (size_t i = 0; i < body.size(); ++i) {
    const char c = body[i];
    if (c != '\\' || i + 1 >= body.size()) {
      out.push_back(c);
      continue;
    }
    const char e = body[++i];
    auto hex = [&](size_t n) -> StatusOr<char32_t> {
      char32_t v = 0;
      for (size_t k = 1; k <= n; ++k) {
        if (i + k >= body.size() || !std::isxdigit(static_cast<unsigned char>(body[i + k]))) {
          return absl::InvalidArgumentError(
              absl::StrCat("line ", line, ": truncated \\", std::string(1, e), " escape"));
        }
        const char h = body[i + k];
        v = v * 16 + static_cast<char32_t>(std::isdigit(static_cast<unsigned char>(h))
                                               ? h - '0'
                                               : (std::tolower(h) - 'a' + 10));
      }
      i += n;
      return v;
    };
    switch (e) {
      case '\n':
        break;
      case '\\':
        out.push_back('\\');
        break;
      case '\'':
        out.push_back('\'');
        break;
      case '"':
        out.push_back('"');
        break;
      case 'a':
        out.push_back('\a');
        break;
      case 'b':
        out.push_back('\b');
        break;
      case 'f':
        out.push_back('\f');
        break;
      case 'n':
        out.push_back('\n');
        break;
      case 'r':
        out.push_back('\r');
        break;
      case 't':
        out.push_back('\t');
        break;
      case 'v':
        out.push_back('\v');
        break;
      case 'x':
      case 'u':
      case 'U': {
        KVINDEX_ASSIGN_OR_RETURN(char32_t cp, hex(e == 'x' ? 2 : e == 'u' ? 4 : 8));
        if (cp > 0x10FFFF || (cp >= 0xD800 && cp <= 0xDFFF)) {
          return absl::UnimplementedError(absl::StrCat(
              "line ", line, ": string escape of a surrogate or out-of-range code point"));
        }
        AppendUtf8(out, cp);
        break;
      }
      case 'N':
        return absl::UnimplementedError(
            absl::StrCat("line ", line, ": \\N{...} escapes in string literals"));
      default:
        if (e >= '0' && e <= '7') {
          char32_t v = static_cast<char32_t>(e - '0');
          for (int k = 0; k < 2 && i + 1 < body.size() && body[i + 1] >= '0' && body[i + 1] <= '7';
               ++k) {
            v = v * 8 + static_cast<char32_t>(body[++i] - '0');
          }
          AppendUtf8(out, v);
        } else {
          out.push_back('\\');
          out.push_back(e);
        }
    }
  }
  return absl::OkStatus();
}

class Lexer {
 public:
  explicit Lexer(std::string source) : src_(std::move(source)) {}

  StatusOr<std::vector<Token>> Run() {
    size_t pos = 0;
    bool line_starting = true;
    while (pos < src_.size()) {
      size_t tag = pos;
      while (true) {
        tag = src_.find('{', tag);
        if (tag == std::string::npos || tag + 1 >= src_.size()) {
          tag = std::string::npos;
          break;
        }
        const char n = src_[tag + 1];
        if (n == '{' || n == '%' || n == '#') break;
        ++tag;
      }
      if (tag == std::string::npos) {
        Emit(Token::Kind::kData, src_.substr(pos));
        break;
      }
      const char kind = src_[tag + 1];
      const char sign = tag + 2 < src_.size() ? src_[tag + 2] : '\0';
      std::string_view text(src_.data() + pos, tag - pos);
      if (sign == '-') {
        text = RStripSpace(text);
      } else if (sign != '+' && kind != '{') {
        const size_t nl = text.rfind('\n');
        const size_t l_pos = nl == std::string_view::npos ? 0 : nl + 1;
        if ((l_pos > 0 || line_starting) && l_pos < text.size() && AllSpace(text.substr(l_pos))) {
          text = text.substr(0, l_pos);
        }
      }
      if (!text.empty()) Emit(Token::Kind::kData, std::string(text));
      line_ += static_cast<int>(std::count(src_.begin() + static_cast<long>(pos),
                                           src_.begin() + static_cast<long>(tag), '\n'));
      pos = tag + 2 + ((sign == '-' || sign == '+') ? 1 : 0);
      if (kind == '#') {
        KVINDEX_RETURN_IF_ERROR(Comment(pos, line_starting));
      } else {
        KVINDEX_RETURN_IF_ERROR(Tag(kind == '%', pos, line_starting));
      }
    }
    Emit(Token::Kind::kEof, "");
    return std::move(tokens_);
  }

 private:
  void Emit(Token::Kind kind, std::string text) {
    tokens_.push_back(Token{kind, std::move(text), line_});
  }

  Status Comment(size_t& pos, bool& line_starting) {
    const size_t end = src_.find("#}", pos);
    if (end == std::string::npos) {
      return absl::InvalidArgumentError(
          absl::StrCat("line ", line_, ": missing end of comment tag"));
    }
    line_ += static_cast<int>(std::count(src_.begin() + static_cast<long>(pos),
                                         src_.begin() + static_cast<long>(end), '\n'));
    const char before = end > pos ? src_[end - 1] : '\0';
    size_t after = end + 2;
    if (before == '-') {
      after = SkipSpace(src_, after);
    } else if (before != '+' && after < src_.size() && src_[after] == '\n') {
      ++after;
    }
    line_starting = src_[after - 1] == '\n';
    line_ += static_cast<int>(std::count(src_.begin() + static_cast<long>(end),
                                         src_.begin() + static_cast<long>(after), '\n'));
    pos = after;
    return absl::OkStatus();
  }

  Status Tag(bool block, size_t& pos, bool& line_starting) {
    Emit(block ? Token::Kind::kBlockBegin : Token::Kind::kVarBegin, "");
    int depth = 0;
    while (true) {
      // Whitespace inside a tag.
      const size_t skipped = SkipSpace(src_, pos);
      line_ += static_cast<int>(std::count(src_.begin() + static_cast<long>(pos),
                                           src_.begin() + static_cast<long>(skipped), '\n'));
      pos = skipped;
      if (pos >= src_.size()) {
        return absl::InvalidArgumentError(absl::StrCat(
            "line ", line_, ": unexpected end of template inside ", block ? "{% %}" : "{{ }}"));
      }
      const std::string_view rest(src_.data() + pos, src_.size() - pos);
      if (depth == 0) {
        const std::string_view close = block ? "%}" : "}}";
        size_t end = std::string_view::npos;
        if (rest.substr(0, 1) == "-" && rest.substr(1, 2) == close) {
          end = pos + 3;
          end = SkipSpace(src_, end);
        } else if (block && rest.substr(0, 1) == "+" && rest.substr(1, 2) == close) {
          end = pos + 3;
        } else if (rest.substr(0, 2) == close) {
          end = pos + 2;
          if (block && end < src_.size() && src_[end] == '\n') ++end;
        }
        if (end != std::string_view::npos) {
          Emit(block ? Token::Kind::kBlockEnd : Token::Kind::kVarEnd, "");
          line_starting = src_[end - 1] == '\n';
          line_ += static_cast<int>(std::count(src_.begin() + static_cast<long>(pos),
                                               src_.begin() + static_cast<long>(end), '\n'));
          pos = end;
          return absl::OkStatus();
        }
      }
      const char c = rest[0];
      if (std::isdigit(static_cast<unsigned char>(c))) {
        KVINDEX_RETURN_IF_ERROR(Number(pos));
      } else if (std::isalpha(static_cast<unsigned char>(c)) || c == '_') {
        size_t e = pos;
        while (e < src_.size() &&
               (std::isalnum(static_cast<unsigned char>(src_[e])) || src_[e] == '_'))
          ++e;
        Emit(Token::Kind::kName, src_.substr(pos, e - pos));
        pos = e;
      } else if (c == '\'' || c == '"') {
        size_t e = pos + 1;
        while (e < src_.size() && src_[e] != c) {
          if (src_[e] == '\\') ++e;
          ++e;
        }
        if (e >= src_.size()) {
          return absl::InvalidArgumentError(
              absl::StrCat("line ", line_, ": unterminated string literal"));
        }
        std::string decoded;
        KVINDEX_RETURN_IF_ERROR(
            DecodeString(std::string_view(src_).substr(pos + 1, e - pos - 1), line_, decoded));
        Emit(Token::Kind::kString, std::move(decoded));
        line_ += static_cast<int>(std::count(src_.begin() + static_cast<long>(pos),
                                             src_.begin() + static_cast<long>(e), '\n'));
        pos = e + 1;
      } else {
        static constexpr std::string_view kOps[] = {
            "//", "**", "==", "!=", ">=", "<=", "+", "-", "/", "*", "%", "~", "[",
            "]",  "(",  ")",  "{",  "}",  "<",  ">", "=", ".", ":", "|", ",", ";"};
        std::string_view op;
        for (const auto candidate : kOps) {
          if (rest.substr(0, candidate.size()) == candidate) {
            op = candidate;
            break;
          }
        }
        if (op.empty()) {
          return absl::InvalidArgumentError(absl::StrCat("line ", line_, ": unexpected character '",
                                                         std::string(rest.substr(0, 1)), "'"));
        }
        if (op == "(" || op == "[" || op == "{") ++depth;
        if (op == ")" || op == "]" || op == "}") {
          if (depth == 0)
            return absl::InvalidArgumentError(
                absl::StrCat("line ", line_, ": unexpected '", std::string(op), "'"));
          --depth;
        }
        Emit(Token::Kind::kOp, std::string(op));
        pos += op.size();
      }
    }
  }

  Status Number(size_t& pos) {
    size_t e = pos;
    auto digits = [&] {
      while (e < src_.size() && (std::isdigit(static_cast<unsigned char>(src_[e])) ||
                                 (src_[e] == '_' && e + 1 < src_.size() &&
                                  std::isdigit(static_cast<unsigned char>(src_[e + 1]))))) {
        ++e;
      }
    };
    if (src_[pos] == '0' && pos + 1 < src_.size() &&
        std::strchr("xXoObB", src_[pos + 1]) != nullptr) {
      return absl::UnimplementedError(
          absl::StrCat("line ", line_, ": binary, octal or hex integer literals"));
    }
    digits();
    bool is_float = false;
    if (e + 1 < src_.size() && src_[e] == '.' &&
        std::isdigit(static_cast<unsigned char>(src_[e + 1]))) {
      is_float = true;
      ++e;
      digits();
    }
    if (e < src_.size() && (src_[e] == 'e' || src_[e] == 'E')) {
      size_t x = e + 1;
      if (x < src_.size() && (src_[x] == '+' || src_[x] == '-')) ++x;
      if (x < src_.size() && std::isdigit(static_cast<unsigned char>(src_[x]))) {
        is_float = true;
        e = x;
        digits();
      }
    }
    std::string text = src_.substr(pos, e - pos);
    text.erase(std::remove(text.begin(), text.end(), '_'), text.end());
    Emit(is_float ? Token::Kind::kFloat : Token::Kind::kInt, std::move(text));
    pos = e;
    return absl::OkStatus();
  }

  std::string src_;
  std::vector<Token> tokens_;
  int line_ = 1;
};

}  // namespace

StatusOr<std::vector<Token>> Lex(std::string_view source) {
  if (!IsValidUtf8(source)) return absl::InvalidArgumentError("chat template is not valid UTF-8");
  Lexer lexer(NormalizeNewlines(source));
  return lexer.Run();
}

}  // namespace kvindex::chat_template
