// Input files of `kvindex-ctl decode`: raw payloads or ZMQ frame captures.
//
// Raw (default): the whole file is one msgpack KVEventBatch payload (the
// third ZMQ frame), e.g. data/wire-vectors/*.msgpack.
//
// Frames (--frames): a capture of ZMQ messages as the engine sent them. The
// file is a sequence of frames, each a 4-byte big-endian length followed by
// that many bytes; every 3 consecutive frames form one message
// [topic, seq (8 bytes, big-endian), payload] (docs/wire-format.md section 1).
// An empty file holds no messages. docs/wire-format.md documents the format.
//
// Errors name the byte offset inside the file.
#pragma once

#include <cstdint>
#include <optional>
#include <span>
#include <string>
#include <string_view>
#include <vector>

#include "shared/base/status.h"

namespace kvindex::ctl {

struct CapturedBatch {
  std::span<const uint8_t> payload;  // view into the file contents
  size_t file_offset = 0;            // where the payload starts in the file
  std::optional<uint64_t> seq;       // frames only
  std::optional<std::string_view> topic;
};

// Reads a whole file. NotFound / Unavailable-style errors name the path.
StatusOr<std::vector<uint8_t>> ReadFileBytes(const std::string& path);

// Splits a --frames capture into messages. InvalidArgument("byte N: ...")
// when a frame is truncated, the seq frame is not 8 bytes, or the last
// message is incomplete.
StatusOr<std::vector<CapturedBatch>> SplitFrames(std::span<const uint8_t> contents);

// Appends one frame (length prefix + bytes) to a capture (tests, tools).
void AppendFrame(std::span<const uint8_t> frame, std::vector<uint8_t>* capture);

}  // namespace kvindex::ctl
