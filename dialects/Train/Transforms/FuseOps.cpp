#include "dialects/Train/Transforms/Passes.h"
namespace mt::train {
#define GEN_PASS_DEF_FUSEOPSPASS
#include "dialects/Train/Transforms/Passes.h.inc"
}
namespace {
struct FuseOps : public mt::train::impl::FuseOpsPassBase<FuseOps> {
  void runOnOperation() override {}
};
}
