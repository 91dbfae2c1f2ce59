#include "storage/internal/sticky_error_fs.h"

namespace kvindex::storage::internal {
namespace {

using rocksdb::IODebugContext;
using rocksdb::IOOptions;
using rocksdb::IOStatus;
using rocksdb::Slice;

class StickyErrorFile : public rocksdb::FSWritableFileOwnerWrapper {
 public:
  StickyErrorFile(std::unique_ptr<rocksdb::FSWritableFile> file, StickyErrorFileSystem* fs)
      : FSWritableFileOwnerWrapper(std::move(file)), fs_(fs) {}

  IOStatus Append(const Slice& data, const IOOptions& options, IODebugContext* dbg) override {
    return fs_->failed() ? IOStatus::OK() : fs_->Keep(target()->Append(data, options, dbg));
  }
  IOStatus Append(const Slice& data, const IOOptions& options,
                  const rocksdb::DataVerificationInfo& info, IODebugContext* dbg) override {
    return fs_->failed() ? IOStatus::OK() : fs_->Keep(target()->Append(data, options, info, dbg));
  }
  IOStatus PositionedAppend(const Slice& data, uint64_t offset, const IOOptions& options,
                            IODebugContext* dbg) override {
    return fs_->failed() ? IOStatus::OK()
                         : fs_->Keep(target()->PositionedAppend(data, offset, options, dbg));
  }
  IOStatus PositionedAppend(const Slice& data, uint64_t offset, const IOOptions& options,
                            const rocksdb::DataVerificationInfo& info,
                            IODebugContext* dbg) override {
    return fs_->failed() ? IOStatus::OK()
                         : fs_->Keep(target()->PositionedAppend(data, offset, options, info, dbg));
  }
  IOStatus Truncate(uint64_t size, const IOOptions& options, IODebugContext* dbg) override {
    return fs_->failed() ? IOStatus::OK() : fs_->Keep(target()->Truncate(size, options, dbg));
  }
  IOStatus Flush(const IOOptions& options, IODebugContext* dbg) override {
    return fs_->failed() ? IOStatus::OK() : fs_->Keep(target()->Flush(options, dbg));
  }
  IOStatus Sync(const IOOptions& options, IODebugContext* dbg) override {
    return fs_->failed() ? IOStatus::OK() : fs_->Keep(target()->Sync(options, dbg));
  }
  IOStatus Fsync(const IOOptions& options, IODebugContext* dbg) override {
    return fs_->failed() ? IOStatus::OK() : fs_->Keep(target()->Fsync(options, dbg));
  }
  IOStatus RangeSync(uint64_t offset, uint64_t nbytes, const IOOptions& options,
                     IODebugContext* dbg) override {
    return fs_->failed() ? IOStatus::OK()
                         : fs_->Keep(target()->RangeSync(offset, nbytes, options, dbg));
  }
  IOStatus Close(const IOOptions& options, IODebugContext* dbg) override {
    // Always closed, error or not: the descriptor must not leak.
    return fs_->Keep(target()->Close(options, dbg));
  }

 private:
  StickyErrorFileSystem* const fs_;
};

}  // namespace

IOStatus StickyErrorFileSystem::NewWritableFile(const std::string& name,
                                                const rocksdb::FileOptions& options,
                                                std::unique_ptr<rocksdb::FSWritableFile>* result,
                                                IODebugContext* dbg) {
  std::unique_ptr<rocksdb::FSWritableFile> file;
  IOStatus s = target()->NewWritableFile(name, options, &file, dbg);
  if (!s.ok()) return s;
  *result = std::make_unique<StickyErrorFile>(std::move(file), this);
  return IOStatus::OK();
}

IOStatus StickyErrorFileSystem::Keep(IOStatus status) {
  MutexLock lock(&mu_);
  if (!status.ok() && error_.ok()) error_ = status;
  status.PermitUncheckedError();
  return IOStatus::OK();
}

bool StickyErrorFileSystem::failed() const {
  MutexLock lock(&mu_);
  return !error_.ok();
}

IOStatus StickyErrorFileSystem::TakeError() {
  MutexLock lock(&mu_);
  IOStatus out = error_;
  error_ = IOStatus::OK();
  return out;
}

}  // namespace kvindex::storage::internal
