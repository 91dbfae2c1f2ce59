#include "services/ctl/checkpoint/checkpoint_command.h"

#include <CLI/CLI.hpp>
#include <chrono>
#include <cinttypes>
#include <cstdio>
#include <filesystem>
#include <iostream>
#include <nlohmann/json.hpp>
#include <optional>

#include "shared/config/cli.h"
#include "storage/checkpoint_store.h"

namespace kvindex::ctl {
namespace {

using nlohmann::json;

std::string Hex16(uint64_t value) {
  char text[17];
  std::snprintf(text, sizeof(text), "%016" PRIx64, value);
  return text;
}

}  // namespace

int RunCheckpointInspect(const CheckpointArgs& args, std::ostream& out, std::ostream& err) {
  namespace fs = std::filesystem;
  std::string dir = args.data_dir;
  if (!fs::exists(fs::path(dir) / "CURRENT")) dir = (fs::path(dir) / "checkpoints").string();
  auto store = storage::CheckpointStore::Open(dir, {.read_only = true});
  if (!store.ok()) {
    err << "kvindex-ctl checkpoint inspect: " << store.status().message() << "\n";
    return 1;
  }
  const uint64_t now_ms =
      static_cast<uint64_t>(std::chrono::duration_cast<std::chrono::milliseconds>(
                                std::chrono::system_clock::now().time_since_epoch())
                                .count());
  const auto all = (*store)->List();
  json rows = json::array();
  for (const storage::CheckpointInfo& info : all) {
    json row;
    row["id"] = info.id;
    if (!info.manifest_status.ok()) {
      row["verified"] = false;
      row["error"] = std::string(info.manifest_status.message());
      rows.push_back(row);
      continue;
    }
    row["applied_seq"] = info.applied_seq;
    row["digest"] = Hex16(info.digest);
    json entries;
    uint64_t total = 0;
    for (Tier tier : kAllTiers) {
      entries[std::string(TierName(tier))] = info.entries[static_cast<int>(tier)];
      total += info.entries[static_cast<int>(tier)];
    }
    row["entries"] = entries;
    row["entries_total"] = total;
    json models = json::array();
    for (const storage::CheckpointModel& model : info.models) {
      models.push_back({{"name", model.name}, {"block_size", model.block_size}});
    }
    row["models"] = models;
    row["sources"] = info.sources;
    row["agents"] = info.agents;
    row["bytes"] = info.bytes;
    row["created_unix_ms"] = info.created_unix_ms;
    row["age_s"] = now_ms > info.created_unix_ms
                       ? static_cast<double>(now_ms - info.created_unix_ms) / 1000.0
                       : 0.0;
    if (args.verify) {
      const auto loaded = (*store)->Load(info.id);
      row["verified"] = loaded.ok();
      if (!loaded.ok()) row["error"] = std::string(loaded.status().message());
    }
    rows.push_back(row);
  }
  const uint64_t disk = (*store)->DiskBytes();
  const bool newest_ok =
      !rows.empty() && !rows[0].contains("error") && (!args.verify || rows[0]["verified"] == true);
  if (args.json) {
    out << json{{"dir", dir}, {"disk_bytes", disk}, {"checkpoints", rows}}.dump(2) << "\n";
  } else {
    out << "checkpoint database " << dir << " (" << disk << " bytes on disk)\n";
    if (rows.empty()) out << "  no checkpoints\n";
    for (const json& row : rows) {
      out << "checkpoint " << row["id"].get<uint64_t>();
      if (row.contains("applied_seq")) {
        out << ": position " << row["applied_seq"].get<uint64_t>() << ", digest "
            << row["digest"].get<std::string>() << ", " << row["entries_total"].get<uint64_t>()
            << " entries (";
        bool first = true;
        for (const auto& [tier, n] : row["entries"].items()) {
          out << (first ? "" : ", ") << tier << " " << n.get<uint64_t>();
          first = false;
        }
        out << "), " << row["bytes"].get<uint64_t>() << " bytes, age "
            << static_cast<uint64_t>(row["age_s"].get<double>()) << " s, " << row["sources"]
            << " sources, " << row["agents"] << " agents\n  models:";
        for (const json& model : row["models"]) {
          out << " " << model["name"].get<std::string>() << " (block size "
              << model["block_size"].get<uint32_t>() << ")";
        }
        out << "\n";
      } else {
        out << "\n";
      }
      if (row.contains("verified")) {
        out << "  verifies: " << (row["verified"] == true ? "yes" : "NO");
        if (row.contains("error")) out << " (" << row["error"].get<std::string>() << ")";
        out << "\n";
      }
    }
  }
  if (!newest_ok) {
    err << "kvindex-ctl checkpoint inspect: "
        << (rows.empty() ? "no checkpoint" : "the newest checkpoint does not verify") << "\n";
    return 1;
  }
  return 0;
}

int RunCheckpointCommand(int argc, char** argv) {
  CheckpointArgs args;
  CLI::App app{"Inspect a router's RocksDB checkpoints", "kvindex-ctl checkpoint"};
  app.require_subcommand(1);
  CLI::App* inspect = app.add_subcommand(
      "inspect",
      "Show each checkpoint: position, models, entries per tier, digest, size, age, "
      "and whether it verifies (read-only; safe beside a running router)");
  inspect->add_option("--data-dir", args.data_dir, "The router's --data-dir (or its checkpoints/)")
      ->required();
  inspect->add_flag("--json", args.json, "Print JSON");
  bool no_verify = false;
  inspect->add_flag("--no-verify", no_verify, "Do not read every chunk to verify the digest");
  if (std::optional<int> exit_code = config::Parse(app, argc, argv)) return *exit_code;
  args.verify = !no_verify;
  return RunCheckpointInspect(args, std::cout, std::cerr);
}

}  // namespace kvindex::ctl
