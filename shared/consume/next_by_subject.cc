#include "shared/consume/next_by_subject.h"

#include <nlohmann/json.hpp>

#include <string_view>

#include "shared/nats/stream.h"

namespace kvindex::consume {

// The JSON API's error code for "no message found".
constexpr uint64_t kNoMessageFound = 10037;

StatusOr<uint64_t> NextBySubject(natsConnection* connection, const std::string& stream,
                                 uint64_t seq, const std::string& subject,
                                 std::chrono::milliseconds timeout) {
  if (connection == nullptr) return absl::UnavailableError("next_by_subj: no NATS connection");
  const std::string request = nlohmann::json{{"seq", seq}, {"next_by_subj", subject}}.dump();
  const std::string api = "$JS.API.STREAM.MSG.GET." + stream;
  natsMsg* reply = nullptr;
  const natsStatus status = natsConnection_Request(&reply, connection, api.c_str(), request.data(),
                                                   static_cast<int>(request.size()),
                                                   static_cast<int64_t>(timeout.count()));
  if (status != NATS_OK) return nats::FromNats(status, "next_by_subj " + subject);
  const std::string_view data(natsMsg_GetData(reply),
                              static_cast<size_t>(natsMsg_GetDataLength(reply)));
  const nlohmann::json answer = nlohmann::json::parse(data, nullptr, /*allow_exceptions=*/false);
  natsMsg_Destroy(reply);
  if (!answer.is_object()) return absl::InternalError("next_by_subj: an answer that is not JSON");
  if (auto error = answer.find("error"); error != answer.end() && error->is_object()) {
    // Read without exceptions: the answer is checked like any wire input.
    auto code = error->find("err_code");
    if (code != error->end() && code->is_number_unsigned() &&
        code->get<uint64_t>() == kNoMessageFound) {
      return uint64_t{0};  // not "stream not found" (10059)
    }
    auto description = error->find("description");
    return absl::UnavailableError("next_by_subj " + subject + ": " +
                                  (description != error->end() && description->is_string()
                                       ? description->get<std::string>()
                                       : std::string("error")));
  }
  auto message = answer.find("message");
  if (message == answer.end() || !message->is_object() || !message->contains("seq") ||
      !(*message)["seq"].is_number_unsigned()) {
    return absl::InternalError("next_by_subj: no message sequence in the answer");
  }
  return (*message)["seq"].get<uint64_t>();
}

}  // namespace kvindex::consume
