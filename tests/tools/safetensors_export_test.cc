// ckpt export --format safetensors against an independent reader: a
// synthetic dp=2,tp=2,pp=2 step with bf16 weights and fp32 Adam moments is
// exported, and tests/tools/check_safetensors.py (json + numpy, written from
// the specification) compares every element with the HDF5 export of the
// same step read by h5py.
#include <gtest/gtest.h>

#include <algorithm>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <filesystem>
#include <string>

#include "testutil/test_util.h"

#ifndef CKPT_BIN
#error "CKPT_BIN must name the ckpt executable"
#endif

namespace ckpt::testing {
namespace {

const std::string kBin = CKPT_BIN;
const std::string kCheck = std::string("/usr/bin/python3 ") + CHECK_SAFETENSORS_PY;

class SafetensorsExport : public ::testing::Test {
 protected:
  void SetUp() override {
    root_ = dir_.Join("root");
    CommandResult synth = RunCommand(kBin + " synth --out " + root_ +
                                     " --mesh dp=2,tp=2,pp=2 --params 3M --layers 2 --optimizer adam --step 7 "
                                     "--codec zstd --block-size 64K");
    ASSERT_EQ(synth.code, 0) << synth.out;
    ref_ = dir_.Join("ref.h5");
    CommandResult h5 = RunCommand(kBin + " export " + root_ + " --to " + ref_);
    ASSERT_EQ(h5.code, 0) << h5.out;
  }
  CommandResult Export(const std::string& out, const std::string& flags) {
    return RunCommand(kBin + " export " + root_ + " --format safetensors --to " + dir_.Join(out) + " " + flags);
  }
  CommandResult Check(const std::string& out, const std::string& flags) {
    return RunCommand(kCheck + " " + dir_.Join(out) + " " + ref_ + " " + flags);
  }
  TempDir dir_;
  std::string root_, ref_;
};

TEST_F(SafetensorsExport, EveryElementMatchesInOneFileAndInShards) {
  CommandResult one = Export("one", "--json");
  ASSERT_EQ(one.code, 0) << one.out;
  EXPECT_NE(one.out.find("\"shards\":1"), std::string::npos) << one.out;
  EXPECT_TRUE(std::filesystem::exists(dir_.Join("one/model.safetensors")));
  EXPECT_FALSE(std::filesystem::exists(dir_.Join("one/model.safetensors.index.json")));
  CommandResult c1 = Check("one", "--shards 1");
  EXPECT_EQ(c1.code, 0) << c1.out;
  EXPECT_NE(c1.out.find(": ok"), std::string::npos) << c1.out;

  // A small shard limit and a budget far below one tensor: many shards,
  // every tensor streamed in slabs, each whole in its shard.
  CommandResult many = Export("many", "--max-shard-size 2MB --budget 64K --checksums --json");
  ASSERT_EQ(many.code, 0) << many.out;
  CommandResult c2 = Check("many", "");
  EXPECT_EQ(c2.code, 0) << c2.out;
  EXPECT_TRUE(std::filesystem::exists(dir_.Join("many/model.safetensors.index.json")));
  const size_t at = many.out.find("\"shards\":");
  ASSERT_NE(at, std::string::npos) << many.out;
  const int shards = std::atoi(many.out.c_str() + at + 9);
  EXPECT_GE(shards, 3) << many.out;
  char last[64];
  std::snprintf(last, sizeof(last), "many/model-%05d-of-%05d.safetensors", shards, shards);
  EXPECT_TRUE(std::filesystem::exists(dir_.Join(last))) << last;
  // Each shard stays under the limit unless one tensor alone is larger.
  for (const auto& e : std::filesystem::directory_iterator(dir_.Join("many"))) {
    if (e.path().extension() != ".safetensors") continue;
    const std::string bytes = ReadFile(e.path().string());
    uint64_t header_len = 0;
    std::memcpy(&header_len, bytes.data(), 8);
    const std::string header = bytes.substr(8, header_len);
    size_t tensors = 0;
    for (size_t p = header.find("data_offsets"); p != std::string::npos; p = header.find("data_offsets", p + 1)) {
      ++tensors;
    }
    if (tensors > 1) EXPECT_LE(e.file_size(), 2'000'000u + 65536u) << e.path();
  }
  CommandResult sums = RunCommand("cd " + dir_.Join("many") + " && sha256sum -c SHA256SUMS");
  EXPECT_EQ(sums.code, 0) << sums.out;
  EXPECT_EQ(std::filesystem::exists(dir_.Join("many/model.safetensors")), false);
}

TEST_F(SafetensorsExport, CastsRoundToNearestEvenElementByElement) {
  for (const char* dtype : {"f32", "bf16", "f16"}) {
    const std::string out = std::string("cast-") + dtype;
    CommandResult e = Export(out, std::string("--dtype ") + dtype);
    ASSERT_EQ(e.code, 0) << e.out;
    CommandResult c = Check(out, std::string("--dtype ") + dtype);
    EXPECT_EQ(c.code, 0) << dtype << ": " << c.out;
  }
}

TEST_F(SafetensorsExport, OnlyExcludeAndRenameChooseAndNameTheTensors) {
  // The model without the optimizer state.
  CommandResult e = Export("model", "--exclude 'optimizer.*'");
  ASSERT_EQ(e.code, 0) << e.out;
  CommandResult ce = Check("model", "--exclude optimizer.");
  EXPECT_EQ(ce.code, 0) << ce.out;
  CommandResult o = Export("optim", "--only 'optimizer.*,lm_head.*'");
  ASSERT_EQ(o.code, 0) << o.out;
  EXPECT_NE(ReadFile(dir_.Join("optim/model.safetensors")).find("\"lm_head.weight\""), std::string::npos);
  EXPECT_EQ(ReadFile(dir_.Join("optim/model.safetensors")).find("\"model.norm.weight\""), std::string::npos);

  const std::string rules = dir_.Join("rename.txt");
  WriteFile(rules,
            "# exact first, then the first regex that matches\n"
            "model.embed_tokens.weight  transformer.wte.weight\n"
            "re:^model\\.layers\\.(\\d+)\\.  transformer.h.$1.\n"
            "re:^optimizer\\.state\\.  opt.\n");
  CommandResult r = Export("renamed", "--rename " + rules);
  ASSERT_EQ(r.code, 0) << r.out;
  CommandResult c = Check("renamed", "--rename " + rules);
  EXPECT_EQ(c.code, 0) << c.out;
  EXPECT_NE(ReadFile(dir_.Join("renamed/model.safetensors")).find("transformer.h.1."), std::string::npos);

  // Two tensors onto one name, or a rule file that cannot be read: usage errors.
  WriteFile(rules, "re:.* same\n");
  CommandResult clash = Export("clash", "--rename " + rules);
  EXPECT_EQ(clash.code, 2) << clash.out;
  EXPECT_NE(clash.out.find("would both be named 'same'"), std::string::npos) << clash.out;
  WriteFile(rules, "only-one-column\n");
  CommandResult bad = Export("bad", "--rename " + rules);
  EXPECT_EQ(bad.code, 2) << bad.out;
  EXPECT_NE(bad.out.find("rename.txt:1"), std::string::npos) << bad.out;
  EXPECT_EQ(Export("x", "--max-shard-size lots").code, 2);
  EXPECT_EQ(Export("x", "--dtype i32").code, 2);
  EXPECT_EQ(Export("x", "--only 'nothing*'").code, 2);
}

}  // namespace
}  // namespace ckpt::testing
