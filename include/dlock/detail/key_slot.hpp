// Redis Cluster's key-to-slot rule, and companion keys (release and acquire
// markers) that land in the same slot as the lock they belong to, whatever
// braces the lock's name contains.
#pragma once

#include <cstdint>
#include <mutex>
#include <string>
#include <string_view>
#include <unordered_map>

namespace dlock::detail {

/// CRC16-CCITT (XMODEM), the checksum Redis Cluster hashes keys with.
constexpr std::uint16_t crc16(std::string_view bytes) noexcept {
  std::uint16_t crc = 0;
  for (unsigned char c : bytes) {
    crc = static_cast<std::uint16_t>(crc ^ (c << 8));
    for (int i = 0; i < 8; ++i)
      crc = static_cast<std::uint16_t>((crc & 0x8000) ? (crc << 1) ^ 0x1021 : crc << 1);
  }
  return crc;
}

/// The part of `key` that Redis hashes: the text between the first '{' and
/// the first '}' after it, if that is not empty; otherwise the whole key.
constexpr std::string_view hashed_part(std::string_view key) noexcept {
  auto open = key.find('{');
  if (open == std::string_view::npos) return key;
  auto close = key.find('}', open + 1);
  if (close == std::string_view::npos || close == open + 1) return key;
  return key.substr(open + 1, close - open - 1);
}

/// The cluster slot of `key` (0 to 16383), as CLUSTER KEYSLOT computes it.
constexpr std::uint16_t key_slot(std::string_view key) noexcept { return crc16(hashed_part(key)) & 16383; }

/// A hash tag for `slot` made of no braces: "slot-<n>" for the first n
/// whose tag hashes there. Found once per slot (about 16384 checksums of a
/// few bytes at worst), then remembered.
inline std::string tag_for_slot(std::uint16_t slot) {
  static std::mutex m;
  static std::unordered_map<std::uint16_t, std::string> found;
  std::lock_guard g(m);
  auto& tag = found[slot];
  for (unsigned n = 0; tag.empty(); ++n) {
    auto candidate = "slot-" + std::to_string(n);
    if (key_slot(candidate) == slot) tag = std::move(candidate);
  }
  return tag;
}

/// A key in the same cluster slot as `name`, ending in ":<suffix>":
/// - a name with a hash tag keeps it: "<name>:<suffix>";
/// - a name without braces that close becomes the tag: "{<name>}:<suffix>";
/// - a name that cannot be a tag (it holds a '}' that does not close a tag,
///   as in "a}b" or "{}x") gets a brace-free tag that hashes to its slot.
inline std::string same_slot_key(std::string_view name, std::string_view suffix) {
  std::string key;
  if (hashed_part(name).size() != name.size()) {
    key.append(name);
  } else if (name.find('}') == std::string_view::npos) {
    key.append("{").append(name).append("}");
  } else {
    key.append("{").append(tag_for_slot(key_slot(name))).append("}");
  }
  return key.append(":").append(suffix);
}

}  // namespace dlock::detail
