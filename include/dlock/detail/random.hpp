// Unguessable identifiers: owner tokens and client ids from a ChaCha20
// generator per thread, keyed from the operating system's randomness.
#pragma once

#include <array>
#include <cstddef>
#include <cstdint>
#include <string>

namespace dlock::detail {

/// `bytes` unguessable bytes as 2*bytes lowercase hex digits: owner tokens
/// (16 bytes, 128 bits) and client ids. They come from a ChaCha20 stream
/// cipher run as a random generator, one per thread, keyed with 256 bits
/// from getrandom(2) on the thread's first call, and re-keyed from the OS in
/// the child after a fork(), so that a parent and its child never hand out
/// the same tokens. After each refill the generator replaces its key with
/// part of its own output ("fast key erasure"), so the bytes it gave out
/// cannot be recomputed from its state later. Costs no system call but the
/// first. Throws std::system_error if the kernel cannot supply the key.
std::string random_hex(std::size_t bytes);

/// Fills `out` with `n` bytes from getrandom(2) (the OS's randomness,
/// blocking until the kernel's pool is ready). Throws std::system_error.
void os_random(unsigned char* out, std::size_t n);

/// The ChaCha20 block function (RFC 8439 section 2.3): 64 bytes of key
/// stream for `key`, block `counter` and `nonce`. Exposed for its test.
std::array<unsigned char, 64> chacha20_block(const std::array<std::uint32_t, 8>& key, std::uint32_t counter,
                                             const std::array<std::uint32_t, 3>& nonce);

/// An id unique among every process's ids with overwhelming probability:
/// 128 random bits drawn once per process (again in a forked child), then a
/// counter. For names of short-lived marker keys, where fresh randomness
/// per id would be waste; never for anything that must be unguessable
/// (owner tokens use random_hex).
std::string unique_id();

/// A number for the calling thread, unique in this process for its whole
/// run (unlike OS thread ids, never reused after a thread exits).
unsigned long long this_thread_number() noexcept;

}  // namespace dlock::detail
