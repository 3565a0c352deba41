// Who reads what in a cooperative load: every needed byte is read from
// storage once, by a rank that needs it, the hosts' shares are balanced, and
// every rank computes the same plan.
#include "plan/coop_reads.h"

#include <algorithm>
#include <set>

#include "ckpt/state.h"
#include "ckpt/synthetic.h"
#include "core/collective_plan.h"
#include "plan/load_plan.h"
#include "plan/rule_manifest.h"
#include "testutil/test_util.h"

namespace ckpt::testing {
namespace {

struct Saved {
  Manifest manifest;
  uint64_t raw_bytes = 0;  // every tensor's bytes, once
};

Saved SaveOn(const SyntheticOptions& o, const std::string& mesh_text) {
  Saved s;
  auto mesh = Mesh::Parse(mesh_text);
  EXPECT_TRUE(mesh.ok());
  auto model = BuildSyntheticModel(o, *mesh);
  EXPECT_TRUE(model.ok());
  auto m = SaveManifestByRules(model->tensors, *mesh, 64 << 10, 8);
  EXPECT_TRUE(m.ok()) << m.status();
  s.manifest = std::move(m).value();
  for (const ManifestTensor& t : s.manifest.tensors) {
    s.raw_bytes += static_cast<uint64_t>(t.spec.NumElements()) * DTypeSize(t.spec.dtype);
  }
  return s;
}

std::vector<std::string> HostsOf(int64_t world, int per_host) {
  std::vector<std::string> hosts;
  for (int64_t r = 0; r < world; ++r) hosts.push_back(StrCat("host", r / per_host));
  return hosts;
}

// The restart both replica tests plan: 8M parameters with Adam saved on
// dp=2,tp=2,pp=2, loaded onto dp=4,tp=2 with two ranks to a host, in 1 MiB
// cells.
struct Restart {
  Saved saved;
  Mesh mesh;
  std::vector<TensorLayout> target;
  std::vector<std::string> hosts = HostsOf(8, 2);
  CoopReadOptions options;
};

Restart ReplicatedRestart() {
  SyntheticOptions o;
  o.params = 8 << 20;
  o.adam = true;
  Restart r;
  r.saved = SaveOn(o, "dp=2,tp=2,pp=2");
  r.mesh = *Mesh::Parse("dp=4,tp=2");
  auto target = BuildSyntheticModel(o, r.mesh);
  EXPECT_TRUE(target.ok()) << target.status();
  if (target.ok()) r.target = target->tensors;
  r.options.max_segment_bytes = 1 << 20;
  return r;
}

TEST(CoopReads, ReplicasReadEveryByteOnceBalancedOverHosts) {
  const Restart rs = ReplicatedRestart();
  const Saved& saved = rs.saved;
  const CoopReadOptions& options = rs.options;
  auto plan = PlanCooperativeReads(saved.manifest, rs.target, rs.mesh, rs.hosts, options);
  ASSERT_OK(plan);
  // Every byte of the checkpoint is needed (the target holds the whole
  // model) and read once, against four times by every replica alone.
  EXPECT_EQ(plan->bytes_once, saved.raw_bytes);
  auto every_needer = PlanMeshLoad(saved.manifest, rs.target, rs.mesh);
  ASSERT_OK(every_needer);
  EXPECT_EQ(plan->bytes_every_needer, static_cast<uint64_t>(every_needer->bytes_read));
  EXPECT_GE(plan->bytes_every_needer, 4 * plan->bytes_once);
  uint64_t by_readers = 0;
  for (uint64_t b : plan->bytes_by_reader) by_readers += b;
  EXPECT_EQ(by_readers, plan->bytes_once);
  // Readers are needers; runs do not overlap within a file.
  std::map<uint32_t, uint64_t> next_free;
  for (const CoopSegment& s : plan->segments) {
    EXPECT_TRUE(std::binary_search(s.needers.begin(), s.needers.end(), s.reader));
    // A tp shard is held by the 4 dp replicas; a tensor tp does not split
    // (norms) by all 8 ranks.
    EXPECT_TRUE(s.needers.size() == 4u || s.needers.size() == 8u) << s.needers.size();
    EXPECT_GE(s.first_block, next_free[s.file]);
    next_free[s.file] = s.last_block + 1;
    EXPECT_LE(s.raw_bytes, options.max_segment_bytes);
  }
  // Each host reads about a quarter.
  ASSERT_EQ(plan->hosts.size(), 4u);
  for (uint64_t b : plan->bytes_by_host) {
    EXPECT_NEAR(static_cast<double>(b) / static_cast<double>(plan->bytes_once), 0.25, 0.04) << "host share";
  }
  // The same inputs give the same plan (every rank computes it alone).
  auto again = PlanCooperativeReads(saved.manifest, rs.target, rs.mesh, rs.hosts, options);
  ASSERT_OK(again);
  ASSERT_EQ(again->segments.size(), plan->segments.size());
  for (size_t i = 0; i < plan->segments.size(); ++i) {
    EXPECT_EQ(again->segments[i].reader, plan->segments[i].reader);
    EXPECT_EQ(again->segments[i].first_block, plan->segments[i].first_block);
  }
}

// A rank knows only its part of the manifest (the chunks its boxes meet):
// the pieces it needs get the readers the whole plan gives them.
TEST(CoopReads, EachRanksPartGivesTheReadersOfTheWholePlan) {
  const Restart rs = ReplicatedRestart();
  const Saved& saved = rs.saved;
  const CoopReadOptions& options = rs.options;
  auto whole = PlanCooperativeReads(saved.manifest, rs.target, rs.mesh, rs.hosts, options);
  ASSERT_OK(whole);
  std::map<std::pair<std::string, uint64_t>, const CoopSegment*> by_place;
  for (const CoopSegment& s : whole->segments) by_place[{saved.manifest.files[s.file].name, s.first_block}] = &s;
  // One buffer stands in for every shard's data: the planner reads none.
  uint64_t largest = 0;
  for (const TensorLayout& l : rs.target) {
    largest = std::max<uint64_t>(largest, static_cast<uint64_t>(l.spec.NumElements()) * DTypeSize(l.spec.dtype));
  }
  std::vector<std::byte> scratch(largest);
  CoopReadOptions part_options = options;
  part_options.manifest_is_part = true;
  for (int64_t r = 0; r < rs.mesh.NumRanks(); ++r) {
    State st;
    ASSERT_OK(st.SetMesh(rs.mesh, r));
    for (const TensorLayout& l : rs.target) ASSERT_OK(st.AddLayout(l, scratch.data()));
    const Manifest part = RestrictManifest(saved.manifest, st, static_cast<int>(r));
    auto mine = PlanCooperativeReads(part, rs.target, rs.mesh, rs.hosts, part_options);
    ASSERT_OK(mine);
    size_t needed = 0;
    for (const CoopSegment& s : mine->segments) {
      if (!std::binary_search(s.needers.begin(), s.needers.end(), static_cast<int32_t>(r))) continue;
      ++needed;
      auto it = by_place.find({part.files[s.file].name, s.first_block});
      ASSERT_NE(it, by_place.end()) << "rank " << r << " block " << s.first_block;
      EXPECT_EQ(s.last_block, it->second->last_block) << "rank " << r;
      EXPECT_EQ(s.needers, it->second->needers) << "rank " << r;
      EXPECT_EQ(s.reader, it->second->reader) << "rank " << r;
    }
    EXPECT_GT(needed, 0u) << "rank " << r;
  }
}

TEST(CoopReads, WithoutReplicasEachRankReadsItsOwn) {
  SyntheticOptions o;
  o.params = 4 << 20;
  const Saved saved = SaveOn(o, "tp=2");
  auto mesh = Mesh::Parse("tp=4");
  ASSERT_OK(mesh);
  auto target = BuildSyntheticModel(o, *mesh);
  ASSERT_OK(target);
  auto plan = PlanCooperativeReads(saved.manifest, target->tensors, *mesh, HostsOf(4, 1));
  ASSERT_OK(plan);
  auto alone = PlanMeshLoad(saved.manifest, target->tensors, *mesh);
  ASSERT_OK(alone);
  // Replicated tensors (norms, biases) are shared; the rest each rank reads
  // itself, as it would alone.
  EXPECT_LE(plan->bytes_once, static_cast<uint64_t>(alone->bytes_read));
  for (const CoopSegment& s : plan->segments) {
    if (s.needers.size() == 1) {
      EXPECT_EQ(s.reader, s.needers[0]);
    }
  }
}

TEST(CoopReads, HostsMustBeNamedForEveryRank) {
  SyntheticOptions o;
  const Saved saved = SaveOn(o, "tp=2");
  auto mesh = Mesh::Parse("dp=2");
  ASSERT_OK(mesh);
  auto target = BuildSyntheticModel(o, *mesh);
  ASSERT_OK(target);
  auto plan = PlanCooperativeReads(saved.manifest, target->tensors, *mesh, {"only-one"});
  EXPECT_TRUE(absl::IsInvalidArgument(plan.status())) << plan.status();
}

}  // namespace
}  // namespace ckpt::testing
