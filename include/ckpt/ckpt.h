/* The C API of ckpt: opaque handles, integer error codes and a message per
 * failed call; no C++ types. Link libckpt_c (find_package(ckpt) target
 * ckpt::ckpt_c, or pkg-config ckpt-c).
 *
 *   ckpt_options o;
 *   ckpt_options_init(&o);
 *   o.uri = "/nvme/ckpt";
 *   ckpt_checkpointer* cp;
 *   if (ckpt_open(&o, &cp) != CKPT_OK) fprintf(stderr, "%s\n", ckpt_last_error());
 *   ckpt_state* st;
 *   ckpt_state_new(&st);
 *   ckpt_state_add_shard(st, "w", CKPT_F32, 2, shape, offsets, sizes, ptr);
 *   ckpt_save* s;
 *   ckpt_save_start(cp, step, st, &s);   // returns once the shards are copied
 *   ...                                  // keep training
 *   ckpt_save_wait(s);                   // committed, or the error
 *   ckpt_save_free(s);
 *   ckpt_load(cp, CKPT_LATEST, st);      // fills the registered buffers
 *
 * Thread-safety: a checkpointer may be used from several threads; a state
 * must not change while a save or load of it runs. Errors: every function
 * returns CKPT_OK or an error code; ckpt_last_error() gives the message of
 * the last failure on the calling thread (it names the tensor, file and
 * offset where known).
 */
#ifndef CKPT_CKPT_H_
#define CKPT_CKPT_H_

#include <stddef.h>
#include <stdint.h>

#ifdef __cplusplus
extern "C" {
#endif

/** Version of this interface; ckpt_api_version() gives the library's. */
#define CKPT_API_VERSION 2

#if defined(__GNUC__)
#define CKPT_C_EXPORT __attribute__((visibility("default")))
#else
#define CKPT_C_EXPORT
#endif

/** Error codes. */
enum {
  CKPT_OK = 0,
  CKPT_INVALID_ARGUMENT = 1,   /**< bad input: boxes, names, options */
  CKPT_NOT_FOUND = 2,          /**< no such step, tensor or blob */
  CKPT_DATA_LOSS = 3,          /**< corruption or truncation detected */
  CKPT_UNAVAILABLE = 4,        /**< I/O error that retrying may fix (EIO) */
  CKPT_RESOURCE_EXHAUSTED = 5, /**< e.g. the disk is full */
  CKPT_ABORTED = 6,            /**< the step was aborted (a rank failed) */
  CKPT_DEADLINE_EXCEEDED = 7,
  CKPT_FAILED_PRECONDITION = 8, /**< e.g. the step is already committed */
  CKPT_INTERNAL = 9
};

/** Element types (the values of ckpt::DType). */
enum {
  CKPT_F64 = 1,
  CKPT_F32 = 2,
  CKPT_F16 = 3,
  CKPT_BF16 = 4,
  CKPT_F8E4M3 = 5,
  CKPT_F8E5M2 = 6,
  CKPT_I64 = 7,
  CKPT_I32 = 8,
  CKPT_I16 = 9,
  CKPT_I8 = 10,
  CKPT_U8 = 11,
  CKPT_BOOL = 12
};

/** Codecs. */
enum { CKPT_CODEC_NONE = 0, CKPT_CODEC_ZSTD = 1, CKPT_CODEC_SHUFFLE_ZSTD = 2, CKPT_CODEC_AUTO = 3 };

/** ckpt_load's step for the latest committed one. */
#define CKPT_LATEST (-1)

typedef struct ckpt_checkpointer ckpt_checkpointer;
typedef struct ckpt_state ckpt_state;
typedef struct ckpt_save ckpt_save;

typedef struct ckpt_options {
  const char* uri;         /**< root: a path or a storage URI (required) */
  int rank;                /**< default 0 */
  int world_size;          /**< default 1 */
  int codec;               /**< CKPT_CODEC_*, default none */
  int zstd_level;          /**< default 1 */
  size_t staging_bytes;    /**< staging arena budget, default 256 MiB */
  int keep_last;           /**< retention: keep the newest k steps; 0 keeps all */
  double commit_timeout_s; /**< how long the leader waits for every rank, default 600 */
} ckpt_options;

CKPT_C_EXPORT int ckpt_api_version(void);
/** The message of the last failed call on this thread ("" if none). */
CKPT_C_EXPORT const char* ckpt_last_error(void);

/** Levels of the library's messages (ckpt::LogLevel). */
enum { CKPT_LOG_DEBUG = 0, CKPT_LOG_INFO = 1, CKPT_LOG_WARNING = 2, CKPT_LOG_ERROR = 3 };
/** Receives one message of the library: `component` is "" or names a part
 * ("coordinator", "peer", "s3", "storage"); `message` has no newline. Both
 * strings live only for the call. Called from any thread, possibly from
 * several at once; it must not call into ckpt. */
typedef void (*ckpt_log_fn)(void* user, int level, const char* component, const char* message);
/** Sends the library's messages (what it does on its own, saves that failed
 * in the background) to `fn` instead of stderr, for the whole process; NULL
 * restores stderr. */
CKPT_C_EXPORT void ckpt_set_log_sink(ckpt_log_fn fn, void* user);

CKPT_C_EXPORT void ckpt_options_init(ckpt_options* options);
CKPT_C_EXPORT int ckpt_open(const ckpt_options* options, ckpt_checkpointer** out);
/** Waits for the saves in flight, then frees. NULL is ignored. */
CKPT_C_EXPORT void ckpt_close(ckpt_checkpointer* cp);
/** Delta saves from the next save on (ckpt::DeltaOptions): each chunk is
 * saved as its differences from its last whole save for up to `chain` saves,
 * while that pays; `rebase_ratio` (0.9 when <= 0) is the share of the whole
 * save's bytes past which a delta is replaced by a new whole save. chain 0
 * turns deltas off. */
CKPT_C_EXPORT int ckpt_set_delta(ckpt_checkpointer* cp, int chain, double rebase_ratio);

CKPT_C_EXPORT int ckpt_state_new(ckpt_state** out);
CKPT_C_EXPORT void ckpt_state_free(ckpt_state* state);
/** A shard of a tensor: its global shape, the box this rank holds (offsets
 * and sizes per dimension) and the box's packed row-major data, which must
 * stay valid while a save copies it or a load fills it. The name is copied. */
CKPT_C_EXPORT int ckpt_state_add_shard(ckpt_state* state, const char* name, int dtype, int ndim,
                                       const int64_t* global_shape, const int64_t* offsets, const int64_t* sizes,
                                       void* data);
/** How one mesh dimension lays a tensor out. */
typedef struct ckpt_placement {
  int shard;           /**< 0: replicated over the mesh dimension; 1: split along tensor dimension `dim` */
  int dim;             /**< the tensor dimension it splits */
  const int64_t* cuts; /**< NULL: torch.chunk-style even parts; else mesh size + 1 bounds from 0 to the extent */
} ckpt_placement;

/** A tensor declared by its layout over the state's mesh (as
 * ckpt::TensorLayout). Set every field with ckpt_layout_init first. */
typedef struct ckpt_layout {
  const char* name;
  int dtype;
  int ndim;
  const int64_t* shape;             /**< the global shape, ndim values */
  int n_placements;                 /**< up to the mesh's dimensions; the rest replicate */
  const ckpt_placement* placements; /**< one per mesh dimension, in mesh order */
  int n_split_order;                /**< 0: mesh order */
  const int* split_order;           /**< mesh dimensions in the order they split one tensor dimension */
  int owner_dim;                    /**< -1 (default): every rank; else only ranks at owner_index on it */
  int64_t owner_index;
} ckpt_layout;

CKPT_C_EXPORT void ckpt_layout_init(ckpt_layout* layout);
/** The mesh the state's layouts are over (`ndim` dimensions: names and
 * sizes, row-major rank order) and this rank's place in it; once, before the
 * first ckpt_state_add_layout. */
CKPT_C_EXPORT int ckpt_state_set_mesh(ckpt_state* state, int ndim, const char* const* names, const int64_t* sizes,
                                      int64_t rank);
/** The box this rank holds of `layout` (offsets and sizes, ndim values
 * each), to size its buffer; *held is 0 when it holds none. Declares nothing. */
CKPT_C_EXPORT int ckpt_state_layout_box(const ckpt_state* state, const ckpt_layout* layout, int64_t* offsets,
                                        int64_t* sizes, int* held);
/** Declares a tensor by its layout and adds the box this rank holds, packed
 * row-major at `data` (NULL where it holds none). Every rank declares every
 * tensor of the model, in the same order; a state whose tensors are all
 * declared so is saved without any rank sending its chunk list
 * (docs/resharding.md). */
CKPT_C_EXPORT int ckpt_state_add_layout(ckpt_state* state, const ckpt_layout* layout, void* data);

/** A blob to save; `global` nonzero: one for the job, else one per rank. */
CKPT_C_EXPORT int ckpt_state_add_blob(ckpt_state* state, const char* name, const void* data, size_t size, int global);
/** A blob to load into `buffer` (capacity bytes); *size receives its length.
 * A blob longer than the buffer fails the load with CKPT_INVALID_ARGUMENT. */
CKPT_C_EXPORT int ckpt_state_add_blob_out(ckpt_state* state, const char* name, void* buffer, size_t capacity,
                                          size_t* size, int global);

/** Starts an asynchronous save: returns once the shards are copied. */
CKPT_C_EXPORT int ckpt_save_start(ckpt_checkpointer* cp, int64_t step, const ckpt_state* state, ckpt_save** out);

/** What ckpt::SaveOptions holds, for ckpt_save_start_with. Set every field
 * with ckpt_save_options_init first. */
typedef struct ckpt_save_options {
  /** Key/value pairs recorded in the manifest: metadata_count of each. */
  const char* const* metadata_keys;
  const char* const* metadata_values;
  size_t metadata_count;
  /** Save a step at or below the latest committed one (refused otherwise). */
  int allow_older_step;
  /** The save's identity, the same nonzero value on every rank and unique
   * per attempt, for ranks without a communicator (0: chosen by the save).
   * A rank whose step is claimed by another save fails with CKPT_ABORTED. */
  uint64_t save_id;
} ckpt_save_options;

CKPT_C_EXPORT void ckpt_save_options_init(ckpt_save_options* options);
/** ckpt_save_start with options (NULL: the defaults). */
CKPT_C_EXPORT int ckpt_save_start_with(ckpt_checkpointer* cp, int64_t step, const ckpt_state* state,
                                       const ckpt_save_options* options, ckpt_save** out);
/** The save id of a started save (its CLAIM). */
CKPT_C_EXPORT int ckpt_save_id(ckpt_save* save, uint64_t* id);
/** *done = 1 once the save finished; then returns its outcome. */
CKPT_C_EXPORT int ckpt_save_poll(ckpt_save* save, int* done);
/** Blocks until the step is committed (CKPT_OK) or failed. */
CKPT_C_EXPORT int ckpt_save_wait(ckpt_save* save);
/** Stall and total seconds of a finished save (either may be NULL). */
CKPT_C_EXPORT int ckpt_save_times(ckpt_save* save, double* stall_s, double* commit_s);
CKPT_C_EXPORT void ckpt_save_free(ckpt_save* save);

/** Fills the state's shards and blob buffers from `step` (CKPT_LATEST: the
 * newest committed); the saved cut may differ from the state's. */
CKPT_C_EXPORT int ckpt_load(ckpt_checkpointer* cp, int64_t step, ckpt_state* state);
CKPT_C_EXPORT int ckpt_latest_step(ckpt_checkpointer* cp, int64_t* step);

/* ------------------------------------------------------------------------
 * The memory level (since version 2; docs/levels.md): checkpoints held in
 * the host memory of the job's processes, each rank's files copied to
 * other failure domains whole or as erasure-coded pieces. */

typedef struct ckpt_peer_memory ckpt_peer_memory;

/** Starts this process's peer memory (ckpt::PeerMemory): its store and the
 * TCP server through which peers place and read copies. `token`: the job's
 * secret, at least 16 bytes (required); `domain`: its failure domain (NULL:
 * the host name); `listen`: HOST:PORT (NULL: 127.0.0.1:0); `budget_bytes`:
 * the most it holds (0: 4 GiB). */
CKPT_C_EXPORT int ckpt_peer_memory_start(const char* token, const char* domain, const char* listen,
                                         int64_t budget_bytes, ckpt_peer_memory** out);
/** HOST:PORT its peers reach it at; valid while `memory` lives. */
CKPT_C_EXPORT const char* ckpt_peer_memory_endpoint(const ckpt_peer_memory* memory);
/** Stops serving and forgets what it holds once no checkpointer opened with
 * it is open any more. NULL is ignored. */
CKPT_C_EXPORT void ckpt_peer_memory_free(ckpt_peer_memory* memory);

/** Where this rank's memory-level files go and where a save's are found
 * (ckpt::PeerRoute). Set it with ckpt_memory_route_init first. */
typedef struct ckpt_memory_route {
  size_t struct_size; /**< sizeof(ckpt_memory_route), set by ckpt_memory_route_init */
  /** This rank's holders: whole copies go to each; with erasure coding, the
   * holders of pieces 1 to k + m - 1 in order (piece 0 stays here). */
  const char* const* replicas;
  size_t replica_count;
  /** Where rank o's files of a save are: the holder_counts[o] endpoints
   * that follow those of ranks 0 .. o-1 in `holders`; owner_count ranks. */
  const char* const* holders;
  const size_t* holder_counts;
  size_t owner_count;
  /** Every process of the job, for listings (0: this memory's alone). */
  const char* const* peers;
  size_t peer_count;
  /** Erasure coding: erasure_k data and erasure_m parity pieces (0: whole
   * copies). */
  int erasure_k;
  int erasure_m;
} ckpt_memory_route;

CKPT_C_EXPORT void ckpt_memory_route_init(ckpt_memory_route* route);
/** ckpt_open with the memory level: saves at CKPT_LEVEL_MEMORY go to
 * `memory` and the route's holders. */
CKPT_C_EXPORT int ckpt_open_with_memory(const ckpt_options* options, ckpt_peer_memory* memory,
                                        const ckpt_memory_route* route, ckpt_checkpointer** out);

/** Levels of a save or a load. */
enum { CKPT_LEVEL_DURABLE = 0, CKPT_LEVEL_MEMORY = 1 };

/** ckpt_save_start_with at a level. */
CKPT_C_EXPORT int ckpt_save_start_at(ckpt_checkpointer* cp, int64_t step, const ckpt_state* state,
                                     const ckpt_save_options* options, int level, ckpt_save** out);

/** What a load read and where from (ckpt::LoadStats). Set it with
 * ckpt_load_stats_init first: a later version fills only the fields a
 * caller's struct_size holds. */
typedef struct ckpt_load_stats {
  size_t struct_size; /**< sizeof(ckpt_load_stats), set by ckpt_load_stats_init */
  int64_t step;
  int level; /**< CKPT_LEVEL_* it was read from */
  double seconds;
  int64_t bytes_read;         /**< stored bytes read */
  int64_t bytes_from_memory;  /**< from this process's memory */
  int64_t bytes_from_peers;   /**< from other processes' memory */
  int64_t bytes_from_storage; /**< from the checkpoint root */
  /** An erasure-coded memory level: bytes rebuilt from parity pieces, and
   * the data pieces that were missing or damaged, for each file read. */
  int64_t bytes_rebuilt_from_parity;
  int64_t memory_pieces_lost;
} ckpt_load_stats;

CKPT_C_EXPORT void ckpt_load_stats_init(ckpt_load_stats* stats);
/** ckpt_load from a level; `stats` may be NULL. */
CKPT_C_EXPORT int ckpt_load_at(ckpt_checkpointer* cp, int64_t step, ckpt_state* state, int level,
                               ckpt_load_stats* stats);

#ifdef __cplusplus
}
#endif

#endif /* CKPT_CKPT_H_ */
