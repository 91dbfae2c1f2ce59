#include "shared/trace/mooncake_trace.h"

#include <fstream>
#include <nlohmann/json.hpp>

namespace kvindex::trace {

StatusOr<std::vector<TraceRequest>> ReadTrace(const std::string& path, size_t limit) {
  std::ifstream in(path);
  if (!in) return absl::NotFoundError("cannot open trace '" + path + "'");
  std::vector<TraceRequest> requests;
  std::string line;
  size_t line_number = 0;
  while (std::getline(in, line)) {
    ++line_number;
    if (line.empty()) continue;
    const auto json = nlohmann::json::parse(line, nullptr, /*allow_exceptions=*/false);
    if (json.is_discarded() || !json.is_object() || !json.contains("hash_ids") ||
        !json["hash_ids"].is_array()) {
      return absl::InvalidArgumentError(path + ":" + std::to_string(line_number) +
                                        ": not a trace record with a hash_ids array");
    }
    TraceRequest request;
    request.timestamp_ms = json.value("timestamp", uint64_t{0});
    request.input_length = json.value("input_length", uint32_t{0});
    request.output_length = json.value("output_length", uint32_t{0});
    for (const auto& id : json["hash_ids"]) {
      if (!id.is_number_unsigned()) {
        return absl::InvalidArgumentError(path + ":" + std::to_string(line_number) +
                                          ": hash_ids must be unsigned integers");
      }
      request.hash_ids.push_back(id.get<uint64_t>());
    }
    requests.push_back(std::move(request));
    if (limit != 0 && requests.size() >= limit) break;
  }
  return requests;
}

}  // namespace kvindex::trace
