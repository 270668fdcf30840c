// Engine errors. NoDeviceError says the CUDA executor cannot run here (no device, no driver,
// or a build without CUDA); callers that may fall back to the host executor catch it.
#pragma once

#include <stdexcept>
#include <string>

namespace tapdiff::engine {

class EngineError : public std::runtime_error {
public:
  using std::runtime_error::runtime_error;
};

class NoDeviceError : public EngineError {
public:
  using EngineError::EngineError;
};

}  // namespace tapdiff::engine
