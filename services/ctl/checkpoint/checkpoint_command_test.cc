// kvindex-ctl checkpoint inspect against a real checkpoint database.
#include <gtest/gtest.h>
#include <stdlib.h>

#include <filesystem>
#include <fstream>
#include <nlohmann/json.hpp>
#include <sstream>

#include "services/ctl/checkpoint/checkpoint_command.h"
#include "shared/index/kv_index.h"
#include "storage/checkpoint_store.h"

namespace kvindex::ctl {
namespace {

namespace fs = std::filesystem;

TEST(CheckpointInspectTest, ShowsAndVerifiesTheCheckpoints) {
  std::string pattern = (fs::temp_directory_path() / "kvindex-inspect-XXXXXX").string();
  const std::string data_dir = mkdtemp(pattern.data());
  index::KvIndex index;
  PlacementEvent event;
  event.model = "org/model v1";
  event.block_size = 16;
  event.source = {"w0", 1};
  event.tier = Tier::kHost;
  event.block_hashes = {11, 12, 13};
  index.Apply(event, 7);
  uint64_t newest = 0;
  {
    auto store = storage::CheckpointStore::Open(data_dir + "/checkpoints");
    ASSERT_TRUE(store.ok());
    ASSERT_TRUE((*store)->Write(storage::CaptureCheckpoint(index, nullptr)).ok());
    event.block_hashes = {14};
    index.Apply(event, 9);
    auto info = (*store)->Write(storage::CaptureCheckpoint(index, nullptr));
    ASSERT_TRUE(info.ok());
    newest = info->id;
  }
  std::ostringstream out, err;
  ASSERT_EQ(RunCheckpointInspect({.data_dir = data_dir, .json = true}, out, err), 0) << err.str();
  const auto doc = nlohmann::json::parse(out.str());
  ASSERT_EQ(doc["checkpoints"].size(), 2u);
  const auto& row = doc["checkpoints"][0];
  EXPECT_EQ(row["id"], newest);
  EXPECT_EQ(row["applied_seq"], 9);
  EXPECT_EQ(row["entries"]["host"], 4);
  EXPECT_EQ(row["entries_total"], 4);
  EXPECT_EQ(row["models"][0]["name"], "org/model v1");
  EXPECT_EQ(row["models"][0]["block_size"], 16);
  char digest[17];
  std::snprintf(digest, sizeof(digest), "%016llx",
                static_cast<unsigned long long>(index.Stats().digest));
  EXPECT_EQ(row["digest"], digest);
  EXPECT_EQ(row["verified"], true);
  EXPECT_GT(doc["disk_bytes"].get<uint64_t>(), row["bytes"].get<uint64_t>());

  std::ostringstream text, text_err;
  ASSERT_EQ(RunCheckpointInspect({.data_dir = data_dir}, text, text_err), 0);
  EXPECT_NE(text.str().find("position 9, digest " + std::string(digest)), std::string::npos)
      << text.str();
  EXPECT_NE(text.str().find("verifies: yes"), std::string::npos) << text.str();

  // Damage the newest file: it no longer verifies, exit 1.
  std::vector<fs::path> files;
  for (const auto& entry : fs::directory_iterator(data_dir + "/checkpoints")) {
    if (entry.path().extension() == ".sst") files.push_back(entry.path());
  }
  std::sort(files.begin(), files.end());
  ASSERT_FALSE(files.empty());
  fs::resize_file(files.back(), fs::file_size(files.back()) / 2);
  std::ostringstream bad, bad_err;
  EXPECT_EQ(RunCheckpointInspect({.data_dir = data_dir}, bad, bad_err), 1);
  EXPECT_NE(bad_err.str().find("does not verify"), std::string::npos) << bad_err.str();

  std::ostringstream none, none_err;
  EXPECT_EQ(RunCheckpointInspect({.data_dir = data_dir + "/missing"}, none, none_err), 1);
  fs::remove_all(data_dir);
}

}  // namespace
}  // namespace kvindex::ctl
