// The coordinator service (server_impl.h): the state replayed at start and
// recorded before anyone is told of a decision; halting when it cannot be.
#include <fcntl.h>
#include <sys/resource.h>
#include <sys/socket.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <chrono>
#include <cmath>
#include <csignal>
#include <cstdio>
#include <cstdlib>
#include <deque>
#include <future>
#include <list>
#include <map>
#include <memory>
#include <mutex>
#include <optional>
#include <random>
#include <set>
#include <string>
#include <thread>
#include <utility>
#include <vector>

#include <boost/asio.hpp>

#include "absl/strings/match.h"
#include "absl/strings/str_join.h"
#include "ckpt/checkpointer.h"
#include "ckpt/coordinator.h"
#include "ckpt/peer.h"
#include "ckpt/storage.h"
#include "ckpt/verify.h"
#include "coordinator/commit_book.h"
#include "coordinator/membership.h"
#include "coordinator/messages.h"
#include "coordinator/protocol.h"
#include "coordinator/records.h"
#include "coordinator/server_impl.h"
#include "coordinator/session.h"
#include "coordinator/state_log.h"
#include "coordinator/status.h"
#include "util/bytes.h"
#include "util/clock.h"
#include "util/descriptors.h"
#include "util/errors.h"
#include "util/status_wire.h"
#include "util/strings.h"

namespace ckpt::coord {

absl::Status CoordinatorImpl::Replay(std::string_view rec) {
  if (!rec.empty() && static_cast<JournalKind>(rec[0]) == JournalKind::kGeneration) {
    ByteReader r(rec.substr(1), "journal record");
    return membership_.ReplayGeneration(r);
  }
  CKPT_ASSIGN_OR_RETURN(RecordView r, DecodeRecord(0, rec));
  switch (r.kind) {
    case JournalKind::kEnded:
      membership_.ReplayEnded();
      break;
    case JournalKind::kCommitted:
      if (r.memory) {
        memory_commits_[r.step] = MemoryCommit{r.generation, r.save_world, std::max(r.erasure_k, 1)};
      } else {
        last_committed_ = std::max(last_committed_, r.step);
      }
      book_.ReplayCommitted(StepKey(r.step, r.memory), r.generation);
      ++commits_;
      break;
    case JournalKind::kAborted:
      book_.ReplayAborted(StepKey(r.step, r.memory), r.generation);
      ++aborts_;
      break;
    case JournalKind::kDecided:
      if (!r.memory) last_decided_ = std::max(last_decided_, r.step);
      book_.ReplayDecided(StepKey(r.step, r.memory), r.generation);
      break;
    case JournalKind::kSdc:
      sdc_.push_back(SdcAlert{r.step, std::move(r.chunk), std::move(r.detail)});
      break;
    case JournalKind::kGeneration:
      break;  // above
  }
  return absl::OkStatus();
}

bool CoordinatorImpl::Journaled(const std::string& rec) {
  if (!halted_.empty()) return false;
  const double t0 = NowSeconds();
  absl::Status s = log_->Append(rec);
  appends_.Add(NowSeconds() - t0);
  if (s.ok()) return true;
  Halt(StrCat("cannot record its state (", s.message(), ")"));
  return false;
}

void CoordinatorImpl::Halt(const std::string& why) {
  {
    std::lock_guard<std::mutex> lock(halt_mu_);
    halted_ = why;
  }
  Log(StrCat("STOPPED ACTING: ", why, "; restart it (it resumes from ", log_->Describe(), ")"));
  boost::system::error_code ec;
  acceptor_.close(ec);
  for (auto& w : sessions_) {
    if (auto sess = w.lock()) sess->Close("the coordinator stopped acting");
  }
}

}  // namespace ckpt::coord
