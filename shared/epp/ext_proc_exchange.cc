#include "shared/epp/ext_proc_exchange.h"

#include <algorithm>
#include <string_view>
#include <utility>

namespace kvindex::epp {
namespace {

namespace pb = envoy::service::ext_proc::v3;

std::string_view HeaderValue(const envoy::config::core::v3::HeaderValue& header) {
  return header.raw_value().empty() ? std::string_view(header.value())
                                    : std::string_view(header.raw_value());
}

// The subset hint, when the request's metadata carries one.
std::optional<std::vector<std::string>> SubsetHint(const pb::ProcessingRequest& request) {
  if (!request.has_metadata_context()) return std::nullopt;
  const auto& namespaces = request.metadata_context().filter_metadata();
  auto ns = namespaces.find(kSubsetNamespace);
  if (ns == namespaces.end()) return std::nullopt;
  auto field = ns->second.fields().find(kSubsetKey);
  if (field == ns->second.fields().end()) return std::nullopt;
  std::vector<std::string> subset;
  if (field->second.has_list_value()) {
    for (const auto& value : field->second.list_value().values()) {
      if (value.has_string_value()) subset.push_back(value.string_value());
    }
  } else if (field->second.has_string_value()) {
    subset.push_back(field->second.string_value());
  }
  return subset;
}

std::optional<std::string> ServedEndpoint(const pb::ProcessingRequest& request) {
  if (!request.has_metadata_context()) return std::nullopt;
  const auto& namespaces = request.metadata_context().filter_metadata();
  auto ns = namespaces.find(kDestinationNamespace);
  if (ns == namespaces.end()) return std::nullopt;
  auto field = ns->second.fields().find(kServedKey);
  if (field == ns->second.fields().end() || !field->second.has_string_value()) return std::nullopt;
  return field->second.string_value();
}

void ImmediateResponse(std::vector<pb::ProcessingResponse>* out, envoy::type::v3::StatusCode code,
                       std::string body) {
  auto* immediate = out->emplace_back().mutable_immediate_response();
  immediate->mutable_status()->set_code(code);
  immediate->set_details("kvindex_epp");
  immediate->set_body(std::move(body));
}

// The body back to Envoy in streamed_response chunks of at most 62,000
// bytes; a body that fits one chunk is moved into it.
void EchoBody(std::vector<pb::ProcessingResponse>* out, std::string* body, bool end_of_stream,
              bool request_side) {
  const size_t size = body->size();
  size_t offset = 0;
  do {
    const size_t n = std::min(kMaxBodyChunkBytes, size - offset);
    pb::ProcessingResponse& response = out->emplace_back();
    pb::BodyResponse* answer =
        request_side ? response.mutable_request_body() : response.mutable_response_body();
    auto* chunk = answer->mutable_response()->mutable_body_mutation()->mutable_streamed_response();
    if (n == size) {
      chunk->mutable_body()->swap(*body);
    } else {
      chunk->set_body(body->data() + offset, n);
    }
    offset += n;
    chunk->set_end_of_stream(end_of_stream && offset == size);
  } while (offset < size);
}

}  // namespace

ExtProcExchange::ExtProcExchange(const ServiceOptions* options, Picker* picker,
                                 const TokenChain* tokens, ServiceCounters* counters)
    : options_(options),
      picker_(picker),
      tokens_(tokens),
      counters_(counters),
      request_mode_(pb::FULL_DUPLEX_STREAMED),
      response_mode_(pb::FULL_DUPLEX_STREAMED) {
  counters_->streams_open.fetch_add(1, std::memory_order_relaxed);
}

ExtProcExchange::~ExtProcExchange() { End(); }

void ExtProcExchange::End() {
  if (ended_) return;
  ended_ = true;
  if (finished_) {
    if (end_ != ServiceCounters::kOversize) end_ = ServiceCounters::kImmediate;
  } else if (!decided_) {
    end_ = !headers_seen_  ? ServiceCounters::kEmpty
           : body_.empty() ? ServiceCounters::kNoBody
                           : ServiceCounters::kCancelled;
  }
  if (!picked_.empty()) picker_->Release(picked_[0]);
  counters_->streams_ended[end_].fetch_add(1, std::memory_order_relaxed);
  counters_->streams_open.fetch_sub(1, std::memory_order_relaxed);
}

// Parse, tokens, pick, and the answers that carry the pick.
void ExtProcExchange::Decide(bool body_end, bool trailers_follow, bool load_only,
                             std::vector<Response>* out) {
  thread_local OpenAiRequest parsed;
  thread_local std::vector<uint32_t> tokens;
  decided_ = true;
  bool have_tokens = false;
  std::string_view model;
  std::string_view salt;
  if (!load_only && (body_seen_ || !body_.empty())) {
    if (Status s = ParseOpenAiRequest(body_, path_, &parsed); !s.ok()) {
      counters_->parse_failures.fetch_add(1, std::memory_order_relaxed);
      if (!options_->fail_open) {
        counters_->immediate_400.fetch_add(1, std::memory_order_relaxed);
        ImmediateResponse(out, envoy::type::v3::BadRequest, std::string(s.message()));
        finished_ = true;
        std::string().swap(body_);
        return;
      }
    } else {
      model = parsed.model;
      salt = parsed.cache_salt;
      TokenOutcome outcome = tokens_->Tokens(parsed, body_, &tokens);
      if (outcome == TokenOutcome::kFailed) {
        counters_->token_failures.fetch_add(1, std::memory_order_relaxed);
      }
      have_tokens = outcome == TokenOutcome::kTokens;
    }
  }
  PickInput input;
  input.model = model;
  input.tokens = have_tokens ? &tokens : nullptr;
  input.cache_salt = salt;
  input.subset = subset_ ? &*subset_ : nullptr;
  StatusOr<PickResult> pick = picker_->Pick(input);
  if (!pick.ok()) {
    const bool shed = absl::IsResourceExhausted(pick.status());
    (shed ? counters_->immediate_429 : counters_->immediate_503)
        .fetch_add(1, std::memory_order_relaxed);
    ImmediateResponse(out,
                      shed ? envoy::type::v3::TooManyRequests : envoy::type::v3::ServiceUnavailable,
                      std::string(pick.status().message()));
    finished_ = true;
    // Nothing more is read: the body (past max_body_bytes after an oversize
    // pass-through pick) is not held until the stream ends.
    std::string().swap(body_);
    return;
  }
  (pick->prefix_scored ? counters_->picks_prefix : counters_->picks_load_only)
      .fetch_add(1, std::memory_order_relaxed);
  picked_ = std::move(pick->endpoints);
  std::string value;
  for (const std::string& address : picked_) {
    if (!value.empty()) value += ',';
    value += address;
  }
  Response& response = out->emplace_back();
  const bool on_body = headers_answered_;  // BUFFERED: the pick rides on the body answer
  pb::CommonResponse* common = on_body ? response.mutable_request_body()->mutable_response()
                                       : response.mutable_request_headers()->mutable_response();
  common->set_clear_route_cache(true);
  auto* set = common->mutable_header_mutation()->add_set_headers();
  set->mutable_header()->set_key(kDestinationHeader);
  set->mutable_header()->set_raw_value(value);
  set->set_append_action(envoy::config::core::v3::HeaderValueOption::OVERWRITE_IF_EXISTS_OR_ADD);
  auto& inner = *(*response.mutable_dynamic_metadata()->mutable_fields())[kDestinationNamespace]
                     .mutable_struct_value();
  (*inner.mutable_fields())[kDestinationHeader].set_string_value(std::move(value));
  headers_answered_ = true;
  if (!on_body && body_seen_) {
    if (request_mode_ == pb::BUFFERED) {
      out->emplace_back().mutable_request_body()->mutable_response();
    } else {
      EchoBody(out, &body_, body_end && !trailers_follow, /*request_side=*/true);
    }
  }
  std::string().swap(body_);
}

void ExtProcExchange::Handle(Request* request, std::vector<Response>* out) {
  if (finished_) return;
  if (request->has_protocol_config()) {
    request_mode_ = request->protocol_config().request_body_mode();
    response_mode_ = request->protocol_config().response_body_mode();
  }
  if (!decided_) {
    if (auto subset = SubsetHint(*request)) subset_ = std::move(subset);
  }
  switch (request->request_case()) {
    case pb::ProcessingRequest::kRequestHeaders: {
      // Headers again after the pick (Envoy sends them once): a second pick
      // would leave the first one in flight for good, and with
      // max_inflight_per_endpoint shed that engine forever.
      if (decided_) break;
      headers_seen_ = true;
      for (const auto& header : request->request_headers().headers().headers()) {
        if (header.key() == ":path") path_ = std::string(HeaderValue(header));
      }
      if (request->request_headers().end_of_stream()) {
        Decide(/*body_end=*/true, /*trailers_follow=*/false, /*load_only=*/true, out);
      } else if (request_mode_ == pb::BUFFERED) {
        out->emplace_back().mutable_request_headers()->mutable_response();
        headers_answered_ = true;
      }
      break;
    }
    case pb::ProcessingRequest::kRequestBody: {
      pb::HttpBody* body = request->mutable_request_body();
      body_seen_ = true;
      if (passthrough_) {
        // The body's last chunk ends the pass-through: a chunk after it is
        // ignored like any body after the pick, not echoed past the end.
        passthrough_ = !body->end_of_stream();
        if (request_mode_ == pb::BUFFERED) {
          out->emplace_back().mutable_request_body()->mutable_response();
        } else {
          EchoBody(out, body->mutable_body(), body->end_of_stream(), true);
        }
        break;
      }
      if (decided_) break;  // nothing more is expected; ignore
      if (body_.size() + body->body().size() > options_->max_body_bytes) {
        end_ = ServiceCounters::kOversize;
        if (!options_->fail_open) {
          counters_->immediate_413.fetch_add(1, std::memory_order_relaxed);
          ImmediateResponse(
              out, envoy::type::v3::PayloadTooLarge,
              "request body over " + std::to_string(options_->max_body_bytes) + " bytes");
          finished_ = true;
          break;
        }
        counters_->oversize_passthrough.fetch_add(1, std::memory_order_relaxed);
        body_.append(body->body());
        passthrough_ = !body->end_of_stream();
        Decide(body->end_of_stream(), false, /*load_only=*/true, out);
        break;
      }
      if (body_.empty()) {
        body_.swap(*body->mutable_body());  // the common case: the whole body in one message
      } else {
        body_.append(body->body());
      }
      if (body->end_of_stream()) Decide(true, false, false, out);
      break;
    }
    case pb::ProcessingRequest::kRequestTrailers: {
      if (!decided_) Decide(true, /*trailers_follow=*/true, false, out);
      if (finished_) break;
      passthrough_ = false;
      out->emplace_back().mutable_request_trailers();
      break;
    }
    case pb::ProcessingRequest::kResponseHeaders: {
      if (auto served = ServedEndpoint(*request)) {
        if (!picked_.empty() && *served == picked_[0]) {
          counters_->served_pick.fetch_add(1, std::memory_order_relaxed);
        } else if (std::find(picked_.begin(), picked_.end(), *served) != picked_.end()) {
          counters_->served_fallback.fetch_add(1, std::memory_order_relaxed);
        } else {
          counters_->served_other.fetch_add(1, std::memory_order_relaxed);
        }
      }
      out->emplace_back().mutable_response_headers()->mutable_response();
      break;
    }
    case pb::ProcessingRequest::kResponseBody: {
      pb::HttpBody* body = request->mutable_response_body();
      if (response_mode_ == pb::FULL_DUPLEX_STREAMED) {
        EchoBody(out, body->mutable_body(), body->end_of_stream(), /*request_side=*/false);
      } else {
        out->emplace_back().mutable_response_body()->mutable_response();
      }
      break;
    }
    case pb::ProcessingRequest::kResponseTrailers: {
      out->emplace_back().mutable_response_trailers();
      break;
    }
    default:
      break;
  }
}

}  // namespace kvindex::epp
