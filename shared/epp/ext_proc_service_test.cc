// ExtProcService::Serve, the ext_proc stream state machine, driven in
// memory (testing/memory_stream.h) over a real index, endpoint table and
// picker: what Envoy may send, including what it should not.
#include "shared/epp/ext_proc_service.h"

#include <gtest/gtest.h>

#include <string>
#include <vector>

#include "shared/epp/endpoints.h"
#include "shared/epp/picker.h"
#include "shared/epp/testing/memory_stream.h"
#include "shared/epp/token_source.h"
#include "shared/index/kv_index.h"

namespace kvindex::epp {
namespace {

namespace pb = envoy::service::ext_proc::v3;
using testing::MemoryStream;

pb::ProcessingRequest Headers(bool end_of_stream) {
  pb::ProcessingRequest r;
  auto* h = r.mutable_request_headers()->mutable_headers()->add_headers();
  h->set_key(":path");
  h->set_raw_value("/v1/completions");
  r.mutable_request_headers()->set_end_of_stream(end_of_stream);
  return r;
}

class ExtProcServiceTest : public ::testing::Test {
 protected:
  void SetUp() override {
    std::vector<Endpoint> endpoints;
    for (int i = 0; i < 2; ++i) {
      Endpoint e;
      e.address = "10.0.0." + std::to_string(i + 1) + ":8000";
      e.source.worker = "w" + std::to_string(i);
      e.model = "m";
      endpoints.push_back(std::move(e));
    }
    table_.SetStatic(std::move(endpoints));
    chain_.Add(std::make_unique<PromptTokenSource>());
  }
  int64_t InFlight() const {
    return picker_.InFlight("10.0.0.1:8000") + picker_.InFlight("10.0.0.2:8000");
  }

  index::KvIndex index_;
  EndpointTable table_;
  TokenChain chain_;
  Picker picker_{[] {
                   PickerConfig config;
                   config.max_inflight_per_endpoint = 1;
                   return config;
                 }(),
                 &index_, &table_};
  ExtProcService service_{ServiceOptions{}, &picker_, &chain_};
};

TEST_F(ExtProcServiceTest, HeadersOnlyPicksOnceAndReleases) {
  MemoryStream stream({Headers(/*end_of_stream=*/true)});
  service_.Serve(&stream);
  ASSERT_EQ(stream.answers.size(), 1u);
  EXPECT_TRUE(stream.answers[0].has_request_headers());
  EXPECT_EQ(InFlight(), 0);
  EXPECT_EQ(service_.counters().streams_open.load(), 0);
}

// A second request_headers after the pick (a protocol violation Envoy does
// not commit, but a stream may carry) must not pick again: the first pick
// would stay in flight forever and, with max_inflight_per_endpoint, shed
// that engine for good. Found by tests/fuzz/ext_proc_fuzz.
TEST_F(ExtProcServiceTest, RepeatedHeadersDoNotLeakAPick) {
  for (int round = 0; round < 3; ++round) {
    MemoryStream stream({Headers(true), Headers(true), Headers(true)});
    service_.Serve(&stream);
    EXPECT_EQ(InFlight(), 0) << "round " << round;
    for (const auto& answer : stream.answers) EXPECT_FALSE(answer.has_immediate_response());
  }
}

}  // namespace
}  // namespace kvindex::epp
