#include "shared/epp/ext_proc_service.h"

#include <algorithm>
#include <optional>
#include <string>
#include <vector>

namespace kvindex::epp {
namespace {

namespace pb = envoy::service::ext_proc::v3;
using Stream = grpc::ServerReaderWriterInterface<pb::ProcessingResponse, pb::ProcessingRequest>;

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

void ImmediateResponse(Stream* stream, envoy::type::v3::StatusCode code, std::string body) {
  pb::ProcessingResponse response;
  auto* immediate = response.mutable_immediate_response();
  immediate->mutable_status()->set_code(code);
  immediate->set_details("kvindex_epp");
  immediate->set_body(std::move(body));
  stream->Write(response);
}

// The body back to Envoy in streamed_response chunks of at most 62,000 bytes.
void EchoBody(Stream* stream, std::string_view body, bool end_of_stream, bool request_side) {
  size_t offset = 0;
  do {
    const size_t n = std::min(kMaxBodyChunkBytes, body.size() - offset);
    pb::ProcessingResponse response;
    pb::BodyResponse* answer =
        request_side ? response.mutable_request_body() : response.mutable_response_body();
    auto* chunk = answer->mutable_response()->mutable_body_mutation()->mutable_streamed_response();
    chunk->set_body(std::string(body.substr(offset, n)));
    offset += n;
    chunk->set_end_of_stream(end_of_stream && offset == body.size());
    stream->Write(response);
  } while (offset < body.size());
}

// Per-stream state (one HTTP request).
struct StreamState {
  pb::BodySendMode request_mode = pb::FULL_DUPLEX_STREAMED;
  pb::BodySendMode response_mode = pb::FULL_DUPLEX_STREAMED;
  std::string path;
  std::optional<std::vector<std::string>> subset;
  bool headers_seen = false;
  bool headers_answered = false;
  bool body_seen = false;
  bool decided = false;      // the pick (or an immediate response) was sent
  bool finished = false;     // an immediate response ended the exchange
  bool passthrough = false;  // oversize, fail open: later chunks echoed as they come
  std::string body;
  std::vector<std::string> picked;
};

}  // namespace

grpc::Status ExtProcService::Process(
    grpc::ServerContext* /*context*/,
    grpc::ServerReaderWriter<pb::ProcessingResponse, pb::ProcessingRequest>* stream) {
  Serve(stream);
  return grpc::Status::OK;
}

void ExtProcService::Serve(Stream* stream) {
  counters_.streams_open.fetch_add(1, std::memory_order_relaxed);
  StreamState st;
  ServiceCounters::End end = ServiceCounters::kComplete;
  thread_local OpenAiRequest parsed;
  thread_local std::vector<uint32_t> tokens;

  // Parse, tokens, pick, and the answers that carry the pick.
  auto decide = [&](bool body_end, bool trailers_follow, bool load_only) {
    st.decided = true;
    bool have_tokens = false;
    std::string_view model;
    std::string_view salt;
    if (!load_only && (st.body_seen || !st.body.empty())) {
      if (Status s = ParseOpenAiRequest(st.body, st.path, &parsed); !s.ok()) {
        counters_.parse_failures.fetch_add(1, std::memory_order_relaxed);
        if (!options_.fail_open) {
          counters_.immediate_400.fetch_add(1, std::memory_order_relaxed);
          ImmediateResponse(stream, envoy::type::v3::BadRequest, std::string(s.message()));
          st.finished = true;
          return;
        }
      } else {
        model = parsed.model;
        salt = parsed.cache_salt;
        TokenOutcome outcome = tokens_->Tokens(parsed, st.body, &tokens);
        if (outcome == TokenOutcome::kFailed) {
          counters_.token_failures.fetch_add(1, std::memory_order_relaxed);
        }
        have_tokens = outcome == TokenOutcome::kTokens;
      }
    }
    PickInput input;
    input.model = model;
    input.tokens = have_tokens ? &tokens : nullptr;
    input.cache_salt = salt;
    input.subset = st.subset ? &*st.subset : nullptr;
    StatusOr<PickResult> pick = picker_->Pick(input);
    if (!pick.ok()) {
      const bool shed = absl::IsResourceExhausted(pick.status());
      (shed ? counters_.immediate_429 : counters_.immediate_503)
          .fetch_add(1, std::memory_order_relaxed);
      ImmediateResponse(
          stream, shed ? envoy::type::v3::TooManyRequests : envoy::type::v3::ServiceUnavailable,
          std::string(pick.status().message()));
      st.finished = true;
      return;
    }
    (pick->prefix_scored ? counters_.picks_prefix : counters_.picks_load_only)
        .fetch_add(1, std::memory_order_relaxed);
    st.picked = std::move(pick->endpoints);
    std::string value;
    for (const std::string& address : st.picked) {
      if (!value.empty()) value += ',';
      value += address;
    }
    pb::ProcessingResponse response;
    const bool on_body = st.headers_answered;  // BUFFERED: the pick rides on the body answer
    pb::CommonResponse* common = on_body ? response.mutable_request_body()->mutable_response()
                                         : response.mutable_request_headers()->mutable_response();
    common->set_clear_route_cache(true);
    auto* set = common->mutable_header_mutation()->add_set_headers();
    set->mutable_header()->set_key(kDestinationHeader);
    set->mutable_header()->set_raw_value(value);
    set->set_append_action(envoy::config::core::v3::HeaderValueOption::OVERWRITE_IF_EXISTS_OR_ADD);
    google::protobuf::Struct inner;
    (*inner.mutable_fields())[kDestinationHeader].set_string_value(value);
    *(*response.mutable_dynamic_metadata()->mutable_fields())[kDestinationNamespace]
         .mutable_struct_value() = std::move(inner);
    stream->Write(response);
    st.headers_answered = true;
    if (!on_body && st.body_seen) {
      if (st.request_mode == pb::BUFFERED) {
        pb::ProcessingResponse plain;
        plain.mutable_request_body()->mutable_response();
        stream->Write(plain);
      } else {
        EchoBody(stream, st.body, body_end && !trailers_follow, /*request_side=*/true);
      }
    }
    std::string().swap(st.body);
  };

  pb::ProcessingRequest request;
  while (!st.finished && stream->Read(&request)) {
    if (request.has_protocol_config()) {
      st.request_mode = request.protocol_config().request_body_mode();
      st.response_mode = request.protocol_config().response_body_mode();
    }
    if (!st.decided) {
      if (auto subset = SubsetHint(request)) st.subset = std::move(subset);
    }
    switch (request.request_case()) {
      case pb::ProcessingRequest::kRequestHeaders: {
        // Headers again after the pick (Envoy sends them once): a second
        // pick would leave the first one in flight for good.
        if (st.decided) break;
        st.headers_seen = true;
        for (const auto& header : request.request_headers().headers().headers()) {
          if (header.key() == ":path") st.path = std::string(HeaderValue(header));
        }
        if (request.request_headers().end_of_stream()) {
          decide(/*body_end=*/true, /*trailers_follow=*/false, /*load_only=*/true);
        } else if (st.request_mode == pb::BUFFERED) {
          pb::ProcessingResponse response;
          response.mutable_request_headers()->mutable_response();
          stream->Write(response);
          st.headers_answered = true;
        }
        break;
      }
      case pb::ProcessingRequest::kRequestBody: {
        const auto& body = request.request_body();
        st.body_seen = true;
        if (st.passthrough) {
          if (st.request_mode == pb::BUFFERED) {
            pb::ProcessingResponse plain;
            plain.mutable_request_body()->mutable_response();
            stream->Write(plain);
          } else {
            EchoBody(stream, body.body(), body.end_of_stream(), true);
          }
          break;
        }
        if (st.decided) break;  // nothing more is expected; ignore
        if (st.body.size() + body.body().size() > options_.max_body_bytes) {
          end = ServiceCounters::kOversize;
          if (!options_.fail_open) {
            counters_.immediate_413.fetch_add(1, std::memory_order_relaxed);
            ImmediateResponse(
                stream, envoy::type::v3::PayloadTooLarge,
                "request body over " + std::to_string(options_.max_body_bytes) + " bytes");
            st.finished = true;
            break;
          }
          counters_.oversize_passthrough.fetch_add(1, std::memory_order_relaxed);
          st.body.append(body.body());
          st.passthrough = !body.end_of_stream();
          decide(body.end_of_stream(), false, /*load_only=*/true);
          break;
        }
        st.body.append(body.body());
        if (body.end_of_stream()) decide(true, false, false);
        break;
      }
      case pb::ProcessingRequest::kRequestTrailers: {
        if (!st.decided) decide(true, /*trailers_follow=*/true, false);
        if (st.finished) break;
        st.passthrough = false;
        pb::ProcessingResponse response;
        response.mutable_request_trailers();
        stream->Write(response);
        break;
      }
      case pb::ProcessingRequest::kResponseHeaders: {
        if (auto served = ServedEndpoint(request)) {
          if (!st.picked.empty() && *served == st.picked[0]) {
            counters_.served_pick.fetch_add(1, std::memory_order_relaxed);
          } else if (std::find(st.picked.begin(), st.picked.end(), *served) != st.picked.end()) {
            counters_.served_fallback.fetch_add(1, std::memory_order_relaxed);
          } else {
            counters_.served_other.fetch_add(1, std::memory_order_relaxed);
          }
        }
        pb::ProcessingResponse response;
        response.mutable_response_headers()->mutable_response();
        stream->Write(response);
        break;
      }
      case pb::ProcessingRequest::kResponseBody: {
        if (st.response_mode == pb::FULL_DUPLEX_STREAMED) {
          EchoBody(stream, request.response_body().body(), request.response_body().end_of_stream(),
                   /*request_side=*/false);
        } else {
          pb::ProcessingResponse response;
          response.mutable_response_body()->mutable_response();
          stream->Write(response);
        }
        break;
      }
      case pb::ProcessingRequest::kResponseTrailers: {
        pb::ProcessingResponse response;
        response.mutable_response_trailers();
        stream->Write(response);
        break;
      }
      default:
        break;
    }
  }
  if (st.finished) {
    if (end != ServiceCounters::kOversize) end = ServiceCounters::kImmediate;
  } else if (!st.decided) {
    end = !st.headers_seen  ? ServiceCounters::kEmpty
          : st.body.empty() ? ServiceCounters::kNoBody
                            : ServiceCounters::kCancelled;
  }
  if (!st.picked.empty()) picker_->Release(st.picked[0]);
  counters_.streams_ended[end].fetch_add(1, std::memory_order_relaxed);
  counters_.streams_open.fetch_sub(1, std::memory_order_relaxed);
}

}  // namespace kvindex::epp
