#include "services/ctl/decode/capture_file.h"

#include <cerrno>
#include <cstdio>
#include <cstring>
#include <memory>

namespace kvindex::ctl {

StatusOr<std::vector<uint8_t>> ReadFileBytes(const std::string& path) {
  std::unique_ptr<FILE, int (*)(FILE*)> file(std::fopen(path.c_str(), "rb"), &std::fclose);
  if (file == nullptr) {
    return absl::NotFoundError("cannot open " + path + ": " + std::strerror(errno));
  }
  std::vector<uint8_t> bytes;
  uint8_t buffer[1 << 16];
  size_t n;
  while ((n = std::fread(buffer, 1, sizeof(buffer), file.get())) > 0) {
    bytes.insert(bytes.end(), buffer, buffer + n);
  }
  if (std::ferror(file.get())) return absl::DataLossError("cannot read " + path);
  return bytes;
}

StatusOr<std::vector<CapturedBatch>> SplitFrames(std::span<const uint8_t> contents) {
  std::vector<CapturedBatch> batches;
  size_t pos = 0;
  std::span<const uint8_t> frames[3];
  size_t frame_start[3] = {0, 0, 0};
  int in_message = 0;
  while (pos < contents.size()) {
    const size_t header = pos;
    if (contents.size() - pos < 4) {
      return absl::InvalidArgumentError("byte " + std::to_string(header) +
                                        ": truncated frame length");
    }
    const uint32_t length = (uint32_t{contents[pos]} << 24) | (uint32_t{contents[pos + 1]} << 16) |
                            (uint32_t{contents[pos + 2]} << 8) | contents[pos + 3];
    pos += 4;
    if (contents.size() - pos < length) {
      return absl::InvalidArgumentError("byte " + std::to_string(header) + ": frame of " +
                                        std::to_string(length) + " bytes is truncated");
    }
    frames[in_message] = contents.subspan(pos, length);
    frame_start[in_message] = pos;
    pos += length;
    if (in_message == 1 && length != 8) {
      return absl::InvalidArgumentError("byte " + std::to_string(header) +
                                        ": seq frame must be 8 bytes, got " +
                                        std::to_string(length));
    }
    if (++in_message < 3) continue;
    in_message = 0;
    CapturedBatch batch;
    batch.payload = frames[2];
    batch.file_offset = frame_start[2];
    uint64_t seq = 0;
    for (uint8_t byte : frames[1]) seq = (seq << 8) | byte;
    batch.seq = seq;
    std::string_view topic(reinterpret_cast<const char*>(frames[0].data()), frames[0].size());
    // SGLang snapshot mode appends "\0sgl-kv-epoch=<epoch>": the topic ends at the first NUL.
    batch.topic = topic.substr(0, topic.find('\0'));
    batches.push_back(batch);
  }
  if (in_message != 0) {
    return absl::InvalidArgumentError("byte " + std::to_string(contents.size()) +
                                      ": capture ends inside a message (" +
                                      std::to_string(in_message) + " of 3 frames)");
  }
  return batches;
}

void AppendFrame(std::span<const uint8_t> frame, std::vector<uint8_t>* capture) {
  const uint32_t length = static_cast<uint32_t>(frame.size());
  for (int shift = 24; shift >= 0; shift -= 8) {
    capture->push_back(static_cast<uint8_t>(length >> shift));
  }
  capture->insert(capture->end(), frame.begin(), frame.end());
}

}  // namespace kvindex::ctl
