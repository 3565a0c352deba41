// ckpt export / import against real HDF5 files: h5py (Debian's python3)
// reads an export of a sharded checkpoint and finds the saved values; an
// import of that file loads back equal, also onto a different mesh.
#include <sys/wait.h>

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <cstring>
#include <filesystem>
#include <thread>
#include <vector>

#include "ckpt/checkpointer.h"
#include "ckpt/communicator.h"
#include "testutil/test_util.h"
#include "util/errors.h"

#ifndef CKPT_BIN
#error "CKPT_BIN must name the ckpt executable"
#endif

namespace ckpt::testing {
namespace {

uint16_t ToBf16(float f) {
  uint32_t u;
  std::memcpy(&u, &f, 4);
  return static_cast<uint16_t>(u >> 16);  // exact: (i % 100) * 0.5 needs 7 mantissa bits
}

uint16_t ToF16(float f) {
  // i * 0.5 for i < 40: exact in half precision.
  if (f == 0) return 0;
  int e;
  const float m = std::frexp(f, &e);  // f = m * 2^e, m in [0.5, 1)
  const uint32_t mant = static_cast<uint32_t>((m * 2 - 1) * 1024);
  return static_cast<uint16_t>(((e - 1 + 15) << 10) | mant);
}

struct Tensors {
  std::vector<float> embed = std::vector<float>(96 * 40);
  std::vector<uint16_t> attn = std::vector<uint16_t>(64 * 48);
  std::vector<uint16_t> norm = std::vector<uint16_t>(40);
  std::vector<int32_t> counts = std::vector<int32_t>(7 * 5);
  Tensors() {
    for (size_t i = 0; i < embed.size(); ++i) embed[i] = static_cast<float>(i) * 0.5f;
    for (size_t i = 0; i < attn.size(); ++i) attn[i] = ToBf16(static_cast<float>(i % 100) * 0.5f);
    for (size_t i = 0; i < norm.size(); ++i) norm[i] = ToF16(static_cast<float>(i) * 0.5f);
    for (size_t i = 0; i < counts.size(); ++i) counts[i] = static_cast<int32_t>(i % 100);
  }
};

const TensorSpec kEmbed{"model/embed.weight", DType::kF32, {96, 40}};
const TensorSpec kAttn{"model/layers.0.attn.weight", DType::kBF16, {64, 48}};
const TensorSpec kNorm{"model/norm.scale", DType::kF16, {40}};
const TensorSpec kCounts{"model/step_counts", DType::kI32, {7, 5}};

// Two ranks, each saving half the rows of every matrix.
void SaveSharded(const std::string& root, Tensors& t, DataContainer container = DataContainer::kAuto,
                 Codec codec = Codec::kNone) {
  auto comms = CreateLocalCommunicators(2);
  std::vector<std::thread> threads;
  std::vector<absl::Status> results(2);
  const std::string config = "{\"lr\": 0.001}";
  for (int r = 0; r < 2; ++r) {
    threads.emplace_back([&, r] {
      CheckpointerOptions o;
      o.uri = root;
      o.rank = r;
      o.world_size = 2;
      o.communicator = comms[r];
      o.container = container;
      o.codec = codec;
      auto cp = Checkpointer::Open(o);
      if (!cp.ok()) {
        results[r] = cp.status();
        return;
      }
      State s;
      auto half = [&](const TensorSpec& spec, void* data, size_t elem) {
        const int64_t rows = spec.shape[0] / 2;
        const int64_t cols = spec.shape.size() > 1 ? spec.shape[1] : 1;
        Box box = Box::Whole(spec.shape);
        box.offsets[0] = r * rows;
        box.sizes[0] = r == 0 ? rows : spec.shape[0] - rows;
        (void)s.AddShard(spec, box, static_cast<char*>(data) + r * rows * cols * elem);
      };
      half(kEmbed, t.embed.data(), 4);
      half(kAttn, t.attn.data(), 2);
      half(kNorm, t.norm.data(), 2);
      if (r == 0) (void)s.AddTensor(kCounts, t.counts.data());
      if (r == 0) (void)s.AddBlob("config", config.data(), config.size(), BlobScope::kGlobal);
      auto h = (*cp)->Save(42, s);
      results[r] = h.ok() ? h->Wait() : h.status();
    });
  }
  for (auto& th : threads) th.join();
  for (const absl::Status& st : results) ASSERT_OK(st);
}

// Loads step 42 of `storage` cut differently from the save (the f32 tensor in
// thirds of its rows), with the config blob.
absl::Status LoadBack(Storage& storage, Tensors* back, std::string* config) {
  std::fill(back->embed.begin(), back->embed.end(), -1.0f);
  std::fill(back->attn.begin(), back->attn.end(), 0);
  State s;
  for (int part = 0; part < 3; ++part) {
    Box box = Box::Whole(kEmbed.shape);
    box.offsets[0] = part * 32;
    box.sizes[0] = 32;
    CKPT_RETURN_IF_ERROR(s.AddShard(kEmbed, box, back->embed.data() + part * 32 * 40));
  }
  CKPT_RETURN_IF_ERROR(s.AddTensor(kAttn, back->attn.data()));
  CKPT_RETURN_IF_ERROR(s.AddTensor(kNorm, back->norm.data()));
  CKPT_RETURN_IF_ERROR(s.AddTensor(kCounts, back->counts.data()));
  CKPT_RETURN_IF_ERROR(s.AddBlobOut("config", config, BlobScope::kGlobal));
  return LoadCheckpoint(storage, s, 42).status();
}

void ExpectSameValues(const Tensors& got, const Tensors& want) {
  EXPECT_EQ(got.embed, want.embed);
  EXPECT_EQ(got.attn, want.attn);
  EXPECT_EQ(got.norm, want.norm);
  EXPECT_EQ(got.counts, want.counts);
}

TEST(Hdf5, H5pyReadsAnExportAndImportRoundTrips) {
  TempDir dir;
  Tensors t;
  SaveSharded(dir.Join("root"), t);
  const std::string h5 = dir.Join("out.h5");
  CommandResult e = RunCommand(std::string(CKPT_BIN) + " export " + dir.Join("root") + " --to " + h5);
  ASSERT_EQ(e.code, 0) << e.out;
  EXPECT_NE(e.out.find("4 tensors"), std::string::npos) << e.out;

  CommandResult py = RunCommand(std::string("/usr/bin/python3 ") + CHECK_EXPORT_PY + " " + h5);
  EXPECT_EQ(py.code, 0) << py.out;
  EXPECT_NE(py.out.find("checked 4 tensors: ok"), std::string::npos) << py.out;

  CommandResult i = RunCommand(std::string(CKPT_BIN) + " import " + h5 + " --out " + dir.Join("imported"));
  ASSERT_EQ(i.code, 0) << i.out;
  auto storage = OpenStorage(dir.Join("imported"));
  ASSERT_OK(storage);
  // Load onto a different cut: rows in thirds of the f32 tensor.
  Tensors back;
  std::string config;
  ASSERT_OK(LoadBack(**storage, &back, &config));
  ExpectSameValues(back, t);
  EXPECT_EQ(config, "{\"lr\": 0.001}");
}

// hdf5:// roots: every chunk is a dataset h5py reads in place, and ckpt
// loads, reshards and verifies them like any checkpoint.
TEST(Hdf5, ContainerRootsAreReadByH5pyAndReshardedByCkpt) {
  TempDir dir;
  Tensors t;
  SaveSharded("hdf5://" + dir.Join("root"), t);
  const std::string step_dir = dir.Join("root/step-0000000042");
  CommandResult py = RunCommand(std::string("/usr/bin/python3 ") + CHECK_EXPORT_PY + " " + step_dir);
  EXPECT_EQ(py.code, 0) << py.out;
  EXPECT_NE(py.out.find("checked 4 tensors: ok"), std::string::npos) << py.out;
  CommandResult dump = RunCommand("h5dump -H -A " + step_dir + "/rank-000001.h5");
  EXPECT_EQ(dump.code, 0) << dump.out;
  EXPECT_NE(dump.out.find("chunk_48_0"), std::string::npos) << dump.out;

  // Loaded through the plain file:// backend, cut differently.
  auto storage = OpenStorage(dir.Join("root"));
  ASSERT_OK(storage);
  Tensors back;
  std::string config;
  ASSERT_OK(LoadBack(**storage, &back, &config));
  ExpectSameValues(back, t);
  CommandResult v = RunCommand(std::string(CKPT_BIN) + " verify " + dir.Join("root"));
  EXPECT_EQ(v.code, 0) << v.out;

  // A flipped byte inside a dataset is found, with the file and offset.
  std::string data = ReadFile(step_dir + "/rank-000000.h5");
  const size_t at = data.find(std::string(reinterpret_cast<const char*>(t.embed.data() + 100), 16));
  ASSERT_NE(at, std::string::npos);
  FlipBit(step_dir + "/rank-000000.h5", at, 3);
  CommandResult bad = RunCommand(std::string(CKPT_BIN) + " verify " + dir.Join("root"));
  EXPECT_EQ(bad.code, 1) << bad.out;
  EXPECT_NE(bad.out.find("rank-000000.h5"), std::string::npos) << bad.out;
  EXPECT_NE(bad.out.find("checksum mismatch"), std::string::npos) << bad.out;
}

// The data files' layout is the Checkpointer's choice: HDF5 files on a plain
// posix:// root, ckpt files (compressed) on an hdf5:// root, and a root
// without local files refused at Open.
TEST(Hdf5, TheContainerIsChosenByTheCheckpointerNotByTheStorage) {
  TempDir dir;
  Tensors t;
  SaveSharded("posix://" + dir.Join("h5"), t, DataContainer::kHdf5, Codec::kZstd);
  const std::string h5_step = dir.Join("h5/step-0000000042");
  EXPECT_TRUE(std::filesystem::exists(h5_step + "/rank-000000.h5"));
  EXPECT_FALSE(std::filesystem::exists(h5_step + "/rank-000000.ckd"));
  CommandResult py = RunCommand(std::string("/usr/bin/python3 ") + CHECK_EXPORT_PY + " " + h5_step);
  EXPECT_EQ(py.code, 0) << py.out;
  EXPECT_NE(py.out.find("checked 4 tensors: ok"), std::string::npos) << py.out;

  SaveSharded("hdf5://" + dir.Join("ckd"), t, DataContainer::kCkpt, Codec::kZstd);
  const std::string ckd_step = dir.Join("ckd/step-0000000042");
  EXPECT_TRUE(std::filesystem::exists(ckd_step + "/rank-000001.ckd"));
  EXPECT_FALSE(std::filesystem::exists(ckd_step + "/rank-000001.h5"));
  CommandResult info = RunCommand(std::string(CKPT_BIN) + " inspect --json " + dir.Join("ckd"));
  EXPECT_NE(info.out.find("\"codec\":\"zstd\""), std::string::npos) << info.out;

  for (const char* root : {"h5", "ckd"}) {
    CommandResult v = RunCommand(std::string(CKPT_BIN) + " verify " + dir.Join(root));
    EXPECT_EQ(v.code, 0) << root << ": " << v.out;
    auto storage = OpenStorage(dir.Join(root));
    ASSERT_OK(storage);
    Tensors back;
    std::string config;
    ASSERT_OK(LoadBack(**storage, &back, &config));
    ExpectSameValues(back, t);
    EXPECT_EQ(config, "{\"lr\": 0.001}");
  }

  CheckpointerOptions o;
  o.uri = "mem://container-test";
  o.container = DataContainer::kHdf5;
  auto cp = Checkpointer::Open(o);
  ASSERT_FALSE(cp.ok());
  EXPECT_EQ(cp.status().code(), absl::StatusCode::kInvalidArgument);
  EXPECT_NE(cp.status().message().find("local files"), std::string::npos) << cp.status();
}

TEST(Hdf5, BadInputIsAUsageError) {
  TempDir dir;
  WriteFile(dir.Join("not.h5"), "plain text, not HDF5");
  CommandResult r = RunCommand(std::string(CKPT_BIN) + " import " + dir.Join("not.h5") + " --out " + dir.Join("x"));
  EXPECT_EQ(r.code, 2) << r.out;
  EXPECT_NE(r.out.find("not a readable HDF5 file"), std::string::npos) << r.out;
  CommandResult e = RunCommand(std::string(CKPT_BIN) + " export " + dir.Join("nothing") + " --to " + dir.Join("o.h5"));
  EXPECT_EQ(e.code, 2) << e.out;
  EXPECT_EQ(RunCommand(std::string(CKPT_BIN) + " export " + dir.Join("nothing")).code, 2);  // no --to
}

}  // namespace
}  // namespace ckpt::testing
