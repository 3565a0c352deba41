/* A plain C program (no C++) against the C API: save a tensor and blobs
 * asynchronously, load them back cut differently, and check the errors.
 *
 *   capi_roundtrip DIR      exit 0 when every check passes
 */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "ckpt/ckpt.h"
/* The two C headers of the project can be used together. */
#include "ckpt/plugin_abi.h"

static int failures = 0;

/* What the library said through the log sink. */
static char said[8192];
static int said_warnings = 0;

static void Collect(void* user, int level, const char* component, const char* message) {
  (void)user;
  if (level >= CKPT_LOG_WARNING) ++said_warnings;
  if (strlen(said) + strlen(component) + strlen(message) + 4 < sizeof(said)) {
    strcat(said, component);
    strcat(said, ": ");
    strcat(said, message);
    strcat(said, "\n");
  }
}

#define CHECK(cond, ...)                                         \
  do {                                                           \
    if (!(cond)) {                                               \
      fprintf(stderr, "%s:%d: ", __FILE__, __LINE__);            \
      fprintf(stderr, __VA_ARGS__);                              \
      fprintf(stderr, " (last error: %s)\n", ckpt_last_error()); \
      ++failures;                                                \
    }                                                            \
  } while (0)

int main(int argc, char** argv) {
  if (argc < 2) {
    fprintf(stderr, "usage: capi_roundtrip DIR\n");
    return 2;
  }
  CHECK(ckpt_api_version() == CKPT_API_VERSION, "api version %d", ckpt_api_version());
  CHECK(CKPT_NOT_FOUND == 2 && CKPT_PLUGIN_ERR_NOT_FOUND == 1, "error codes of the two headers mixed up");

  enum { ROWS = 300, COLS = 70 };
  const int64_t shape[2] = {ROWS, COLS};
  float* w = malloc(sizeof(float) * ROWS * COLS);
  for (int i = 0; i < ROWS * COLS; ++i) w[i] = (float)i * 0.5f - 3.0f;
  const char rng[] = "rng-state-bytes";

  ckpt_options o;
  ckpt_options_init(&o);
  o.uri = argv[1];
  o.codec = CKPT_CODEC_ZSTD;
  o.keep_last = 2;
  ckpt_checkpointer* cp = NULL;
  ckpt_set_log_sink(Collect, NULL);
  CHECK(ckpt_open(&o, &cp) == CKPT_OK, "open");
  if (cp == NULL) return 1;

  ckpt_state* st = NULL;
  CHECK(ckpt_state_new(&st) == CKPT_OK, "state");
  const int64_t zero[2] = {0, 0};
  CHECK(ckpt_state_add_shard(st, "model.w", CKPT_F32, 2, shape, zero, shape, w) == CKPT_OK, "add shard");
  CHECK(ckpt_state_add_blob(st, "rng", rng, sizeof(rng), 0) == CKPT_OK, "add blob");
  for (int64_t step = 1; step <= 3; ++step) {
    ckpt_save* s = NULL;
    CHECK(ckpt_save_start(cp, step, st, &s) == CKPT_OK, "save %lld", (long long)step);
    if (s == NULL) continue;
    int done = 0;
    CHECK(ckpt_save_poll(s, &done) == CKPT_OK || done, "poll");
    CHECK(ckpt_save_wait(s) == CKPT_OK, "wait %lld", (long long)step);
    double stall = -1, commit = -1;
    CHECK(ckpt_save_times(s, &stall, &commit) == CKPT_OK && stall >= 0 && commit >= stall, "times");
    CHECK(ckpt_save_poll(s, &done) == CKPT_OK && done == 1, "poll after wait");
    ckpt_save_free(s);
  }
  int64_t latest = 0;
  CHECK(ckpt_latest_step(cp, &latest) == CKPT_OK && latest == 3, "latest %lld", (long long)latest);
  /* Retention (keep_last 2) removed step 1 after step 3 committed, and said
   * so through the sink, not on stderr. */
  CHECK(strstr(said, ": removed committed step 1: past retention") != NULL, "the sink got: %s", said);
  CHECK(said_warnings == 0, "warnings: %s", said);

  /* Saving a committed step again is refused. */
  ckpt_save* again = NULL;
  int rc = ckpt_save_start(cp, 3, st, &again);
  if (rc == CKPT_OK) {
    rc = ckpt_save_wait(again);
    ckpt_save_free(again);
  }
  CHECK(rc == CKPT_FAILED_PRECONDITION || rc == CKPT_INVALID_ARGUMENT, "re-saving step 3 gave %d", rc);
  CHECK(strlen(ckpt_last_error()) > 0, "no message");

  /* Load into two row halves, and the blob into a buffer. */
  float* top = calloc(ROWS / 2 * COLS, sizeof(float));
  float* bottom = calloc(ROWS / 2 * COLS, sizeof(float));
  char blob[64];
  size_t blob_size = 0;
  ckpt_state* target = NULL;
  CHECK(ckpt_state_new(&target) == CKPT_OK, "target");
  const int64_t half[2] = {ROWS / 2, COLS};
  const int64_t second[2] = {ROWS / 2, 0};
  CHECK(ckpt_state_add_shard(target, "model.w", CKPT_F32, 2, shape, zero, half, top) == CKPT_OK, "top");
  CHECK(ckpt_state_add_shard(target, "model.w", CKPT_F32, 2, shape, second, half, bottom) == CKPT_OK, "bottom");
  CHECK(ckpt_state_add_blob_out(target, "rng", blob, sizeof(blob), &blob_size, 0) == CKPT_OK, "blob out");
  CHECK(ckpt_load(cp, CKPT_LATEST, target) == CKPT_OK, "load");
  CHECK(memcmp(top, w, sizeof(float) * ROWS / 2 * COLS) == 0, "top half differs");
  CHECK(memcmp(bottom, w + ROWS / 2 * COLS, sizeof(float) * ROWS / 2 * COLS) == 0, "bottom half differs");
  CHECK(blob_size == sizeof(rng) && memcmp(blob, rng, sizeof(rng)) == 0, "blob differs");

  /* Errors: a missing step, a bad box, a null argument. */
  CHECK(ckpt_load(cp, 99, target) == CKPT_NOT_FOUND, "missing step");
  CHECK(strstr(ckpt_last_error(), "99") != NULL, "message does not name the step: %s", ckpt_last_error());
  const int64_t too_big[2] = {ROWS + 1, COLS};
  CHECK(ckpt_state_add_shard(target, "other", CKPT_F32, 2, shape, zero, too_big, top) == CKPT_INVALID_ARGUMENT,
        "a box outside the shape");
  CHECK(ckpt_open(NULL, &cp) == CKPT_INVALID_ARGUMENT, "null options");

  /* Save options: an older step only when asked for, and then kept; the
   * save id is the step's CLAIM. */
  ckpt_save_options so;
  ckpt_save_options_init(&so);
  ckpt_save* older = NULL;
  CHECK(ckpt_save_start_with(cp, 0, st, &so, &older) == CKPT_FAILED_PRECONDITION, "an older step was not refused");
  CHECK(strstr(ckpt_last_error(), "allow_older_step") != NULL, "message: %s", ckpt_last_error());
  const char* keys[1] = {"run"};
  const char* values[1] = {"capi"};
  so.metadata_keys = keys;
  so.metadata_values = values;
  so.metadata_count = 1;
  so.allow_older_step = 1;
  so.save_id = 0x5eed;
  older = NULL;
  CHECK(ckpt_save_start_with(cp, 0, st, &so, &older) == CKPT_OK, "save an older step when asked");
  if (older != NULL) {
    CHECK(ckpt_save_wait(older) == CKPT_OK, "older save");
    uint64_t id = 0;
    CHECK(ckpt_save_id(older, &id) == CKPT_OK && id == 0x5eed, "save id %llx", (unsigned long long)id);
    ckpt_save_free(older);
  }
  if (strstr(argv[1], "://") == NULL) { /* a directory: the claim is a file to read */
    char claim_path[4096];
    snprintf(claim_path, sizeof(claim_path), "%s/step-0000000000/CLAIM", argv[1]);
    FILE* claim = fopen(claim_path, "r");
    char claim_text[512] = {0};
    if (claim != NULL) {
      size_t n = fread(claim_text, 1, sizeof(claim_text) - 1, claim);
      claim_text[n] = 0;
      fclose(claim);
    }
    CHECK(strstr(claim_text, "save 0x0000000000005eed") != NULL, "CLAIM: %s", claim_text);
  }
  so.metadata_keys = NULL;
  CHECK(ckpt_save_start_with(cp, 9, st, &so, &older) == CKPT_INVALID_ARGUMENT, "metadata_count without keys");

  /* Layouts: two ranks of a mesh tp=2 in this process declare "emb" split
   * in rows at explicit cuts and a replicated "bias"; each learns its box
   * from the layout, and the replicated bias is written once. */
  {
    char root2[4096];
    const char* query = strchr(argv[1], '?'); /* a URI's options stay at its end */
    const int stem = query != NULL ? (int)(query - argv[1]) : (int)strlen(argv[1]);
    snprintf(root2, sizeof(root2), "%.*s-layouts%s", stem, argv[1], query != NULL ? query : "");
    const char* names[1] = {"tp"};
    const int64_t mesh_sizes[1] = {2};
    const int64_t emb_shape[2] = {8, 4}, bias_shape[1] = {4};
    const int64_t cuts[3] = {0, 3, 8};
    ckpt_placement rows = {1, 0, cuts};
    ckpt_placement replicated = {0, 0, NULL};
    ckpt_layout emb, bias;
    ckpt_layout_init(&emb);
    emb.name = "emb";
    emb.dtype = CKPT_F32;
    emb.ndim = 2;
    emb.shape = emb_shape;
    emb.n_placements = 1;
    emb.placements = &rows;
    ckpt_layout_init(&bias);
    bias.name = "bias";
    bias.dtype = CKPT_F32;
    bias.ndim = 1;
    bias.shape = bias_shape;
    bias.n_placements = 1;
    bias.placements = &replicated;
    CHECK(bias.owner_dim == -1, "ckpt_layout_init: owner_dim %d", bias.owner_dim);

    ckpt_checkpointer* ranks[2] = {NULL, NULL};
    ckpt_state* states[2] = {NULL, NULL};
    float emb_data[2][32], bias_data[4] = {1, 2, 3, 4};
    for (int r = 0; r < 2; ++r) {
      ckpt_options ro;
      ckpt_options_init(&ro);
      ro.uri = root2;
      ro.rank = r;
      ro.world_size = 2;
      CHECK(ckpt_open(&ro, &ranks[r]) == CKPT_OK, "open rank %d", r);
      CHECK(ckpt_state_new(&states[r]) == CKPT_OK, "state %d", r);
      if (r == 0) {
        CHECK(ckpt_state_add_layout(states[r], &emb, emb_data[r]) == CKPT_FAILED_PRECONDITION,
              "a layout before the mesh");
      }
      CHECK(ckpt_state_set_mesh(states[r], 1, names, mesh_sizes, r) == CKPT_OK, "mesh %d", r);
      int64_t off[2] = {-1, -1}, size[2] = {-1, -1};
      int held = 0;
      CHECK(ckpt_state_layout_box(states[r], &emb, off, size, &held) == CKPT_OK && held == 1, "box %d", r);
      CHECK(off[0] == cuts[r] && size[0] == cuts[r + 1] - cuts[r] && off[1] == 0 && size[1] == 4,
            "rank %d's box [%lld +%lld]", r, (long long)off[0], (long long)size[0]);
      for (int i = 0; i < size[0] * 4; ++i) emb_data[r][i] = (float)(off[0] * 4 + i);
      CHECK(ckpt_state_add_layout(states[r], &emb, emb_data[r]) == CKPT_OK, "emb %d", r);
      CHECK(ckpt_state_add_layout(states[r], &bias, bias_data) == CKPT_OK, "bias %d", r);
      CHECK(ckpt_state_add_layout(states[r], &bias, bias_data) == CKPT_INVALID_ARGUMENT, "bias twice");
    }
    ckpt_save_options lo;
    ckpt_save_options_init(&lo);
    lo.save_id = 0x1a70;
    ckpt_save* saves[2] = {NULL, NULL};
    for (int r = 0; r < 2; ++r) {
      CHECK(ckpt_save_start_with(ranks[r], 1, states[r], &lo, &saves[r]) == CKPT_OK, "layout save %d", r);
    }
    for (int r = 0; r < 2; ++r) {
      if (saves[r] == NULL) continue;
      CHECK(ckpt_save_wait(saves[r]) == CKPT_OK, "layout save %d", r);
      ckpt_save_free(saves[r]);
    }
    float all[32] = {0}, bias_back[4] = {0};
    ckpt_state* whole = NULL;
    CHECK(ckpt_state_new(&whole) == CKPT_OK, "whole");
    CHECK(ckpt_state_add_shard(whole, "emb", CKPT_F32, 2, emb_shape, zero, emb_shape, all) == CKPT_OK, "emb target");
    const int64_t bias_zero[1] = {0};
    CHECK(ckpt_state_add_shard(whole, "bias", CKPT_F32, 1, bias_shape, bias_zero, bias_shape, bias_back) == CKPT_OK,
          "bias target");
    CHECK(ckpt_load(ranks[0], CKPT_LATEST, whole) == CKPT_OK, "layout load");
    for (int i = 0; i < 32; ++i) CHECK(all[i] == (float)i, "emb[%d] = %g", i, all[i]);
    CHECK(memcmp(bias_back, bias_data, sizeof(bias_data)) == 0, "bias differs");
    ckpt_state_free(whole);
    for (int r = 0; r < 2; ++r) {
      ckpt_state_free(states[r]);
      ckpt_close(ranks[r]);
    }
  }

  /* A storage outage (faulty:// beside a local root): saves fail with
   * CKPT_UNAVAILABLE while it lasts, and the same checkpointer commits the
   * next one once the storage is back. */
  if (strstr(argv[1], "://") == NULL) {
    char down[4096], uri[8300];
    snprintf(down, sizeof(down), "%s-down", argv[1]);
    snprintf(uri, sizeof(uri), "faulty://%s-outage?fault.outage_file=%s", argv[1], down);
    ckpt_options fo;
    ckpt_options_init(&fo);
    fo.uri = uri;
    ckpt_checkpointer* flaky = NULL;
    CHECK(ckpt_open(&fo, &flaky) == CKPT_OK, "open %s", uri);
    for (int64_t step = 1; flaky != NULL && step <= 3; ++step) {
      FILE* f = step == 2 ? fopen(down, "w") : NULL;
      if (f != NULL) fclose(f);
      ckpt_save* s = NULL;
      rc = ckpt_save_start(flaky, step, st, &s);
      if (rc == CKPT_OK) {
        rc = ckpt_save_wait(s);
        ckpt_save_free(s);
      }
      if (step == 2) {
        CHECK(rc == CKPT_UNAVAILABLE, "a save during the outage gave %d", rc);
        CHECK(strstr(ckpt_last_error(), "the storage is down") != NULL, "its message");
        remove(down);
      } else {
        CHECK(rc == CKPT_OK, "save %lld around the outage", (long long)step);
      }
    }
    int64_t last = 0;
    CHECK(flaky != NULL && ckpt_latest_step(flaky, &last) == CKPT_OK && last == 3, "latest after the outage");
    ckpt_close(flaky);
  }

  /* Delta saves: steps 10 to 12 as differences from step 10, one value
   * changed at each; step 11 loads exactly (its delta rebuilt from 10). */
  CHECK(ckpt_set_delta(cp, -1, 0) == CKPT_INVALID_ARGUMENT, "a negative chain was accepted");
  CHECK(ckpt_set_delta(cp, 4, 0) == CKPT_OK, "set delta: %s", ckpt_last_error());
  float at11 = 0;
  for (int64_t step = 10; step <= 12; ++step) {
    w[step] += 1.0f;
    if (step == 11) at11 = w[11];
    ckpt_save* s = NULL;
    CHECK(ckpt_save_start(cp, step, st, &s) == CKPT_OK && ckpt_save_wait(s) == CKPT_OK, "delta save %lld: %s",
          (long long)step, ckpt_last_error());
    ckpt_save_free(s);
  }
  w[12] -= 1.0f; /* back to step 11's values */
  CHECK(ckpt_load(cp, 11, target) == CKPT_OK, "load the delta step: %s", ckpt_last_error());
  CHECK(top[11] == at11, "step 11's changed value");
  CHECK(memcmp(top, w, sizeof(float) * ROWS / 2 * COLS) == 0, "the delta step's top half differs");
  CHECK(memcmp(bottom, w + ROWS / 2 * COLS, sizeof(float) * ROWS / 2 * COLS) == 0, "its bottom half differs");

  /* The memory level, erasure coded RS(4+2) over six peer memories of this
   * process (piece j in memory j): a save at CKPT_LEVEL_MEMORY, then a load
   * through a seventh memory with memories 0 and 1 gone, so that data
   * pieces 0 and 1 are rebuilt from parity; nothing is read from the root. */
  {
    const char* token = "capi-memory-token-0123456789";
    ckpt_peer_memory* mem[7];
    const char* eps[7];
    for (int i = 0; i < 7; ++i) {
      char domain[16];
      snprintf(domain, sizeof domain, "node-%d", i);
      CHECK(ckpt_peer_memory_start(token, domain, NULL, 0, &mem[i]) == CKPT_OK, "peer memory %d: %s", i,
            ckpt_last_error());
      eps[i] = ckpt_peer_memory_endpoint(mem[i]);
    }
    size_t six[1] = {6}, four[1] = {4};
    ckpt_memory_route wr;
    ckpt_memory_route_init(&wr);
    wr.replicas = eps + 1;
    wr.replica_count = 5;
    wr.holders = eps;
    wr.holder_counts = six;
    wr.owner_count = 1;
    wr.erasure_k = 4;
    wr.erasure_m = 2;
    ckpt_options mo;
    ckpt_options_init(&mo);
    mo.uri = argv[1];
    ckpt_checkpointer* mcp = NULL;
    CHECK(ckpt_open_with_memory(&mo, mem[0], &wr, &mcp) == CKPT_OK, "open with memory: %s", ckpt_last_error());
    ckpt_save* s = NULL;
    CHECK(ckpt_save_start_at(mcp, 100, st, NULL, CKPT_LEVEL_MEMORY, &s) == CKPT_OK && ckpt_save_wait(s) == CKPT_OK,
          "memory save: %s", ckpt_last_error());
    ckpt_save_free(s);
    ckpt_close(mcp);
    wr.erasure_k = 4;
    wr.erasure_m = 0;
    CHECK(ckpt_open_with_memory(&mo, mem[0], &wr, &mcp) == CKPT_INVALID_ARGUMENT, "a 4+0 code was taken");
    ckpt_peer_memory_free(mem[0]);
    ckpt_peer_memory_free(mem[1]);
    ckpt_memory_route rd;
    ckpt_memory_route_init(&rd);
    rd.holders = eps + 2;
    rd.holder_counts = four;
    rd.owner_count = 1;
    ckpt_checkpointer* rcp = NULL;
    CHECK(ckpt_open_with_memory(&mo, mem[6], &rd, &rcp) == CKPT_OK, "open the reader: %s", ckpt_last_error());
    memset(top, 0, sizeof(float) * ROWS / 2 * COLS);
    memset(bottom, 0, sizeof(float) * ROWS / 2 * COLS);
    ckpt_load_stats ls;
    ckpt_load_stats_init(&ls);
    CHECK(ckpt_load_at(rcp, 100, target, CKPT_LEVEL_MEMORY, &ls) == CKPT_OK, "memory load: %s", ckpt_last_error());
    CHECK(memcmp(top, w, sizeof(float) * ROWS / 2 * COLS) == 0, "the memory step's top half differs");
    CHECK(memcmp(bottom, w + ROWS / 2 * COLS, sizeof(float) * ROWS / 2 * COLS) == 0, "its bottom half differs");
    CHECK(ls.step == 100 && ls.level == CKPT_LEVEL_MEMORY && ls.bytes_from_storage == 0, "stats: step %lld level %d",
          (long long)ls.step, ls.level);
    CHECK(ls.bytes_from_peers > 0 && ls.bytes_rebuilt_from_parity > 0 && ls.memory_pieces_lost >= 2,
          "stats: %lld from peers, %lld rebuilt, %lld pieces lost", (long long)ls.bytes_from_peers,
          (long long)ls.bytes_rebuilt_from_parity, (long long)ls.memory_pieces_lost);
    ckpt_close(rcp);
    for (int i = 2; i < 7; ++i) ckpt_peer_memory_free(mem[i]);
  }

  ckpt_state_free(target);
  ckpt_state_free(st);
  ckpt_close(cp);
  free(top);
  free(bottom);
  free(w);
  if (failures == 0) printf("capi_roundtrip: all checks passed\n");
  return failures == 0 ? 0 : 1;
}
