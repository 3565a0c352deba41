// Options and measurements of saves and loads: plain values that the save
// engine, the loader and the Checkpointer facade share.
#ifndef CKPT_OPTIONS_H_
#define CKPT_OPTIONS_H_

#include <cstddef>
#include <cstdint>
#include <map>
#include <string>

#include "ckpt/export.h"

namespace ckpt {

/// How each rank's data file is laid out.
enum class DataContainer {
  /// From the root: HDF5 for `hdf5://` roots, ckpt's own files otherwise.
  kAuto,
  /// ckpt data files: framed, checksummed, optionally compressed blocks.
  kCkpt,
  /// HDF5 files whose datasets h5py and h5dump read directly: raw blocks,
  /// no codec, one dataset per shard (format/hdf5_container.h). Needs a
  /// root with local files.
  kHdf5,
};

/// Which steps survive after a new one commits. Zero values disable a rule;
/// with all zero every step is kept. Steps that kept steps' deltas need are
/// kept too (docs/format.md, "Delta chains").
struct CKPT_EXPORT RetentionPolicy {
  int keep_last = 0;       ///< keep the newest k committed steps
  int64_t keep_every = 0;  ///< also keep steps that are multiples of n
  /// Also keep every committed step within this many steps of the newest
  /// (step > newest - n): a window of recent steps to roll back to, cheap
  /// when they are saved as deltas.
  int64_t keep_within = 0;
};

/// Staging memory and background threads. One engine may serve several
/// Checkpointers (ranks) of a process; it is thread-safe.
struct CKPT_EXPORT SaveEngineOptions {
  size_t staging_bytes = size_t{256} << 20;  ///< arena budget
  /// Raw bytes per block: the unit of checksums, compression and reads. 1 MiB
  /// keeps a partial read of a chunk close to what it needs while writes stay
  /// as fast as with larger blocks (measured in docs/performance.md).
  size_t block_size = size_t{1} << 20;
  int worker_threads = 0;  ///< 0: min(4, hardware threads)
  /// Threads that copy a Save's state into the arena (the stall), the
  /// calling thread included; the others wait, idle, for the next Save. A
  /// trainer's spare cores shorten its stall up to the memory bandwidth.
  /// 0: min(4, hardware threads); 1: the calling thread alone.
  int staging_threads = 0;
  /// Nice value added to the background threads so they yield to the
  /// trainer's threads; they are also batch threads (SCHED_BATCH), which
  /// never preempt a running thread when they wake. 0 leaves them at the
  /// caller's priority and policy.
  int background_nice = 10;
  /// Run the background threads as SCHED_IDLE instead: only on cores that
  /// nothing else wants. The trainer never waits for a core it shares with
  /// them, but on a machine whose cores are all busy a save then advances
  /// only when the trainer blocks (the next Save waits for it).
  bool background_idle = false;
  /// Put the background threads in the idle I/O class (ioprio), where the
  /// kernel's I/O scheduler supports it: their reads and writes yield to
  /// the trainer's (its data loader's) on a shared device.
  bool background_io_idle = true;
  /// Cores the background threads (compression, checksums, encoding) may
  /// use together, on average over a few milliseconds: 0 leaves them
  /// uncapped (worker_threads of them); 0.5 lets them use half a core.
  /// Bounds the workers to ceil(cpu_budget) threads, and paces them by
  /// the CPU time each block took.
  double cpu_budget = 0;
  /// Whether the workers leave staged blocks alone while a Save is staging,
  /// until it returns or the arena runs full: on a machine without a core
  /// for each, they would take the staging threads' cores (and the memory
  /// bandwidth) and lengthen the stall, to start the writes a stall earlier.
  /// -1: when the staging threads and the workers outnumber the hardware
  /// threads; 0: never; 1: always.
  int pause_workers_while_staging = -1;
};

/// Where a save is kept (docs/levels.md).
enum class SaveLevel : uint8_t {
  /// The checkpoint root's storage: committed once every rank's data is
  /// durable there.
  kDurable = 0,
  /// Host memory of the job's processes (CheckpointerOptions::memory_storage):
  /// committed once every rank's files are in the memory of r + 1 failure
  /// domains. Survives the loss of up to r domains, not a whole-job failure.
  kMemory = 1,
};
CKPT_EXPORT const char* SaveLevelName(SaveLevel level);

/// Delta saves (docs/format.md, "Delta chains"; docs/integrations.md): a
/// chunk saved whole is kept in host memory as a base, and the next saves
/// of that chunk store its elements' differences from the base, compressed.
/// Which
/// chunks are saved as deltas is decided per chunk, by measuring: a frozen
/// tensor's delta is nearly all zeros; a tensor whose delta does not shrink
/// is saved whole. Costs one copy of the rank's saved tensors in host
/// memory (two while a new base is being saved). Loads rebuild a delta from
/// its base and the delta, reading one more block per block; retention
/// keeps every base a kept step needs.
struct CKPT_EXPORT DeltaOptions {
  /// Deltas saved against one base before the chunk is saved whole again,
  /// as a new base. 0: every save whole (the default; nothing else changes).
  int chain = 0;
  /// A chunk is saved whole at its next save, as a new base, once its last
  /// delta stored more than the average of its cycle so far (its base and
  /// the deltas against it: starting over is then cheaper on average), or
  /// more than this fraction of its base's stored bytes. When even its
  /// first delta stores over 90 % of the base, deltas do not pay for it: it
  /// is saved whole, keeping no base, for the next `chain` saves, then
  /// tried again. With codec auto, bases and those whole saves are
  /// compressed whatever auto would choose.
  double rebase_ratio = 0.9;
};

struct CKPT_EXPORT SaveOptions {
  /// Key/value pairs recorded in the manifest.
  std::map<std::string, std::string> metadata;
  /// Save a step at or below the latest committed one (a branch from an
  /// older step, a re-run). Refused otherwise, since it usually means two
  /// jobs or a restart counting from the wrong place. Such a step is never
  /// removed by the retention of its own commit.
  bool allow_older_step = false;
  /// The save's identity, shared by every rank: it is written into the
  /// step's CLAIM, every data file and every report, and the leader commits
  /// only files that carry it. 0: chosen by the save. With a communicator
  /// the leader chooses it and every rank learns it (this field is read on
  /// the leader only). Without one, ranks in separate processes or threads
  /// should pass the same nonzero id, unique per attempt (a random number
  /// agreed at job start, mixed with the step and the attempt): each rank
  /// then checks the claim against it before writing and a second job's
  /// ranks fail at once. With 0 there, a non-leader adopts whichever claim
  /// it finds, which proves one writer only while one job writes the root.
  uint64_t save_id = 0;
  /// Which level keeps this save.
  SaveLevel level = SaveLevel::kDurable;
};

struct CKPT_EXPORT LoadOptions {
  int worker_threads = 0;  ///< 0: min(4, hardware)
  /// Read memory in flight (never more than the load needs); adjacent
  /// blocks are read with one request.
  size_t read_buffer_bytes = size_t{64} << 20;
  /// Tensors of the target that the checkpoint lacks are skipped instead of
  /// failing the load.
  bool allow_missing = false;
  /// When the latest step is asked for and the newest committed step is
  /// damaged (neither MANIFEST nor its copy decodes), restore the newest
  /// intact step instead, and say so in LoadStats and on stderr. Off by
  /// default: going back silently changes the training trajectory, and
  /// single-file damage to the manifest is already covered by its copy, so
  /// what is left deserves a decision (docs/reliability.md).
  bool allow_fallback = false;
  /// Which level to read the step from.
  SaveLevel level = SaveLevel::kDurable;
  /// A collective load of a laid-out target (State::SetMesh, AddLayout)
  /// whose checkpointer has a LoadExchange, at the durable level: ranks
  /// that need the same stored bytes read each piece once, one of them from
  /// storage, the others from that rank (docs/resharding.md, "Cooperative
  /// loads"). Every rank must pass the same value.
  bool cooperative = true;
  /// How long a rank waits for a piece another rank reads for it before it
  /// reads the piece from storage itself (and stops waiting for that rank).
  /// A rank that died is passed over at once.
  double cooperative_wait_s = 120;
  /// Runs of blocks that the same ranks need are cut into pieces of about
  /// this many raw bytes (whole blocks, on a grid over each data file), each
  /// with a reader of its own: the hosts share a large tensor's reads, and
  /// a rank gets the first piece while later ones are read. 4 MiB: on a
  /// shared storage link readers' pieces then complete one after another
  /// rather than all at the end (docs/performance.md, "Cooperative
  /// restores", has the figures behind it).
  uint64_t cooperative_piece_bytes = uint64_t{4} << 20;
};

/// Measured costs of one save, for the interval optimiser.
struct CKPT_EXPORT SaveStats {
  int64_t step = 0;
  double stall_s = 0;         ///< time Save blocked the caller
  double write_s = 0;         ///< Save start until this rank's data was durable
  double commit_s = 0;        ///< Save start until the step was committed (retention's removals excluded)
  int64_t bytes_logical = 0;  ///< tensor and blob bytes this rank writes (not replicas others write)
  int64_t bytes_stored = 0;   ///< after compression
  int64_t bytes_written = 0;  ///< file bytes including framing and index
  int64_t blocks = 0;
  uint64_t save_id = 0;  ///< the identity in the step's CLAIM
};

struct CKPT_EXPORT SaveProgress {
  int64_t blocks_total = 0;
  int64_t blocks_written = 0;
  int64_t bytes_staged = 0;
  int64_t bytes_written = 0;
};

struct CKPT_EXPORT LoadStats {
  int64_t step = 0;
  int64_t bytes_read = 0;     ///< stored bytes read from storage
  int64_t bytes_decoded = 0;  ///< raw bytes of the blocks read
  int64_t bytes_needed = 0;   ///< raw bytes the target asked for
  int64_t blocks_read = 0;
  double seconds = 0;
  /// What stood in the way of the step asked for and what was done about
  /// it: the damaged step passed over (with allow_fallback), a manifest read
  /// from its copy. Empty when nothing was.
  std::string damage_note;
  /// The damaged step passed over with allow_fallback, else -1.
  int64_t fell_back_from = -1;
  /// The level the step was read from, and where its bytes came from:
  /// this process's memory and other processes' memory (every byte read
  /// there, the manifest and block indexes included), storage (bytes_read
  /// at the durable level, 0 at the memory level).
  SaveLevel level = SaveLevel::kDurable;
  int64_t bytes_from_memory = 0;
  int64_t bytes_from_peers = 0;
  int64_t bytes_from_storage = 0;
  /// An erasure-coded memory level (PeerRoute::erasure_k): file bytes
  /// rebuilt from parity pieces, and the data pieces that were missing or
  /// damaged, counted for each file read (0 and 0: every data piece was
  /// read where it lives).
  int64_t bytes_rebuilt_from_parity = 0;
  int64_t memory_pieces_lost = 0;
  /// A cooperative load: bytes_from_storage counts the stored bytes this
  /// rank read from storage, the pieces it read for other ranks included
  /// (bytes_for_peers of them), and bytes_from_peers those other ranks read
  /// for it. peer_failovers counts pieces it read itself because the rank
  /// that was to read them died, forwent them or was late.
  bool cooperative = false;
  int64_t bytes_for_peers = 0;
  int64_t peer_failovers = 0;
  /// Bytes of the step's manifest this rank read itself: all of it when it
  /// loads alone or leads; with a communicator and a manifest of version 4 or
  /// later each other rank reads only the parts it needs; with an older manifest
  /// the leader hands each other rank its part (0 here).
  int64_t manifest_bytes = 0;
  /// A step saved as deltas: blocks of its delta chains' bases read to
  /// rebuild the blocks loaded (their stored bytes; bytes_read counts the
  /// step's own).
  int64_t delta_blocks = 0;
  int64_t bytes_read_from_bases = 0;
  /// bytes_decoded / bytes_needed (1.0 when nothing was needed).
  double ReadAmplification() const;
};

}  // namespace ckpt

#endif  // CKPT_OPTIONS_H_
