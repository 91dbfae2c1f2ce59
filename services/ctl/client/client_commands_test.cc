#include "services/ctl/client/client_commands.h"

#include <gtest/gtest.h>

namespace kvindex::ctl {
namespace {

TEST(ClientCommandsTest, MatchTable) {
  const std::string table = FormatMatchTable(
      R"({"model":"m","blocks":3,"applied_seq":18446744073709551615,"workers":[
          {"worker":"w0","dp_rank":0,"longest":3,"device":3,"host":0,"disk":0,"external":0,"device_prefix":3},
          {"worker":"long-worker-name","dp_rank":1,"longest":2,"device":1,"host":1,"disk":0,"external":0,"device_prefix":1}]})");
  EXPECT_NE(table.find("applied_seq 18446744073709551615"), std::string::npos) << table;
  EXPECT_NE(table.find("WORKER            DP_RANK"), std::string::npos) << table;
  EXPECT_NE(table.find("long-worker-name  1"), std::string::npos) << table;
  EXPECT_NE(FormatMatchTable(R"({"model":"m","blocks":1,"applied_seq":1,"workers":[]})")
                .find("no worker"),
            std::string::npos);
  EXPECT_EQ(FormatMatchTable("not json"), "");
}

TEST(ClientCommandsTest, StateAndWorkersTables) {
  const std::string state = FormatStateTable(
      R"({"applied_seq":7,"digest":"00ff00ff00ff00ff","entries":{"device":4,"host":2,"disk":0,"external":0},
          "sources":2,"ready":true,"models":["a","b"]})");
  EXPECT_NE(state.find("digest            00ff00ff00ff00ff"), std::string::npos) << state;
  EXPECT_NE(state.find("models            a,b"), std::string::npos) << state;
  const std::string workers = FormatWorkersTable(
      R"({"workers":[{"model":"m","worker":"w0","dp_rank":0,"agent":"n","entries":{"device":1,"host":0,"disk":0,"external":0},
          "last_event_unix_ms":1700000000123,"ingest":{"last_seq":9}}]})");
  EXPECT_NE(workers.find("2023-11-14T22:13:20.123Z"), std::string::npos) << workers;
  EXPECT_NE(workers.find("w0"), std::string::npos);
}

TEST(ClientCommandsTest, BadInvocations) {
  char cmd[] = "frobnicate";
  char* argv1[] = {cmd};
  EXPECT_EQ(RunClientCommand(1, argv1), 2);
  char match[] = "match";
  char router[] = "--router";
  char url[] = "http://127.0.0.1:1";
  char model_flag[] = "--model";
  char model[] = "m";
  char tokens_flag[] = "--tokens";
  char tokens[] = "1,2,3";
  char* argv2[] = {match, router, url, model_flag, model};
  EXPECT_EQ(RunClientCommand(5, argv2), 2);  // neither --tokens nor --local-hashes
  char* argv3[] = {match, router, url, model_flag, model, tokens_flag, tokens};
  EXPECT_EQ(RunClientCommand(7, argv3), 1);  // unreachable router
}

}  // namespace
}  // namespace kvindex::ctl
