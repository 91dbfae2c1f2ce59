// kvindex-ctl: the operator CLI (interfaces.md). Each command answers --help.

#include "shared/config/subcommands.h"

#if KVINDEX_CTL_HAVE_DECODE
#include "services/ctl/decode/decode_command.h"
#endif
#if KVINDEX_CTL_HAVE_CLIENT
#include "services/ctl/client/client_commands.h"
#endif
#if KVINDEX_CTL_HAVE_CHECKPOINT
#include "services/ctl/checkpoint/checkpoint_command.h"
#endif
#if KVINDEX_CTL_HAVE_TOKENIZE
#include "services/ctl/tokenize/tokenize_command.h"
#endif

namespace {

constexpr kvindex::config::Subcommand kCommands[] = {
#if KVINDEX_CTL_HAVE_DECODE
    {"decode", "decode raw engine msgpack batches and show how they normalize",
     kvindex::ctl::RunDecodeCommand},
#endif
#if KVINDEX_CTL_HAVE_CLIENT
    {"match", "ask a router which workers hold a token prefix", kvindex::ctl::RunClientCommand},
    {"state", "show a router's applied sequence, digest and entry counts",
     kvindex::ctl::RunClientCommand},
    {"workers", "list the sources a router knows", kvindex::ctl::RunClientCommand},
#endif
#if KVINDEX_CTL_HAVE_CHECKPOINT
    {"checkpoint", "inspect a RocksDB checkpoint (checkpoint inspect DIR)",
     kvindex::ctl::RunCheckpointCommand},
#endif
#if KVINDEX_CTL_HAVE_TOKENIZE
    {"tokenize", "print the token ids of a text for a model's tokenizer.json",
     kvindex::ctl::RunTokenizeCommand},
#endif
};

}  // namespace

int main(int argc, char** argv) {
  return kvindex::config::DispatchSubcommand("kvindex-ctl", "operator CLI for kvindex", kCommands,
                                             argc, argv);
}
