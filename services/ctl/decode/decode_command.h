// `kvindex-ctl decode`: decode engine KV-event payloads and show how the
// agent would normalize them (docs/wire-format.md sections 7-8).
//
//   kvindex-ctl decode --engine vllm|sglang|trtllm [--block-size N] [--frames]
//                      [--model M] [--worker W] [--dp-rank R] [--stats] FILE...
//
// The files are consecutive batches of one source, in order (parent chains
// and placeholders resolve across files). Each FILE is one raw msgpack
// KVEventBatch payload, or with --frames a capture of ZMQ messages
// (capture_file.h). One JSON object per decoded engine event goes to stdout
// (event_json.h). Exit 0 even when events are dropped; exit 1 when a file
// cannot be read or does not decode (one line on stderr naming the file and
// the byte offset); exit 2 on bad flags.
#pragma once

#include <cstdint>
#include <ostream>
#include <string>
#include <vector>

namespace kvindex::ctl {

struct DecodeArgs {
  std::string engine = "vllm";    // vllm, sglang, trtllm
  uint32_t block_size = 16;       // the model's tokens per block
  bool frames = false;            // FILEs are ZMQ frame captures
  std::string model = "model";    // stamped on placement events
  std::string worker = "worker";  // source worker id
  uint32_t dp_rank = 0;           // configured rank (the envelope's wins)
  int64_t group_idx = 0;          // indexed KV-cache group
  std::string spec_kind = "full_attention";
  bool stats = false;  // print the source counters to stderr at the end
  std::vector<std::string> files;
};

// Runs the command on parsed arguments (tests call this directly).
int RunDecode(const DecodeArgs& args, std::ostream& out, std::ostream& err);

// Entry point from kvindex-ctl's main: argv[0] == "decode".
int RunDecodeCommand(int argc, char** argv);

}  // namespace kvindex::ctl
