#include "shared/codec/placement_codec.h"

#include <gtest/gtest.h>

#include <msgpack.hpp>
#include <random>

namespace kvindex::codec {
namespace {

SourceEndpoint Ep(const std::string& worker, uint32_t rank, const std::string& model,
                  const std::string& address) {
  SourceEndpoint endpoint;
  endpoint.source.worker = worker;
  endpoint.source.dp_rank = rank;
  endpoint.model = model;
  endpoint.address = address;
  return endpoint;
}

std::vector<PlacementEvent> SampleEvents() {
  PlacementEvent stored;
  stored.kind = PlacementKind::kStored;
  stored.model = "llama";
  stored.source = {"w0", 3};
  stored.agent = "node-a";
  stored.event_id = 17;
  stored.timestamp_ns = 1757500000250000000ull;
  stored.tier = Tier::kHost;
  stored.block_size = 16;
  stored.parent_hash = 0xFFFFFFFFFFFFFFFFull;
  stored.block_hashes = {0, 1, 0xDAB89BAA7B5857C0ull};

  PlacementEvent root_stored = stored;
  root_stored.parent_hash.reset();
  root_stored.tier = Tier::kExternal;

  PlacementEvent removed;
  removed.kind = PlacementKind::kRemoved;
  removed.model = "llama";
  removed.source = {"w1", 0};
  removed.tier = Tier::kDisk;
  removed.block_hashes = {42};

  PlacementEvent cleared;
  cleared.kind = PlacementKind::kCleared;
  cleared.model = "llama";
  cleared.source = {"w1", 0};

  PlacementEvent heartbeat;
  heartbeat.kind = PlacementKind::kHeartbeat;
  heartbeat.agent = "node-a";
  heartbeat.lease_ms = 30000;
  heartbeat.sources = {{"w0", 0}, {"w0", 1}};

  PlacementEvent announcing = heartbeat;
  announcing.endpoints.push_back(Ep("w0", 1, "llama", "10.0.0.7:8000"));
  announcing.endpoints.push_back(Ep("w0", 0, "", "[::1]:8000"));

  PlacementEvent expired;
  expired.kind = PlacementKind::kWorkerExpired;
  expired.source = {"w9", 0};

  PlacementEvent agent_expired;
  agent_expired.kind = PlacementKind::kAgentExpired;
  agent_expired.agent = "node-b";
  agent_expired.heartbeat_seq = 0xFFFFFFFFFFFFull;
  return {stored, root_stored, removed, cleared, heartbeat, announcing, expired, agent_expired};
}

TEST(PlacementCodecTest, RoundTripsEveryKind) {
  const std::vector<PlacementEvent> events = SampleEvents();
  std::string bytes;
  EncodePlacementBatch(events, &bytes);
  auto decoded = DecodePlacementBatch(bytes);
  ASSERT_TRUE(decoded.ok()) << decoded.status();
  EXPECT_EQ(decoded->version, kPlacementSchemaVersion);
  EXPECT_EQ(decoded->skipped_unknown_kind, 0u);
  EXPECT_EQ(decoded->events, events);
}

// EncodedEventBound is what the publisher keeps messages under max_payload
// with: it must never be below the encoding, whatever the kind, the integers
// (all at their widest here), the strings' and arrays' lengths (across
// msgpack's header sizes). It was an estimate ~20% under for small SGLang
// stores, and a batch of thousands of them outgrew max_payload.
TEST(PlacementCodecTest, EncodedEventBoundIsAtLeastTheEncoding) {
  constexpr uint64_t kWide = ~uint64_t{0};
  std::vector<PlacementEvent> events = SampleEvents();
  for (PlacementEvent& event : SampleEvents()) {
    event.model.assign(300, 'm');
    event.source = {std::string(40, 'w'), 0xFFFFFFFF};
    event.agent.assign(70000, 'a');
    event.event_id = event.timestamp_ns = event.heartbeat_seq = kWide;
    event.lease_ms = event.block_size = 0xFFFFFFFF;
    if (event.parent_hash) event.parent_hash = kWide;
    for (uint64_t& hash : event.block_hashes) hash = kWide;
    if (event.kind == PlacementKind::kStored) event.sglang_hashes = event.block_hashes;
    event.sources.assign(20, event.source);
    for (SourceEndpoint& endpoint : event.endpoints) endpoint.address.assign(260, '1');
    events.push_back(event);
  }
  const size_t narrow = SampleEvents().size();  // the ones before: small integers
  PlacementEvent stored = events[narrow];       // a wide one
  for (size_t count : {1u, 15u, 16u, 65535u, 65536u}) {
    stored.block_hashes.assign(count, kWide);
    stored.sglang_hashes.assign(count, kWide - 1);
    events.push_back(stored);
  }
  stored.sglang_hashes.clear();  // not written
  events.push_back(stored);
  const std::string agent(300, 'n');
  size_t total = 0;
  std::string one, batch;
  for (size_t i = 0; i < events.size(); ++i) {
    const PlacementEvent& event = events[i];
    EncodePlacementBatch({&event, 1}, &one);
    EncodePlacementBatch({}, &batch);
    const size_t encoded = one.size() - batch.size();  // (a fixarray header either way)
    SCOPED_TRACE(std::string(PlacementKindName(event.kind)) + " of " +
                 std::to_string(event.block_hashes.size()) + " hashes");
    EXPECT_GE(EncodedEventBound(event), encoded);
    // ... and close to it (uint32s counted as uint64s, the map's header as
    // map16's): a loose bound makes needlessly small messages.
    if (i >= narrow) {
      EXPECT_LE(EncodedEventBound(event),
                encoded + 16 + 8 * (event.sources.size() + event.endpoints.size()));
    }
    total += EncodedEventBound(event);
  }
  EncodePlacementBatch(
      events, &batch,
      {.agent = agent, .incarnation = kWide, .msg_seq = kWide, .subject_seq = kWide});
  EXPECT_GE(EncodedHeaderBound(agent) + total, batch.size());
}

TEST(PlacementCodecTest, SequencedHeaderRoundTrips) {
  const std::vector<PlacementEvent> events = SampleEvents();
  const MessageHeader header{
      .agent = "node a.b", .incarnation = 1757500000000000001ull, .msg_seq = 0xFFFFFFFFFFFFFFFFull};
  std::string bytes;
  EncodePlacementBatch(events, &bytes, header);
  auto decoded = DecodePlacementBatch(bytes);
  ASSERT_TRUE(decoded.ok()) << decoded.status();
  EXPECT_EQ(decoded->header, header);
  EXPECT_EQ(decoded->events, events);
  EXPECT_EQ(decoded->header.subject_seq, 0u);  // absent: an agent from before the field

  MessageHeader numbered = header;
  numbered.subject_seq = 7;
  EncodePlacementBatch(events, &bytes, numbered);
  decoded = DecodePlacementBatch(bytes);
  ASSERT_TRUE(decoded.ok()) << decoded.status();
  EXPECT_EQ(decoded->header, numbered);

  // Unsequenced messages (router expiry decisions) carry no header fields.
  EncodePlacementBatch(events, &bytes);
  decoded = DecodePlacementBatch(bytes);
  ASSERT_TRUE(decoded.ok());
  EXPECT_FALSE(decoded->header.sequenced());
  EXPECT_EQ(decoded->header, MessageHeader{});
}

TEST(PlacementCodecTest, SequencedMessageWithoutAgentIsRejected) {
  std::string bytes;
  EncodePlacementBatch({}, &bytes, MessageHeader{.agent = "", .incarnation = 1, .msg_seq = 2});
  auto decoded = DecodePlacementBatch(bytes);
  ASSERT_FALSE(decoded.ok());
  EXPECT_NE(decoded.status().message().find("'agent'"), std::string_view::npos);
}

// A corrupt length header must not make the decoder reserve memory for
// elements the message cannot hold (array32 of 2^32 - 1, map32 likewise).
// Without the limits a Release build still answers InvalidArgument (the
// 64 GiB reservation is virtual, or bad_alloc is caught); under ASan the
// reservation aborts the test, which is how the sanitizer stage catches it.
TEST(PlacementCodecTest, HugeLengthHeadersAreRejectedWithoutAllocating) {
  const std::string v_events = std::string("\x82\xa1v\x01\xa6") + "events";
  for (const std::string& bytes :
       {v_events + std::string("\xdd\xff\xff\xff\xff", 5),         // events: array32
        std::string("\xdf\xff\xff\xff\xff\xa1v\x01", 8),           // top level: map32
        v_events + std::string("\x91\xdb\xff\xff\xff\xff", 6)}) {  // an event: str32
    auto decoded = DecodePlacementBatch(bytes);
    ASSERT_FALSE(decoded.ok());
    EXPECT_EQ(decoded.status().code(), absl::StatusCode::kInvalidArgument);
  }
}

TEST(PlacementCodecTest, EmptyBatch) {
  std::string bytes;
  EncodePlacementBatch({}, &bytes);
  auto decoded = DecodePlacementBatch(bytes);
  ASSERT_TRUE(decoded.ok());
  EXPECT_TRUE(decoded->events.empty());
}

// A newer agent adds a field and a kind; this build ignores the field and
// skips the event.
TEST(PlacementCodecTest, ForwardCompatible) {
  msgpack::sbuffer buffer;
  msgpack::packer<msgpack::sbuffer> packer(buffer);
  packer.pack_map(3);
  packer.pack("v");
  packer.pack(2);
  packer.pack("future_top_level");
  packer.pack("x");
  packer.pack("events");
  packer.pack_array(2);
  packer.pack_map(4);
  packer.pack("kind");
  packer.pack("cleared");
  packer.pack("model");
  packer.pack("m");
  packer.pack("worker");
  packer.pack("w");
  packer.pack("new_field");
  packer.pack_array(0);
  packer.pack_map(1);
  packer.pack("kind");
  packer.pack("block_inactive");
  auto decoded = DecodePlacementBatch(std::string_view(buffer.data(), buffer.size()));
  ASSERT_TRUE(decoded.ok()) << decoded.status();
  EXPECT_EQ(decoded->version, 2u);
  ASSERT_EQ(decoded->events.size(), 1u);
  EXPECT_EQ(decoded->events[0].kind, PlacementKind::kCleared);
  EXPECT_EQ(decoded->events[0].source.worker, "w");
  EXPECT_EQ(decoded->skipped_unknown_kind, 1u);
}

// A heartbeat as agents wrote it before "endpoints" existed (msgpack by
// hand, the fields of docs/events.md in the encoder's order).
std::string OldHeartbeatBytes() {
  msgpack::sbuffer buffer;
  msgpack::packer<msgpack::sbuffer> p(buffer);
  p.pack_map(2);
  p.pack("v");
  p.pack(1);
  p.pack("events");
  p.pack_array(1);
  p.pack_map(9);
  p.pack("kind");
  p.pack("heartbeat");
  p.pack("model");
  p.pack("");
  p.pack("worker");
  p.pack("");
  p.pack("dp_rank");
  p.pack(0);
  p.pack("agent");
  p.pack("node-a");
  p.pack("event_id");
  p.pack(0);
  p.pack("ts_ns");
  p.pack(0);
  p.pack("lease_ms");
  p.pack(30000);
  p.pack("sources");
  p.pack_array(1);
  p.pack_array(2);
  p.pack("w0");
  p.pack(0);
  return std::string(buffer.data(), buffer.size());
}

// The endpoints field is added compatibly: a heartbeat without endpoints is
// byte for byte what the encoder wrote before it existed, so an old message
// decodes to no endpoints; one with endpoints keeps every other field (an
// old reader skips the unknown key, ForwardCompatible above).
TEST(PlacementCodecTest, HeartbeatEndpointsAreACompatibleAddition) {
  PlacementEvent heartbeat;
  heartbeat.kind = PlacementKind::kHeartbeat;
  heartbeat.agent = "node-a";
  heartbeat.lease_ms = 30000;
  heartbeat.sources = {{"w0", 0}};
  std::string bytes;
  EncodePlacementBatch({&heartbeat, 1}, &bytes);
  EXPECT_EQ(bytes, OldHeartbeatBytes());
  auto old = DecodePlacementBatch(OldHeartbeatBytes());
  ASSERT_TRUE(old.ok()) << old.status();
  ASSERT_EQ(old->events.size(), 1u);
  EXPECT_TRUE(old->events[0].endpoints.empty());
  EXPECT_EQ(old->events[0], heartbeat);

  heartbeat.endpoints.push_back(Ep("w0", 0, "m", "10.0.0.7:8000"));
  EncodePlacementBatch({&heartbeat, 1}, &bytes);
  auto decoded = DecodePlacementBatch(bytes);
  ASSERT_TRUE(decoded.ok()) << decoded.status();
  EXPECT_EQ(decoded->events[0], heartbeat);
  EXPECT_EQ(decoded->events[0].sources, old->events[0].sources);
}

std::string Pack(const std::function<void(msgpack::packer<msgpack::sbuffer>&)>& fn);

// SGLang's engine hashes ride on stored events as "sglang_hashes", written
// only when present: a stored event without them is the same bytes as
// before the field existed, one with them round-trips (i64 bits as u64),
// an old reader ignores the key (ForwardCompatible), and on any other kind
// the field is ignored.
TEST(PlacementCodecTest, SglangHashesAreACompatibleAdditionOnStoredEvents) {
  PlacementEvent stored = SampleEvents()[0];
  std::string without;
  EncodePlacementBatch({&stored, 1}, &without);
  EXPECT_EQ(without.find("sglang_hashes"), std::string::npos);

  stored.sglang_hashes = {static_cast<uint64_t>(int64_t{-3803038269031200164}), 7,
                          0xFFFFFFFFFFFFFFFFull};
  std::string with;
  EncodePlacementBatch({&stored, 1}, &with);
  auto decoded = DecodePlacementBatch(with);
  ASSERT_TRUE(decoded.ok()) << decoded.status();
  ASSERT_EQ(decoded->events.size(), 1u);
  EXPECT_EQ(decoded->events[0], stored);

  // A count that differs from the blocks' is decoded as sent: its user
  // (compat::SglangAliasMap) counts and ignores it, the blocks still apply.
  stored.sglang_hashes.pop_back();
  EncodePlacementBatch({&stored, 1}, &with);
  decoded = DecodePlacementBatch(with);
  ASSERT_TRUE(decoded.ok()) << decoded.status();
  EXPECT_EQ(decoded->events[0].sglang_hashes.size(), 2u);
  EXPECT_EQ(decoded->events[0].block_hashes, stored.block_hashes);

  // On another kind: ignored (the encoder never writes it there).
  const std::string removed = Pack([](auto& p) {
    p.pack_map(2);
    p.pack("v");
    p.pack(1);
    p.pack("events");
    p.pack_array(1);
    p.pack_map(4);
    p.pack("kind");
    p.pack("removed");
    p.pack("tier");
    p.pack("device");
    p.pack("hashes");
    p.pack_array(1);
    p.pack(5);
    p.pack("sglang_hashes");
    p.pack_array(1);
    p.pack(6);
  });
  decoded = DecodePlacementBatch(removed);
  ASSERT_TRUE(decoded.ok()) << decoded.status();
  EXPECT_TRUE(decoded->events[0].sglang_hashes.empty());

  // The wrong type is refused like any known field's.
  for (bool not_array : {true, false}) {
    const std::string bad = Pack([&](auto& p) {
      p.pack_map(2);
      p.pack("v");
      p.pack(1);
      p.pack("events");
      p.pack_array(1);
      p.pack_map(3);
      p.pack("kind");
      p.pack("stored");
      p.pack("tier");
      p.pack("device");
      p.pack("sglang_hashes");
      if (not_array) {
        p.pack("x");
      } else {
        p.pack_array(1);
        p.pack(-1);
      }
    });
    auto refused = DecodePlacementBatch(bad);
    ASSERT_FALSE(refused.ok());
    EXPECT_NE(refused.status().message().find("'sglang_hashes'"), std::string::npos)
        << refused.status();
  }
}

TEST(PlacementCodecTest, BadEndpointEntriesAreRejected) {
  for (const std::string& address :
       {std::string(), std::string("no-port"), std::string(600, 'a')}) {
    PlacementEvent heartbeat;
    heartbeat.kind = PlacementKind::kHeartbeat;
    heartbeat.sources = {{"w0", 0}};
    heartbeat.endpoints.push_back(Ep("w0", 0, "m", address + (address.size() > 100 ? ":1" : "")));
    std::string bytes;
    EncodePlacementBatch({&heartbeat, 1}, &bytes);
    auto decoded = DecodePlacementBatch(bytes);
    ASSERT_FALSE(decoded.ok()) << address;
    EXPECT_NE(decoded.status().message().find("'endpoints'"), std::string::npos);
  }
}

std::string Pack(const std::function<void(msgpack::packer<msgpack::sbuffer>&)>& fn) {
  msgpack::sbuffer buffer;
  msgpack::packer<msgpack::sbuffer> packer(buffer);
  fn(packer);
  return std::string(buffer.data(), buffer.size());
}

TEST(PlacementCodecTest, MalformedInputIsInvalidArgumentNamingTheProblem) {
  struct Case {
    std::string bytes;
    std::string expected;
  };
  const std::vector<Case> cases = {
      {"", "not msgpack"},
      {"\xc1", "not msgpack"},
      {Pack([](auto& p) { p.pack_array(0); }), "top level"},
      {Pack([](auto& p) {
         p.pack_map(1);
         p.pack("events");
         p.pack_array(0);
       }),
       "'v' is missing"},
      {Pack([](auto& p) {
         p.pack_map(1);
         p.pack("v");
         p.pack(1);
       }),
       "'events' is missing"},
      {Pack([](auto& p) {
         p.pack_map(2);
         p.pack("v");
         p.pack(1);
         p.pack("events");
         p.pack_array(1);
         p.pack_map(1);
         p.pack("model");
         p.pack("m");
       }),
       "'kind' is missing"},
      {Pack([](auto& p) {
         p.pack_map(2);
         p.pack("v");
         p.pack(1);
         p.pack("events");
         p.pack_array(1);
         p.pack_map(2);
         p.pack("kind");
         p.pack("stored");
         p.pack("hashes");
         p.pack_array(1);
         p.pack(-1);
       }),
       "'hashes' must be an unsigned integer"},
      {Pack([](auto& p) {
         p.pack_map(2);
         p.pack("v");
         p.pack(1);
         p.pack("events");
         p.pack_array(1);
         p.pack_map(2);
         p.pack("kind");
         p.pack("stored");
         p.pack("tier");
         p.pack("gpu");
       }),
       "'tier' names no known tier"},
  };
  for (const Case& c : cases) {
    auto decoded = DecodePlacementBatch(c.bytes);
    ASSERT_FALSE(decoded.ok()) << c.expected;
    EXPECT_EQ(decoded.status().code(), absl::StatusCode::kInvalidArgument);
    EXPECT_NE(decoded.status().message().find(c.expected), std::string::npos)
        << decoded.status().message() << " vs " << c.expected;
  }
}

// Every truncation and random single-byte corruption of a valid message
// either decodes or fails cleanly; nothing crashes.
TEST(PlacementCodecTest, TruncationsAndCorruptionsNeverCrash) {
  std::string bytes;
  EncodePlacementBatch(SampleEvents(), &bytes);
  for (size_t len = 0; len < bytes.size(); ++len) {
    EXPECT_FALSE(DecodePlacementBatch(std::string_view(bytes.data(), len)).ok()) << len;
  }
  // A corrupted byte either is rejected as InvalidArgument, or decodes to a
  // batch that is itself well formed: encoding it again and decoding gives
  // the same header and events (nothing half-filled slips through).
  std::mt19937_64 rng(7);
  int rejected = 0;
  for (int i = 0; i < 2000; ++i) {
    std::string corrupted = bytes;
    corrupted[rng() % corrupted.size()] = static_cast<char>(rng());
    auto decoded = DecodePlacementBatch(corrupted);
    if (!decoded.ok()) {
      EXPECT_EQ(decoded.status().code(), absl::StatusCode::kInvalidArgument) << decoded.status();
      ++rejected;
      continue;
    }
    std::string again;
    EncodePlacementBatch(decoded->events, &again, decoded->header);
    auto round_trip = DecodePlacementBatch(again);
    ASSERT_TRUE(round_trip.ok()) << round_trip.status();
    EXPECT_EQ(round_trip->header, decoded->header);
    EXPECT_EQ(round_trip->events, decoded->events);
  }
  // Most single-byte corruptions break the structure; some only change a value.
  EXPECT_GT(rejected, 0);
  EXPECT_LT(rejected, 2000);
}

}  // namespace
}  // namespace kvindex::codec
