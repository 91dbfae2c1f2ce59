// `kvindex-bench restart`: how fast a router is back from its checkpoint,
// next to rebuilding the same state by replaying its events, in one run.
//
// The state is the peer workload's final state (docs/benchmarks.md, "Peer
// workload": ~10 M entries with the full trace). Measured:
//   replay_to_ready_s   every event of the stream applied to an empty index
//                       (in-process: a lower bound for a real replay, which
//                       also decodes and reads a log)
//   checkpoint_write_s  capture + write of one checkpoint (RocksDB, this disk)
//   capture_s           the part of it that pauses apply
//   restart_to_ready_s  open the database + load + verify + restore into an
//                       empty index (what a restarting router does before it
//                       replays the log's tail)
//   disk_bytes_per_entry  the database's files / entries
//   lookup_p99_*_us     peer queries on one thread, without and during a
//                       checkpoint (capture + write) on another
// The state restored is checked: same digest and entries.
#pragma once

namespace kvindex::bench {

int RunRestartBench(int argc, char** argv);

}  // namespace kvindex::bench
