#include "util/strings.h"

#include <cctype>
#include <charconv>
#include <cmath>
#include <cstdlib>

namespace ckpt {

bool ParseInt64(std::string_view s, int64_t* out) {
  if (s.empty()) return false;
  auto [p, ec] = std::from_chars(s.data(), s.data() + s.size(), *out);
  return ec == std::errc() && p == s.data() + s.size();
}

bool ParseDouble(std::string_view s, double* out) {
  if (s.empty()) return false;
  auto [p, ec] = std::from_chars(s.data(), s.data() + s.size(), *out);
  return ec == std::errc() && p == s.data() + s.size();
}

std::string_view Trim(std::string_view t) {
  while (!t.empty() && std::isspace(static_cast<unsigned char>(t.back()))) t.remove_suffix(1);
  while (!t.empty() && std::isspace(static_cast<unsigned char>(t.front()))) t.remove_prefix(1);
  return t;
}

bool ParseHex64(std::string_view s, uint64_t* out) {
  if (!ConsumePrefix(&s, "0x") || s.size() != 16) return false;
  uint64_t v = 0;
  for (char c : s) {
    const int d = c >= '0' && c <= '9' ? c - '0' : (c >= 'a' && c <= 'f' ? c - 'a' + 10 : -1);
    if (d < 0) return false;
    v = (v << 4) | static_cast<uint64_t>(d);
  }
  *out = v;
  return true;
}

std::optional<double> ParseDuration(std::string_view text) {
  std::string_view t = Trim(text);
  double scale = 1;
  if (ConsumeSuffix(&t, "us")) {
    scale = 1e-6;
  } else if (ConsumeSuffix(&t, "ms")) {
    scale = 1e-3;
  } else if (ConsumeSuffix(&t, "s")) {
    scale = 1;
  } else if (ConsumeSuffix(&t, "m")) {
    scale = 60;
  } else if (ConsumeSuffix(&t, "h")) {
    scale = 3600;
  } else if (ConsumeSuffix(&t, "d")) {
    scale = 86400;
  }
  double v = 0;
  if (!ParseDouble(t, &v) || v < 0 || !std::isfinite(v)) return std::nullopt;
  return v * scale;
}

std::optional<int64_t> ParseByteCount(std::string_view text, bool binary) {
  std::string_view t = Trim(text);
  if (!ConsumeSuffix(&t, "iB") && !ConsumeSuffix(&t, "B")) {
    (void)ConsumeSuffix(&t, "b");
  }
  const double base = binary ? 1024.0 : 1000.0;
  double mult = 1;
  if (!t.empty()) {
    switch (std::toupper(static_cast<unsigned char>(t.back()))) {
      case 'K':
        mult = base;
        break;
      case 'M':
        mult = base * base;
        break;
      case 'G':
        mult = base * base * base;
        break;
      case 'T':
        mult = base * base * base * base;
        break;
      default:
        break;
    }
    if (mult != 1) t.remove_suffix(1);
  }
  double v = 0;
  if (!ParseDouble(t, &v) || v < 0 || !std::isfinite(v) || v * mult > 0x1p62) return std::nullopt;
  return static_cast<int64_t>(std::llround(v * mult));
}

bool GlobMatch(std::string_view pattern, std::string_view text) {
  size_t p = 0, t = 0, star = std::string_view::npos, mark = 0;
  while (t < text.size()) {
    if (p < pattern.size() && (pattern[p] == '?' || pattern[p] == text[t])) {
      ++p;
      ++t;
    } else if (p < pattern.size() && pattern[p] == '*') {
      star = p++;
      mark = t;
    } else if (star != std::string_view::npos) {
      p = star + 1;
      t = ++mark;
    } else {
      return false;
    }
  }
  while (p < pattern.size() && pattern[p] == '*') ++p;
  return p == pattern.size();
}

std::string Printable(std::string_view s) {
  std::string out;
  out.reserve(s.size());
  auto escape = [&](unsigned char c) {
    static constexpr char kHex[] = "0123456789abcdef";
    out += "\\x";
    out += kHex[c >> 4];
    out += kHex[c & 15];
  };
  for (size_t i = 0; i < s.size(); ++i) {
    const auto c = static_cast<unsigned char>(s[i]);
    if (c < 0x20 || c == 0x7f || c == '\\') {
      escape(c);
    } else if (c == 0xc2 && i + 1 < s.size() && static_cast<unsigned char>(s[i + 1]) >= 0x80 &&
               static_cast<unsigned char>(s[i + 1]) <= 0x9f) {
      escape(c);  // a C1 control character, UTF-8 encoded
      escape(static_cast<unsigned char>(s[++i]));
    } else {
      out += static_cast<char>(c);
    }
  }
  return out;
}

std::string XmlEscape(std::string_view s) {
  std::string out;
  out.reserve(s.size());
  for (char c : s) {
    switch (c) {
      case '&':
        out += "&amp;";
        break;
      case '<':
        out += "&lt;";
        break;
      case '>':
        out += "&gt;";
        break;
      case '"':
        out += "&quot;";
        break;
      case '\'':
        out += "&apos;";
        break;
      default:
        out += c;
    }
  }
  return out;
}

}  // namespace ckpt
