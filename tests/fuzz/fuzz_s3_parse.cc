// libFuzzer target: what an S3 server and the AWS credentials file say —
// listings, upload listings, error bodies, InitiateMultipartUpload answers,
// ISO 8601 times and INI files. The first byte picks the reader.
#include <cstdint>
#include <map>
#include <string>
#include <vector>

#include "storage/roots/s3/s3_parse.h"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  if (size == 0) return 0;
  const std::string text(reinterpret_cast<const char*>(data) + 1, size - 1);
  switch (data[0] % 6) {
    case 0: {
      auto page = ckpt::ParseListObjectsV2(text);
      if (page.ok() && page->truncated && page->next_token.empty()) __builtin_trap();
      if (page.ok()) {
        // Whatever the server listed, nothing accepted lies outside the
        // prefix, and no accepted name is a path.
        const std::string prefix = "root/dir/";
        std::vector<std::string> keys;
        if (ckpt::AddKeysUnder(*page, prefix, "fuzz", &keys).ok()) {
          for (const std::string& k : keys) {
            if (k.compare(0, prefix.size(), prefix) != 0) __builtin_trap();
          }
        }
        std::map<std::string, bool> entries;
        if (ckpt::AddDirectoryEntries(*page, prefix, "fuzz", &entries).ok()) {
          for (const auto& [name, is_dir] : entries) {
            if (name.empty() || name == "." || name == ".." || name.find('/') != std::string::npos) __builtin_trap();
          }
        }
      }
      break;
    }
    case 1: {
      auto page = ckpt::ParseListMultipartUploads(text);
      if (page.ok()) {
        for (const auto& u : page->uploads) {
          if (u.key.empty() || u.upload_id.empty()) __builtin_trap();
        }
      }
      break;
    }
    case 2:
      (void)ckpt::ParseS3Error(text);
      break;
    case 3: {
      auto id = ckpt::ParseInitiateMultipartUpload(text);
      if (id.ok() && id->empty()) __builtin_trap();
      break;
    }
    case 4:
      (void)ckpt::ParseIso8601(text);
      break;
    default:
      (void)ckpt::ParseIniFile(text);
      break;
  }
  return 0;
}
