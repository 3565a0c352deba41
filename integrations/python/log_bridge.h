// ckpt's messages routed to Python's logging (log_bridge.cc).
#ifndef CKPT_INTEGRATIONS_PYTHON_LOG_BRIDGE_H_
#define CKPT_INTEGRATIONS_PYTHON_LOG_BRIDGE_H_

#include <pybind11/pybind11.h>

void BindLogBridge(pybind11::module_& m);

#endif  // CKPT_INTEGRATIONS_PYTHON_LOG_BRIDGE_H_
