// A small streaming JSON writer for --json output.
#ifndef CKPT_UTIL_JSON_H_
#define CKPT_UTIL_JSON_H_

#include <cmath>
#include <cstdint>
#include <cstdio>
#include <string>
#include <string_view>
#include <vector>

namespace ckpt {

/// Builds compact-but-readable JSON. Keys and values alternate inside
/// objects; the writer inserts commas.
class JsonWriter {
 public:
  JsonWriter& BeginObject() { return Open('{'); }
  JsonWriter& EndObject() { return Close('}'); }
  JsonWriter& BeginArray() { return Open('['); }
  JsonWriter& EndArray() { return Close(']'); }

  JsonWriter& Key(std::string_view k) {
    Sep();
    Quote(k);
    out_ += ':';
    after_key_ = true;
    return *this;
  }
  JsonWriter& String(std::string_view v) {
    Sep();
    Quote(v);
    return *this;
  }
  JsonWriter& Int(int64_t v) {
    Sep();
    out_ += std::to_string(v);
    return *this;
  }
  JsonWriter& Double(double v) {
    Sep();
    if (!std::isfinite(v)) {
      out_ += "null";
    } else {
      char buf[32];
      std::snprintf(buf, sizeof(buf), "%.6g", v);
      out_ += buf;
    }
    return *this;
  }
  JsonWriter& Bool(bool v) {
    Sep();
    out_ += v ? "true" : "false";
    return *this;
  }
  JsonWriter& Null() {
    Sep();
    out_ += "null";
    return *this;
  }
  template <typename T>
  JsonWriter& Field(std::string_view k, const T& v) {
    Key(k);
    if constexpr (std::is_same_v<T, bool>) {
      return Bool(v);
    } else if constexpr (std::is_integral_v<T>) {
      return Int(static_cast<int64_t>(v));
    } else if constexpr (std::is_floating_point_v<T>) {
      return Double(v);
    } else {
      return String(v);
    }
  }
  const std::string& str() const { return out_; }

 private:
  JsonWriter& Open(char c) {
    Sep();
    out_ += c;
    first_.push_back(true);
    return *this;
  }
  JsonWriter& Close(char c) {
    out_ += c;
    first_.pop_back();
    return *this;
  }
  void Sep() {
    if (after_key_) {
      after_key_ = false;
      return;
    }
    if (!first_.empty()) {
      if (!first_.back()) out_ += ',';
      first_.back() = false;
    }
  }
  void Quote(std::string_view s) {
    out_ += '"';
    for (unsigned char c : s) {
      switch (c) {
        case '"':
          out_ += "\\\"";
          break;
        case '\\':
          out_ += "\\\\";
          break;
        case '\n':
          out_ += "\\n";
          break;
        case '\r':
          out_ += "\\r";
          break;
        case '\t':
          out_ += "\\t";
          break;
        default:
          if (c < 0x20) {
            char buf[8];
            std::snprintf(buf, sizeof(buf), "\\u%04x", c);
            out_ += buf;
          } else {
            out_ += static_cast<char>(c);
          }
      }
    }
    out_ += '"';
  }

  std::string out_;
  std::vector<bool> first_;
  bool after_key_ = false;
};

}  // namespace ckpt

#endif  // CKPT_UTIL_JSON_H_
