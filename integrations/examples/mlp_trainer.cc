// A small data-parallel training loop with ckpt: the template a C++ user
// copies. Each rank (a thread here; a process with MPI or the coordinator
// alike) trains the same two-layer MLP on its own slice of a synthetic
// regression task, gradients are averaged through the Communicator, and
// every few steps the parameters, the Adam moments and the step are saved
// asynchronously. Started again after being killed, it resumes from the
// latest committed step and ends bit-identical to an uninterrupted run.
//
// Build (in-tree it is built as build/integrations/mlp_trainer):
//   g++ -std=c++20 -O2 mlp_trainer.cc -o mlp_trainer $(pkg-config ...)  or
//   find_package(ckpt) + target_link_libraries(mlp_trainer ckpt::ckpt)
// Run:
//   mlp_trainer --root /tmp/mlp --ranks 4 --steps 200 --save-every 20 [--kill-at 130]
//               [--out final.bin]
#include <signal.h>
#include <unistd.h>

#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <fstream>
#include <memory>
#include <optional>
#include <string>
#include <thread>
#include <vector>

#include "ckpt/checkpointer.h"
#include "ckpt/communicator.h"

namespace {

constexpr int kIn = 16, kHidden = 32, kBatch = 8;

struct Model {  // parameters, then Adam's two moments for each
  std::vector<float> w1 = std::vector<float>(kHidden * kIn), b1 = std::vector<float>(kHidden),
                     w2 = std::vector<float>(kHidden), b2 = std::vector<float>(1);
  std::vector<float*> tensors() { return {w1.data(), b1.data(), w2.data(), b2.data()}; }
  static std::vector<int64_t> sizes() { return {kHidden * kIn, kHidden, kHidden, 1}; }
};

// Deterministic pseudo-random numbers from (seed, index): the data a rank
// sees at a step depends on nothing else, so a resume replays it exactly.
float Noise(uint64_t seed, uint64_t i) {
  uint64_t x = seed * 0x9e3779b97f4a7c15ull + i * 0xbf58476d1ce4e5b9ull;
  x ^= x >> 31;
  x *= 0x94d049bb133111ebull;
  x ^= x >> 29;
  return static_cast<float>(x >> 40) / static_cast<float>(1 << 24) - 0.5f;
}

// Loss gradient of one rank's batch at `step`.
void Gradient(const Model& m, int rank, int64_t step, Model& g) {
  for (auto* v : {&g.w1, &g.b1, &g.w2, &g.b2}) std::fill(v->begin(), v->end(), 0.0f);
  for (int s = 0; s < kBatch; ++s) {
    const uint64_t seed = static_cast<uint64_t>(step) * 1000 + static_cast<uint64_t>(rank) * kBatch + s;
    float x[kIn], h[kHidden];
    float target = 0;
    for (int i = 0; i < kIn; ++i) {
      x[i] = Noise(seed, i);
      target += std::sin(x[i] * (i + 1));
    }
    float y = m.b2[0];
    for (int j = 0; j < kHidden; ++j) {
      float a = m.b1[j];
      for (int i = 0; i < kIn; ++i) a += m.w1[j * kIn + i] * x[i];
      h[j] = std::tanh(a);
      y += m.w2[j] * h[j];
    }
    const float dy = 2 * (y - target) / kBatch;
    g.b2[0] += dy;
    for (int j = 0; j < kHidden; ++j) {
      g.w2[j] += dy * h[j];
      const float da = dy * m.w2[j] * (1 - h[j] * h[j]);
      g.b1[j] += da;
      for (int i = 0; i < kIn; ++i) g.w1[j * kIn + i] += da * x[i];
    }
  }
}

// Averages every rank's gradient (in rank order, so the sum is the same
// every run) through the communicator.
absl::Status AllReduce(ckpt::Communicator& comm, Model& g) {
  std::string mine;
  for (auto* v : {&g.w1, &g.b1, &g.w2, &g.b2}) mine.append(reinterpret_cast<const char*>(v->data()), v->size() * 4);
  auto all = comm.Gather(mine, 60);
  if (!all.ok()) return all.status();
  std::string sum;
  if (comm.rank() == 0) {
    std::vector<float> acc(mine.size() / 4, 0.0f);
    for (const std::string& part : *all) {
      const float* p = reinterpret_cast<const float*>(part.data());
      for (size_t k = 0; k < acc.size(); ++k) acc[k] += p[k] / static_cast<float>(comm.size());
    }
    sum.assign(reinterpret_cast<const char*>(acc.data()), acc.size() * 4);
  }
  auto avg = comm.Broadcast(sum, 60);
  if (!avg.ok()) return avg.status();
  size_t off = 0;
  for (auto* v : {&g.w1, &g.b1, &g.w2, &g.b2}) {
    std::memcpy(v->data(), avg->data() + off, v->size() * 4);
    off += v->size() * 4;
  }
  return absl::OkStatus();
}

struct Options {
  std::string root, out;
  int ranks = 4;
  int64_t steps = 200, save_every = 20, kill_at = -1;
};

absl::Status RunRank(const Options& opt, int rank, std::shared_ptr<ckpt::Communicator> comm, Model* result) {
  Model m, adam_m, adam_v, g;
  int64_t step = 0;
  // Every rank holds every tensor (data parallel): the Checkpointer's
  // replica agreement writes each once.
  auto add_tensors = [&](ckpt::State& st) -> absl::Status {
    const char* names[] = {"mlp.w1", "mlp.b1", "mlp.w2", "mlp.b2"};
    const char* kinds[] = {"", "adam.m.", "adam.v."};
    Model* models[] = {&m, &adam_m, &adam_v};
    for (int k = 0; k < 3; ++k) {
      auto ts = models[k]->tensors();
      for (size_t t = 0; t < ts.size(); ++t) {
        const ckpt::TensorSpec spec{std::string(kinds[k]) + names[t], ckpt::DType::kF32, {Model::sizes()[t]}};
        if (absl::Status s = st.AddTensor(spec, ts[t]); !s.ok()) return s;
      }
    }
    return absl::OkStatus();
  };
  ckpt::CheckpointerOptions co;
  co.uri = opt.root;
  co.rank = rank;
  co.world_size = opt.ranks;
  co.communicator = comm;
  co.retention.keep_last = 2;
  co.engine_options.staging_bytes = 1 << 20;
  auto cp = ckpt::Checkpointer::Open(co);
  if (!cp.ok()) return cp.status();
  if ((*cp)->LatestStep().ok()) {
    // Tensors come back into their buffers, the step as a blob.
    ckpt::State load;
    std::string saved_step;
    if (absl::Status s = add_tensors(load); !s.ok()) return s;
    if (absl::Status s = load.AddBlobOut("step", &saved_step, ckpt::BlobScope::kGlobal); !s.ok()) return s;
    auto loaded = (*cp)->Load(load);
    if (!loaded.ok()) return loaded.status();
    std::memcpy(&step, saved_step.data(), sizeof(step));
    if (rank == 0) std::printf("resumed at step %lld\n", static_cast<long long>(step));
  } else {
    for (size_t i = 0; i < m.w1.size(); ++i) m.w1[i] = Noise(7, i) * 0.5f;
    for (size_t i = 0; i < m.w2.size(); ++i) m.w2[i] = Noise(8, i) * 0.5f;
  }
  std::optional<ckpt::SaveHandle> pending;
  while (step < opt.steps) {
    Gradient(m, rank, step + 1, g);
    if (absl::Status s = AllReduce(*comm, g); !s.ok()) return s;
    ++step;
    const float lr = 0.01f, b1 = 0.9f, b2 = 0.999f, eps = 1e-8f;
    const float c1 = 1 - std::pow(b1, static_cast<float>(step)), c2 = 1 - std::pow(b2, static_cast<float>(step));
    auto p = m.tensors(), gm = g.tensors(), mm = adam_m.tensors(), vv = adam_v.tensors();
    for (size_t t = 0; t < p.size(); ++t) {
      for (int64_t i = 0; i < Model::sizes()[t]; ++i) {
        mm[t][i] = b1 * mm[t][i] + (1 - b1) * gm[t][i];
        vv[t][i] = b2 * vv[t][i] + (1 - b2) * gm[t][i] * gm[t][i];
        p[t][i] -= lr * (mm[t][i] / c1) / (std::sqrt(vv[t][i] / c2) + eps);
      }
    }
    if (step % opt.save_every == 0 || step == opt.steps) {
      if (pending) {
        if (absl::Status s = pending->Wait(); !s.ok()) return s;
      }
      ckpt::State s;
      if (absl::Status st = add_tensors(s); !st.ok()) return st;
      if (rank == 0) {  // a job-wide blob comes from one rank
        if (absl::Status st = s.AddBlob("step", &step, sizeof(step), ckpt::BlobScope::kGlobal); !st.ok()) return st;
      }
      auto h = (*cp)->Save(step, s);  // returns once copied; training goes on
      if (!h.ok()) return h.status();
      pending = std::move(h).value();
    }
    if (step == opt.kill_at && rank == 0) {
      if (pending) (void)pending->Wait();
      kill(getpid(), SIGKILL);  // a node dies
    }
  }
  if (pending) {
    if (absl::Status s = pending->Wait(); !s.ok()) return s;
  }
  *result = m;
  return absl::OkStatus();
}

}  // namespace

int main(int argc, char** argv) {
  Options opt;
  for (int i = 1; i + 1 < argc; i += 2) {
    const std::string k = argv[i], v = argv[i + 1];
    if (k == "--root")
      opt.root = v;
    else if (k == "--out")
      opt.out = v;
    else if (k == "--ranks")
      opt.ranks = std::atoi(v.c_str());
    else if (k == "--steps")
      opt.steps = std::atoll(v.c_str());
    else if (k == "--save-every")
      opt.save_every = std::atoll(v.c_str());
    else if (k == "--kill-at")
      opt.kill_at = std::atoll(v.c_str());
    else {
      std::fprintf(stderr, "unknown option %s\n", k.c_str());
      return 2;
    }
  }
  if (opt.root.empty() || opt.ranks < 1 || opt.save_every < 1) {
    std::fprintf(stderr,
                 "usage: mlp_trainer --root DIR [--ranks 4] [--steps 200] [--save-every 20] "
                 "[--kill-at S] [--out FILE]\n");
    return 2;
  }
  auto comms = ckpt::CreateLocalCommunicators(opt.ranks);
  std::vector<Model> results(static_cast<size_t>(opt.ranks));
  std::vector<absl::Status> status(static_cast<size_t>(opt.ranks));
  std::vector<std::thread> threads;
  for (int r = 0; r < opt.ranks; ++r) {
    threads.emplace_back([&, r] { status[r] = RunRank(opt, r, comms[r], &results[r]); });
  }
  for (auto& t : threads) t.join();
  for (int r = 0; r < opt.ranks; ++r) {
    if (!status[r].ok()) {
      std::fprintf(stderr, "rank %d: %s\n", r, std::string(status[r].message()).c_str());
      return 1;
    }
  }
  if (!opt.out.empty()) {
    std::ofstream f(opt.out, std::ios::binary);
    for (auto* v : {&results[0].w1, &results[0].b1, &results[0].w2, &results[0].b2}) {
      f.write(reinterpret_cast<const char*>(v->data()), static_cast<std::streamsize>(v->size() * 4));
    }
  }
  std::printf("trained to step %lld on %d ranks\n", static_cast<long long>(opt.steps), opt.ranks);
  return 0;
}
