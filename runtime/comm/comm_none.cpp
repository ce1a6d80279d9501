// makeMpiCommunicator of a build without MPI (see comm.h): one process, and
// a launch by mpirun is refused with what to install.
#include "runtime/comm/comm.h"

namespace mt::runtime {

std::unique_ptr<Communicator> makeMpiCommunicator(int &, char **&,
                                                  std::string &why) {
  if (launchedByMpi())
    why = "this mtrun was built without MPI (install libopenmpi-dev and "
          "rebuild: scripts/bootstrap.sh)";
  return nullptr;
}

} // namespace mt::runtime
