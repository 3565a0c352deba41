#include "core/save_handle.h"

#include <chrono>

#include "absl/strings/str_cat.h"
#include "util/errors.h"
#include "util/strings.h"

namespace ckpt {

void SaveHandle::Shared::SetDurable(absl::Status s, double write_s) {
  {
    std::lock_guard<std::mutex> lock(mu);
    if (durable) return;
    durable = true;
    durable_status = s;
    stats.write_s = write_s;
  }
  cv.notify_all();
}

void SaveHandle::Shared::SetDone(absl::Status s, double commit_s) {
  {
    std::lock_guard<std::mutex> lock(mu);
    if (done) return;
    if (!durable) {
      durable = true;
      durable_status = s;
    }
    done = true;
    status = s;
    stats.commit_s = commit_s;
  }
  cv.notify_all();
}

SaveHandle::SaveHandle(std::shared_ptr<Shared> shared) : shared_(std::move(shared)) {}

int64_t SaveHandle::step() const { return shared_->step; }

absl::Status SaveHandle::Wait() const {
  std::unique_lock<std::mutex> lock(shared_->mu);
  shared_->cv.wait(lock, [&] { return shared_->done; });
  return shared_->status;
}

absl::Status SaveHandle::WaitReplicated() const {
  CKPT_RETURN_IF_ERROR(Wait());
  return shared_->storage != nullptr ? ::ckpt::WaitReplicated(*shared_->storage) : absl::OkStatus();
}

absl::Status SaveHandle::WaitDurable() const {
  std::unique_lock<std::mutex> lock(shared_->mu);
  shared_->cv.wait(lock, [&] { return shared_->durable; });
  return shared_->durable_status;
}

absl::Status SaveHandle::WaitFor(double seconds) const {
  std::unique_lock<std::mutex> lock(shared_->mu);
  if (!shared_->cv.wait_for(lock, std::chrono::duration<double>(seconds), [&] { return shared_->done; })) {
    return absl::DeadlineExceededError(StrCat("save of step ", shared_->step, " still running after ", seconds, " s"));
  }
  return shared_->status;
}

bool SaveHandle::Done() const {
  std::lock_guard<std::mutex> lock(shared_->mu);
  return shared_->done;
}

SaveProgress SaveHandle::Progress() const {
  SaveProgress p;
  p.blocks_total = shared_->counters->blocks_total.load();
  p.blocks_written = shared_->counters->blocks_written.load();
  p.bytes_staged = shared_->counters->bytes_staged.load();
  p.bytes_written = shared_->counters->bytes_written.load();
  return p;
}

SaveStats SaveHandle::Stats() const {
  std::lock_guard<std::mutex> lock(shared_->mu);
  return shared_->stats;
}

}  // namespace ckpt
