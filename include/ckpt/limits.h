// Every size limit of ckpt, in one place. What a caller hands to the library
// is checked against these where it enters (State, the save options, the C
// and Python APIs), with the name of the offending item; what a reader takes
// from a file or a socket is checked before anything is allocated for it, so
// a hostile header cannot make it allocate. Changing a limit of the format
// changes what older readers accept: the format and protocol limits are part
// of docs/format.md and docs/protocol.md.
#ifndef CKPT_LIMITS_H_
#define CKPT_LIMITS_H_

#include <cstddef>
#include <cstdint>

namespace ckpt {

// ---- What a checkpoint may hold (checked where it enters) ----

/// Dimensions of a tensor, and of a mesh.
inline constexpr int kMaxTensorRank = 32;
/// 2^50 elements: 8 PiB of f64, far beyond any tensor, far below overflow.
inline constexpr int64_t kMaxTensorElements = int64_t{1} << 50;
/// Largest blob saved or loaded (1 TiB).
inline constexpr uint64_t kMaxBlobBytes = uint64_t{1} << 40;
/// Longest tensor or blob name, in bytes.
inline constexpr size_t kMaxNameBytes = 64u << 10;
/// Longest key, and longest value, of a save's metadata, in bytes.
inline constexpr size_t kMaxMetadataBytes = 1u << 20;
/// Longest name of a mesh dimension ("dp", "tp", ...), in bytes.
inline constexpr size_t kMaxMeshDimNameBytes = 256;

// ---- The on-disk format (checked by every reader) ----

/// Largest block of a data file (a block is compressed and checksummed alone).
inline constexpr uint32_t kMaxBlockBytes = 64u << 20;
/// Most entries of any list in a manifest (files, tensors, chunks, blobs, metadata).
inline constexpr uint64_t kMaxManifestCount = uint64_t{1} << 32;
/// Most chunks one manifest may describe, counting each cell of a chunk grid
/// (versions 4 and 5): a few bytes of grid can stand for millions of chunks,
/// which a reader holds in memory (about 100 bytes each), so hostile input is
/// bounded here. 2^25 is 1.45 times the 23.1 M cells of a 405B-parameter
/// model with ZeRO saved over 131,072 ranks.
inline constexpr uint64_t kMaxManifestChunks = uint64_t{1} << 25;
/// Bases one manifest's deltas may name (ManifestBase).
inline constexpr uint64_t kMaxDeltaBases = 4096;
/// Links a delta chain may have: a load follows at most this many bases.
inline constexpr int kMaxDeltaChain = 256;
/// Longest data-file name a manifest may hold.
inline constexpr size_t kMaxFileNameBytes = 4096;
/// A safetensors header (its JSON), as Hugging Face's own reader allows.
inline constexpr uint64_t kMaxSafetensorsHeader = 100'000'000;
/// A model.safetensors.index.json.
inline constexpr uint64_t kMaxSafetensorsIndex = 256u << 20;
/// Longest library version string a manifest may hold.
inline constexpr size_t kMaxVersionBytes = 256;
/// Longest CLAIM file (and the copy of it a manifest holds).
inline constexpr size_t kMaxClaimBytes = 1024;
/// Longest host name a CLAIM may hold.
inline constexpr size_t kMaxClaimHostBytes = 255;

// ---- The wire of the coordinator and the memory level (net/wire.h; checked on every frame) ----

/// Largest payload either side accepts unless configured otherwise.
inline constexpr uint32_t kDefaultMaxPayload = 16u << 20;
/// Largest payload accepted on a connection that has not proven the job's
/// token, by the coordinator and by a memory-level holder alike: a join
/// (job and host of at most kMaxJoinFieldBytes each, the MAC) fits, nothing
/// bigger is ever needed before the token is proven.
inline constexpr uint32_t kMaxPreAuthPayload = 16u << 10;
/// The memory level: largest frame of file bytes (put-data, data), largest
/// frame of any other kind (a listing), longest path in a request.
inline constexpr uint64_t kMaxPeerDataPayload = uint64_t{4} << 20;
inline constexpr uint64_t kMaxPeerControlPayload = uint64_t{16} << 20;
inline constexpr uint64_t kMaxPeerPathBytes = 4096;
/// Longest job name, and host name, in a join.
inline constexpr size_t kMaxJoinFieldBytes = 4096;
/// Longest error message, replica key or abort reason carried in a frame.
inline constexpr size_t kMaxWireTextBytes = 64u << 10;
/// Largest status document a client accepts.
inline constexpr size_t kMaxStatusBytes = 64u << 20;
/// Largest HTTP request (request line and headers) the coordinator reads.
inline constexpr size_t kMaxHttpRequest = 8u << 10;
/// Shortest job token accepted, in bytes.
inline constexpr size_t kMinTokenBytes = 16;

}  // namespace ckpt

#endif  // CKPT_LIMITS_H_
