#include "coordinator/status.h"

#include <algorithm>
#include <cstdio>

#include "util/json.h"
#include "util/strings.h"

namespace ckpt::coord {

namespace {

void StoreJson(JsonWriter& j, const StatusView& v) {
  const StoreView& st = v.store;
  j.Key("control_plane").BeginObject();
  j.Field("role", st.leading ? "leader" : "standby")
      .Field("store", st.kind)
      .Field("where", st.where)
      .Field("self", st.self)
      .Field("leader", st.leader);
  j.Key("standbys").BeginArray();
  for (const std::string& s : st.standbys) j.String(s);
  j.EndArray();
  j.Field("leaders", st.leaders).Field("leader_changes", std::max<int64_t>(0, st.leaders - 1));
  j.Key("endpoints").BeginArray();
  for (const StoreView::Endpoint& e : st.endpoints) {
    j.BeginObject().Field("url", e.url).Field("up", e.up);
    if (e.up) {
      j.Field("raft_leader", e.raft_leader).Field("raft_term", e.raft_term).Field("db_bytes", e.db_bytes);
      j.Field("rtt_s", e.rtt_s);
    }
    if (!e.error.empty()) j.Field("error", e.error);
    j.EndObject();
  }
  j.EndArray();
  j.Field("probed_s_ago", st.probed_s_ago);
  const LatencyStats& a = v.appends;
  j.Key("appends")
      .BeginObject()
      .Field("count", a.count)
      .Field("mean_s", a.count > 0 ? a.sum_s / static_cast<double>(a.count) : 0.0)
      .Field("max_s", a.max_s)
      .Field("last_s", a.last_s)
      .EndObject();
  j.EndObject();
}

std::string Seconds(double s) {
  char buf[32];
  if (s < 1) {
    std::snprintf(buf, sizeof(buf), "%.2f ms", s * 1e3);
  } else {
    std::snprintf(buf, sizeof(buf), "%.2f s", s);
  }
  return buf;
}

void StoreText(std::string& t, const StatusView& v) {
  const StoreView& st = v.store;
  if (st.kind == "etcd") {
    StrAppend(&t, st.leading ? "leader" : "standby", " (", st.self, "); state in ", st.where, "\n");
    StrAppend(&t, "  leader: ", st.leader.empty() ? std::string("(none)") : st.leader, "; leader changes ",
              std::max<int64_t>(0, st.leaders - 1), "\n");
    for (const std::string& s : st.standbys) StrAppend(&t, "  standby: ", s, "\n");
    if (st.standbys.empty()) StrAppend(&t, "  standby: (none)\n");
    for (const StoreView::Endpoint& e : st.endpoints) {
      if (e.up) {
        StrAppend(&t, "  etcd ", e.url, ": up", e.raft_leader ? ", raft leader" : "", ", term ", e.raft_term, ", ",
                  Seconds(e.rtt_s), e.error.empty() ? "" : "; ", e.error, "\n");
      } else {
        StrAppend(&t, "  etcd ", e.url, ": DOWN (", e.error, ")\n");
      }
    }
  } else {
    StrAppend(&t, "state in ", st.where, "\n");
    if (!v.serving) StrAppend(&t, "standby: replaying the journal, not serving yet\n");
  }
  const LatencyStats& a = v.appends;
  if (a.count > 0) {
    StrAppend(&t, "  records written: ", a.count, ", mean ", Seconds(a.sum_s / static_cast<double>(a.count)),
              ", worst ", Seconds(a.max_s), "\n");
  }
}

}  // namespace

std::string StatusJson(const StatusView& v) {
  JsonWriter j;
  j.BeginObject().Field("serving", v.serving);
  StoreJson(j, v);
  if (!v.serving) {
    j.EndObject();
    return j.str();
  }
  j.Field("generation", v.generation)
      .Field("running", v.running)
      .Field("forming", v.forming)
      .Field("world_size", v.world_size)
      .Field("restore_step", v.restore_step)
      .Field("last_committed_step", v.last_committed_step)
      .Field("commits", v.commits)
      .Field("aborts", v.aborts)
      .Field("deaths", v.deaths)
      .Field("grows", v.grows)
      .Field("heartbeat_misses", v.heartbeat_misses)
      .Field("refused_joins", v.refused_joins)
      .Field("bad_frames", v.bad_frames);
  j.Key("dropped_connections").BeginObject();
  for (const auto& [reason, n] : v.dropped) j.Field(reason, n);
  j.EndObject();
  j.Field("unauthenticated_connections", v.unauthenticated_connections);
  j.Key("members").BeginArray();
  for (const StatusView::Member& m : v.members) {
    j.BeginObject()
        .Field("id", m.id)
        .Field("host", m.host)
        .Field("first_rank", m.first_rank)
        .Field("local_ranks", m.local_ranks)
        .Field("last_heartbeat_s_ago", m.last_heartbeat_s_ago)
        .Field("connected", m.connected)
        .EndObject();
  }
  j.EndArray();
  j.Key("waiting").BeginArray();
  for (const StatusView::Waiting& w : v.waiting) j.BeginObject().Field("id", w.id).Field("host", w.host).EndObject();
  j.EndArray();
  j.Key("stragglers").BeginObject().Field("step", v.straggler_step);
  j.Key("ranks").BeginArray();
  for (const auto& [rank, x] : v.stragglers) j.BeginObject().Field("rank", rank).Field("write_s", x).EndObject();
  j.EndArray().EndObject();
  j.Key("sdc_alerts").BeginArray();
  for (const SdcAlert& a : v.sdc_alerts) {
    j.BeginObject().Field("step", a.step).Field("chunk", a.key).Field("detail", a.detail).EndObject();
  }
  j.EndArray();
  j.EndObject();
  return j.str();
}

std::string StatusText(const StatusView& v) {
  std::string t;
  StoreText(t, v);
  if (!v.serving) return t;
  StrAppend(&t, "generation ", v.generation, v.running ? " running" : " not running", ", world size ", v.world_size,
            ", restore step ", v.restore_step, ", last committed step ", v.last_committed_step, "\n");
  StrAppend(&t, "commits ", v.commits, ", aborts ", v.aborts, ", deaths ", v.deaths, ", grown back ", v.grows,
            ", heartbeat misses ", v.heartbeat_misses, ", refused joins ", v.refused_joins, ", bad frames ",
            v.bad_frames, "\n");
  StrAppend(&t, "members:\n");
  for (const StatusView::Member& m : v.members) {
    char ago[32];
    std::snprintf(ago, sizeof(ago), "%.2f", m.last_heartbeat_s_ago);
    StrAppend(&t, "  ", m.id, "  ", m.host, "  ranks ", m.first_rank, "..", m.first_rank + m.local_ranks - 1,
              "  last heartbeat ", ago, " s ago", m.connected ? "" : "  (disconnected)", "\n");
  }
  if (v.members.empty()) StrAppend(&t, "  (none)\n");
  for (const StatusView::Waiting& w : v.waiting) StrAppend(&t, "waiting: ", w.id, "  ", w.host, "\n");
  for (const auto& [rank, x] : v.stragglers) {
    StrAppend(&t, "straggler in step ", v.straggler_step, ": rank ", rank, " wrote for ", x, " s\n");
  }
  for (const SdcAlert& a : v.sdc_alerts) StrAppend(&t, "SDC alert, step ", a.step, " ", a.key, ": ", a.detail, "\n");
  return t;
}

std::string PrometheusMetrics(const StatusView& v) {
  std::string m;
  auto gauge = [&](const char* name, const char* help, double x) {
    StrAppend(&m, "# HELP ", name, " ", help, "\n# TYPE ", name, " gauge\n", name, " ", x, "\n");
  };
  auto counter = [&](const char* name, const char* help, double x) {
    StrAppend(&m, "# HELP ", name, " ", help, "\n# TYPE ", name, " counter\n", name, " ", x, "\n");
  };
  const StoreView& st = v.store;
  gauge("ckpt_coordinator_leader", "1 on the replica that leads, 0 on a standby.", st.leading ? 1 : 0);
  gauge("ckpt_coordinator_standbys", "Standby replicas registered on the store.",
        static_cast<double>(st.standbys.size()));
  counter("ckpt_coordinator_leader_changes_total", "Times another replica took over the store.",
          static_cast<double>(std::max<int64_t>(0, st.leaders - 1)));
  if (!st.endpoints.empty()) {
    StrAppend(&m, "# HELP ckpt_coordinator_store_up 1 when the etcd member answered its last status request.\n",
              "# TYPE ckpt_coordinator_store_up gauge\n");
    for (const StoreView::Endpoint& e : st.endpoints) {
      StrAppend(&m, "ckpt_coordinator_store_up{endpoint=\"", e.url, "\"} ", e.up ? 1 : 0, "\n");
    }
    StrAppend(&m, "# HELP ckpt_coordinator_store_rtt_seconds Round trip of the last status request to each member.\n",
              "# TYPE ckpt_coordinator_store_rtt_seconds gauge\n");
    for (const StoreView::Endpoint& e : st.endpoints) {
      if (e.up) StrAppend(&m, "ckpt_coordinator_store_rtt_seconds{endpoint=\"", e.url, "\"} ", e.rtt_s, "\n");
    }
  }
  const LatencyStats& a = v.appends;
  StrAppend(&m, "# HELP ckpt_coordinator_store_append_seconds Time to make one state record durable.\n",
            "# TYPE ckpt_coordinator_store_append_seconds histogram\n");
  for (size_t i = 0; i < LatencyStats::kBuckets; ++i) {
    StrAppend(&m, "ckpt_coordinator_store_append_seconds_bucket{le=\"", LatencyStats::kBounds[i], "\"} ", a.le[i],
              "\n");
  }
  StrAppend(&m, "ckpt_coordinator_store_append_seconds_bucket{le=\"+Inf\"} ", a.count, "\n",
            "ckpt_coordinator_store_append_seconds_sum ", a.sum_s, "\n", "ckpt_coordinator_store_append_seconds_count ",
            a.count, "\n");
  if (!v.serving) return m;
  gauge("ckpt_coordinator_generation", "Current generation number.", static_cast<double>(v.generation));
  gauge("ckpt_coordinator_running", "1 while a generation is running.", v.running ? 1 : 0);
  gauge("ckpt_coordinator_world_size", "Ranks in the current generation.", v.world_size);
  gauge("ckpt_coordinator_members", "Members in the current generation.", static_cast<double>(v.members.size()));
  gauge("ckpt_coordinator_waiting_members", "Members waiting for the next generation.",
        static_cast<double>(v.waiting.size()));
  gauge("ckpt_coordinator_last_committed_step", "Latest committed step (-1: none).",
        static_cast<double>(v.last_committed_step));
  counter("ckpt_coordinator_commits_total", "Steps committed.", static_cast<double>(v.commits));
  counter("ckpt_coordinator_aborts_total", "Steps aborted.", static_cast<double>(v.aborts));
  counter("ckpt_coordinator_heartbeat_misses_total", "Heartbeat intervals missed by members.",
          static_cast<double>(v.heartbeat_misses));
  counter("ckpt_coordinator_deaths_total", "Members declared dead.", static_cast<double>(v.deaths));
  counter("ckpt_coordinator_grows_total", "Generations ended to grow back with spares.", static_cast<double>(v.grows));
  counter("ckpt_coordinator_sdc_alerts_total", "Replica disagreements (silent data corruption).",
          static_cast<double>(v.sdc_alerts.size()));
  counter("ckpt_coordinator_refused_joins_total", "Joins refused (wrong token).", static_cast<double>(v.refused_joins));
  counter("ckpt_coordinator_bad_frames_total", "Connections closed for malformed frames.",
          static_cast<double>(v.bad_frames));
  StrAppend(&m, "# HELP ckpt_coordinator_dropped_connections_total Connections dropped or refused, by reason.\n",
            "# TYPE ckpt_coordinator_dropped_connections_total counter\n");
  for (const auto& [reason, n] : v.dropped) {
    StrAppend(&m, "ckpt_coordinator_dropped_connections_total{reason=\"", reason, "\"} ", n, "\n");
  }
  StrAppend(&m, "# HELP ckpt_coordinator_connections Open connections, by whether they joined.\n",
            "# TYPE ckpt_coordinator_connections gauge\n", "ckpt_coordinator_connections{state=\"unauthenticated\"} ",
            v.unauthenticated_connections, "\n", "ckpt_coordinator_connections{state=\"joined\"} ",
            v.joined_connections, "\n");
  if (!v.last_save.empty()) {
    StrAppend(&m, "# HELP ckpt_coordinator_save_seconds Per-rank durations of the last committed save.\n",
              "# TYPE ckpt_coordinator_save_seconds summary\n");
    for (const auto& [what, values] : v.last_save) {
      if (values.empty()) continue;
      std::vector<double> sorted = values;
      std::sort(sorted.begin(), sorted.end());
      for (double q : {0.5, 0.9, 1.0}) {
        const size_t at =
            std::min(sorted.size() - 1, static_cast<size_t>(q * static_cast<double>(sorted.size() - 1) + 0.5));
        StrAppend(&m, "ckpt_coordinator_save_seconds{phase=\"", what, "\",quantile=\"", q, "\"} ", sorted[at], "\n");
      }
    }
    gauge("ckpt_coordinator_stragglers", "Ranks flagged as stragglers in the last committed save.",
          static_cast<double>(v.stragglers.size()));
  }
  return m;
}

}  // namespace ckpt::coord
