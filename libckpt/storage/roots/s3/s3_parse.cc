#include "storage/roots/s3/s3_parse.h"

#include <ctime>
#include <utility>

#include "absl/strings/ascii.h"
#include "absl/strings/match.h"
#include "util/errors.h"
#include "util/strings.h"

namespace ckpt {
namespace {

// Finds the next "<tag" that is an element start of exactly `tag`
// (followed by '>', '/', or whitespace), from `pos`.
size_t FindOpen(std::string_view xml, std::string_view tag, size_t pos) {
  while (true) {
    pos = xml.find('<', pos);
    if (pos == std::string_view::npos) return pos;
    if (xml.compare(pos + 1, tag.size(), tag) == 0) {
      if (pos + 1 + tag.size() >= xml.size()) return pos;  // cut off: the caller finds no '>'
      const char c = xml[pos + 1 + tag.size()];
      if (c == '>' || c == '/' || c == ' ' || c == '\t' || c == '\r' || c == '\n') return pos;
    }
    ++pos;
  }
}

void AppendUtf8(std::string* out, uint32_t cp) {
  if (cp < 0x80) {
    *out += static_cast<char>(cp);
  } else if (cp < 0x800) {
    *out += static_cast<char>(0xC0 | (cp >> 6));
    *out += static_cast<char>(0x80 | (cp & 0x3F));
  } else if (cp < 0x10000) {
    *out += static_cast<char>(0xE0 | (cp >> 12));
    *out += static_cast<char>(0x80 | ((cp >> 6) & 0x3F));
    *out += static_cast<char>(0x80 | (cp & 0x3F));
  } else {
    *out += static_cast<char>(0xF0 | (cp >> 18));
    *out += static_cast<char>(0x80 | ((cp >> 12) & 0x3F));
    *out += static_cast<char>(0x80 | ((cp >> 6) & 0x3F));
    *out += static_cast<char>(0x80 | (cp & 0x3F));
  }
}

absl::StatusOr<bool> ParseBool(std::string_view xml, std::string_view tag) {
  CKPT_ASSIGN_OR_RETURN(std::string v, XmlText(xml, tag));
  if (v.empty() || v == "false") return false;
  if (v == "true") return true;
  return absl::DataLossError(StrCat("S3 answer: <", tag, "> is '", v.substr(0, 40), "', not true or false"));
}

}  // namespace

absl::StatusOr<std::vector<std::string_view>> XmlElements(std::string_view xml, std::string_view tag) {
  std::vector<std::string_view> out;
  size_t pos = 0;
  const std::string close = StrCat("</", tag, ">");
  while (true) {
    pos = FindOpen(xml, tag, pos);
    if (pos == std::string_view::npos) return out;
    const size_t gt = xml.find('>', pos);
    if (gt == std::string_view::npos) {
      return absl::DataLossError(StrCat("S3 answer: <", tag, "> at byte offset ", pos, " is not terminated"));
    }
    if (xml[gt - 1] == '/') {  // <Tag/>
      out.emplace_back();
      pos = gt + 1;
      continue;
    }
    // Elements of the same name do not nest in S3's documents.
    const size_t end = xml.find(close, gt + 1);
    if (end == std::string_view::npos) {
      return absl::DataLossError(StrCat("S3 answer: <", tag, "> at byte offset ", pos, " has no </", tag, ">"));
    }
    out.push_back(xml.substr(gt + 1, end - gt - 1));
    pos = end + close.size();
  }
}

absl::StatusOr<std::string> XmlDecode(std::string_view text) {
  std::string out;
  out.reserve(text.size());
  for (size_t i = 0; i < text.size(); ++i) {
    if (text[i] != '&') {
      out += text[i];
      continue;
    }
    const size_t semi = text.find(';', i);
    if (semi == std::string_view::npos || semi - i > 12) {
      return absl::DataLossError(StrCat("S3 answer: a bare '&' at byte offset ", i, " of a text"));
    }
    std::string_view ent = text.substr(i + 1, semi - i - 1);
    if (ent == "amp") {
      out += '&';
    } else if (ent == "lt") {
      out += '<';
    } else if (ent == "gt") {
      out += '>';
    } else if (ent == "quot") {
      out += '"';
    } else if (ent == "apos") {
      out += '\'';
    } else if (!ent.empty() && ent[0] == '#') {
      uint32_t cp = 0;
      const bool hex = ent.size() > 1 && (ent[1] == 'x' || ent[1] == 'X');
      std::string_view digits = ent.substr(hex ? 2 : 1);
      if (digits.empty()) return absl::DataLossError(StrCat("S3 answer: empty character reference at ", i));
      for (char c : digits) {
        int d;
        if (c >= '0' && c <= '9') {
          d = c - '0';
        } else if (hex && c >= 'a' && c <= 'f') {
          d = c - 'a' + 10;
        } else if (hex && c >= 'A' && c <= 'F') {
          d = c - 'A' + 10;
        } else {
          return absl::DataLossError(StrCat("S3 answer: bad character reference '&", ent, ";'"));
        }
        cp = cp * (hex ? 16 : 10) + static_cast<uint32_t>(d);
        if (cp > 0x10FFFF) return absl::DataLossError(StrCat("S3 answer: character reference out of range"));
      }
      AppendUtf8(&out, cp);
    } else {
      return absl::DataLossError(StrCat("S3 answer: unknown entity '&", ent.substr(0, 12), ";'"));
    }
    i = semi;
  }
  return out;
}

absl::StatusOr<std::string> XmlText(std::string_view xml, std::string_view tag) {
  CKPT_ASSIGN_OR_RETURN(std::vector<std::string_view> els, XmlElements(xml, tag));
  if (els.empty()) return std::string();
  return XmlDecode(els.front());
}

S3ErrorBody ParseS3Error(std::string_view xml) {
  S3ErrorBody e;
  auto err = XmlElements(xml, "Error");
  if (!err.ok() || err->empty()) return e;
  const std::string_view body = err->front();
  if (auto v = XmlText(body, "Code"); v.ok()) e.code = *v;
  if (auto v = XmlText(body, "Message"); v.ok()) e.message = *v;
  if (auto v = XmlText(body, "RequestId"); v.ok()) e.request_id = *v;
  return e;
}

absl::StatusOr<S3ListPage> ParseListObjectsV2(std::string_view xml) {
  if (FindOpen(xml, "ListBucketResult", 0) == std::string_view::npos) {
    return absl::DataLossError("S3 answer: a listing without <ListBucketResult>");
  }
  S3ListPage page;
  CKPT_ASSIGN_OR_RETURN(std::vector<std::string_view> contents, XmlElements(xml, "Contents"));
  for (std::string_view c : contents) {
    S3ListedObject o;
    CKPT_ASSIGN_OR_RETURN(o.key, XmlText(c, "Key"));
    CKPT_ASSIGN_OR_RETURN(std::string size, XmlText(c, "Size"));
    int64_t n = 0;
    if (o.key.empty() || !ParseInt64(size, &n) || n < 0) {
      return absl::DataLossError(StrCat("S3 answer: a listed object without a key or size ('", o.key.substr(0, 80),
                                        "', size '", size.substr(0, 20), "')"));
    }
    o.size = static_cast<uint64_t>(n);
    page.objects.push_back(std::move(o));
  }
  CKPT_ASSIGN_OR_RETURN(std::vector<std::string_view> prefixes, XmlElements(xml, "CommonPrefixes"));
  for (std::string_view p : prefixes) {
    CKPT_ASSIGN_OR_RETURN(std::string pre, XmlText(p, "Prefix"));
    page.prefixes.push_back(std::move(pre));
  }
  CKPT_ASSIGN_OR_RETURN(page.truncated, ParseBool(xml, "IsTruncated"));
  CKPT_ASSIGN_OR_RETURN(page.next_token, XmlText(xml, "NextContinuationToken"));
  if (page.truncated && page.next_token.empty()) {
    return absl::DataLossError("S3 answer: a truncated listing without <NextContinuationToken>");
  }
  return page;
}

namespace {

absl::Status Foreign(std::string_view kind, std::string_view key, std::string_view prefix, std::string_view what) {
  return absl::DataLossError(StrCat(what, ": the server listed ", kind, " '", Printable(key.substr(0, 512)),
                                    "', which is not under the prefix asked for ('", Printable(prefix),
                                    "'); refusing a listing that names another directory's keys"));
}

// The first path component of `rest` (a key past its directory's prefix)
// and whether more follows it.
std::pair<std::string_view, bool> FirstComponent(std::string_view rest) {
  const size_t slash = rest.find('/');
  if (slash == std::string_view::npos) return {rest, false};
  return {rest.substr(0, slash), true};
}

bool BadName(std::string_view name) { return name.empty() || name == "." || name == ".."; }

}  // namespace

absl::Status AddDirectoryEntries(const S3ListPage& page, std::string_view prefix, std::string_view what,
                                 std::map<std::string, bool>* entries) {
  for (const S3ListedObject& o : page.objects) {
    std::string_view rest = o.key;
    if (!ConsumePrefix(&rest, prefix)) return Foreign("the key", o.key, prefix, what);
    if (rest.empty()) continue;  // the directory's own marker
    const auto [name, deeper] = FirstComponent(rest);
    if (BadName(name)) return Foreign("the key", o.key, prefix, what);
    bool& is_dir = (*entries)[std::string(name)];
    is_dir = is_dir || deeper;
  }
  for (const std::string& p : page.prefixes) {
    std::string_view rest = p;
    if (!ConsumePrefix(&rest, prefix)) return Foreign("the common prefix", p, prefix, what);
    const auto [name, deeper] = FirstComponent(rest);
    (void)deeper;
    if (BadName(name)) return Foreign("the common prefix", p, prefix, what);
    (*entries)[std::string(name)] = true;
  }
  return absl::OkStatus();
}

absl::Status AddKeysUnder(const S3ListPage& page, std::string_view prefix, std::string_view what,
                          std::vector<std::string>* keys) {
  for (const S3ListedObject& o : page.objects) {
    if (!absl::StartsWith(o.key, AV(prefix))) return Foreign("the key", o.key, prefix, what);
    keys->push_back(o.key);
  }
  return absl::OkStatus();
}

absl::Status CheckUploadsUnder(const S3UploadPage& page, std::string_view prefix, std::string_view what) {
  for (const S3Upload& u : page.uploads) {
    if (!absl::StartsWith(u.key, AV(prefix))) return Foreign("the upload of", u.key, prefix, what);
  }
  return absl::OkStatus();
}

absl::StatusOr<S3UploadPage> ParseListMultipartUploads(std::string_view xml) {
  if (FindOpen(xml, "ListMultipartUploadsResult", 0) == std::string_view::npos) {
    return absl::DataLossError("S3 answer: an upload listing without <ListMultipartUploadsResult>");
  }
  S3UploadPage page;
  CKPT_ASSIGN_OR_RETURN(std::vector<std::string_view> uploads, XmlElements(xml, "Upload"));
  for (std::string_view u : uploads) {
    S3Upload up;
    CKPT_ASSIGN_OR_RETURN(up.key, XmlText(u, "Key"));
    CKPT_ASSIGN_OR_RETURN(up.upload_id, XmlText(u, "UploadId"));
    CKPT_ASSIGN_OR_RETURN(up.initiated, XmlText(u, "Initiated"));
    if (up.key.empty() || up.upload_id.empty()) {
      return absl::DataLossError("S3 answer: a listed upload without a key or upload id");
    }
    page.uploads.push_back(std::move(up));
  }
  CKPT_ASSIGN_OR_RETURN(page.truncated, ParseBool(xml, "IsTruncated"));
  CKPT_ASSIGN_OR_RETURN(page.next_key_marker, XmlText(xml, "NextKeyMarker"));
  CKPT_ASSIGN_OR_RETURN(page.next_upload_id_marker, XmlText(xml, "NextUploadIdMarker"));
  if (page.truncated && page.next_key_marker.empty()) {
    return absl::DataLossError("S3 answer: a truncated upload listing without <NextKeyMarker>");
  }
  return page;
}

absl::StatusOr<std::string> ParseInitiateMultipartUpload(std::string_view xml) {
  CKPT_ASSIGN_OR_RETURN(std::string id, XmlText(xml, "UploadId"));
  if (id.empty()) return absl::DataLossError("S3 answer: InitiateMultipartUpload without <UploadId>");
  return id;
}

int64_t ParseIso8601(std::string_view s) {
  // YYYY-MM-DDTHH:MM:SS[.fff]Z
  if (s.size() < 20) return -1;
  auto num = [&](size_t at, size_t len) -> int {
    int v = 0;
    for (size_t i = at; i < at + len; ++i) {
      if (s[i] < '0' || s[i] > '9') return -1;
      v = v * 10 + (s[i] - '0');
    }
    return v;
  };
  if (s[4] != '-' || s[7] != '-' || s[10] != 'T' || s[13] != ':' || s[16] != ':') return -1;
  std::tm tm{};
  const int y = num(0, 4), mo = num(5, 2), d = num(8, 2), h = num(11, 2), mi = num(14, 2), se = num(17, 2);
  if (y < 1970 || mo < 1 || mo > 12 || d < 1 || d > 31 || h < 0 || h > 23 || mi < 0 || mi > 59 || se < 0 || se > 60) {
    return -1;
  }
  tm.tm_year = y - 1900;
  tm.tm_mon = mo - 1;
  tm.tm_mday = d;
  tm.tm_hour = h;
  tm.tm_min = mi;
  tm.tm_sec = se;
  return static_cast<int64_t>(timegm(&tm));
}

absl::StatusOr<std::map<std::string, std::map<std::string, std::string>>> ParseIniFile(std::string_view text) {
  std::map<std::string, std::map<std::string, std::string>> out;
  std::string section;
  bool have_section = false;
  int line_no = 0;
  size_t pos = 0;
  while (pos <= text.size()) {
    size_t nl = text.find('\n', pos);
    if (nl == std::string_view::npos) nl = text.size();
    std::string_view line = Trim(text.substr(pos, nl - pos));
    pos = nl + 1;
    ++line_no;
    if (line.empty() || line[0] == '#' || line[0] == ';') continue;
    if (line[0] == '[') {
      if (line.back() != ']') return absl::InvalidArgumentError(StrCat("line ", line_no, ": a section without ']'"));
      std::string_view name = Trim(line.substr(1, line.size() - 2));
      if (ConsumePrefix(&name, "profile ")) name = Trim(name);
      section = std::string(name);
      have_section = true;
      out[section];
      continue;
    }
    const size_t eq = line.find('=');
    if (eq == std::string_view::npos) {
      return absl::InvalidArgumentError(StrCat("line ", line_no, ": neither a [section] nor key = value"));
    }
    if (!have_section) return absl::InvalidArgumentError(StrCat("line ", line_no, ": a key before any [section]"));
    std::string key = absl::AsciiStrToLower(AV(Trim(line.substr(0, eq))));
    out[section][key] = std::string(Trim(line.substr(eq + 1)));
  }
  return out;
}

}  // namespace ckpt
