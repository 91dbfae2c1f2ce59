#include "shared/query/match_request.h"

#include <gtest/gtest.h>

#include <random>
#include <string>

namespace kvindex::query {
namespace {

Status Parse(std::string body, MatchRequest* out, RequestDialect dialect = RequestDialect::kMatch) {
  body.append(64, '\0');  // the padding the HTTP server guarantees
  return ParseMatchRequest(std::string_view(body.data(), body.size() - 64), dialect, out);
}

TEST(MatchRequestTest, Tokens) {
  MatchRequest r;
  ASSERT_TRUE(Parse(R"({"model": "m", "tokens": [1, 2, 4294967295], "lora_name": null,
                        "cache_salt": "s", "extra": {"x": [1]}})",
                    &r)
                  .ok());
  EXPECT_EQ(r.model, "m");
  EXPECT_TRUE(r.has_tokens);
  EXPECT_EQ(r.tokens, (std::vector<uint32_t>{1, 2, 4294967295u}));
  EXPECT_EQ(r.lora_name, "");
  EXPECT_EQ(r.cache_salt, "s");
}

TEST(MatchRequestTest, LocalHashesAreExactU64) {
  MatchRequest r;
  ASSERT_TRUE(
      Parse(R"({"model":"m","local_hashes":[18446744073709551615, 14643705804678351452]})", &r)
          .ok());
  EXPECT_EQ(r.local_hashes,
            (std::vector<uint64_t>{18446744073709551615ull, 14643705804678351452ull}));
}

TEST(MatchRequestTest, ErrorsNameTheProblem) {
  MatchRequest r;
  auto message = [&](std::string body) { return std::string(Parse(body, &r).message()); };
  EXPECT_NE(message("{\"model\": ").find("invalid JSON"), std::string::npos);
  EXPECT_NE(message("[1,2]").find("must be a JSON object"), std::string::npos);
  EXPECT_NE(message("").find("empty request body"), std::string::npos);
  EXPECT_NE(message(R"({"tokens":[1]})").find("missing field 'model'"), std::string::npos);
  EXPECT_NE(message(R"({"model":"m"})").find("missing field 'tokens'"), std::string::npos);
  EXPECT_NE(message(R"({"model":"m","tokens":[1],"local_hashes":[1]})").find("not both"),
            std::string::npos);
  EXPECT_NE(message(R"({"model":"m","tokens":[1,-2]})").find("'tokens' element 1"),
            std::string::npos);
  EXPECT_NE(message(R"({"model":"m","tokens":[4294967296]})").find("32-bit"), std::string::npos);
  EXPECT_NE(message(R"({"model":"m","tokens":"abc"})").find("must be an array"), std::string::npos);
  EXPECT_NE(message(R"({"model":7,"tokens":[1]})").find("'model' must be a string"),
            std::string::npos);
  EXPECT_NE(message(R"({"model":"m","tokens":[1],"lora_name":5})").find("'lora_name'"),
            std::string::npos);
  EXPECT_NE(message(R"({"model":"m","tokens":[1]} x)").find("invalid JSON"), std::string::npos);
  EXPECT_NE(message(R"({"model":"m","tokens":[1.5]})").find("element 0"), std::string::npos);
}

TEST(MatchRequestTest, TooManyTokens) {
  std::string body = R"({"model":"m","tokens":[)";
  for (size_t i = 0; i <= kMaxTokens; ++i) body += i == 0 ? "1" : ",1";
  body += "]}";
  MatchRequest r;
  Status s = Parse(body, &r);
  EXPECT_EQ(s.code(), absl::StatusCode::kInvalidArgument);
  EXPECT_NE(std::string(s.message()).find("more than 1000000"), std::string::npos);
}

TEST(MatchRequestTest, QueryDialect) {
  MatchRequest r;
  ASSERT_TRUE(Parse(R"({"token_ids":[1,2],"model_name":"m"})", &r, RequestDialect::kQuery).ok());
  EXPECT_EQ(r.model, "m");
  EXPECT_EQ(r.tokens.size(), 2u);
  EXPECT_NE(std::string(Parse(R"({"token_ids":[1]})", &r, RequestDialect::kQuery).message())
                .find("'model'"),
            std::string::npos);
}

}  // namespace
}  // namespace kvindex::query

namespace kvindex::query {
namespace {

// The SWAR fast path and the simdjson path must agree on every input.
TEST(MatchRequestTest, FastTokenPathAgreesWithSimdjson) {
  MatchRequest r;
  const std::vector<std::pair<std::string, std::vector<uint32_t>>> good = {
      {"[]", {}},
      {"[0]", {0}},
      {"[ 1 , 22 ,\n333\t]", {1, 22, 333}},
      {"[12345678,123456789,4294967295,7]", {12345678, 123456789, 4294967295u, 7}},
      {"[99999999]", {99999999}},
      {"[10000000, 1]", {10000000, 1}},
  };
  for (const auto& [array, want] : good) {
    ASSERT_TRUE(Parse(R"({"model":"m","tokens":)" + array + "}", &r).ok()) << array;
    EXPECT_EQ(r.tokens, want) << array;
  }
  for (const std::string array : {"[01]", "[1e3]", "[1.0]", "[-1]", "[4294967296]", "[1,]", "[1 2]",
                                  "[\"1\"]", "[1", "[,1]", "[12345678901]"}) {
    Status s = Parse(R"({"model":"m","tokens":)" + array + "}", &r);
    EXPECT_EQ(s.code(), absl::StatusCode::kInvalidArgument) << array;
  }
  std::mt19937 rng(7);
  for (int round = 0; round < 200; ++round) {
    std::vector<uint32_t> want(rng() % 50);
    std::string array = "[";
    for (size_t i = 0; i < want.size(); ++i) {
      const int digits = 1 + static_cast<int>(rng() % 10);
      uint64_t v = rng() % 10;
      for (int d = 1; d < digits; ++d) v = v * 10 + rng() % 10;
      want[i] = static_cast<uint32_t>(v % (uint64_t{1} << 32));
      array += (i ? "," : "") + std::string(rng() % 3, ' ') + std::to_string(want[i]);
    }
    array += "]";
    ASSERT_TRUE(Parse(R"({"model":"m","tokens":)" + array + "}", &r).ok()) << array;
    EXPECT_EQ(r.tokens, want) << array;
  }
}

}  // namespace
}  // namespace kvindex::query

namespace kvindex::query {
namespace {

// Long arrays, as routers send them: the scanner finds commas and digits 64
// bytes at a time and takes a fast path for elements in all-digit blocks.
// One odd byte anywhere (whitespace, a leading zero, a sign, a letter) must
// give what simdjson gives, wherever it falls relative to the blocks.
TEST(MatchRequestTest, LongArraysAgreeWithSimdjson) {
  std::mt19937 rng(13);
  MatchRequest fast, slow;
  for (int round = 0; round < 3000; ++round) {
    const size_t count = 1 + rng() % 400;
    std::string array = "[";
    for (size_t i = 0; i < count; ++i) {
      if (i != 0) array += ',';
      array += std::to_string(rng() % (round % 3 == 0 ? 4294967296ull : 128000));
    }
    array += "]";
    if (round % 4 != 0) {
      const size_t at = 1 + rng() % (array.size() - 1);
      const char odd = " 0-x\n9,"[rng() % 7];
      if (rng() & 1) {
        array.insert(at, 1, odd);
      } else {
        array[at] = odd;
      }
    }
    const std::string body = R"({"model":"m","tokens":)" + array + "}";
    std::string padded = body + std::string(64, '\0');
    const std::string_view view(padded.data(), body.size());
    Status s = ParseMatchRequest(view, RequestDialect::kMatch, &fast);
    Status reference = internal::ParseMatchRequestWithSimdjson(view, RequestDialect::kMatch, &slow);
    ASSERT_EQ(s.code(), reference.code())
        << array << "\nfast: " << s << "\nsimdjson: " << reference;
    if (s.ok()) {
      ASSERT_EQ(fast.tokens, slow.tokens) << array;
    }
  }
}

TEST(MatchRequestTest, FastScannerShapes) {
  MatchRequest r;
  ASSERT_TRUE(Parse(R"( { "model" : "m" , "tokens" : [ 1 ] , "lora_name" : null ,
                         "cache_salt":"s" }  )",
                    &r)
                  .ok());
  EXPECT_EQ(r.model, "m");
  EXPECT_EQ(r.tokens, (std::vector<uint32_t>{1}));
  EXPECT_EQ(r.lora_name, "");
  EXPECT_EQ(r.cache_salt, "s");
  ASSERT_TRUE(Parse(R"({"model":"m\u0041","tokens":[2],"lora_name":"l"})", &r).ok());
  EXPECT_EQ(r.model, "mA");  // escapes go through simdjson
  EXPECT_EQ(r.lora_name, "l");
  ASSERT_TRUE(
      Parse(R"({"model":"m","token_ids":[3],"model_name":"n"})", &r, RequestDialect::kQuery).ok());
  EXPECT_EQ(r.model, "n");
  EXPECT_EQ(r.tokens, (std::vector<uint32_t>{3}));
  EXPECT_NE(std::string(Parse("{}", &r).message()).find("missing field 'model'"),
            std::string::npos);
  for (const char* bad :
       {R"({"model":"m","tokens":[1],})", R"({"model":"m","tokens":[1]} x)",
        R"({"model":"m","tokens":[1]}})", R"({"model":"m" "tokens":[1]})",
        R"({"model":"m","tokens":[1])", R"({"model":"m","tokens":[1],"lora_name":nul})"}) {
    Status s = Parse(bad, &r);
    EXPECT_EQ(s.code(), absl::StatusCode::kInvalidArgument) << bad;
    EXPECT_NE(std::string(s.message()).find("JSON"), std::string::npos) << bad << ": " << s;
  }
  EXPECT_NE(std::string(Parse(R"({"model":m,"tokens":[1]})", &r).message()).find("'model'"),
            std::string::npos);
}

}  // namespace
}  // namespace kvindex::query

namespace kvindex::query {
namespace {

bool SameRequest(const MatchRequest& a, const MatchRequest& b) {
  return a.model == b.model && a.has_tokens == b.has_tokens &&
         a.has_local_hashes == b.has_local_hashes && a.tokens == b.tokens &&
         a.local_hashes == b.local_hashes && a.lora_name == b.lora_name &&
         a.cache_salt == b.cache_salt && a.max_blocks == b.max_blocks;
}

// Bad input never crashes: random mutations of valid bodies either parse or
// yield InvalidArgument, and the answer (value or error code) is the one the
// simdjson path alone gives, so the fast scanner never accepts what simdjson
// rejects nor reads a different value.
TEST(MatchRequestTest, MutatedBodiesNeverCrash) {
  const std::vector<std::string> seeds = {
      R"({"model":"m","tokens":[1,22,333,4444,55555,666666,7777777,88888888,999999999]})",
      R"({"model":"m","local_hashes":[18446744073709551615,1],"lora_name":"x","cache_salt":null})",
      R"({"model_name":"m","token_ids":[1,2,3],"lora_name":null})",
  };
  std::mt19937 rng(11);
  MatchRequest r, slow;
  int accepted = 0;
  for (int round = 0; round < 20000; ++round) {
    std::string body = seeds[rng() % seeds.size()];
    const int edits = 1 + static_cast<int>(rng() % 4);
    for (int e = 0; e < edits && !body.empty(); ++e) {
      const size_t at = rng() % body.size();
      switch (rng() % 3) {
        case 0:
          body[at] = static_cast<char>(rng() % 256);
          break;
        case 1:
          body.erase(at, 1 + rng() % 3);
          break;
        default:
          body.insert(at, 1, "[]{},:\"0123456789-.e \\u"[rng() % 23]);
          break;
      }
    }
    const RequestDialect dialect = (rng() & 1) ? RequestDialect::kMatch : RequestDialect::kQuery;
    Status s = Parse(body, &r, dialect);
    EXPECT_TRUE(s.ok() || s.code() == absl::StatusCode::kInvalidArgument) << body;
    std::string padded = body;
    padded.append(64, '\0');
    Status reference = internal::ParseMatchRequestWithSimdjson(
        std::string_view(padded.data(), body.size()), dialect, &slow);
    ASSERT_EQ(s.code(), reference.code()) << body << "\nfast: " << s << "\nsimdjson: " << reference;
    if (s.ok()) {
      ++accepted;
      EXPECT_TRUE(SameRequest(r, slow)) << body;
    }
  }
  EXPECT_GT(accepted, 100);  // some mutations keep the body valid: both paths were compared
}

}  // namespace
}  // namespace kvindex::query

namespace kvindex::query {
namespace {

// One token array in a /v1/match body: the scanner (ParseMatchRequest) and
// the simdjson path alone give the same status, message and tokens; returns
// whether the body was accepted.
bool AgreesWithSimdjson(const std::string& array) {
  const std::string body = R"({"model":"m","tokens":)" + array + "}";
  std::string padded = body + std::string(64, '\0');
  const std::string_view view(padded.data(), body.size());
  MatchRequest fast, slow;
  const Status s = ParseMatchRequest(view, RequestDialect::kMatch, &fast);
  const Status reference =
      internal::ParseMatchRequestWithSimdjson(view, RequestDialect::kMatch, &slow);
  EXPECT_EQ(s.code(), reference.code()) << array;
  EXPECT_EQ(s.message(), reference.message()) << array;
  if (s.ok() && reference.ok()) {
    EXPECT_EQ(fast.tokens, slow.tokens) << array;
  }
  return s.ok();
}

// FastParseU32Array alone on `array` (followed by zero padding, nothing
// readable before it): when it accepts, the values are the simdjson path's.
bool ScannerTakes(const std::string& array, size_t max_count = kMaxTokens) {
  std::string padded = array + std::string(64, '\0');
  std::vector<uint32_t> tokens = {7, 7, 7};  // overwritten or cleared
  const bool taken =
      FastParseU32Array(std::string_view(padded.data(), array.size()), max_count, &tokens);
  if (taken) {
    const std::string body = R"({"model":"m","tokens":)" + array + "}" + std::string(64, '\0');
    MatchRequest slow;
    EXPECT_TRUE(internal::ParseMatchRequestWithSimdjson(
                    std::string_view(body.data(), body.size() - 64), RequestDialect::kMatch, &slow)
                    .ok())
        << array;
    EXPECT_EQ(tokens, slow.tokens) << array;
    EXPECT_LE(tokens.size(), max_count) << array;
  }
  return taken;
}

// Seeded differential test of the token-array scanner against simdjson:
// random arrays (1 to ~2,500 elements, so many 64-byte blocks), random
// whitespace, and edge elements: 0, 4294967295, 4294967296, leading zeros,
// 9-, 10- and 11-digit numbers, signs, exponents, fractions, empty elements,
// trailing commas, strings, literals.
TEST(MatchRequestTest, TokenScannerDifferential) {
  const std::vector<std::string> edges = {
      "0",          "4294967295", "4294967296", "00",         "01",         "007",
      "0000000001", "1234567890", "999999999",  "9999999999", "4000000000", "12345678901",
      "99999999",   "100000000",  "10000000",   "-1",         "-0",         "1e3",
      "1E3",        "1.0",        "0.5",        "",           "+1",         "\"1\"",
      "null",       "true",       "[1]",        "1-",         "2x",         "\xc2\xa0"};
  const char* const spaces[] = {" ", "\n", "\t", "\r", "  ", "\r\n"};
  std::mt19937 rng(22);
  int accepted = 0, taken = 0, clean_rounds = 0;
  for (int round = 0; round < 3000; ++round) {
    const int kind = static_cast<int>(rng() % 4);  // 0: clean, 1: spaces, 2, 3: edges too
    const size_t count = round % 10 == 0 ? 1 + rng() % 2500 : rng() % 120;
    std::string array = "[";
    if (kind == 1 && rng() % 2) array += spaces[rng() % 6];
    for (size_t i = 0; i < count; ++i) {
      if (i != 0) array += ',';
      if (kind == 1 && rng() % 4 == 0) array += spaces[rng() % 6];
      const uint32_t pick = rng() % 100;
      if (kind >= 2 && pick < (kind == 2 ? 2u : 10u)) {
        array += edges[rng() % edges.size()];
      } else if (pick < 60) {
        array += std::to_string(rng() % 128000);
      } else if (pick < 80) {
        array += std::to_string(rng());  // up to 10 digits
      } else {
        array += std::to_string(rng() % 10);
      }
      if (kind == 1 && rng() % 4 == 0) array += spaces[rng() % 6];
    }
    if (kind >= 2 && rng() % 20 == 0) array += ',';  // trailing comma
    array += "]";
    const bool ok = AgreesWithSimdjson(array);
    accepted += ok;
    if (kind == 0) {
      ++clean_rounds;
      // The usual array (digits and commas): the scanner itself takes it.
      EXPECT_TRUE(ScannerTakes(array)) << array;
      taken += ScannerTakes(array);
      // max_count: taken exactly when the elements fit.
      const size_t limit = count == 0 ? 0 : rng() % (count + 2);
      EXPECT_EQ(ScannerTakes(array, limit), count <= limit) << array << " max " << limit;
    } else {
      ScannerTakes(array);
    }
  }
  EXPECT_GT(accepted, 1000);
  EXPECT_EQ(taken, clean_rounds);
}

// Arrays around the scanner's kept buffer (256 Ki elements): a 32k-token
// prompt's (a bound of ~95 K elements, held in the kept buffer), arrays of
// one element fewer, as many and one more than the buffer, and one whose
// bound is past it (a buffer allocated for the call, then freed), then the
// 32k one again on the same thread: each taken with simdjson's values,
// refused below its element count or with a bad element near its end. (Run
// under ASan in CI: a buffer shorter than the scan's bound is an overflow
// there.)
TEST(MatchRequestTest, TokenScannerArraysAroundTheKeptBuffer) {
  std::mt19937 rng(64);
  auto make = [&](size_t count, uint32_t modulo) {
    std::string array = "[";
    for (size_t i = 0; i < count; ++i) {
      if (i != 0) array += ',';
      array += std::to_string(rng() % modulo);
    }
    return array + "]";
  };
  const size_t kKept = 256 * 1024;
  struct Case {
    size_t count;
    uint32_t modulo;
  };
  for (const Case c : {Case{32'768, 128'000}, Case{kKept - 1, 10}, Case{kKept, 10},
                       Case{kKept + 1, 10}, Case{150'000, 128'000}, Case{32'768, 128'000}}) {
    const std::string array = make(c.count, c.modulo);
    SCOPED_TRACE(testing::Message() << c.count << " elements below " << c.modulo);
    EXPECT_TRUE(ScannerTakes(array));
    EXPECT_TRUE(ScannerTakes(array, c.count));
    EXPECT_FALSE(ScannerTakes(array, c.count - 1));
    EXPECT_TRUE(AgreesWithSimdjson(array));
    // A bad element near the end (past the kept buffer in the long ones).
    std::string bad = array;
    bad.insert(bad.size() - 3, "-");
    EXPECT_FALSE(ScannerTakes(bad));
    EXPECT_FALSE(AgreesWithSimdjson(bad));
  }
}

// Each edge element at every offset from a 64-byte block boundary (the
// scanner parses whole blocks at a time; a leading zero or a long number
// may straddle two), between ordinary elements.
TEST(MatchRequestTest, TokenScannerEdgesAtEveryBlockOffset) {
  const std::vector<std::string> edges = {
      "07",          "00",        "0",          "0123456",    "012345678",  "0000000000",
      "12345678",    "123456789", "1234567890", "4294967295", "4294967296", "9999999999",
      "10000000000", "-5",        "1.5",        "2e2",        "",           " 3 "};
  for (const std::string& edge : edges) {
    for (size_t pad = 0; pad < 140; ++pad) {
      // `pad` bytes of "1," and "22," before the edge element.
      std::string array = "[";
      size_t bytes = 0;
      while (bytes < pad) {
        const bool three = (pad - bytes) % 2 == 1;
        array += three ? "22," : "1,";
        bytes += three ? 3 : 2;
      }
      array += edge;
      for (int i = 0; i < 40; ++i) array += "," + std::to_string(123456 + i);
      array += "]";
      const std::string number = edge == " 3 " ? "3" : edge;  // JSON allows the spaces
      const bool valid = number.find_first_not_of("0123456789") == std::string::npos &&
                         !number.empty() && (number == "0" || number[0] != '0') &&
                         (number.size() < 10 || (number.size() == 10 && number <= "4294967295"));
      EXPECT_EQ(AgreesWithSimdjson(array), valid) << array;
      const bool taken = ScannerTakes(array);
      if (edge.find_first_not_of("0123456789") == std::string::npos) {
        EXPECT_EQ(taken, valid) << array;
      }
    }
  }
}

}  // namespace
}  // namespace kvindex::query
