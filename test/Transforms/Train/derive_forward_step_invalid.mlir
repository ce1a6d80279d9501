// RUN: not mt-opt --mt-derive-forward-step %s 2>&1 | FileCheck %s

// Without a @model there is nothing to run forward.
// CHECK: error: no @model function to run forward
module {
}
