// UTF-8 and Python string helpers of the chat-template interpreter: code
// point decoding, Python's notion of whitespace (str.isspace, used by
// strip/split/trim) and code-point indexing. Text is always UTF-8 bytes;
// positions the template sees (len, slices, find) are in code points, as in
// Python.
#pragma once

#include <cstddef>
#include <cstdint>
#include <string>
#include <string_view>
#include <vector>

namespace kvindex::chat_template {

// True when `text` is valid UTF-8 (no overlongs, surrogates or values past
// U+10FFFF).
bool IsValidUtf8(std::string_view text);

// Byte offsets of each code point's start in valid UTF-8 `text`, plus a final
// entry text.size(): offsets[i]..offsets[i+1] is code point i.
std::vector<size_t> CodePointOffsets(std::string_view text);

size_t CodePointCount(std::string_view text);

// Decodes the code point starting at text[pos] (valid UTF-8) and advances pos.
char32_t NextCodePoint(std::string_view text, size_t& pos);

void AppendUtf8(std::string& out, char32_t cp);

// Python's str.isspace() for one code point (also what `\s` matches in
// Python's re for str patterns).
bool IsPySpace(char32_t cp);

// Python's str.strip/lstrip/rstrip: with chars == nullptr strips whitespace,
// otherwise any code point contained in *chars.
std::string PyStrip(std::string_view text, const std::string* chars, bool left, bool right);

}  // namespace kvindex::chat_template
