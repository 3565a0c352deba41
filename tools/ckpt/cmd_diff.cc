// ckpt diff: what differs between two steps, tensor by tensor (by checksum
// first), and between their blobs and metadata.
#include <cstdio>

#include "ckpt/audit.h"
#include "ckpt/checkpointer.h"
#include "ckpt/storage.h"
#include "ckpt/verify.h"
#include "commands.h"
#include "common/cli.h"
#include "util/bytes.h"
#include "util/json.h"
#include "util/strings.h"

namespace ckpt::tools {

int DiffMain(int argc, char** argv, int first) {
  std::string a, b, glob;
  int64_t step_a = kLatestStep, step_b = kLatestStep;
  bool json = false, all = false, tensors_only = false;
  Args args("diff", "A B [--step-a S] [--step-b S] [--tensor GLOB] [--tensors-only] [--json]",
            "Compares two checkpoints tensor by tensor as global tensors, so they may come\n"
            "from different meshes. A tensor is identical (decided from the stored block\n"
            "checksums without reading data when both were cut the same way) or changed:\n"
            "the count of differing elements, the first one's row-major index, the largest\n"
            "absolute difference and the relative L2 difference. Tensors only in one side\n"
            "and shape or dtype changes are listed. A and B may be the same root with\n"
            "different steps. Blobs (by name and rank) and metadata entries are compared\n"
            "too (--tensors-only leaves them out, e.g. across meshes, whose per-rank blobs\n"
            "differ by construction). Exit 0 identical, 1 differences found, 2 unreadable.");
  args.Positional("A", &a, "first checkpoint root");
  args.Positional("B", &b, "second checkpoint root");
  args.Int("step-a", &step_a, "step of A (default: latest)");
  args.Int("step-b", &step_b, "step of B (default: latest)");
  args.String("tensor", &glob, "only tensors matching this glob");
  args.Switch("all", &all, "also list identical tensors");
  args.Switch("tensors-only", &tensors_only, "compare tensors only, not blobs and metadata");
  args.Switch("json", &json, "print JSON");
  int exit = 0;
  if (!args.Parse(argc, argv, first, &exit)) return exit;
  auto sa = OpenStorage(a);
  if (!sa.ok()) return FailUnreadable("diff", sa.status());
  auto sb = OpenStorage(b);
  if (!sb.ok()) return FailUnreadable("diff", sb.status());
  AuditOptions o;
  o.tensor_glob = glob;
  ProgressBar bar("diff");
  o.progress = [&](int64_t d, int64_t t) { bar.Update(d, t); };
  for (auto [st, which] : {std::pair{sa->get(), step_a}, std::pair{sb->get(), step_b}}) {
    if (which == kLatestStep) {
      auto latest = LatestCommittedStep(*st);
      if (!latest.ok()) continue;  // DiffSteps reports it
      which = *latest;
    }
    WarnIfDamaged(*st, which, "diff");
  }
  auto diffs = DiffSteps(**sa, step_a, **sb, step_b, o);
  bar.Finish();
  if (!diffs.ok()) return FailUnreadable("diff", diffs.status());
  auto items = tensors_only ? absl::StatusOr<std::vector<ItemDiff>>(std::vector<ItemDiff>{})
                            : DiffBlobsAndMetadata(**sa, step_a, **sb, step_b);
  if (!items.ok()) return FailUnreadable("diff", items.status());
  int64_t items_identical = 0, items_different = 0;
  for (const ItemDiff& d : *items) (d.kind == ItemDiff::Kind::kIdentical ? items_identical : items_different) += 1;
  auto item_kind = [](ItemDiff::Kind k) {
    switch (k) {
      case ItemDiff::Kind::kIdentical:
        return "identical";
      case ItemDiff::Kind::kChanged:
        return "changed";
      case ItemDiff::Kind::kOnlyInA:
        return "only_in_a";
      case ItemDiff::Kind::kOnlyInB:
        return "only_in_b";
    }
    return "?";
  };
  int64_t identical = 0, by_checksum = 0, different = 0;
  for (const TensorDiff& d : *diffs) {
    if (d.kind == TensorDiff::Kind::kIdentical) {
      ++identical;
      by_checksum += d.by_checksum;
    } else {
      ++different;
    }
  }
  Render(
      json,
      [&](JsonWriter& w) {
        w.BeginObject()
            .Field("identical", identical)
            .Field("identical_by_checksum", by_checksum)
            .Field("different", different);
        w.Key("tensors").BeginArray();
        for (const TensorDiff& d : *diffs) {
          if (d.kind == TensorDiff::Kind::kIdentical && !all) continue;
          w.BeginObject().Field("name", d.fqn).Field("kind", DiffKindName(d.kind)).Field("elements", d.elements);
          if (d.kind == TensorDiff::Kind::kChanged) {
            w.Field("differing", d.differing)
                .Field("first_index", d.first_index)
                .Field("max_abs", d.max_abs)
                .Field("rel_l2", d.rel_l2);
          }
          if (!d.note.empty()) w.Field("note", d.note);
          w.EndObject();
        }
        w.EndArray();
        w.Field("blobs_and_metadata_identical", items_identical).Field("blobs_and_metadata_different", items_different);
        w.Key("blobs_and_metadata").BeginArray();
        for (const ItemDiff& d : *items) {
          if (d.kind == ItemDiff::Kind::kIdentical && !all) continue;
          w.BeginObject().Field("name", d.what).Field("kind", item_kind(d.kind));
          if (!d.note.empty()) w.Field("note", d.note);
          w.EndObject();
        }
        w.EndArray().EndObject();
      },
      [&] {
        for (const TensorDiff& d : *diffs) {
          switch (d.kind) {
            case TensorDiff::Kind::kIdentical:
              if (all) std::printf("  identical  %s%s\n", d.fqn.c_str(), d.by_checksum ? " (by checksum)" : "");
              break;
            case TensorDiff::Kind::kChanged:
              std::printf(
                  "  changed    %s: %lld of %lld elements differ (first at index %lld), max |a-b| %.6g, "
                  "relative L2 %.3g\n",
                  d.fqn.c_str(), static_cast<long long>(d.differing), static_cast<long long>(d.elements),
                  static_cast<long long>(d.first_index), d.max_abs, d.rel_l2);
              break;
            case TensorDiff::Kind::kOnlyInA:
              std::printf("  only in A  %s\n", d.fqn.c_str());
              break;
            case TensorDiff::Kind::kOnlyInB:
              std::printf("  only in B  %s\n", d.fqn.c_str());
              break;
            case TensorDiff::Kind::kMismatch:
              std::printf("  mismatch   %s: %s\n", d.fqn.c_str(), d.note.c_str());
              break;
          }
        }
        for (const ItemDiff& d : *items) {
          if (d.kind == ItemDiff::Kind::kIdentical && !all) continue;
          const char* label = d.kind == ItemDiff::Kind::kIdentical ? "identical"
                              : d.kind == ItemDiff::Kind::kChanged ? "changed  "
                              : d.kind == ItemDiff::Kind::kOnlyInA ? "only in A"
                                                                   : "only in B";
          std::printf("  %s  %s%s%s\n", label, d.what.c_str(), d.note.empty() ? "" : ": ", d.note.c_str());
        }
        std::printf(
            "%lld identical (%lld by checksum), %lld different tensors; %lld identical, %lld different blobs "
            "and metadata entries\n",
            static_cast<long long>(identical), static_cast<long long>(by_checksum), static_cast<long long>(different),
            static_cast<long long>(items_identical), static_cast<long long>(items_different));
      });
  return different > 0 || items_different > 0 ? kExitProblem : kExitOk;
}

}  // namespace ckpt::tools
