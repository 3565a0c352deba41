// What the memory level's storage needs of a PeerMemory from
// PeerMemory::Start (peer_server.cc): its store, options and log.
#ifndef CKPT_PEER_PEER_MEMORY_H_
#define CKPT_PEER_PEER_MEMORY_H_

#include <memory>
#include <string>

#include "ckpt/peer.h"
#include "peer/peer_store.h"

namespace ckpt::peer {

/// REQUIRES: `memory` came from PeerMemory::Start.
std::shared_ptr<PeerStore> LocalStore(PeerMemory& memory);
const PeerMemoryOptions& OptionsOf(PeerMemory& memory);
void LogTo(PeerMemory& memory, const std::string& line);

}  // namespace ckpt::peer

#endif  // CKPT_PEER_PEER_MEMORY_H_
