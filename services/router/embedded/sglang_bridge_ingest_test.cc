#include "services/router/embedded/sglang_bridge_ingest.h"

#include <gtest/gtest.h>

#include <chrono>
#include <string>
#include <vector>

namespace kvindex::router {
namespace {

namespace pb = compat::pb;

SglangBridgeOptions Options(uint32_t max_workers) {
  SglangBridgeOptions options;
  options.node = "n/sglang-bridge";
  options.model = [](std::string*) {
    return std::optional<std::pair<std::string, uint32_t>>({"m", 4});
  };
  options.max_workers = max_workers;
  return options;
}

pb::ApplyExternalKvBatchRequest Batch(const std::string& worker, uint64_t seq) {
  pb::ApplyExternalKvBatchRequest request;
  request.set_worker_id(worker);
  request.set_seq(seq);
  request.set_worker_address("http://10.0.0.1:30000");
  return request;
}

void Add(pb::ApplyExternalKvBatchRequest* request, pb::ExternalKvActionType type,
         std::vector<int64_t> hashes = {}) {
  pb::ExternalKvAction* action = request->add_actions();
  action->set_type(type);
  action->set_tier(pb::TIER_HBM);
  for (int64_t h : hashes) action->add_hashes(h);
}

std::vector<PlacementEvent> Drain(InProcessSink& sink) {
  std::vector<PlacementEvent> out;
  while (sink.Drain(&out, 1 << 16, std::chrono::milliseconds(0)) > 0) {
  }
  return out;
}

// Worker ids churn (a bridge restarted with new ids, workers replaced): a
// worker cleared with CLEAR_ALL_AT_TIER holds nothing and gives its slot
// back, so the cap bounds live workers, not every id ever seen.
TEST(SglangBridgeIngestTest, ClearedWorkersFreeTheirSlot) {
  InProcessSink sink;
  SglangBridgeIngest bridge(Options(4), &sink);
  for (int i = 0; i < 40; ++i) {
    const std::string worker = "w" + std::to_string(i);
    pb::ApplyExternalKvBatchRequest report = Batch(worker, 1);
    Add(&report, pb::ACTION_REPORT, {int64_t{100} + i});
    ASSERT_TRUE(bridge.Apply(report).ok()) << worker << ": " << bridge.Apply(report).message;
    EXPECT_EQ(bridge.Address({worker, 0}), "http://10.0.0.1:30000");
    pb::ApplyExternalKvBatchRequest clear = Batch(worker, 2);
    Add(&clear, pb::ACTION_CLEAR_ALL_AT_TIER);
    ASSERT_TRUE(bridge.Apply(clear).ok()) << worker;
    EXPECT_EQ(bridge.Address({worker, 0}), "");  // nothing held, no slot
  }
  // A report and a clear in one batch, and a clear then a report: only what
  // holds blocks at the end of its batch keeps a slot.
  pb::ApplyExternalKvBatchRequest both = Batch("x", 1);
  Add(&both, pb::ACTION_REPORT, {7});
  Add(&both, pb::ACTION_CLEAR_ALL_AT_TIER);
  ASSERT_TRUE(bridge.Apply(both).ok());
  EXPECT_EQ(bridge.Address({"x", 0}), "");
  Drain(sink);
}

TEST(SglangBridgeIngestTest, CapBoundsLiveWorkers) {
  InProcessSink sink;
  SglangBridgeIngest bridge(Options(4), &sink);
  for (int i = 0; i < 4; ++i) {
    pb::ApplyExternalKvBatchRequest report = Batch("w" + std::to_string(i), 1);
    Add(&report, pb::ACTION_REPORT, {int64_t{100} + i});
    ASSERT_TRUE(bridge.Apply(report).ok());
  }
  pb::ApplyExternalKvBatchRequest fifth = Batch("w4", 1);
  Add(&fifth, pb::ACTION_REPORT, {104});
  EXPECT_EQ(bridge.Apply(fifth).code, compat::SglangCode::kResourceExhausted);
  // A clear-then-report batch keeps the slot (it holds a block).
  pb::ApplyExternalKvBatchRequest refill = Batch("w0", 2);
  Add(&refill, pb::ACTION_CLEAR_ALL_AT_TIER);
  Add(&refill, pb::ACTION_REPORT, {200});
  ASSERT_TRUE(bridge.Apply(refill).ok());
  EXPECT_EQ(bridge.Apply(fifth).code, compat::SglangCode::kResourceExhausted);
  // w1 cleared: its slot goes to w4.
  pb::ApplyExternalKvBatchRequest clear = Batch("w1", 2);
  Add(&clear, pb::ACTION_CLEAR_ALL_AT_TIER);
  ASSERT_TRUE(bridge.Apply(clear).ok());
  EXPECT_TRUE(bridge.Apply(fifth).ok());
  Drain(sink);
}

// A worker back after its slot was freed starts as a new one: cleared
// first, whatever its seq says (the log may hold a stale view of it).
TEST(SglangBridgeIngestTest, FreedWorkerComesBackClearedFirst) {
  InProcessSink sink;
  SglangBridgeIngest bridge(Options(4), &sink);
  pb::ApplyExternalKvBatchRequest report = Batch("w", 1);
  Add(&report, pb::ACTION_REPORT, {1, 2});
  ASSERT_TRUE(bridge.Apply(report).ok());
  pb::ApplyExternalKvBatchRequest clear = Batch("w", 2);
  Add(&clear, pb::ACTION_CLEAR_ALL_AT_TIER);
  ASSERT_TRUE(bridge.Apply(clear).ok());
  Drain(sink);
  pb::ApplyExternalKvBatchRequest again = Batch("w", 3);
  Add(&again, pb::ACTION_REPORT, {3});
  ASSERT_TRUE(bridge.Apply(again).ok());
  const std::vector<PlacementEvent> events = Drain(sink);
  ASSERT_EQ(events.size(), 2u);
  EXPECT_EQ(events[0].kind, PlacementKind::kCleared);
  EXPECT_EQ(events[1].kind, PlacementKind::kStored);
  EXPECT_EQ(events[1].source, (SourceKey{"w", 0}));
  EXPECT_EQ(bridge.Address({"w", 0}), "http://10.0.0.1:30000");
}

// A worker_id another source owns is refused, and the claim it made (the
// slot, InUse) does not outlive the refusal: a registration of that name
// is not blocked by a batch that was refused.
TEST(SglangBridgeIngestTest, ReservedWorkerRefusedWithoutKeepingItsClaim) {
  InProcessSink sink;
  SglangBridgeOptions options = Options(1);
  options.reserved = [](const std::string& worker) { return worker == "r1"; };
  SglangBridgeIngest bridge(options, &sink);
  pb::ApplyExternalKvBatchRequest taken = Batch("r1", 1);
  Add(&taken, pb::ACTION_REPORT, {1});
  const compat::SglangStatus refused = bridge.Apply(taken);
  EXPECT_EQ(refused.code, compat::SglangCode::kFailedPrecondition);
  EXPECT_EQ(refused.outcome, query::CompatApi::Outcome::kRegistrationConflict);
  EXPECT_FALSE(bridge.InUse("r1"));
  EXPECT_EQ(sink.published(), 0u);
  pb::ApplyExternalKvBatchRequest other = Batch("w", 1);  // the only slot is free
  Add(&other, pb::ACTION_REPORT, {1});
  ASSERT_TRUE(bridge.Apply(other).ok());
  EXPECT_TRUE(bridge.InUse("w"));
  Drain(sink);
}

}  // namespace
}  // namespace kvindex::router
