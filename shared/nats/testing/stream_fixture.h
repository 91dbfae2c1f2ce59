// Test-only: a gtest fixture with, for each test, a real nats-server, a
// connection to it and the default placement stream.
//
//   class MyTest : public nats::testing::StreamTest {};
//   TEST_F(MyTest, X) { js_Publish(..., connection_->jetstream(), ...); }
//
// Thread safety: as a gtest fixture (the test's thread).
#pragma once

#include <gtest/gtest.h>
#include <prometheus/registry.h>

#include <memory>

#include "shared/nats/connection.h"
#include "shared/nats/stream.h"
#include "shared/nats/testing/nats_server.h"

namespace kvindex::nats::testing {

class StreamTest : public ::testing::Test {
 protected:
  void SetUp() override {
    auto server = NatsServerProcess::Start({});
    ASSERT_TRUE(server.ok()) << server.status();
    server_ = std::move(*server);
    NatsOptions nats_options;
    nats_options.url = server_->url();
    auto connection = Connection::Connect(nats_options, &registry_, "agent", {}, false);
    ASSERT_TRUE(connection.ok()) << connection.status();
    connection_ = std::move(*connection);
    ASSERT_TRUE(EnsureStream(connection_->jetstream(), stream_).ok());
  }

  std::unique_ptr<NatsServerProcess> server_;
  prometheus::Registry registry_;
  std::unique_ptr<Connection> connection_;
  StreamOptions stream_;
};

}  // namespace kvindex::nats::testing
