// Test helpers for kvindex_ingest tests (not part of the library): msgpack
// engine payloads built with msgpack-c++, an event recorder, and a compact
// text rendering of published batches ("C|S0|S1|C S5").
//
// Batch i stores one 16-token root block with tokens [16i, 16i+16) and
// engine hash 1000+i, so the canonical hash identifies i whatever the
// normalizer's internals.
#pragma once

#include <gtest/gtest.h>

#include <chrono>
#include <functional>
#include <msgpack.hpp>
#include <optional>
#include <sstream>
#include <string>
#include <thread>
#include <vector>

#include "absl/container/flat_hash_map.h"
#include "shared/base/mutex.h"
#include "shared/hashing/canonical_hash.h"
#include "shared/ingest/frames.h"
#include "shared/model/placement_event.h"
#include "shared/publish/publisher.h"

namespace kvindex::ingest::testing {

inline constexpr uint32_t kBlockSize = 16;

inline std::vector<uint32_t> TokensOf(uint64_t i) {
  std::vector<uint32_t> tokens(kBlockSize);
  for (uint32_t t = 0; t < kBlockSize; ++t) tokens[t] = static_cast<uint32_t>(i * kBlockSize + t);
  return tokens;
}

inline uint64_t CanonicalOf(uint64_t i) {
  std::vector<uint64_t> local, seq;
  hashing::ComputeLocalHashes(TokensOf(i), kBlockSize, hashing::LocalHashSeed("", ""), &local);
  hashing::ComputeSequenceHashes(local, std::nullopt, &seq);
  return seq.at(0);
}

// [ts, [["BlockStored", [1000+i], nil, tokens, 16, nil, "GPU", nil, nil, nil, nil, nil]], rank]
inline std::string StoredBatch(uint64_t i, uint32_t dp_rank = 0) {
  msgpack::sbuffer buffer;
  msgpack::packer<msgpack::sbuffer> pk(buffer);
  pk.pack_array(3);
  pk.pack_double(1757500000.25);
  pk.pack_array(1);
  pk.pack_array(12);
  pk.pack(std::string("BlockStored"));
  pk.pack_array(1);
  pk.pack_uint64(1000 + i);
  pk.pack_nil();
  pk.pack(TokensOf(i));
  pk.pack_uint32(kBlockSize);
  pk.pack_nil();
  pk.pack(std::string("GPU"));
  for (int k = 0; k < 5; ++k) pk.pack_nil();
  pk.pack_uint32(dp_rank);
  return std::string(buffer.data(), buffer.size());
}

// [ts, [], rank]: a heartbeat batch with no events.
inline std::string EmptyBatch() {
  msgpack::sbuffer buffer;
  msgpack::packer<msgpack::sbuffer> pk(buffer);
  pk.pack_array(3);
  pk.pack_double(1.0);
  pk.pack_array(0);
  pk.pack_uint32(0);
  return std::string(buffer.data(), buffer.size());
}

// 0xc1 is never used by msgpack: undecodable.
inline std::string GarbagePayload() { return std::string("\xc1\xc1\xc1", 3); }

inline std::string SeqBytes(uint64_t seq) {
  uint8_t bytes[kSeqBytes];
  EncodeSeq(seq, bytes);
  return std::string(reinterpret_cast<const char*>(bytes), kSeqBytes);
}

inline Frame AsFrame(const std::string& s) {
  return {reinterpret_cast<const uint8_t*>(s.data()), s.size()};
}

// Renders events: C = cleared, S<i> = stored batch i (by canonical hash),
// R<n> = removed n blocks, H = heartbeat. Events of one batch are joined by
// ' ', batches by '|'.
class Renderer {
 public:
  Renderer() {
    for (uint64_t i = 0; i < 256; ++i) by_hash_[CanonicalOf(i)] = i;
  }
  std::string Event(const PlacementEvent& e) const {
    switch (e.kind) {
      case PlacementKind::kCleared:
        return "C";
      case PlacementKind::kHeartbeat:
        return "H";
      case PlacementKind::kRemoved:
        return "R" + std::to_string(e.block_hashes.size());
      case PlacementKind::kStored: {
        std::string out = "S";
        for (size_t k = 0; k < e.block_hashes.size(); ++k) {
          auto it = by_hash_.find(e.block_hashes[k]);
          if (k > 0) out += ",";
          out += it == by_hash_.end() ? "?" : std::to_string(it->second);
        }
        return out;
      }
      case PlacementKind::kWorkerExpired:
        return "X";
      case PlacementKind::kAgentExpired:
        return "E";
    }
    return "?";
  }
  std::string Batches(const std::vector<std::vector<PlacementEvent>>& batches,
                      bool skip_heartbeats = true) const {
    std::string out;
    for (const auto& batch : batches) {
      std::string one;
      for (const auto& e : batch) {
        if (skip_heartbeats && e.kind == PlacementKind::kHeartbeat) continue;
        if (!one.empty()) one += " ";
        one += Event(e);
      }
      if (one.empty()) continue;
      if (!out.empty()) out += "|";
      out += one;
    }
    return out;
  }

 private:
  absl::flat_hash_map<uint64_t, uint64_t> by_hash_;
};

// Records every Publish call as one batch. Thread-safe.
class RecordingPublisher final : public PlacementPublisher {
 public:
  Status Publish(std::span<const PlacementEvent> events) override {
    MutexLock lock(&mu_);
    batches_.emplace_back(events.begin(), events.end());
    cv_.SignalAll();
    return absl::OkStatus();
  }
  Status Flush() override { return absl::OkStatus(); }

  std::vector<std::vector<PlacementEvent>> batches() const {
    MutexLock lock(&mu_);
    return batches_;
  }
  std::string Render(bool skip_heartbeats = true) const {
    return renderer_.Batches(batches(), skip_heartbeats);
  }
  // Waits until Render() equals `expected` (10 s at most); returns the last
  // rendering either way.
  std::string WaitForRender(const std::string& expected,
                            std::chrono::milliseconds timeout = std::chrono::seconds(10)) const {
    const auto deadline = std::chrono::steady_clock::now() + timeout;
    MutexLock lock(&mu_);
    std::string last = renderer_.Batches(batches_, true);
    while (last != expected) {
      const bool woken = cv_.WaitUntil(&mu_, deadline);
      last = renderer_.Batches(batches_, true);
      if (!woken) break;
    }
    return last;
  }
  // Waits until `pred` holds (10 s at most).
  bool WaitFor(const std::function<bool()>& pred,
               std::chrono::milliseconds timeout = std::chrono::seconds(10)) const {
    const auto deadline = std::chrono::steady_clock::now() + timeout;
    while (std::chrono::steady_clock::now() < deadline) {
      if (pred()) return true;
      std::this_thread::sleep_for(std::chrono::milliseconds(5));
    }
    return pred();
  }

 private:
  mutable Mutex mu_;
  mutable CondVar cv_;
  std::vector<std::vector<PlacementEvent>> batches_ ABSL_GUARDED_BY(mu_);
  Renderer renderer_;
};

}  // namespace kvindex::ingest::testing
