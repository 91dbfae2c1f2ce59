#include "shared/wire/engine_kind.h"

#include <gtest/gtest.h>

namespace kvindex::wire {
namespace {

TEST(EngineKindTest, NamesRoundTrip) {
  for (EngineKind kind : {EngineKind::kVllm, EngineKind::kSglang, EngineKind::kTrtllm}) {
    EXPECT_EQ(EngineKindFromName(EngineKindName(kind)), kind);
  }
  EXPECT_EQ(EngineKindName(EngineKind::kVllm), "vllm");
  EXPECT_EQ(EngineKindName(EngineKind::kSglang), "sglang");
  EXPECT_EQ(EngineKindName(EngineKind::kTrtllm), "trtllm");
  EXPECT_EQ(EngineKindFromName("VLLM"), std::nullopt);
  EXPECT_EQ(EngineKindFromName(""), std::nullopt);
  EXPECT_EQ(EngineKindFromName("tensorrt"), std::nullopt);
}

}  // namespace
}  // namespace kvindex::wire
