#include "shared/nats/subjects.h"

#include <gtest/gtest.h>

#include <string>

namespace kvindex::nats {
namespace {

void ExpectRoundTrip(const std::string& text) {
  const std::string token = EncodeToken(text);
  ASSERT_FALSE(token.empty());
  EXPECT_NE(token[0], '_') << token;
  for (char c : token) {
    const bool allowed = (c >= 'A' && c <= 'Z') || (c >= 'a' && c <= 'z') ||
                         (c >= '0' && c <= '9') || c == '-' || c == '%';
    EXPECT_TRUE(allowed) << "byte " << static_cast<int>(static_cast<unsigned char>(c)) << " in "
                         << token;
  }
  auto decoded = DecodeToken(token);
  ASSERT_TRUE(decoded.ok()) << decoded.status();
  EXPECT_EQ(*decoded, text);
}

TEST(SubjectsTest, RoundTrips) {
  for (const std::string text :
       {"meta-llama/Llama-3.1-8B", "a b", "x.y", "_", "%", "*", ">", "node-1", "A\tB\nC",
        "modèle/量子", "%41", "__agent", "...", "a>b*c"}) {
    ExpectRoundTrip(text);
  }
  ExpectRoundTrip(std::string("a\0b", 3));
  std::string every_byte;
  for (int b = 1; b < 256; ++b) every_byte.push_back(static_cast<char>(b));
  ExpectRoundTrip(every_byte);
}

TEST(SubjectsTest, EncodingIsExact) {
  EXPECT_EQ(EncodeToken("meta-llama/Llama-3.1-8B"), "meta-llama%2FLlama-3%2E1-8B");
  EXPECT_EQ(EncodeToken("_"), "%5F");
  EXPECT_EQ(EncodeToken("%"), "%25");
  EXPECT_EQ(EncodeToken(std::string("\0", 1)), "%00");
  EXPECT_EQ(EncodeToken("\xff"), "%FF");
}

TEST(SubjectsTest, DecodeRejectsMalformed) {
  for (const std::string bad :
       {"", "%", "%4", "%zz", "%2f", "a.b", "a b", "_x", "*", ">", "%41", "%2D", "abc%"}) {
    EXPECT_FALSE(DecodeToken(bad).ok()) << "'" << bad << "'";
  }
}

TEST(SubjectsTest, Scheme) {
  SubjectScheme scheme;
  EXPECT_EQ(scheme.StreamSubjects(), "kvindex.events.>");
  EXPECT_EQ(scheme.All(), "kvindex.events.>");
  EXPECT_EQ(scheme.Events("m.1", "n 1"), "kvindex.events.m%2E1.n%201");
  EXPECT_EQ(scheme.Agent("node_1"), "kvindex.events._agent.node%5F1");
  EXPECT_EQ(scheme.Expire("n"), "kvindex.events._expire.n");
  // A model can never collide with a control token.
  EXPECT_NE(scheme.Events("_agent", "n").substr(0, 22), "kvindex.events._agent.");
  scheme.prefix = "a.b";
  EXPECT_EQ(scheme.Events("m", "n"), "a.b.m.n");
}

// A model name of any length makes a subject NATS accepts (a 4 KiB name used
// to exceed max_control_line and stop the agent's connection).
TEST(SubjectsTest, EveryModelTokenIsRecognized) {
  for (const std::string& model : {std::string("m"), std::string("meta-llama/Llama-3.1-8B"),
                                   std::string(5000, 'x'), std::string(2000, '/')}) {
    EXPECT_TRUE(IsModelToken(ModelToken(model))) << model.substr(0, 16);
  }
  EXPECT_FALSE(IsModelToken(""));
  EXPECT_FALSE(IsModelToken("a~b"));
  EXPECT_FALSE(IsModelToken("~" + std::string(32, 'A')));
  EXPECT_FALSE(IsModelToken("a~" + std::string(31, 'A')));
  EXPECT_FALSE(IsModelToken("a%2"));
}

TEST(SubjectsTest, ModelTokensAreBounded) {
  EXPECT_EQ(ModelToken("meta-llama/Llama-3.1-8B"), "meta-llama%2FLlama-3%2E1-8B");
  const std::string fits(kMaxModelTokenBytes, 'm');
  EXPECT_EQ(ModelToken(fits), fits);
  for (const std::string& model :
       {std::string(5000, 'x'), std::string(kMaxModelTokenBytes + 1, 'm'), std::string(2000, '/'),
        std::string(95, 'a') + std::string(300, '.'), std::string(1 << 20, 'q')}) {
    const std::string token = ModelToken(model);
    EXPECT_LE(token.size(), kMaxModelTokenBytes) << model.size();
    EXPECT_NE(token.find('~'), std::string::npos);
    EXPECT_NE(token[0], '_');
    for (char c : token) EXPECT_TRUE(c != '.' && c != '*' && c != '>' && c != ' ') << token;
    // The readable head never ends inside an escape.
    const std::string head = token.substr(0, token.find('~'));
    EXPECT_TRUE(DecodeToken(head).ok()) << head;
    EXPECT_FALSE(DecodeToken(token).ok()) << "a hashed token must not decode as a name";
    EXPECT_EQ(ModelToken(model), token) << "not deterministic";
  }
  // Names sharing the readable head still get different tokens.
  EXPECT_NE(ModelToken(std::string(5000, 'x')), ModelToken(std::string(5001, 'x')));
  SubjectScheme scheme;
  EXPECT_LT(scheme.Events(std::string(100000, '%'), "node-1").size(), 512u);
}

TEST(SubjectsTest, ValidateSubjectNames) {
  EXPECT_TRUE(ValidateSubjectNames("kvindex.events", "node-1").ok());
  EXPECT_FALSE(ValidateSubjectNames("kvindex.events", "").ok());
  const Status node = ValidateSubjectNames("kvindex.events", std::string(100, '/'));
  EXPECT_NE(node.message().find("--node"), std::string::npos) << node;
  const Status prefix = ValidateSubjectNames(std::string(300, 'p'), "n");
  EXPECT_NE(prefix.message().find("--stream-prefix"), std::string::npos) << prefix;
}

TEST(SubjectsTest, ValidatePrefix) {
  for (const std::string good : {"kvindex.events", "a", "a_b-c.D9", "_x"}) {
    EXPECT_TRUE(ValidatePrefix(good).ok()) << good;
  }
  for (const std::string bad : {"", ".", "a.", ".a", "a..b", "a.*", "a.>", "a b", "a/b", "é"}) {
    EXPECT_FALSE(ValidatePrefix(bad).ok()) << bad;
  }
}

}  // namespace
}  // namespace kvindex::nats
