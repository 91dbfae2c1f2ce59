// Helpers shared by the msgpack codecs of this folder (placement batches,
// load reports): bounded unpacking of a top-level map, the walk over a
// map's string keys, strings, and typed field reads whose errors name the
// message kind and the field.
#pragma once

#include <cstdint>
#include <msgpack.hpp>
#include <string>
#include <string_view>

#include "shared/base/status.h"

namespace kvindex::codec::internal {

using Packer = msgpack::packer<msgpack::sbuffer>;

inline void PackString(Packer& packer, std::string_view value) {
  packer.pack_str(static_cast<uint32_t>(value.size()));
  packer.pack_str_body(value.data(), static_cast<uint32_t>(value.size()));
}

// InvalidArgument "<what>: field '<field>' <problem>".
inline Status FieldError(std::string_view what, std::string_view field, std::string_view problem) {
  return absl::InvalidArgumentError(std::string(what) + ": field '" + std::string(field) + "' " +
                                    std::string(problem));
}

inline StatusOr<uint64_t> AsUint(const msgpack::object& object, std::string_view what,
                                 std::string_view field) {
  if (object.type != msgpack::type::POSITIVE_INTEGER) {
    return FieldError(what, field, "must be an unsigned integer");
  }
  return object.via.u64;
}

inline StatusOr<std::string_view> AsString(const msgpack::object& object, std::string_view what,
                                           std::string_view field) {
  if (object.type != msgpack::type::STR) return FieldError(what, field, "must be a string");
  return std::string_view(object.via.str.ptr, object.via.str.size);
}

// Calls fn(key, value) -> Status for each entry of `map` (a msgpack MAP)
// whose key is a string, in order, and stops at fn's first error; entries
// with other keys are skipped (forward compatibility, like unknown names).
template <typename Fn>
Status ForEachStringKey(const msgpack::object& map, const Fn& fn) {
  for (uint32_t i = 0; i < map.via.map.size; ++i) {
    const msgpack::object_kv& kv = map.via.map.ptr[i];
    if (kv.key.type != msgpack::type::STR) continue;
    KVINDEX_RETURN_IF_ERROR(fn(std::string_view(kv.key.via.str.ptr, kv.key.via.str.size), kv.val));
  }
  return absl::OkStatus();
}

// Unpacks `bytes`, which must be exactly one msgpack map, nested at most
// `depth` deep. Every element takes at least one byte, so no honest
// container is longer than the message: the limits keep a corrupt length
// header from reserving up to 2^32 elements (64 GiB) up front.
inline StatusOr<msgpack::object_handle> UnpackMap(std::string_view bytes, std::string_view what,
                                                  uint32_t depth) {
  msgpack::object_handle handle;
  try {
    std::size_t offset = 0;
    const size_t n = bytes.size();
    const msgpack::unpack_limit limits(/*array=*/n, /*map=*/n / 2, /*str=*/n, /*bin=*/n,
                                       /*ext=*/n, depth);
    handle = msgpack::unpack(bytes.data(), bytes.size(), offset, nullptr, nullptr, limits);
    if (offset != bytes.size()) {
      return absl::InvalidArgumentError(std::string(what) + ": trailing bytes at offset " +
                                        std::to_string(offset));
    }
  } catch (const std::exception& e) {
    return absl::InvalidArgumentError(std::string(what) + ": not msgpack: " + e.what());
  }
  if (handle.get().type != msgpack::type::MAP) {
    return absl::InvalidArgumentError(std::string(what) + ": top level must be a map");
  }
  return handle;
}

}  // namespace kvindex::codec::internal
