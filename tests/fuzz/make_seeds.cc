// Writes the seed corpus of batch_decoder_fuzzer from
// the golden wire vectors plus encoder-built payloads that reach paths the
// vectors do not (placeholders, EAGLE bigrams, signed / bin / str hashes,
// 2-element envelopes, unknown tags and keys, lora / cache_salt, locality).
// Each seed is one config byte (see batch_decoder_fuzzer.cc) + one payload.
//
// The build runs it (tests/fuzz/CMakeLists.txt, with -DKVINDEX_FUZZ=ON) into
// <build>/fuzz-seeds/batch_decoder_fuzzer; nothing of its output is committed:
//   kvindex_fuzz_seeds data/wire-vectors OUT_DIR
#include <cstdio>
#include <fstream>
#include <iterator>
#include <string>
#include <vector>

#include "shared/wire/event_encoder.h"

namespace {

using kvindex::wire::EncodeBatch;
using kvindex::wire::EncodeOptions;
using kvindex::wire::EventForm;
using kvindex::wire::EventType;
using kvindex::wire::HashEncoding;
using kvindex::wire::WireEvent;

void Write(const std::string& path, uint8_t config, const std::vector<uint8_t>& payload) {
  std::ofstream out(path, std::ios::binary);
  out.put(static_cast<char>(config));
  out.write(reinterpret_cast<const char*>(payload.data()),
            static_cast<std::streamsize>(payload.size()));
}

std::vector<uint32_t> Tokens(uint32_t first, uint32_t count) {
  std::vector<uint32_t> tokens(count);
  for (uint32_t k = 0; k < count; ++k) tokens[k] = first + k * 977;
  return tokens;
}

}  // namespace

int main(int argc, char** argv) {
  if (argc != 3) {
    std::fprintf(stderr, "usage: %s WIRE_VECTOR_DIR OUT_DIR\n", argv[0]);
    return 2;
  }
  const std::string vectors = argv[1], out = argv[2];
  for (const char* name :
       {"A_legacy_array_minimal", "A2_legacy_array_engine_shaped", "B_map_minimal",
        "B2_map_engine_shaped", "C_map16_header_engine_shaped", "D_map_removed_and_cleared",
        "D2_legacy_array_removed_and_cleared", "E_map_empty_heartbeat_batch"}) {
    std::ifstream in(vectors + "/" + name + ".msgpack", std::ios::binary);
    const std::vector<uint8_t> payload(std::istreambuf_iterator<char>(in), {});
    if (payload.empty()) {
      std::fprintf(stderr, "missing %s\n", name);
      return 1;
    }
    Write(out + "/golden_" + name, 0x00, payload);
    Write(out + "/golden_observed_" + name, 0x10, payload);
  }

  // A chain stored on GPU, re-announced on CPU as a placeholder and as a
  // chunk, partly removed, then an unknown event and a clear.
  WireEvent gpu{.type = EventType::kBlockStored,
                .block_hashes = {1, 2, 3, 4},
                .token_ids = Tokens(7, 64),
                .block_size = 16,
                .medium = "GPU"};
  WireEvent placeholder{
      .type = EventType::kBlockStored, .block_hashes = {2, 3, 99}, .medium = "CPU"};
  WireEvent chunk{.type = EventType::kBlockStored,
                  .block_hashes = {3, 4},
                  .parent_block_hash = 2,
                  .token_ids = Tokens(7 + 32 * 977, 32),
                  .block_size = 16,
                  .medium = "CPU_PINNED",
                  .lora_name = "lora",
                  .cache_salt = "salt",
                  .locality = "LOCAL"};
  WireEvent removed{.type = EventType::kBlockRemoved,
                    .block_hashes = {4, 3, 3, 42},
                    .medium = "GPU",
                    .group_idx = 0};
  WireEvent unknown{.type = EventType::kUnknown, .tag = "BlockInactive"};
  WireEvent eagle{.type = EventType::kBlockStored,
                  .block_hashes = {7, 8},
                  .token_ids = Tokens(1, 33),
                  .bigram = true,
                  .block_size = 16,
                  .medium = "DISK",
                  .unknown_keys = {"new_key"}};
  WireEvent cleared{.type = EventType::kAllBlocksCleared};
  const std::vector<WireEvent> stream = {gpu, placeholder, chunk, removed, unknown, eagle, cleared};
  int n = 0;
  for (EventForm form : {EventForm::kMap, EventForm::kArray}) {
    for (HashEncoding hashes :
         {HashEncoding::kUint, HashEncoding::kSigned, HashEncoding::kBin32, HashEncoding::kStr32}) {
      std::vector<uint8_t> payload;
      EncodeBatch(1757500000.25, stream, 1u,
                  {.form = form, .hashes = hashes, .map16 = n % 3 == 0, .two_element = n % 4 == 3},
                  &payload);
      Write(out + "/stream_" + std::to_string(n), static_cast<uint8_t>(0x10 | (n & 0x20)), payload);
      ++n;
    }
  }
  return 0;
}
