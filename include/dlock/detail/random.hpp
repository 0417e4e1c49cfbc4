// Unguessable identifiers from the operating system's randomness.
#pragma once

#include <cstddef>
#include <string>

namespace dlock::detail {

/// `bytes` bytes from getrandom(2), as 2*bytes lowercase hex digits. Throws
/// std::system_error if the kernel cannot supply them.
std::string random_hex(std::size_t bytes);

/// An id unique among every process's ids with overwhelming probability:
/// 128 random bits drawn once per process, then a counter. For names of
/// short-lived marker keys, where a syscall per id would be waste; never for
/// anything that must be unguessable (owner tokens use random_hex).
std::string unique_id();

/// A number for the calling thread, unique in this process for its whole
/// run (unlike OS thread ids, never reused after a thread exits).
unsigned long long this_thread_number() noexcept;

}  // namespace dlock::detail
