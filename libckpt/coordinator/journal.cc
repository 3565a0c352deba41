#include "coordinator/journal.h"

#include <fcntl.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cerrno>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <sstream>
#include <string>
#include <utility>

#include "util/bytes.h"
#include "util/errors.h"
#include "util/hash.h"
#include "util/strings.h"

namespace ckpt::coord {
namespace {

constexpr uint32_t kRecordMagic = 0x4a4b4343;  // "CCKJ"
constexpr size_t kRecordHeader = 16;           // magic, length, xxh3 (8)

absl::Status Errno(std::string_view what, const std::string& path) {
  return absl::InternalError(StrCat(what, " ", path, ": ", std::strerror(errno)));
}

}  // namespace

Journal::Journal(std::string dir) : dir_(std::move(dir)), path_(PathIn(dir_)) {}

Journal::~Journal() {
  if (fd_ >= 0) ::close(fd_);
}

absl::Status Journal::Open(const std::function<absl::Status(std::string_view)>& replay, uint64_t* torn) {
  std::error_code ec;
  std::filesystem::create_directories(dir_, ec);
  if (ec) return absl::InternalError(StrCat("creating state dir ", dir_, ": ", ec.message()));
  fd_ = ::open(path_.c_str(), O_RDWR | O_CREAT | O_CLOEXEC, 0600);
  if (fd_ < 0) return Errno("opening", path_);
  struct stat st {};
  if (::fstat(fd_, &st) != 0) return Errno("stat of", path_);
  std::string all(static_cast<size_t>(st.st_size), '\0');
  size_t got = 0;
  while (got < all.size()) {
    const ssize_t n = ::pread(fd_, all.data() + got, all.size() - got, static_cast<off_t>(got));
    if (n < 0) return Errno("reading", path_);
    if (n == 0) break;
    got += static_cast<size_t>(n);
  }
  all.resize(got);
  size_t pos = 0;
  CKPT_RETURN_IF_ERROR(Parse(path_, all, replay, &pos));
  *torn = all.size() - pos;
  if (*torn > 0) {
    if (::ftruncate(fd_, static_cast<off_t>(pos)) != 0) return Errno("truncating the torn tail of", path_);
    if (::fsync(fd_) != 0) return Errno("fsync of", path_);
  }
  if (::lseek(fd_, static_cast<off_t>(pos), SEEK_SET) < 0) return Errno("seeking in", path_);
  // The directory entry of a new journal must survive a crash too.
  const int dfd = ::open(dir_.c_str(), O_RDONLY | O_DIRECTORY | O_CLOEXEC);
  if (dfd >= 0) {
    (void)::fsync(dfd);
    ::close(dfd);
  }
  return absl::OkStatus();
}

absl::Status Journal::Parse(const std::string& path, std::string_view all,
                            const std::function<absl::Status(std::string_view)>& replay, size_t* end) {
  size_t pos = 0;
  while (pos + kRecordHeader <= all.size()) {
    const uint8_t* h = reinterpret_cast<const uint8_t*>(all.data() + pos);
    const uint32_t magic = LoadLE32(h);
    const uint32_t len = LoadLE32(h + 4);
    const uint64_t sum = LoadLE64(h + 8);
    if (magic != kRecordMagic || pos + kRecordHeader + len > all.size()) break;
    std::string_view rec(all.data() + pos + kRecordHeader, len);
    if (Xxh3(rec) != sum) break;
    absl::Status s = replay(rec);
    if (!s.ok()) return absl::DataLossError(StrCat(path, " at byte offset ", pos, ": ", s.message()));
    pos += kRecordHeader + len;
  }
  *end = pos;
  return absl::OkStatus();
}

absl::Status Journal::Read(const std::string& dir, const std::function<absl::Status(std::string_view)>& replay,
                           uint64_t* torn) {
  const std::string path = PathIn(dir);
  std::ifstream in(path, std::ios::binary);
  if (!in) return absl::NotFoundError(StrCat("no coordinator journal at ", path));
  std::stringstream ss;
  ss << in.rdbuf();
  const std::string all = ss.str();
  size_t end = 0;
  CKPT_RETURN_IF_ERROR(Parse(path, all, replay, &end));
  *torn = all.size() - end;
  return absl::OkStatus();
}

absl::Status Journal::Append(std::string_view record) {
  ByteWriter w;
  w.U32(kRecordMagic);
  w.U32(static_cast<uint32_t>(record.size()));
  w.U64(Xxh3(record));
  w.Raw(record.data(), record.size());
  const std::string& buf = w.str();
  size_t done = 0;
  while (done < buf.size()) {
    const ssize_t n = ::write(fd_, buf.data() + done, buf.size() - done);
    if (n < 0) {
      if (errno == EINTR) continue;
      return Errno("appending to", path_);
    }
    done += static_cast<size_t>(n);
  }
  if (::fdatasync(fd_) != 0) return Errno("fdatasync of", path_);
  return absl::OkStatus();
}

}  // namespace ckpt::coord
