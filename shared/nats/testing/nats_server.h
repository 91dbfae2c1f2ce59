// Test-only: real nats-server processes with JetStream on loopback ports.
//
// NatsServerProcess runs one /usr/sbin/nats-server (override with the
// NATS_SERVER_BIN environment variable) with file storage in its own temp
// dir; NatsCluster runs three as one JetStream cluster. Every process is
// stopped by its pid in the destructor, also when a test fails, and the temp
// dirs are removed.
//
//   auto server = testing::NatsServerProcess::Start({});
//   ASSERT_TRUE(server.ok()) << server.status();
//   options.url = (*server)->url();
//   ...
//   (*server)->Kill();                       // SIGKILL
//   ASSERT_TRUE((*server)->Restart().ok());  // same port, same storage
//
//   auto cluster = testing::NatsCluster::Start();  // waits for a meta leader
//   options.url = (*cluster)->urls();
//
// Thread safety: none; drive each object from one thread.
#pragma once

#include <sys/types.h>

#include <chrono>
#include <memory>
#include <string>
#include <vector>

#include "shared/base/status.h"

namespace kvindex::nats::testing {

// A free TCP port on 127.0.0.1 (bound and released; a tiny race is accepted).
int FreePort();

struct NatsServerOptions {
  // Server name (-n); also the cluster member name. Default: "" (server picks).
  std::string name;
  // Extra nats-server config (auth, TLS) written to server.conf and passed
  // with -c; command-line ports and JetStream flags are added on top.
  // Default: "".
  std::string config;
  // Client port; 0 = a free one. Default: 0.
  int port = 0;
  // Cluster port (with cluster_name and routes); 0 = no clustering. Default: 0.
  int cluster_port = 0;
  std::string cluster_name = "kvindex";
  // Route ports of the other cluster members. Default: none.
  std::vector<int> route_ports;
  // Time to wait for the server to be ready. Default: 15s.
  std::chrono::milliseconds ready_timeout{15000};
};

class NatsServerProcess {
 public:
  // Starts the server and waits until it logs readiness and accepts TCP.
  static StatusOr<std::unique_ptr<NatsServerProcess>> Start(NatsServerOptions options);
  // Only reserves the temp dir and ports; Restart() starts it (for tests of
  // clients that come up before the server).
  static StatusOr<std::unique_ptr<NatsServerProcess>> Prepare(NatsServerOptions options);

  ~NatsServerProcess();
  NatsServerProcess(const NatsServerProcess&) = delete;
  NatsServerProcess& operator=(const NatsServerProcess&) = delete;

  // "nats://127.0.0.1:PORT".
  std::string url() const;
  int port() const { return options_.port; }
  // The temp dir holding server.conf, server.log and the JetStream store.
  const std::string& dir() const { return dir_; }
  bool running() const { return pid_ > 0; }
  // SIGTERM, then wait (SIGKILL after 10 s).
  Status Stop();
  // SIGKILL and reap.
  void Kill();
  // Starts again (after Stop/Kill or Prepare) on the same ports and storage.
  Status Restart();
  // Rewrites server.conf with `config` (the server must have been started
  // with a config) and makes the running server reload it (SIGHUP, as
  // `nats-server --signal reload`); waits until the server logged the reload.
  Status Reload(const std::string& config);

 private:
  friend class NatsCluster;
  explicit NatsServerProcess(NatsServerOptions options) : options_(std::move(options)) {}
  Status Spawn();
  Status WaitReady();

  NatsServerOptions options_;
  std::string dir_;
  pid_t pid_ = -1;
};

class NatsCluster {
 public:
  // Starts three servers n0..n2 as one JetStream cluster and waits (up to
  // `timeout`) until a replicas-3 stream can be created, i.e. the cluster has
  // a JetStream meta leader and all peers.
  static StatusOr<std::unique_ptr<NatsCluster>> Start(
      std::chrono::milliseconds timeout = std::chrono::seconds(45));

  // The three client URLs, comma-joined.
  std::string urls() const;
  NatsServerProcess& server(int i) { return *servers_[i]; }
  void Kill(int i) { servers_[i]->Kill(); }
  Status Restart(int i) { return servers_[i]->Restart(); }

 private:
  std::vector<std::unique_ptr<NatsServerProcess>> servers_;
};

}  // namespace kvindex::nats::testing
