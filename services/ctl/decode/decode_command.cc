#include "services/ctl/decode/decode_command.h"

#include <CLI/CLI.hpp>
#include <iostream>
#include <nlohmann/json.hpp>

#include "services/ctl/decode/capture_file.h"
#include "services/ctl/decode/event_json.h"
#include "shared/config/cli.h"
#include "shared/model/drop_reason.h"
#include "shared/normalize/source_processor.h"
#include "shared/wire/engine_kind.h"

namespace kvindex::ctl {
namespace {

void PrintStats(const normalize::SourceStats& stats, std::ostream& err) {
  nlohmann::json dropped = nlohmann::json::object();
  for (int r = 1; r < kNumDropReasons; ++r) {
    const uint64_t n = stats.dropped[r].load();
    if (n > 0) dropped[std::string(DropReasonLabel(static_cast<DropReason>(r)))] = n;
  }
  const nlohmann::json j = {
      {"batches", stats.batches.load()},
      {"empty_batches", stats.empty_batches.load()},
      {"events_stored", stats.events_received[normalize::kEventStored].load()},
      {"events_removed", stats.events_received[normalize::kEventRemoved].load()},
      {"events_cleared", stats.events_received[normalize::kEventCleared].load()},
      {"events_unknown", stats.events_received[normalize::kEventUnknown].load()},
      {"blocks_stored", stats.blocks_received[normalize::kBlocksStored].load()},
      {"blocks_removed", stats.blocks_received[normalize::kBlocksRemoved].load()},
      {"unknown_keys", stats.unknown_keys.load()},
      {"placements_stored", stats.placements_stored.load()},
      {"placements_removed", stats.placements_removed.load()},
      {"clears", stats.clears.load()},
      {"dropped", dropped},
  };
  err << j.dump() << '\n';
}

}  // namespace

int RunDecode(const DecodeArgs& args, std::ostream& out, std::ostream& err) {
  const std::string_view prefix = "kvindex-ctl decode: ";
  const std::optional<wire::EngineKind> engine = wire::EngineKindFromName(args.engine);
  if (!engine.has_value()) {
    err << prefix << "unknown engine '" << args.engine << "' (vllm, sglang, trtllm)\n";
    return 2;
  }
  normalize::SourceOptions options;
  options.worker = args.worker;
  options.model = args.model;
  options.block_size = args.block_size;
  options.engine = *engine;
  options.dp_rank = args.dp_rank;
  options.group.group_idx = args.group_idx;
  options.group.spec_kind = args.spec_kind;  // args outlives the processor
  if (Status status = options.Validate(); !status.ok()) {
    err << prefix << status.message() << '\n';
    return 2;
  }
  normalize::SourceStats stats;
  normalize::SourceProcessor processor(options, &stats);
  EventJsonWriter writer(&out);
  processor.SetObserver(&writer);

  std::vector<PlacementEvent> placements;
  uint64_t batch_index = 0;
  int exit_code = 0;
  for (const std::string& file : args.files) {
    StatusOr<std::vector<uint8_t>> contents = ReadFileBytes(file);
    if (!contents.ok()) {
      err << prefix << contents.status().message() << '\n';
      exit_code = 1;
      break;
    }
    std::vector<CapturedBatch> batches;
    if (args.frames) {
      StatusOr<std::vector<CapturedBatch>> split = SplitFrames(*contents);
      if (!split.ok()) {
        err << prefix << file << ": " << split.status().message() << '\n';
        exit_code = 1;
        break;
      }
      batches = *std::move(split);
    } else {
      batches.push_back({*contents, 0, std::nullopt, std::nullopt});
    }
    for (const CapturedBatch& batch : batches) {
      writer.SetBatchContext(file, batch_index++, batch.file_offset, batch.seq, batch.topic);
      placements.clear();
      const Status status = processor.ProcessPayload(batch.payload, &placements);
      if (!status.ok()) {
        // The message is "byte N: ..." with N inside the payload; report
        // the offset inside the file (they differ for --frames captures).
        std::string message(status.message());
        const size_t colon = message.find(": ");
        if (message.starts_with("byte ") && colon != std::string::npos) message.erase(0, colon + 2);
        const size_t payload_offset = processor.last_error_offset();
        err << prefix << file << ": byte " << batch.file_offset + payload_offset << ": " << message;
        if (batch.seq.has_value()) {
          err << " (message seq " << *batch.seq << ", payload byte " << payload_offset << ")";
        }
        err << '\n';
        exit_code = 1;
        break;
      }
    }
    if (exit_code != 0) break;
  }
  out.flush();
  if (args.stats) PrintStats(stats, err);
  return exit_code;
}

int RunDecodeCommand(int argc, char** argv) {
  DecodeArgs args;
  CLI::App app{
      "Decode engine KV-event msgpack payloads (raw files or --frames captures) and print one "
      "JSON object per engine event with its normalized tier, canonical hashes and drop reason. "
      "Files are consecutive batches of one source.",
      "kvindex-ctl decode"};
  app.add_option("--engine", args.engine, "Engine that produced the payloads")
      ->required()
      ->check(CLI::IsMember({"vllm", "sglang", "trtllm"}));
  app.add_option("--block-size", args.block_size, "The model's tokens per block")
      ->check(CLI::PositiveNumber)
      ->capture_default_str();
  app.add_flag("--frames", args.frames,
               "FILEs are ZMQ captures: frames of [u32 BE length][bytes], 3 per message "
               "(topic, seq, payload)");
  app.add_option("--model", args.model, "Model name for placement events")->capture_default_str();
  app.add_option("--worker", args.worker, "Worker id of the source")->capture_default_str();
  app.add_option("--dp-rank", args.dp_rank, "Configured dp rank (the envelope's rank wins)")
      ->capture_default_str();
  app.add_option("--group-idx", args.group_idx, "KV-cache group to index")->capture_default_str();
  app.add_option("--spec-kind", args.spec_kind, "kv_cache_spec_kind to index")
      ->capture_default_str();
  app.add_flag("--stats", args.stats, "Print the source counters as JSON to stderr at the end");
  app.add_option("files", args.files, "Payload or capture files, in batch order")->required();
  if (std::optional<int> exit_code = config::Parse(app, argc, argv)) return *exit_code;
  return RunDecode(args, std::cout, std::cerr);
}

}  // namespace kvindex::ctl
