// ckpt coordinator: the elastic-restart service, and `status` to query one.
#include <algorithm>
#include <csignal>
#include <cstdio>
#include <fstream>
#include <set>
#include <string>
#include <thread>

#include "ckpt/coordinator.h"
#include "commands.h"
#include "common/cli.h"
#include "util/json.h"
#include "util/strings.h"

namespace ckpt::tools {
namespace {

volatile std::sig_atomic_t g_stop = 0;
void OnSignal(int) { g_stop = 1; }

// A positive duration (util/strings.h: "1s", "500ms", "2.5").
bool ParsePositiveDuration(const std::string& text, double* out) {
  auto d = ParseDuration(text);
  if (!d || *d <= 0) return false;
  *out = *d;
  return true;
}

int StatusMain(int argc, char** argv, int first) {
  std::string connect = "127.0.0.1:7070";
  bool json = false;
  Args args("coordinator status", "[--connect HOST:PORT[,HOST:PORT...]] [--json]",
            "Asks a running coordinator for its state: generation, members and their last\n"
            "heartbeat, the latest committed step, stragglers of the last save and SDC\n"
            "alerts, and where the state lives: with --store etcd://, the leader, the\n"
            "standby replicas, each etcd member's health and the time records take to\n"
            "become durable. Given several replicas, the leader answers; a standby\n"
            "answers when no leader does (it shows only the store). Needs no token.\n"
            "Exit status: 0 a leader answered, 1 only a standby answered, 2 none did.");
  args.String("connect", &connect, "coordinator address(es) (default 127.0.0.1:7070)");
  args.Switch("json", &json, "print a JSON object instead of text");
  int exit = 0;
  if (!args.Parse(argc, argv, first, &exit)) return exit;
  CoordinatorClientOptions o;
  o.address = connect;
  o.reconnect_timeout_s = 1;
  auto client = CoordinatorClient::Connect(o);
  bool standby = false;
  if (!client.ok() && absl::IsUnavailable(client.status())) {
    o.accept_standby = true;  // no leader answers: a standby's own view
    auto any = CoordinatorClient::Connect(o);
    if (any.ok()) {
      client = std::move(any);
      standby = true;
    }
  }
  if (!client.ok()) {
    std::fprintf(stderr, "ckpt coordinator status: %s\n", std::string(client.status().message()).c_str());
    return kExitUsage;
  }
  auto status = (*client)->Status(!json);
  if (!status.ok()) {
    std::fprintf(stderr, "ckpt coordinator status: %s\n", std::string(status.status().message()).c_str());
    return kExitUsage;
  }
  std::printf(json ? "%s\n" : "%s", status->c_str());
  return standby ? kExitProblem : kExitOk;
}

std::string RecordLine(const CoordinatorRecord& r) {
  using JournalKind = CoordinatorRecordKind;
  const std::string step = StrCat(r.memory ? "memory step " : "step ", r.step);
  switch (r.kind) {
    case JournalKind::kGeneration: {
      std::string t = StrCat("generation ", r.generation, " formed: world ", r.world, ", restore step ", r.restore_step,
                             ", members");
      for (const auto& m : r.members) {
        StrAppend(&t, " ", m.id, " (", m.host, ", ranks ", m.first_rank, "..", m.first_rank + m.local_ranks - 1, ")");
      }
      return t;
    }
    case JournalKind::kEnded:
      return StrCat("generation ", r.generation, " ended", r.finished ? " (every member left: the job finished)" : "");
    case JournalKind::kDecided:
      return StrCat(step, " decided for commit (generation ", r.generation, ")");
    case JournalKind::kCommitted:
      return StrCat(step, " committed (generation ", r.generation,
                    r.erasure_k > 0 ? StrCat(", erasure coded ", r.erasure_k, "+", r.erasure_m) : "", ")");
    case JournalKind::kAborted:
      return StrCat(step, " aborted (generation ", r.generation, ")");
    case JournalKind::kSdc:
      return StrCat("SDC alert in step ", r.step, ", ", r.chunk, ": ", r.detail);
  }
  return "?";
}

int HistoryMain(int argc, char** argv, int first) {
  std::string state_dir, store;
  bool json = false, summary = false;
  Args args("coordinator history", "(--state-dir DIR | --store etcd://HOST:PORT[,...]/PREFIX) [--json] [--summary]",
            "Prints every record of a coordinator's state, oldest first: generations\n"
            "formed and ended, steps decided, committed and aborted, SDC alerts; then\n"
            "checks that no decision contradicts another (a step of one generation both\n"
            "committed and aborted, a step committed by two generations, a generation\n"
            "number that does not grow). Reads only: safe while the coordinator runs,\n"
            "and never takes the lead.\n"
            "Exit status: 0 consistent, 1 contradictions found, 2 unreadable.");
  args.String("state-dir", &state_dir, "the coordinator's --state-dir (its journal)");
  args.String("store", &store, "the coordinator's --store (etcd)");
  args.Switch("json", &json, "print a JSON object instead of text");
  args.Switch("summary", &summary, "only the totals and contradictions, not every record");
  int exit = 0;
  if (!args.Parse(argc, argv, first, &exit)) return exit;
  if (state_dir.empty() == store.empty()) {
    std::fprintf(stderr, "ckpt coordinator history: give one of --state-dir and --store\n%s", args.Usage().c_str());
    return kExitUsage;
  }
  auto read = ReadCoordinatorHistory(state_dir, store);
  if (!read.ok()) {
    std::fprintf(stderr, "ckpt coordinator history: %s\n", std::string(read.status().message()).c_str());
    return kExitUsage;
  }
  const CoordinatorHistory& h = *read;
  const std::string& where = h.where;
  size_t generations = 0;
  for (const auto& r : h.records) generations += r.kind == CoordinatorRecordKind::kGeneration ? 1 : 0;
  Render(
      json,
      [&](JsonWriter& w) {
        w.BeginObject().Field("where", where).Field("records_total", h.records.size());
        if (!summary) {
          w.Key("records").BeginArray();
          for (const auto& r : h.records) {
            w.BeginObject().Field("seq", r.seq).Field("kind", CoordinatorRecordKindName(r.kind));
            if (r.generation >= 0) w.Field("generation", r.generation);
            if (r.kind != CoordinatorRecordKind::kGeneration && r.kind != CoordinatorRecordKind::kEnded)
              w.Field("step", r.step);
            if (r.memory) w.Field("level", "memory");
            if (r.erasure_k > 0) w.Field("erasure", StrCat(r.erasure_k, "+", r.erasure_m));
            if (r.finished) w.Field("finished", true);
            if (r.kind == CoordinatorRecordKind::kGeneration) {
              w.Field("world", r.world).Field("restore_step", r.restore_step).Key("members").BeginArray();
              for (const auto& m : r.members) {
                w.BeginObject().Field("id", m.id).Field("host", m.host).Field("first_rank", m.first_rank);
                w.Field("local_ranks", m.local_ranks).EndObject();
              }
              w.EndArray();
            }
            if (r.kind == CoordinatorRecordKind::kSdc) w.Field("chunk", r.chunk).Field("detail", r.detail);
            w.EndObject();
          }
          w.EndArray();
        }
        w.Field("generations", generations);
        for (const auto& [name, set] : {std::pair<const char*, const std::set<int64_t>*>{"committed", &h.committed},
                                        {"aborted", &h.aborted},
                                        {"decided", &h.decided},
                                        {"memory_committed", &h.memory_committed}}) {
          w.Key(name).BeginArray();
          for (int64_t step : *set) w.Int(step);
          w.EndArray();
        }
        w.Key("contradictions").BeginArray();
        for (const std::string& c : h.contradictions) w.String(c);
        w.EndArray().EndObject();
      },
      [&] {
        std::printf("%s: %zu records\n", where.c_str(), h.records.size());
        if (!summary) {
          for (const auto& r : h.records)
            std::printf("%8lld  %s\n", static_cast<long long>(r.seq), RecordLine(r).c_str());
        }
        std::printf(
            "%zu generation(s), %zu step(s) committed%s, %zu aborted, %zu memory step(s) committed%s, %zu "
            "contradiction(s)\n",
            generations, h.committed.size(),
            h.committed.empty() ? "" : StrCat(" (newest ", *h.committed.rbegin(), ")").c_str(), h.aborted.size(),
            h.memory_committed.size(), h.memory.step < 0 ? "" : StrCat(" (last ", h.memory.step, ")").c_str(),
            h.contradictions.size());
        for (const std::string& c : h.contradictions) std::printf("CONTRADICTION: %s\n", c.c_str());
      });
  return h.contradictions.empty() ? kExitOk : kExitProblem;
}

}  // namespace

int CoordinatorMain(int argc, char** argv, int first) {
  if (first < argc && std::string(argv[first]) == "status") return StatusMain(argc, argv, first + 1);
  if (first < argc && std::string(argv[first]) == "history") return HistoryMain(argc, argv, first + 1);
  std::string listen = "127.0.0.1:7070", state_dir, store, token_file, root, heartbeat = "1s", join_timeout = "2s",
              port_file, handshake_timeout = "10s", idle_timeout;
  int64_t min_nodes = 1, max_nodes = 1 << 20, dead_after = 5, max_frame = 64 << 20, max_unauthenticated = 256;
  Args args("coordinator",
            "(--state-dir DIR | --store etcd://HOST:PORT[,...]/PREFIX) --token-file F [--listen HOST:PORT]\n"
            "       [--min-nodes A --max-nodes B]\n"
            "       [--heartbeat 1s --dead-after 5] [--join-timeout 2s] [--root URI]\n"
            "   or: ckpt coordinator status [--connect HOST:PORT[,...]]\n"
            "   or: ckpt coordinator history (--state-dir DIR | --store URI) [--json]",
            "Runs the elastic-restart coordinator until SIGINT or SIGTERM. Workers join with\n"
            "the job's token (challenge-response, never sent); once between --min-nodes and\n"
            "--max-nodes are present (or --join-timeout passed since the last join with at\n"
            "least the minimum), a generation forms: ranks assigned, step to restore named.\n"
            "A worker that misses --dead-after heartbeats is dead: the others are told to\n"
            "stop and a new generation forms from the survivors and spares. Saves commit\n"
            "only when every rank of the generation voted yes and data-parallel replicas\n"
            "agree. State is journaled in --state-dir (a restart on this machine loses\n"
            "nothing) or kept in etcd with --store (a coordinator started on another machine\n"
            "resumes it; a second one on the same prefix is fenced off). When it cannot\n"
            "record its state it stops acting: with --state-dir it exits with status 1;\n"
            "with --store it stands by again and leads again once it can (exit status 1\n"
            "instead with --exit-when-stopped, for a supervisor that restarts it). Prometheus\n"
            "metrics: GET /metrics on the same port. Protocol: docs/protocol.md.");
  args.String("listen", &listen, "HOST:PORT to serve on (default 127.0.0.1:7070; port 0 picks one)");
  args.String("state-dir", &state_dir, "directory for the journal (this machine)");
  args.String("store", &store,
              "etcd://HOST:PORT[,HOST:PORT...]/PREFIX[?ca_file=&cert_file=&key_file=&user=&password_file=]: "
              "the state in etcd (password also from $CKPT_ETCD_PASSWORD)");
  args.String("token-file", &token_file, "file holding the job's shared token (required)");
  args.Int("min-nodes", &min_nodes, "fewest members a generation may have (default 1)");
  args.Int("max-nodes", &max_nodes, "most members a generation may have (default unlimited)");
  args.String("heartbeat", &heartbeat, "heartbeat interval expected from workers (default 1s)");
  args.Int("dead-after", &dead_after, "missed heartbeats before a worker is dead (default 5)");
  args.String("join-timeout", &join_timeout, "wait for more members after the minimum joined (default 2s)");
  args.String("root", &root, "checkpoint root: restore only a step whose manifest verifies");
  bool no_grow = false;
  std::string grow_spacing = "10s";
  args.Switch("no-grow", &no_grow,
              "a fixed-size job: spares wait until a member fails (default: when members wait and the generation "
              "is below --max-nodes, it ends after its next committed step and re-forms with them)");
  args.String("grow-spacing", &grow_spacing, "least time between a generation forming and growing it (default 10s)");
  int64_t memory_replicas = 1;
  args.Int("memory-replicas", &memory_replicas,
           "memory level: copies of each rank's files in other failure domains (default 1)");
  std::string memory_erasure;
  args.String("memory-erasure", &memory_erasure,
              "memory level erasure coded instead of copies: K+M (e.g. 4+2) cuts each rank's files into K data "
              "and M parity pieces, each in another failure domain: (K+M)/K of the state in memory, any M "
              "domains may be lost");
  args.Size("max-frame", &max_frame, "largest frame accepted (default 64M)", true);
  bool exit_when_stopped = false;
  args.Switch("exit-when-stopped", &exit_when_stopped,
              "with --store: exit with status 1 on stopping acting instead of standing by again");
  args.String("port-file", &port_file, "write the port listened on to this file once serving");
  args.Int("max-unauthenticated", &max_unauthenticated,
           "connections that have not joined held at once; the oldest is dropped past it (default 256)");
  args.String("handshake-timeout", &handshake_timeout,
              "time a connection has to join or finish its status/HTTP request (default 10s)");
  args.String("idle-timeout", &idle_timeout,
              "drop a joined connection silent this long (default max(30s, 4 x heartbeat x dead-after))");
  int exit = 0;
  if (!args.Parse(argc, argv, first, &exit)) return exit;
  CoordinatorOptions o;
  o.listen = listen;
  o.state_dir = state_dir;
  o.store = store;
  o.root = root;
  o.min_nodes = static_cast<int>(min_nodes);
  o.max_nodes = static_cast<int>(max_nodes);
  o.dead_after = static_cast<int>(dead_after);
  o.memory_replicas = static_cast<int>(std::clamp<int64_t>(memory_replicas, 0, 16));
  if (!memory_erasure.empty()) {
    int k = 0, m = 0;
    char extra = 0;
    if (std::sscanf(memory_erasure.c_str(), "%d+%d%c", &k, &m, &extra) != 2 || k < 1 || m < 1 || k + m > 32) {
      std::fprintf(stderr,
                   "ckpt coordinator: --memory-erasure wants K+M with K >= 1 data and M >= 1 parity pieces, "
                   "K + M <= 32 (e.g. 4+2), not '%s'\n",
                   memory_erasure.c_str());
      return kExitUsage;
    }
    o.memory_erasure_k = k;
    o.memory_erasure_m = m;
  }
  o.max_frame_bytes = static_cast<uint32_t>(max_frame);
  if ((state_dir.empty() == store.empty()) || token_file.empty()) {
    std::fprintf(stderr, "ckpt coordinator: --token-file and one of --state-dir and --store are required\n%s",
                 args.Usage().c_str());
    return kExitUsage;
  }
  o.max_unauthenticated = static_cast<int>(std::clamp<int64_t>(max_unauthenticated, 0, 1 << 30));
  o.grow = !no_grow;
  if (!ParsePositiveDuration(heartbeat, &o.heartbeat_s) || !ParsePositiveDuration(join_timeout, &o.join_timeout_s) ||
      !ParsePositiveDuration(grow_spacing, &o.grow_spacing_s) ||
      !ParsePositiveDuration(handshake_timeout, &o.handshake_timeout_s) ||
      (!idle_timeout.empty() && !ParsePositiveDuration(idle_timeout, &o.idle_timeout_s))) {
    std::fprintf(stderr, "ckpt coordinator: durations look like 1s, 500ms or 2.5\n");
    return kExitUsage;
  }
  if (min_nodes < 1 || max_nodes < min_nodes || dead_after < 1) {
    std::fprintf(stderr, "ckpt coordinator: need 1 <= --min-nodes <= --max-nodes and --dead-after >= 1\n");
    return kExitUsage;
  }
  auto token = ReadJobToken(token_file);
  if (!token.ok()) {
    std::fprintf(stderr, "ckpt coordinator: %s\n", std::string(token.status().message()).c_str());
    return kExitUsage;
  }
  o.token = *token;
  // With --store, Start waits while another coordinator leads the prefix
  // (a standby); until it leads, SIGINT and SIGTERM end it the default way.
  // A replica on a store that stops acting (its lease lapsed, the store lost
  // its quorum, another took over) stands by again on the same address and
  // leads again when it can: the control plane needs no one to restart it.
  for (bool first_start = true;; first_start = false) {
    std::signal(SIGINT, SIG_DFL);
    std::signal(SIGTERM, SIG_DFL);
    auto c = Coordinator::Start(o);
    std::signal(SIGINT, OnSignal);
    std::signal(SIGTERM, OnSignal);
    if (!c.ok()) {
      std::fprintf(stderr, "ckpt coordinator: %s\n", std::string(c.status().message()).c_str());
      return first_start ? kExitUsage : kExitProblem;
    }
    if (!port_file.empty()) {
      const std::string tmp = port_file + ".tmp";
      std::ofstream(tmp) << (*c)->port() << "\n";
      std::rename(tmp.c_str(), port_file.c_str());
    }
    std::string why;
    while (!g_stop && why.empty()) {
      std::this_thread::sleep_for(std::chrono::milliseconds(100));
      why = (*c)->halted();
    }
    if (why.empty()) break;
    if (store.empty() || exit_when_stopped) {
      std::fprintf(stderr, "ckpt coordinator: stopped acting: %s\n", why.c_str());
      return kExitProblem;
    }
    std::fprintf(stderr, "ckpt coordinator: stopped acting: %s; standing by again\n", why.c_str());
    const int port = (*c)->port();
    c->reset();  // closes the port and hands the lease back where the store answers
    if (!port_file.empty()) std::remove(port_file.c_str());
    o.listen = StrCat(listen.substr(0, listen.rfind(':')), ":", port);
    o.wait_for_store = true;
  }
  std::fprintf(stderr, "ckpt coordinator: stopping\n");
  return kExitOk;
}

}  // namespace ckpt::tools
