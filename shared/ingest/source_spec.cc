#include "shared/ingest/source_spec.h"

#include <charconv>
#include <limits>
#include <optional>

#include "shared/base/strings.h"

namespace kvindex::ingest {
namespace {

constexpr uint32_t kMaxBlockSize = 1u << 20;
constexpr std::string_view kBindPrefix = "bind:";

std::optional<uint64_t> ParseUint(std::string_view text) {
  uint64_t value = 0;
  if (text.empty()) return std::nullopt;
  auto [ptr, ec] = std::from_chars(text.data(), text.data() + text.size(), value);
  if (ec != std::errc() || ptr != text.data() + text.size()) return std::nullopt;
  return value;
}

// Returns `endpoint` with its tcp port advanced by `offset`.
StatusOr<std::string> ShiftPort(std::string_view endpoint, uint32_t offset) {
  if (offset == 0) return std::string(endpoint);
  const size_t colon = endpoint.rfind(':');
  if (endpoint.substr(0, 6) != "tcp://" || colon == std::string_view::npos || colon < 6) {
    return absl::InvalidArgumentError(
        strings::Cat("dp_ranks > 1 needs tcp endpoints with a numeric port, got '", endpoint, "'"));
  }
  std::optional<uint64_t> port = ParseUint(endpoint.substr(colon + 1));
  if (!port || *port == 0 || *port + offset > 65535) {
    return absl::InvalidArgumentError(
        strings::Cat("dp_ranks: port of '", endpoint, "' plus ", offset, " is not a valid port"));
  }
  return strings::Cat(endpoint.substr(0, colon + 1), *port + offset);
}

}  // namespace

StatusOr<std::vector<SourceSpec>> ParseSourceSpec(std::string_view text) {
  SourceSpec spec;
  bool have_worker = false, have_engine = false, have_model = false, have_block_size = false,
       have_pub = false, have_replay = false, have_dp_ranks = false, have_dp_rank = false,
       have_report_mode = false, have_endpoint = false;
  uint32_t dp_ranks = 1;
  auto error = [&](std::string_view what) {
    return absl::InvalidArgumentError(strings::Cat("--source '", text, "': ", what));
  };
  for (std::string_view item : strings::Split(text, ',')) {
    item = strings::Trim(item);
    if (item.empty()) continue;
    const size_t eq = item.find('=');
    if (eq == std::string_view::npos) {
      return error(strings::Cat("expected key=value, got '", item, "'"));
    }
    const std::string_view key = strings::Trim(item.substr(0, eq));
    const std::string_view value = strings::Trim(item.substr(eq + 1));
    auto once = [&](bool* seen) -> bool {
      if (*seen) return false;
      *seen = true;
      return true;
    };
    if (key == "worker") {
      if (!once(&have_worker)) return error("repeated key 'worker'");
      if (value.empty()) return error("empty worker");
      spec.worker = std::string(value);
    } else if (key == "engine") {
      if (!once(&have_engine)) return error("repeated key 'engine'");
      std::optional<wire::EngineKind> kind = wire::EngineKindFromName(value);
      if (!kind) return error(strings::Cat("unknown engine '", value, "' (vllm, sglang, trtllm)"));
      spec.engine = *kind;
    } else if (key == "model") {
      if (!once(&have_model)) return error("repeated key 'model'");
      if (value.empty()) return error("empty model");
      if (value.size() > kMaxModelBytes) {
        return error(
            strings::Cat("model name of ", value.size(), " bytes; at most ", kMaxModelBytes));
      }
      spec.model = std::string(value);
    } else if (key == "block_size") {
      if (!once(&have_block_size)) return error("repeated key 'block_size'");
      std::optional<uint64_t> n = ParseUint(value);
      if (!n || *n == 0 || *n > kMaxBlockSize) {
        return error(strings::Cat("invalid block_size '", value, "'"));
      }
      spec.block_size = static_cast<uint32_t>(*n);
    } else if (key == "pub") {
      if (!once(&have_pub)) return error("repeated key 'pub'");
      std::string_view endpoint = value;
      spec.pub_bind = endpoint.substr(0, kBindPrefix.size()) == kBindPrefix;
      if (spec.pub_bind) endpoint.remove_prefix(kBindPrefix.size());
      if (endpoint.empty()) return error("empty pub endpoint");
      spec.pub_endpoint = std::string(endpoint);
    } else if (key == "replay") {
      if (!once(&have_replay)) return error("repeated key 'replay'");
      spec.replay_endpoint = std::string(value);
    } else if (key == "dp_ranks") {
      if (!once(&have_dp_ranks)) return error("repeated key 'dp_ranks'");
      std::optional<uint64_t> n = ParseUint(value);
      if (!n || *n == 0 || *n > kMaxDpRanks) {
        return error(strings::Cat("invalid dp_ranks '", value, "'"));
      }
      dp_ranks = static_cast<uint32_t>(*n);
    } else if (key == "dp_rank") {
      if (!once(&have_dp_rank)) return error("repeated key 'dp_rank'");
      std::optional<uint64_t> n = ParseUint(value);
      if (!n || *n >= kMaxDpRanks) {
        return error(strings::Cat("invalid dp_rank '", value, "' (0..", kMaxDpRanks - 1, ")"));
      }
      spec.dp_rank = static_cast<uint32_t>(*n);
    } else if (key == "report_mode") {
      if (!once(&have_report_mode)) return error("repeated key 'report_mode'");
      if (value != "exact" && value != "full") {
        return error(strings::Cat("invalid report_mode '", value, "' (exact, full)"));
      }
      spec.report_full = value == "full";
    } else if (key == "endpoint") {
      if (!once(&have_endpoint)) return error("repeated key 'endpoint'");
      const size_t colon = value.rfind(':');
      std::optional<uint64_t> port =
          colon == std::string_view::npos ? std::nullopt : ParseUint(value.substr(colon + 1));
      if (colon == 0 || !port || *port == 0 || *port > 65535) {
        return error(strings::Cat("invalid endpoint '", value, "' (HOST:PORT)"));
      }
      spec.endpoint = std::string(value);
    } else {
      return error(strings::Cat("unknown key '", key, "'"));
    }
  }
  if (!have_worker) return error("missing worker=");
  if (!have_engine) return error("missing engine=");
  if (!have_model) return error("missing model=");
  if (!have_block_size) return error("missing block_size=");
  if (!have_pub) return error("missing pub=");
  if (have_dp_rank && have_dp_ranks) return error("dp_rank and dp_ranks are exclusive");

  std::vector<SourceSpec> specs;
  specs.reserve(dp_ranks);
  for (uint32_t rank = 0; rank < dp_ranks; ++rank) {
    SourceSpec ranked = spec;
    if (have_dp_ranks) ranked.dp_rank = rank;
    ranked.dp_ranks = dp_ranks;
    ranked.rank_declared = have_dp_rank || have_dp_ranks;
    StatusOr<std::string> pub = ShiftPort(spec.pub_endpoint, rank);
    if (!pub.ok()) return error(std::string(pub.status().message()));
    ranked.pub_endpoint = *std::move(pub);
    if (!spec.replay_endpoint.empty()) {
      StatusOr<std::string> replay = ShiftPort(spec.replay_endpoint, rank);
      if (!replay.ok()) return error(std::string(replay.status().message()));
      ranked.replay_endpoint = *std::move(replay);
    }
    specs.push_back(std::move(ranked));
  }
  return specs;
}

std::string FormatSourceSpec(const SourceSpec& spec) {
  std::string out =
      strings::Cat("worker=", spec.worker, ",engine=", wire::EngineKindName(spec.engine),
                   ",model=", spec.model, ",block_size=", spec.block_size,
                   ",pub=", spec.pub_bind ? kBindPrefix : std::string_view(), spec.pub_endpoint);
  if (!spec.replay_endpoint.empty()) out += strings::Cat(",replay=", spec.replay_endpoint);
  if (spec.dp_rank != 0) out += strings::Cat(",dp_rank=", spec.dp_rank);
  if (spec.report_full) out += ",report_mode=full";
  if (!spec.endpoint.empty()) out += strings::Cat(",endpoint=", spec.endpoint);
  return out;
}

std::string SourceLabel(const SourceSpec& spec) {
  return strings::Cat(spec.worker, "/", spec.dp_rank);
}

}  // namespace kvindex::ingest
