// Loading storage plugins (shared objects speaking include/ckpt/plugin_abi.h)
// and opening storage through them.
#ifndef CKPT_STORAGE_PLUGIN_STORAGE_H_
#define CKPT_STORAGE_PLUGIN_STORAGE_H_

#include <memory>
#include <string>
#include <string_view>
#include <vector>

#include "absl/status/statusor.h"
#include "ckpt/storage.h"

namespace ckpt {

/// Opens `uri` with a plugin that loaded without error. The "io_threads"
/// query parameter (default 4) sizes the host threads that run the plugin's
/// blocking calls; the whole URI is passed to the plugin.
absl::StatusOr<std::shared_ptr<Storage>> OpenPluginStorage(const PluginInfo& plugin, std::string_view uri);

}  // namespace ckpt

#endif  // CKPT_STORAGE_PLUGIN_STORAGE_H_
