// Save then load, across dtypes, codecs, shapes, target cuts and backends.
#include <sys/resource.h>

#include <random>
#include <thread>

#include "ckpt/checkpointer.h"
#include "ckpt/synthetic.h"
#include "ckpt/verify.h"
#include "core/root.h"
#include "core/save_pieces.h"
#include "format/frame_check.h"
#include "pipeline/save_engine.h"
#include "storage/roots/mem/mem_storage.h"
#include "testutil/test_util.h"

namespace ckpt::testing {
namespace {

constexpr size_t kSmallBlock = 64 << 10;

struct Backend {
  std::string name;
  std::string query;  // file:// parameters; "mem" for memory
};

class RoundTripTest : public ::testing::TestWithParam<Backend> {
 protected:
  std::string Uri() {
    if (GetParam().name == "mem") {
      return "mem://roundtrip-" + std::to_string(counter_++) + "-" +
             ::testing::UnitTest::GetInstance()->current_test_info()->name();
    }
    return dir_.path() + "/root" + std::to_string(counter_++) + GetParam().query;
  }

  std::unique_ptr<Checkpointer> Open(const std::string& uri, Codec codec, int rank = 0, int world = 1,
                                     std::shared_ptr<SaveEngine> engine = nullptr) {
    CheckpointerOptions o;
    o.uri = uri;
    o.rank = rank;
    o.world_size = world;
    o.codec = codec;
    o.engine_options.block_size = kSmallBlock;
    o.engine_options.staging_bytes = 1 << 20;
    o.engine = std::move(engine);
    o.commit_timeout_s = 30;
    auto cp = Checkpointer::Open(o);
    EXPECT_TRUE(cp.ok()) << cp.status();
    return cp.ok() ? std::move(cp).value() : nullptr;
  }

  TempDir dir_;
  int counter_ = 0;
};

TEST_P(RoundTripTest, EveryDTypeAndCodec) {
  const DType dtypes[] = {DType::kF64, DType::kF32, DType::kF16, DType::kBF16, DType::kF8E4M3, DType::kF8E5M2,
                          DType::kI64, DType::kI32, DType::kI16, DType::kI8,   DType::kU8,     DType::kBool};
  for (Codec codec : {Codec::kNone, Codec::kZstd, Codec::kShuffleZstd}) {
    const std::string uri = Uri();
    auto cp = Open(uri, codec);
    ASSERT_NE(cp, nullptr);
    std::vector<OwnedShard> shards;
    for (DType dt : dtypes) {
      TensorSpec spec{std::string("t.") + std::string(DTypeName(dt)), dt, {301, 129}};
      shards.push_back(MakeShard(spec, Box::Whole(spec.shape), 7));
    }
    State state = StateOf(shards);
    auto handle = cp->Save(3, state);
    ASSERT_OK(handle);
    ASSERT_OK(handle->Wait());
    EXPECT_GT(handle->Stats().bytes_stored, 0);
    if (codec != Codec::kNone) {
      EXPECT_LT(handle->Stats().bytes_stored, handle->Stats().bytes_logical) << CodecName(codec);
    }

    std::vector<OwnedShard> out;
    for (auto& s : shards) out.push_back(EmptyShard(s.spec, s.box));
    State target = StateOf(out);
    auto stats = cp->Load(target);
    ASSERT_OK(stats);
    EXPECT_EQ(stats->step, 3);
    for (auto& s : out) {
      EXPECT_EQ(Mismatches(s, 7), 0) << s.spec.fqn << " codec " << CodecName(codec);
    }
    EXPECT_EQ(stats->bytes_needed, state.LogicalBytes());
    EXPECT_GE(stats->ReadAmplification(), 1.0);
  }
}

TEST_P(RoundTripTest, OddShapes) {
  const std::vector<Shape> shapes = {{}, {1}, {0}, {0, 5}, {5, 0, 3}, {100003}, {3, 1, 1, 7}, {kSmallBlock / 4 + 1}};
  auto cp = Open(Uri(), Codec::kShuffleZstd);
  ASSERT_NE(cp, nullptr);
  std::vector<OwnedShard> shards;
  for (size_t i = 0; i < shapes.size(); ++i) {
    TensorSpec spec{"odd." + std::to_string(i), DType::kF32, shapes[i]};
    shards.push_back(MakeShard(spec, Box::Whole(spec.shape), 1));
  }
  State state = StateOf(shards);
  auto h = cp->Save(1, state);
  ASSERT_OK(h);
  ASSERT_OK(h->Wait());
  std::vector<OwnedShard> out;
  for (auto& s : shards) out.push_back(EmptyShard(s.spec, s.box));
  State target = StateOf(out);
  ASSERT_OK(cp->Load(target, 1));
  for (auto& s : out) EXPECT_EQ(Mismatches(s, 1), 0) << s.spec.fqn;
}

TEST_P(RoundTripTest, ArbitraryTargetBoxes) {
  // Saved as a 3x2 grid of uneven chunks from six ranks sharing one engine.
  const TensorSpec spec{"w", DType::kBF16, {517, 263}};
  const std::vector<int64_t> rows = {0, 100, 350, 517};
  const std::vector<int64_t> cols = {0, 131, 263};
  const std::string uri = Uri();
  SaveEngineOptions eo;
  eo.block_size = kSmallBlock;
  eo.staging_bytes = 1 << 20;
  auto engine = CreateSaveEngine(eo);
  ASSERT_OK(engine);
  std::vector<std::unique_ptr<Checkpointer>> ranks;
  std::vector<std::vector<OwnedShard>> data(6);
  std::vector<SaveHandle> handles;
  for (int r = 0; r < 6; ++r) {
    ranks.push_back(Open(uri, Codec::kZstd, r, 6, *engine));
    ASSERT_NE(ranks.back(), nullptr);
  }
  for (int r = 0; r < 6; ++r) {
    const int i = r / 2, j = r % 2;
    Box box({rows[i], cols[j]}, {rows[i + 1] - rows[i], cols[j + 1] - cols[j]});
    data[r].push_back(MakeShard(spec, box, 11));
    State st = StateOf(data[r]);
    auto h = ranks[r]->Save(5, st);
    ASSERT_OK(h);
    handles.push_back(*h);
  }
  for (auto& h : handles) ASSERT_OK(h.Wait());

  std::mt19937 rng(42);
  for (int trial = 0; trial < 40; ++trial) {
    std::vector<int64_t> off(2), size(2);
    for (int d = 0; d < 2; ++d) {
      off[d] = std::uniform_int_distribution<int64_t>(0, spec.shape[d] - 1)(rng);
      size[d] = std::uniform_int_distribution<int64_t>(0, spec.shape[d] - off[d])(rng);
    }
    std::vector<OwnedShard> out = {EmptyShard(spec, Box(off, size))};
    State target = StateOf(out);
    auto stats = ranks[trial % 6]->Load(target);
    ASSERT_OK(stats);
    EXPECT_EQ(Mismatches(out[0], 11), 0) << out[0].box.ToString();
    EXPECT_EQ(stats->bytes_needed, out[0].box.Volume() * 2);
  }
}

TEST_P(RoundTripTest, StridedSourceAndTarget) {
  // A column-major 2-D shard (strides {1, rows}) and a padded-row target.
  const TensorSpec spec{"strided", DType::kF32, {40, 30}};
  OwnedShard packed = MakeShard(spec, Box::Whole(spec.shape), 3);
  std::vector<float> colmajor(40 * 30);
  const float* src = reinterpret_cast<const float*>(packed.data.data());
  for (int i = 0; i < 40; ++i) {
    for (int j = 0; j < 30; ++j) colmajor[j * 40 + i] = src[i * 30 + j];
  }
  auto cp = Open(Uri(), Codec::kNone);
  ASSERT_NE(cp, nullptr);
  State state;
  ASSERT_OK(state.AddShard(spec, Box::Whole(spec.shape), colmajor.data(), {1, 40}));
  auto h = cp->Save(2, state);
  ASSERT_OK(h);
  ASSERT_OK(h->Wait());

  // Target rows 5..25, cols 3..23, stored with a row pitch of 32 floats.
  std::vector<float> padded(20 * 32, -1.0f);
  State target;
  Box box({5, 3}, {20, 20});
  ASSERT_OK(target.AddShard(spec, box, padded.data(), {32, 1}));
  ASSERT_OK(cp->Load(target, 2));
  for (int i = 0; i < 20; ++i) {
    for (int j = 0; j < 20; ++j) {
      EXPECT_EQ(padded[i * 32 + j], src[(i + 5) * 30 + (j + 3)]) << i << "," << j;
    }
    EXPECT_EQ(padded[i * 32 + 20], -1.0f);  // padding untouched
  }
}

// Loads whose boxes span trailing dimensions whole (row slabs, plane
// slabs) copy each intersection as one run; boxes that cut a middle or the
// last dimension do not. Every case, into packed and into padded memory.
TEST_P(RoundTripTest, SlabsThatSpanTrailingDimensionsWhole) {
  const TensorSpec spec{"cube", DType::kF32, {37, 23, 19}};
  // Saved as three chunks cut along dimension 0 only.
  const std::vector<int64_t> rows = {0, 9, 20, 37};
  const std::string uri = Uri();
  std::vector<std::vector<OwnedShard>> data(3);
  std::vector<std::unique_ptr<Checkpointer>> ranks;
  SaveEngineOptions eo;
  eo.block_size = kSmallBlock;
  auto engine = CreateSaveEngine(eo);
  ASSERT_OK(engine);
  for (int r = 0; r < 3; ++r) {
    ranks.push_back(Open(uri, Codec::kNone, r, 3, *engine));
    ASSERT_NE(ranks.back(), nullptr);
  }
  std::vector<SaveHandle> handles;
  for (int r = 0; r < 3; ++r) {
    data[r].push_back(MakeShard(spec, Box({rows[r], 0, 0}, {rows[r + 1] - rows[r], 23, 19}), 17));
    State st = StateOf(data[r]);
    auto h = ranks[r]->Save(4, st);
    ASSERT_OK(h);
    handles.push_back(*h);
  }
  for (auto& h : handles) ASSERT_OK(h.Wait());
  const std::vector<Box> boxes = {
      Box({0, 0, 0}, {37, 23, 19}),  // everything: one run per chunk
      Box({5, 0, 0}, {20, 23, 19}),  // rows across chunk boundaries
      Box({3, 4, 0}, {30, 10, 19}),  // a middle cut, last dimension whole
      Box({3, 0, 2}, {30, 23, 15}),  // the last dimension cut
      Box({36, 22, 0}, {1, 1, 19}),  // one row
      Box({10, 0, 0}, {1, 23, 19}),  // one plane
  };
  for (const Box& box : boxes) {
    std::vector<OwnedShard> out = {EmptyShard(spec, box)};
    State target = StateOf(out);
    ASSERT_OK(ranks[0]->Load(target, 4));
    EXPECT_EQ(Mismatches(out[0], 17), 0) << box.ToString();
    // The same box into memory with a padded last dimension (not contiguous).
    const int64_t pitch = box.sizes[2] + 3;
    std::vector<float> padded(static_cast<size_t>(box.sizes[0] * box.sizes[1] * pitch), -7.0f);
    State strided;
    ASSERT_OK(strided.AddShard(spec, box, padded.data(), {box.sizes[1] * pitch, pitch, 1}));
    ASSERT_OK(ranks[1]->Load(strided, 4));
    const float* want = reinterpret_cast<const float*>(out[0].data.data());
    int64_t bad = 0, pad_touched = 0;
    for (int64_t i = 0; i < box.sizes[0]; ++i) {
      for (int64_t j = 0; j < box.sizes[1]; ++j) {
        for (int64_t k = 0; k < pitch; ++k) {
          const float got = padded[static_cast<size_t>((i * box.sizes[1] + j) * pitch + k)];
          if (k >= box.sizes[2]) {
            pad_touched += got != -7.0f;
          } else {
            bad += got != want[(i * box.sizes[1] + j) * box.sizes[2] + k];
          }
        }
      }
    }
    EXPECT_EQ(bad, 0) << box.ToString();
    EXPECT_EQ(pad_touched, 0) << box.ToString();
  }
}

TEST_P(RoundTripTest, BlobsPerRankAndGlobal) {
  const std::string uri = Uri();
  SaveEngineOptions eo;
  eo.block_size = kSmallBlock;
  eo.staging_bytes = 1 << 20;
  auto engine = CreateSaveEngine(eo);
  ASSERT_OK(engine);
  auto r0 = Open(uri, Codec::kZstd, 0, 2, *engine);
  auto r1 = Open(uri, Codec::kZstd, 1, 2, *engine);
  std::string rng0 = "rng-state-of-rank-0", rng1 = "rank-1 rng";
  std::string big(300000, 'x');
  for (size_t i = 0; i < big.size(); ++i) big[i] = static_cast<char>(i * 31 % 251);
  std::string empty;
  State s0, s1;
  ASSERT_OK(s0.AddBlob("rng", rng0.data(), rng0.size()));
  ASSERT_OK(s0.AddBlob("config", big.data(), big.size(), BlobScope::kGlobal));
  ASSERT_OK(s0.AddBlob("empty", empty.data(), 0, BlobScope::kGlobal));
  ASSERT_OK(s1.AddBlob("rng", rng1.data(), rng1.size()));
  auto h0 = r0->Save(9, s0);
  auto h1 = r1->Save(9, s1);
  ASSERT_OK(h0);
  ASSERT_OK(h1);
  ASSERT_OK(h0->Wait());
  ASSERT_OK(h1->Wait());

  std::string a, b, c, d, e;
  State t;
  ASSERT_OK(t.AddBlobOut("rng", &a));
  ASSERT_OK(t.AddBlobOut("config", &b, BlobScope::kGlobal));
  ASSERT_OK(t.AddBlobOut("rng", &c, BlobScope::kRank, 1));
  ASSERT_OK(t.AddBlobOut("empty", &e, BlobScope::kGlobal));
  ASSERT_OK(r0->Load(t));
  EXPECT_EQ(a, rng0);
  EXPECT_EQ(b, big);
  EXPECT_EQ(c, rng1);
  EXPECT_EQ(e, "");
  State t1;
  ASSERT_OK(t1.AddBlobOut("rng", &d));
  ASSERT_OK(r1->Load(t1));
  EXPECT_EQ(d, rng1);
  State missing;
  std::string m;
  ASSERT_OK(missing.AddBlobOut("nope", &m));
  auto st = r0->Load(missing);
  EXPECT_TRUE(absl::IsNotFound(st.status())) << st.status();
}

TEST_P(RoundTripTest, StateLargerThanArenaStreams) {
  // 8 MiB of tensors through a 2-slot arena of 64 KiB blocks.
  CheckpointerOptions o;
  o.uri = Uri();
  o.codec = Codec::kShuffleZstd;
  o.engine_options.block_size = kSmallBlock;
  o.engine_options.staging_bytes = 1;  // rounds up to the minimum of 2 slots
  auto cp = Checkpointer::Open(o);
  ASSERT_OK(cp);
  std::vector<OwnedShard> shards;
  for (int i = 0; i < 4; ++i) {
    TensorSpec spec{"big." + std::to_string(i), DType::kF32, {512, 1024}};
    shards.push_back(MakeShard(spec, Box::Whole(spec.shape), 5));
  }
  State state = StateOf(shards);
  auto h = (*cp)->Save(1, state);
  ASSERT_OK(h);
  ASSERT_OK(h->Wait());
  EXPECT_EQ(h->Progress().blocks_written, h->Progress().blocks_total);
  std::vector<OwnedShard> out;
  for (auto& s : shards) out.push_back(EmptyShard(s.spec, s.box));
  State target = StateOf(out);
  ASSERT_OK((*cp)->Load(target));
  for (auto& s : out) EXPECT_EQ(Mismatches(s, 5), 0);
}

// Four ranks of one process save at once through one engine whose staging
// is shared by three threads, with an arena of a few slots: column-tiled
// shards (one pass over the rows, holding a slot per tile), plain shards and
// blobs, each rank waiting on the arena in turn. Every element comes back.
// With the workers paused while staging, and without: a full arena must
// wake them, or the savers wait forever.
TEST(Staging, ThreadsAndRanksShareASmallArena) {
  for (int pause : {0, 1})
    for (int threads : {1, 3}) {
      for (size_t slots : {size_t{2}, size_t{8}, size_t{64}}) {
        SaveEngineOptions eo;
        eo.block_size = kSmallBlock;
        eo.staging_bytes = slots * (kSmallBlock + 4096);
        eo.staging_threads = threads;
        eo.pause_workers_while_staging = pause;
        auto engine = CreateSaveEngine(eo);
        ASSERT_OK(engine);
        ASSERT_EQ((*engine)->staging_threads(), threads);
        TempDir dir;
        const std::string uri = dir.path() + "/root";
        constexpr int kRanks = 4;
        // A row-parallel weight cut over the ranks (tiled), a whole matrix
        // per rank (tiled in halves) and a norm.
        const TensorSpec w{"w", DType::kBF16, {96, 8 * 1536}};
        std::vector<std::vector<OwnedShard>> data(kRanks);
        std::vector<std::unique_ptr<Checkpointer>> ranks;
        for (int r = 0; r < kRanks; ++r) {
          CheckpointerOptions o;
          o.uri = uri;
          o.rank = r;
          o.world_size = kRanks;
          o.codec = r % 2 ? Codec::kShuffleZstd : Codec::kNone;
          o.engine = *engine;
          o.commit_timeout_s = 30;
          auto cp = Checkpointer::Open(o);
          ASSERT_OK(cp);
          ranks.push_back(std::move(cp).value());
          const int64_t cols = w.shape[1] / kRanks;
          data[r].push_back(MakeShard(w, Box({0, r * cols}, {96, cols}), 21));
          const TensorSpec m{"m." + std::to_string(r), DType::kF32, {64, 1024}};
          data[r].push_back(MakeShard(m, Box::Whole(m.shape), 21));
          const TensorSpec n{"n." + std::to_string(r), DType::kF32, {1000}};
          data[r].push_back(MakeShard(n, Box::Whole(n.shape), 21));
        }
        std::vector<std::thread> savers;
        std::vector<absl::Status> results(kRanks);
        for (int r = 0; r < kRanks; ++r) {
          savers.emplace_back([&, r] {
            State st = StateOf(data[r]);
            const std::string blob = "rank " + std::to_string(r);
            absl::Status s = st.AddBlob("rng", blob.data(), blob.size(), BlobScope::kRank);
            auto h = s.ok() ? ranks[r]->Save(3, st) : absl::StatusOr<SaveHandle>(s);
            results[r] = h.ok() ? h->Wait() : h.status();
          });
        }
        for (auto& t : savers) t.join();
        for (int r = 0; r < kRanks; ++r) EXPECT_TRUE(results[r].ok()) << "rank " << r << ": " << results[r];
        // Loaded onto three ranks' worth of columns (cuts inside the tiles).
        for (int part = 0; part < 3; ++part) {
          const int64_t c0 = part * w.shape[1] / 3, c1 = (part + 1) * w.shape[1] / 3;
          std::vector<OwnedShard> out = {EmptyShard(w, Box({0, c0}, {96, c1 - c0}))};
          for (int r = 0; r < kRanks; ++r) {
            out.push_back(EmptyShard(data[r][1].spec, data[r][1].box));
            out.push_back(EmptyShard(data[r][2].spec, data[r][2].box));
          }
          State target = StateOf(out);
          ASSERT_OK(ranks[part]->Load(target));
          for (const auto& s : out) EXPECT_EQ(Mismatches(s, 21), 0) << s.spec.fqn << " threads " << threads;
        }
      }
    }
}

// Paused workers touch no staged block until the Save returns when the
// arena holds the whole state: each data write sees every byte staged.
// Staging takes its largest units first, so that the last a thread copies
// is short and the threads finish together. With one staging thread and
// one worker that waits for the staging, the data file holds the blocks in
// the order they were staged.
TEST(Staging, TheLargestUnitsAreStagedFirst) {
  SaveEngineOptions eo;
  eo.block_size = kSmallBlock;
  eo.staging_bytes = size_t{4} << 20;
  eo.staging_threads = 1;
  eo.worker_threads = 1;
  eo.pause_workers_while_staging = 1;
  auto engine = CreateSaveEngine(eo);
  ASSERT_OK(engine);
  CheckpointerOptions o;
  o.uri = "mem://largest-first";
  o.engine = *engine;
  o.max_column_tiles = 1;
  auto cp = Checkpointer::Open(o);
  ASSERT_OK(cp);
  const TensorSpec small{"a.small", DType::kF32, {100}};
  const TensorSpec big{"b.big", DType::kF32, {65536}};  // four blocks
  std::vector<OwnedShard> shards = {MakeShard(small, Box::Whole(small.shape), 1),
                                    MakeShard(big, Box::Whole(big.shape), 2)};
  auto h = (*cp)->Save(1, StateOf(shards));
  ASSERT_OK(h);
  ASSERT_OK(h->Wait());
  auto storage = OpenStorage(o.uri);
  ASSERT_OK(storage);
  auto m = ReadManifest(**storage, 1);
  ASSERT_OK(m);
  ASSERT_EQ(m->files.size(), 1u);
  const std::string path = StepDir(1) + "/" + m->files[0].name;
  auto rf = (*storage)->OpenReadable(path);
  ASSERT_OK(rf);
  auto index = ReadFileIndex(**rf, m->files[0], path);
  ASSERT_OK(index);
  std::map<std::string, uint64_t> first_offset;
  for (const ManifestTensor& t : m->tensors) {
    ASSERT_EQ(t.chunks.size(), 1u) << t.spec.fqn;
    first_offset[t.spec.fqn] = (*index)[t.chunks[0].first_block].offset;
  }
  EXPECT_LT(first_offset["b.big"], first_offset["a.small"]);
  std::vector<OwnedShard> out = {EmptyShard(small, Box::Whole(small.shape)), EmptyShard(big, Box::Whole(big.shape))};
  State target = StateOf(out);
  ASSERT_OK((*cp)->Load(target));
  EXPECT_EQ(out[0].data, shards[0].data);
  EXPECT_EQ(out[1].data, shards[1].data);
}

TEST(Staging, PausedWorkersWaitForTheStagingToEnd) {
  for (int pause : {1, 0}) {
    SaveEngineOptions eo;
    eo.block_size = kSmallBlock;
    eo.staging_bytes = size_t{40} << 20;
    eo.staging_threads = 1;
    eo.pause_workers_while_staging = pause;
    auto engine = CreateSaveEngine(eo);
    ASSERT_OK(engine);
    // Bytes staged when each data block's write was handed to the storage.
    class Recording : public ForwardingStorage {
     public:
      Recording(std::shared_ptr<Storage> base, std::shared_ptr<SaveEngine> engine)
          : ForwardingStorage(std::move(base)), engine_(std::move(engine)) {}
      absl::StatusOr<std::unique_ptr<WritableFile>> OpenWritable(std::string_view path,
                                                                 const WriteOptions& o = {}) override {
        auto file = ForwardingStorage::OpenWritable(path, o);
        if (!file.ok()) return file.status();
        return std::unique_ptr<WritableFile>(new Writer(this, std::move(file).value()));
      }
      std::mutex mu;
      std::vector<int64_t> staged_at_write;

     private:
      class Writer : public WritableFile {
       public:
        Writer(Recording* owner, std::unique_ptr<WritableFile> base) : owner_(owner), base_(std::move(base)) {}
        void WriteAsync(uint64_t offset, absl::Span<const std::byte> data, IoCallback done) override {
          if (offset > 0 && data.size() >= kSmallBlock) {
            std::lock_guard<std::mutex> lock(owner_->mu);
            owner_->staged_at_write.push_back(owner_->engine_->bytes_staged());
          }
          base_->WriteAsync(offset, data, std::move(done));
        }
        absl::Status Drain() override { return base_->Drain(); }
        absl::Status Finish(uint64_t size) override { return base_->Finish(size); }
        void Reserve(uint64_t bytes) override { base_->Reserve(bytes); }
        size_t alignment() const override { return base_->alignment(); }
        const std::string& path() const override { return base_->path(); }

       private:
        Recording* owner_;
        std::unique_ptr<WritableFile> base_;
      };
      std::shared_ptr<SaveEngine> engine_;
    };
    auto mem = OpenStorage(absl::StrCat("mem://pause-", pause));
    ASSERT_OK(mem);
    auto rec = std::make_shared<Recording>(*mem, *engine);
    CheckpointerOptions o;
    o.storage = rec;
    o.engine = *engine;
    auto cp = Checkpointer::Open(o);
    ASSERT_OK(cp);
    const TensorSpec w{"w", DType::kF32, {2048, 4096}};  // 32 MiB: 512 blocks
    std::vector<OwnedShard> shards = {MakeShard(w, Box::Whole(w.shape), 4)};
    State st = StateOf(shards);
    auto h = (*cp)->Save(1, st);
    ASSERT_OK(h);
    ASSERT_OK(h->Wait());
    const int64_t total = (*engine)->bytes_staged();
    ASSERT_EQ(total, int64_t{32} << 20);
    std::lock_guard<std::mutex> lock(rec->mu);
    ASSERT_GT(rec->staged_at_write.size(), 400u);  // some blocks end a column tile short
    const int64_t first = *std::min_element(rec->staged_at_write.begin(), rec->staged_at_write.end());
    // (Unpaused, when a worker gets a core first is up to the scheduler.)
    if (pause) {
      EXPECT_EQ(first, total) << "a block was written while the state was still being staged";
    }
    std::vector<OwnedShard> out = {EmptyShard(w, Box::Whole(w.shape))};
    State target = StateOf(out);
    ASSERT_OK((*cp)->Load(target));
    EXPECT_EQ(Mismatches(out[0], 4), 0);
  }
}

// Tiled shards larger than a staging unit are staged in bands of rows, each
// starting every tile on a block boundary, by several threads at once: a
// whole 3-d tensor (six column tiles, bands of 128 rows, a short last band)
// and a matrix whose rows are a strided view of a wider buffer (eight
// tiles, bands of 64 rows). Every element comes back, whole and cut across the tiles.
TEST(Staging, TiledShardsAreStagedInBandsOfRows) {
  for (int threads : {1, 3}) {
    for (Codec codec : {Codec::kNone, Codec::kShuffleZstd}) {
      SaveEngineOptions eo;
      eo.block_size = kSmallBlock;
      eo.staging_bytes = 24 * (kSmallBlock + 4096);
      eo.staging_threads = threads;
      auto engine = CreateSaveEngine(eo);
      ASSERT_OK(engine);
      TempDir dir;
      CheckpointerOptions o;
      o.uri = dir.path() + "/root";
      o.codec = codec;
      o.engine = *engine;
      auto cp = Checkpointer::Open(o);
      ASSERT_OK(cp);
      const TensorSpec cube{"cube", DType::kBF16, {4, 300, 3072}};
      std::vector<OwnedShard> shards;
      shards.push_back(MakeShard(cube, Box::Whole(cube.shape), 9));
      // A 700 x 3072 f32 weight viewed inside a buffer of 6144 columns.
      const TensorSpec w{"w", DType::kF32, {700, 3072}};
      OwnedShard wide = MakeShard(TensorSpec{"wide", DType::kF32, {700, 6144}}, Box({0, 0}, {700, 6144}), 0);
      OwnedShard part = MakeShard(w, Box::Whole(w.shape), 9);
      for (int64_t r = 0; r < 700; ++r) {
        std::memcpy(wide.data.data() + (r * 6144 + 1024) * 4, part.data.data() + r * 3072 * 4, 3072 * 4);
      }
      State state;
      ASSERT_OK(state.AddShard(cube, shards[0].box, shards[0].data.data()));
      ASSERT_OK(state.AddShard(w, part.box, wide.data.data() + 1024 * 4, {6144, 1}));
      // Both are tiled and staged in several bands: the cube's six tiles
      // (1 KiB rows) end on a block boundary every 64 rows and 16 blocks
      // over all tiles are 170 rows, so bands of 128; w's eight (rows of 1
      // and 2 KiB) every 64 rows, and 85 rows make bands of 64.
      SavePieces sp = BuildSavePieces(state, {true, true}, CheckpointerOptions().max_column_tiles, 0);
      ASSERT_EQ(sp.pieces.size(), 14u);
      EXPECT_EQ(TileBandRows(sp.pieces, 0, 6, kSmallBlock), 128);
      EXPECT_EQ(TileBandRows(sp.pieces, 6, 14, kSmallBlock), 64);
      // Where the tiles line up only after more rows than the shard has
      // (uneven thirds of 2048 columns, 683 and 682 wide), one pass.
      const TensorSpec uneven{"u", DType::kF32, {700, 2048}};
      State u;
      ASSERT_OK(u.AddShard(uneven, Box::Whole(uneven.shape), part.data.data()));
      SavePieces up = BuildSavePieces(u, {true}, CheckpointerOptions().max_column_tiles, 0);
      ASSERT_GT(up.pieces.size(), 1u);
      EXPECT_EQ(TileBandRows(up.pieces, 0, up.pieces.size(), kSmallBlock), 700);
      auto h = (*cp)->Save(1, state);
      ASSERT_OK(h);
      ASSERT_OK(h->Wait());
      std::vector<OwnedShard> out = {EmptyShard(cube, Box::Whole(cube.shape)), EmptyShard(w, part.box)};
      State target = StateOf(out);
      ASSERT_OK((*cp)->Load(target));
      for (const auto& s : out) EXPECT_EQ(Mismatches(s, 9), 0) << s.spec.fqn << " threads " << threads;
      // Cut across the tiles: the middle third of the cube's columns and of
      // the weight's.
      std::vector<OwnedShard> cut = {EmptyShard(cube, Box({1, 17, 1024}, {3, 283, 1024})),
                                     EmptyShard(w, Box({5, 1000}, {690, 1100}))};
      State cut_target = StateOf(cut);
      ASSERT_OK((*cp)->Load(cut_target));
      for (const auto& s : cut) EXPECT_EQ(Mismatches(s, 9), 0) << s.spec.fqn << " threads " << threads;
    }
  }
}

// Codec::kAuto against a slow device (a simulated disk of 10 MB/s that
// serves writes one after another), a sink faster than any compressor
// (memory), and incompressible bytes: it compresses when the storage is the
// bottleneck, stores as is when it is not, and gives up on bytes that do not
// compress. Every element comes back; each block says what it got.
TEST(Staging, AutoCodecCompressesOnlyWhenTheStorageIsTheBottleneck) {
  struct Case {
    std::string uri;
    Codec codec;
    bool random;
  };
  auto save = [](const Case& c, double* ratio, std::map<std::string, int64_t>* blocks = nullptr) {
    CheckpointerOptions o;
    o.uri = c.uri;
    o.codec = c.codec;
    o.engine_options.block_size = kSmallBlock;
    o.engine_options.staging_bytes = 16 << 20;
    o.engine_options.worker_threads = 2;
    auto cp = Checkpointer::Open(o);
    ASSERT_OK(cp);
    const TensorSpec w{"w", c.random ? DType::kU8 : DType::kBF16, {1024, 2048}};  // 4 or 2 MiB
    std::vector<OwnedShard> shards = {MakeShard(w, Box::Whole(w.shape), 9)};
    if (c.random) {
      std::mt19937_64 rng(7);
      for (std::byte& b : shards[0].data) b = static_cast<std::byte>(rng());
    }
    State state = StateOf(shards);
    auto h = (*cp)->Save(1, state);
    ASSERT_OK(h);
    ASSERT_OK(h->Wait());
    *ratio = static_cast<double>(h->Stats().bytes_stored) / static_cast<double>(h->Stats().bytes_logical);
    std::vector<OwnedShard> out = {EmptyShard(w, Box::Whole(w.shape))};
    State target = StateOf(out);
    ASSERT_OK((*cp)->Load(target));
    EXPECT_EQ(out[0].data, shards[0].data);
    auto storage = OpenStorage(c.uri);
    ASSERT_OK(storage);
    auto m = ReadManifest(**storage, 1);
    ASSERT_OK(m);
    EXPECT_EQ(m->codec, c.codec);
    auto sum = SummarizeStep(**storage, 1);
    ASSERT_OK(sum);
    if (blocks != nullptr) *blocks = sum->blocks_by_codec;
  };
  const std::string slow = "faulty://mem://auto-slow-";
  double shuffled = 0, automatic = 0, fast = 0, random = 0;
  std::map<std::string, int64_t> slow_blocks, fast_blocks;
  save({slow + "a?fault.write_bandwidth=3M", Codec::kShuffleZstd, false}, &shuffled);
  save({slow + "b?fault.write_bandwidth=3M", Codec::kAuto, false}, &automatic, &slow_blocks);
  save({"mem://auto-fast", Codec::kAuto, false}, &fast, &fast_blocks);
  // Each block records what it got: of the 64, all but the first few,
  // written while the backlog builds up. Under a sanitizer the encoders are
  // several times slower, the backlog builds up later, and more of the first
  // blocks go out as they are (14 under clang's ThreadSanitizer here, 2 to 3
  // in a release build).
  const int64_t at_most_plain = kSanitized ? 24 : 13;
  EXPECT_GE(slow_blocks["shuffle-zstd"], 64 - at_most_plain) << slow_blocks["none"];
  EXPECT_EQ(fast_blocks["shuffle-zstd"], 0);
  EXPECT_GE(fast_blocks["none"], 32);
  save({slow + "c?fault.write_bandwidth=3M", Codec::kAuto, true}, &random);
  EXPECT_LT(shuffled, 0.8);  // bf16 of a normal-like law
  // The sink (3 MB/s) is the bottleneck even for compressors slowed ten
  // times by ThreadSanitizer on a loaded machine (at 10 MB/s there, a third
  // of the blocks went out uncompressed): all compressed but the first few blocks,
  // written while the backlog builds up (3% more bytes in a release build;
  // 6% under gcc's ThreadSanitizer, 11% under clang's).
  EXPECT_LE(automatic, shuffled * (kSanitized ? 1.20 : 1.10));
  EXPECT_GT(fast, 0.97);     // writes never queue: stored as is
  EXPECT_GE(random, 0.999);  // nothing to gain
}

// A storage faster than the compressors (zstd at level 19, a few MB/s a
// worker) and slower than staging: its backlog builds up, yet a block
// compressed whenever it did would hold a worker many times longer than the
// storage takes to write the block raw. Auto measures both rates and
// compresses only what the backlog covers, so its saves take no longer than
// those of `none`; every element comes back.
TEST(Staging, AutoCodecDoesNotSlowAStorageFasterThanTheCompressors) {
  static int runs = 0;
  auto storage = OpenStorage("faulty://mem://auto-between-" + std::to_string(runs++) + "?fault.write_bandwidth=200M");
  ASSERT_OK(storage);
  SaveEngineOptions eo;
  eo.block_size = kSmallBlock;
  eo.staging_bytes = 40 << 20;
  eo.worker_threads = 2;
  auto engine = SaveEngine::Create(eo);
  ASSERT_OK(engine);
  const TensorSpec w{"w", DType::kBF16, {4096, 2048}};  // 16 MiB: 84 ms at 200 MB/s
  std::vector<OwnedShard> shards = {MakeShard(w, Box::Whole(w.shape), 9)};
  const State state = StateOf(shards);
  int64_t step = 0;
  auto cp_of = [&](Codec codec) {
    CheckpointerOptions o;
    o.storage = *storage;
    o.engine = *engine;
    o.codec = codec;
    o.zstd_level = 19;
    o.retention.keep_last = 2;
    auto cp = Checkpointer::Open(o);
    EXPECT_OK(cp);
    return std::move(cp).value();
  };
  auto none = cp_of(Codec::kNone);
  auto automatic = cp_of(Codec::kAuto);
  // Seconds until this rank's data is durable.
  auto timed = [&](Checkpointer& cp) {
    auto h = cp.Save(++step, state);
    EXPECT_OK(h);
    if (!h.ok()) return 1e9;
    EXPECT_OK(h->Wait());
    return h->Stats().write_s;
  };
  // The first saves measure the storage and the compressor.
  timed(*none);
  timed(*automatic);
  std::vector<double> t_none, t_auto;
  for (int round = 0; round < 4; ++round) {
    t_none.push_back(timed(*none));
    t_auto.push_back(timed(*automatic));
  }
  // The fastest of each: what the codec choice costs, less the moments the
  // tests running beside this one take the CPU.
  std::sort(t_none.begin(), t_none.end());
  std::sort(t_auto.begin(), t_auto.end());
  // Compressing every block while the backlog exceeded a fixed size took
  // 0.24 s here, against 0.087 s for none.
  // Under the sanitizers (and the tests running beside them) the times of
  // one save vary more.
  EXPECT_LE(t_auto[0], (kSanitized ? 1.6 : 1.25) * t_none[0] + 0.02) << "none " << t_none[0] << " s";
  std::vector<OwnedShard> out = {EmptyShard(w, Box::Whole(w.shape))};
  State target = StateOf(out);
  ASSERT_OK(automatic->Load(target, step));
  EXPECT_EQ(out[0].data, shards[0].data);
}

// A CPU budget bounds the workers to its cores: at a quarter of a core, the
// process spends at most about that while the save persists (compression is
// the work), and the state still loads back whole.
TEST(Staging, ACpuBudgetHoldsTheWorkersToItsCores) {
  auto storage = OpenStorage("mem://cpu-budget");
  ASSERT_OK(storage);
  SaveEngineOptions eo;
  eo.block_size = kSmallBlock;
  eo.staging_bytes = 64 << 20;
  eo.worker_threads = 4;
  eo.cpu_budget = 0.25;
  auto engine = SaveEngine::Create(eo);
  ASSERT_OK(engine);
  EXPECT_EQ((*engine)->worker_threads(), 1);
  CheckpointerOptions o;
  o.storage = *storage;
  o.engine = *engine;
  o.codec = Codec::kZstd;
  o.zstd_level = 3;
  auto cp = Checkpointer::Open(o);
  ASSERT_OK(cp);
  const TensorSpec w{"w", DType::kF32, {4096, 2048}};  // 32 MiB
  std::vector<OwnedShard> shards = {MakeShard(w, Box::Whole(w.shape), 4)};
  const State state = StateOf(shards);
  auto cpu_now = [] {
    rusage u{};
    getrusage(RUSAGE_SELF, &u);
    return static_cast<double>(u.ru_utime.tv_sec + u.ru_stime.tv_sec) +
           static_cast<double>(u.ru_utime.tv_usec + u.ru_stime.tv_usec) / 1e6;
  };
  auto h = (*cp)->Save(1, state);
  ASSERT_OK(h);
  const double cpu0 = cpu_now();
  const auto t0 = std::chrono::steady_clock::now();
  ASSERT_OK(h->Wait());
  const double wall = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
  const double cpu = cpu_now() - cpu0;
  EXPECT_GT(wall, 0.05);
  EXPECT_LE(cpu / wall, 0.25 * 1.3 + 0.05) << cpu << " s of CPU in " << wall << " s";
  std::vector<OwnedShard> out = {EmptyShard(w, Box::Whole(w.shape))};
  State target = StateOf(out);
  ASSERT_OK((*cp)->Load(target, 1));
  EXPECT_EQ(out[0].data, shards[0].data);
  eo.cpu_budget = -1;
  EXPECT_FALSE(SaveEngine::Create(eo).ok());
}

TEST(Staging, ShortBlocksArePackedSoAStateOfItsSizeFitsTheArena) {
  // Every piece's last block is short; a slot per block would need 34
  // slots here, packed they need 6. Writes are held back, so a Save that had
  // to wait for the arena would return only after some were written.
  CheckpointerOptions o;
  o.uri = "faulty://mem://packed?fault.latency=200ms";
  o.engine_options.block_size = kSmallBlock;
  std::vector<OwnedShard> shards;
  int64_t bytes = 0;
  for (int i = 0; i < 4; ++i) {
    TensorSpec spec{"full." + std::to_string(i), DType::kF32, {16384}};  // one whole block
    shards.push_back(MakeShard(spec, Box::Whole(spec.shape), 3));
  }
  for (int i = 0; i < 30; ++i) {
    TensorSpec spec{"norm." + std::to_string(i), DType::kF32, {1000}};
    shards.push_back(MakeShard(spec, Box::Whole(spec.shape), 3));
  }
  for (const auto& s : shards) bytes += s.box.Volume() * 4;
  o.engine_options.staging_bytes = static_cast<size_t>(bytes * 5 / 4);
  auto cp = Checkpointer::Open(o);
  ASSERT_OK(cp);
  State state = StateOf(shards);
  auto h = (*cp)->Save(1, state);
  ASSERT_OK(h);
  const SaveProgress at_return = h->Progress();
  EXPECT_EQ(at_return.bytes_staged, bytes);
  EXPECT_EQ(at_return.blocks_written, 0);
  ASSERT_OK(h->Wait());
  std::vector<OwnedShard> out;
  for (auto& s : shards) out.push_back(EmptyShard(s.spec, s.box));
  State target = StateOf(out);
  ASSERT_OK((*cp)->Load(target));
  for (auto& s : out) EXPECT_EQ(Mismatches(s, 3), 0) << s.spec.fqn;
}

TEST_P(RoundTripTest, LatestAndExplicitSteps) {
  auto cp = Open(Uri(), Codec::kNone);
  ASSERT_NE(cp, nullptr);
  const TensorSpec spec{"p", DType::kF32, {1000}};
  for (int step : {10, 20, 30}) {
    std::vector<OwnedShard> s = {MakeShard(spec, Box::Whole(spec.shape), step)};
    State st = StateOf(s);
    auto h = cp->Save(step, st);
    ASSERT_OK(h);
    ASSERT_OK(h->Wait());
  }
  auto latest = cp->LatestStep();
  ASSERT_OK(latest);
  EXPECT_EQ(*latest, 30);
  for (int step : {10, 20, 30}) {
    std::vector<OwnedShard> out = {EmptyShard(spec, Box::Whole(spec.shape))};
    State t = StateOf(out);
    ASSERT_OK(cp->Load(t, step));
    EXPECT_EQ(Mismatches(out[0], step), 0);
  }
  // Saving a committed step again is refused.
  std::vector<OwnedShard> s = {MakeShard(spec, Box::Whole(spec.shape), 1)};
  State st = StateOf(s);
  auto again = cp->Save(20, st);
  EXPECT_TRUE(absl::IsAlreadyExists(again.status())) << again.status();
  // A missing step says so.
  std::vector<OwnedShard> out = {EmptyShard(spec, Box::Whole(spec.shape))};
  State t = StateOf(out);
  auto missing = cp->Load(t, 25);
  EXPECT_TRUE(absl::IsNotFound(missing.status())) << missing.status();
  EXPECT_NE(missing.status().message().find("step 25"), absl::string_view::npos);
}

TEST_P(RoundTripTest, TargetMismatchIsAClearError) {
  auto cp = Open(Uri(), Codec::kNone);
  ASSERT_NE(cp, nullptr);
  const TensorSpec spec{"p", DType::kF32, {64, 8}};
  std::vector<OwnedShard> s = {MakeShard(spec, Box::Whole(spec.shape), 1)};
  State st = StateOf(s);
  auto h = cp->Save(1, st);
  ASSERT_OK(h);
  ASSERT_OK(h->Wait());
  const TensorSpec wrong_dtype{"p", DType::kBF16, {64, 8}};
  std::vector<OwnedShard> out = {EmptyShard(wrong_dtype, Box::Whole(wrong_dtype.shape))};
  State t = StateOf(out);
  auto r = cp->Load(t);
  ASSERT_FALSE(r.ok());
  EXPECT_NE(r.status().message().find("'p'"), absl::string_view::npos) << r.status();
  EXPECT_NE(r.status().message().find("bf16"), absl::string_view::npos) << r.status();
  const TensorSpec absent{"q", DType::kF32, {4}};
  std::vector<OwnedShard> out2 = {EmptyShard(absent, Box::Whole(absent.shape))};
  State t2 = StateOf(out2);
  EXPECT_TRUE(absl::IsNotFound(cp->Load(t2).status()));
  LoadOptions lo;
  lo.allow_missing = true;
  EXPECT_OK(cp->Load(t2, kLatestStep, lo));
}

INSTANTIATE_TEST_SUITE_P(Backends, RoundTripTest,
                         ::testing::Values(Backend{"uring", ""}, Backend{"threads", "?engine=threads"},
                                           Backend{"buffered", "?direct=0"}, Backend{"mem", ""}),
                         [](const ::testing::TestParamInfo<Backend>& info) { return info.param.name; });

}  // namespace
}  // namespace ckpt::testing
