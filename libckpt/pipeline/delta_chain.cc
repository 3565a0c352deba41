#include "pipeline/delta_chain.h"

#include <immintrin.h>

#include <cstring>
#include <deque>

#include "codec/codec.h"
#include "util/aligned_buffer.h"
#include "util/clock.h"
#include "util/cpu.h"
#include "util/errors.h"
#include "util/strings.h"

namespace ckpt {

namespace {

// The portable loops, from element byte `i` on.
template <typename U>
void MakeDeltaOf(std::byte* x, const std::byte* b, size_t i, size_t n) {
  constexpr int kBits = 8 * sizeof(U);
  for (; i < n; i += sizeof(U)) {
    U a, c;
    std::memcpy(&a, x + i, sizeof(U));
    std::memcpy(&c, b + i, sizeof(U));
    const U d = static_cast<U>(a - c);
    // Zig-zag: the sign moves to the lowest bit.
    const U sign = static_cast<U>(0) - static_cast<U>(d >> (kBits - 1));
    const U z = static_cast<U>(static_cast<U>(d << 1) ^ sign);
    std::memcpy(x + i, &z, sizeof(U));
  }
}

template <typename U>
void UndoDeltaOf(std::byte* x, const std::byte* b, size_t i, size_t n) {
  for (; i < n; i += sizeof(U)) {
    U z, c;
    std::memcpy(&z, x + i, sizeof(U));
    std::memcpy(&c, b + i, sizeof(U));
    const U d = static_cast<U>(static_cast<U>(z >> 1) ^ (static_cast<U>(0) - static_cast<U>(z & 1)));
    const U a = static_cast<U>(c + d);
    std::memcpy(x + i, &a, sizeof(U));
  }
}

// 32 bytes at a time for 2-, 4- and 8-byte elements; returns the bytes
// done. The scalar loops took about a tenth of a delta save's worker time.
#define CKPT_AVX2 [[gnu::target("avx2")]]

template <size_t W>
CKPT_AVX2 inline __m256i Sub(__m256i a, __m256i b) {
  if constexpr (W == 2) return _mm256_sub_epi16(a, b);
  if constexpr (W == 4) return _mm256_sub_epi32(a, b);
  return _mm256_sub_epi64(a, b);
}
template <size_t W>
CKPT_AVX2 inline __m256i Add(__m256i a, __m256i b) {
  if constexpr (W == 2) return _mm256_add_epi16(a, b);
  if constexpr (W == 4) return _mm256_add_epi32(a, b);
  return _mm256_add_epi64(a, b);
}
template <size_t W, int K>
CKPT_AVX2 inline __m256i Shl(__m256i a) {
  if constexpr (W == 2) return _mm256_slli_epi16(a, K);
  if constexpr (W == 4) return _mm256_slli_epi32(a, K);
  return _mm256_slli_epi64(a, K);
}
template <size_t W, int K>
CKPT_AVX2 inline __m256i Shr(__m256i a) {
  if constexpr (W == 2) return _mm256_srli_epi16(a, K);
  if constexpr (W == 4) return _mm256_srli_epi32(a, K);
  return _mm256_srli_epi64(a, K);
}

template <bool kMake, size_t W>
CKPT_AVX2 size_t TransformAvx2(std::byte* x, const std::byte* b, size_t n) {
  const __m256i zero = _mm256_setzero_si256();
  const __m256i one = Shr<W, 8 * W - 1>(_mm256_cmpeq_epi8(zero, zero));
  size_t i = 0;
  for (; i + 32 <= n; i += 32) {
    const __m256i v = _mm256_loadu_si256(reinterpret_cast<const __m256i*>(x + i));
    const __m256i c = _mm256_loadu_si256(reinterpret_cast<const __m256i*>(b + i));
    __m256i r;
    if constexpr (kMake) {
      const __m256i d = Sub<W>(v, c);
      // All ones where d is negative: 0 minus its top bit.
      const __m256i sign = Sub<W>(zero, Shr<W, 8 * W - 1>(d));
      r = _mm256_xor_si256(Shl<W, 1>(d), sign);
    } else {
      const __m256i d = _mm256_xor_si256(Shr<W, 1>(v), Sub<W>(zero, _mm256_and_si256(v, one)));
      r = Add<W>(c, d);
    }
    _mm256_storeu_si256(reinterpret_cast<__m256i*>(x + i), r);
  }
  return i;
}

template <bool kMake>
size_t TransformVector(std::byte* x, const std::byte* b, size_t n, size_t width) {
  if (!Cpu().avx2) return 0;
  switch (width) {
    case 2:
      return TransformAvx2<kMake, 2>(x, b, n);
    case 4:
      return TransformAvx2<kMake, 4>(x, b, n);
    case 8:
      return TransformAvx2<kMake, 8>(x, b, n);
    default:
      return 0;
  }
}

template <bool kMake>
void Transform(absl::Span<std::byte> bytes, absl::Span<const std::byte> base, size_t width) {
  const size_t n = std::min(bytes.size(), base.size()) / width * width;
  std::byte* x = bytes.data();
  const std::byte* b = base.data();
  const size_t done = TransformVector<kMake>(x, b, n, width);
  switch (width) {
    case 1:
      kMake ? MakeDeltaOf<uint8_t>(x, b, done, n) : UndoDeltaOf<uint8_t>(x, b, done, n);
      break;
    case 2:
      kMake ? MakeDeltaOf<uint16_t>(x, b, done, n) : UndoDeltaOf<uint16_t>(x, b, done, n);
      break;
    case 4:
      kMake ? MakeDeltaOf<uint32_t>(x, b, done, n) : UndoDeltaOf<uint32_t>(x, b, done, n);
      break;
    default:
      kMake ? MakeDeltaOf<uint64_t>(x, b, done, n) : UndoDeltaOf<uint64_t>(x, b, done, n);
      break;
  }
}

// Memory of read-ahead runs kept between loads: mapping it afresh for every
// load (page faults) took a quarter of a small delta load's time. At most
// this many bytes stay mapped once loads are over.
constexpr uint64_t kKeptRunMemory = uint64_t{8} << 20;

std::mutex& RunMemoryMutex() {
  static std::mutex mu;
  return mu;
}
std::vector<AlignedBuffer>& RunMemory() {
  static auto* kept = new std::vector<AlignedBuffer>();
  return *kept;
}

}  // namespace

void MakeDelta(absl::Span<std::byte> bytes, absl::Span<const std::byte> base, size_t width) {
  Transform<true>(bytes, base, width);
}

void UndoDelta(absl::Span<std::byte> bytes, absl::Span<const std::byte> base, size_t width) {
  Transform<false>(bytes, base, width);
}

DeltaChain::DeltaChain(Storage& storage, BaseManifests* manifests) : storage_(storage), manifests_(manifests) {
  std::lock_guard<std::mutex> lock(RunMemoryMutex());
  spare_ = std::move(RunMemory());
  RunMemory().clear();
}

DeltaChain::~DeltaChain() {
  std::unique_lock<std::mutex> lock(mu_);
  run_done_.wait(lock, [&] { return reading_ == 0; });
  for (Run& r : runs_) {
    if (r.bytes.size() > 0) spare_.push_back(std::move(r.bytes));
  }
  std::lock_guard<std::mutex> kept(RunMemoryMutex());
  uint64_t bytes = 0;
  for (AlignedBuffer& b : RunMemory()) bytes += b.size();
  for (AlignedBuffer& b : spare_) {
    if (bytes + b.size() > kKeptRunMemory) break;
    bytes += b.size();
    RunMemory().push_back(std::move(b));
  }
}

void DeltaChain::Plan(const Manifest& m, const std::vector<Need>& needs, uint64_t window) {
  std::vector<Located> frames;
  for (const Need& n : needs) {
    const ManifestBase* base = m.BaseOf(*n.chunk);
    if (base == nullptr || n.chunk->file >= m.files.size()) continue;
    // A base that cannot be found is reported when its block is rebuilt.
    auto at = Locate(*base, n.tensor->spec, n.chunk->box, n.block, m.files[n.chunk->file].block_size, "");
    if (at.ok()) frames.push_back(*at);
  }
  std::lock_guard<std::mutex> lock(mu_);
  window_ = window;
  // Frames of one file that follow each other (within 64 KiB) join one
  // run of at most 2 MiB, or the window when it is smaller.
  constexpr uint64_t kGap = 64 << 10;
  const uint64_t max_run = std::min<uint64_t>(kRunBytes, std::max<uint64_t>(window, 1));
  for (const Located& at : frames) {
    if (slots_.count(at.entry) != 0) continue;
    const uint64_t begin = at.entry->offset, end = begin + at.entry->frame_len;
    if (!runs_.empty()) {
      Run& r = runs_.back();
      if (r.file == at.file && begin >= r.offset + r.len && begin <= r.offset + r.len + kGap &&
          end - r.offset <= max_run) {
        slots_[at.entry] = Slot{runs_.size() - 1, begin - r.offset};
        r.len = end - r.offset;
        ++r.unused;
        continue;
      }
    }
    Run& r = runs_.emplace_back();
    r.file = at.file;
    r.offset = begin;
    r.len = at.entry->frame_len;
    r.unused = 1;
    slots_[at.entry] = Slot{runs_.size() - 1, 0};
  }
  StartRunsLocked();
}

void DeltaChain::StartRunsLocked() {
  while (!fast_ && next_run_ < runs_.size() && reading_ < kReaders &&
         (held_ == 0 || held_ + runs_[next_run_].len <= window_)) {
    const size_t i = next_run_++;
    Run& r = runs_[i];
    if (r.state != Run::State::kWaiting) continue;
    r.state = Run::State::kReading;
    held_ += r.len;
    // A used run's memory, when one is large enough: mapping fresh memory
    // for every run cost more than the reads from a warm cache.
    for (auto it = spare_.begin(); it != spare_.end(); ++it) {
      if (it->size() >= r.len) {
        r.bytes = std::move(*it);
        spare_.erase(it);
        break;
      }
    }
    ++reading_;
    readers_.Submit([this, i] {
      Run* run;
      {
        std::lock_guard<std::mutex> lock(mu_);
        run = &runs_[i];
      }
      // Only this task touches the run's bytes until it is done.
      absl::Status s;
      if (run->bytes.size() < run->len) {
        // Runs' memory is of one size, so that any used run's fits the next.
        auto buf = AlignedBuffer::Allocate(std::max<uint64_t>(run->len, kRunBytes), false, /*huge=*/true);
        if (buf.ok()) run->bytes = std::move(buf).value();
        s = buf.status();
      }
      const double t0 = NowSeconds();
      if (s.ok()) s = run->file->file->ReadAt(run->offset, absl::Span<std::byte>(run->bytes.data(), run->len));
      const double seconds = NowSeconds() - t0;
      {
        std::lock_guard<std::mutex> lock(mu_);
        // Reads as fast as a copy from memory (a warm page cache, a memory
        // store): reading ahead only takes cores from the decoders (a delta
        // restore from a warm cache took 13 % longer with it), so the
        // blocks not yet planned are read by their callers.
        if (s.ok() && seconds < kFastReadS + static_cast<double>(run->len) / kFastReadBytesPerS) fast_ = true;
        run->status = std::move(s);
        run->state = Run::State::kDone;
        --reading_;
        StartRunsLocked();
      }
      run_done_.notify_all();
    });
  }
}

std::optional<DeltaChain::Taken> DeltaChain::Take(const Located& at) {
  std::unique_lock<std::mutex> lock(mu_);
  auto it = slots_.find(at.entry);
  if (it == slots_.end()) return std::nullopt;
  // The frame is this caller's from here on: a second request of the same
  // block (none in a load, which rebuilds each block once) reads it itself.
  const Slot slot = it->second;
  slots_.erase(it);
  Run& r = runs_[slot.run];
  if (r.state == Run::State::kWaiting) {
    // Needed before its turn (blocks are rebuilt out of plan order): the
    // caller reads it, and the run is left to the frames' other callers.
    if (--r.unused == 0) r.state = Run::State::kDone;  // all read by their callers: never read
    return std::nullopt;
  }
  run_done_.wait(lock, [&] { return r.state == Run::State::kDone; });
  Taken t{slot.run, r.status};
  if (r.status.ok()) t.frame = absl::Span<const std::byte>(r.bytes.data() + slot.at, at.entry->frame_len);
  return t;
}

void DeltaChain::Done(size_t run) {
  std::lock_guard<std::mutex> lock(mu_);
  Run& r = runs_[run];
  if (--r.unused > 0) return;
  Release(r);
  StartRunsLocked();
}

void DeltaChain::Release(Run& r) {
  held_ -= r.len;
  if (r.bytes.size() > 0) spare_.push_back(std::move(r.bytes));
  r.bytes = AlignedBuffer();
}

DeltaBaseFn DeltaChain::For(const Manifest& m, const ManifestTensor& t, const ManifestChunk& c, uint64_t block,
                            int depth) {
  const ManifestBase* base = m.BaseOf(c);
  if (base == nullptr || c.file >= m.files.size()) return {};
  const uint64_t block_size = m.files[c.file].block_size;
  return [this, b = *base, spec = &t.spec, box = &c.box, block, block_size, depth](absl::Span<std::byte> bytes) {
    return ApplyBase(b, *spec, *box, block, block_size, bytes, depth + 1);
  };
}

absl::StatusOr<DeltaChain::BaseStep*> DeltaChain::Open(const ManifestBase& base) {
  std::lock_guard<std::mutex> lock(mu_);
  std::unique_ptr<BaseStep>& s = steps_[base.step];
  if (s != nullptr) return s.get();
  if (manifests_ == nullptr) {
    return absl::FailedPreconditionError(
        StrCat("step ", base.step, " is a delta base, and no root was given to read it from"));
  }
  auto read = manifests_->Read(base.step);
  if (!read.ok()) {
    if (absl::IsNotFound(read.status())) {
      return absl::DataLossError(
          StrCat("delta base step ", base.step, " is not committed (", read.status().message(), ")"));
    }
    return Annotate(read.status(), StrCat("reading delta base step ", base.step));
  }
  auto step = std::make_unique<BaseStep>();
  step->manifest = std::move(read).value();
  for (const ManifestFile& f : step->manifest->files) {
    if (f.save_id != base.save_id) {
      return absl::DataLossError(StrCat("delta base step ", base.step, " holds save ", f.save_id, " (file ", f.name,
                                        "), not save ", base.save_id, " that the deltas were made against"));
    }
  }
  for (const ManifestTensor& t : step->manifest->tensors) {
    auto& by_box = step->chunks[t.spec.fqn];
    for (const ManifestChunk& c : t.chunks) by_box[c.box.offsets] = &c;
  }
  step->files = std::make_unique<StepFiles>(storage_, *step->manifest);
  s = std::move(step);
  return s.get();
}

absl::StatusOr<DeltaChain::Located> DeltaChain::Locate(const ManifestBase& base, const TensorSpec& spec, const Box& box,
                                                       uint64_t block, uint64_t block_size, const std::string& what) {
  Located at;
  CKPT_ASSIGN_OR_RETURN(at.step, Open(base));
  const Manifest& bm = *at.step->manifest;
  at.tensor = bm.FindTensor(spec.fqn);
  if (at.tensor == nullptr || !(at.tensor->spec == spec)) {
    return absl::DataLossError(StrCat(what, " has no tensor of that name, dtype and shape"));
  }
  auto by_box = at.step->chunks.find(spec.fqn);
  if (by_box != at.step->chunks.end()) {
    auto it = by_box->second.find(box.offsets);
    if (it != by_box->second.end() && it->second->box == box) at.chunk = it->second;
  }
  if (at.chunk == nullptr) return absl::DataLossError(StrCat(what, " has no chunk of that box"));
  if (bm.files[at.chunk->file].block_size != block_size) {
    return absl::DataLossError(
        StrCat(what, ": its file's block size ", bm.files[at.chunk->file].block_size, " is not ", block_size));
  }
  CKPT_ASSIGN_OR_RETURN(at.entry, at.step->files->Entry(*at.tensor, *at.chunk, block));
  CKPT_ASSIGN_OR_RETURN(at.file, at.step->files->Open(at.chunk->file));
  return at;
}

absl::Status DeltaChain::ApplyBase(const ManifestBase& base, const TensorSpec& spec, const Box& box, uint64_t block,
                                   uint64_t block_size, absl::Span<std::byte> bytes, int depth) {
  const std::string what =
      StrCat("tensor '", spec.fqn, "' chunk ", box.ToString(), " block ", block, ": delta base step ", base.step);
  if (depth > kMaxDeltaChain) {
    return absl::DataLossError(StrCat(what, ": the chain is longer than ", kMaxDeltaChain, " links"));
  }
  CKPT_ASSIGN_OR_RETURN(const Located at, Locate(base, spec, box, block, block_size, what));
  if (at.entry->raw_len != bytes.size()) {
    return absl::DataLossError(
        StrCat(what, ": the base block holds ", at.entry->raw_len, " bytes, the delta ", bytes.size()));
  }
  if (std::optional<Taken> planned = Take(at); planned.has_value()) {
    absl::Status s = Annotate(planned->status, what);
    if (s.ok()) {
      bytes_read_.fetch_add(at.entry->frame_len, std::memory_order_relaxed);
      s = Apply(at, planned->frame, block, bytes, depth, what);
    }
    Done(planned->run);
    return s;
  }
  // Each link of the chain reads into a buffer of its own (a deque: the
  // links below add theirs while this one's is in use).
  thread_local std::deque<AlignedBuffer> frames;
  while (frames.size() < static_cast<size_t>(depth + 1)) frames.emplace_back();
  AlignedBuffer& frame = frames[depth];
  if (frame.size() < at.entry->frame_len) {
    CKPT_ASSIGN_OR_RETURN(frame, AlignedBuffer::Allocate(at.entry->frame_len, false));
  }
  const absl::Span<std::byte> dst(frame.data(), at.entry->frame_len);
  CKPT_RETURN_IF_ERROR(Annotate(at.file->file->ReadAt(at.entry->offset, dst), what));
  bytes_read_.fetch_add(at.entry->frame_len, std::memory_order_relaxed);
  return Apply(at, dst, block, bytes, depth, what);
}

absl::Status DeltaChain::Apply(const Located& at, absl::Span<const std::byte> frame, uint64_t block,
                               absl::Span<std::byte> bytes, int depth, const std::string& what) {
  CKPT_RETURN_IF_ERROR(Annotate(CheckFrame(frame, *at.entry, at.chunk->first_block + block, at.file->path), what));
  // Each link decodes into scratch of its own, as it reads into a frame of
  // its own.
  thread_local std::deque<std::vector<std::byte>> scratch;
  thread_local BlockCodec codec;
  while (scratch.size() < static_cast<size_t>(depth + 1)) scratch.emplace_back();
  const DeltaBaseFn next = For(*at.step->manifest, *at.tensor, *at.chunk, block, depth);
  auto raw = DecodeFrame(codec, frame, *at.entry, scratch[depth], at.file->path, &next);
  if (!raw.ok()) return Annotate(raw.status(), what);
  UndoDelta(bytes, *raw, DTypeSize(at.tensor->spec.dtype));
  return absl::OkStatus();
}

}  // namespace ckpt
