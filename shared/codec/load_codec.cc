#include "shared/codec/load_codec.h"

#include <cmath>

#include "shared/codec/msgpack_map.h"

#include "shared/nats/subjects.h"

namespace kvindex::codec {
namespace {

constexpr std::string_view kVersion = "v";
constexpr std::string_view kAgent = "agent";
constexpr std::string_view kTimestamp = "ts_ns";
constexpr std::string_view kSamples = "samples";
constexpr std::string_view kWorker = "worker";
constexpr std::string_view kDpRank = "dp_rank";
constexpr std::string_view kWaiting = "waiting";
constexpr std::string_view kRunning = "running";
constexpr std::string_view kKvUse = "kv_use";
constexpr std::string_view kHealthy = "healthy";

using internal::Packer;
using internal::PackString;
constexpr std::string_view kWhat = "load report";

Status FieldError(std::string_view field, std::string_view problem) {
  return internal::FieldError(kWhat, field, problem);
}

StatusOr<uint64_t> AsUint(const msgpack::object& object, std::string_view field) {
  return internal::AsUint(object, kWhat, field);
}

StatusOr<std::string_view> AsString(const msgpack::object& object, std::string_view field) {
  return internal::AsString(object, kWhat, field);
}

// A finite, non-negative number (integer or float).
StatusOr<double> AsGauge(const msgpack::object& object, std::string_view field) {
  double value = 0;
  if (object.type == msgpack::type::POSITIVE_INTEGER) {
    value = static_cast<double>(object.via.u64);
  } else if (object.type == msgpack::type::FLOAT32 || object.type == msgpack::type::FLOAT64) {
    value = object.via.f64;
  } else {
    return FieldError(field, "must be a number");
  }
  if (!std::isfinite(value) || value < 0) return FieldError(field, "must be finite and >= 0");
  return value;
}

StatusOr<SourceLoad> DecodeSample(const msgpack::object& object) {
  if (object.type != msgpack::type::MAP) return FieldError(kSamples, "must hold maps");
  SourceLoad sample;
  bool has_worker = false;
  KVINDEX_RETURN_IF_ERROR(
      internal::ForEachStringKey(object, [&](std::string_view key, const msgpack::object& value) {
        if (key == kWorker) {
          KVINDEX_ASSIGN_OR_RETURN(std::string_view worker, AsString(value, key));
          sample.source.worker = std::string(worker);
          has_worker = true;
        } else if (key == kDpRank) {
          KVINDEX_ASSIGN_OR_RETURN(uint64_t rank, AsUint(value, key));
          if (rank > UINT32_MAX) return FieldError(key, "does not fit 32 bits");
          sample.source.dp_rank = static_cast<uint32_t>(rank);
        } else if (key == kWaiting) {
          KVINDEX_ASSIGN_OR_RETURN(sample.load.waiting, AsGauge(value, key));
        } else if (key == kRunning) {
          KVINDEX_ASSIGN_OR_RETURN(sample.load.running, AsGauge(value, key));
        } else if (key == kKvUse) {
          KVINDEX_ASSIGN_OR_RETURN(sample.load.kv_use, AsGauge(value, key));
          if (sample.load.kv_use > 1) return FieldError(key, "must be within 0..1");
        } else if (key == kHealthy) {
          if (value.type != msgpack::type::BOOLEAN) return FieldError(key, "must be a boolean");
          sample.load.healthy = value.via.boolean;
        }
        return Status();
      }));
  if (!has_worker) return FieldError(kWorker, "is missing in a sample");
  return sample;
}

}  // namespace

void EncodeLoadReport(const LoadReport& report, std::string* out) {
  msgpack::sbuffer buffer(64 + report.samples.size() * 64);
  Packer packer(buffer);
  packer.pack_map(4);
  PackString(packer, kVersion);
  packer.pack_uint32(kLoadSchemaVersion);
  PackString(packer, kAgent);
  PackString(packer, report.agent);
  PackString(packer, kTimestamp);
  packer.pack_uint64(report.ts_ns);
  PackString(packer, kSamples);
  packer.pack_array(static_cast<uint32_t>(report.samples.size()));
  for (const SourceLoad& sample : report.samples) {
    const EngineLoad& load = sample.load;
    packer.pack_map(3 + (load.waiting >= 0) + (load.running >= 0) + (load.kv_use >= 0));
    PackString(packer, kWorker);
    PackString(packer, sample.source.worker);
    PackString(packer, kDpRank);
    packer.pack_uint32(sample.source.dp_rank);
    PackString(packer, kHealthy);
    if (load.healthy) {
      packer.pack_true();
    } else {
      packer.pack_false();
    }
    if (load.waiting >= 0) {
      PackString(packer, kWaiting);
      packer.pack_double(load.waiting);
    }
    if (load.running >= 0) {
      PackString(packer, kRunning);
      packer.pack_double(load.running);
    }
    if (load.kv_use >= 0) {
      PackString(packer, kKvUse);
      packer.pack_double(load.kv_use);
    }
  }
  out->assign(buffer.data(), buffer.size());
}

StatusOr<LoadReport> DecodeLoadReport(std::string_view bytes) {
  KVINDEX_ASSIGN_OR_RETURN(msgpack::object_handle handle,
                           internal::UnpackMap(bytes, kWhat, /*depth=*/8));
  const msgpack::object& root = handle.get();
  LoadReport report;
  bool has_version = false;
  const msgpack::object* samples = nullptr;
  KVINDEX_RETURN_IF_ERROR(
      internal::ForEachStringKey(root, [&](std::string_view key, const msgpack::object& value) {
        if (key == kVersion) {
          KVINDEX_ASSIGN_OR_RETURN(uint64_t version, AsUint(value, key));
          if (version == 0) return FieldError(key, "must be >= 1");
          has_version = true;
        } else if (key == kAgent) {
          KVINDEX_ASSIGN_OR_RETURN(std::string_view agent, AsString(value, key));
          report.agent = std::string(agent);
        } else if (key == kTimestamp) {
          KVINDEX_ASSIGN_OR_RETURN(report.ts_ns, AsUint(value, key));
        } else if (key == kSamples) {
          if (value.type != msgpack::type::ARRAY) return FieldError(key, "must be an array");
          if (value.via.array.size > kMaxLoadSamples)
            return FieldError(key, "holds too many samples");
          samples = &value;
        }
        return Status();
      }));
  if (!has_version) return FieldError(kVersion, "is missing");
  if (report.agent.empty()) return FieldError(kAgent, "is missing");
  if (samples == nullptr) return FieldError(kSamples, "is missing");
  report.samples.reserve(samples->via.array.size);
  for (uint32_t i = 0; i < samples->via.array.size; ++i) {
    KVINDEX_ASSIGN_OR_RETURN(SourceLoad sample, DecodeSample(samples->via.array.ptr[i]));
    report.samples.push_back(std::move(sample));
  }
  return report;
}

std::string LoadSubject(std::string_view prefix, std::string_view node) {
  return std::string(prefix) + "_load." + nats::EncodeToken(node);
}

std::string LoadSubjects(std::string_view prefix) { return std::string(prefix) + "_load.*"; }

}  // namespace kvindex::codec
