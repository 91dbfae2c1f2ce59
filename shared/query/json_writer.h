// JsonWriter: a minimal append-only JSON writer for API responses. Numbers
// are written with std::to_chars, so u64 values are exact; strings are
// escaped. No validation of nesting: callers write well-formed sequences.
//
//   JsonWriter w(&out);
//   w.BeginObject(); w.Key("applied_seq"); w.UInt(seq); w.EndObject();
//
// Thread safety: one writer per string.
#pragma once

#include <charconv>
#include <cstdint>
#include <string>
#include <string_view>

#include "shared/http/server.h"

namespace kvindex::query {

class JsonWriter {
 public:
  explicit JsonWriter(std::string* out) : out_(out) {}

  void BeginObject() { Open('{'); }
  void EndObject() { Close('}'); }
  void BeginArray() { Open('['); }
  void EndArray() { Close(']'); }
  void Key(std::string_view key) {
    Separate();
    out_->push_back('"');
    http::AppendJsonEscaped(key, out_);
    out_->append("\":");
    after_key_ = true;
  }
  void String(std::string_view text) {
    Separate();
    out_->push_back('"');
    http::AppendJsonEscaped(text, out_);
    out_->push_back('"');
  }
  void UInt(uint64_t value) {
    Separate();
    char buffer[24];
    auto result = std::to_chars(buffer, buffer + sizeof(buffer), value);
    out_->append(buffer, result.ptr);
  }
  void Bool(bool value) {
    Separate();
    out_->append(value ? "true" : "false");
  }
  void Null() {
    Separate();
    out_->append("null");
  }
  void Double(double value) {
    Separate();
    char buffer[32];
    auto result = std::to_chars(buffer, buffer + sizeof(buffer), value);
    out_->append(buffer, result.ptr);
  }
  // Shorthands for "key": value.
  void Field(std::string_view key, uint64_t value) {
    Key(key);
    UInt(value);
  }
  void Field(std::string_view key, std::string_view value) {
    Key(key);
    String(value);
  }

 private:
  void Separate() {
    if (after_key_) {
      after_key_ = false;
      return;
    }
    if (need_comma_) out_->push_back(',');
    need_comma_ = true;
  }
  void Open(char c) {
    Separate();
    out_->push_back(c);
    need_comma_ = false;
  }
  void Close(char c) {
    out_->push_back(c);
    need_comma_ = true;
  }

  std::string* out_;
  bool need_comma_ = false;
  bool after_key_ = false;
};

}  // namespace kvindex::query
