// The compatibility codecs: each parses its owner's request into a
// MatchRequest, runs query::Lookup (the path /v1/match runs) and writes the
// MatchResult in its owner's shape. No matching happens here.
#include "shared/query/compat_api.h"

#include <simdjson.h>

#include <algorithm>
#include <charconv>
#include <map>
#include <optional>
#include <string>
#include <utility>
#include <vector>

#include "shared/metrics/metrics.h"
#include "shared/query/compat_hashes.h"
#include "shared/query/json_writer.h"
#include "shared/query/router_api.h"

namespace kvindex::query {
namespace {

namespace od = simdjson::ondemand;
using Outcome = CompatApi::Outcome;
using Api = CompatApi::Api;

// Largest hash list accepted by the hash APIs (the token limit of /v1/match).
constexpr size_t kMaxHashes = kMaxTokens;

struct Failure {
  Outcome outcome = Outcome::kOk;
  std::string message;
};

Failure Fail(Outcome outcome, std::string message) { return {outcome, std::move(message)}; }

int HttpStatus(Outcome outcome) {
  switch (outcome) {
    case Outcome::kOk:
      return 200;
    case Outcome::kUnknownModel:
      return 404;
    case Outcome::kBlockSizeUnknown:
    case Outcome::kRegistrationRefused:
    case Outcome::kRegistrationConflict:
    case Outcome::kTooManyRegistrations:
      return 409;
    case Outcome::kNotRegistered:
      return 404;
    case Outcome::kUnavailable:
      return 503;
    default:
      return 400;
  }
}

std::string InvalidJson(simdjson::error_code error) {
  return std::string("invalid JSON: ") + simdjson::error_message(error);
}

// Iterates the fields of the root object of `body` (padded by the server),
// calling fn(key, value) -> Failure; stops at the first failure.
template <typename Fn>
Failure ForEachField(std::string_view body, Fn&& fn) {
  if (body.empty())
    return Fail(Outcome::kInvalidRequest, "empty request body: expected a JSON object");
  thread_local od::parser parser;
  od::document doc;
  simdjson::padded_string_view padded(body.data(), body.size(),
                                      body.size() + simdjson::SIMDJSON_PADDING);
  if (auto error = parser.iterate(padded).get(doc); error != simdjson::SUCCESS) {
    return Fail(Outcome::kInvalidRequest, InvalidJson(error));
  }
  od::object object;
  if (auto error = doc.get_object().get(object); error != simdjson::SUCCESS) {
    return Fail(Outcome::kInvalidRequest, error == simdjson::INCORRECT_TYPE
                                              ? std::string("request body must be a JSON object")
                                              : InvalidJson(error));
  }
  for (auto field : object) {
    std::string_view key;
    if (auto error = field.unescaped_key().get(key); error != simdjson::SUCCESS) {
      return Fail(Outcome::kInvalidRequest, InvalidJson(error));
    }
    od::value value;
    if (auto error = field.value().get(value); error != simdjson::SUCCESS) {
      return Fail(Outcome::kInvalidRequest, InvalidJson(error));
    }
    if (Failure f = fn(key, value); f.outcome != Outcome::kOk) return f;
  }
  if (doc.current_location().error() == simdjson::SUCCESS) {
    return Fail(Outcome::kInvalidRequest, "invalid JSON: trailing content after the object");
  }
  return {};
}

bool IsNull(od::value& value) {
  od::json_type type;
  if (value.type().get(type) != simdjson::SUCCESS || type != od::json_type::null) return false;
  bool is_null = false;
  return value.is_null().get(is_null) == simdjson::SUCCESS && is_null;
}

// An optional string: null or absent = "".
Failure ReadString(od::value& value, std::string_view key, std::string* out) {
  if (IsNull(value)) {
    out->clear();
    return {};
  }
  std::string_view text;
  if (value.get_string().get(text) != simdjson::SUCCESS) {
    return Fail(Outcome::kInvalidRequest, "field '" + std::string(key) + "' must be a string");
  }
  out->assign(text);
  return {};
}

Failure ReadU64(od::value& value, std::string_view key, uint64_t max, uint64_t* out) {
  uint64_t number = 0;
  if (value.get_uint64().get(number) != simdjson::SUCCESS || number > max) {
    return Fail(Outcome::kInvalidRequest, "field '" + std::string(key) +
                                              "' must be an unsigned integer up to " +
                                              std::to_string(max));
  }
  *out = number;
  return {};
}

// A hash array: JSON integers in [i64::MIN, u64::MAX] (i64 values are
// reinterpreted: Dynamo sends u64 hashes as i64).
Failure ReadHashes(od::value& value, std::string_view key, std::vector<uint64_t>* out) {
  od::array array;
  if (value.get_array().get(array) != simdjson::SUCCESS) {
    return Fail(Outcome::kInvalidRequest,
                "field '" + std::string(key) + "' must be an array of 64-bit integers");
  }
  out->clear();
  size_t index = 0;
  for (auto element : array) {
    if (index >= kMaxHashes) {
      return Fail(Outcome::kTooManyHashes, "field '" + std::string(key) + "' has more than " +
                                               std::to_string(kMaxHashes) + " elements");
    }
    od::number_type type;
    if (element.get_number_type().get(type) != simdjson::SUCCESS) {
      return Fail(Outcome::kInvalidRequest, "field '" + std::string(key) + "' element " +
                                                std::to_string(index) +
                                                ": expected a 64-bit integer");
    }
    if (type == od::number_type::signed_integer) {
      int64_t v = 0;
      if (element.get_int64().get(v) != simdjson::SUCCESS) {
        return Fail(Outcome::kInvalidRequest, "field '" + std::string(key) + "' element " +
                                                  std::to_string(index) + ": bad integer");
      }
      out->push_back(compat::FromDynamoI64(v));
    } else if (type == od::number_type::unsigned_integer) {
      uint64_t v = 0;
      if (element.get_uint64().get(v) != simdjson::SUCCESS) {
        return Fail(Outcome::kInvalidRequest, "field '" + std::string(key) + "' element " +
                                                  std::to_string(index) + ": bad integer");
      }
      out->push_back(v);
    } else {
      return Fail(Outcome::kInvalidRequest, "field '" + std::string(key) + "' element " +
                                                std::to_string(index) +
                                                ": expected a 64-bit integer");
    }
    ++index;
  }
  return {};
}

// The Mooncake request fields beside the match itself.
struct MooncakeScope {
  std::string tenant = "default";
  std::string instance;  // "" = all
  uint64_t block_size = 0;
  bool has_block_size = false;
};

// The model's block size: from the index, else from --source.
uint64_t ModelBlockSize(const ApiContext& context, std::string_view model) {
  uint64_t block_size = context.index->BlockSize(model).value_or(0);
  for (const auto& [name, configured] : context.configured_models) {
    if (block_size == 0 && name == model) block_size = configured;
  }
  return block_size;
}

Outcome OutcomeOf(const Status& status) {
  switch (status.code()) {
    case absl::StatusCode::kNotFound:
      return Outcome::kUnknownModel;
    case absl::StatusCode::kFailedPrecondition:
      return Outcome::kBlockSizeUnknown;
    case absl::StatusCode::kInvalidArgument:
      return Outcome::kInvalidRequest;
    default:
      return Outcome::kUnavailable;
  }
}

// Runs the one lookup; on error fills *failure.
StatusOr<index::MatchResult> RunLookup(const ApiContext& context, const MatchRequest& request,
                                       Failure* failure) {
  StatusOr<index::MatchResult> result = Lookup(context, request, consume::Endpoint::kQuery);
  if (!result.ok()) {
    *failure = Fail(OutcomeOf(result.status()), std::string(result.status().message()));
  }
  return result;
}

// A decimal u64 (Dynamo's WorkerId) or nothing.
bool NumericWorker(std::string_view worker, uint64_t* out) {
  if (worker.empty()) return false;
  auto [p, ec] = std::from_chars(worker.data(), worker.data() + worker.size(), *out);
  return ec == std::errc() && p == worker.data() + worker.size();
}

void WriteWorkerWithDpRank(JsonWriter& w, uint64_t worker_id, uint32_t dp_rank) {
  w.BeginObject();
  w.Field("worker_id", worker_id);
  w.Field("dp_rank", dp_rank);
  w.EndObject();
}

// Mooncake RFC answer (docs/compat.md): per tenant, per instance, tokens;
// GPU / CPU / DISK cumulative (device; device + host; device + host +
// disk), longest_matched also counts external; the instance's figures are
// the best of its ranks, "DP" has every rank's longest_matched.
void WriteMooncakeAnswer(const MooncakeScope& scope, uint64_t block_size,
                         const index::MatchResult& result, std::string* out) {
  // The rows of one worker together (by worker, then rank), in one pass.
  thread_local std::vector<const index::WorkerMatch*> rows;
  rows.clear();
  for (const index::WorkerMatch& m : result.workers) {
    if (scope.instance.empty() || m.source.worker == scope.instance) rows.push_back(&m);
  }
  std::sort(rows.begin(), rows.end(), [](const index::WorkerMatch* a, const index::WorkerMatch* b) {
    if (a->source.worker != b->source.worker) return a->source.worker < b->source.worker;
    return a->source.dp_rank < b->source.dp_rank;
  });
  // Written by appends (no JsonWriter bookkeeping): the hot answer, like
  // /v1/match's WriteMatchResponse.
  out->reserve(out->size() + 32 + scope.tenant.size() + rows.size() * 160);
  auto number = [out](uint64_t value) {
    char buffer[24];
    const auto r = std::to_chars(buffer, buffer + sizeof(buffer), value);
    out->append(buffer, r.ptr);
  };
  out->append("{\"");
  http::AppendJsonEscaped(scope.tenant, out);
  out->append("\":{");
  for (size_t begin = 0; begin < rows.size();) {
    size_t end = begin + 1;
    while (end < rows.size() && rows[end]->source.worker == rows[begin]->source.worker) ++end;
    uint64_t longest = 0, gpu = 0, cpu = 0, disk = 0;
    for (size_t i = begin; i < end; ++i) {
      const index::WorkerMatch& m = *rows[i];
      longest = std::max<uint64_t>(longest, m.longest);
      gpu = std::max<uint64_t>(gpu, m.device);
      cpu = std::max<uint64_t>(cpu, uint64_t{m.device} + m.host);
      disk = std::max<uint64_t>(disk, uint64_t{m.device} + m.host + m.disk);
    }
    if (begin != 0) out->push_back(',');
    out->push_back('"');
    http::AppendJsonEscaped(rows[begin]->source.worker, out);
    out->append("\":{\"longest_matched\":");
    number(longest * block_size);
    out->append(",\"GPU\":");
    number(gpu * block_size);
    out->append(",\"CPU\":");
    number(cpu * block_size);
    out->append(",\"DISK\":");
    number(disk * block_size);
    out->append(",\"DP\":{");
    for (size_t i = begin; i < end; ++i) {
      if (i != begin) out->push_back(',');
      out->push_back('"');
      number(rows[i]->source.dp_rank);
      out->append("\":");
      number(uint64_t{rows[i]->longest} * block_size);
    }
    out->append("}}");
    begin = end;
  }
  out->append("}}");
}

// The Mooncake fields common to /query and /query_by_hash; false when `key`
// is not one of them.
bool MooncakeScopeField(std::string_view key, od::value& value, MooncakeScope* scope,
                        Failure* failure) {
  if (key == "tenant_id") {
    *failure = ReadString(value, key, &scope->tenant);
    if (scope->tenant.empty()) scope->tenant = "default";
  } else if (key == "instance_id") {
    *failure = ReadString(value, key, &scope->instance);
  } else if (key == "block_size") {
    if (!IsNull(value)) {
      *failure = ReadU64(value, key, UINT32_MAX, &scope->block_size);
      scope->has_block_size = true;
    }
  } else {
    return false;
  }
  return true;
}

}  // namespace

std::string_view CompatApi::ApiLabel(Api api) {
  switch (api) {
    case Api::kDynamoTiered:
      return "dynamo_query_tiered_by_hash";
    case Api::kMooncakeQuery:
      return "mooncake_query";
    case Api::kMooncakeQueryByHash:
      return "mooncake_query_by_hash";
    case Api::kMooncakeWorkers:
      return "mooncake_workers";
    case Api::kMooncakeRegister:
      return "mooncake_register";
    case Api::kMooncakeUnregister:
      return "mooncake_unregister";
    case Api::kSglangMatchPrefix:
      return "sglang_match_external_kv_prefix";
    case Api::kSglangMatch:
      return "sglang_match_external_kv";
    case Api::kSglangHitCounts:
      return "sglang_get_external_kv_hit_counts";
    case Api::kSglangApplyBatch:
      return "sglang_apply_external_kv_batch";
    case Api::kCount:
      break;
  }
  return "unknown";
}

std::string_view CompatApi::OutcomeLabel(Outcome outcome) {
  switch (outcome) {
    case Outcome::kOk:
      return "ok";
    case Outcome::kInvalidRequest:
      return "invalid_request";
    case Outcome::kMissingField:
      return "missing_field";
    case Outcome::kTooManyHashes:
      return "too_many_hashes";
    case Outcome::kUnknownModel:
      return "unknown_model";
    case Outcome::kBlockSizeMismatch:
      return "block_size_mismatch";
    case Outcome::kUnsupportedSeed:
      return "unsupported_seed";
    case Outcome::kBlockSizeUnknown:
      return "block_size_unknown";
    case Outcome::kRegistrationRefused:
      return "registration_refused";
    case Outcome::kUnavailable:
      return "unavailable";
    case Outcome::kModelAmbiguous:
      return "model_ambiguous";
    case Outcome::kUnimplemented:
      return "unimplemented";
    case Outcome::kRegistrationConflict:
      return "registration_conflict";
    case Outcome::kTooManyRegistrations:
      return "too_many_registrations";
    case Outcome::kNotRegistered:
      return "not_registered";
    case Outcome::kCount:
      break;
  }
  return "unknown";
}

CompatApi::CompatApi(const ApiContext* context) : context_(context) {
  collectable_ = std::make_unique<metrics::CallbackCollectable>([this] {
    auto requests = metrics::CounterFamily("kvindex_router_compat_requests_total",
                                           "Compatibility API answers (Dynamo, Mooncake, SGLang), "
                                           "by API and outcome (ok or the error's "
                                           "reason)");
    for (size_t a = 0; a < static_cast<size_t>(Api::kCount); ++a) {
      for (size_t o = 0; o < static_cast<size_t>(Outcome::kCount); ++o) {
        const uint64_t n = counts_[a * static_cast<size_t>(Outcome::kCount) + o].load();
        if (n == 0 && o != 0) continue;
        metrics::AddSample(requests, static_cast<double>(n),
                           {{"api", std::string(ApiLabel(static_cast<Api>(a)))},
                            {"outcome", std::string(OutcomeLabel(static_cast<Outcome>(o)))}});
      }
    }
    auto omitted = metrics::CounterFamily(
        "kvindex_router_compat_workers_omitted_total",
        "Match rows left out of Dynamo answers: the worker id is not a decimal u64 (Dynamo's "
        "WorkerId)");
    metrics::AddSample(omitted, static_cast<double>(workers_not_numeric_.load()),
                       {{"reason", "worker_id_not_numeric"}});
    return std::vector<prometheus::MetricFamily>{std::move(requests), std::move(omitted)};
  });
}

void CompatApi::Count(Api api, Outcome outcome) const {
  if (context_->probe != nullptr && (api == Api::kDynamoTiered || api == Api::kMooncakeQuery ||
                                     api == Api::kMooncakeQueryByHash)) {
    context_->probe->RecordRequest(consume::Endpoint::kQuery, HttpStatus(outcome));
  }
  counts_[static_cast<size_t>(api) * static_cast<size_t>(Outcome::kCount) +
          static_cast<size_t>(outcome)]
      .fetch_add(1, std::memory_order_relaxed);
}

uint64_t CompatApi::count(Api api, Outcome outcome) const {
  return counts_[static_cast<size_t>(api) * static_cast<size_t>(Outcome::kCount) +
                 static_cast<size_t>(outcome)]
      .load();
}

void CompatApi::Register(http::Server& server) {
  server.Handle("POST", "/query_tiered_by_hash",
                [this](const http::Request& rq, http::Response& rs) { QueryTieredByHash(rq, rs); });
  server.Handle("POST", "/query",
                [this](const http::Request& rq, http::Response& rs) { MooncakeQuery(rq, rs); });
  server.Handle("POST", "/query_by_hash", [this](const http::Request& rq, http::Response& rs) {
    MooncakeQueryByHash(rq, rs);
  });
  server.Handle("GET", "/workers",
                [this](const http::Request& rq, http::Response& rs) { MooncakeWorkers(rq, rs); });
  server.Handle("POST", "/register",
                [this](const http::Request& rq, http::Response& rs) { MooncakeRegister(rq, rs); });
  server.Handle("POST", "/unregister", [this](const http::Request& rq, http::Response& rs) {
    MooncakeUnregister(rq, rs);
  });
}

// Dynamo: block_hashes are LocalBlockHash values as i64; the answer is
// WireTieredMatchDetails: device = per (worker, rank) blocks of the prefix
// on device (device_prefix) and per-depth frequencies; lower_tier = per tier
// the blocks matched there (host_pinned = host, disk, external). Blocks on
// device past the first block that is not are not credited (fail closed).
void CompatApi::QueryTieredByHash(const http::Request& request, http::Response& response) const {
  thread_local MatchRequest parsed;
  parsed.Clear();
  bool has_model = false, has_hashes = false;
  Failure failure = ForEachField(request.body, [&](std::string_view key, od::value& value) {
    if (key == "model_name") {
      has_model = true;
      return ReadString(value, key, &parsed.model);
    }
    if (key == "block_hashes") {
      has_hashes = true;
      return ReadHashes(value, key, &parsed.local_hashes);
    }
    if (key == "routing_group") {
      std::string ignored;  // one partition per model in kvindex
      return ReadString(value, key, &ignored);
    }
    return Failure{};
  });
  if (failure.outcome == Outcome::kOk && (!has_model || parsed.model.empty())) {
    failure = Fail(Outcome::kMissingField, "missing field 'model_name' (a non-empty string)");
  }
  if (failure.outcome == Outcome::kOk && !has_hashes) {
    failure = Fail(Outcome::kMissingField, "missing field 'block_hashes' (an array of i64)");
  }
  parsed.has_local_hashes = true;
  StatusOr<index::MatchResult> result = absl::UnknownError("not run");
  if (failure.outcome == Outcome::kOk) result = RunLookup(*context_, parsed, &failure);
  if (failure.outcome != Outcome::kOk) {
    http::SetError(response, HttpStatus(failure.outcome), failure.message);
    Count(Api::kDynamoTiered, failure.outcome);
    return;
  }
  struct Row {
    uint64_t worker_id;
    const index::WorkerMatch* match;
  };
  std::vector<Row> rows;
  rows.reserve(result->workers.size());
  uint32_t depth = 0;
  for (const index::WorkerMatch& m : result->workers) {
    uint64_t id = 0;
    if (!NumericWorker(m.source.worker, &id)) {
      workers_not_numeric_.fetch_add(1, std::memory_order_relaxed);
      continue;
    }
    rows.push_back({id, &m});
    depth = std::max(depth, m.device_prefix);
  }
  JsonWriter w(&response.body);
  w.BeginObject();
  w.Field("block_size", ModelBlockSize(*context_, parsed.model));
  w.Key("tiered");
  w.BeginObject();
  w.Key("device");
  w.BeginObject();
  w.Key("scores");
  w.BeginArray();
  for (const Row& row : rows) {
    if (row.match->device_prefix == 0) continue;
    w.BeginArray();
    WriteWorkerWithDpRank(w, row.worker_id, row.match->source.dp_rank);
    w.UInt(row.match->device_prefix);
    w.EndArray();
  }
  w.EndArray();
  w.Key("frequencies");
  w.BeginArray();
  for (uint32_t i = 0; i < depth; ++i) {
    uint64_t holders = 0;
    for (const Row& row : rows) holders += row.match->device_prefix > i ? 1 : 0;
    w.UInt(holders);
  }
  w.EndArray();
  w.EndObject();
  w.Key("lower_tier");
  w.BeginArray();
  const std::pair<const char*, uint32_t index::WorkerMatch::*> tiers[] = {
      {"host_pinned", &index::WorkerMatch::host},
      {"disk", &index::WorkerMatch::disk},
      {"external", &index::WorkerMatch::external}};
  for (const auto& [name, field] : tiers) {
    w.BeginArray();
    w.String(name);
    w.BeginObject();
    w.Key("hits");
    w.BeginArray();
    for (const Row& row : rows) {
      const uint32_t hits = row.match->*field;
      if (hits == 0) continue;
      w.BeginArray();
      WriteWorkerWithDpRank(w, row.worker_id, row.match->source.dp_rank);
      w.UInt(hits);
      w.EndArray();
    }
    w.EndArray();
    w.EndObject();
    w.EndArray();
  }
  w.EndArray();
  w.EndObject();
  w.EndObject();
  Count(Api::kDynamoTiered, Outcome::kOk);
}

namespace {

// Checks the request's block size against the model's and runs the lookup.
StatusOr<index::MatchResult> MooncakeLookup(const ApiContext& context, const MatchRequest& parsed,
                                            const MooncakeScope& scope, uint64_t* block_size,
                                            Failure* failure) {
  *block_size = ModelBlockSize(context, parsed.model);
  if (*block_size == 0 && !context.index->BlockSize(parsed.model).has_value()) {
    *failure = Fail(Outcome::kUnknownModel, "unknown model '" + parsed.model + "'");
    return absl::NotFoundError(failure->message);
  }
  if (scope.has_block_size && *block_size != 0 && scope.block_size != *block_size) {
    *failure = Fail(Outcome::kBlockSizeMismatch, "block_size " + std::to_string(scope.block_size) +
                                                     " is not the block size of '" + parsed.model +
                                                     "' (" + std::to_string(*block_size) + ")");
    return absl::InvalidArgumentError(failure->message);
  }
  return RunLookup(context, parsed, failure);
}

// Runs the lookup of a parsed Mooncake request (unless `failure` is set
// already) and writes the answer or the error; returns the outcome.
Outcome AnswerMooncake(const ApiContext& context, const MatchRequest& parsed,
                       const MooncakeScope& scope, Failure failure, http::Response& response) {
  if (failure.outcome == Outcome::kOk) {
    uint64_t block_size = 0;
    StatusOr<index::MatchResult> result =
        MooncakeLookup(context, parsed, scope, &block_size, &failure);
    if (failure.outcome == Outcome::kOk) {
      WriteMooncakeAnswer(scope, block_size, *result, &response.body);
      return Outcome::kOk;
    }
  }
  http::SetError(response, HttpStatus(failure.outcome), failure.message);
  return failure.outcome;
}

}  // namespace

// Parsed by /v1/match's parser (its kQuery dialect: the same fast scanner).
void CompatApi::MooncakeQuery(const http::Request& request, http::Response& response) const {
  thread_local MatchRequest parsed;
  Failure failure;
  if (Status s = ParseMatchRequest(request.body, RequestDialect::kQuery, &parsed); !s.ok()) {
    const std::string_view message(s.message().data(), s.message().size());
    failure = Fail(message.starts_with("missing field")        ? Outcome::kMissingField
                   : message.find("more than") != message.npos ? Outcome::kTooManyHashes
                                                               : Outcome::kInvalidRequest,
                   std::string(message));
  }
  MooncakeScope scope;
  if (!parsed.tenant_id.empty()) scope.tenant = parsed.tenant_id;
  scope.instance = parsed.instance_id;
  scope.block_size = parsed.block_size;
  scope.has_block_size = parsed.has_block_size;
  Count(Api::kMooncakeQuery,
        AnswerMooncake(*context_, parsed, scope, std::move(failure), response));
}

void CompatApi::MooncakeQueryByHash(const http::Request& request, http::Response& response) const {
  thread_local MatchRequest parsed;
  parsed.Clear();
  MooncakeScope scope;
  bool has_model = false;
  uint64_t seed = compat::kMooncakeSeed;
  Failure failure = ForEachField(request.body, [&](std::string_view key, od::value& value) {
    Failure f;
    if (key == "model" || key == "model_name") {
      has_model = true;
      return ReadString(value, key, &parsed.model);
    }
    if (key == "seq_hashes" || key == "block_hash") {
      parsed.has_seq_hashes = true;
      return ReadHashes(value, key, &parsed.seq_hashes);
    }
    if (key == "seed" || key == "hash_seed") {
      if (IsNull(value)) return f;
      return ReadU64(value, key, UINT64_MAX, &seed);
    }
    // lora_name and cache_salt are already in the hashes (their seed).
    MooncakeScopeField(key, value, &scope, &f);
    return f;
  });
  if (failure.outcome == Outcome::kOk && (!has_model || parsed.model.empty())) {
    failure = Fail(Outcome::kMissingField, "missing field 'model' (a non-empty string)");
  }
  if (failure.outcome == Outcome::kOk && !parsed.has_seq_hashes) {
    failure = Fail(Outcome::kMissingField, "missing field 'seq_hashes' (an array of u64)");
  }
  if (failure.outcome == Outcome::kOk) {
    if (Status s = compat::CheckMooncakeSeed(seed); !s.ok()) {
      failure = Fail(Outcome::kUnsupportedSeed, std::string(s.message()));
    }
  }
  Count(Api::kMooncakeQueryByHash,
        AnswerMooncake(*context_, parsed, scope, std::move(failure), response));
}

// GET /workers: one row per (model, instance) the index, the ingest side or
// a registration knows, with its DP ranks and entries; "source" says where
// the instance comes from: "register" (POST /register, with its fields) or
// "configured" (--source, an agent, or only the index).
void CompatApi::MooncakeWorkers(const http::Request&, http::Response& response) const {
  struct Row {
    std::vector<uint32_t> ranks;
    uint64_t entries = 0;
    const EngineRegistration* registration = nullptr;
  };
  std::map<std::pair<std::string, std::string>, Row> rows;  // (instance, model)
  for (const index::SourceInfo& info : context_->index->Sources()) {
    Row& row = rows[{info.source.worker, info.model}];
    row.ranks.push_back(info.source.dp_rank);
    for (uint64_t n : info.entries) row.entries += n;
  }
  if (context_->ingest_sources) {
    for (const IngestSourceStatus& s : context_->ingest_sources()) {
      rows[{s.worker, s.model}].ranks.push_back(s.dp_rank);
    }
  }
  std::vector<EngineRegistration> registered;
  if (context_->registrations != nullptr) registered = context_->registrations->Registered();
  for (const EngineRegistration& r : registered) {
    Row& row = rows[{r.instance_id, r.model}];
    row.ranks.push_back(r.dp_rank);
    row.registration = &r;
  }
  JsonWriter w(&response.body);
  w.BeginArray();
  for (auto& [key, row] : rows) {
    std::sort(row.ranks.begin(), row.ranks.end());
    row.ranks.erase(std::unique(row.ranks.begin(), row.ranks.end()), row.ranks.end());
    w.BeginObject();
    w.Field("instance_id", key.first);
    w.Field("modelname", key.second);
    w.Field("tenant_id", row.registration ? row.registration->tenant_id : "default");
    w.Key("dp_ranks");
    w.BeginArray();
    for (uint32_t r : row.ranks) w.UInt(r);
    w.EndArray();
    w.Field("entries", row.entries);
    w.Field("source", row.registration ? "register" : "configured");
    if (const EngineRegistration* r = row.registration) {
      w.Field("endpoint", r->endpoint);
      w.Field("replay_endpoint", r->replay_endpoint);
      w.Field("type", r->type);
      w.Field("block_size", r->block_size);
      w.Field("lora_name", r->lora_name);
      w.Field("additionalsalt", r->additional_salt);
    }
    w.EndObject();
  }
  w.EndArray();
  Count(Api::kMooncakeWorkers, Outcome::kOk);
}

namespace {

std::string RegistrationRefusal(std::string_view verb) {
  return std::string(verb) +
         " is not accepted by a replicated (--nats) router: it follows what the kvindex-agents "
         "publish, and engines are registered with the agent beside them (kvindex-agent --nats "
         "URL --node NODE --source 'worker=INSTANCE,engine=vllm|sglang,model=M,block_size=B,"
         "pub=tcp://HOST:PORT,replay=tcp://HOST:PORT'); an embedded router (kvindex-router "
         "--embedded) accepts it";
}

// Longest string field of a registration (a model name, an endpoint, an id).
constexpr size_t kMaxRegistrationField = 1024;

Failure ReadBoundedString(od::value& value, std::string_view key, std::string* out) {
  if (Failure f = ReadString(value, key, out); f.outcome != Outcome::kOk) return f;
  if (out->size() > kMaxRegistrationField) {
    return Fail(Outcome::kInvalidRequest, "field '" + std::string(key) + "' is longer than " +
                                              std::to_string(kMaxRegistrationField) + " bytes");
  }
  return {};
}

// The fields of /register and /unregister (RFC #1403); unknown fields are
// ignored, as the other Mooncake codecs do. `seen_rank` says dp_rank was given.
Failure ReadRegistration(std::string_view body, EngineRegistration* out, bool* seen_block_size,
                         bool* seen_rank) {
  *seen_block_size = *seen_rank = false;
  return ForEachField(body, [&](std::string_view key, od::value& value) -> Failure {
    if (key == "endpoint") return ReadBoundedString(value, key, &out->endpoint);
    if (key == "replay_endpoint") return ReadBoundedString(value, key, &out->replay_endpoint);
    if (key == "type") return ReadBoundedString(value, key, &out->type);
    if (key == "modelname" || key == "model_name" || key == "model") {
      return ReadBoundedString(value, key, &out->model);
    }
    if (key == "lora_name") return ReadBoundedString(value, key, &out->lora_name);
    if (key == "tenant_id") {
      Failure f = ReadBoundedString(value, key, &out->tenant_id);
      if (out->tenant_id.empty()) out->tenant_id = "default";
      return f;
    }
    if (key == "instance_id") return ReadBoundedString(value, key, &out->instance_id);
    if (key == "additionalsalt" || key == "additional_salt") {
      return ReadBoundedString(value, key, &out->additional_salt);
    }
    if (key == "block_size") {
      if (IsNull(value)) return {};
      uint64_t n = 0;
      if (Failure f = ReadU64(value, key, UINT32_MAX, &n); f.outcome != Outcome::kOk) return f;
      out->block_size = static_cast<uint32_t>(n);
      *seen_block_size = true;
      return {};
    }
    if (key == "dp_rank") {
      if (IsNull(value)) return {};
      uint64_t n = 0;
      if (Failure f = ReadU64(value, key, UINT32_MAX, &n); f.outcome != Outcome::kOk) return f;
      out->dp_rank = static_cast<uint32_t>(n);
      *seen_rank = true;
      return {};
    }
    return {};
  });
}

Outcome RegistryOutcome(const Status& status) {
  switch (status.code()) {
    case absl::StatusCode::kOk:
      return Outcome::kOk;
    case absl::StatusCode::kInvalidArgument:
      return Outcome::kInvalidRequest;
    case absl::StatusCode::kAlreadyExists:
    case absl::StatusCode::kFailedPrecondition:
      return Outcome::kRegistrationConflict;
    case absl::StatusCode::kResourceExhausted:
      return Outcome::kTooManyRegistrations;
    case absl::StatusCode::kNotFound:
      return Outcome::kNotRegistered;
    default:
      return Outcome::kUnavailable;
  }
}

}  // namespace

// {"status": "registered successfully", "instance_id": ...} (201 when it
// started following the engine, 200 when the same registration was running).
void CompatApi::MooncakeRegister(const http::Request& request, http::Response& response) const {
  EngineRegistration registration;
  bool seen_block_size = false, seen_rank = false;
  Failure failure = ReadRegistration(request.body, &registration, &seen_block_size, &seen_rank);
  if (failure.outcome == Outcome::kOk && context_->registrations == nullptr) {
    failure = Fail(Outcome::kRegistrationRefused, RegistrationRefusal("/register"));
  }
  if (failure.outcome == Outcome::kOk) {
    const char* missing = registration.endpoint.empty()      ? "endpoint"
                          : registration.type.empty()        ? "type"
                          : registration.model.empty()       ? "modelname"
                          : registration.instance_id.empty() ? "instance_id"
                          : !seen_block_size                 ? "block_size"
                                                             : nullptr;
    if (missing != nullptr) {
      failure = Fail(Outcome::kMissingField, std::string("missing field '") + missing + "'");
    }
  }
  bool created = false;
  if (failure.outcome == Outcome::kOk) {
    if (Status s = context_->registrations->Register(registration, &created); !s.ok()) {
      failure = Fail(RegistryOutcome(s), std::string(s.message()));
    }
  }
  if (failure.outcome != Outcome::kOk) {
    http::SetError(response, HttpStatus(failure.outcome), failure.message);
  } else {
    response.status = created ? 201 : 200;
    JsonWriter w(&response.body);
    w.BeginObject();
    w.Field("status", created ? "registered successfully" : "already registered");
    w.Field("instance_id", registration.instance_id);
    w.EndObject();
  }
  Count(Api::kMooncakeRegister, failure.outcome);
}

// {"status": "unregistered successfully", "removed_instances":
// ["instance|tenant|rank", ...]}; without dp_rank every rank of the instance.
void CompatApi::MooncakeUnregister(const http::Request& request, http::Response& response) const {
  EngineRegistration registration;
  bool seen_block_size = false, seen_rank = false;
  Failure failure = ReadRegistration(request.body, &registration, &seen_block_size, &seen_rank);
  if (failure.outcome == Outcome::kOk && context_->registrations == nullptr) {
    failure = Fail(Outcome::kRegistrationRefused, RegistrationRefusal("/unregister"));
  }
  if (failure.outcome == Outcome::kOk && registration.instance_id.empty()) {
    failure = Fail(Outcome::kMissingField, "missing field 'instance_id'");
  }
  std::vector<std::string> removed;
  if (failure.outcome == Outcome::kOk) {
    const std::optional<uint32_t> rank =
        seen_rank ? std::optional<uint32_t>(registration.dp_rank) : std::nullopt;
    if (Status s = context_->registrations->Unregister(registration.instance_id, rank, &removed);
        !s.ok()) {
      failure = Fail(RegistryOutcome(s), std::string(s.message()));
    }
  }
  if (failure.outcome != Outcome::kOk) {
    http::SetError(response, HttpStatus(failure.outcome), failure.message);
  } else {
    JsonWriter w(&response.body);
    w.BeginObject();
    w.Field("status", "unregistered successfully");
    w.Key("removed_instances");
    w.BeginArray();
    for (const std::string& id : removed) w.String(id);
    w.EndArray();
    w.EndObject();
  }
  Count(Api::kMooncakeUnregister, failure.outcome);
}

}  // namespace kvindex::query
