#include "dialects/Train/Transforms/Passes.h"
namespace mt::train {
#define GEN_PASS_DEF_OUTLINELAYERSPASS
#include "dialects/Train/Transforms/Passes.h.inc"
}
namespace {
struct OutlineLayers : public mt::train::impl::OutlineLayersPassBase<OutlineLayers> {
  using Base::Base;
  void runOnOperation() override {}
};
}
