#include "shared/http/internal/target.h"

#include <gtest/gtest.h>

namespace kvindex::http::internal {
namespace {

TEST(TargetTest, OriginAndAbsoluteForm) {
  Target target;
  std::string error;
  ASSERT_TRUE(ParseTarget("/v1/match?x=1", &target, &error)) << error;
  EXPECT_EQ(target.path, "/v1/match");
  EXPECT_EQ(target.query, "x=1");
  ASSERT_TRUE(ParseTarget("/a%20b", &target, &error)) << error;
  EXPECT_EQ(target.path, "/a b");
  ASSERT_TRUE(ParseTarget("http://example.com:8080/healthz?q", &target, &error)) << error;
  EXPECT_EQ(target.path, "/healthz");
  EXPECT_EQ(target.query, "q");
  ASSERT_TRUE(ParseTarget("HTTP://example.com", &target, &error)) << error;
  EXPECT_EQ(target.path, "/");
}

TEST(TargetTest, RefusesNulControlAndOtherForms) {
  Target target;
  std::string error;
  EXPECT_FALSE(ParseTarget("/v1/match%00x", &target, &error));
  EXPECT_NE(error.find("NUL"), std::string::npos) << error;
  EXPECT_FALSE(ParseTarget("/v1/%0a", &target, &error));
  EXPECT_FALSE(ParseTarget("/v1/%7F", &target, &error));
  EXPECT_FALSE(ParseTarget("/v1/%zz", &target, &error));
  EXPECT_FALSE(ParseTarget("/v1/%4", &target, &error));
  EXPECT_FALSE(ParseTarget(std::string_view("/v1\0x", 5), &target, &error));
  EXPECT_FALSE(ParseTarget("/v1/\x80", &target, &error));
  EXPECT_FALSE(ParseTarget("*", &target, &error));
  EXPECT_FALSE(ParseTarget("example.com:443", &target, &error));
  EXPECT_FALSE(ParseTarget("", &target, &error));
}

// "/v1%2Fmatch" decoded would be "/v1/match": a path the client did not
// write (a proxy allowing "/v1%2F..." would let it reach /v1/match).
TEST(TargetTest, RefusesEncodedSlash) {
  Target target;
  std::string error;
  EXPECT_FALSE(ParseTarget("/v1%2Fmatch", &target, &error));
  EXPECT_NE(error.find("%2F"), std::string::npos) << error;
  EXPECT_FALSE(ParseTarget("/v1%2fmatch", &target, &error));
  ASSERT_TRUE(ParseTarget("/v1/match?x=%2F", &target, &error)) << error;  // query untouched
  EXPECT_EQ(target.path, "/v1/match");
}

}  // namespace
}  // namespace kvindex::http::internal
