#include "shared/query/router_api.h"

#include <algorithm>
#include <charconv>
#include <chrono>
#include <cstdio>
#include <cstring>
#include <map>
#include <span>
#include <utility>

#include "absl/container/flat_hash_map.h"
#include "shared/hashing/canonical_hash.h"
#include "shared/metrics/metrics.h"
#include "shared/query/json_writer.h"
#include "shared/query/match_request.h"
#include "shared/tokenize/chat_encoder.h"

namespace kvindex::query {
namespace {

using Clock = std::chrono::steady_clock;

std::string_view Message(const Status& status) {
  return std::string_view(status.message().data(), status.message().size());
}

int StatusToHttp(const Status& status) {
  switch (status.code()) {
    case absl::StatusCode::kNotFound:
      return 404;
    case absl::StatusCode::kInvalidArgument:
      return 400;
    case absl::StatusCode::kFailedPrecondition:
      return 409;
    case absl::StatusCode::kResourceExhausted:
      return 413;
    case absl::StatusCode::kUnavailable:
      return 503;
    default:
      return 500;
  }
}

void WriteEntries(JsonWriter& w, const uint64_t (&entries)[kNumTiers]) {
  w.BeginObject();
  for (int t = 0; t < kNumTiers; ++t) w.Field(TierName(static_cast<Tier>(t)), entries[t]);
  w.EndObject();
}

// /v1/match "text" or "messages": the model's tokenizer turns the text, or
// the body's chat request rendered as vLLM renders it, into the request's
// tokens.
Status Tokenize(const ApiContext& context, std::string_view body, MatchRequest* req) {
  const tokenize::Tokenizer* tokenizer =
      context.tokenizers == nullptr ? nullptr : context.tokenizers->Find(req->model);
  if (tokenizer == nullptr) {
    return absl::InvalidArgumentError("no tokenizer for model '" + req->model +
                                      "': start the router with --tokenizer MODEL=DIR, or send "
                                      "'tokens'");
  }
  const std::string field = req->has_text ? "text" : "messages";
  StatusOr<std::vector<uint32_t>> ids;
  if (req->has_text) {
    ids = tokenizer->Encode(req->text);
  } else {
    StatusOr<tokenize::ChatRequest> chat = tokenize::ParseChatRequest(body);
    ids = chat.ok() ? tokenize::EncodeChat(*tokenizer, *chat)
                    : StatusOr<std::vector<uint32_t>>(chat.status());
  }
  if (!ids.ok()) {
    const bool elsewhere =
        absl::IsUnimplemented(ids.status()) || absl::IsFailedPrecondition(ids.status());
    return absl::InvalidArgumentError(
        "field '" + field + "': " + std::string(Message(ids.status())) +
        (elsewhere ? " (send 'tokens' from the model's render endpoint)" : ""));
  }
  if (ids->size() > kMaxTokens) {
    return absl::InvalidArgumentError("field '" + field + "' makes more than " +
                                      std::to_string(kMaxTokens) + " tokens");
  }
  req->tokens = std::move(*ids);
  req->has_tokens = true;
  return absl::OkStatus();
}

// Writes `text` JSON-escaped at `p` (at most 6 bytes per input byte);
// returns the end. The same bytes as AppendJsonEscaped (non-ASCII bytes go
// through it: invalid UTF-8 becomes U+FFFD).
char* WriteEscaped(std::string_view text, char* p) {
  size_t plain = 0;
  while (plain < text.size()) {
    const auto u = static_cast<unsigned char>(text[plain]);
    if (u < 0x20 || u == '"' || u == '\\' || u >= 0x80) break;
    ++plain;
  }
  std::memcpy(p, text.data(), plain);
  p += plain;
  if (plain == text.size()) return p;
  std::string rest;
  http::AppendJsonEscaped(text.substr(plain), &rest);
  std::memcpy(p, rest.data(), rest.size());
  return p + rest.size();
}

template <size_t N>
char* WriteLiteral(const char (&text)[N], char* p) {
  std::memcpy(p, text, N - 1);
  return p + N - 1;
}

char* WriteNumber(uint64_t value, char* p) { return std::to_chars(p, p + 20, value).ptr; }

// A row's opening: {"worker":"...","dp_rank":N
char* WriteSourceFields(const SourceKey& source, char* p) {
  p = WriteLiteral("{\"worker\":\"", p);
  p = WriteEscaped(source.worker, p);
  p = WriteLiteral("\",\"dp_rank\":", p);
  return WriteNumber(source.dp_rank, p);
}

// The request's canonical sequence hashes (at most max_blocks), as the
// index's MatchTokens / MatchLocalHashes chain them, and its full blocks.
// False: tokens of a model whose block size the index does not know (its
// own match answers that error).
bool SequenceHashes(const index::IndexInterface& index, const MatchRequest& req,
                    std::vector<uint64_t>* seq, uint32_t* blocks) {
  thread_local std::vector<uint64_t> local;
  auto capped = [&req](size_t n) {
    return req.max_blocks != 0 && req.max_blocks < n ? size_t{req.max_blocks} : n;
  };
  if (req.has_tokens) {
    const std::optional<uint32_t> block_size = index.BlockSize(req.model);
    if (!block_size.has_value() || *block_size == 0) return false;
    const size_t full = req.tokens.size() / *block_size;
    hashing::ComputeLocalHashes(
        std::span<const uint32_t>(req.tokens).first(capped(full) * *block_size), *block_size,
        hashing::LocalHashSeed(req.lora_name, req.cache_salt), &local);
    hashing::ComputeSequenceHashes(local, std::nullopt, seq);
    *blocks = static_cast<uint32_t>(full);
  } else if (req.has_seq_hashes) {
    seq->assign(req.seq_hashes.begin(),
                req.seq_hashes.begin() + static_cast<ptrdiff_t>(capped(req.seq_hashes.size())));
    *blocks = static_cast<uint32_t>(req.seq_hashes.size());
  } else {
    hashing::ComputeSequenceHashes(
        std::span<const uint64_t>(req.local_hashes).first(capped(req.local_hashes.size())),
        std::nullopt, seq);
    *blocks = static_cast<uint32_t>(req.local_hashes.size());
  }
  return true;
}

}  // namespace

// Runs the lookup of a parsed request; records latency on the probe. A model
// that is configured but has no events yet matches nothing (200, no workers).
StatusOr<index::MatchResult> Lookup(const ApiContext& context, const MatchRequest& req,
                                    consume::Endpoint endpoint,
                                    std::vector<SpeculativeRow>* speculative) {
  const index::IndexInterface& index = *context.index;
  consume::RouterProbe* probe = context.probe;
  index::MatchOptions options;
  options.max_blocks = req.max_blocks;
  // With speculative entries held, the sequence hashes are chained here
  // once, for the index's match and the speculative lookup alike.
  thread_local std::vector<uint64_t> seq;
  uint32_t blocks = 0;
  if (speculative != nullptr) speculative->clear();
  const bool hashed = speculative != nullptr && context.speculative.any &&
                      context.speculative.any() && SequenceHashes(index, req, &seq, &blocks);
  const auto start = Clock::now();
  StatusOr<index::MatchResult> result =
      hashed ? index.MatchSequenceHashes(req.model, std::span<const uint64_t>(seq), options)
      : req.has_tokens ? index.MatchTokens(req.model, std::span<const uint32_t>(req.tokens),
                                           req.lora_name, req.cache_salt, options)
      : req.has_seq_hashes
          ? index.MatchSequenceHashes(req.model, std::span<const uint64_t>(req.seq_hashes), options)
          : index.MatchLocalHashes(req.model, std::span<const uint64_t>(req.local_hashes), options);
  if (result.ok() && hashed) {
    result->blocks = blocks;
  } else if (result.ok() && req.has_seq_hashes) {
    result->blocks = static_cast<uint32_t>(req.seq_hashes.size());
  }
  if (result.ok() && hashed && !seq.empty()) {
    context.speculative.prefixes(req.model, seq, speculative);
    std::sort(speculative->begin(), speculative->end(),
              [](const SpeculativeRow& a, const SpeculativeRow& b) {
                if (a.blocks != b.blocks) return a.blocks > b.blocks;
                if (a.source.worker != b.source.worker) return a.source.worker < b.source.worker;
                return a.source.dp_rank < b.source.dp_rank;
              });
  }
  if (probe != nullptr) {
    probe->RecordLookup(endpoint, std::chrono::duration<double>(Clock::now() - start).count());
  }
  if (result.status().code() == absl::StatusCode::kNotFound) {
    for (const auto& [model, block_size] : context.configured_models) {
      if (model != req.model || block_size == 0) continue;
      index::MatchResult empty;
      empty.blocks = static_cast<uint32_t>(req.has_tokens       ? req.tokens.size() / block_size
                                           : req.has_seq_hashes ? req.seq_hashes.size()
                                                                : req.local_hashes.size());
      empty.applied_seq = index.Stats().applied_seq;
      return empty;
    }
  }
  return result;
}

// The hot response, written without JsonWriter's bookkeeping: the string is
// sized once for the longest possible answer, then filled through a pointer
// (literals with memcpy, numbers with std::to_chars) and cut to length. Same
// bytes JsonWriter would produce.
void WriteMatchResponse(std::string_view model, const index::MatchResult& result, std::string* out,
                        int64_t tokens, std::span<const SpeculativeRow> speculative) {
  // Longest possible: every name byte escaped to 6, every number 20 digits.
  constexpr size_t kNumber = 20;
  size_t bound = 80 + 6 * model.size() + 2 * kNumber;
  for (const index::WorkerMatch& m : result.workers) {
    bound += 96 + 6 * m.source.worker.size() + 7 * kNumber;
  }
  for (const SpeculativeRow& row : speculative) {
    bound += 48 + 6 * row.source.worker.size() + 2 * kNumber;
  }
  const size_t start = out->size();
  out->resize(start + bound);
  char* const begin = out->data();
  char* p = begin + start;
  p = WriteLiteral("{\"model\":\"", p);
  p = WriteEscaped(model, p);
  p = WriteLiteral("\",\"blocks\":", p);
  p = WriteNumber(result.blocks, p);
  if (tokens >= 0) {
    p = WriteLiteral(",\"tokens\":", p);
    p = WriteNumber(static_cast<uint64_t>(tokens), p);
  }
  p = WriteLiteral(",\"applied_seq\":", p);
  p = WriteNumber(result.applied_seq, p);
  p = WriteLiteral(",\"workers\":[", p);
  bool first = true;
  for (const index::WorkerMatch& m : result.workers) {
    if (!first) *p++ = ',';
    first = false;
    p = WriteSourceFields(m.source, p);
    p = WriteLiteral(",\"longest\":", p);
    p = WriteNumber(m.longest, p);
    p = WriteLiteral(",\"device\":", p);
    p = WriteNumber(m.device, p);
    p = WriteLiteral(",\"host\":", p);
    p = WriteNumber(m.host, p);
    p = WriteLiteral(",\"disk\":", p);
    p = WriteNumber(m.disk, p);
    p = WriteLiteral(",\"external\":", p);
    p = WriteNumber(m.external, p);
    p = WriteLiteral(",\"device_prefix\":", p);
    p = WriteNumber(m.device_prefix, p);
    *p++ = '}';
  }
  *p++ = ']';
  if (!speculative.empty()) {
    p = WriteLiteral(",\"speculative\":[", p);
    first = true;
    for (const SpeculativeRow& row : speculative) {
      if (!first) *p++ = ',';
      first = false;
      p = WriteSourceFields(row.source, p);
      p = WriteLiteral(",\"blocks\":", p);
      p = WriteNumber(row.blocks, p);
      *p++ = '}';
    }
    *p++ = ']';
  }
  *p++ = '}';
  out->resize(static_cast<size_t>(p - begin));
}

RouterApi::RouterApi(ApiOptions options, ApiContext context)
    : options_(options), context_(std::move(context)), compat_(&context_) {}

void RouterApi::Register(http::Server& server) {
  server.Handle("POST", "/v1/match",
                [this](const http::Request& rq, http::Response& rs) { Match(rq, rs); });
  compat_.Register(server);
  server.Handle("GET", "/v1/state",
                [this](const http::Request& rq, http::Response& rs) { State(rq, rs); });
  server.Handle("GET", "/v1/workers",
                [this](const http::Request& rq, http::Response& rs) { Workers(rq, rs); });
  server.Handle(
      "GET", "/healthz",
      [](const http::Request&, http::Response& rs) { rs.body = "{\"status\": \"ok\"}\n"; },
      {.open = true});
  server.Handle("GET", "/readyz",
                [this](const http::Request& rq, http::Response& rs) { Readyz(rq, rs); },
                {.open = true});
  if (context_.checkpoint) {
    // An export reads the whole checkpoint: off the I/O threads, one at a
    // time, behind the token like every non-open route.
    server.Handle("GET", "/v1/checkpoint",
                  [this](const http::Request& rq, http::Response& rs) { Checkpoint(rq, rs); },
                  {.offload = true});
  }
  server.Handle("GET", "/metrics",
                [this](const http::Request& rq, http::Response& rs) { Metrics(rq, rs); },
                {.open = !options_.metrics_auth});
}

void RouterApi::Checkpoint(const http::Request&, http::Response& response) const {
  uint64_t applied_seq = 0;
  StatusOr<std::string> exported = context_.checkpoint(&applied_seq);
  if (!exported.ok()) {
    http::SetError(response, absl::IsNotFound(exported.status()) ? 404 : 503,
                   exported.status().ToString());
    return;
  }
  response.content_type = "application/octet-stream";
  response.headers.emplace_back("X-Kvindex-Applied-Seq", std::to_string(applied_seq));
  response.body = std::move(*exported);
}

bool RouterApi::Ready(std::string* reason) const {
  if (context_.log_ready && !context_.log_ready(reason)) return false;
  if (context_.ingest_ready && !context_.ingest_ready()) {
    if (reason != nullptr) *reason = "ingest pipeline not ready";
    return false;
  }
  if (!context_.apply->CaughtUp()) {
    if (reason != nullptr) {
      *reason = "applying: " + std::to_string(context_.apply->Pending()) + " events pending";
    }
    return false;
  }
  // Caught up stays caught up (the start target does not move); events in
  // flight are normal, only a lag past the bound takes the router out.
  if (const uint64_t pending = context_.apply->Pending();
      options_.ready_max_lag != 0 && pending > options_.ready_max_lag) {
    if (reason != nullptr) {
      *reason = "lagging: " + std::to_string(pending) + " events pending (--ready-max-lag " +
                std::to_string(options_.ready_max_lag) + ")";
    }
    return false;
  }
  return true;
}

void RouterApi::Match(const http::Request& request, http::Response& response) const {
  thread_local MatchRequest parsed;
  thread_local std::vector<SpeculativeRow> speculative;
  Status status = ParseMatchRequest(request.body, RequestDialect::kMatch, &parsed);
  const bool tokenized = parsed.has_text || parsed.has_messages;
  if (status.ok() && tokenized) status = Tokenize(context_, request.body, &parsed);
  if (!status.ok()) {
    http::SetError(response, 400, Message(status));
  } else if (StatusOr<index::MatchResult> result =
                 Lookup(context_, parsed, consume::Endpoint::kMatch, &speculative);
             !result.ok()) {
    http::SetError(response, StatusToHttp(result.status()), Message(result.status()));
  } else {
    WriteMatchResponse(parsed.model, *result, &response.body,
                       tokenized ? static_cast<int64_t>(parsed.tokens.size()) : -1, speculative);
  }
  if (context_.probe != nullptr)
    context_.probe->RecordRequest(consume::Endpoint::kMatch, response.status);
}

void RouterApi::State(const http::Request&, http::Response& response) const {
  const index::IndexStats stats = context_.index->Stats();
  char digest[17];
  std::snprintf(digest, sizeof(digest), "%016llx", static_cast<unsigned long long>(stats.digest));
  JsonWriter w(&response.body);
  w.BeginObject();
  w.Field("applied_seq", stats.applied_seq);
  w.Field("digest", std::string_view(digest, 16));
  w.Key("entries");
  WriteEntries(w, stats.entries);
  w.Field("sources", stats.sources);
  w.Key("ready");
  w.Bool(Ready(nullptr));
  // Lag behind the log: messages known and not applied, and the age of the
  // newest applied event when it was applied.
  w.Field("lag_messages", context_.apply->Pending());
  w.Key("lag_seconds");
  w.Double(context_.probe != nullptr ? context_.probe->lag_seconds() : 0.0);
  w.Key("models");
  w.BeginArray();
  for (const std::string& model : KnownModels()) w.String(model);
  w.EndArray();
  w.EndObject();
  if (context_.probe != nullptr)
    context_.probe->RecordRequest(consume::Endpoint::kState, response.status);
}

std::vector<std::string> RouterApi::KnownModels() const {
  std::vector<std::string> models = context_.index->Models();
  for (const auto& [model, block_size] : context_.configured_models) models.push_back(model);
  for (const consume::ApplyLoop::SourceActivity& a : context_.apply->Activity()) {
    if (!a.model.empty()) models.push_back(a.model);
  }
  std::sort(models.begin(), models.end());
  models.erase(std::unique(models.begin(), models.end()), models.end());
  return models;
}

void RouterApi::Workers(const http::Request&, http::Response& response) const {
  struct Row {
    std::string model;
    SourceKey source;
    uint64_t entries[kNumTiers] = {};
    const consume::ApplyLoop::SourceActivity* activity = nullptr;
    const IngestSourceStatus* ingest = nullptr;
  };
  const std::vector<index::SourceInfo> infos = context_.index->Sources();
  const std::vector<consume::ApplyLoop::SourceActivity> activity = context_.apply->Activity();
  std::vector<IngestSourceStatus> ingest;
  if (context_.ingest_sources) ingest = context_.ingest_sources();

  std::map<std::pair<std::string, SourceKey>, Row> rows;  // (model, source)
  for (const index::SourceInfo& info : infos) {
    Row& row = rows[{info.model, info.source}];
    row.model = info.model;
    row.source = info.source;
    std::copy(std::begin(info.entries), std::end(info.entries), row.entries);
  }
  auto find_model_rows = [&](const SourceKey& source) {
    std::vector<Row*> found;
    for (auto& [key, row] : rows) {
      if (key.second == source) found.push_back(&row);
    }
    return found;
  };
  for (const consume::ApplyLoop::SourceActivity& a : activity) {
    auto found = find_model_rows(a.source);
    if (found.empty() && !a.model.empty()) {
      Row& row = rows[{a.model, a.source}];
      row.model = a.model;
      row.source = a.source;
      found.push_back(&row);
    }
    for (Row* row : found) row->activity = &a;
  }
  for (const IngestSourceStatus& s : ingest) {
    const SourceKey key{s.worker, s.dp_rank};
    auto found = find_model_rows(key);
    if (found.empty()) {
      Row& row = rows[{s.model, key}];
      row.model = s.model;
      row.source = key;
      found.push_back(&row);
    }
    for (Row* row : found) row->ingest = &s;
  }

  // A source that holds nothing, was cleared or expired since, is neither
  // configured here nor announced by a live agent is gone: no row (else
  // every rank or worker ever seen would stay listed for good).
  auto gone = [](const Row& row) {
    if (row.ingest != nullptr || row.activity == nullptr) return false;
    if (!row.activity->cleared || row.activity->live) return false;
    return std::all_of(std::begin(row.entries), std::end(row.entries),
                       [](uint64_t e) { return e == 0; });
  };

  JsonWriter w(&response.body);
  w.BeginObject();
  w.Key("workers");
  w.BeginArray();
  for (const auto& [key, row] : rows) {
    if (gone(row)) continue;
    w.BeginObject();
    w.Field("model", row.model);
    w.Field("worker", row.source.worker);
    w.Field("dp_rank", row.source.dp_rank);
    w.Key("agent");
    if (row.activity != nullptr && !row.activity->agent.empty()) {
      w.String(row.activity->agent);
    } else {
      w.Null();
    }
    w.Key("entries");
    WriteEntries(w, row.entries);
    w.Key("last_event_unix_ms");
    // The agent's start-up "cleared" is applied like any event, but it is
    // not one the engine sent: while the ingest side reports that the engine
    // has delivered nothing yet (embedded mode), there is no last event.
    const bool engine_silent = row.ingest != nullptr && !row.ingest->has_seq;
    if (row.activity != nullptr && row.activity->last_event_ns != 0 && !engine_silent) {
      w.UInt(row.activity->last_event_ns / 1'000'000);
    } else {
      w.Null();
    }
    w.Field("events_applied", row.activity != nullptr ? row.activity->events : 0);
    if (row.ingest != nullptr) {
      w.Key("ingest");
      w.BeginObject();
      w.Key("last_seq");
      if (row.ingest->has_seq) {
        w.UInt(row.ingest->last_seq);
      } else {
        w.Null();
      }
      w.Field("gaps", row.ingest->gaps);
      w.Field("replays_ok", row.ingest->replays_ok);
      w.Field("replays_failed", row.ingest->replays_failed);
      w.Field("restarts", row.ingest->restarts);
      w.EndObject();
    }
    w.EndObject();
  }
  w.EndArray();
  w.EndObject();
  if (context_.probe != nullptr)
    context_.probe->RecordRequest(consume::Endpoint::kWorkers, response.status);
}

void RouterApi::Readyz(const http::Request&, http::Response& response) const {
  std::string reason;
  if (Ready(&reason)) {
    response.body = "{\"ready\": true}\n";
    return;
  }
  response.status = 503;
  response.body.clear();
  JsonWriter w(&response.body);
  w.BeginObject();
  w.Key("ready");
  w.Bool(false);
  w.Field("reason", reason);
  w.EndObject();
}

void RouterApi::Metrics(const http::Request&, http::Response& response) const {
  response.content_type = metrics::kTextContentType;
  std::vector<const prometheus::Collectable*> extra;
  if (context_.probe != nullptr && context_.probe->collectable() != nullptr) {
    extra.push_back(context_.probe->collectable());
  }
  extra.push_back(compat_.collectable());
  for (const prometheus::Collectable* c : context_.extra_collectables) extra.push_back(c);
  if (context_.registry != nullptr) {
    response.body = metrics::SerializeText(*context_.registry, extra);
  } else {
    prometheus::Registry empty;
    response.body = metrics::SerializeText(empty, extra);
  }
}

}  // namespace kvindex::query
