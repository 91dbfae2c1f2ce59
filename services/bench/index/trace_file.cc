#include "services/bench/index/trace_file.h"

#include <fstream>

#include <nlohmann/json.hpp>

namespace kvindex::bench {

StatusOr<std::vector<TraceRequest>> ReadTrace(const std::string& path, size_t max_requests) {
  std::ifstream in(path);
  if (!in) return absl::NotFoundError("cannot open trace '" + path + "'");
  std::vector<TraceRequest> requests;
  std::string line;
  size_t line_no = 0;
  while (std::getline(in, line)) {
    ++line_no;
    if (line.empty()) continue;
    nlohmann::json j = nlohmann::json::parse(line, nullptr, /*allow_exceptions=*/false);
    if (j.is_discarded() || !j.contains("hash_ids") || !j["hash_ids"].is_array()) {
      return absl::InvalidArgumentError(path + ":" + std::to_string(line_no) +
                                        ": not a trace line with hash_ids");
    }
    TraceRequest r;
    for (const auto& id : j["hash_ids"]) r.hash_ids.push_back(id.get<uint64_t>());
    requests.push_back(std::move(r));
    if (max_requests != 0 && requests.size() >= max_requests) break;
  }
  return requests;
}

}  // namespace kvindex::bench
