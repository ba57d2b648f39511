// The error convention of every extern "C" function of trickbench's shims (shim.cpp and
// distributed.cpp): a function that can throw runs its body through `tb::guarded`, which returns 0,
// or -1 with the exception's message kept for `tb_last_error` on this thread. No exception, of any
// type, unwinds into Rust. The functions that bypass it only read or set flags and counters.
#pragma once

#include <exception>
#include <string>

namespace tb {

// The message of the last failure on this thread, shared by every translation unit.
inline thread_local std::string last_error;

template <typename F>
int guarded(F f) noexcept {
  try {
    f();
    return 0;
  } catch (const std::exception& e) {
    last_error = e.what();
  } catch (...) {
    last_error = "a C++ exception that is not a std::exception";
  }
  return -1;
}

}  // namespace tb
