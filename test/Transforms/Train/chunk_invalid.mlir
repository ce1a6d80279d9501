// A chunk of no rows is refused by the pass, before anything is rewritten.
// RUN: not mt-opt %s --mt-chunk-mlp=chunk-rows=0 2>&1 | FileCheck %s --check-prefix=MLP
// MLP: error: mt-chunk-mlp: chunk-rows must be at least 1, got 0
// RUN: not mt-opt %s --mt-chunk-head=chunk-rows=-3 2>&1 | FileCheck %s --check-prefix=HEAD
// HEAD: error: mt-chunk-head: chunk-rows must be at least 1, got -3
func.func @train_step() {
  return
}
