#include "services/bench/http/wrk_output.h"
#include "shared/base/strings.h"

#include <cstdint>
#include <cstdlib>
#include <string>

namespace kvindex::bench {
namespace {

std::string_view NextLine(std::string_view* text) {
  const size_t eol = text->find('\n');
  std::string_view line = text->substr(0, eol);
  text->remove_prefix(eol == std::string_view::npos ? text->size() : eol + 1);
  return line;
}

using strings::Trim;

std::optional<double> ParseNumber(std::string_view text) {
  const std::string copy(text);
  char* end = nullptr;
  const double value = std::strtod(copy.c_str(), &end);
  if (end == copy.c_str()) return std::nullopt;
  return value;
}

uint64_t SumNumbers(std::string_view text) {
  // "Socket errors: connect 0, read 1, write 0, timeout 2" -> 3
  uint64_t total = 0;
  const std::string copy(text);
  const char* p = copy.c_str();
  while (*p != 0) {
    if (*p >= '0' && *p <= '9') {
      char* end = nullptr;
      total += std::strtoull(p, &end, 10);
      p = end;
    } else {
      ++p;
    }
  }
  return total;
}

}  // namespace

std::optional<double> ParseWrkDuration(std::string_view text) {
  text = Trim(text);
  size_t unit = 0;
  while (unit < text.size() && ((text[unit] >= '0' && text[unit] <= '9') || text[unit] == '.')) {
    ++unit;
  }
  auto number = ParseNumber(text.substr(0, unit));
  if (!number.has_value()) return std::nullopt;
  const std::string_view suffix = text.substr(unit);
  if (suffix == "us") return *number * 1e-6;
  if (suffix == "ms") return *number * 1e-3;
  if (suffix == "s") return *number;
  if (suffix == "m") return *number * 60;
  return std::nullopt;
}

std::optional<WrkReport> ParseWrkOutput(std::string_view text) {
  WrkReport report;
  bool have_rps = false, have_p50 = false, have_p99 = false;
  while (!text.empty()) {
    std::string_view line = Trim(NextLine(&text));
    if (line.starts_with("Requests/sec:")) {
      auto value = ParseNumber(Trim(line.substr(13)));
      if (value.has_value()) {
        report.requests_per_second = *value;
        have_rps = true;
      }
    } else if (line.find("requests in") != std::string_view::npos) {
      report.requests = std::strtoull(std::string(line).c_str(), nullptr, 10);
    } else if (line.starts_with("Socket errors:") || line.starts_with("Non-2xx")) {
      report.errors += SumNumbers(line.substr(line.find(':') + 1));
    } else if (line.size() > 4 && line[2] == '%') {
      const std::string_view pct = line.substr(0, 2);
      auto value = ParseWrkDuration(line.substr(3));
      if (!value.has_value()) continue;
      if (pct == "50") {
        report.p50_seconds = *value;
        have_p50 = true;
      } else if (pct == "75") {
        report.p75_seconds = *value;
      } else if (pct == "90") {
        report.p90_seconds = *value;
      } else if (pct == "99") {
        report.p99_seconds = *value;
        have_p99 = true;
      }
    }
  }
  if (!have_rps || !have_p50 || !have_p99) return std::nullopt;
  return report;
}

}  // namespace kvindex::bench
