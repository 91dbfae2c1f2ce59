// `kvindex-bench restart`: how fast a router is back from its checkpoint,
// next to rebuilding the same state by replaying its events, in one run.
//
// The state is the peer workload's final state (docs/benchmarks.md, "Peer
// workload": ~10 M entries with the full trace). Measured:
//   replay_to_ready_s   the stream published into a real nats-server by the
//                       agent's JetStreamPublisher; a Router (the product's,
//                       in this process) started on an empty --data-dir,
//                       from Start to Ready (every message read and applied)
//   restart_to_ready_s  the same Router stopped (it writes its shutdown
//                       checkpoint) and started again on that --data-dir:
//                       restore + an empty tail, from Start to Ready
//   inprocess_*         the index alone: restore from the database, and
//                       rebuilding by decode + apply or apply only
//   checkpoint_write_s  capture + write of one checkpoint (RocksDB, this disk)
//   capture_s           the part of it that pauses apply (also
//                       checkpoint_pause_s)
//   checkpoint_peak_extra_bytes(_per_entry)  the resident set's peak during
//                       the checkpoint above the resident set before it
//   disk_bytes_per_entry  the database's files / entries
//   lookup_p99_*_us     peer queries on one thread, without and during a
//                       checkpoint (capture + write) on another
// --copies / --capacity scale the state (40 M: 16 / 625000);
// --checkpoint-only skips the replay baselines and the routers.
// The state restored is checked: same digest and entries.
#pragma once

namespace kvindex::bench {

int RunRestartBench(int argc, char** argv);

}  // namespace kvindex::bench
