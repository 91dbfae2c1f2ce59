#include "services/bench/epp/pick_run.h"

#include <grpcpp/create_channel.h>
#include <grpcpp/security/credentials.h>
#include <sys/resource.h>

#include <atomic>
#include <chrono>
#include <thread>

#include "services/bench/epp/pick_client.h"

namespace kvindex::bench {
namespace {

using Clock = std::chrono::steady_clock;

}  // namespace

std::vector<std::shared_ptr<grpc::Channel>> PickChannels(int port, uint32_t n) {
  std::vector<std::shared_ptr<grpc::Channel>> channels;
  for (uint32_t c = 0; c < n; ++c) {
    grpc::ChannelArguments args;
    args.SetInt("kvindex.bench.channel", static_cast<int>(c));  // a connection each
    args.SetMaxReceiveMessageSize(64 << 20);
    channels.push_back(grpc::CreateCustomChannel("127.0.0.1:" + std::to_string(port),
                                                 grpc::InsecureChannelCredentials(), args));
  }
  return channels;
}

double ProcessCpuSeconds() {
  rusage usage{};
  ::getrusage(RUSAGE_SELF, &usage);
  auto seconds = [](const timeval& t) { return static_cast<double>(t.tv_sec) + t.tv_usec * 1e-6; };
  return seconds(usage.ru_utime) + seconds(usage.ru_stime);
}

PickSample RunPicks(const std::string& client,
                    const std::vector<std::shared_ptr<grpc::Channel>>& channels,
                    const std::vector<std::string>& bodies,
                    const std::vector<PickRequests>& requests, uint32_t streams, double seconds) {
  PickSample s;
  const double cpu_before = ProcessCpuSeconds();
  const auto start = Clock::now();
  if (client == "threads") {
    std::vector<PickSample> per(streams);
    std::atomic<bool> stop{false};
    std::vector<std::thread> pool;
    for (uint32_t t = 0; t < streams; ++t) {
      pool.emplace_back([&, t] {
        PickClient pick_client(channels[t % channels.size()]);
        for (size_t i = t; !stop.load(std::memory_order_relaxed); ++i) {
          auto pick = pick_client.Pick(bodies[i % bodies.size()]);
          if (!pick.ok()) {
            ++per[t].errors;
            continue;
          }
          per[t].latency_s.push_back(pick->latency_s);
          per[t].stream_s.push_back(pick->stream_s);
        }
      });
    }
    std::this_thread::sleep_for(std::chrono::duration<double>(seconds));
    stop.store(true);
    for (auto& thread : pool) thread.join();
    for (PickSample& p : per) {
      s.latency_s.insert(s.latency_s.end(), p.latency_s.begin(), p.latency_s.end());
      s.stream_s.insert(s.stream_s.end(), p.stream_s.begin(), p.stream_s.end());
      s.errors += p.errors;
    }
  } else {
    PickLoop loop(channels, &requests, streams);
    std::this_thread::sleep_for(std::chrono::duration<double>(seconds));
    PickLoop::Result r = loop.Stop();
    s.latency_s = std::move(r.latency_s);
    s.stream_s = std::move(r.stream_s);
    s.errors = r.errors;
  }
  s.wall_s = std::chrono::duration<double>(Clock::now() - start).count();
  s.cpu_s = ProcessCpuSeconds() - cpu_before;
  return s;
}

}  // namespace kvindex::bench
