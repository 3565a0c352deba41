#include "storage/roots/s3/s3_storage.h"

#include <algorithm>
#include <set>

#include "absl/strings/match.h"
#include "net/uri.h"
#include "storage/backend.h"
#include "storage/capabilities.h"
#include "storage/roots/s3/s3_client.h"
#include "storage/roots/s3/s3_parse.h"
#include "util/errors.h"
#include "util/strings.h"

namespace ckpt {
namespace {

using s3::Clock;
using s3::NewS3Readable;
using s3::NewS3Writable;
using s3::ParseConfig;
using s3::S3Call;
using s3::S3Client;
using s3::S3Config;
using s3::S3Shared;

class S3Storage final : public Storage, public PendingUploads {
 public:
  S3Storage(std::string uri, S3Config cfg) : uri_(std::move(uri)), s_(std::make_shared<S3Shared>(std::move(cfg))) {}

  std::string uri() const override { return uri_; }
  StorageCaps caps() const override {
    StorageCaps c;
    c.engine = "s3";
    c.direct_io = false;
    c.atomic_rename = false;
    c.ranged_reads = true;
    c.durable = true;
    return c;
  }

  absl::StatusOr<std::unique_ptr<WritableFile>> OpenWritable(std::string_view path,
                                                             const WriteOptions& options) override {
    CKPT_RETURN_IF_ERROR(Check(path));
    std::optional<std::pair<uint64_t, std::string>> existing;
    if (!options.truncate) {
      auto h = Head(path, "open");
      if (h.ok()) {
        uint64_t size = 0;
        CKPT_RETURN_IF_ERROR(SizeOf(*h, path, &size));
        auto e = h->headers.find("etag");
        existing.emplace(size, e != h->headers.end() ? e->second : "");
      } else if (!absl::IsNotFound(h.status())) {
        return h.status();
      }
    }
    return NewS3Writable(s_, std::string(path), std::move(existing));
  }

  absl::StatusOr<std::unique_ptr<ReadableFile>> OpenReadable(std::string_view path) override {
    CKPT_RETURN_IF_ERROR(Check(path));
    CKPT_ASSIGN_OR_RETURN(HttpResponse h, Head(path, "open"));
    uint64_t size = 0;
    CKPT_RETURN_IF_ERROR(SizeOf(h, path, &size));
    auto e = h.headers.find("etag");
    return std::unique_ptr<ReadableFile>(
        NewS3Readable(s_, std::string(path), size, e != h.headers.end() ? e->second : ""));
  }

  absl::Status PutAtomic(std::string_view path, absl::Span<const std::byte> data) override {
    CKPT_RETURN_IF_ERROR(Check(path));
    S3Call call;
    call.method = "PUT";
    call.key = client().Key(path);
    call.body = data;
    call.what = StrCat("PUT ", client().Uri(call.key));
    return client().Do(call).status();
  }

  absl::Status PutIfAbsent(std::string_view path, absl::Span<const std::byte> data) override {
    CKPT_RETURN_IF_ERROR(Check(path));
    S3Call call;
    call.method = "PUT";
    call.key = client().Key(path);
    call.body = data;
    call.headers = {{"if-none-match", "*"}};
    call.what = StrCat("PUT (if absent) ", client().Uri(call.key));
    int attempts = 0;
    CKPT_ASSIGN_OR_RETURN(HttpResponse resp, client().Send(call, &attempts));
    if (resp.status >= 200 && resp.status < 300) return absl::OkStatus();
    if (resp.status == 412) {
      if (attempts > 1) {
        // An earlier attempt may have been the one that created it and
        // lost its answer: ours if it holds our bytes.
        auto got = GetAll(path);
        if (got.ok() && got->size() == data.size() && std::memcmp(got->data(), data.data(), data.size()) == 0) {
          return absl::OkStatus();
        }
      }
      return absl::AlreadyExistsError(StrCat(client().Uri(call.key), " already exists"));
    }
    return client().ErrorOf(call, resp);
  }

  absl::StatusOr<std::string> GetAll(std::string_view path) override {
    CKPT_RETURN_IF_ERROR(Check(path));
    S3Call call;
    call.key = client().Key(path);
    call.what = StrCat("GET ", client().Uri(call.key));
    CKPT_ASSIGN_OR_RETURN(HttpResponse resp, client().Do(call));
    return std::move(resp.body);
  }

  absl::StatusOr<uint64_t> FileSize(std::string_view path) override {
    CKPT_RETURN_IF_ERROR(Check(path));
    CKPT_ASSIGN_OR_RETURN(HttpResponse h, Head(path, "stat"));
    uint64_t size = 0;
    CKPT_RETURN_IF_ERROR(SizeOf(h, path, &size));
    return size;
  }

  absl::StatusOr<std::vector<DirEntry>> List(std::string_view dir) override {
    if (!dir.empty()) CKPT_RETURN_IF_ERROR(Check(dir));
    const std::string prefix = DirPrefix(dir);
    std::map<std::string, bool> entries;
    CKPT_RETURN_IF_ERROR(ListKeys(prefix, true, [&](const S3ListPage& page, const std::string& what) {
      return AddDirectoryEntries(page, prefix, what, &entries);
    }));
    if (entries.empty() && !dir.empty()) {
      return absl::NotFoundError(StrCat("list ", client().Uri(prefix), ": no such directory (no object under it)"));
    }
    std::vector<DirEntry> out;
    out.reserve(entries.size());
    for (auto& [name, is_dir] : entries) out.push_back(DirEntry{name, is_dir});
    return out;
  }

  absl::Status Remove(std::string_view path) override {
    CKPT_RETURN_IF_ERROR(Check(path));
    // DELETE answers 204 for a missing key too: ask first, so that a
    // missing file is NotFound as on every other backend.
    CKPT_RETURN_IF_ERROR(Head(path, "remove").status());
    S3Call call;
    call.method = "DELETE";
    call.key = client().Key(path);
    call.what = StrCat("DELETE ", client().Uri(call.key));
    return client().Do(call).status();
  }

  absl::Status RemoveAll(std::string_view dir) override {
    if (dir.empty()) return absl::InvalidArgumentError("refusing to remove the storage root");
    CKPT_RETURN_IF_ERROR(Check(dir));
    const std::string prefix = DirPrefix(dir);
    // Unfinished uploads below it first, so none completes into the
    // emptied directory afterwards.
    CKPT_ASSIGN_OR_RETURN(std::vector<S3Upload> uploads, ListUploads(prefix));
    for (const S3Upload& u : uploads) CKPT_RETURN_IF_ERROR(AbortUpload(u.key, u.upload_id));
    std::vector<std::string> keys;
    CKPT_RETURN_IF_ERROR(ListKeys(prefix, false, [&](const S3ListPage& page, const std::string& what) {
      return AddKeysUnder(page, prefix, what, &keys);
    }));
    keys.push_back(client().Key(dir));  // a file of that name, as on a file system
    for (size_t i = 0; i < keys.size(); i += 1000) {
      CKPT_RETURN_IF_ERROR(
          DeleteBatch(std::vector<std::string>(keys.begin() + i, keys.begin() + std::min(keys.size(), i + 1000))));
    }
    return absl::OkStatus();
  }

  absl::Status SyncDir(std::string_view) override { return absl::OkStatus(); }

  StorageCapability* Capability(std::string_view name) override {
    return name == PendingUploads::kName ? static_cast<PendingUploads*>(this) : nullptr;
  }

  absl::StatusOr<std::vector<PendingUpload>> ListPending() override {
    CKPT_ASSIGN_OR_RETURN(std::vector<S3Upload> uploads, ListUploads(DirPrefix("")));
    std::vector<PendingUpload> out;
    const int64_t now = static_cast<int64_t>(std::time(nullptr));
    const std::string root = DirPrefix("");
    for (const S3Upload& u : uploads) {
      PendingUpload p;
      p.path = u.key.substr(root.size());
      p.upload_id = u.upload_id;
      const int64_t t = ParseIso8601(u.initiated);
      p.age_s = t < 0 ? -1 : std::max<int64_t>(0, now - t);
      out.push_back(std::move(p));
    }
    return out;
  }

  absl::Status AbortPending(const PendingUpload& upload) override {
    return AbortUpload(KeyOf(upload.path), upload.upload_id);
  }

  absl::Status AbortUpload(const std::string& key, const std::string& upload_id) {
    S3Call call;
    call.method = "DELETE";
    call.key = key;
    call.query = {{"uploadId", upload_id}};
    call.what = StrCat("AbortMultipartUpload ", client().Uri(key));
    absl::Status st = client().Do(call).status();
    return absl::IsNotFound(st) ? absl::OkStatus() : st;  // already gone
  }

  std::string KeyOf(std::string_view path) { return client().Key(path); }

  // Checks that the bucket answers with these credentials.
  absl::Status Probe() {
    S3Call call;
    call.query = {{"list-type", "2"}, {"max-keys", "1"}, {"prefix", DirPrefix("")}};
    call.what = StrCat("open ", uri_);
    return client().Do(call).status();
  }

 private:
  S3Client& client() { return s_->client; }

  static absl::Status Check(std::string_view path) {
    if (path.empty() || path.front() == '/' || path.back() == '/' || path.find("//") != std::string_view::npos ||
        path == ".." || absl::StartsWith(AV(path), "../") || absl::EndsWith(AV(path), "/..") ||
        path.find("/../") != std::string_view::npos || path.find('\0') != std::string_view::npos) {
      return absl::InvalidArgumentError(StrCat("bad s3 path '", path, "'"));
    }
    return absl::OkStatus();
  }

  std::string DirPrefix(std::string_view dir) {
    const std::string& p = client().cfg().prefix;
    if (dir.empty()) return p.empty() ? std::string() : StrCat(p, "/");
    return StrCat(client().Key(dir), "/");
  }

  absl::StatusOr<HttpResponse> Head(std::string_view path, std::string_view verb) {
    S3Call call;
    call.method = "HEAD";
    call.key = client().Key(path);
    call.what = StrCat(verb, " ", client().Uri(call.key));
    auto r = client().Do(call);
    if (!r.ok() && absl::IsNotFound(r.status())) {
      return absl::NotFoundError(StrCat(verb, " ", client().Uri(call.key), ": no such file"));
    }
    return r;
  }

  absl::Status SizeOf(const HttpResponse& h, std::string_view path, uint64_t* size) {
    auto cl = h.headers.find("content-length");
    int64_t n = -1;
    if (cl == h.headers.end() || !ParseInt64(cl->second, &n) || n < 0) {
      return absl::DataLossError(StrCat(client().Uri(client().Key(path)), ": the server gave no size"));
    }
    *size = static_cast<uint64_t>(n);
    return absl::OkStatus();
  }

  // A listing is one operation: its pages share one deadline, and it ends
  // after more pages than any checkpoint root needs (a server that says
  // "truncated" forever).
  static constexpr int kMaxListPages = 100000;  // 10^8 keys
  static absl::Status TooManyPages(const std::string& what) {
    return absl::DataLossError(
        StrCat(what, ": still truncated after ", kMaxListPages, " pages; refusing a listing that never ends"));
  }

  template <typename F>
  absl::Status ListKeys(const std::string& prefix, bool delimited, F&& on_page) {
    std::string token;
    const auto deadline = client().DeadlineFromNow();
    for (int pages = 0;; ++pages) {
      S3Call call;
      call.deadline = deadline;
      call.query = {{"list-type", "2"}, {"prefix", prefix}};
      if (delimited) call.query.emplace_back("delimiter", "/");
      if (!token.empty()) call.query.emplace_back("continuation-token", token);
      call.what = StrCat("list ", client().Uri(prefix), pages > 0 ? StrCat(" (page ", pages + 1, ")") : "");
      CKPT_ASSIGN_OR_RETURN(HttpResponse resp, client().Do(call));
      auto page = ParseListObjectsV2(resp.body);
      if (!page.ok()) return Annotate(page.status(), call.what);
      CKPT_RETURN_IF_ERROR(on_page(*page, StrCat(call.what, " from ", client().Endpoint())));
      if (!page->truncated) return absl::OkStatus();
      if (page->next_token == token) return absl::DataLossError(StrCat(call.what, ": the listing does not advance"));
      if (pages + 1 >= kMaxListPages) return TooManyPages(call.what);
      token = page->next_token;
    }
  }

  absl::StatusOr<std::vector<S3Upload>> ListUploads(const std::string& prefix) {
    std::vector<S3Upload> out;
    std::string key_marker, id_marker;
    const auto deadline = client().DeadlineFromNow();
    for (int pages = 0;; ++pages) {
      S3Call call;
      call.deadline = deadline;
      call.query = {{"uploads", ""}, {"prefix", prefix}};
      if (!key_marker.empty()) call.query.emplace_back("key-marker", key_marker);
      if (!id_marker.empty()) call.query.emplace_back("upload-id-marker", id_marker);
      call.what = StrCat("ListMultipartUploads ", client().Uri(prefix));
      CKPT_ASSIGN_OR_RETURN(HttpResponse resp, client().Do(call));
      auto page = ParseListMultipartUploads(resp.body);
      if (!page.ok()) return Annotate(page.status(), call.what);
      CKPT_RETURN_IF_ERROR(CheckUploadsUnder(*page, prefix, StrCat(call.what, " from ", client().Endpoint())));
      for (S3Upload& u : page->uploads) out.push_back(std::move(u));
      if (!page->truncated) return out;
      if (page->next_key_marker == key_marker && page->next_upload_id_marker == id_marker) {
        return absl::DataLossError(StrCat(call.what, ": the listing does not advance"));
      }
      if (pages + 1 >= kMaxListPages) return TooManyPages(call.what);
      key_marker = page->next_key_marker;
      id_marker = page->next_upload_id_marker;
    }
  }

  absl::Status DeleteBatch(const std::vector<std::string>& keys) {
    std::string xml = "<Delete><Quiet>true</Quiet>";
    for (const std::string& k : keys) StrAppend(&xml, "<Object><Key>", XmlEscape(k), "</Key></Object>");
    xml += "</Delete>";
    S3Call call;
    call.method = "POST";
    call.query = {{"delete", ""}};
    call.headers = {{"content-md5", Md5Base64(xml)}};
    call.body = absl::Span<const std::byte>(reinterpret_cast<const std::byte*>(xml.data()), xml.size());
    call.what = StrCat("DeleteObjects (", keys.size(), " keys) under ", client().Uri(keys.front()));
    CKPT_ASSIGN_OR_RETURN(HttpResponse resp, client().Do(call));
    auto errors = XmlElements(resp.body, "Error");
    if (!errors.ok()) return Annotate(errors.status(), call.what);
    for (std::string_view e : *errors) {
      auto key = XmlText(e, "Key");
      auto code = XmlText(e, "Code");
      if (code.ok() && *code == "NoSuchKey") continue;
      return absl::UnavailableError(StrCat(call.what, ": ", key.ok() ? *key : "?", ": ", code.ok() ? *code : "?"));
    }
    return absl::OkStatus();
  }

  std::string uri_;
  std::shared_ptr<S3Shared> s_;
};

}  // namespace

absl::StatusOr<std::shared_ptr<Storage>> OpenS3Storage(std::string_view uri) {
  CKPT_ASSIGN_OR_RETURN(S3Config cfg, ParseConfig(uri));
  auto storage = std::make_shared<S3Storage>(std::string(uri), std::move(cfg));
  CKPT_RETURN_IF_ERROR(storage->Probe());
  return std::shared_ptr<Storage>(std::move(storage));
}

CKPT_STORAGE_BACKEND(s3) {
  r.Add({"s3", "",
         "objects in an S3 bucket (AWS, Ceph RGW, MinIO): multipart uploads, ranged GETs, If-None-Match claims, SigV4",
         BackendCaps("s3", false, false, true)},
        OpenS3Storage);
}

}  // namespace ckpt
