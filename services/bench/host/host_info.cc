#include "services/bench/host/host_info.h"

#include <stdlib.h>
#include <unistd.h>

#include <fstream>
#include <string>

namespace kvindex::bench {

nlohmann::json HostJson() {
  nlohmann::json host = nlohmann::json::object();
  std::ifstream cpuinfo("/proc/cpuinfo");
  for (std::string line; std::getline(cpuinfo, line);) {
    if (line.rfind("model name", 0) != 0) continue;
    const size_t colon = line.find(':');
    if (colon == std::string::npos) break;
    const size_t start = line.find_first_not_of(" \t", colon + 1);
    host["cpu_model"] = start == std::string::npos ? "" : line.substr(start);
    break;
  }
  const long cpus = ::sysconf(_SC_NPROCESSORS_ONLN);
  if (cpus > 0) host["cpus_online"] = cpus;
  double load[3];
  if (::getloadavg(load, 3) == 3) host["load_average"] = {load[0], load[1], load[2]};
  return host;
}

}  // namespace kvindex::bench
