//===- TrainDialect.cpp - the `train` dialect -----------------------------===//
#include "dialects/Train/IR/TrainDialect.h"
#include "dialects/Train/IR/Gradient.h"
#include "dialects/Train/IR/TrainOps.h"

#include "mlir/IR/Builders.h"
#include "mlir/IR/DialectImplementation.h"
#include "llvm/ADT/TypeSwitch.h"

using namespace mlir;
using namespace mt::train;

#include "dialects/Train/IR/TrainDialect.cpp.inc"
#include "dialects/Train/IR/TrainEnums.cpp.inc"
#define GET_ATTRDEF_CLASSES
#include "dialects/Train/IR/TrainAttrs.cpp.inc"
#define GET_TYPEDEF_CLASSES
#include "dialects/Train/IR/TrainTypes.cpp.inc"

void TrainDialect::initialize() {
  addOperations<
#define GET_OP_LIST
#include "dialects/Train/IR/TrainOps.cpp.inc"
      >();
  addTypes<
#define GET_TYPEDEF_LIST
#include "dialects/Train/IR/TrainTypes.cpp.inc"
      >();
  addAttributes<
#define GET_ATTRDEF_LIST
#include "dialects/Train/IR/TrainAttrs.cpp.inc"
      >();
  attachGradientRules(*getContext());
}

Operation *TrainDialect::materializeConstant(OpBuilder &builder,
                                             Attribute value, Type type,
                                             Location loc) {
  auto elements = dyn_cast<ElementsAttr>(value);
  if (!elements || elements.getType() != type)
    return nullptr;
  return builder.create<ConstantOp>(loc, type, elements);
}
