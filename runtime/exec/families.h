// How a backend reaches the entry point of each family of kernels: one per
// description of the kernel table (kernel_table.h's Describe), which runs
// that family's kernels from the op's description. Both backends name their
// entry points alike, so this one switch serves both; it has no default, so
// a new description is a compiler warning until every backend has an entry
// point for it.
#ifndef MT_RUNTIME_EXEC_FAMILIES_H
#define MT_RUNTIME_EXEC_FAMILIES_H

#include "runtime/plan/kernel_table.h"

namespace mt::runtime {

/// Backend B's entry point for `describe`, a pointer to a member of type
/// B::Family; null for Buffers (copies, fills and host ops, which the
/// backends run before they look for a description).
template <typename B> typename B::Family familyOf(Describe describe) {
  switch (describe) {
  case Describe::Embedding:
    return &B::embedding;
  case Describe::Linear:
    return &B::linear;
  case Describe::ExpertLinear:
    return &B::expertLinear;
  case Describe::Norm:
    return &B::norm;
  case Describe::Rotary:
    return &B::rotary;
  case Describe::Attention:
    return &B::attention;
  case Describe::Elementwise:
    return &B::elementwise;
  case Describe::Unary:
    return &B::unary;
  case Describe::CrossEntropy:
    return &B::crossEntropy;
  case Describe::Head:
    return &B::head;
  case Describe::Mlp:
    return &B::mlp;
  case Describe::Binary:
    return &B::binary;
  case Describe::Compare:
    return &B::compare;
  case Describe::Logic:
    return &B::logic;
  case Describe::Matmul:
    return &B::matmul;
  case Describe::Lines:
    return &B::lines;
  case Describe::Expand:
    return &B::expand;
  case Describe::IsNaN:
    return &B::isNaN;
  case Describe::Where:
    return &B::where;
  case Describe::Slice:
    return &B::slice;
  case Describe::Pad:
    return &B::pad;
  case Describe::Trilu:
    return &B::trilu;
  case Describe::Tile:
    return &B::tile;
  case Describe::GatherND:
    return &B::gatherND;
  case Describe::TopK:
    return &B::topK;
  case Describe::Gather:
    return &B::gather;
  case Describe::Elements:
    return &B::elements;
  case Describe::Layout:
    return &B::layout;
  case Describe::Buffers:
    return nullptr;
  }
  return nullptr;
}

} // namespace mt::runtime

#endif // MT_RUNTIME_EXEC_FAMILIES_H
