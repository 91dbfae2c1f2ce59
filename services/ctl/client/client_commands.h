// kvindex-ctl match | state | workers: talk to a running kvindex-router's
// HTTP API (docs/api.md) and print a readable table, or the raw JSON with
// --json for scripts.
//
//   kvindex-ctl match --router http://127.0.0.1:8080 --model M --tokens 1,2,3,4
//   kvindex-ctl state --router http://127.0.0.1:8080 --json
//   kvindex-ctl workers --router http://127.0.0.1:8080
//
// Exit codes: 0 success; 1 the router answered an error or is unreachable
// (one line on stderr); 2 bad flags. The bearer token comes from
// --auth-token-file or KVINDEX_AUTH_TOKEN.
//
// Thread safety: single-threaded command entry points.
#pragma once

#include <string>

namespace kvindex::ctl {

// argv[0] is the command name ("match", "state" or "workers").
int RunClientCommand(int argc, char** argv);

// Rendering of the router's JSON answers as tables (exposed for tests).
// InvalidArgument-free: a body that does not parse yields an empty string.
std::string FormatMatchTable(const std::string& json_body);
std::string FormatStateTable(const std::string& json_body);
std::string FormatWorkersTable(const std::string& json_body);

}  // namespace kvindex::ctl
