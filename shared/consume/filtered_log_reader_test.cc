// FilteredLogReader against a real nats-server: one consumer per filter
// subject, merged in stream order. Messages of model "a", of model "b", of
// the control and expiry subjects interleaved: the reader hands out every
// message of "a", "_agent" and "_expire", none of "b", positions strictly
// increasing, and passes over the stream's tail of "b" messages with one
// empty message at the stream's last position (readiness); reopened in the
// middle it resumes exactly there. NextBySubject answers "none" past the end.
#include "shared/consume/filtered_log_reader.h"

#include <gtest/gtest.h>

#include <chrono>
#include <memory>
#include <string>
#include <vector>

#include "shared/consume/next_by_subject.h"
#include "shared/nats/connection.h"
#include "shared/nats/stream.h"
#include "shared/nats/testing/stream_fixture.h"

namespace kvindex::consume {
namespace {

class FilteredLogReaderTest : public nats::testing::StreamTest {
 protected:
  // Publishes one message of `token`'s subject (node-a); its position.
  uint64_t Publish(const std::string& token) {
    const std::string subject = stream_.subjects.prefix + "." + token + ".node-a";
    const std::string data = "{}";  // not a placement batch: the reader does not care
    jsPubAck* ack = nullptr;
    jsErrCode code = static_cast<jsErrCode>(0);
    natsStatus status = js_Publish(&ack, connection_->jetstream(), subject.c_str(), data.data(),
                                   static_cast<int>(data.size()), nullptr, &code);
    EXPECT_EQ(status, NATS_OK);
    const uint64_t seq = ack != nullptr ? ack->Sequence : 0;
    jsPubAck_Destroy(ack);
    return seq;
  }

  std::unique_ptr<FilteredLogReader> Reader() {
    FilteredLogOptions options;
    options.log.stream = stream_.name;
    options.subjects = FilterSubjects(stream_.subjects, {"a"});
    nats::Connection* connection = connection_.get();
    const std::string name = stream_.name;
    options.next_by_subject = [this, connection, name](uint64_t seq, const std::string& subject) {
      ++questions_;
      return NextBySubject(connection->raw(), name, seq, subject);
    };
    options.stream_last = [connection, name]() -> StatusOr<uint64_t> {
      KVINDEX_ASSIGN_OR_RETURN(nats::StreamState state,
                               nats::GetStreamState(connection->jetstream(), name));
      return state.last_seq;
    };
    options.horizon_check = std::chrono::milliseconds(10);
    return std::make_unique<FilteredLogReader>(connection_->jetstream(), std::move(options));
  }

  // Reads until position `last` was handed out (or 10 s); the positions and
  // subjects handed out ("" for an empty message).
  static std::vector<std::pair<uint64_t, std::string>> ReadThrough(FilteredLogReader& reader,
                                                                   uint64_t last) {
    std::vector<std::pair<uint64_t, std::string>> out;
    const auto deadline = std::chrono::steady_clock::now() + std::chrono::seconds(10);
    while ((out.empty() || out.back().first < last) &&
           std::chrono::steady_clock::now() < deadline) {
      LogBatch batch;
      // Small batches: the merge decides often, with consumers half read.
      EXPECT_TRUE(reader.Read(&batch, 2, std::chrono::milliseconds(20)).ok());
      for (const LogBatch::Message& m : batch.messages) out.emplace_back(m.position, m.subject);
    }
    return out;
  }

  int questions_ = 0;
};

TEST_F(FilteredLogReaderTest, MergesItsSubjectsInStreamOrderAndPassesOverTheOthers) {
  // a, b, b, _agent, a, b, _expire, b, a, a, b, b: positions 1..12.
  const char* const tokens[] = {"a",       "b", "b", "_agent", "a", "b",
                                "_expire", "b", "a", "a",      "b", "b"};
  std::vector<uint64_t> want;
  for (const char* token : tokens) {
    const uint64_t position = Publish(token);
    if (std::string(token) != "b") want.push_back(position);
  }
  const uint64_t last = 12;
  auto reader = Reader();
  ASSERT_TRUE(reader->Open(1).ok());
  EXPECT_EQ(reader->OpenTarget(), last);
  const auto got = ReadThrough(*reader, last);
  std::vector<uint64_t> positions;
  for (const auto& [position, subject] : got) {
    positions.push_back(position);
    EXPECT_EQ(subject.find(".b."), std::string::npos) << "model b's message at " << position;
  }
  // Every message of the filters, in order, then one empty message at the
  // stream's end (its tail is model b's).
  want.push_back(last);
  EXPECT_EQ(positions, want);
  ASSERT_FALSE(got.empty());
  EXPECT_EQ(got.back().second, "");
  EXPECT_GE(reader->horizons(), 1u);
  EXPECT_GE(reader->LastKnownPosition(), last);

  // Reopened after position 5 (a checkpoint there): exactly what follows.
  auto again = Reader();
  ASSERT_TRUE(again->Open(6).ok());
  positions.clear();
  for (const auto& [position, subject] : ReadThrough(*again, last)) positions.push_back(position);
  EXPECT_EQ(positions, (std::vector<uint64_t>{7, 9, 10, 12}));

  // More messages after the horizon: read on, in order.
  Publish("b");
  const uint64_t next = Publish("_agent");
  positions.clear();
  for (const auto& [position, subject] : ReadThrough(*reader, next)) {
    positions.push_back(position);
  }
  EXPECT_EQ(positions, (std::vector<uint64_t>{next}));
}

TEST_F(FilteredLogReaderTest, NextBySubjectFindsTheNextMessageOfAFilter) {
  Publish("a");
  Publish("b");
  Publish("b");
  Publish("_agent");
  Publish("a");
  auto next = NextBySubject(connection_->raw(), stream_.name, 2, stream_.subjects.prefix + ".a.*");
  ASSERT_TRUE(next.ok()) << next.status();
  EXPECT_EQ(*next, 5u);
  next = NextBySubject(connection_->raw(), stream_.name, 6, stream_.subjects.prefix + ".a.*");
  ASSERT_TRUE(next.ok()) << next.status();
  EXPECT_EQ(*next, 0u);  // none past the end
  next = NextBySubject(connection_->raw(), "NO_SUCH_STREAM", 1, stream_.subjects.prefix + ".a.*");
  EXPECT_FALSE(next.ok());  // not "none": the stream is missing
}

}  // namespace
}  // namespace kvindex::consume
