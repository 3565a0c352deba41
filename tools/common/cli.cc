#include "common/cli.h"

#include <sys/resource.h>
#include <unistd.h>

#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <fstream>
#include <mutex>
#include <sstream>

#include "ckpt/checkpointer.h"
#include "common/synth_job.h"
#include "util/clock.h"
#include "util/errors.h"
#include "util/strings.h"

namespace ckpt::tools {

Args::Args(std::string command, std::string synopsis, std::string description)
    : command_(std::move(command)), synopsis_(std::move(synopsis)), description_(std::move(description)) {
  flags_.push_back(Flag{"help", "show this help and exit", nullptr, true});
}

void Args::String(const std::string& name, std::string* out, const std::string& help) {
  flags_.push_back(Flag{name, help, [out](const std::string& v) {
                          *out = v;
                          return true;
                        }});
}

void Args::Int(const std::string& name, int64_t* out, const std::string& help) {
  flags_.push_back(Flag{name, help, [out](const std::string& v) { return ParseInt64(v, out); }});
}

void Args::Double(const std::string& name, double* out, const std::string& help) {
  flags_.push_back(Flag{name, help, [out](const std::string& v) { return ParseDouble(v, out); }});
}

void Args::Size(const std::string& name, int64_t* out, const std::string& help, bool binary) {
  flags_.push_back(Flag{name, help, [out, binary](const std::string& v) {
                          auto s = ParseByteCount(v, binary);
                          if (!s) return false;
                          *out = *s;
                          return true;
                        }});
}

void Args::CodecFlag(const std::string& name, Codec* out, const std::string& help) {
  Flag f{name, StrCat(CodecChoices(), help.empty() ? "" : StrCat(" (", help, ")")), [out](const std::string& v) {
           const std::optional<Codec> c = ParseCodec(v);
           if (c) *out = *c;
           return c.has_value();
         }};
  f.choices = CodecChoices();
  flags_.push_back(std::move(f));
}

void Args::Switch(const std::string& name, bool* out, const std::string& help) {
  flags_.push_back(Flag{name, help,
                        [out](const std::string&) {
                          *out = true;
                          return true;
                        },
                        true});
}

void Args::Positional(const std::string& name, std::string* out, const std::string& help) {
  positionals_.push_back(Pos{name, help, out});
}

Args::Flag* Args::Find(const std::string& name) {
  for (Flag& f : flags_) {
    if (f.name == name) return &f;
  }
  return nullptr;
}

bool Args::Given(const std::string& name) const {
  for (const Flag& f : flags_) {
    if (f.name == name) return f.given;
  }
  return false;
}

std::string Args::Usage() const {
  std::string out = StrCat("usage: ", Invocation(), " ", synopsis_, "\n\n", description_, "\n");
  if (!positionals_.empty()) {
    out += "\narguments:\n";
    for (const Pos& p : positionals_) {
      char line[512];
      std::snprintf(line, sizeof(line), "  %-22s %s\n", p.name.c_str(), p.help.c_str());
      out += line;
    }
  }
  out += "\noptions:\n";
  for (const Flag& f : flags_) {
    char line[1024];
    std::string n = "--" + f.name + (f.is_switch ? "" : " V");
    std::snprintf(line, sizeof(line), "  %-22s %s\n", n.c_str(), f.help.c_str());
    out += line;
  }
  out += "\nexit status: 0 ok, 1 a problem was found, 2 usage error or unreadable input\n";
  return out;
}

bool Args::Parse(int argc, char** argv, int first, int* exit) {
  size_t next_pos = 0;
  auto fail = [&](const std::string& msg) {
    std::fprintf(stderr, "%s: %s\n\n%s", Invocation().c_str(), msg.c_str(), Usage().c_str());
    *exit = kExitUsage;
    return false;
  };
  for (int i = first; i < argc; ++i) {
    std::string a = argv[i];
    if (a.size() > 2 && a.rfind("--", 0) == 0) {
      std::string name = a.substr(2), value;
      bool has_value = false;
      if (size_t eq = name.find('='); eq != std::string::npos) {
        value = name.substr(eq + 1);
        name = name.substr(0, eq);
        has_value = true;
      }
      if (name == "help" || name == "h") {
        std::fputs(Usage().c_str(), stdout);
        *exit = kExitOk;
        return false;
      }
      Flag* f = Find(name);
      if (f == nullptr) return fail("unknown option --" + name);
      if (f->is_switch) {
        if (has_value) return fail("--" + name + " takes no value");
      } else if (!has_value) {
        if (i + 1 >= argc) return fail("--" + name + " needs a value");
        value = argv[++i];
      }
      if (!f->set(value)) {
        return fail("bad value '" + value + "' for --" + name + (f->choices.empty() ? "" : " (" + f->choices + ")"));
      }
      f->given = true;
    } else if (a == "-h") {
      std::fputs(Usage().c_str(), stdout);
      *exit = kExitOk;
      return false;
    } else {
      if (next_pos >= positionals_.size()) return fail("unexpected argument '" + a + "'");
      *positionals_[next_pos++].out = a;
    }
  }
  if (next_pos < positionals_.size()) {
    return fail("missing argument " + positionals_[next_pos].name);
  }
  return true;
}

absl::StatusOr<StepToRead> OpenStepToRead(const std::string& uri, int64_t step, const char* command) {
  StepToRead out;
  CKPT_ASSIGN_OR_RETURN(out.storage, OpenStorage(uri));
  if (step == kLatestStep) {
    CKPT_ASSIGN_OR_RETURN(step, LatestCommittedStep(*out.storage));
  }
  out.step = step;
  WarnIfDamaged(*out.storage, step, command);
  CKPT_ASSIGN_OR_RETURN(out.summary, SummarizeStep(*out.storage, step));
  CKPT_ASSIGN_OR_RETURN(out.reader, StepReader::Open(out.storage, step));
  return out;
}

absl::Status SaveAsRanks(const std::string& uri, int64_t step, std::vector<State>& states, const SaveOptions& options,
                         Codec codec) {
  const int world = static_cast<int>(states.size());
  std::vector<std::unique_ptr<Checkpointer>> ranks;
  for (int r = 0; r < world; ++r) {
    CheckpointerOptions o;
    o.uri = uri;
    o.rank = r;
    o.world_size = world;
    o.codec = codec;
    CKPT_ASSIGN_OR_RETURN(std::unique_ptr<Checkpointer> cp, Checkpointer::Open(o));
    ranks.push_back(std::move(cp));
  }
  std::vector<SaveHandle> handles;
  absl::Status st;
  for (int r = 0; r < world && st.ok(); ++r) {
    auto h = ranks[static_cast<size_t>(r)]->Save(step, states[static_cast<size_t>(r)], options);
    if (h.ok()) {
      handles.push_back(std::move(h).value());
    } else {
      st = h.status();
    }
  }
  for (SaveHandle& h : handles) {
    absl::Status w = h.Wait();
    if (st.ok()) st = w;
  }
  return st;
}

double PeakRssBytes() {
  rusage ru{};
  getrusage(RUSAGE_SELF, &ru);
  return static_cast<double>(ru.ru_maxrss) * 1024.0;
}

int64_t ResidentBytes() {
  std::ifstream in("/proc/self/status");
  std::string line;
  while (std::getline(in, line)) {
    if (line.rfind("VmRSS:", 0) == 0) return std::atoll(line.c_str() + 6) * 1024;
  }
  return -1;
}

bool StderrIsTty() { return isatty(STDERR_FILENO) == 1; }

ProgressBar::ProgressBar(std::string label) : label_(std::move(label)), enabled_(StderrIsTty()) {}

void ProgressBar::Update(int64_t done, int64_t total) {
  if (!enabled_ || total <= 0) return;
  static std::mutex mu;
  std::lock_guard<std::mutex> lock(mu);
  const double now = NowSeconds();
  if (done < total && now - last_ < 0.1) return;
  last_ = now;
  const int width = 30;
  const double frac = std::min(1.0, static_cast<double>(done) / static_cast<double>(total));
  std::string bar(static_cast<size_t>(frac * width), '#');
  bar.resize(width, ' ');
  std::fprintf(stderr, "\r%s [%s] %3d%% %s/%s ", label_.c_str(), bar.c_str(), static_cast<int>(frac * 100),
               HumanBytes(static_cast<double>(done)).c_str(), HumanBytes(static_cast<double>(total)).c_str());
  std::fflush(stderr);
  drawn_ = true;
}

void ProgressBar::Finish() {
  if (drawn_) {
    std::fprintf(stderr, "\r\033[K");
    std::fflush(stderr);
  }
  drawn_ = false;
}

}  // namespace ckpt::tools

namespace ckpt::tools {

void WarnIfDamaged(Storage& storage, int64_t step, const char* command) {
  auto info = DescribeCheckpointStep(storage, step);
  if (!info.ok() || info->state != StepState::kDamaged) return;
  std::fprintf(stderr, "ckpt %s: step %lld is damaged (%s)%s\n", command, static_cast<long long>(step),
               info->damage.c_str(),
               !info->committed           ? ""
               : info->manifest_from_copy ? "; its manifest was read from MANIFEST.copy"
                                          : "; `ckpt repair` rebuilds it");
}

}  // namespace ckpt::tools
