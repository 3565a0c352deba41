#include "pipeline/delta_chain.h"

#include <immintrin.h>

#include <cstring>
#include <deque>

#include "codec/codec.h"
#include "util/aligned_buffer.h"
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

}  // namespace

void MakeDelta(absl::Span<std::byte> bytes, absl::Span<const std::byte> base, size_t width) {
  Transform<true>(bytes, base, width);
}

void UndoDelta(absl::Span<std::byte> bytes, absl::Span<const std::byte> base, size_t width) {
  Transform<false>(bytes, base, width);
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

absl::Status DeltaChain::ApplyBase(const ManifestBase& base, const TensorSpec& spec, const Box& box, uint64_t block,
                                   uint64_t block_size, absl::Span<std::byte> bytes, int depth) {
  const std::string what =
      StrCat("tensor '", spec.fqn, "' chunk ", box.ToString(), " block ", block, ": delta base step ", base.step);
  if (depth > kMaxDeltaChain) {
    return absl::DataLossError(StrCat(what, ": the chain is longer than ", kMaxDeltaChain, " links"));
  }
  CKPT_ASSIGN_OR_RETURN(BaseStep * step, Open(base));
  const Manifest& bm = *step->manifest;
  const ManifestTensor* t = bm.FindTensor(spec.fqn);
  if (t == nullptr || !(t->spec == spec)) {
    return absl::DataLossError(StrCat(what, " has no tensor of that name, dtype and shape"));
  }
  auto by_box = step->chunks.find(spec.fqn);
  const ManifestChunk* c = nullptr;
  if (by_box != step->chunks.end()) {
    auto it = by_box->second.find(box.offsets);
    if (it != by_box->second.end() && it->second->box == box) c = it->second;
  }
  if (c == nullptr) return absl::DataLossError(StrCat(what, " has no chunk of that box"));
  if (bm.files[c->file].block_size != block_size) {
    return absl::DataLossError(
        StrCat(what, ": its file's block size ", bm.files[c->file].block_size, " is not ", block_size));
  }
  CKPT_ASSIGN_OR_RETURN(const IndexEntry* e, step->files->Entry(*t, *c, block));
  CKPT_ASSIGN_OR_RETURN(const StepFiles::File* f, step->files->Open(c->file));
  if (e->raw_len != bytes.size()) {
    return absl::DataLossError(StrCat(what, ": the base block holds ", e->raw_len, " bytes, the delta ", bytes.size()));
  }
  // Each link of the chain decodes into buffers of its own (a deque: the
  // links below add theirs while this one's are in use).
  thread_local std::deque<AlignedBuffer> frames;
  thread_local std::deque<std::vector<std::byte>> scratch;
  thread_local BlockCodec codec;
  while (frames.size() < static_cast<size_t>(depth + 1)) frames.emplace_back();
  while (scratch.size() < static_cast<size_t>(depth + 1)) scratch.emplace_back();
  AlignedBuffer& frame = frames[depth];
  if (frame.size() < e->frame_len) {
    CKPT_ASSIGN_OR_RETURN(frame, AlignedBuffer::Allocate(e->frame_len, false));
  }
  const absl::Span<std::byte> dst(frame.data(), e->frame_len);
  CKPT_RETURN_IF_ERROR(Annotate(f->file->ReadAt(e->offset, dst), what));
  bytes_read_.fetch_add(e->frame_len, std::memory_order_relaxed);
  CKPT_RETURN_IF_ERROR(Annotate(CheckFrame(dst, *e, c->first_block + block, f->path), what));
  const DeltaBaseFn next = For(bm, *t, *c, block, depth);
  auto raw = DecodeFrame(codec, dst, *e, scratch[depth], f->path, &next);
  if (!raw.ok()) return Annotate(raw.status(), what);
  UndoDelta(bytes, *raw, DTypeSize(spec.dtype));
  return absl::OkStatus();
}

}  // namespace ckpt
