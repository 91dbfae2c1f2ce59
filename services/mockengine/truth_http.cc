#include "services/mockengine/truth_http.h"

namespace kvindex::mockengine {

void RegisterTruthHttp(const Cluster& cluster, http::Server& server) {
  server.Handle("GET", "/healthz",
                [](const http::Request&, http::Response& r) {
                  r.content_type = "text/plain";
                  r.body = "ok\n";
                },
                {.open = true});
  server.Handle("GET", "/v1/truth", [&cluster](const http::Request&, http::Response& r) {
    r.body = cluster.TruthJson();
  });
  server.Handle("GET", "/v1/progress", [&cluster](const http::Request&, http::Response& r) {
    r.body = cluster.ProgressJson();
  });
  server.Handle("POST", "/v1/match", [&cluster](const http::Request& request, http::Response& r) {
    const bool index_view = request.query.find("view=index") != std::string_view::npos;
    r.status = cluster.MatchJson(request.body, index_view, &r.body);
  });
}

}  // namespace kvindex::mockengine
