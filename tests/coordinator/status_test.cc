// The coordinator's status document, its text form and its metrics, rendered
// from a snapshot without a running coordinator.
#include "coordinator/status.h"

#include <gtest/gtest.h>

#include <set>
#include <sstream>
#include <string>

namespace ckpt::coord {
namespace {

StatusView Sample() {
  StatusView v;
  v.generation = 3;
  v.running = true;
  v.world_size = 4;
  v.restore_step = 20;
  v.last_committed_step = 25;
  v.commits = 5;
  v.aborts = 1;
  v.deaths = 2;
  v.grows = 1;
  v.refused_joins = 1;
  v.dropped = {{"bad_frame", 2}, {"idle_timeout", 0}};
  v.unauthenticated_connections = 1;
  v.joined_connections = 2;
  v.members = {{7, "node-a", 0, 2, 0.25, true}, {9, "node-b", 2, 2, 4.5, false}};
  v.waiting = {{11, "node-c"}};
  v.last_save = {{"stall", {0.1, 0.2, 0.1, 0.3}}, {"write", {1, 1, 1, 5}}};
  v.straggler_step = 25;
  v.stragglers = {{3, 5.0}};
  v.sdc_alerts = {{10, "w[0:64]", "rank(s) 1 disagree with the other 2 of 3 replicas"}};
  v.store.kind = "etcd";
  v.store.where = "etcd http://127.0.0.1:2379 (and 2 more) /ckpt/j/";
  v.store.self = v.store.leader = "node-x pid 7 10.0.0.1:7070";
  v.store.standbys = {"node-y pid 9 10.0.0.2:7070"};
  v.store.leaders = 4;
  StoreView::Endpoint up, down;
  up.url = "http://127.0.0.1:2379";
  up.up = up.raft_leader = true;
  up.raft_term = 3;
  up.rtt_s = 0.0012;
  down.url = "http://127.0.0.1:2381";
  down.error = "connection refused";
  v.store.endpoints = {up, down};
  for (double s : {0.0004, 0.002, 0.003, 0.2}) v.appends.Add(s);
  return v;
}

TEST(Status, JsonCarriesEveryField) {
  const std::string j = StatusJson(Sample());
  for (const char* want :
       {"\"generation\":3,\"running\":true,\"forming\":false,\"world_size\":4,\"restore_step\":20,"
        "\"last_committed_step\":25,\"commits\":5,\"aborts\":1,\"deaths\":2,\"grows\":1",
        "\"dropped_connections\":{\"bad_frame\":2,\"idle_timeout\":0}", "\"unauthenticated_connections\":1",
        "{\"id\":9,\"host\":\"node-b\",\"first_rank\":2,\"local_ranks\":2,\"last_heartbeat_s_ago\":4.5,"
        "\"connected\":false}",
        "\"waiting\":[{\"id\":11,\"host\":\"node-c\"}]",
        "\"stragglers\":{\"step\":25,\"ranks\":[{\"rank\":3,\"write_s\":5}]}",
        "\"sdc_alerts\":[{\"step\":10,\"chunk\":\"w[0:64]\",\"detail\":\"rank(s) 1 disagree",
        "\"control_plane\":{\"role\":\"leader\",\"store\":\"etcd\"", "\"standbys\":[\"node-y pid 9 10.0.0.2:7070\"]",
        "\"leaders\":4,\"leader_changes\":3",
        "{\"url\":\"http://127.0.0.1:2381\",\"up\":false,\"error\":\"connection refused\"}",
        "\"appends\":{\"count\":4,"}) {
    EXPECT_NE(j.find(want), std::string::npos) << want << "\nin " << j;
  }
}

TEST(Status, TextNamesMembersWaitersStragglersAndAlerts) {
  const std::string t = StatusText(Sample());
  EXPECT_NE(t.find("generation 3 running, world size 4, restore step 20, last committed step 25\n"), std::string::npos)
      << t;
  EXPECT_NE(t.find("  9  node-b  ranks 2..3  last heartbeat 4.50 s ago  (disconnected)\n"), std::string::npos) << t;
  EXPECT_NE(t.find("waiting: 11  node-c\n"), std::string::npos) << t;
  EXPECT_NE(t.find("straggler in step 25: rank 3 wrote for 5 s\n"), std::string::npos) << t;
  EXPECT_NE(t.find("SDC alert, step 10 w[0:64]: "), std::string::npos) << t;
  EXPECT_NE(t.find("leader (node-x pid 7 10.0.0.1:7070); state in etcd http://127.0.0.1:2379 (and 2 more)"),
            std::string::npos)
      << t;
  EXPECT_NE(t.find("  standby: node-y pid 9 10.0.0.2:7070\n"), std::string::npos) << t;
  EXPECT_NE(t.find("leader changes 3\n"), std::string::npos) << t;
  EXPECT_NE(t.find("  etcd http://127.0.0.1:2381: DOWN (connection refused)\n"), std::string::npos) << t;
  EXPECT_NE(t.find("records written: 4, mean 51.35 ms, worst 200.00 ms\n"), std::string::npos) << t;
  StatusView idle;
  EXPECT_NE(StatusText(idle).find("members:\n  (none)\n"), std::string::npos);
  // A standby shows the store and itself only.
  StatusView standby = Sample();
  standby.serving = false;
  standby.store.leading = false;
  standby.store.self = "node-y pid 9 10.0.0.2:7070";
  const std::string st = StatusText(standby);
  EXPECT_NE(st.find("standby (node-y pid 9 10.0.0.2:7070)"), std::string::npos) << st;
  EXPECT_EQ(st.find("generation"), std::string::npos) << st;
  EXPECT_EQ(StatusJson(standby).find("generation"), std::string::npos);
  EXPECT_NE(StatusJson(standby).find("\"serving\":false"), std::string::npos);
  // A coordinator replaying its journal says so.
  StatusView replaying;
  replaying.serving = false;
  replaying.store.kind = "journal";
  replaying.store.where = "journal /var/ckpt/journal";
  replaying.store.leading = false;
  const std::string rt = StatusText(replaying);
  EXPECT_NE(rt.find("state in journal /var/ckpt/journal\nstandby: replaying the journal, not serving yet\n"),
            std::string::npos)
      << rt;
  EXPECT_EQ(rt.find("generation"), std::string::npos) << rt;
}

// Every sample belongs to a family announced by HELP and TYPE before it.
TEST(Status, MetricsAreWellFormedPrometheusText) {
  const std::string m = PrometheusMetrics(Sample());
  std::set<std::string> help, type;
  std::istringstream in(m);
  std::string line;
  int samples = 0;
  while (std::getline(in, line)) {
    ASSERT_FALSE(line.empty());
    if (line.rfind("# HELP ", 0) == 0) {
      help.insert(line.substr(7, line.find(' ', 7) - 7));
      continue;
    }
    if (line.rfind("# TYPE ", 0) == 0) {
      const std::string name = line.substr(7, line.find(' ', 7) - 7);
      EXPECT_TRUE(help.count(name)) << "TYPE before HELP: " << line;
      const std::string kind = line.substr(line.rfind(' ') + 1);
      EXPECT_TRUE(kind == "gauge" || kind == "counter" || kind == "summary" || kind == "histogram") << line;
      type.insert(name);
      if (kind == "histogram") {
        for (const char* part : {"_bucket", "_sum", "_count"}) type.insert(name + part);
      }
      continue;
    }
    const std::string name = line.substr(0, line.find_first_of("{ "));
    EXPECT_TRUE(type.count(name)) << "sample without TYPE: " << line;
    ++samples;
  }
  EXPECT_GE(samples, 20);
  EXPECT_NE(m.find("ckpt_coordinator_members 2\n"), std::string::npos) << m;
  EXPECT_NE(m.find("ckpt_coordinator_dropped_connections_total{reason=\"bad_frame\"} 2\n"), std::string::npos);
  EXPECT_NE(m.find("ckpt_coordinator_save_seconds{phase=\"write\",quantile=\"1\"} 5\n"), std::string::npos) << m;
  EXPECT_NE(m.find("ckpt_coordinator_save_seconds{phase=\"write\",quantile=\"0.5\"} 1\n"), std::string::npos) << m;
  EXPECT_NE(m.find("ckpt_coordinator_sdc_alerts_total 1\n"), std::string::npos);
  EXPECT_NE(m.find("ckpt_coordinator_leader 1\n"), std::string::npos) << m;
  EXPECT_NE(m.find("ckpt_coordinator_standbys 1\n"), std::string::npos) << m;
  EXPECT_NE(m.find("ckpt_coordinator_leader_changes_total 3\n"), std::string::npos) << m;
  EXPECT_NE(m.find("ckpt_coordinator_store_up{endpoint=\"http://127.0.0.1:2381\"} 0\n"), std::string::npos) << m;
  EXPECT_NE(m.find("ckpt_coordinator_store_append_seconds_bucket{le=\"0.0005\"} 1\n"), std::string::npos) << m;
  EXPECT_NE(m.find("ckpt_coordinator_store_append_seconds_bucket{le=\"0.005\"} 3\n"), std::string::npos) << m;
  EXPECT_NE(m.find("ckpt_coordinator_store_append_seconds_bucket{le=\"+Inf\"} 4\n"), std::string::npos) << m;
  EXPECT_NE(m.find("ckpt_coordinator_store_append_seconds_count 4\n"), std::string::npos) << m;
  // Before any commit there is no save summary.
  EXPECT_EQ(PrometheusMetrics(StatusView{}).find("save_seconds"), std::string::npos);
}

}  // namespace
}  // namespace ckpt::coord
