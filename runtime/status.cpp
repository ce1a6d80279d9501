// Status has no out-of-line members yet; this file anchors the library.
#include "runtime/status.h"
