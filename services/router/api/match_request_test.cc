#include "services/router/api/match_request.h"

#include <gtest/gtest.h>

#include <string>

namespace kvindex::router::api {
namespace {

Status Parse(std::string body, MatchRequest* out, RequestDialect dialect = RequestDialect::kMatch) {
  body.append(64, '\0');  // the padding the HTTP server guarantees
  return ParseMatchRequest(std::string_view(body.data(), body.size() - 64), dialect, out);
}

TEST(MatchRequestTest, Tokens) {
  MatchRequest r;
  ASSERT_TRUE(Parse(R"({"model": "m", "tokens": [1, 2, 4294967295], "lora_name": null,
                        "cache_salt": "s", "extra": {"x": [1]}})", &r).ok());
  EXPECT_EQ(r.model, "m");
  EXPECT_TRUE(r.has_tokens);
  EXPECT_EQ(r.tokens, (std::vector<uint32_t>{1, 2, 4294967295u}));
  EXPECT_EQ(r.lora_name, "");
  EXPECT_EQ(r.cache_salt, "s");
}

TEST(MatchRequestTest, LocalHashesAreExactU64) {
  MatchRequest r;
  ASSERT_TRUE(Parse(R"({"model":"m","local_hashes":[18446744073709551615, 14643705804678351452]})",
                    &r).ok());
  EXPECT_EQ(r.local_hashes, (std::vector<uint64_t>{18446744073709551615ull, 14643705804678351452ull}));
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
                .find("'model_name'"),
            std::string::npos);
}

}  // namespace
}  // namespace kvindex::router::api
