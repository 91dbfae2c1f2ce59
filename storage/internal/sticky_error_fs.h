// StickyErrorFileSystem: a FileSystem for writing checkpoint files whose
// writable files never hand an I/O error back to RocksDB.
//
// Debian's RocksDB 7.8 is built with assertions on, and its
// WritableFileWriter asserts when it is written to after an I/O error (an
// SstFileWriter whose disk filled up keeps writing its index and footer):
// a full disk would abort the router. Through this file system the first
// error of a file is kept, later writes to it are dropped, and the caller
// asks TakeError() after SstFileWriter::Finish; a file with an error is
// deleted, never ingested.
//
// Thread safety: one writer at a time (the checkpointer's thread).
#pragma once

#include <rocksdb/file_system.h>

#include <memory>
#include <string>

#include "shared/base/mutex.h"

namespace kvindex::storage::internal {

class StickyErrorFileSystem : public rocksdb::FileSystemWrapper {
 public:
  explicit StickyErrorFileSystem(std::shared_ptr<rocksdb::FileSystem> target)
      : FileSystemWrapper(std::move(target)) {}

  const char* Name() const override { return "KvindexStickyErrorFileSystem"; }

  rocksdb::IOStatus NewWritableFile(const std::string& name, const rocksdb::FileOptions& options,
                                    std::unique_ptr<rocksdb::FSWritableFile>* result,
                                    rocksdb::IODebugContext* dbg) override;

  // The first error since the last call (OK when none), and forgets it.
  rocksdb::IOStatus TakeError();
  bool failed() const;
  // Keeps `status` when it is the first error; always returns OK.
  rocksdb::IOStatus Keep(rocksdb::IOStatus status);

 private:
  mutable Mutex mu_;
  rocksdb::IOStatus error_ ABSL_GUARDED_BY(mu_);
};

}  // namespace kvindex::storage::internal
