// libFuzzer target for the peer bootstrap's import (what kvindex-router
// --bootstrap-from does with a peer's GET /v1/checkpoint answer:
// Checkpointer::Import -> CheckpointStore::Import): the exported blob
// (magic, (key, value) records, XXH3 trailer) written as the newest
// checkpoint of a real RocksDB store in a temp dir (one per process,
// removed at exit), then read back and verified like any other. The first
// input byte picks the shape of the rest:
//   0  the exported blob as a peer sends it;
//   1  its records only (magic and trailer added by the harness, so the
//      fuzzer gets past the transfer checksum);
//   2  length-prefixed (u32 little-endian) key-suffix / value pairs, each
//      manifest value ("m" key) given its XXH3 trailer by the harness: the
//      harness writes the export, so the records reach the checkpoint
//      reader (Stream: chunk order, counts, ingest pieces, the digest).
// Invariants (abort = finding):
// - a refused import is DataLoss (or InvalidArgument / ResourceExhausted)
//   and leaves no checkpoint behind (List() unchanged);
// - an accepted one is listed, loads and verifies, restores into a fresh
//   index to the listed digest and counts, and exports back to bytes that
//   import again to the same checkpoint (round trip).
#include <unistd.h>
#include <xxhash.h>

#include <cstddef>
#include <cstdint>
#include <cstdlib>
#include <cstring>
#include <filesystem>
#include <memory>
#include <string>
#include <string_view>
#include <vector>

#include "shared/base/bytes.h"
#include "shared/consume/agent_table.h"
#include "shared/index/kv_index.h"
#include "storage/checkpoint_store.h"
#include "tests/fuzz/checkpoint_sample.h"
#include "tests/fuzz/fuzz_check.h"
#include "tests/fuzz/seed_writer.h"

namespace {

using kvindex::storage::CheckpointInfo;
using kvindex::storage::CheckpointStore;

constexpr std::string_view kMagic = "kvindex-checkpoint-1\n";

std::string TempDir() {
  std::string dir = (std::filesystem::temp_directory_path() / "kvindex-fuzz-import-XXXXXX");
  FUZZ_CHECK(mkdtemp(dir.data()) != nullptr, "temp dir");
  return dir;
}

struct Store {
  Store() : dir(TempDir()) {
    auto opened = CheckpointStore::Open(dir + "/checkpoints");
    FUZZ_CHECK(opened.ok(), "the checkpoint store opens");
    store = std::move(*opened);
  }
  ~Store() {
    store.reset();
    std::error_code ignored;
    std::filesystem::remove_all(dir, ignored);
  }
  std::string dir;
  std::unique_ptr<CheckpointStore> store;
};

Store& TheStore() {
  static Store store;  // removed at exit
  return store;
}

std::string Wrap(std::string_view records) {
  std::string out(kMagic);
  out.append(records);
  kvindex::bytes::PutFixed64(&out, XXH3_64bits(out.data(), out.size()));
  return out;
}

void CheckImported(CheckpointStore& store, const CheckpointInfo& info) {
  bool listed = false;
  for (const CheckpointInfo& other : store.List()) listed |= other.id == info.id;
  FUZZ_CHECK(listed, "an imported checkpoint is listed");
  kvindex::StatusOr<kvindex::storage::CheckpointImage> image = store.Load(info.id);
  FUZZ_CHECK(image.ok(), "an imported checkpoint loads and verifies");
  FUZZ_CHECK(image->digest == info.digest, "it loads with its listed digest");
  kvindex::index::KvIndex index;
  kvindex::consume::AgentTable agents;
  const kvindex::Status restored = kvindex::storage::RestoreCheckpoint(*image, &index, &agents);
  if (restored.ok()) {
    FUZZ_CHECK(index.Stats().digest == info.digest, "it restores to its digest");
  } else {
    // A verified image the index refuses (e.g. a model's block size of 0)
    // is refused whole.
    for (uint64_t n : index.Stats().entries) FUZZ_CHECK(n == 0, "a failed restore is empty");
  }
  kvindex::StatusOr<std::string> exported = store.Export(info.id);
  FUZZ_CHECK(exported.ok(), "an imported checkpoint exports");
  kvindex::StatusOr<CheckpointInfo> again = store.Import(*exported);
  FUZZ_CHECK(again.ok(), "its export imports again");
  FUZZ_CHECK(again->digest == info.digest && again->applied_seq == info.applied_seq &&
                 again->chunks == info.chunks && again->bytes == info.bytes,
             "the same checkpoint");
  kvindex::StatusOr<std::string> exported_again = store.Export(again->id);
  FUZZ_CHECK(exported_again.ok() && *exported_again == *exported, "export is a fixed point");
  // Keep the store small for the next input.
  FUZZ_CHECK(store.Prune(1).ok(), "prune");
}

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  if (size == 0 || size > (size_t{4} << 20)) return 0;
  const std::string_view rest(reinterpret_cast<const char*>(data + 1), size - 1);
  std::string exported;
  switch (data[0] % 3) {
    case 0:
      exported.assign(rest);
      break;
    case 1:
      exported = Wrap(rest);
      break;
    default: {
      std::string records;
      std::string_view in = rest;
      auto take = [&in](std::string_view* out) {
        if (in.size() < 4) return false;
        uint32_t n = 0;
        std::memcpy(&n, in.data(), 4);
        in.remove_prefix(4);
        *out = in.substr(0, std::min<size_t>(n, in.size()));
        in.remove_prefix(out->size());
        return true;
      };
      std::string_view key, value;
      while (take(&key) && take(&value)) {
        kvindex::bytes::PutString(&records, key);
        if (key == "m") {
          std::string manifest(value);
          kvindex::bytes::PutFixed64(&manifest, XXH3_64bits(value.data(), value.size()));
          kvindex::bytes::PutString(&records, manifest);
        } else {
          kvindex::bytes::PutString(&records, value);
        }
      }
      exported = Wrap(records);
      break;
    }
  }
  CheckpointStore& store = *TheStore().store;
  const size_t before = store.List().size();
  kvindex::StatusOr<CheckpointInfo> info = store.Import(exported);
  if (!info.ok()) {
    FUZZ_CHECK(absl::IsDataLoss(info.status()) || absl::IsInvalidArgument(info.status()) ||
                   absl::IsResourceExhausted(info.status()),
               "a refused import is DataLoss, InvalidArgument or ResourceExhausted");
    FUZZ_CHECK(store.List().size() == before, "a refused import leaves nothing behind");
    return 0;
  }
  CheckImported(store, *info);
  return 0;
}

// Seeds: a real checkpoint (checkpoint_sample.h) exported by a store, in
// each of the three shapes, and an empty checkpoint's export.
void kvindex::fuzz::WriteSeeds(const SeedWriter& write) {
  CheckpointStore& store = *TheStore().store;
  kvindex::StatusOr<CheckpointInfo> info = store.Write(SampleCheckpoint());
  FUZZ_CHECK(info.ok(), "sample written");
  kvindex::StatusOr<std::string> exported = store.Export(info->id);
  FUZZ_CHECK(exported.ok(), "sample exported");
  write("sample_export", std::string(1, '\0') + *exported);
  const std::string_view records =
      std::string_view(*exported).substr(kMagic.size(), exported->size() - kMagic.size() - 8);
  write("sample_records", std::string(1, '\1') + std::string(records));
  std::string pairs(1, '\2');
  kvindex::bytes::Reader in(records, "export");
  std::string key, value;
  while (!in.done()) {
    FUZZ_CHECK(in.String(&key, "key").ok() && in.String(&value, "value").ok(), "sample records");
    if (key == "m") value.resize(value.size() - 8);  // the harness adds the checksum
    for (const std::string* s : {&key, &value}) {
      const uint32_t n = static_cast<uint32_t>(s->size());
      pairs.append(reinterpret_cast<const char*>(&n), 4);
      pairs.append(*s);
    }
  }
  write("sample_pairs", pairs);
  kvindex::StatusOr<CheckpointInfo> empty = store.Write(kvindex::storage::CheckpointImage());
  FUZZ_CHECK(empty.ok(), "empty written");
  kvindex::StatusOr<std::string> empty_export = store.Export(empty->id);
  FUZZ_CHECK(empty_export.ok(), "empty exported");
  write("empty_export", std::string(1, '\0') + *empty_export);
}
