// The build's absolute paths, compiled here alone: they differ in every clone's folder, and as
// definitions on the test files' command lines they kept ccache from reusing those objects (the
// heaviest of the build) in a fresh clone (cmake/MtCcache.cmake).
#include "test_paths.hpp"

namespace mt::test {

const char* trainer_exe() { return MT_TRAINER_EXE; }
const char* source_dir() { return MT_SOURCE_DIR; }

}  // namespace mt::test
