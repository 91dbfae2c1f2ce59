#include "services/ctl/decode/decode_command.h"

#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include <cstdio>
#include <fstream>
#include <nlohmann/json.hpp>
#include <sstream>
#include <string>
#include <vector>

#include "services/ctl/decode/capture_file.h"
#include "shared/hashing/canonical_hash.h"
#include "shared/wire/event_encoder.h"
#include "shared/wire/testing/wire_test_util.h"

namespace kvindex::ctl {
namespace {

using nlohmann::json;
using ::testing::HasSubstr;
using ::testing::StartsWith;

std::string Vector(const std::string& name) {
  return wire::testing::GoldenDir() + "/" + name + ".msgpack";
}

struct Result {
  int exit_code;
  std::vector<json> lines;
  std::string err;
};

Result RunCapture(DecodeArgs args) {
  std::ostringstream out, err;
  Result result;
  result.exit_code = RunDecode(args, out, err);
  std::istringstream lines(out.str());
  for (std::string line; std::getline(lines, line);) result.lines.push_back(json::parse(line));
  result.err = err.str();
  return result;
}

std::vector<uint64_t> GoldenCanonical() {
  std::vector<uint64_t> local, seq;
  hashing::ComputeLocalHashes(wire::testing::GoldenTokens(), 16, hashing::kRootSeed, &local);
  hashing::ComputeSequenceHashes(local, std::nullopt, &seq);
  return seq;
}

std::string TempPath(const std::string& name) {
  const char* dir = std::getenv("TMPDIR");
  return std::string(dir != nullptr ? dir : "/tmp") + "/kvindex_ctl_decode_" + name;
}

void WriteFile(const std::string& path, const std::vector<uint8_t>& bytes) {
  std::ofstream out(path, std::ios::binary);
  out.write(reinterpret_cast<const char*>(bytes.data()),
            static_cast<std::streamsize>(bytes.size()));
}

TEST(DecodeCommandTest, EveryGoldenVectorInOneRun) {
  DecodeArgs args;
  args.engine = "vllm";
  for (const char* name :
       {"A_legacy_array_minimal", "A2_legacy_array_engine_shaped", "B_map_minimal",
        "B2_map_engine_shaped", "C_map16_header_engine_shaped", "D_map_removed_and_cleared",
        "D2_legacy_array_removed_and_cleared", "E_map_empty_heartbeat_batch"}) {
    args.files.push_back(Vector(name));
  }
  const Result r = RunCapture(args);
  EXPECT_EQ(r.exit_code, 0) << r.err;
  // 5 stored + 2 x (removed, cleared); the heartbeat batch prints nothing.
  ASSERT_EQ(r.lines.size(), 9u);
  const std::vector<uint64_t> canonical = GoldenCanonical();
  // The first store publishes; the four re-announcements only count references.
  EXPECT_EQ(r.lines[0]["type"], "BlockStored");
  EXPECT_EQ(r.lines[0]["form"], "array");
  EXPECT_EQ(r.lines[0]["tier"], "device");
  EXPECT_EQ(r.lines[0]["canonical_hashes"], json(canonical));
  EXPECT_EQ(r.lines[0]["engine_hashes"],
            json({wire::testing::kGoldenHash0, wire::testing::kGoldenHash1}));
  EXPECT_EQ(r.lines[0]["placements"].size(), 1u);
  EXPECT_EQ(r.lines[0]["placements"][0]["block_hashes"], json(canonical));
  EXPECT_EQ(r.lines[0]["ts"], 1757500000.25);
  for (int k = 1; k < 5; ++k) {
    EXPECT_EQ(r.lines[k]["canonical_hashes"], json(canonical));
    EXPECT_TRUE(r.lines[k]["placements"].empty());
    EXPECT_TRUE(r.lines[k]["dropped"].is_null());
  }
  EXPECT_EQ(r.lines[3]["form"], "map");
  // D: removes one of five references; the clear drops everything.
  EXPECT_EQ(r.lines[5]["type"], "BlockRemoved");
  EXPECT_TRUE(r.lines[5]["placements"].empty());
  EXPECT_EQ(r.lines[6]["type"], "AllBlocksCleared");
  EXPECT_EQ(r.lines[6]["placements"][0]["kind"], "cleared");
  // D2 after the clear: nothing to remove.
  EXPECT_EQ(r.lines[7]["dropped"], "block_not_found");
  EXPECT_EQ(r.lines[7]["dropped_blocks"], 2);
  EXPECT_EQ(r.lines[7]["file"], Vector("D2_legacy_array_removed_and_cleared"));
  EXPECT_EQ(r.lines[7]["batch"], 6);
}

TEST(DecodeCommandTest, BlockSizeMismatchIsReportedNotFatal) {
  DecodeArgs args;
  args.engine = "sglang";
  args.block_size = 32;
  args.files = {Vector("B_map_minimal")};
  const Result r = RunCapture(args);
  EXPECT_EQ(r.exit_code, 0);
  ASSERT_EQ(r.lines.size(), 1u);
  EXPECT_EQ(r.lines[0]["dropped"], "block_size_mismatch");
  EXPECT_EQ(r.lines[0]["canonical_informational"], true);
}

TEST(DecodeCommandTest, UndecodableFileExitsOneWithTheOffset) {
  std::vector<uint8_t> bytes;
  std::ifstream in(Vector("B_map_minimal"), std::ios::binary);
  bytes.assign(std::istreambuf_iterator<char>(in), {});
  bytes.resize(60);
  const std::string path = TempPath("truncated.msgpack");
  WriteFile(path, bytes);
  DecodeArgs args;
  args.files = {Vector("B_map_minimal"), path};
  const Result r = RunCapture(args);
  EXPECT_EQ(r.exit_code, 1);
  EXPECT_EQ(r.lines.size(), 1u);  // the first file's event
  EXPECT_THAT(r.err, StartsWith("kvindex-ctl decode: " + path + ": byte "));
  EXPECT_EQ(std::count(r.err.begin(), r.err.end(), '\n'), 1);

  args.files = {TempPath("does-not-exist")};
  EXPECT_EQ(RunCapture(args).exit_code, 1);
  std::remove(path.c_str());
}

TEST(DecodeCommandTest, FramesCaptureWithSeqAndTopic) {
  std::vector<uint8_t> capture;
  std::ifstream in(Vector("B2_map_engine_shaped"), std::ios::binary);
  const std::vector<uint8_t> stored(std::istreambuf_iterator<char>(in), {});
  std::ifstream in2(Vector("D_map_removed_and_cleared"), std::ios::binary);
  const std::vector<uint8_t> removed(std::istreambuf_iterator<char>(in2), {});
  const std::string topic = "kv-events";
  const std::string sgl_topic = std::string("kv@10.0.0.1:5557@m") + '\0' + "sgl-kv-epoch=3";
  const uint8_t seq0[8] = {0, 0, 0, 0, 0, 0, 0, 0};
  const uint8_t seq1[8] = {0, 0, 0, 0, 0, 0, 0, 1};
  AppendFrame({reinterpret_cast<const uint8_t*>(topic.data()), topic.size()}, &capture);
  AppendFrame(seq0, &capture);
  AppendFrame(stored, &capture);
  AppendFrame({reinterpret_cast<const uint8_t*>(sgl_topic.data()), sgl_topic.size()}, &capture);
  AppendFrame(seq1, &capture);
  AppendFrame(removed, &capture);
  const std::string path = TempPath("capture.frames");
  WriteFile(path, capture);
  DecodeArgs args;
  args.frames = true;
  args.files = {path};
  Result r = RunCapture(args);
  EXPECT_EQ(r.exit_code, 0) << r.err;
  ASSERT_EQ(r.lines.size(), 3u);
  EXPECT_EQ(r.lines[0]["seq"], 0);
  EXPECT_EQ(r.lines[0]["topic"], "kv-events");
  EXPECT_EQ(r.lines[0]["offset"], 4 + 9 + 4 + 8 + 4 + 11);
  EXPECT_EQ(r.lines[1]["seq"], 1);
  EXPECT_EQ(r.lines[1]["topic"], "kv@10.0.0.1:5557@m");
  EXPECT_EQ(r.lines[1]["placements"][0]["kind"], "removed");

  // A truncated capture names the frame's offset.
  capture.resize(capture.size() - 3);
  WriteFile(path, capture);
  r = RunCapture(args);
  EXPECT_EQ(r.exit_code, 1);
  EXPECT_THAT(r.err, HasSubstr("truncated"));
  std::remove(path.c_str());
}

TEST(DecodeCommandTest, SplitFramesRejectsBadSeqFrames) {
  std::vector<uint8_t> capture;
  const uint8_t short_seq[4] = {0, 0, 0, 1};
  AppendFrame({}, &capture);
  AppendFrame(short_seq, &capture);
  AppendFrame({}, &capture);
  const auto split = SplitFrames(capture);
  ASSERT_FALSE(split.ok());
  EXPECT_THAT(std::string(split.status().message()), StartsWith("byte 4: seq frame"));
  EXPECT_TRUE(SplitFrames({}).ok());
}

TEST(DecodeCommandTest, CommandLineErrorsExitTwo) {
  std::string decode = "decode", engine = "--engine", bad = "nope",
              file = Vector("E_map_empty_heartbeat_batch");
  char* argv[] = {decode.data(), engine.data(), bad.data(), file.data()};
  EXPECT_EQ(RunDecodeCommand(4, argv), 2);
  char* no_files[] = {decode.data(), engine.data()};
  EXPECT_EQ(RunDecodeCommand(2, no_files), 2);
}

}  // namespace
}  // namespace kvindex::ctl
