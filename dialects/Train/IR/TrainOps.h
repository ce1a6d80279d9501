//===- TrainOps.h - ops of the `train` dialect ----------------------------===//
#ifndef MT_DIALECTS_TRAIN_IR_TRAINOPS_H
#define MT_DIALECTS_TRAIN_IR_TRAINOPS_H

#include "dialects/Train/IR/TrainDialect.h"
#include "mlir/Interfaces/InferTypeOpInterface.h"
#include "mlir/Interfaces/SideEffectInterfaces.h"

#define GET_OP_CLASSES
#include "dialects/Train/IR/TrainOps.h.inc"

#endif // MT_DIALECTS_TRAIN_IR_TRAINOPS_H
