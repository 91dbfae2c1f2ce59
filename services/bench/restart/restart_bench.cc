#include "services/bench/restart/restart_bench.h"

#include <sys/mman.h>
#include <sys/resource.h>
#include <unistd.h>

#include <CLI/CLI.hpp>
#include <atomic>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <filesystem>
#include <functional>
#include <nlohmann/json.hpp>
#include <optional>
#include <string>
#include <thread>
#include <vector>

#include "services/bench/index/latency.h"
#include "services/bench/index/peer_workload.h"
#include "services/router/router.h"
#include "shared/codec/placement_codec.h"
#include "shared/config/cli.h"
#include "shared/index/kv_index.h"
#include "shared/nats/connection.h"
#include "shared/nats/stream.h"
#include "shared/nats/testing/nats_server.h"
#include "shared/publish/jetstream_publisher.h"
#include "shared/trace/mooncake_trace.h"
#include "storage/checkpoint_store.h"
#include "storage/checkpointer.h"

namespace kvindex::bench {
namespace {

namespace fs = std::filesystem;
using Clock = std::chrono::steady_clock;

double Since(Clock::time_point start) {
  return std::chrono::duration<double>(Clock::now() - start).count();
}

struct Options {
  std::string trace = "data/mooncake/conversation_trace.jsonl";
  size_t requests = 0;
  std::string dir;  // default: a temp dir, removed at the end
  bool json = false;
  double lookup_seconds = 2.0;
  // Larger states: the peer workload's copies and per-worker capacity
  // (index bench: --copies 16 --capacity 625000 is 40 M entries).
  uint32_t copies = PeerConfig{}.copies;
  uint64_t capacity = PeerConfig{}.capacity;
  bool checkpoint_only = false;  // skip the replay baselines and the routers
};

// Linux: the resident set now and its peak since the last ResetPeakRss, in
// bytes (0 when /proc cannot be read).
uint64_t StatusField(const char* field) {
  std::FILE* f = std::fopen("/proc/self/status", "r");
  if (f == nullptr) return 0;
  char line[256];
  uint64_t kib = 0;
  const size_t len = std::strlen(field);
  while (std::fgets(line, sizeof(line), f) != nullptr) {
    if (std::strncmp(line, field, len) == 0 && line[len] == ':') {
      kib = std::strtoull(line + len + 1, nullptr, 10);
      break;
    }
  }
  std::fclose(f);
  return kib * 1024;
}
bool ResetPeakRss() {
  std::FILE* f = std::fopen("/proc/self/clear_refs", "w");
  if (f == nullptr) return false;
  const bool ok = std::fputs("5", f) >= 0;
  return std::fclose(f) == 0 && ok;
}

void Apply(const PeerStream& stream, index::IndexInterface* index) {
  uint64_t position = 0;
  for (const PeerRequest& request : stream.requests) {
    if (!request.removed.block_hashes.empty()) index->Apply(request.removed, ++position);
    if (!request.stored.block_hashes.empty()) index->Apply(request.stored, ++position);
  }
}

// CPU time of the calling thread, in seconds (a figure the machine's load
// does not inflate, unlike the wall time).
double ThreadCpuSeconds() {
  rusage usage{};
  if (getrusage(RUSAGE_THREAD, &usage) != 0) return 0;
  return static_cast<double>(usage.ru_utime.tv_sec + usage.ru_stime.tv_sec) +
         static_cast<double>(usage.ru_utime.tv_usec + usage.ru_stime.tv_usec) * 1e-6;
}

// --checkpoint-only fills the index as the stream is generated, keeping only
// this many requests' queries (for the lookups): the stream is never held
// whole, so a 160 M state fits beside the index.
constexpr size_t kKeptQueries = 50000;

// Peer queries round-robin for `seconds` (or until `stop`), timed each.
std::vector<uint32_t> Lookups(const index::IndexInterface& index, const PeerStream& stream,
                              double seconds, const std::atomic<bool>* stop) {
  std::vector<uint32_t> ns;
  const auto start = Clock::now();
  size_t i = 0;
  while (Since(start) < seconds && (stop == nullptr || !stop->load())) {
    const PeerRequest& request = stream.requests[i++ % stream.requests.size()];
    if (request.query.empty()) continue;
    uint32_t t = 0;
    if (!TimedMatch(index, kPeerModel, request.query, &t).ok()) continue;
    ns.push_back(t);
  }
  return ns;
}

// The stream as an agent publishes it: one placement message per request.
std::vector<std::string> EncodeMessages(const PeerStream& stream) {
  std::vector<std::string> messages;
  std::vector<PlacementEvent> events;
  for (const PeerRequest& request : stream.requests) {
    events.clear();
    if (!request.removed.block_hashes.empty()) events.push_back(request.removed);
    if (!request.stored.block_hashes.empty()) events.push_back(request.stored);
    if (events.empty()) continue;
    codec::EncodePlacementBatch(events, &messages.emplace_back());
  }
  return messages;
}

bool WaitFor(const std::function<bool()>& ready, std::chrono::seconds timeout) {
  const auto deadline = Clock::now() + timeout;
  while (!ready()) {
    if (Clock::now() > deadline) return false;
    std::this_thread::sleep_for(std::chrono::milliseconds(2));
  }
  return true;
}

// The product path, end to end: the stream published into JetStream by an
// agent's publisher, then a router started on an empty --data-dir (replay
// from position 1 to ready), stopped (its shutdown checkpoint), and started
// again on the same --data-dir (checkpoint + nothing to replay, to ready).
struct RouterFigures {
  double replay_to_ready_s = 0;
  double restart_to_ready_s = 0;
  uint64_t replay_digest = 0, restart_digest = 0, applied_seq = 0;
  uint64_t messages = 0;
};

StatusOr<RouterFigures> RunRouters(const PeerStream& stream, const std::string& dir) {
  KVINDEX_ASSIGN_OR_RETURN(auto server, nats::testing::NatsServerProcess::Start({}));
  nats::StreamOptions stream_options;
  // Unique per run: two benches must never share a stream by accident.
  const std::string tag = std::to_string(::getpid());
  stream_options.name = "KVRESTART" + tag;
  stream_options.subjects.prefix = "kvrestart" + tag + ".events";
  nats::NatsOptions nats_options;
  nats_options.url = server->url();
  {
    prometheus::Registry registry;
    KVINDEX_ASSIGN_OR_RETURN(
        auto connection, nats::Connection::Connect(nats_options, &registry, "agent", {}, false));
    KVINDEX_RETURN_IF_ERROR(nats::EnsureStream(connection->jetstream(), stream_options));
    JetStreamPublisherOptions po;
    po.node = "restart-bench";
    po.subjects = stream_options.subjects;
    // The whole stream (~0.5 GB) may sit ahead of NATS's acks: with the
    // agent's 64 MiB default a loaded machine overflowed it, the publisher
    // dropped sources until their snapshot (its designed overflow path),
    // and both routers ended on another digest than the index.
    po.buffer_bytes = size_t{2} << 30;
    JetStreamPublisher publisher(connection->raw(), po, &registry);
    KVINDEX_RETURN_IF_ERROR(publisher.Start());
    std::vector<PlacementEvent> events;
    for (const PeerRequest& request : stream.requests) {
      events.clear();
      if (!request.removed.block_hashes.empty()) events.push_back(request.removed);
      if (!request.stored.block_hashes.empty()) events.push_back(request.stored);
      // As an agent stamps them: routers apply a node's events only.
      for (PlacementEvent& event : events) event.agent = po.node;
      if (!events.empty()) KVINDEX_RETURN_IF_ERROR(publisher.Publish(events));
    }
    KVINDEX_RETURN_IF_ERROR(publisher.Flush());
    publisher.Stop();
  }
  RouterFigures figures;
  auto run = [&](double* seconds, uint64_t* digest) -> Status {
    router::RouterOptions ro;
    ro.http = "127.0.0.1:0";
    ro.http_threads = 2;
    ro.data_dir = dir + "/router";
    ro.nats = nats_options;
    ro.stream = stream_options;
    ro.checkpoint_interval = std::chrono::milliseconds(0);  // only the shutdown one
    const auto start = Clock::now();
    router::Router r(std::move(ro));
    KVINDEX_RETURN_IF_ERROR(r.Start());
    if (!WaitFor([&] { return r.Ready(); }, std::chrono::seconds(600))) {
      return absl::DeadlineExceededError("router not ready");
    }
    *seconds = Since(start);
    *digest = r.index().Stats().digest;
    figures.applied_seq = r.index().Stats().applied_seq;
    r.Stop();
    return absl::OkStatus();
  };
  KVINDEX_RETURN_IF_ERROR(run(&figures.replay_to_ready_s, &figures.replay_digest));
  figures.messages = figures.applied_seq;
  KVINDEX_RETURN_IF_ERROR(run(&figures.restart_to_ready_s, &figures.restart_digest));
  return figures;
}

uint64_t Total(const index::IndexStats& stats) {
  uint64_t total = 0;
  for (uint64_t n : stats.entries) total += n;
  return total;
}

}  // namespace

int RunRestartBench(int argc, char** argv) {
  Options opt;
  CLI::App app{
      "kvindex-bench restart: restart from a RocksDB checkpoint next to replaying the "
      "events, on the peer workload's final state",
      "kvindex-bench restart"};
  app.add_option("--trace", opt.trace, "Mooncake trace (JSON lines with hash_ids)")
      ->capture_default_str();
  app.add_option("--requests", opt.requests, "use only the first N trace lines (0 = all)");
  app.add_option("--dir", opt.dir, "checkpoint database directory (default: a temp dir)");
  app.add_option("--lookup-seconds", opt.lookup_seconds,
                 "lookup sampling time without a checkpoint")
      ->capture_default_str();
  app.add_option("--copies", opt.copies, "peer workload: copies of the trace (state size)")
      ->capture_default_str();
  app.add_option("--capacity", opt.capacity, "peer workload: blocks per worker (state size)")
      ->capture_default_str();
  app.add_flag("--checkpoint-only", opt.checkpoint_only,
               "measure only the checkpoint (apply pause, peak extra memory, write) and the "
               "restore, without the replay baselines and the routers");
  app.add_flag("--json", opt.json, "print one JSON object");
  if (std::optional<int> code = config::Parse(app, argc, argv)) return *code;
  const bool locked = mlockall(MCL_CURRENT | MCL_FUTURE) == 0;

  auto trace = trace::ReadTrace(opt.trace, opt.requests);
  if (!trace.ok()) {
    std::fprintf(stderr, "kvindex-bench restart: %s\n",
                 std::string(trace.status().message()).c_str());
    return 1;
  }
  PeerConfig config;
  config.max_requests = opt.requests;
  config.copies = opt.copies;
  config.capacity = opt.capacity;
  // --checkpoint-only: generated and applied request by request (the
  // stream keeps the first kKeptQueries requests' queries only); else the
  // whole stream first (the routers publish it), then applied (timed).
  const auto fill_start = Clock::now();
  double replay_s = 0;  // apply only (not measured with --checkpoint-only)
  index::KvIndex original;
  PeerStream stream;
  if (opt.checkpoint_only) {
    uint64_t position = 0;
    GeneratePeerRequests(
        *trace, config,
        [&](size_t i, PeerRequest& request) {
          if (!request.removed.block_hashes.empty()) original.Apply(request.removed, ++position);
          if (!request.stored.block_hashes.empty()) original.Apply(request.stored, ++position);
          if (i < kKeptQueries) stream.requests.push_back({std::move(request.query), {}, {}});
        },
        &stream);
  } else {
    stream = GeneratePeerStream(*trace, config);
    const auto replay_start = Clock::now();
    Apply(stream, &original);
    replay_s = Since(replay_start);
  }
  const double fill_s = Since(fill_start);
  trace->clear();
  trace->shrink_to_fit();
  const bool own_dir = opt.dir.empty();
  if (own_dir) {
    std::string pattern = (fs::temp_directory_path() / "kvindex-restart-XXXXXX").string();
    opt.dir = mkdtemp(pattern.data());
  }
  const std::string db = (fs::path(opt.dir) / "checkpoints").string();
  fs::remove_all(db);

  const index::IndexStats stats = original.Stats();
  const uint64_t entries = Total(stats);

  // Baseline as a router replays a log: decode each message, apply it.
  double log_replay_s = 0;
  bool log_replay_equal = opt.checkpoint_only;
  if (!opt.checkpoint_only) {
    const std::vector<std::string> messages = EncodeMessages(stream);
    const auto start = Clock::now();
    index::KvIndex replayed;
    uint64_t position = 0;
    for (const std::string& message : messages) {
      auto batch = codec::DecodePlacementBatch(message);
      if (!batch.ok()) return 1;
      replayed.ApplyMessage(batch->events, ++position);
    }
    log_replay_s = Since(start);
    log_replay_equal = replayed.Stats().digest == stats.digest;
  }

  // Lookups with no checkpoint running.
  std::vector<uint32_t> idle =
      Lookups(original, stream, opt.checkpoint_only ? 0.2 : opt.lookup_seconds, nullptr);

  // One checkpoint, with lookups running beside it.
  auto store = storage::CheckpointStore::Open(db);
  if (!store.ok()) {
    std::fprintf(stderr, "kvindex-bench restart: %s\n", store.status().ToString().c_str());
    return 1;
  }
  std::atomic<bool> done{false};
  double capture_s = 0;
  std::vector<uint32_t> during;
  std::thread reader([&] { during = Lookups(original, stream, 1e9, &done); });
  std::this_thread::sleep_for(std::chrono::milliseconds(50));
  // Peak extra memory: the resident set's peak during the checkpoint above
  // the resident set before it (the index, the stream; under mlockall every
  // allocation is resident).
  const bool peak_reset = ResetPeakRss();
  const uint64_t rss_before = StatusField("VmRSS");
  const double cpu_start = ThreadCpuSeconds();
  const auto write_start = Clock::now();
  // As the router does it: the capture opens on the writer (the apply
  // pause), then the checkpoint is read from it and written.
  auto info = [&]() -> StatusOr<storage::CheckpointInfo> {
    auto capture = original.BeginCapture();
    capture_s = Since(write_start);
    if (!capture.ok()) return capture.status();
    return (*store)->WriteCapture(storage::CaptureManifest(nullptr), capture->get());
  }();
  const double write_s = Since(write_start);
  const double write_cpu_s = ThreadCpuSeconds() - cpu_start;
  const uint64_t rss_peak = StatusField("VmHWM");
  const uint64_t extra_bytes = peak_reset && rss_peak > rss_before ? rss_peak - rss_before : 0;
  done.store(true);
  reader.join();
  if (!info.ok()) {
    std::fprintf(stderr, "kvindex-bench restart: %s\n", info.status().ToString().c_str());
    return 1;
  }
  const uint64_t disk_bytes = (*store)->DiskBytes();
  store->reset();

  // Restart: open, load + verify, restore into an empty index.
  const auto restart_start = Clock::now();
  index::KvIndex restored;
  auto reopened = storage::CheckpointStore::Open(db);
  if (!reopened.ok()) return 1;
  uint64_t loaded_id = 0;
  size_t skipped = 0;
  auto loaded = storage::RestoreNewest(**reopened, &restored, nullptr, &loaded_id, &skipped);
  if (!loaded.ok() || !loaded->has_value()) {
    std::fprintf(stderr, "kvindex-bench restart: no checkpoint restored\n");
    return 1;
  }
  const double restart_s = Since(restart_start);
  const bool same = log_replay_equal && restored.Stats().digest == stats.digest &&
                    Total(restored.Stats()) == entries &&
                    restored.Stats().applied_seq == stats.applied_seq;

  // The same through real routers on JetStream.
  StatusOr<RouterFigures> routers =
      opt.checkpoint_only
          ? RouterFigures{.replay_digest = stats.digest, .restart_digest = stats.digest}
          : RunRouters(stream, opt.dir);
  if (!routers.ok()) {
    std::fprintf(stderr, "kvindex-bench restart: routers: %s\n",
                 routers.status().ToString().c_str());
    return 1;
  }
  const bool routers_equal =
      routers->replay_digest == stats.digest && routers->restart_digest == stats.digest;

  Percentiles idle_p = ComputePercentiles(&idle);
  Percentiles during_p = ComputePercentiles(&during);
  nlohmann::json out;
  out["entries"] = entries;
  out["trace_requests"] = stream.requests.size();
  out["events"] = stats.applied_seq;
  // Headline figures: real routers on JetStream, from Router::Start to ready.
  out["replay_to_ready_s"] = routers->replay_to_ready_s;
  out["restart_to_ready_s"] = routers->restart_to_ready_s;
  out["speedup_vs_replay"] = routers->restart_to_ready_s > 0
                                 ? routers->replay_to_ready_s / routers->restart_to_ready_s
                                 : 0;
  out["stream_messages"] = routers->messages;
  out["digest"] = stats.digest;
  out["router_replay_digest"] = routers->replay_digest;
  out["router_restart_digest"] = routers->restart_digest;
  // In-process: the index alone, no log, no process around it.
  out["inprocess_decode_apply_replay_s"] = log_replay_s;
  out["inprocess_apply_only_replay_s"] = replay_s;
  out["distinct_blocks"] = original.DistinctBlocks(kPeerModel);
  out["inprocess_restore_s"] = restart_s;
  out["inprocess_speedup_vs_decode_apply"] = restart_s > 0 ? log_replay_s / restart_s : 0;
  out["checkpoint_write_s"] = write_s;
  // The checkpointing thread's CPU time (capture + read + write; the
  // kernel's part of the file writes included).
  out["checkpoint_write_cpu_s"] = write_cpu_s;
  out["rss_before_checkpoint_bytes"] = rss_before;
  out["capture_s"] = capture_s;
  // #26.8: what one checkpoint costs the apply loop and the process.
  out["checkpoint_pause_s"] = capture_s;
  out["checkpoint_peak_extra_bytes"] = extra_bytes;
  out["checkpoint_peak_extra_bytes_per_entry"] =
      entries ? static_cast<double>(extra_bytes) / static_cast<double>(entries) : 0;
  out["checkpoint_only"] = opt.checkpoint_only;
  out["fill_s"] = fill_s;  // generate the stream + apply it
  out["checkpoint_bytes"] = info->bytes;
  out["disk_bytes"] = disk_bytes;
  out["disk_bytes_per_entry"] = entries ? static_cast<double>(disk_bytes) / entries : 0;
  out["lookup_p50_us"] = idle_p.p50 / 1000;
  out["lookup_p99_us"] = idle_p.p99 / 1000;
  out["lookup_p50_during_checkpoint_us"] = during_p.p50 / 1000;
  out["lookup_p99_during_checkpoint_us"] = during_p.p99 / 1000;
  out["lookups_during_checkpoint"] = during.size();
  out["restored_equal"] = same && routers_equal;
  out["memory_locked"] = locked;
  out["targets"] = {
      {"restart_to_ready_s", 3.0},         {"speedup_vs_replay", 10.0},
      {"disk_bytes_per_entry", 16.0},      {"lookup_p99_during_over_outside", 2.0},
      {"checkpoint_pause_s_at_160M", 0.3}, {"checkpoint_peak_extra_bytes_per_entry_at_160M", 2.0}};
  if (opt.json) {
    std::printf("%s\n", out.dump().c_str());
  } else {
    std::printf("kvindex-bench restart: %llu entries (%llu events)\n",
                static_cast<unsigned long long>(entries),
                static_cast<unsigned long long>(stats.applied_seq));
    if (opt.checkpoint_only)
      std::printf("  (--checkpoint-only: no replay baselines, no routers)\n");
    std::printf("  fill (generate + apply) %.1f s, resident before the checkpoint %.2f GB\n",
                fill_s, static_cast<double>(rss_before) / 1e9);
    std::printf(
        "  router replay to ready   %8.3f s   (baseline: empty --data-dir, %llu stream "
        "messages from JetStream)\n",
        routers->replay_to_ready_s, static_cast<unsigned long long>(routers->messages));
    std::printf(
        "  router restart to ready  %8.3f s   (its checkpoint, nothing to replay)  "
        "%.1fx faster\n",
        routers->restart_to_ready_s, routers->replay_to_ready_s / routers->restart_to_ready_s);
    std::printf("  in-process: restore %.3f s, decode + apply %.3f s (%.1fx), apply only %.3f s\n",
                restart_s, log_replay_s, log_replay_s / restart_s, replay_s);
    std::printf(
        "  checkpoint write      %8.3f s   (of which capture, the apply pause: %.4f s; "
        "%.3f s CPU)\n",
        write_s, capture_s, write_cpu_s);
    std::printf("  checkpoint peak extra %8.2f bytes/entry (%llu bytes above the resident set)\n",
                entries ? static_cast<double>(extra_bytes) / static_cast<double>(entries) : 0.0,
                static_cast<unsigned long long>(extra_bytes));
    std::printf("  disk                  %8.2f bytes/entry (%llu bytes)\n",
                entries ? static_cast<double>(disk_bytes) / entries : 0.0,
                static_cast<unsigned long long>(disk_bytes));
    std::printf(
        "  lookup p50/p99        %8.2f / %.2f us outside, %.2f / %.2f us during a "
        "checkpoint (%zu lookups)\n",
        idle_p.p50 / 1000, idle_p.p99 / 1000, during_p.p50 / 1000, during_p.p99 / 1000,
        during.size());
    std::printf("  restored state equal: %s\n", same && routers_equal ? "yes" : "NO");
  }
  if (own_dir) fs::remove_all(opt.dir);
  return same && routers_equal ? 0 : 1;
}

}  // namespace kvindex::bench
