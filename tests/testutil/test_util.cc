#include "testutil/test_util.h"

#include <fcntl.h>
#include <stdlib.h>
#include <sys/wait.h>
#include <unistd.h>

#include <cstdio>
#include <filesystem>
#include <fstream>
#include <iterator>
#include <sstream>

#include "ckpt/synthetic.h"
#include "util/strings.h"

namespace ckpt::testing {

TempDir::TempDir() {
  const char* base = std::getenv("TMPDIR");
  std::string tmpl = std::string(base && *base ? base : "/tmp") + "/ckpt-test-XXXXXX";
  char* p = mkdtemp(tmpl.data());
  if (p == nullptr) {
    ADD_FAILURE() << "mkdtemp failed for " << tmpl;
  }
  path_ = tmpl;
}

TempDir::~TempDir() {
  std::error_code ec;
  std::filesystem::remove_all(path_, ec);
}

OwnedShard MakeShard(const TensorSpec& spec, const Box& box, uint64_t seed) {
  OwnedShard s{spec, box, {}};
  s.data.resize(static_cast<size_t>(box.Volume()) * DTypeSize(spec.dtype));
  FillSynthetic(spec, box, seed, s.data.data());
  return s;
}

OwnedShard EmptyShard(const TensorSpec& spec, const Box& box) {
  OwnedShard s{spec, box, {}};
  s.data.assign(static_cast<size_t>(box.Volume()) * DTypeSize(spec.dtype), std::byte{0});
  return s;
}

State StateOf(std::vector<OwnedShard>& shards) {
  State state;
  for (auto& s : shards) {
    absl::Status st = state.AddShard(s.spec, s.box, s.data.data());
    EXPECT_TRUE(st.ok()) << st;
  }
  return state;
}

int64_t Mismatches(const OwnedShard& s, uint64_t seed) { return CheckSynthetic(s.spec, s.box, seed, s.data.data()); }

std::string ReadFile(const std::string& path) {
  std::ifstream in(path, std::ios::binary);
  std::stringstream ss;
  ss << in.rdbuf();
  return ss.str();
}

void WriteFile(const std::string& path, const std::string& data) {
  std::ofstream out(path, std::ios::binary | std::ios::trunc);
  out << data;
}

void FlipBit(const std::string& path, uint64_t offset, int bit) {
  std::string data = ReadFile(path);
  ASSERT_LT(offset, data.size()) << path;
  data[offset] = static_cast<char>(data[offset] ^ (1 << bit));
  WriteFile(path, data);
}

CommandResult RunCommand(const std::string& command) {
  FILE* p = popen((command + " 2>&1").c_str(), "r");
  std::string out;
  char buf[4096];
  size_t n;
  while ((n = fread(buf, 1, sizeof(buf), p)) > 0) out.append(buf, n);
  const int status = pclose(p);
  return CommandResult{WIFEXITED(status) ? WEXITSTATUS(status) : -1, out};
}

int64_t ProcStatusKib(pid_t pid, const std::string& key) {
  std::ifstream f(StrCat("/proc/", pid, "/status"));
  std::string line;
  while (std::getline(f, line)) {
    if (line.rfind(key + ":", 0) == 0) return std::stoll(line.substr(key.size() + 1));
  }
  return -1;
}

double ProcCpuSeconds(pid_t pid) {
  std::ifstream f(StrCat("/proc/", pid, "/stat"));
  std::string all((std::istreambuf_iterator<char>(f)), std::istreambuf_iterator<char>());
  const size_t close_paren = all.rfind(')');
  if (close_paren == std::string::npos) return -1;
  std::istringstream rest(all.substr(close_paren + 2));
  std::string field;
  double ticks = 0;
  for (int i = 3; i <= 15 && rest >> field; ++i) {
    if (i == 14 || i == 15) ticks += std::stod(field);  // utime, stime
  }
  return ticks / static_cast<double>(sysconf(_SC_CLK_TCK));
}

pid_t Spawn(const std::vector<std::string>& args, const std::string& out, rlim_t max_descriptors,
            const std::vector<std::string>& env) {
  const pid_t pid = fork();
  if (pid == 0) {
    for (const std::string& e : env) putenv(const_cast<char*>(e.c_str()));
    const int fd = ::open(out.c_str(), O_WRONLY | O_CREAT | O_APPEND, 0644);
    dup2(fd, 1);
    dup2(fd, 2);
    if (max_descriptors > 0) {
      rlimit rl{max_descriptors, max_descriptors};
      if (setrlimit(RLIMIT_NOFILE, &rl) != 0) _exit(126);
    }
    std::vector<char*> argv;
    for (const std::string& a : args) argv.push_back(const_cast<char*>(a.c_str()));
    argv.push_back(nullptr);
    execv(argv[0], argv.data());
    _exit(127);
  }
  return pid;
}

int WaitExit(pid_t pid) {
  int status = 0;
  waitpid(pid, &status, 0);
  return WIFEXITED(status) ? WEXITSTATUS(status) : 128 + WTERMSIG(status);
}

}  // namespace ckpt::testing
