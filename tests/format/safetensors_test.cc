// The safetensors header and index parsers, and the strict JSON reader
// under them: what the specification allows round-trips, everything else is
// refused with the file, the tensor and the byte offset.
#include "format/safetensors.h"

#include <gtest/gtest.h>

#include <algorithm>
#include <cstring>
#include <string>
#include <vector>

#include "util/json_reader.h"
#include "util/sha256.h"

namespace ckpt {
namespace {

TEST(Sha256, KnownAnswersAndAnyUpdateSplit) {
  auto hex = [](std::string_view s) {
    Sha256 h;
    h.Update(s.data(), s.size());
    return h.FinishHex();
  };
  EXPECT_EQ(hex(""), "e3b0c44298fc1c149afbf4c8996fb92427ae41e4649b934ca495991b7852b855");
  EXPECT_EQ(hex("abc"), "ba7816bf8f01cfea414140de5dae2223b00361a396177a9cb410ff61f20015ad");
  EXPECT_EQ(hex("abcdbcdecdefdefgefghfghighijhijkijkljklmklmnlmnomnopnopq"),
            "248d6a61d20638b8e5c026930c3e6039a33ce45964ff2167f6ecedd419db06c1");
  const std::string million(1000000, 'a');
  EXPECT_EQ(hex(million), "cdc76e5c9914fb9281a1c7e284d73e67f1809a48a497200e046d39ccc7112cd0");
  for (size_t split : {1u, 55u, 56u, 63u, 64u, 65u, 999u}) {
    Sha256 h;
    for (size_t at = 0; at < million.size(); at += split)
      h.Update(million.data() + at, std::min(split, million.size() - at));
    EXPECT_EQ(h.FinishHex(), "cdc76e5c9914fb9281a1c7e284d73e67f1809a48a497200e046d39ccc7112cd0") << split;
  }
  std::string h, name;
  EXPECT_TRUE(ParseSha256SumLine(std::string(64, 'a') + "  model.safetensors", &h, &name));
  EXPECT_EQ(name, "model.safetensors");
  EXPECT_TRUE(ParseSha256SumLine(std::string(64, 'F') + " *x.bin\r", &h, &name));
  EXPECT_EQ(h, std::string(64, 'f'));
  EXPECT_EQ(name, "x.bin");
  EXPECT_FALSE(ParseSha256SumLine(std::string(63, 'a') + "  x", &h, &name));
  EXPECT_FALSE(ParseSha256SumLine(std::string(64, 'g') + "  x", &h, &name));
  EXPECT_FALSE(ParseSha256SumLine(std::string(64, 'a') + "  ", &h, &name));
}

TEST(JsonReader, ParsesTheGrammarAndKeepsOrder) {
  auto v = ParseJson(R"( {"b": [1, -2.5e3, true, false, null], "a": {"x": "\u00e9\ud83d\ude00\n"}, "c": 0} )", "t");
  ASSERT_TRUE(v.ok()) << v.status();
  ASSERT_TRUE(v->is_object());
  ASSERT_EQ(v->members.size(), 3u);
  EXPECT_EQ(v->members[0].key, "b");
  EXPECT_EQ(v->Find("b")->items.size(), 5u);
  EXPECT_EQ(v->Find("b")->items[1].text, "-2.5e3");
  EXPECT_FALSE(v->Find("b")->items[1].AsUint64().has_value());
  EXPECT_EQ(v->Find("b")->items[0].AsUint64(), 1u);
  EXPECT_EQ(v->Find("a")->Find("x")->text, "\xc3\xa9\xf0\x9f\x98\x80\n");
  EXPECT_EQ(v->Find("c")->AsUint64(), 0u);
  EXPECT_EQ(ParseJson("18446744073709551615", "t")->AsUint64(), UINT64_MAX);
  EXPECT_FALSE(ParseJson("18446744073709551616", "t")->AsUint64().has_value());
}

TEST(JsonReader, RefusesWhatTheGrammarDoesNotAllowAndSaysWhere) {
  const char* bad[] = {
      "",
      "{",
      "{\"a\":1,}",
      "[1,]",
      "01",
      "1.",
      "-",
      "\"\x01\"",
      "\"\\x\"",
      "\"\\ud800\"",
      "\"\\udc00\"",
      "\"\xc0\xaf\"",
      "\"\xed\xa0\x80\"",
      "\"\xf5\x80\x80\x80\"",
      "nul",
      "{\"a\" 1}",
      "{1:2}",
      "[1] [2]",
      "\"abc",
      "{\"k\":1,\"k\":2}",
  };
  for (const char* b : bad) {
    auto v = ParseJson(b, "input.json");
    EXPECT_FALSE(v.ok()) << "accepted: " << b;
    if (!v.ok()) {
      EXPECT_NE(v.status().message().find("input.json: invalid JSON at byte offset"), std::string::npos);
    }
  }
  auto dup = ParseJson("{\"key\": 1, \"key\": 2}", "d");
  EXPECT_NE(dup.status().message().find("byte offset 11: duplicate member \"key\""), std::string::npos) << dup.status();
  std::string deep(100, '[');
  deep += std::string(100, ']');
  EXPECT_NE(ParseJson(deep, "d").status().message().find("nested deeper than 64"), std::string::npos);
  EXPECT_TRUE(ParseJson(std::string(64, '[') + std::string(64, ']'), "d").ok());
}

// A file made by hand from its parts.
std::string File(const std::string& json, size_t buffer_bytes) {
  std::string out(8, '\0');
  const uint64_t n = json.size();
  std::memcpy(out.data(), &n, 8);
  return out + json + std::string(buffer_bytes, '\x5a');
}

absl::StatusOr<SafetensorsFile> Decode(const std::string& bytes) {
  auto n = DecodeSafetensorsPrefix(reinterpret_cast<const std::byte*>(bytes.data()), bytes.size(), "m.safetensors");
  if (!n.ok()) return n.status();
  return DecodeSafetensorsHeader(std::string_view(bytes).substr(8, *n), bytes.size(), "m.safetensors");
}

TEST(Safetensors, WhatIsEncodedDecodesToTheSameTensors) {
  std::vector<SafetensorsTensor> ts(3);
  ts[0] = {"model.embed.weight", "BF16", DType::kBF16, 16, {4, 3}, 0, 24};
  ts[1] = {"model.norm", "F32", DType::kF32, 32, {5}, 24, 44};
  ts[2] = {"scalar", "I64", DType::kI64, 64, {}, 44, 52};
  const std::string header = EncodeSafetensorsHeader(ts, {{"format", "pt"}});
  EXPECT_EQ(header.size() % 8, 0u) << "the buffer starts 8-aligned";
  auto f = Decode(header + std::string(52, '\0'));
  ASSERT_TRUE(f.ok()) << f.status();
  EXPECT_EQ(f->data_start, header.size());
  EXPECT_EQ(f->metadata.at("format"), "pt");
  ASSERT_EQ(f->tensors.size(), 3u);
  for (size_t i = 0; i < 3; ++i) {
    EXPECT_EQ(f->tensors[i].name, ts[i].name);
    EXPECT_EQ(f->tensors[i].dtype, ts[i].dtype);
    EXPECT_EQ(f->tensors[i].shape, ts[i].shape);
    EXPECT_EQ(f->tensors[i].begin, ts[i].begin);
    EXPECT_EQ(f->tensors[i].end, ts[i].end);
  }
}

TEST(Safetensors, EveryDTypeOfTheSpecificationIsKnownAndSubByteSizesAreExact) {
  for (const char* name : {"BOOL", "U8",  "I8",  "F8_E5M2", "F8_E4M3", "F8_E8M0", "I16", "U16", "F16",     "BF16",
                           "I32",  "U32", "F32", "C64",     "F64",     "I64",     "U64", "F4",  "F6_E2M3", "F6_E3M2"}) {
    EXPECT_GT(SafetensorsDTypeBits(name), 0u) << name;
  }
  for (DType d : {DType::kF64, DType::kF32, DType::kF16, DType::kBF16, DType::kF8E4M3, DType::kF8E5M2, DType::kI64,
                  DType::kI32, DType::kI16, DType::kI8, DType::kU8, DType::kBool}) {
    EXPECT_EQ(SafetensorsDTypeBits(SafetensorsDTypeName(d)), 8 * DTypeSize(d)) << DTypeName(d);
  }
  auto f4 = Decode(File(R"({"q":{"dtype":"F4","shape":[3,2],"data_offsets":[0,3]}})", 3));
  ASSERT_TRUE(f4.ok()) << f4.status();
  EXPECT_FALSE(f4->tensors[0].dtype.has_value()) << "ckpt has no 4-bit type; the reader says so, not the parser";
  auto odd = Decode(File(R"({"q":{"dtype":"F6_E2M3","shape":[3],"data_offsets":[0,2]}})", 2));
  EXPECT_NE(odd.status().message().find("needs 18 bits"), std::string::npos) << odd.status();
}

TEST(Safetensors, BrokenFilesAreRefusedNamingTheFileTheTensorAndTheOffset) {
  struct Case {
    std::string bytes;
    std::string expect;
  };
  const std::string ok_a = R"("a":{"dtype":"F32","shape":[2],"data_offsets":[0,8]})";
  std::vector<Case> cases = {
      {"\x10\0\0", "too short"},
      {std::string("\xff\xff\0\0\0\0\0\0", 8) + "{}", "past the end of the file"},
      {std::string("\0\0\0\0\x01\0\0\0", 8), "over the limit"},
      {File("{" + ok_a + R"(,"b":{"dtype":"F32","shape":[2],"data_offsets":[4,12]}})", 12),
       "tensor 'b' (buffer bytes 4 to 12) overlaps tensor 'a'"},
      {File("{" + ok_a + R"(,"b":{"dtype":"F32","shape":[1],"data_offsets":[12,16]}})", 16),
       "buffer bytes 8 to 12 (file byte offset"},
      {File("{" + ok_a + "}", 9), "the last 1 bytes of the buffer"},
      {File(R"({"a":{"dtype":"F33","shape":[2],"data_offsets":[0,8]}})", 8), "tensor 'a': unknown dtype 'F33'"},
      {File(R"({"a":{"dtype":"F32","shape":[3],"data_offsets":[0,8]}})", 8), "F32 [3] needs 12 bytes"},
      {File(R"({"a":{"dtype":"F32","shape":[2],"data_offsets":[0,80]}})", 8), "lie outside the 8-byte buffer"},
      {File(R"({"a":{"dtype":"F32","shape":[-2],"data_offsets":[0,8]}})", 8), "shape holds '-2'"},
      {File(R"({"a":{"dtype":"F32","shape":[2.0],"data_offsets":[0,8]}})", 8), "shape holds '2.0'"},
      {File(R"({"a":{"dtype":"F32","shape":[1125899906842624,1125899906842624],"data_offsets":[0,8]}})", 8),
       "more than"},
      {File(R"({"a":{"dtype":"F32","shape":[2],"data_offsets":[8,0]}})", 8), "data_offsets [8, 0]"},
      {File(R"({"a":{"dtype":"F32","shape":[2]}})", 8), "needs dtype, shape and data_offsets"},
      {File(R"({"a":{"dtype":"F32","shape":[2],"data_offsets":[0,8],"x":1}})", 8), "unknown field 'x'"},
      {File(R"({"a":{"dtype":"F32","shape":[2],"data_offsets":[0,8]},"a":{}})", 8), "duplicate member \"a\""},
      {File(R"({"__metadata__":{"k":1}})", 0), "__metadata__ 'k' is not a string"},
      {File(R"([1,2])", 0), "not a JSON object"},
      {File(R"({"a":{"dtype":"F32","shape":[2],"data_offsets":[0,8]})", 8), "invalid JSON at byte offset"},
  };
  for (const Case& c : cases) {
    auto f = Decode(c.bytes);
    ASSERT_FALSE(f.ok()) << "accepted a file that should contain: " << c.expect;
    EXPECT_EQ(f.status().code(), absl::StatusCode::kDataLoss);
    EXPECT_NE(f.status().message().find("m.safetensors"), std::string::npos) << f.status();
    EXPECT_NE(f.status().message().find(c.expect), std::string::npos) << f.status();
  }
}

TEST(Safetensors, TheIndexRoundTripsAndNamesOnlyFilesBesideIt) {
  SafetensorsIndex idx;
  idx.total_size = 123456789012;
  idx.weight_map = {{"a", "model-00001-of-00002.safetensors"}, {"b", "model-00002-of-00002.safetensors"}};
  auto back = DecodeSafetensorsIndex(EncodeSafetensorsIndex(idx), "model.safetensors.index.json");
  ASSERT_TRUE(back.ok()) << back.status();
  EXPECT_EQ(back->total_size, idx.total_size);
  EXPECT_EQ(back->weight_map, idx.weight_map);
  for (const char* bad :
       {R"({"weight_map":{"a":"../x.safetensors"}})", R"({"weight_map":{"a":""}})", R"({"weight_map":{"a":3}})",
        R"({"metadata":{}})", R"({"metadata":{"total_size":-1},"weight_map":{}})"}) {
    auto r = DecodeSafetensorsIndex(bad, "model.safetensors.index.json");
    EXPECT_FALSE(r.ok()) << bad;
    EXPECT_NE(r.status().message().find("model.safetensors.index.json"), std::string::npos) << r.status();
  }
}

}  // namespace
}  // namespace ckpt
