//===- TrainDialect.h - the `train` dialect -------------------------------===//
#ifndef MT_DIALECTS_TRAIN_IR_TRAINDIALECT_H
#define MT_DIALECTS_TRAIN_IR_TRAINDIALECT_H

#include "mlir/Bytecode/BytecodeOpInterface.h"
#include "mlir/IR/BuiltinTypes.h"
#include "mlir/IR/Dialect.h"
#include "mlir/IR/OpDefinition.h"

#include "dialects/Train/IR/TrainDialect.h.inc"
#include "dialects/Train/IR/TrainEnums.h.inc"

#define GET_ATTRDEF_CLASSES
#include "dialects/Train/IR/TrainAttrs.h.inc"
#define GET_TYPEDEF_CLASSES
#include "dialects/Train/IR/TrainTypes.h.inc"

#endif // MT_DIALECTS_TRAIN_IR_TRAINDIALECT_H
