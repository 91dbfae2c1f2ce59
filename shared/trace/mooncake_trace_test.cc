#include "shared/trace/mooncake_trace.h"

#include <gtest/gtest.h>

#include <cstdlib>
#include <filesystem>
#include <fstream>

namespace kvindex::trace {
namespace {

std::string WriteTemp(const std::string& name, const std::string& text) {
  const auto path = std::filesystem::temp_directory_path() / name;
  std::ofstream(path) << text;
  return path.string();
}

TEST(MooncakeTraceTest, ReadsRecordsAndLimit) {
  const std::string path = WriteTemp(
      "kvindex_trace_ok.jsonl",
      "{\"timestamp\": 5, \"input_length\": 700, \"output_length\": 3, \"hash_ids\": [0, 1]}\n"
      "\n"
      "{\"timestamp\": 9, \"input_length\": 10, \"hash_ids\": [0, 2, 3]}\n");
  auto all = ReadTrace(path, 0);
  ASSERT_TRUE(all.ok()) << all.status();
  ASSERT_EQ(all->size(), 2u);
  EXPECT_EQ((*all)[0].timestamp_ms, 5u);
  EXPECT_EQ((*all)[0].input_length, 700u);
  EXPECT_EQ((*all)[0].output_length, 3u);
  EXPECT_EQ((*all)[1].output_length, 0u);  // absent: 0
  EXPECT_EQ((*all)[1].hash_ids, (std::vector<uint64_t>{0, 2, 3}));
  auto one = ReadTrace(path, 1);
  ASSERT_TRUE(one.ok());
  EXPECT_EQ(one->size(), 1u);
  std::filesystem::remove(path);
}

TEST(MooncakeTraceTest, ErrorsNameTheLine) {
  const std::string path =
      WriteTemp("kvindex_trace_bad.jsonl", "{\"hash_ids\": [1]}\n{\"hash_ids\": [-1]}\n");
  auto bad = ReadTrace(path, 0);
  ASSERT_FALSE(bad.ok());
  EXPECT_NE(bad.status().message().find(":2:"), std::string::npos) << bad.status();
  EXPECT_EQ(ReadTrace("/nonexistent/trace.jsonl", 0).status().code(), absl::StatusCode::kNotFound);
  std::filesystem::remove(path);
}

// The real trace the benchmarks replay: 12,031 requests, each starting at id 0.
TEST(MooncakeTraceTest, ReadsTheConversationTrace) {
  // The trace ships in the repository (data/README.md): missing is a failure.
  const char* source_dir = std::getenv("KVINDEX_SOURCE_DIR");
  ASSERT_NE(source_dir, nullptr) << "KVINDEX_SOURCE_DIR not set (ctest sets it)";
  const std::string path = std::string(source_dir) + "/data/mooncake/conversation_trace.jsonl";
  ASSERT_TRUE(std::filesystem::exists(path)) << path << " not present";
  auto trace = ReadTrace(path, 0);
  ASSERT_TRUE(trace.ok()) << trace.status();
  EXPECT_EQ(trace->size(), 12031u);
  for (const TraceRequest& r : *trace) ASSERT_EQ(r.hash_ids.front(), 0u);
}

}  // namespace
}  // namespace kvindex::trace
