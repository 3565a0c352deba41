// Numerical audits: stats and the health gate, diff across cuts, the
// checksum shortcut, and one changed element found at its index.
#include "ckpt/audit.h"

#include <sys/resource.h>

#include <cmath>
#include <cstdio>
#include <limits>
#include <map>
#include <optional>

#include "ckpt/checkpointer.h"
#include "ckpt/synthetic.h"
#include "ckpt/verify.h"
#include "testutil/test_util.h"
#include "util/strings.h"

namespace ckpt::testing {
namespace {

const TensorSpec kW{"layers.0.mlp.weight", DType::kF32, {300, 70}};
const TensorSpec kB{"layers.0.mlp.bias", DType::kBF16, {70}};

std::shared_ptr<Storage> Open(const std::string& uri) {
  auto s = OpenStorage(uri);
  EXPECT_TRUE(s.ok()) << s.status();
  return *s;
}

// Saves w (as `parts` row blocks, or column blocks) and b at `step`.
void Save(const std::shared_ptr<Storage>& storage, int64_t step, std::vector<float>& w, std::vector<uint16_t>& b,
          int parts = 1, int64_t slab_block = 64 << 10, bool by_columns = false) {
  CheckpointerOptions o;
  o.storage = storage;
  o.engine_options.block_size = static_cast<size_t>(slab_block);
  auto cp = Checkpointer::Open(o);
  ASSERT_OK(cp);
  State s;
  const TensorSpec w_spec{kW.fqn, DType::kF32, {static_cast<int64_t>(w.size()) / 70, 70}};
  const int64_t rows = w_spec.shape[0] / parts;
  std::vector<std::vector<float>> columns;
  for (int p = 0; by_columns && p < parts; ++p) {
    // Column block p as its own packed buffer.
    const int64_t cols = w_spec.shape[1] / parts, c0 = p * cols;
    const int64_t width = p == parts - 1 ? w_spec.shape[1] - c0 : cols;
    std::vector<float>& col = columns.emplace_back();
    for (int64_t r = 0; r < w_spec.shape[0]; ++r) {
      for (int64_t c = 0; c < width; ++c) col.push_back(w[r * w_spec.shape[1] + c0 + c]);
    }
    Box box = Box::Whole(w_spec.shape);
    box.offsets[1] = c0;
    box.sizes[1] = width;
    ASSERT_OK(s.AddShard(w_spec, box, col.data()));
  }
  for (int p = 0; !by_columns && p < parts; ++p) {
    Box box = Box::Whole(w_spec.shape);
    box.offsets[0] = p * rows;
    box.sizes[0] = p == parts - 1 ? w_spec.shape[0] - p * rows : rows;
    ASSERT_OK(s.AddShard(w_spec, box, w.data() + p * rows * w_spec.shape[1]));
  }
  ASSERT_OK(s.AddTensor(kB, b.data()));
  auto h = (*cp)->Save(step, s);
  ASSERT_OK(h);
  ASSERT_OK(h->Wait());
}

struct Data {
  std::vector<float> w;
  std::vector<uint16_t> b = std::vector<uint16_t>(70);
  explicit Data(int64_t rows = 300) : w(static_cast<size_t>(rows) * 70) {
    for (size_t i = 0; i < w.size(); ++i) w[i] = std::sin(static_cast<float>(i)) * 0.02f;
    for (size_t i = 0; i < b.size(); ++i) b[i] = FloatToBF16(1.0f + 0.01f * static_cast<float>(i));
  }
};

TEST(Audit, GlobMatch) {
  EXPECT_TRUE(GlobMatch("*.mlp.*", "layers.0.mlp.weight"));
  EXPECT_TRUE(GlobMatch("layers.?.mlp.bias", "layers.0.mlp.bias"));
  EXPECT_FALSE(GlobMatch("*.attn.*", "layers.0.mlp.weight"));
  EXPECT_TRUE(GlobMatch("*", ""));
  EXPECT_FALSE(GlobMatch("a*b", "acbx"));
}

TEST(Audit, StatsAreExactAndStreamed) {
  TempDir dir;
  auto s = Open(dir.Join("root"));
  Data d;
  Save(s, 1, d.w, d.b);
  AuditOptions o;
  o.slab_bytes = 4096;  // many slabs per tensor
  auto stats = ComputeStats(*s, kLatestStep, o);
  ASSERT_OK(stats);
  ASSERT_EQ(stats->size(), 2u);
  const TensorStats& w = (*stats)[1].fqn == kW.fqn ? (*stats)[1] : (*stats)[0];
  double sum = 0, sq = 0, mn = 1e9, mx = -1e9;
  int64_t zeros = 0;
  for (float v : d.w) {
    sum += v;
    sq += static_cast<double>(v) * v;
    mn = std::min<double>(mn, v);
    mx = std::max<double>(mx, v);
    zeros += v == 0;
  }
  EXPECT_EQ(w.elements, 21000);
  EXPECT_EQ(w.nan, 0);
  EXPECT_EQ(w.zeros, zeros);
  EXPECT_DOUBLE_EQ(w.min, mn);
  EXPECT_DOUBLE_EQ(w.max, mx);
  EXPECT_NEAR(w.mean, sum / 21000, 1e-12);
  EXPECT_NEAR(w.l2, std::sqrt(sq), 1e-9);
}

TEST(Audit, GateCatchesNanZerosAndNormJumps) {
  TempDir dir;
  auto s = Open(dir.Join("root"));
  Data d;
  Save(s, 1, d.w, d.b);
  auto clean = ComputeStats(*s, 1);
  ASSERT_OK(clean);
  EXPECT_TRUE(GateProblems(*clean, nullptr).empty());

  // A NaN saved through the library API.
  Data bad = d;
  bad.w[12345] = std::numeric_limits<float>::quiet_NaN();
  bad.w[7] = std::numeric_limits<float>::infinity();
  Save(s, 2, bad.w, bad.b);
  auto st = ComputeStats(*s, 2);
  ASSERT_OK(st);
  auto problems = GateProblems(*st, &*clean);
  ASSERT_EQ(problems.size(), 1u);
  EXPECT_NE(problems[0].find(kW.fqn), std::string::npos) << problems[0];
  EXPECT_NE(problems[0].find("1 NaN and 1 Inf"), std::string::npos) << problems[0];

  // All zeros, and a norm that tripled.
  Data odd = d;
  std::fill(odd.b.begin(), odd.b.end(), 0);
  for (float& v : odd.w) v *= 3;
  Save(s, 3, odd.w, odd.b);
  auto third = ComputeStats(*s, 3);
  ASSERT_OK(third);
  problems = GateProblems(*third, &*clean);
  ASSERT_EQ(problems.size(), 3u);  // the zeroed bias's norm moved 100% too
  std::string all = problems[0] + "\n" + problems[1] + "\n" + problems[2];
  EXPECT_NE(all.find(kB.fqn + ": L2 norm moved 100.0%"), std::string::npos) << all;
  EXPECT_NE(all.find(kB.fqn + ": all 70 elements are zero"), std::string::npos) << all;
  EXPECT_NE(all.find(kW.fqn + ": L2 norm moved 200.0%"), std::string::npos) << all;
  GateOptions lenient;
  lenient.max_norm_change = 3;
  lenient.allow_all_zero = true;
  EXPECT_TRUE(GateProblems(*third, &*clean, lenient).empty());
}

TEST(Audit, DiffIdenticalByChecksumAcrossCutsAndOneChangedElement) {
  TempDir dir;
  auto a = Open(dir.Join("a"));
  auto b = Open(dir.Join("b"));
  auto c = Open(dir.Join("c"));
  Data d;
  Save(a, 1, d.w, d.b);
  Save(b, 1, d.w, d.b);
  auto same = DiffSteps(*a, 1, *b, 1);
  ASSERT_OK(same);
  for (const TensorDiff& t : *same) {
    EXPECT_EQ(t.kind, TensorDiff::Kind::kIdentical) << t.fqn;
    EXPECT_TRUE(t.by_checksum) << t.fqn;
  }
  // Another cut (3 row blocks) of the same values: identical by value.
  Save(c, 1, d.w, d.b, 3);
  auto cut = DiffSteps(*a, 1, *c, 1);
  ASSERT_OK(cut);
  for (const TensorDiff& t : *cut) {
    EXPECT_EQ(t.kind, TensorDiff::Kind::kIdentical) << t.fqn;
    if (t.fqn == kW.fqn) {
      EXPECT_FALSE(t.by_checksum);
    }
  }
  // One element changed, in the second checkpoint's step 2.
  Data e = d;
  e.w[4321] += 0.5f;
  Save(c, 2, e.w, e.b, 3);
  AuditOptions o;
  o.slab_bytes = 8192;
  auto one = DiffSteps(*a, 1, *c, 2, o);
  ASSERT_OK(one);
  bool found = false;
  for (const TensorDiff& t : *one) {
    if (t.fqn != kW.fqn) {
      EXPECT_EQ(t.kind, TensorDiff::Kind::kIdentical);
      continue;
    }
    found = true;
    EXPECT_EQ(t.kind, TensorDiff::Kind::kChanged);
    EXPECT_EQ(t.differing, 1);
    EXPECT_EQ(t.first_index, 4321);
    EXPECT_NEAR(t.max_abs, 0.5, 1e-6);
    EXPECT_GT(t.rel_l2, 0);
  }
  EXPECT_TRUE(found);
}

// Two saves cut the same way but into blocks of other sizes: values are
// compared block against block, and differences keep their global index.
TEST(Audit, DiffSameCutOtherBlockSizesLocatesChanges) {
  TempDir dir;
  auto a = Open(dir.Join("a"));
  auto b = Open(dir.Join("b"));
  Data d(3000);  // 820 KiB: chunks of several blocks
  for (bool by_columns : {false, true}) {
    const int64_t step = by_columns ? 2 : 1;
    Save(a, step, d.w, d.b, 3, 192 << 10, by_columns);
    Data e = d;
    e.w[4321] -= 0.25f;  // row 61, column 51: the last column block
    e.w[e.w.size() - 1] += 1.0f;
    e.w[75] = std::numeric_limits<float>::quiet_NaN();
    Save(b, step, e.w, e.b, 3, 64 << 10, by_columns);
    AuditOptions o;
    o.slab_bytes = 256 << 10;
    auto diffs = DiffSteps(*a, step, *b, step, o);
    ASSERT_OK(diffs);
    ASSERT_EQ(diffs->size(), 2u);
    for (const TensorDiff& t : *diffs) {
      EXPECT_FALSE(t.by_checksum) << t.fqn;
      if (t.fqn == kB.fqn) {
        EXPECT_EQ(t.kind, TensorDiff::Kind::kIdentical);
        continue;
      }
      EXPECT_EQ(t.kind, TensorDiff::Kind::kChanged) << by_columns;
      EXPECT_EQ(t.differing, 3) << by_columns;
      EXPECT_EQ(t.first_index, 75) << by_columns;
      EXPECT_NEAR(t.max_abs, 1.0, 1e-6) << by_columns;
    }
  }
}

// A block of B that fails its checksum stops the diff with its location.
TEST(Audit, DiffNamesTheSideAndBlockThatFails) {
  TempDir dir;
  auto a = Open(dir.Join("a"));
  auto b = Open(dir.Join("b"));
  Data d(3000);
  Save(a, 1, d.w, d.b, 1, 128 << 10);
  Save(b, 1, d.w, d.b, 1, 64 << 10);
  const std::string file = dir.Join("b/step-0000000001/rank-000000.ckd");
  {
    std::FILE* f = std::fopen(file.c_str(), "r+b");
    ASSERT_NE(f, nullptr);
    std::fseek(f, 70000, SEEK_SET);  // inside the second frame's payload
    const int c = std::fgetc(f);
    std::fseek(f, 70000, SEEK_SET);
    std::fputc(c ^ 0x10, f);
    std::fclose(f);
  }
  auto diffs = DiffSteps(*a, 1, *b, 1);
  ASSERT_FALSE(diffs.ok());
  const std::string msg(diffs.status().message());
  EXPECT_EQ(msg.rfind("B: ", 0), 0u) << msg;
  EXPECT_NE(msg.find("tensor '"), std::string::npos) << msg;
  EXPECT_NE(msg.find("rank-000000.ckd"), std::string::npos) << msg;
  EXPECT_NE(msg.find("offset"), std::string::npos) << msg;
}

// Per-block results are folded in file order: the same step gives the same
// bits every time, however the workers interleave.
TEST(Audit, StatsRepeatExactly) {
  TempDir dir;
  auto s = Open(dir.Join("root"));
  Data d(3000);
  Save(s, 1, d.w, d.b, 4, 64 << 10);
  AuditOptions o;
  o.slab_bytes = 256 << 10;
  auto first = ComputeStats(*s, 1, o);
  ASSERT_OK(first);
  for (int i = 0; i < 10; ++i) {
    auto again = ComputeStats(*s, 1, o);
    ASSERT_OK(again);
    ASSERT_EQ(again->size(), first->size());
    for (size_t t = 0; t < first->size(); ++t) {
      EXPECT_EQ((*again)[t].mean, (*first)[t].mean);
      EXPECT_EQ((*again)[t].l2, (*first)[t].l2);
    }
  }
}

TEST(Audit, DiffReportsMissingAndMismatchedTensors) {
  TempDir dir;
  auto a = Open(dir.Join("a"));
  auto b = Open(dir.Join("b"));
  Data d;
  Save(a, 1, d.w, d.b);
  {
    CheckpointerOptions o;
    o.storage = b;
    auto cp = Checkpointer::Open(o);
    ASSERT_OK(cp);
    const TensorSpec other{"layers.0.mlp.weight", DType::kF32, {70, 300}};  // transposed
    const TensorSpec extra{"layers.1.mlp.weight", DType::kF32, {10}};
    std::vector<float> x(21000), y(10);
    State s;
    ASSERT_OK(s.AddTensor(other, x.data()));
    ASSERT_OK(s.AddTensor(extra, y.data()));
    auto h = (*cp)->Save(1, s);
    ASSERT_OK(h);
    ASSERT_OK(h->Wait());
  }
  auto diffs = DiffSteps(*a, 1, *b, 1);
  ASSERT_OK(diffs);
  std::map<std::string, TensorDiff::Kind> kinds;
  for (const TensorDiff& t : *diffs) kinds[t.fqn] = t.kind;
  EXPECT_EQ(kinds["layers.0.mlp.weight"], TensorDiff::Kind::kMismatch);
  EXPECT_EQ(kinds["layers.0.mlp.bias"], TensorDiff::Kind::kOnlyInA);
  EXPECT_EQ(kinds["layers.1.mlp.weight"], TensorDiff::Kind::kOnlyInB);
}

// A root with more data files than the process may hold open: verify opens
// a bounded number at a time (16k-rank checkpoints met "Too many open files").
TEST(Audit, VerifyHoldsFewFilesOpen) {
  TempDir dir;
  auto storage = Open(dir.Join("root"));
  constexpr int kRanks = 300;
  const TensorSpec spec{"t", DType::kF32, {kRanks, 16}};
  std::vector<float> rows(kRanks * 16);
  for (size_t i = 0; i < rows.size(); ++i) rows[i] = static_cast<float>(i);
  std::vector<std::unique_ptr<Checkpointer>> open;  // each waits for the leader when closed
  std::optional<SaveHandle> leader;                 // claims the step first; commits once every rank reported
  for (int rank = 0; rank < kRanks; ++rank) {
    CheckpointerOptions o;
    o.storage = storage;
    o.rank = rank;
    o.world_size = kRanks;
    o.gc_on_open = false;
    o.engine_options.staging_bytes = 1 << 20;
    auto cp = Checkpointer::Open(o);
    ASSERT_OK(cp);
    State s;
    Box box = Box::Whole(spec.shape);
    box.offsets[0] = rank;
    box.sizes[0] = 1;
    ASSERT_OK(s.AddShard(spec, box, rows.data() + rank * 16));
    auto h = (*cp)->Save(1, s);
    ASSERT_OK(h);
    ASSERT_OK(h->WaitDurable());
    if (rank == 0) leader = *h;
    open.push_back(std::move(cp).value());
  }
  ASSERT_OK(leader->Wait());
  open.clear();
  rlimit saved;
  ASSERT_EQ(getrlimit(RLIMIT_NOFILE, &saved), 0);
  rlimit low = saved;
  low.rlim_cur = 200;  // fewer than the 300 files (and their O_DIRECT twins)
  ASSERT_EQ(setrlimit(RLIMIT_NOFILE, &low), 0);
  auto fast = VerifyStep(*storage, 1, VerifyOptions{.deep = false});
  auto deep = VerifyStep(*storage, 1);
  setrlimit(RLIMIT_NOFILE, &saved);
  ASSERT_OK(fast);
  ASSERT_OK(deep);
  EXPECT_TRUE(fast->ok()) << (fast->problems.empty() ? "" : fast->problems[0].message);
  EXPECT_TRUE(deep->ok()) << (deep->problems.empty() ? "" : deep->problems[0].message);
  EXPECT_EQ(deep->files, kRanks);
}

}  // namespace
}  // namespace ckpt::testing
