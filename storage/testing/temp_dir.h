// TempDir: a fresh directory under the system's temp directory, removed
// with everything in it when the object goes (storage tests' RocksDB
// databases).
//
// Thread safety: one owner.
#pragma once

#include <stdlib.h>

#include <filesystem>
#include <string>
#include <system_error>

namespace kvindex::storage::testing {

class TempDir {
 public:
  TempDir() {
    std::string pattern = (std::filesystem::temp_directory_path() / "kvindex-ckpt-XXXXXX").string();
    path_ = mkdtemp(pattern.data());
  }
  ~TempDir() {
    std::error_code ec;
    std::filesystem::remove_all(path_, ec);
  }
  TempDir(const TempDir&) = delete;
  TempDir& operator=(const TempDir&) = delete;
  std::string path() const { return path_; }

 private:
  std::string path_;
};

}  // namespace kvindex::storage::testing
