// Reading what an S3 server and the AWS configuration files say: the XML
// bodies of errors, listings and multipart answers, and the INI credentials
// file. Every input is untrusted: a malformed body is an error naming what
// was expected, never a crash (fuzzed by tests/fuzz/s3_parse_fuzz.cc).
#ifndef CKPT_STORAGE_ROOTS_S3_S3_PARSE_H_
#define CKPT_STORAGE_ROOTS_S3_S3_PARSE_H_

#include <cstdint>
#include <map>
#include <string>
#include <string_view>
#include <vector>

#include "absl/status/statusor.h"

namespace ckpt {

/// The text of each element named `tag` directly or deeply inside `xml`
/// (outermost occurrences, in order), entities not yet decoded. Attributes
/// are skipped; self-closing elements give "". An unterminated element is
/// an error.
absl::StatusOr<std::vector<std::string_view>> XmlElements(std::string_view xml, std::string_view tag);

/// The decoded text of the first element `tag` in `xml`; "" when absent.
absl::StatusOr<std::string> XmlText(std::string_view xml, std::string_view tag);

/// Decodes &amp; &lt; &gt; &quot; &apos; and numeric character references.
absl::StatusOr<std::string> XmlDecode(std::string_view text);

/// An S3 error body: <Error><Code>..</Code><Message>..</Message></Error>.
struct S3ErrorBody {
  std::string code;
  std::string message;
  std::string request_id;
};
/// Empty fields when the body is not an error document.
S3ErrorBody ParseS3Error(std::string_view xml);

struct S3ListedObject {
  std::string key;
  uint64_t size = 0;
};
struct S3ListPage {
  std::vector<S3ListedObject> objects;
  std::vector<std::string> prefixes;  ///< CommonPrefixes (with the trailing delimiter)
  bool truncated = false;
  std::string next_token;  ///< NextContinuationToken
};
/// A ListObjectsV2 answer.
absl::StatusOr<S3ListPage> ParseListObjectsV2(std::string_view xml);

/// Adds the entries of one page of a delimited listing of the directory
/// `prefix` ("" for the whole bucket, else ending in '/') to `entries`
/// (name -> is a directory). Every key and common prefix must start with
/// `prefix`: a server or proxy that drops the prefix must not make another
/// directory's keys look like this one's, so a foreign key is DataLoss
/// naming it (escaped) and `what`, and so is a name that is empty, "." or
/// "..". A key with a '/' past the prefix (a server that ignored the
/// delimiter) counts as the directory of its first component; the key that
/// is `prefix` itself (a folder marker) is no entry.
absl::Status AddDirectoryEntries(const S3ListPage& page, std::string_view prefix, std::string_view what,
                                 std::map<std::string, bool>* entries);

/// Appends the object keys of one page of an undelimited listing of
/// `prefix` to `keys`, each checked to start with `prefix` as above: only
/// keys proven under a directory are ever deleted with it.
absl::Status AddKeysUnder(const S3ListPage& page, std::string_view prefix, std::string_view what,
                          std::vector<std::string>* keys);

struct S3Upload {
  std::string key;
  std::string upload_id;
  std::string initiated;  ///< ISO 8601, as the server wrote it
};
struct S3UploadPage {
  std::vector<S3Upload> uploads;
  bool truncated = false;
  std::string next_key_marker;
  std::string next_upload_id_marker;
};
/// A ListMultipartUploads answer.
absl::StatusOr<S3UploadPage> ParseListMultipartUploads(std::string_view xml);

/// DataLoss naming the first upload of `page` whose key does not start
/// with `prefix` (and `what`), as for listings of objects.
absl::Status CheckUploadsUnder(const S3UploadPage& page, std::string_view prefix, std::string_view what);

/// The UploadId of an InitiateMultipartUpload answer.
absl::StatusOr<std::string> ParseInitiateMultipartUpload(std::string_view xml);

/// Seconds since the epoch of an ISO 8601 time ("2026-12-02T05:30:00.123Z");
/// -1 when it is not one.
int64_t ParseIso8601(std::string_view s);

/// The sections of an AWS credentials/config file: [name] -> key -> value
/// ("[profile name]" of the config file is stored as "name"). Comments
/// ('#', ';') and blank lines are skipped; a line that is neither is an
/// error naming its number.
absl::StatusOr<std::map<std::string, std::map<std::string, std::string>>> ParseIniFile(std::string_view text);

}  // namespace ckpt

#endif  // CKPT_STORAGE_ROOTS_S3_S3_PARSE_H_
