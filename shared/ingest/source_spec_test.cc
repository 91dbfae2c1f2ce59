#include "shared/ingest/source_spec.h"

#include <gtest/gtest.h>

#include "shared/ingest/agent_pipeline.h"

namespace kvindex::ingest {
namespace {

TEST(SourceSpecTest, ParsesTheDocumentedExample) {
  auto specs = ParseSourceSpec(
      "worker=w0,engine=vllm,model=M,block_size=16,pub=tcp://127.0.0.1:5557,"
      "replay=tcp://127.0.0.1:5558");
  ASSERT_TRUE(specs.ok()) << specs.status();
  ASSERT_EQ(specs->size(), 1u);
  const SourceSpec& s = (*specs)[0];
  EXPECT_EQ(s.worker, "w0");
  EXPECT_EQ(s.engine, wire::EngineKind::kVllm);
  EXPECT_EQ(s.model, "M");
  EXPECT_EQ(s.block_size, 16u);
  EXPECT_EQ(s.pub_endpoint, "tcp://127.0.0.1:5557");
  EXPECT_FALSE(s.pub_bind);
  EXPECT_EQ(s.replay_endpoint, "tcp://127.0.0.1:5558");
  EXPECT_EQ(s.dp_rank, 0u);
  EXPECT_EQ(SourceLabel(s), "w0/0");
  // Round trip.
  auto again = ParseSourceSpec(FormatSourceSpec(s));
  ASSERT_TRUE(again.ok());
  EXPECT_EQ((*again)[0], s);
}

TEST(SourceSpecTest, BindPrefixAndNoReplay) {
  auto specs = ParseSourceSpec(
      " worker = w1 , engine=sglang, model=meta/llama, block_size=32, pub=bind:tcp://*:6000 ");
  ASSERT_TRUE(specs.ok()) << specs.status();
  const SourceSpec& s = (*specs)[0];
  EXPECT_TRUE(s.pub_bind);
  EXPECT_EQ(s.pub_endpoint, "tcp://*:6000");
  EXPECT_EQ(s.engine, wire::EngineKind::kSglang);
  EXPECT_TRUE(s.replay_endpoint.empty());
}

TEST(SourceSpecTest, ReportMode) {
  const std::string base = "worker=w0,engine=vllm,model=m,block_size=16,pub=tcp://127.0.0.1:5557";
  auto exact = ParseSourceSpec(base);
  ASSERT_TRUE(exact.ok());
  EXPECT_FALSE((*exact)[0].report_full);
  auto full = ParseSourceSpec(base + ",report_mode=full");
  ASSERT_TRUE(full.ok()) << full.status();
  EXPECT_TRUE((*full)[0].report_full);
  EXPECT_EQ(FormatSourceSpec((*full)[0]), base + ",report_mode=full");
  EXPECT_FALSE(ParseSourceSpec(base + ",report_mode=exact").value()[0].report_full);
  auto bad = ParseSourceSpec(base + ",report_mode=sometimes");
  ASSERT_FALSE(bad.ok());
  EXPECT_NE(bad.status().message().find("report_mode"), std::string_view::npos);
}

TEST(SourceSpecTest, Endpoint) {
  const std::string base = "worker=w0,engine=vllm,model=m,block_size=16,pub=tcp://127.0.0.1:5557";
  EXPECT_TRUE(ParseSourceSpec(base).value()[0].endpoint.empty());
  auto specs = ParseSourceSpec(base + ",endpoint=10.0.0.7:8000,dp_ranks=2");
  ASSERT_TRUE(specs.ok()) << specs.status();
  ASSERT_EQ(specs->size(), 2u);
  EXPECT_EQ((*specs)[1].endpoint, "10.0.0.7:8000");
  EXPECT_EQ(
      FormatSourceSpec((*specs)[0]),
      "worker=w0,engine=vllm,model=m,block_size=16,pub=tcp://127.0.0.1:5557,endpoint=10.0.0.7:"
      "8000");
  for (const char* bad : {"10.0.0.7", "10.0.0.7:0", "10.0.0.7:70000", ":8000", "h:x"}) {
    auto parsed = ParseSourceSpec(base + ",endpoint=" + bad);
    ASSERT_FALSE(parsed.ok()) << bad;
    EXPECT_NE(parsed.status().message().find("endpoint"), std::string_view::npos);
  }
}

TEST(SourceSpecTest, DpRanksExpandOnConsecutivePorts) {
  auto specs = ParseSourceSpec(
      "worker=w0,engine=trtllm,model=M,block_size=16,pub=tcp://10.0.0.1:5557,"
      "replay=tcp://10.0.0.1:6557,dp_ranks=3");
  ASSERT_TRUE(specs.ok()) << specs.status();
  ASSERT_EQ(specs->size(), 3u);
  for (uint32_t r = 0; r < 3; ++r) {
    EXPECT_EQ((*specs)[r].dp_rank, r);
    EXPECT_EQ((*specs)[r].worker, "w0");
    EXPECT_EQ((*specs)[r].pub_endpoint, "tcp://10.0.0.1:" + std::to_string(5557 + r));
    EXPECT_EQ((*specs)[r].replay_endpoint, "tcp://10.0.0.1:" + std::to_string(6557 + r));
  }
}

TEST(SourceSpecTest, ExplicitDpRank) {
  auto specs = ParseSourceSpec(
      "worker=w0,engine=vllm,model=M,block_size=16,pub=ipc:///tmp/x,"
      "dp_rank=3");
  ASSERT_TRUE(specs.ok()) << specs.status();
  EXPECT_EQ((*specs)[0].dp_rank, 3u);
}

TEST(SourceSpecTest, RejectsBadInput) {
  const char* bad[] = {
      "",
      "worker=w0",
      "worker=w0,engine=tgi,model=M,block_size=16,pub=tcp://h:1",
      "worker=w0,engine=vllm,model=M,block_size=0,pub=tcp://h:1",
      "worker=w0,engine=vllm,model=M,block_size=abc,pub=tcp://h:1",
      "worker=w0,engine=vllm,model=M,block_size=16",
      "worker=w0,engine=vllm,model=M,block_size=16,pub=tcp://h:1,colour=red",
      "worker=w0,worker=w1,engine=vllm,model=M,block_size=16,pub=tcp://h:1",
      "worker=w0,engine=vllm,model=M,block_size=16,pub=tcp://h:1,nokey",
      "worker=,engine=vllm,model=M,block_size=16,pub=tcp://h:1",
      "worker=w0,engine=vllm,model=M,block_size=16,pub=bind:",
      "worker=w0,engine=vllm,model=M,block_size=16,pub=ipc:///a,dp_ranks=2",
      "worker=w0,engine=vllm,model=M,block_size=16,pub=tcp://h:65535,dp_ranks=2",
      "worker=w0,engine=vllm,model=M,block_size=16,pub=tcp://h:1,dp_ranks=0",
      "worker=w0,engine=vllm,model=M,block_size=16,pub=tcp://h:1,dp_ranks=2,dp_rank=1",
      // A rank past kMaxDpRanks (1024): unregistering clears ranks 0..dp_rank.
      "worker=w0,engine=vllm,model=M,block_size=16,pub=tcp://h:1,dp_rank=1024",
      "worker=w0,engine=vllm,model=M,block_size=16,pub=tcp://h:1,dp_rank=4294967295",
  };
  for (const char* text : bad) {
    auto specs = ParseSourceSpec(text);
    EXPECT_FALSE(specs.ok()) << text;
    if (!specs.ok()) {
      EXPECT_EQ(specs.status().code(), absl::StatusCode::kInvalidArgument) << text;
    }
  }
}

// Long model names work (their subject token is hashed, nats::ModelToken);
// a name no message could carry is refused, so --check-config says so.
TEST(SourceSpecTest, ModelNameLength) {
  const std::string base = "worker=w0,engine=vllm,block_size=16,pub=tcp://h:1,model=";
  auto long_name = ParseSourceSpec(base + std::string(5000, 'm'));
  ASSERT_TRUE(long_name.ok()) << long_name.status();
  EXPECT_EQ((*long_name)[0].model.size(), 5000u);
  auto too_long = ParseSourceSpec(base + std::string(kMaxModelBytes + 1, 'm'));
  ASSERT_FALSE(too_long.ok());
  EXPECT_NE(too_long.status().message().find("model name of 65537 bytes"), std::string::npos);
  // Rank declaration is recorded.
  EXPECT_FALSE((*long_name)[0].rank_declared);
  EXPECT_TRUE((*ParseSourceSpec(base + "m,dp_ranks=2"))[1].rank_declared);
}

TEST(AgentOptionsTest, Validate) {
  AgentOptions options;
  EXPECT_FALSE(options.Validate().ok());  // no node
  options.node = "n";
  EXPECT_FALSE(options.Validate().ok());  // no sources
  auto a = ParseSourceSpec("worker=w0,engine=vllm,model=M,block_size=16,pub=tcp://h:1");
  auto b = ParseSourceSpec("worker=w1,engine=vllm,model=M,block_size=32,pub=tcp://h:2");
  auto c = ParseSourceSpec("worker=w1,engine=vllm,model=M,block_size=16,pub=tcp://h:1");
  options.sources = *a;
  EXPECT_TRUE(options.Validate().ok());
  options.sources.push_back((*b)[0]);
  EXPECT_FALSE(options.Validate().ok());  // model with two block sizes
  options.sources = {(*a)[0], (*c)[0]};
  EXPECT_FALSE(options.Validate().ok());  // same pub endpoint twice
  options.sources = *a;
  options.replay_timeout = std::chrono::milliseconds(0);
  EXPECT_FALSE(options.Validate().ok());
}

}  // namespace
}  // namespace kvindex::ingest
