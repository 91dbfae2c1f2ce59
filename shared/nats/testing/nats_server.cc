#include "shared/nats/testing/nats_server.h"

#include <arpa/inet.h>
#include <netinet/in.h>
#include <signal.h>
#include <spawn.h>
#include <sys/socket.h>
#include <sys/wait.h>
#include <unistd.h>

#include <cstdlib>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <sstream>
#include <thread>

#include "absl/strings/str_join.h"
#include "shared/base/strings.h"
#include "shared/nats/connection.h"
#include "shared/nats/stream.h"

extern char** environ;

namespace kvindex::nats::testing {
namespace {

using std::chrono::milliseconds;
using std::chrono::steady_clock;

std::string ServerBinary() {
  const char* env = std::getenv("NATS_SERVER_BIN");
  return env != nullptr && *env != '\0' ? env : "/usr/sbin/nats-server";
}

bool AcceptsTcp(int port) {
  const int fd = socket(AF_INET, SOCK_STREAM, 0);
  if (fd < 0) return false;
  sockaddr_in address{};
  address.sin_family = AF_INET;
  address.sin_port = htons(static_cast<uint16_t>(port));
  address.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
  const bool ok = connect(fd, reinterpret_cast<sockaddr*>(&address), sizeof(address)) == 0;
  close(fd);
  return ok;
}

std::string ReadFile(const std::string& path) {
  std::ifstream file(path);
  std::stringstream text;
  text << file.rdbuf();
  return text.str();
}

// Reaps `pid` within `timeout`; true when it exited.
bool WaitExit(pid_t pid, milliseconds timeout) {
  const auto deadline = steady_clock::now() + timeout;
  while (true) {
    int status = 0;
    const pid_t r = waitpid(pid, &status, WNOHANG);
    if (r == pid || r < 0) return true;
    if (steady_clock::now() > deadline) return false;
    std::this_thread::sleep_for(milliseconds(10));
  }
}

}  // namespace

int FreePort() {
  const int fd = socket(AF_INET, SOCK_STREAM, 0);
  sockaddr_in address{};
  address.sin_family = AF_INET;
  address.sin_port = 0;
  address.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
  socklen_t length = sizeof(address);
  int port = 0;
  if (bind(fd, reinterpret_cast<sockaddr*>(&address), sizeof(address)) == 0 &&
      getsockname(fd, reinterpret_cast<sockaddr*>(&address), &length) == 0) {
    port = ntohs(address.sin_port);
  }
  close(fd);
  return port;
}

StatusOr<std::unique_ptr<NatsServerProcess>> NatsServerProcess::Prepare(NatsServerOptions options) {
  if (options.port == 0) options.port = FreePort();
  std::unique_ptr<NatsServerProcess> server(new NatsServerProcess(std::move(options)));
  char pattern[] = "/tmp/kvindex-nats-XXXXXX";
  if (mkdtemp(pattern) == nullptr) return absl::InternalError("mkdtemp failed");
  server->dir_ = pattern;
  if (!server->options_.config.empty()) {
    std::ofstream(server->dir_ + "/server.conf") << server->options_.config << "\n";
  }
  return server;
}

StatusOr<std::unique_ptr<NatsServerProcess>> NatsServerProcess::Start(NatsServerOptions options) {
  KVINDEX_ASSIGN_OR_RETURN(auto server, Prepare(std::move(options)));
  KVINDEX_RETURN_IF_ERROR(server->Restart());
  return server;
}

NatsServerProcess::~NatsServerProcess() {
  Kill();
  if (!dir_.empty()) {
    std::error_code ignored;
    std::filesystem::remove_all(dir_, ignored);
  }
}

std::string NatsServerProcess::url() const {
  return strings::Cat("nats://127.0.0.1:", options_.port);
}

Status NatsServerProcess::Spawn() {
  std::vector<std::string> args = {
      ServerBinary(), "-a",  "127.0.0.1",  "-p", std::to_string(options_.port),
      "-js",          "-sd", dir_ + "/js", "-l", dir_ + "/server.log"};
  if (!options_.config.empty()) {
    args.push_back("-c");
    args.push_back(dir_ + "/server.conf");
  }
  if (!options_.name.empty()) {
    args.push_back("-n");
    args.push_back(options_.name);
  }
  if (options_.cluster_port != 0) {
    args.push_back("--cluster_name");
    args.push_back(options_.cluster_name);
    args.push_back("--cluster");
    args.push_back(strings::Cat("nats://127.0.0.1:", options_.cluster_port));
    std::vector<std::string> routes;
    for (int port : options_.route_ports) routes.push_back(strings::Cat("nats://127.0.0.1:", port));
    if (!routes.empty()) {
      args.push_back("--routes");
      args.push_back(absl::StrJoin(routes, ","));
    }
  }
  std::vector<char*> argv;
  for (std::string& arg : args) argv.push_back(arg.data());
  argv.push_back(nullptr);
  // A fresh log per start, so readiness is judged on this run only.
  std::error_code ignored;
  std::filesystem::remove(dir_ + "/server.log", ignored);
  pid_t pid = -1;
  const int rc = posix_spawn(&pid, argv[0], nullptr, nullptr, argv.data(), environ);
  if (rc != 0) {
    return absl::FailedPreconditionError(
        strings::Cat("cannot start ", argv[0], ": ", std::strerror(rc)));
  }
  pid_ = pid;
  return absl::OkStatus();
}

Status NatsServerProcess::WaitReady() {
  const auto deadline = steady_clock::now() + options_.ready_timeout;
  while (steady_clock::now() < deadline) {
    int status = 0;
    if (waitpid(pid_, &status, WNOHANG) == pid_) {
      pid_ = -1;
      return absl::FailedPreconditionError(
          strings::Cat("nats-server exited during start; log:\n", ReadFile(dir_ + "/server.log")));
    }
    if (ReadFile(dir_ + "/server.log").find("Server is ready") != std::string::npos &&
        AcceptsTcp(options_.port)) {
      return absl::OkStatus();
    }
    std::this_thread::sleep_for(milliseconds(20));
  }
  return absl::DeadlineExceededError(strings::Cat("nats-server not ready on port ", options_.port,
                                                  "; log:\n", ReadFile(dir_ + "/server.log")));
}

Status NatsServerProcess::Stop() {
  if (pid_ <= 0) return absl::OkStatus();
  kill(pid_, SIGTERM);
  if (!WaitExit(pid_, milliseconds(10000))) {
    kill(pid_, SIGKILL);
    WaitExit(pid_, milliseconds(10000));
  }
  pid_ = -1;
  return absl::OkStatus();
}

void NatsServerProcess::Kill() {
  if (pid_ <= 0) return;
  kill(pid_, SIGKILL);
  WaitExit(pid_, milliseconds(10000));
  pid_ = -1;
}

Status NatsServerProcess::Restart() {
  Kill();
  KVINDEX_RETURN_IF_ERROR(Spawn());
  Status ready = WaitReady();
  if (!ready.ok()) Kill();
  return ready;
}

Status NatsServerProcess::Reload(const std::string& config) {
  if (pid_ <= 0 || options_.config.empty()) {
    return absl::FailedPreconditionError("reload: the server runs without a config file");
  }
  constexpr std::string_view kReloaded = "Reloaded server configuration";
  auto count = [this, kReloaded] {
    const std::string log = ReadFile(dir_ + "/server.log");
    size_t n = 0;
    for (size_t at = log.find(kReloaded); at != std::string::npos;
         at = log.find(kReloaded, at + 1)) {
      ++n;
    }
    return n;
  };
  const size_t before = count();
  options_.config = config;
  std::ofstream(dir_ + "/server.conf") << config << "\n";
  kill(pid_, SIGHUP);
  const auto deadline = steady_clock::now() + milliseconds(10000);
  while (steady_clock::now() < deadline) {
    if (count() > before) return absl::OkStatus();
    std::this_thread::sleep_for(milliseconds(20));
  }
  return absl::DeadlineExceededError(
      strings::Cat("nats-server did not reload; log:\n", ReadFile(dir_ + "/server.log")));
}

StatusOr<std::unique_ptr<NatsCluster>> NatsCluster::Start(std::chrono::milliseconds timeout) {
  auto cluster = std::unique_ptr<NatsCluster>(new NatsCluster());
  std::vector<int> cluster_ports;
  for (int i = 0; i < 3; ++i) cluster_ports.push_back(FreePort());
  for (int i = 0; i < 3; ++i) {
    NatsServerOptions options;
    options.name = strings::Cat("n", i);
    options.cluster_port = cluster_ports[i];
    for (int j = 0; j < 3; ++j) {
      if (j != i) options.route_ports.push_back(cluster_ports[j]);
    }
    KVINDEX_ASSIGN_OR_RETURN(auto server, NatsServerProcess::Prepare(std::move(options)));
    cluster->servers_.push_back(std::move(server));
  }
  // Start all three before waiting: a clustered server is only "ready" once
  // it runs, and JetStream needs a quorum of peers.
  for (auto& server : cluster->servers_) KVINDEX_RETURN_IF_ERROR(server->Spawn());
  for (auto& server : cluster->servers_) KVINDEX_RETURN_IF_ERROR(server->WaitReady());

  NatsOptions options;
  options.url = cluster->urls();
  auto connection = Connection::Connect(options, nullptr, "test", {}, false);
  if (!connection.ok()) {
    return Status(connection.status().code(),
                  strings::Cat(connection.status().message(), "; log of n0:\n",
                               ReadFile(cluster->servers_[0]->dir() + "/server.log")));
  }
  StreamOptions probe;
  probe.name = "KVINDEX_CLUSTER_PROBE";
  probe.subjects.prefix = "kvindex.probe";
  probe.replicas = 3;
  probe.memory_storage = true;
  const auto deadline = steady_clock::now() + timeout;
  Status status;
  while (steady_clock::now() < deadline) {
    status = EnsureStream((*connection)->jetstream(), probe);
    if (status.ok()) {
      jsErrCode code = static_cast<jsErrCode>(0);
      js_DeleteStream((*connection)->jetstream(), probe.name.c_str(), nullptr, &code);
      return cluster;
    }
    std::this_thread::sleep_for(milliseconds(250));
  }
  return absl::DeadlineExceededError(
      strings::Cat("JetStream cluster not ready: ", status.ToString()));
}

std::string NatsCluster::urls() const {
  std::vector<std::string> urls;
  for (const auto& server : servers_) urls.push_back(server->url());
  return absl::StrJoin(urls, ",");
}

}  // namespace kvindex::nats::testing
