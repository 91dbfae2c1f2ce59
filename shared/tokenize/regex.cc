#include "shared/tokenize/regex.h"

#define PCRE2_CODE_UNIT_WIDTH 8
#include <pcre2.h>

#include "absl/strings/str_cat.h"

namespace kvindex::tokenize {
namespace {

// One match block and JIT stack per thread, reused by every pattern: matching
// allocates nothing in steady state. The JIT stack grows to 8 MB for long runs
// of one class (megabytes of spaces).
struct ThreadMatchState {
  pcre2_match_data* data = pcre2_match_data_create(1, nullptr);
  pcre2_jit_stack* stack = pcre2_jit_stack_create(64 * 1024, 8 * 1024 * 1024, nullptr);
  pcre2_match_context* context = [this] {
    pcre2_match_context* c = pcre2_match_context_create(nullptr);
    pcre2_jit_stack_assign(c, nullptr, stack);
    return c;
  }();
  ~ThreadMatchState() {
    pcre2_match_context_free(context);
    pcre2_jit_stack_free(stack);
    pcre2_match_data_free(data);
  }
};

ThreadMatchState& State() {
  thread_local ThreadMatchState state;
  return state;
}

// Unicode White_Space, which Oniguruma's \s means; PCRE2 10.42's \s also
// takes U+180E (white space before Unicode 6.3).
constexpr std::string_view kWhiteSpace =
    R"(\t-\r\x{20}\x{85}\x{A0}\x{1680}\x{2000}-\x{200A}\x{2028}\x{2029}\x{202F}\x{205F}\x{3000})";

// Rewrites \s and \S (outside a class; \s inside one) to White_Space.
std::string Translate(std::string_view pattern) {
  std::string out;
  bool in_class = false;
  for (size_t i = 0; i < pattern.size(); ++i) {
    char c = pattern[i];
    if (c == '\\' && i + 1 < pattern.size()) {
      char e = pattern[i + 1];
      ++i;
      if (e == 's') {
        out += in_class ? std::string(kWhiteSpace) : "[" + std::string(kWhiteSpace) + "]";
      } else if (e == 'S' && !in_class) {
        out += "[^" + std::string(kWhiteSpace) + "]";
      } else {
        out += c;
        out += e;
      }
      continue;
    }
    if (c == '[' && !in_class) {
      in_class = true;
      out += c;
      // A ']' right after '[' or '[^' is a literal.
      if (i + 1 < pattern.size() && pattern[i + 1] == '^') out += pattern[++i];
      if (i + 1 < pattern.size() && pattern[i + 1] == ']') out += pattern[++i];
      continue;
    }
    if (c == ']' && in_class) in_class = false;
    out += c;
  }
  return out;
}

}  // namespace

StatusOr<std::unique_ptr<Regex>> Regex::Compile(std::string_view pattern) {
  int error = 0;
  PCRE2_SIZE error_offset = 0;
  const std::string translated = Translate(pattern);
  pcre2_code* code =
      pcre2_compile(reinterpret_cast<PCRE2_SPTR>(translated.data()), translated.size(),
                    PCRE2_UTF | PCRE2_UCP, &error, &error_offset, nullptr);
  if (code == nullptr) {
    PCRE2_UCHAR message[256];
    pcre2_get_error_message(error, message, sizeof(message));
    return absl::InvalidArgumentError(absl::StrCat("regex '", std::string(pattern), "' at offset ",
                                                   error_offset, ": ",
                                                   reinterpret_cast<char*>(message)));
  }
  // JIT is an accelerator: without it (unsupported CPU) the interpreter runs.
  (void)pcre2_jit_compile(code, PCRE2_JIT_COMPLETE);
  return std::unique_ptr<Regex>(new Regex(std::string(pattern), code));
}

Regex::~Regex() { pcre2_code_free(code_); }

int Regex::MatchAt(std::string_view text, size_t pos, size_t* start, size_t* end) const {
  ThreadMatchState& state = State();
  int rc = pcre2_match(code_, reinterpret_cast<PCRE2_SPTR>(text.data()), text.size(), pos,
                       PCRE2_NO_UTF_CHECK, state.data, state.context);
  if (rc == PCRE2_ERROR_NOMATCH) return 0;
  if (rc < 0) return rc;
  const PCRE2_SIZE* ovector = pcre2_get_ovector_pointer(state.data);
  *start = ovector[0];
  *end = ovector[1];
  return 1;
}

Status Regex::MatchError(int rc) const {
  PCRE2_UCHAR message[256];
  pcre2_get_error_message(rc, message, sizeof(message));
  return absl::ResourceExhaustedError(
      absl::StrCat("regex '", pattern_, "': ", reinterpret_cast<char*>(message)));
}

}  // namespace kvindex::tokenize
