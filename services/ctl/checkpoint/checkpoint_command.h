// `kvindex-ctl checkpoint inspect`: what a router's checkpoints hold.
//
//   kvindex-ctl checkpoint inspect --data-dir DIR [--json] [--no-verify]
//
// Opens DIR/checkpoints (or DIR itself when it is the database) read-only,
// safe beside a running router, and prints per checkpoint, newest first:
// id, log position, models, entries per tier, digest, size, age, and
// whether it verifies (every chunk read and the digest recomputed; skipped
// with --no-verify). Exit 0 when the newest checkpoint verifies (or
// --no-verify), 1 when there is none or it does not, 2 on bad flags.
#pragma once

#include <ostream>
#include <string>

namespace kvindex::ctl {

struct CheckpointArgs {
  std::string data_dir;
  bool json = false;
  bool verify = true;
};

int RunCheckpointInspect(const CheckpointArgs& args, std::ostream& out, std::ostream& err);

// Entry point from kvindex-ctl's main: argv[0] == "checkpoint".
int RunCheckpointCommand(int argc, char** argv);

}  // namespace kvindex::ctl
