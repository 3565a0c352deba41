#include "testutil/test_util.h"

#include <stdlib.h>
#include <sys/wait.h>
#include <unistd.h>

#include <cstdio>
#include <filesystem>
#include <fstream>
#include <sstream>

#include "ckpt/synthetic.h"

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

}  // namespace ckpt::testing
