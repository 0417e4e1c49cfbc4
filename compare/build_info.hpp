// What dlock-compare was built from, for its JSON's environment.
#pragma once

namespace dlock::compare {

/// The commit the program was built from (`git rev-parse --short=12 HEAD`
/// when it was built), or "unknown" outside a git checkout.
const char* git_commit();

}  // namespace dlock::compare
