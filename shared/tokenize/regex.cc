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

}  // namespace

StatusOr<std::unique_ptr<Regex>> Regex::Compile(std::string_view pattern) {
  int error = 0;
  PCRE2_SIZE error_offset = 0;
  pcre2_code* code = pcre2_compile(reinterpret_cast<PCRE2_SPTR>(pattern.data()), pattern.size(),
                                   PCRE2_UTF | PCRE2_UCP, &error, &error_offset, nullptr);
  if (code == nullptr) {
    PCRE2_UCHAR message[256];
    pcre2_get_error_message(error, message, sizeof(message));
    return absl::InvalidArgumentError(absl::StrCat("regex '", std::string(pattern), "' at offset ", error_offset,
                                                   ": ", reinterpret_cast<char*>(message)));
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
