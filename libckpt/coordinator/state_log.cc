#include "coordinator/state_log.h"

#include <cinttypes>
#include <cstdio>

#include "coordinator/etcd_client.h"
#include "coordinator/journal.h"
#include "util/errors.h"
#include "util/strings.h"

namespace ckpt::coord {
namespace {

class JournalLog final : public StateLog {
 public:
  explicit JournalLog(std::string dir) : dir_(std::move(dir)) {}
  absl::Status Open(const std::function<absl::Status(std::string_view)>& replay, uint64_t* torn) override {
    return journal_.Open(dir_, replay, torn);
  }
  absl::Status Append(std::string_view record) override { return journal_.Append(record); }
  std::string Describe() const override { return StrCat("journal ", journal_.path()); }

 private:
  std::string dir_;
  Journal journal_;
};

class EtcdLog final : public StateLog {
 public:
  explicit EtcdLog(EtcdConfig config) : client_(std::move(config)) {}

  absl::Status Open(const std::function<absl::Status(std::string_view)>& replay, uint64_t* torn) override {
    *torn = 0;
    const std::string dir = LogDir();
    const std::string end = EtcdClient::PrefixEnd(dir);
    std::string from = dir;
    int64_t expect = 1;
    while (true) {
      bool more = false;
      auto page = client_.Range(from, end, 1000, &more);
      if (!page.ok()) return Annotate(page.status(), StrCat("reading the coordinator's state from ", Describe()));
      for (const EtcdKv& kv : *page) {
        int64_t seq = 0;
        const std::string_view tail = std::string_view(kv.key).substr(dir.size());
        if (tail.size() != 20 || !ParseInt64(tail, &seq) || seq != expect) {
          return absl::DataLossError(StrCat("etcd key ", kv.key, " under ", Describe(), ": expected record ", expect,
                                            " (", dir,
                                            "%020d); the store holds something this coordinator did "
                                            "not write"));
        }
        absl::Status s = replay(kv.value);
        if (!s.ok()) return Annotate(s, StrCat("etcd key ", kv.key, " under ", Describe()));
        ++expect;
      }
      if (!more || page->empty()) break;
      from = page->back().key + std::string(1, '\0');
    }
    next_ = expect;
    return absl::OkStatus();
  }

  absl::Status Append(std::string_view record) override {
    char key[32];
    std::snprintf(key, sizeof(key), "%020" PRId64, next_);
    auto created = client_.PutIfAbsent(StrCat(LogDir(), key), record);
    if (!created.ok()) return Annotate(created.status(), StrCat("appending record ", next_, " to ", Describe()));
    if (!*created) {
      return absl::FailedPreconditionError(StrCat("record ", next_, " under ", Describe(),
                                                  " was written by another coordinator: this one is fenced "
                                                  "off and stops acting"));
    }
    ++next_;
    return absl::OkStatus();
  }

  std::string Describe() const override { return StrCat("etcd ", client_.Describe(), " ", client_.config().prefix); }

 private:
  std::string LogDir() const { return StrCat(client_.config().prefix, "log/"); }

  EtcdClient client_;
  int64_t next_ = 1;
};

}  // namespace

std::unique_ptr<StateLog> NewJournalLog(const std::string& dir) { return std::make_unique<JournalLog>(dir); }

absl::StatusOr<std::unique_ptr<StateLog>> NewEtcdLog(std::string_view uri) {
  CKPT_ASSIGN_OR_RETURN(EtcdConfig config, ParseEtcdUri(uri));
  return std::unique_ptr<StateLog>(std::make_unique<EtcdLog>(std::move(config)));
}

}  // namespace ckpt::coord
