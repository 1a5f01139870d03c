// ps/ulfm: the parts that need no MPI_Init (the unit tests run without MPI). In this build
// without ULFM every answer is the no-op one; the configure-time probe decides which build it is.
#include <catch2/catch.hpp>

#include "ps/ulfm.hpp"

using namespace mt;

TEST_CASE("ulfm: success and ordinary MPI errors are not process failures", "[ulfm]") {
  CHECK_FALSE(ulfm_is_proc_failed(MPI_SUCCESS));
  CHECK_FALSE(ulfm_is_proc_failed(MPI_ERR_OTHER));
  CHECK_FALSE(ulfm_is_proc_failed(MPI_ERR_COMM));
}

TEST_CASE("ulfm: without ULFM, unavailable and no failed ranks", "[ulfm]") {
  if (ulfm_available()) {
    SUCCEED("built with ULFM: covered by the MPI launches, not here");
    return;
  }
  CHECK_FALSE(ulfm_available());
  CHECK_FALSE(ulfm_is_proc_failed(MPI_ERR_OTHER));
  // Without ULFM no MPI call is made, so MPI need not be initialised.
  CHECK(ulfm_failed_ranks(MPI_COMM_WORLD).empty());
}
