// Where the tests find the trainer and the source tree (tests/test_paths.cpp).
#pragma once

namespace mt::test {

// The mpi_trainer executable of this build.
const char* trainer_exe();
// The source root (golden files under tests/golden).
const char* source_dir();

}  // namespace mt::test
