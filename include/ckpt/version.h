#ifndef CKPT_VERSION_H_
#define CKPT_VERSION_H_

#include "ckpt/export.h"

#define CKPT_VERSION_MAJOR 0
#define CKPT_VERSION_MINOR 1
#define CKPT_VERSION_PATCH 0
#define CKPT_VERSION_STRING "0.1.0"

namespace ckpt {
/// Library version string, e.g. "0.1.0".
CKPT_EXPORT const char* LibraryVersion();
}  // namespace ckpt

#endif  // CKPT_VERSION_H_
