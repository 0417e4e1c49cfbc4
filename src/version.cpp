#include <dlock/version.hpp>

namespace dlock {

std::string_view version() noexcept { return DLOCK_VERSION_STRING; }

}  // namespace dlock
