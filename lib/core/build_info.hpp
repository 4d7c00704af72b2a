#pragma once
// What this binary is: its release version (CMake's project version) and the
// git revision it was built from ("unknown" when built from a tree that is not
// a git checkout; "-dirty" when tracked files differed from that commit).
// Taken at build time by cmake/GitRevision.cmake.

namespace sandweave {

const char* build_version();
const char* build_revision();

}  // namespace sandweave
