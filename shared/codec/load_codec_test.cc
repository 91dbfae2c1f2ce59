#include "shared/codec/load_codec.h"

#include <gtest/gtest.h>

#include <msgpack.hpp>

namespace kvindex::codec {
namespace {

TEST(LoadCodecTest, RoundTripsAndKeepsUnreportedGaugesAbsent) {
  LoadReport report;
  report.agent = "node-a";
  report.ts_ns = 1757500000250000000ull;
  report.samples.resize(2);
  report.samples[0].source.worker = "w0";
  report.samples[0].load.waiting = 3;
  report.samples[0].load.running = 7;
  report.samples[0].load.kv_use = 0.25;
  report.samples[1].source.worker = "w0";
  report.samples[1].source.dp_rank = 1;
  report.samples[1].load.healthy = false;
  std::string bytes;
  EncodeLoadReport(report, &bytes);
  auto decoded = DecodeLoadReport(bytes);
  ASSERT_TRUE(decoded.ok()) << decoded.status();
  EXPECT_EQ(*decoded, report);
  EXPECT_EQ(decoded->samples[1].load.waiting, -1);
}

TEST(LoadCodecTest, RejectsWhatIsNotALoadReport) {
  auto pack = [](auto fn) {
    msgpack::sbuffer buffer;
    msgpack::packer<msgpack::sbuffer> p(buffer);
    fn(p);
    return std::string(buffer.data(), buffer.size());
  };
  EXPECT_FALSE(DecodeLoadReport("").ok());
  EXPECT_FALSE(DecodeLoadReport(pack([](auto& p) { p.pack_array(0); })).ok());
  // No agent.
  EXPECT_FALSE(DecodeLoadReport(pack([](auto& p) {
                 p.pack_map(2);
                 p.pack("v");
                 p.pack(1);
                 p.pack("samples");
                 p.pack_array(0);
               })).ok());
  // kv_use past 1, a negative queue.
  for (const char* field : {"kv_use", "waiting"}) {
    const std::string bytes = pack([field](auto& p) {
      p.pack_map(3);
      p.pack("v");
      p.pack(1);
      p.pack("agent");
      p.pack("a");
      p.pack("samples");
      p.pack_array(1);
      p.pack_map(2);
      p.pack("worker");
      p.pack("w0");
      p.pack(field);
      p.pack(std::string(field) == "kv_use" ? 1.5 : -2.0);
    });
    auto decoded = DecodeLoadReport(bytes);
    ASSERT_FALSE(decoded.ok()) << field;
    EXPECT_NE(decoded.status().message().find(field), std::string::npos);
  }
}

TEST(LoadCodecTest, SubjectsStayOutsideTheStream) {
  EXPECT_EQ(LoadSubject("kvindex.events", "node-a"), "kvindex.events_load.node-a");
  EXPECT_EQ(LoadSubjects("kvindex.events"), "kvindex.events_load.*");
}

}  // namespace
}  // namespace kvindex::codec
