// ResyncListener: the agent's ear on its control subject
// (<prefix>._expire.<node>), where routers append expiry decisions and
// resync requests about this agent. Any new message there means routers may
// hold less than the agent's truth, so the agent republishes snapshots of
// its sources. It reads through an ordered JetStream consumer that starts
// with new messages only and resumes after the last one it saw when the
// connection comes back, so a request appended while the agent was cut off
// still reaches it.
//
//   ResyncListener listener(connection->jetstream(), "KVINDEX", subjects.Expire(node),
//                           [&] { pipeline.RequestSnapshots(true, {}); });
//   KVINDEX_RETURN_IF_ERROR(listener.Start());
//
// Lifetime: the callback runs on a NATS client thread. Stop unsubscribes and
// returns only once the subscription completed (natsSubscription_SetOnCompleteCB:
// no message callback runs or can start any more), so `on_request` and the
// listener may be destroyed right after, whether or not the connection is
// still open.
//
// Thread safety: Start/Stop from one controlling thread; the callback runs on
// a NATS client thread.
#pragma once

#include <nats/nats.h>

#include <atomic>
#include <chrono>
#include <functional>
#include <string>

#include "shared/base/mutex.h"
#include "shared/base/status.h"
#include "shared/log/log.h"

namespace kvindex {

class ResyncListener {
 public:
  ResyncListener(jsCtx* js, std::string stream, std::string subject,
                 std::function<void()> on_request);
  ~ResyncListener();
  ResyncListener(const ResyncListener&) = delete;
  ResyncListener& operator=(const ResyncListener&) = delete;

  // Unavailable while JetStream cannot be reached (the caller retries).
  Status Start();
  // Unsubscribes and waits (up to `drain`) until the subscription completed.
  void Stop(std::chrono::milliseconds drain = std::chrono::seconds(10));
  bool started() const { return sub_ != nullptr; }
  uint64_t requests() const { return requests_.load(); }

 private:
  static void OnMessage(natsConnection*, natsSubscription*, natsMsg* msg, void* closure);
  static void OnComplete(void* closure);

  jsCtx* const js_;
  const std::string stream_;
  const std::string subject_;
  const std::function<void()> on_request_;
  natsSubscription* sub_ = nullptr;
  std::atomic<uint64_t> requests_{0};
  // Anyone allowed on the control subject can send many: one line per 10 s.
  log::RateLimiter warnings_{std::chrono::seconds(10)};
  Mutex mu_;
  CondVar completed_cv_;
  bool completed_ ABSL_GUARDED_BY(mu_) = false;
};

}  // namespace kvindex
