// ckpt and Hugging Face safetensors. Export against an independent reader: a
// synthetic dp=2,tp=2,pp=2 step with bf16 weights and fp32 Adam moments is
// exported, and tests/tools/check_safetensors.py (json + numpy, written from
// the specification) compares every element with the HDF5 export of the
// same step read by h5py.
// A model is also read in place (safetensors:// or its plain path): restored
// onto other meshes, verified against SHA256SUMS, row slabs read with little
// more than their rows, and broken files refused by name.
#include <gtest/gtest.h>

#include <algorithm>
#include <atomic>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <filesystem>
#include <string>
#include <thread>
#include <vector>

#include "ckpt/checkpointer.h"
#include "ckpt/safetensors.h"
#include "testutil/test_util.h"

#ifndef CKPT_BIN
#error "CKPT_BIN must name the ckpt executable"
#endif

namespace ckpt::testing {
namespace {

const std::string kBin = CKPT_BIN;
const std::string kCheck = std::string("/usr/bin/python3 ") + CHECK_SAFETENSORS_PY;

// The model every test reads is made once per program (synth, then an
// HDF5 export as the reference): the tests only read it and write their
// outputs into a directory of their own. Under ThreadSanitizer, which runs
// the whole program at once, this saves four of five syntheses.
class SafetensorsExport : public ::testing::Test {
 protected:
  static void SetUpTestSuite() {
    model_ = new TempDir;
    CommandResult synth = RunCommand(kBin + " synth --out " + model_->Join("root") +
                                     " --mesh dp=2,tp=2,pp=2 --params 3M --layers 2 --optimizer adam --step 7 "
                                     "--codec zstd --block-size 64K");
    if (synth.code != 0) {
      setup_error_ = "ckpt synth: " + synth.out;
      return;
    }
    CommandResult h5 = RunCommand(kBin + " export " + model_->Join("root") + " --to " + model_->Join("ref.h5"));
    if (h5.code != 0) setup_error_ = "ckpt export --to ref.h5: " + h5.out;
  }
  static void TearDownTestSuite() {
    delete model_;
    model_ = nullptr;
  }
  void SetUp() override {
    ASSERT_TRUE(setup_error_.empty()) << setup_error_;
    root_ = model_->Join("root");
    ref_ = model_->Join("ref.h5");
  }
  CommandResult Export(const std::string& out, const std::string& flags) {
    return RunCommand(kBin + " export " + root_ + " --format safetensors --to " + dir_.Join(out) + " " + flags);
  }
  CommandResult Check(const std::string& out, const std::string& flags) {
    return RunCommand(kCheck + " " + dir_.Join(out) + " " + ref_ + " " + flags);
  }
  static inline TempDir* model_ = nullptr;
  static inline std::string setup_error_;
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
    if (tensors > 1) {
      EXPECT_LE(e.file_size(), 2'000'000u + 65536u) << e.path();
    }
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

// Finding: an export into a directory that held an earlier multi-shard
// export wrote model.safetensors and left the old index, shards and
// SHA256SUMS: every reader (ckpt, and a Hugging Face loader that prefers the
// index) got the older step, and verify said ok. The directory is the
// export's own: a second export is refused, or with --overwrite replaces the
// first whole; files that are no export's stay.
TEST_F(SafetensorsExport, ASecondExportIntoOneDirectoryIsRefusedOrReplacesTheFirst) {
  ASSERT_EQ(Export("hf", "--max-shard-size 2MB --checksums").code, 0);
  const std::string hf = dir_.Join("hf");
  WriteFile(hf + "/config.json", "{\"model_type\": \"test\"}\n");
  auto listing = [&] {
    std::vector<std::string> names;
    for (const auto& e : std::filesystem::directory_iterator(hf)) names.push_back(e.path().filename().string());
    std::sort(names.begin(), names.end());
    return names;
  };
  const std::vector<std::string> first = listing();
  ASSERT_GT(first.size(), 3u);
  // Another step of another model.
  const std::string other = dir_.Join("other");
  CommandResult synth = RunCommand(kBin + " synth --out " + other + " --params 1M --layers 1 --step 9 --seed 5");
  ASSERT_EQ(synth.code, 0) << synth.out;
  const std::string again = kBin + " export " + other + " --format safetensors --to " + hf;
  CommandResult refused = RunCommand(again);
  EXPECT_EQ(refused.code, 2) << refused.out;
  EXPECT_NE(refused.out.find("already holds an export"), std::string::npos) << refused.out;
  EXPECT_EQ(listing(), first);
  CommandResult replaced = RunCommand(again + " --overwrite");
  ASSERT_EQ(replaced.code, 0) << replaced.out;
  EXPECT_EQ(listing(), (std::vector<std::string>{"config.json", "model.safetensors"}));
  EXPECT_EQ(ReadFile(hf + "/config.json"), "{\"model_type\": \"test\"}\n");
  CommandResult same = RunCommand(kBin + " diff --tensors-only " + other + " " + hf);
  EXPECT_EQ(same.code, 0) << "every reader sees the new step only: " << same.out;
  EXPECT_NE(same.out.find(", 0 different tensors"), std::string::npos) << same.out;
  CommandResult list = RunCommand(kBin + " list safetensors://" + hf);
  EXPECT_NE(list.out.find("9 "), std::string::npos) << list.out;
  EXPECT_EQ(RunCommand(kBin + " verify " + hf).code, 0);
}

// The export read in place (safetensors:// or the plain path): restored onto
// other meshes, verified against SHA256SUMS, and a row slab of a large
// tensor read with little more than its rows.
TEST_F(SafetensorsExport, AModelIsReadInPlaceOntoAnyMesh) {
  ASSERT_EQ(Export("hf", "--max-shard-size 2MB --checksums").code, 0);
  const std::string hf = dir_.Join("hf");
  for (const char* mesh : {"tp=3", "dp=5", "dp=2,tp=2,pp=2"}) {
    CommandResult r = RunCommand(kBin + " restore-check " + hf + " --mesh " + mesh);
    EXPECT_EQ(r.code, 0) << mesh << ": " << r.out;
    EXPECT_NE(r.out.find("all elements match"), std::string::npos) << r.out;
  }
  CommandResult stats = RunCommand(kBin + " stats " + hf);
  EXPECT_EQ(stats.code, 0) << stats.out;
  EXPECT_NE(stats.out.find("model.norm.weight"), std::string::npos) << stats.out;
  CommandResult same = RunCommand(kBin + " diff --tensors-only " + root_ + " " + hf);
  EXPECT_EQ(same.code, 0) << "every tensor equal to the step it came from: " << same.out;
  CommandResult list = RunCommand(kBin + " list safetensors://" + hf);
  EXPECT_EQ(list.code, 0) << list.out;
  EXPECT_NE(list.out.find("7 "), std::string::npos) << "the step `ckpt export` recorded: " << list.out;
  CommandResult v = RunCommand(kBin + " verify " + hf);
  EXPECT_EQ(v.code, 0) << v.out;
  EXPECT_NE(v.out.find("carry no checksums of their own; "), std::string::npos) << v.out;
  EXPECT_NE(v.out.find("matched SHA256SUMS"), std::string::npos) << v.out;

  // A flipped byte inside a tensor: only SHA256SUMS can tell, and does.
  std::string victim;
  for (const auto& e : std::filesystem::directory_iterator(hf)) {
    if (e.path().filename().string().rfind("model-00002-of-", 0) == 0) victim = e.path().string();
  }
  ASSERT_FALSE(victim.empty());
  FlipBit(victim, std::filesystem::file_size(victim) - 100, 2);
  CommandResult bad = RunCommand(kBin + " verify " + hf);
  EXPECT_EQ(bad.code, 1) << bad.out;
  EXPECT_NE(bad.out.find(std::filesystem::path(victim).filename().string() + ": SHA-256 "), std::string::npos)
      << bad.out;
  // Without SHA256SUMS the structure still verifies, and verify says what it cannot check.
  std::filesystem::remove(hf + "/SHA256SUMS");
  CommandResult nosums = RunCommand(kBin + " verify " + hf);
  EXPECT_EQ(nosums.code, 0) << nosums.out;
  EXPECT_NE(nosums.out.find("their values cannot be (no SHA256SUMS beside them)"), std::string::npos) << nosums.out;
  // Nothing can be written into it.
  CommandResult write = RunCommand(kBin + " synth --out " + hf + " --step 9");
  EXPECT_EQ(write.code, 2) << write.out;
  EXPECT_NE(write.out.find("is a safetensors model, read-only here"), std::string::npos) << write.out;
  EXPECT_FALSE(std::filesystem::exists(hf + "/step-0000000009")) << "nothing was written";
}

// export, then import with compression: the same tensors, blobs and
// metadata (but the binary blob export leaves out), every block checksummed.
TEST_F(SafetensorsExport, ImportBringsAnExportBack) {
  ASSERT_EQ(Export("hf", "--max-shard-size 2MB").code, 0);
  const std::string back = dir_.Join("back");
  CommandResult imp = RunCommand(kBin + " import " + dir_.Join("hf") + " --out " + back + " --codec zstd");
  ASSERT_EQ(imp.code, 0) << imp.out;
  EXPECT_NE(imp.out.find("as step 7 of"), std::string::npos) << imp.out;
  EXPECT_NE(imp.out.find("(8 rank(s), codec zstd)"), std::string::npos) << "a rank per rng blob owner: " << imp.out;
  CommandResult v = RunCommand(kBin + " verify " + back);
  EXPECT_EQ(v.code, 0) << v.out;
  CommandResult d = RunCommand(kBin + " diff " + root_ + " " + back);
  EXPECT_EQ(d.code, 1) << d.out;
  EXPECT_NE(d.out.find("only in A  blob 'data_position' (global)"), std::string::npos) << d.out;
  EXPECT_NE(d.out.find(", 0 different tensors; "), std::string::npos) << d.out;
  EXPECT_NE(d.out.find(", 1 different blobs and metadata entries"), std::string::npos) << d.out;
  CommandResult t = RunCommand(kBin + " diff --tensors-only " + root_ + " " + back);
  EXPECT_EQ(t.code, 0) << t.out;
  CommandResult rc = RunCommand(kBin + " restore-check " + back + " --mesh tp=4");
  EXPECT_EQ(rc.code, 0) << rc.out;
  EXPECT_EQ(RunCommand(kBin + " import " + dir_.Join("hf") + " --out " + back + "2 --codec lz4").code, 2);
}

TEST(SafetensorsRoot, RowAndColumnCutsReadLittleMoreThanTheyNeed) {
  TempDir dir;
  const TensorSpec big{"w", DType::kF32, {3000, 1000}};
  std::vector<float> values(3000 * 1000);
  for (size_t i = 0; i < values.size(); ++i) values[i] = static_cast<float>(i % 9973) * 0.25f;
  const TensorSpec wide{"wide", DType::kF32, {600, 8000}};  // 32 KB rows
  std::vector<float> wide_values(600 * 8000);
  for (size_t i = 0; i < wide_values.size(); ++i) wide_values[i] = static_cast<float>(i % 7919) * 0.5f;
  {
    CheckpointerOptions o;
    o.uri = dir.Join("root");
    auto cp = Checkpointer::Open(o);
    ASSERT_OK(cp);
    State s;
    ASSERT_OK(s.AddTensor(big, values.data()));
    ASSERT_OK(s.AddTensor(wide, wide_values.data()));
    auto h = (*cp)->Save(3, s);
    ASSERT_OK(h);
    ASSERT_OK(h->Wait());
  }
  CommandResult e = RunCommand(kBin + " export " + dir.Join("root") + " --format safetensors --to " + dir.Join("hf"));
  ASSERT_EQ(e.code, 0) << e.out;
  auto storage = OpenStorage(dir.Join("hf"));  // detected from the plain path
  ASSERT_OK(storage);
  for (const auto& [first, rows] : std::vector<std::pair<int64_t, int64_t>>{{1000, 1000}, {7, 1333}, {2999, 1}}) {
    std::vector<float> back(static_cast<size_t>(rows) * 1000, -1.0f);
    Box box = Box::Whole(big.shape);
    box.offsets[0] = first;
    box.sizes[0] = rows;
    State target;
    ASSERT_OK(target.AddShard(big, box, back.data()));
    auto stats = LoadCheckpoint(**storage, target, 3);
    ASSERT_OK(stats);
    EXPECT_TRUE(std::equal(back.begin(), back.end(), values.begin() + first * 1000)) << "rows " << first;
    const double needed = static_cast<double>(stats->bytes_needed);
    EXPECT_LE(static_cast<double>(stats->bytes_read), needed + 2 * 65536.0) << "rows " << first;
    if (rows >= 1000) {
      EXPECT_LE(static_cast<double>(stats->bytes_read), 1.05 * needed) << "rows " << first;
    }
  }
  // Columns: 32 KB rows cut in three, each rank reading only its column
  // ranges (safetensors has no checksum forcing whole blocks to be read).
  for (int part = 0; part < 3; ++part) {
    const int64_t c0 = part * 2666, c1 = part == 2 ? 8000 : c0 + 2666;
    std::vector<float> back(static_cast<size_t>(600 * (c1 - c0)), -1.0f);
    Box box = Box::Whole(wide.shape);
    box.offsets[1] = c0;
    box.sizes[1] = c1 - c0;
    State target;
    ASSERT_OK(target.AddShard(wide, box, back.data()));
    auto stats = LoadCheckpoint(**storage, target, 3);
    ASSERT_OK(stats);
    bool same = true;
    for (int64_t r = 0; r < 600 && same; ++r) {
      same = std::equal(back.begin() + r * (c1 - c0), back.begin() + (r + 1) * (c1 - c0),
                        wide_values.begin() + r * 8000 + c0);
    }
    EXPECT_TRUE(same) << "columns " << c0 << ".." << c1;
    EXPECT_LE(static_cast<double>(stats->bytes_read), 1.05 * static_cast<double>(stats->bytes_needed))
        << "columns " << c0 << ".." << c1 << ": read " << stats->bytes_read << " for " << stats->bytes_needed;
  }
}

// The storage is shared by a job's threads, and files opened from it may
// outlive it.
TEST(SafetensorsRoot, FilesOutliveTheStorageAndThreadsShareIt) {
  TempDir dir;
  const std::string json = R"({"a":{"dtype":"F32","shape":[4],"data_offsets":[0,16]}})";
  std::string bytes(8, '\0');
  const uint64_t n = json.size();
  std::memcpy(bytes.data(), &n, 8);
  const float values[4] = {1.5f, -2.0f, 3.25f, 4.0f};
  bytes += json + std::string(reinterpret_cast<const char*>(values), 16);
  WriteFile(dir.Join("model.safetensors"), bytes);
  auto storage = OpenStorage(dir.Join("model.safetensors"));
  ASSERT_OK(storage);
  std::vector<std::thread> threads;
  std::atomic<int> bad{0};
  for (int t = 0; t < 4; ++t) {
    threads.emplace_back([&] {
      for (int i = 0; i < 200; ++i) {
        auto latest = (*storage)->GetAll("LATEST");
        auto manifest = (*storage)->GetAll("step-0000000000/MANIFEST");
        if (!latest.ok() || !manifest.ok()) ++bad;
        std::vector<float> back(4, 0.0f);
        State target;
        if (!target.AddTensor(TensorSpec{"a", DType::kF32, {4}}, back.data()).ok() ||
            !LoadCheckpoint(**storage, target, 0).ok() || std::memcmp(back.data(), values, 16) != 0) {
          ++bad;
        }
      }
    });
  }
  for (auto& t : threads) t.join();
  EXPECT_EQ(bad.load(), 0);
  auto data = (*storage)->OpenReadable("step-0000000000/model.safetensors");
  auto manifest = (*storage)->OpenReadable("step-0000000000/MANIFEST");
  ASSERT_OK(data);
  ASSERT_OK(manifest);
  storage->reset();  // the files keep what they read alive
  std::vector<std::byte> got(16);
  ASSERT_OK((*data)->ReadAt(bytes.size() - 16, absl::Span<std::byte>(got)));
  EXPECT_EQ(std::memcmp(got.data(), values, 16), 0);
  std::vector<std::byte> head(8);
  ASSERT_OK((*manifest)->ReadAt(0, absl::Span<std::byte>(head)));
}

// The root's SafetensorsModel capability says where each tensor's bytes
// lie, directly and through an adapter; the bytes there are the tensor's.
TEST(SafetensorsRoot, TheModelCapabilitySaysWhereEachTensorsBytesLie) {
  TempDir dir;
  // Two tensors in one file, the second after the first in the buffer, and
  // metadata as `ckpt export` writes it.
  std::vector<SafetensorsTensor> tensors(2);
  tensors[0] = SafetensorsTensor{"b.bias", "F32", DType::kF32, 32, {3}, 0, 12};
  tensors[1] = SafetensorsTensor{"a.weight", "I16", DType::kI16, 16, {2, 2}, 12, 20};
  const std::string header = EncodeSafetensorsHeader(tensors, {{"ckpt.step", "42"}, {"ckpt.meta.lr", "0.1"}});
  const float bias[3] = {0.5f, -1.0f, 2.0f};
  const int16_t weight[4] = {1, -2, 300, -400};
  std::string bytes = header + std::string(reinterpret_cast<const char*>(bias), 12) +
                      std::string(reinterpret_cast<const char*>(weight), 8);
  WriteFile(dir.Join("model.safetensors"), bytes);
  for (const std::string uri :
       {"safetensors://" + dir.Join("model.safetensors"), "faulty://safetensors://" + dir.Join("model.safetensors")}) {
    auto storage = OpenStorage(uri);
    ASSERT_TRUE(storage.ok()) << uri << ": " << storage.status();
    const SafetensorsModel* model = FindCapability<SafetensorsModel>(**storage);
    ASSERT_NE(model, nullptr) << uri;
    EXPECT_EQ(model->step(), 42) << uri;
    EXPECT_EQ(model->metadata().at("lr"), "0.1") << uri;
    ASSERT_EQ(model->tensors().size(), 2u) << uri;
    const SafetensorsModel::Tensor& a = model->tensors()[0];  // ascending by name
    const SafetensorsModel::Tensor& b = model->tensors()[1];
    EXPECT_EQ(a.spec.fqn, "a.weight");
    EXPECT_EQ(a.spec.dtype, DType::kI16);
    EXPECT_EQ(a.spec.shape, (Shape{2, 2}));
    EXPECT_EQ(b.spec.fqn, "b.bias");
    EXPECT_EQ(a.bytes, 8u);
    EXPECT_EQ(b.bytes, 12u);
    EXPECT_EQ(a.file, dir.Join("model.safetensors"));
    const std::string back = ReadFile(a.file);
    EXPECT_EQ(back.compare(a.offset, a.bytes, reinterpret_cast<const char*>(weight), 8), 0) << uri;
    EXPECT_EQ(back.compare(b.offset, b.bytes, reinterpret_cast<const char*>(bias), 12), 0) << uri;
  }
  // A ckpt root has no such capability.
  auto plain = OpenStorage(dir.Join("empty-root"));
  ASSERT_OK(plain);
  EXPECT_EQ(FindCapability<SafetensorsModel>(**plain), nullptr);
}

// Hand-made broken models: each is exit 2 from the tools, naming the file
// and, where there is one, the tensor.
TEST(SafetensorsRoot, BrokenModelsAreRefusedNamingTheFileAndTheTensor) {
  TempDir dir;
  auto file = [](const std::string& json, size_t buffer) {
    std::string out(8, '\0');
    const uint64_t n = json.size();
    std::memcpy(out.data(), &n, 8);
    return out + json + std::string(buffer, '\x11');
  };
  const std::string good_a = R"("a":{"dtype":"F32","shape":[2,2],"data_offsets":[0,16]})";
  struct Case {
    std::string name;
    std::string bytes;
    std::string expect;
  };
  const std::vector<Case> cases = {
      {"truncated", file("{" + good_a + "}", 16).substr(0, 30), "past the end of the file"},
      {"header-past-end", std::string("\x00\x10\x00\x00\x00\x00\x00\x00", 8) + "{}", "past the end of the file"},
      {"overlap", file("{" + good_a + R"(,"b":{"dtype":"F32","shape":[2],"data_offsets":[8,16]}})", 16),
       "tensor 'b' (buffer bytes 8 to 16) overlaps tensor 'a'"},
      {"dtype", file(R"({"a":{"dtype":"Q7","shape":[2],"data_offsets":[0,8]}})", 8), "tensor 'a': unknown dtype 'Q7'"},
      {"size", file(R"({"a":{"dtype":"BF16","shape":[3,2],"data_offsets":[0,8]}})", 8),
       "tensor 'a': BF16 [3, 2] needs 12 bytes, data_offsets give 8"},
      {"unsupported", file(R"({"a":{"dtype":"U32","shape":[2],"data_offsets":[0,8]}})", 8),
       "tensor 'a' is U32, which ckpt does not hold"},
  };
  for (const Case& c : cases) {
    const std::string d = dir.Join(c.name);
    std::filesystem::create_directories(d);
    WriteFile(d + "/model.safetensors", c.bytes);
    for (const char* cmd : {" inspect ", " verify ", " restore-check --mesh tp=2 "}) {
      CommandResult r = RunCommand(kBin + cmd + d);
      EXPECT_EQ(r.code, 2) << c.name << cmd << r.out;
      EXPECT_NE(r.out.find("model.safetensors"), std::string::npos) << c.name << ": " << r.out;
      EXPECT_NE(r.out.find(c.expect), std::string::npos) << c.name << ": " << r.out;
    }
  }
  // An index naming a shard that is not there, or a tensor its shard lacks.
  const std::string d = dir.Join("index");
  std::filesystem::create_directories(d);
  WriteFile(d + "/model-00001-of-00002.safetensors", file("{" + good_a + "}", 16));
  WriteFile(d + "/model.safetensors.index.json",
            R"({"metadata":{"total_size":16},"weight_map":{"a":"model-00001-of-00002.safetensors",)"
            R"("b":"model-00002-of-00002.safetensors"}})");
  CommandResult missing = RunCommand(kBin + " inspect " + d);
  EXPECT_EQ(missing.code, 2) << missing.out;
  EXPECT_NE(missing.out.find("names shard model-00002-of-00002.safetensors, which does not exist"), std::string::npos)
      << missing.out;
  WriteFile(d + "/model-00002-of-00002.safetensors",
            file(R"({"c":{"dtype":"U8","shape":[1],"data_offsets":[0,1]}})", 1));
  CommandResult wrong = RunCommand(kBin + " inspect " + d);
  EXPECT_EQ(wrong.code, 2) << wrong.out;
  EXPECT_NE(wrong.out.find("weight_map places tensor 'b' in model-00002-of-00002.safetensors, which does not hold it"),
            std::string::npos)
      << wrong.out;
}

}  // namespace
}  // namespace ckpt::testing
