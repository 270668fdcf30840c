// The source revision this build was made from (written at build time by
// cmake/GitCommit.cmake): the short commit hash, "-dirty" with local changes, or "unknown".
#pragma once

namespace tapdiff {

const char* git_commit();

}  // namespace tapdiff
