// libFuzzer target for the endpoint picker's ext_proc protocol
// (shared/epp/ext_proc_exchange: ExtProcExchange, the state machine of one
// ext_proc stream without gRPC), over a real index, three endpoints, the
// picker and the router's token chain (token-id prompts).
//
// Input: a variant byte, then messages, each sent to one of two streams open
// at once (so picks in flight overlap). Variant: bit 0 fail closed, bit 1 a
// 2 KiB body limit (else 160 KiB: bodies echoed in several 62,000-byte
// chunks), bit 2 one pick in flight per endpoint. A message is a tag byte
//   bits 0-2  0 request_headers (then a path byte), 1 request_body,
//             2 request_trailers, 3 response_headers, 4 response_body,
//             5 response_trailers (bodies: a length byte and the bytes),
//             6 a serialized ProcessingRequest (u16 LE length and bytes;
//             bytes that do not parse end the stream, as gRPC would),
//             7 the stream ends (half-close or cancel; the next message on
//             it opens a new one)
//   bit 3     end_of_stream
//   bit 4     protocol_config (a byte: request mode low nibble, response
//             mode high nibble, each % 6)
//   bit 5     metadata (a byte: on a request message a subset hint, bits
//             0-2 the endpoints, bit 3 "10.0.0.3" without port, bit 4 an
//             unknown address; on response_headers the served endpoint)
//   bit 6     the second stream
//   bit 7     an oversize body: (a byte + 1) KiB appended to the body
//
// Invariants (abort = finding), after every message:
// - the answers: each sets a response case matching the message (request
//   answers to request messages, the same response kind to a response
//   message); an immediate response is the last, 4xx/5xx, and the exchange
//   is finished exactly when one was sent; nothing after it;
// - bounded buffering: the exchange holds at most max_body_bytes;
// - streamed chunks are at most 62,000 bytes, none after one that ended the
//   body; the request body echoed is a prefix of the body sent; at the pick
//   (on the headers' answer, not BUFFERED) it is exactly the body received
//   so far, ended when the request ended; after an oversize pick each
//   further chunk is echoed exactly, until the body ends; then nothing;
//   a response body chunk is echoed exactly (FULL_DUPLEX_STREAMED) or
//   answered once, empty;
// - every request is answered: once its end arrived (end_of_stream or
//   trailers) the pick or an immediate response was sent; at most one pick
//   per stream, naming known endpoints; response headers and trailers and
//   request trailers are answered once each;
// - picks in flight: the picker counts exactly one per stream holding a
//   pick, and none once both streams ended; each stream's end is counted
//   once and streams_open returns to 0.
#include <algorithm>
#include <array>
#include <cstddef>
#include <cstdint>
#include <memory>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include "envoy/service/ext_proc/v3/external_processor.pb.h"
#include "shared/epp/endpoints.h"
#include "shared/epp/ext_proc_exchange.h"
#include "shared/epp/picker.h"
#include "shared/epp/token_source.h"
#include "shared/hashing/canonical_hash.h"
#include "shared/index/kv_index.h"
#include "tests/fuzz/fuzz_check.h"
#include "tests/fuzz/seed_writer.h"

namespace {

namespace pb = envoy::service::ext_proc::v3;
using kvindex::epp::ExtProcExchange;
using kvindex::epp::kMaxBodyChunkBytes;
using kvindex::epp::ServiceCounters;

const char* const kAddresses[] = {"10.0.0.1:8000", "10.0.0.2:8000", "10.0.0.3:8000"};
const char* const kPaths[] = {"/v1/completions", "/v1/chat/completions", "/v1/models", ""};

struct Epp {
  Epp() {
    std::vector<uint32_t> tokens;
    for (uint32_t t = 1; t <= 16; ++t) tokens.push_back(t);
    std::vector<uint64_t> local, seq;
    kvindex::hashing::ComputeLocalHashes(tokens, 4, kvindex::hashing::LocalHashSeed("", ""),
                                         &local);
    kvindex::hashing::ComputeSequenceHashes(local, std::nullopt, &seq);
    std::vector<kvindex::epp::Endpoint> endpoints;
    for (uint32_t i = 0; i < 3; ++i) {
      kvindex::epp::Endpoint e;
      e.address = kAddresses[i];
      e.source = {"w" + std::to_string(i), 0};
      e.model = "m";
      endpoints.push_back(e);
      kvindex::PlacementEvent stored;
      stored.kind = kvindex::PlacementKind::kStored;
      stored.model = "m";
      stored.source = e.source;
      stored.tier = static_cast<kvindex::Tier>(i);
      stored.block_size = 4;
      stored.block_hashes.assign(seq.begin(), seq.begin() + 4 - i);
      index.Apply(stored, i + 1);
    }
    table.SetStatic(std::move(endpoints));
    auto built = kvindex::epp::BuildTokenChain({});
    FUZZ_CHECK(built.ok(), "the token chain builds");
    chain = std::move(*built);
    for (int variant = 0; variant < 8; ++variant) {
      kvindex::epp::PickerConfig config;
      config.max_inflight_per_endpoint = (variant & 4) ? 1 : 0;
      pickers[variant] = std::make_unique<kvindex::epp::Picker>(config, &index, &table);
      options[variant].fail_open = (variant & 1) == 0;
      options[variant].max_body_bytes = (variant & 2) ? 2048 : 160 * 1024;
    }
  }
  kvindex::index::KvIndex index;
  kvindex::epp::EndpointTable table;
  std::unique_ptr<kvindex::epp::TokenChain> chain;
  std::unique_ptr<kvindex::epp::Picker> pickers[8];
  kvindex::epp::ServiceOptions options[8];
  ServiceCounters counters[8];
};

Epp& TheEpp() {
  static Epp epp;
  return epp;
}

struct Reader {
  const uint8_t* p;
  size_t n;
  bool empty() const { return n == 0; }
  uint8_t Byte() {
    if (n == 0) return 0;
    --n;
    return *p++;
  }
  std::string_view Bytes(size_t k) {
    k = std::min(k, n);
    std::string_view out(reinterpret_cast<const char*>(p), k);
    p += k;
    n -= k;
    return out;
  }
};

bool KnownAddress(std::string_view address) {
  for (const char* known : kAddresses) {
    if (address == known) return true;
  }
  return false;
}

// The destination header of a pick answer ("" when the answer is no pick).
std::string_view Destination(const pb::ProcessingResponse& answer) {
  const pb::CommonResponse* common = answer.has_request_headers()
                                         ? &answer.request_headers().response()
                                     : answer.has_request_body() ? &answer.request_body().response()
                                                                 : nullptr;
  if (common == nullptr) return {};
  for (const auto& set : common->header_mutation().set_headers()) {
    if (set.header().key() == kvindex::epp::kDestinationHeader) return set.header().raw_value();
  }
  return {};
}

const pb::StreamedBodyResponse* Streamed(const pb::BodyResponse& body) {
  if (!body.response().has_body_mutation() ||
      !body.response().body_mutation().has_streamed_response()) {
    return nullptr;
  }
  return &body.response().body_mutation().streamed_response();
}

// One stream: the exchange and what the harness knows of what it was sent
// and answered.
struct Stream {
  std::unique_ptr<ExtProcExchange> exchange;
  pb::BodySendMode request_mode = pb::FULL_DUPLEX_STREAMED;
  pb::BodySendMode response_mode = pb::FULL_DUPLEX_STREAMED;
  std::string sent;            // request body bytes sent
  std::string echoed;          // request body bytes echoed
  bool body_ended = false;     // a request-side chunk with end_of_stream was echoed
  bool request_ended = false;  // end_of_stream / trailers arrived once picked
  bool passthrough = false;    // picked before the body's end (oversize)
  std::string pick;            // the picked endpoint ("" = none)
  size_t messages = 0;
  // A protocol_config after the first message (Envoy sends it once): the
  // body modes changed mid-stream, so what was echoed before and after
  // need not line up; only the per-message checks apply.
  bool modes_changed = false;
};

int64_t InFlightTotal(kvindex::epp::Picker& picker) {
  int64_t n = 0;
  for (const char* address : kAddresses) n += picker.InFlight(address);
  return n;
}

uint64_t Ended(const ServiceCounters& counters) {
  uint64_t n = 0;
  for (const auto& end : counters.streams_ended) n += end.load();
  return n;
}

// One message to one stream, and every invariant on its answers.
void Send(Epp& epp, int variant, Stream& s, pb::ProcessingRequest* request) {
  const bool was_finished = s.exchange->finished();
  const bool was_picked = !s.pick.empty();
  if (request->has_protocol_config() && s.messages > 0) s.modes_changed = true;
  ++s.messages;
  if (request->has_protocol_config()) {
    s.request_mode = request->protocol_config().request_body_mode();
    s.response_mode = request->protocol_config().response_body_mode();
  }
  const auto kind = request->request_case();
  const bool eos =
      kind == pb::ProcessingRequest::kRequestHeaders ? request->request_headers().end_of_stream()
      : kind == pb::ProcessingRequest::kRequestBody  ? request->request_body().end_of_stream()
      : kind == pb::ProcessingRequest::kResponseBody ? request->response_body().end_of_stream()
                                                     : false;
  std::string body;  // the message's body (Handle may move it)
  if (kind == pb::ProcessingRequest::kRequestBody) body = request->request_body().body();
  if (kind == pb::ProcessingRequest::kResponseBody) body = request->response_body().body();
  const size_t sent_before = s.sent.size();
  if (kind == pb::ProcessingRequest::kRequestBody) s.sent += body;
  const bool request_side = kind == pb::ProcessingRequest::kRequestHeaders ||
                            kind == pb::ProcessingRequest::kRequestBody ||
                            kind == pb::ProcessingRequest::kRequestTrailers;

  std::vector<pb::ProcessingResponse> out;
  s.exchange->Handle(request, &out);

  FUZZ_CHECK(s.exchange->buffered_bytes() <= epp.options[variant].max_body_bytes,
             "the exchange buffers at most max_body_bytes");
  if (was_finished) {
    FUZZ_CHECK(out.empty(), "nothing answered after an immediate response");
    return;
  }
  bool immediate = false;
  std::string echoed_now, response_echo;
  size_t picks = 0, trailers = 0, response_answers = 0, empty_request_bodies = 0;
  bool pick_on_headers = false;
  for (size_t i = 0; i < out.size(); ++i) {
    const pb::ProcessingResponse& answer = out[i];
    FUZZ_CHECK(answer.response_case() != pb::ProcessingResponse::RESPONSE_NOT_SET,
               "every answer sets a response case");
    if (answer.has_immediate_response()) {
      immediate = true;
      FUZZ_CHECK(i + 1 == out.size(), "an immediate response is the last answer");
      FUZZ_CHECK(request_side, "an immediate response answers a request message");
      const int code = answer.immediate_response().status().code();
      FUZZ_CHECK(code >= 400 && code < 600, "an immediate response is an error status");
      continue;
    }
    const std::string_view destination = Destination(answer);
    if (!destination.empty()) {
      ++picks;
      pick_on_headers = answer.has_request_headers();
      size_t start = 0;
      while (true) {
        const size_t comma = destination.find(',', start);
        FUZZ_CHECK(
            KnownAddress(destination.substr(
                start, comma == std::string_view::npos ? std::string_view::npos : comma - start)),
            "the destination names known endpoints");
        if (comma == std::string_view::npos) break;
        start = comma + 1;
      }
      s.pick = std::string(destination.substr(0, destination.find(',')));
    }
    switch (answer.response_case()) {
      case pb::ProcessingResponse::kRequestHeaders:
        FUZZ_CHECK(request_side, "a request_headers answer to a request message");
        FUZZ_CHECK(
            kind != pb::ProcessingRequest::kRequestHeaders || eos || s.request_mode == pb::BUFFERED,
            "headers answered before the body only in BUFFERED mode");
        break;
      case pb::ProcessingResponse::kRequestBody:
        FUZZ_CHECK(request_side, "a request_body answer to a request message");
        if (const auto* chunk = Streamed(answer.request_body())) {
          FUZZ_CHECK(chunk->body().size() <= kMaxBodyChunkBytes,
                     "streamed chunks of at most 62,000 bytes");
          FUZZ_CHECK(!s.body_ended, "no request body chunk after the one that ended it");
          echoed_now += chunk->body();
          s.body_ended = chunk->end_of_stream();
        } else if (destination.empty()) {
          ++empty_request_bodies;
        }
        break;
      case pb::ProcessingResponse::kRequestTrailers:
        FUZZ_CHECK(kind == pb::ProcessingRequest::kRequestTrailers,
                   "a request_trailers answer to request trailers");
        ++trailers;
        break;
      case pb::ProcessingResponse::kResponseHeaders:
        FUZZ_CHECK(kind == pb::ProcessingRequest::kResponseHeaders,
                   "a response_headers answer to response headers");
        ++response_answers;
        break;
      case pb::ProcessingResponse::kResponseBody:
        FUZZ_CHECK(kind == pb::ProcessingRequest::kResponseBody,
                   "a response_body answer to a response body");
        ++response_answers;
        if (const auto* chunk = Streamed(answer.response_body())) {
          FUZZ_CHECK(chunk->body().size() <= kMaxBodyChunkBytes,
                     "streamed chunks of at most 62,000 bytes");
          FUZZ_CHECK(chunk->end_of_stream() == (eos && i + 1 == out.size()),
                     "a response body's end marked on its last chunk only");
          response_echo += chunk->body();
        }
        break;
      case pb::ProcessingResponse::kResponseTrailers:
        FUZZ_CHECK(kind == pb::ProcessingRequest::kResponseTrailers,
                   "a response_trailers answer to response trailers");
        ++response_answers;
        break;
      default:
        FUZZ_CHECK(false, "an answer of a known kind");
    }
  }
  FUZZ_CHECK(immediate == s.exchange->finished(),
             "finished exactly when an immediate response was sent");
  FUZZ_CHECK(picks <= 1 && (picks == 0 || !was_picked), "at most one pick per stream");
  s.echoed += echoed_now;
  FUZZ_CHECK(s.modes_changed || std::string_view(s.sent).starts_with(s.echoed),
             "the request body echoed is a prefix of the body sent");

  // The response path: answered once per message; a streamed body exactly.
  switch (kind) {
    case pb::ProcessingRequest::kResponseHeaders:
    case pb::ProcessingRequest::kResponseTrailers:
      FUZZ_CHECK(out.size() == 1 && response_answers == 1, "response messages answered once");
      break;
    case pb::ProcessingRequest::kResponseBody:
      if (s.response_mode == pb::FULL_DUPLEX_STREAMED) {
        FUZZ_CHECK(response_echo == body, "a streamed response body is echoed exactly");
        FUZZ_CHECK(out.size() == std::max<size_t>(1, (body.size() + kMaxBodyChunkBytes - 1) /
                                                         kMaxBodyChunkBytes),
                   "a response body in as few chunks as fit");
      } else {
        FUZZ_CHECK(out.size() == 1 && response_echo.empty(),
                   "a response body in another mode: one empty answer");
      }
      break;
    default:
      break;
  }
  if (!request_side || immediate) return;

  if (picks == 1) {
    // The pick: on the headers' answer the body so far follows, exactly
    // (streamed) or as one empty answer (BUFFERED); on a body answer
    // (headers answered early, BUFFERED) nothing else.
    const bool request_end = kind == pb::ProcessingRequest::kRequestTrailers || eos;
    if (pick_on_headers && s.request_mode != pb::BUFFERED && !s.sent.empty()) {
      FUZZ_CHECK(s.echoed == s.sent, "at the pick, the body received is echoed exactly");
      FUZZ_CHECK(s.body_ended == (eos && kind != pb::ProcessingRequest::kRequestTrailers),
                 "the echo ends with the body");
    } else {
      FUZZ_CHECK(echoed_now.empty(), "no body echoed with a pick in BUFFERED mode");
    }
    s.request_ended = request_end;
    s.passthrough = !request_end;
    FUZZ_CHECK(!s.passthrough || kind == pb::ProcessingRequest::kRequestBody,
               "a pick before the end only on an oversize body");
    if (s.passthrough) {
      FUZZ_CHECK(epp.counters[variant].oversize_passthrough.load() > 0,
                 "a pick before the end is an oversize pass-through");
    }
  } else if (was_picked) {
    // After the pick: oversize chunks pass through until the body ends.
    if (kind == pb::ProcessingRequest::kRequestBody) {
      if (s.passthrough && !s.request_ended) {
        if (s.request_mode == pb::BUFFERED) {
          FUZZ_CHECK(out.size() == 1 && empty_request_bodies == 1,
                     "a passed-through chunk in BUFFERED mode: one empty answer");
        } else {
          FUZZ_CHECK(echoed_now == std::string_view(s.sent).substr(sent_before),
                     "a passed-through chunk is echoed exactly");
          FUZZ_CHECK(s.body_ended == eos, "the pass-through ends with the body");
        }
        if (eos) s.request_ended = true;
      } else {
        FUZZ_CHECK(out.empty(), "no answer to a body after the request ended");
      }
    } else if (kind == pb::ProcessingRequest::kRequestTrailers) {
      s.request_ended = true;
    } else {
      FUZZ_CHECK(out.empty(), "headers after the pick are not answered");
    }
    if (kind == pb::ProcessingRequest::kRequestTrailers) {
      FUZZ_CHECK(trailers == 1 && out.size() == 1, "request trailers answered once");
    }
  } else {
    // Not decided: the request's end must have been answered.
    FUZZ_CHECK(kind != pb::ProcessingRequest::kRequestTrailers && !eos,
               "a request whose end arrived is answered (pick or immediate response)");
    FUZZ_CHECK(echoed_now.empty(), "no body echoed before the pick");
  }
  if (kind == pb::ProcessingRequest::kRequestTrailers && picks == 1) {
    FUZZ_CHECK(trailers == 1 && out.back().has_request_trailers(),
               "request trailers answered after the pick");
  }
}

void EndStream(Epp& epp, int variant, Stream& s) {
  if (!s.exchange) return;
  kvindex::epp::Picker& picker = *epp.pickers[variant];
  const int64_t before = s.pick.empty() ? 0 : picker.InFlight(s.pick);
  s.exchange->End();
  if (!s.pick.empty()) {
    FUZZ_CHECK(picker.InFlight(s.pick) == before - 1, "the stream's end releases its pick");
  }
  s.exchange.reset();  // End again (idempotent) in the destructor
  s = Stream();
}

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  if (size == 0 || size > (size_t{1} << 16)) return 0;
  Epp& epp = TheEpp();
  Reader in{data, size};
  const int variant = in.Byte() & 7;
  kvindex::epp::Picker& picker = *epp.pickers[variant];
  ServiceCounters& counters = epp.counters[variant];
  FUZZ_CHECK(InFlightTotal(picker) == 0, "no pick in flight between inputs");
  FUZZ_CHECK(counters.streams_open.load() == 0, "no stream open between inputs");
  const uint64_t ended_before = Ended(counters);
  uint64_t opened = 0;

  std::array<Stream, 2> streams;
  size_t filler_budget = size_t{2} << 20;
  while (!in.empty()) {
    const uint8_t tag = in.Byte();
    Stream& s = streams[(tag >> 6) & 1];
    const int op = tag & 7;
    if (op == 7) {
      EndStream(epp, variant, s);
      continue;
    }
    pb::ProcessingRequest request;
    bool garbage = false;
    if (op == 6) {
      const size_t n = in.Byte() | (size_t{in.Byte()} << 8);
      const std::string_view bytes = in.Bytes(n);
      garbage = !request.ParseFromArray(bytes.data(), static_cast<int>(bytes.size()));
    } else {
      const bool eos = tag & 8;
      const uint8_t path = op == 0 ? in.Byte() : 0;
      if (tag & 16) {
        const uint8_t modes = in.Byte();
        request.mutable_protocol_config()->set_request_body_mode(
            static_cast<pb::BodySendMode>((modes & 15) % 6));
        request.mutable_protocol_config()->set_response_body_mode(
            static_cast<pb::BodySendMode>((modes >> 4) % 6));
      }
      if (tag & 32) {
        const uint8_t bits = in.Byte();
        auto* namespaces = request.mutable_metadata_context()->mutable_filter_metadata();
        if (op == 3) {
          (*(*namespaces)[kvindex::epp::kDestinationNamespace]
                .mutable_fields())[kvindex::epp::kServedKey]
              .set_string_value(bits % 4 < 3 ? kAddresses[bits % 4] : "10.9.9.9:1");
        } else {
          auto* list = (*(*namespaces)[kvindex::epp::kSubsetNamespace]
                             .mutable_fields())[kvindex::epp::kSubsetKey]
                           .mutable_list_value();
          for (int i = 0; i < 3; ++i) {
            if (bits & (1 << i)) list->add_values()->set_string_value(kAddresses[i]);
          }
          if (bits & 8) list->add_values()->set_string_value("10.0.0.3");
          if (bits & 16) list->add_values()->set_string_value("10.9.9.9:1");
        }
      }
      std::string body;
      if (op == 1 || op == 4) {
        body = std::string(in.Bytes(in.Byte()));
        if (tag & 128) {
          const size_t n = (size_t{in.Byte()} + 1) * 1024;
          if (n <= filler_budget) {  // at most 2 MiB of filler per input
            body.append(n, ' ');
            filler_budget -= n;
          }
        }
      }
      switch (op) {
        case 0: {
          auto* headers = request.mutable_request_headers();
          if (path % 4 != 3) {
            auto* h = headers->mutable_headers()->add_headers();
            h->set_key(":path");
            h->set_raw_value(kPaths[path % 4]);
          }
          headers->set_end_of_stream(eos);
          break;
        }
        case 1:
          request.mutable_request_body()->set_body(std::move(body));
          request.mutable_request_body()->set_end_of_stream(eos);
          break;
        case 2:
          request.mutable_request_trailers();
          break;
        case 3:
          request.mutable_response_headers()->set_end_of_stream(eos);
          break;
        case 4:
          request.mutable_response_body()->set_body(std::move(body));
          request.mutable_response_body()->set_end_of_stream(eos);
          break;
        default:
          request.mutable_response_trailers();
          break;
      }
    }
    if (!s.exchange) {
      s.exchange = std::make_unique<ExtProcExchange>(&epp.options[variant], &picker,
                                                     epp.chain.get(), &counters);
      ++opened;
    }
    if (garbage) {  // gRPC fails the stream on a message that does not parse
      EndStream(epp, variant, s);
      continue;
    }
    Send(epp, variant, s, &request);
    int64_t holding = 0;
    for (const Stream& each : streams) holding += each.exchange && !each.pick.empty() ? 1 : 0;
    FUZZ_CHECK(InFlightTotal(picker) == holding, "one pick in flight per stream holding one");
  }
  for (Stream& s : streams) EndStream(epp, variant, s);
  FUZZ_CHECK(InFlightTotal(picker) == 0, "no pick left in flight after the streams");
  FUZZ_CHECK(counters.streams_open.load() == 0, "streams_open back to 0");
  FUZZ_CHECK(Ended(counters) == ended_before + opened, "each stream's end counted once");
  return 0;
}

// Seeds: the exchanges Envoy holds with an EPP (docs/epp.md, "Protocol"), in
// the input format above.
void kvindex::fuzz::WriteSeeds(const SeedWriter& write) {
  auto body = [](uint8_t tag, std::string_view text) {
    std::string out(1, static_cast<char>(tag));
    out.push_back(static_cast<char>(text.size()));
    out += text;
    return out;
  };
  const std::string tokens = R"({"model":"m","prompt":[1,2,3,4,5,6,7,8,9],"max_tokens":8})";
  const std::string chat =
      R"({"model":"m","messages":[{"role":"user","content":"hi"}],"cache_salt":"s"})";
  const std::string headers = std::string("\x00\x00", 2);  // request_headers, /v1/completions
  // Streamed: headers, the body in two chunks, the response headers (served
  // the pick) and a streamed response body, trailers.
  write("completions_tokens_streamed",
        std::string(1, '\x00') + headers + body(1, tokens.substr(0, 20)) +
            body(1 | 8, tokens.substr(20)) + std::string("\x23\x00", 2) +
            body(4 | 8, "data: {\"choices\":[]}\n\n") + std::string(1, '\x05'));
  // BUFFERED both ways (protocol_config 0x22), a chat body, fail closed.
  write("chat_buffered", std::string(1, '\x01') + std::string("\x10\x01\x22", 3) +
                             body(1 | 8, chat) + body(4 | 8, "{}"));
  // Headers only (load-only pick), one pick in flight per endpoint, then a
  // second stream that picks too.
  write("headers_only_two_streams", std::string(1, '\x04') + std::string("\x08\x02", 2) +
                                        std::string("\x48\x00", 2) + std::string(1, '\x07') +
                                        std::string("\x08\x00", 2));
  // A subset hint (endpoint 2 and "10.0.0.3"), a body ended by trailers.
  write("subset_hint_trailers", std::string(1, '\x00') + std::string("\x20\x00\x0a", 3) +
                                    body(1, R"({"model":"m","prompt":"hello"})") +
                                    std::string(1, '\x02'));
  // Oversize: 2 KiB limit, a 3 KiB chunk passes through (fail open), then
  // the rest; and fail closed (413).
  std::string big = std::string(1, '\x02') + headers + body(1 | 128, "{\"prompt\":\"");
  big.push_back('\x02');
  big += body(1, "x") + body(1 | 8, "\"}");
  write("oversize_passthrough", big);
  std::string closed = std::string(1, '\x03') + headers + body(1 | 128, "{");
  closed.push_back('\x02');
  write("oversize_closed", closed);
  // A large body echoed in several 62,000-byte chunks (160 KiB limit).
  std::string large = std::string(1, '\x00') + headers + body(1 | 8 | 128, "[");
  large.push_back('\x78');
  write("large_streamed", large);
  // A serialized ProcessingRequest (request headers with end_of_stream) and
  // bytes that do not parse.
  pb::ProcessingRequest raw;
  raw.mutable_request_headers()->set_end_of_stream(true);
  const std::string bytes = raw.SerializeAsString();
  std::string serialized = std::string(1, '\x00') + std::string(1, '\x06');
  serialized.push_back(static_cast<char>(bytes.size()));
  serialized.push_back('\x00');
  serialized += bytes + std::string("\x46\x03\x00\xff\xff\xff", 6);
  write("serialized_and_garbage", serialized);
}
