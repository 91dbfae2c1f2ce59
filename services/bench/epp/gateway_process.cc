#include "services/bench/epp/gateway_process.h"

#include <sys/wait.h>
#include <unistd.h>

#include <cerrno>
#include <cstring>

#include "absl/synchronization/mutex.h"

namespace kvindex::bench {
namespace {

struct Command {
  int32_t port = 0;  // 0: exit
  uint32_t size_index = 0;
  uint32_t streams = 0;
  double seconds = 0;
};

struct Reply {
  uint64_t picks = 0;
  uint64_t errors = 0;
  double wall_s = 0;
  double cpu_s = 0;
};

bool WriteAll(int fd, const void* data, size_t n) {
  const char* p = static_cast<const char*>(data);
  while (n > 0) {
    const ssize_t w = ::write(fd, p, n);
    if (w < 0 && errno == EINTR) continue;
    if (w <= 0) return false;
    p += w;
    n -= static_cast<size_t>(w);
  }
  return true;
}

bool ReadAll(int fd, void* data, size_t n) {
  char* p = static_cast<char*>(data);
  while (n > 0) {
    const ssize_t r = ::read(fd, p, n);
    if (r < 0 && errno == EINTR) continue;
    if (r <= 0) return false;
    p += r;
    n -= static_cast<size_t>(r);
  }
  return true;
}

// The child: one cell per command until told to exit or the pipe closes.
[[noreturn]] void ServeCommands(const std::vector<SizeRequests>& sizes, const std::string& client,
                                uint32_t channel_count, int in, int out) {
  // As in the picker (EppServer::Start): gRPC's absl mutexes without
  // Debian's deadlock detection; a gateway (Envoy) does not pay for it.
  absl::SetMutexDeadlockDetectionMode(absl::OnDeadlockCycle::kIgnore);
  std::vector<std::shared_ptr<grpc::Channel>> channels;
  int channels_port = 0;
  Command command;
  while (ReadAll(in, &command, sizeof(command)) && command.port != 0) {
    if (channels_port != command.port) {
      channels = PickChannels(command.port, channel_count);
      channels_port = command.port;
    }
    const SizeRequests& size = sizes.at(command.size_index);
    PickSample s =
        RunPicks(client, channels, size.bodies, size.requests, command.streams, command.seconds);
    Reply reply{
        .picks = s.latency_s.size(), .errors = s.errors, .wall_s = s.wall_s, .cpu_s = s.cpu_s};
    if (!WriteAll(out, &reply, sizeof(reply)) ||
        !WriteAll(out, s.latency_s.data(), s.latency_s.size() * sizeof(double)) ||
        !WriteAll(out, s.stream_s.data(), s.stream_s.size() * sizeof(double))) {
      break;
    }
  }
  // No destructors, no atexit handlers: the parent's state (its files, its
  // index) is not this process's to clean up.
  ::_exit(0);
}

}  // namespace

StatusOr<std::unique_ptr<GatewayProcess>> GatewayProcess::Fork(
    const std::vector<SizeRequests>* sizes, std::string client, uint32_t channels) {
  int down[2], up[2];
  if (::pipe(down) != 0) return absl::InternalError(std::string("pipe: ") + std::strerror(errno));
  if (::pipe(up) != 0) {
    ::close(down[0]);
    ::close(down[1]);
    return absl::InternalError(std::string("pipe: ") + std::strerror(errno));
  }
  const pid_t pid = ::fork();
  if (pid < 0) return absl::InternalError(std::string("fork: ") + std::strerror(errno));
  if (pid == 0) {
    ::close(down[1]);
    ::close(up[0]);
    ServeCommands(*sizes, client, channels, down[0], up[1]);
  }
  ::close(down[0]);
  ::close(up[1]);
  return std::unique_ptr<GatewayProcess>(new GatewayProcess(pid, down[1], up[0]));
}

GatewayProcess::~GatewayProcess() {
  Command quit;  // port 0
  WriteAll(to_child_, &quit, sizeof(quit));
  ::close(to_child_);
  ::close(from_child_);
  int status = 0;
  while (::waitpid(pid_, &status, 0) < 0 && errno == EINTR) {
  }
}

StatusOr<PickSample> GatewayProcess::Run(int port, uint32_t size_index, uint32_t streams,
                                         double seconds) {
  Command command{.port = port, .size_index = size_index, .streams = streams, .seconds = seconds};
  Reply reply;
  if (!WriteAll(to_child_, &command, sizeof(command)) ||
      !ReadAll(from_child_, &reply, sizeof(reply))) {
    return absl::InternalError("the gateway process is gone");
  }
  PickSample s;
  s.errors = reply.errors;
  s.wall_s = reply.wall_s;
  s.cpu_s = reply.cpu_s;
  s.latency_s.resize(reply.picks);
  s.stream_s.resize(reply.picks);
  if (!ReadAll(from_child_, s.latency_s.data(), reply.picks * sizeof(double)) ||
      !ReadAll(from_child_, s.stream_s.data(), reply.picks * sizeof(double))) {
    return absl::InternalError("the gateway process is gone");
  }
  return s;
}

}  // namespace kvindex::bench
