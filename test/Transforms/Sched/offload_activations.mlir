// RUN: mt-opt --split-input-file --mt-offload-activations=min-gap=3 %s | FileCheck %s
// RUN: mt-opt --split-input-file --mt-offload-activations=min-gap=10 %s | FileCheck %s --check-prefix=GAP
// RUN: mt-opt --split-input-file --mt-offload-activations="min-gap=3 fraction=0.5" %s | FileCheck %s --check-prefix=HALF

// %h is written by the forward and read by the backward 3 ops later: it goes
// to pinned memory after its last forward use and comes back, into a buffer
// of its own, before the backward reads it.
// CHECK-LABEL: sched.program
// CHECK-DAG: %[[H:.+]] = sched.buffer "h" in @device
// CHECK-DAG: %[[HOST:.+]] = sched.buffer "h.host" in @host_pinned
// CHECK-DAG: %[[BACK:.+]] = sched.buffer "h.bwd" in @device
// CHECK: %[[F:.+]] = sched.exec neg ins(%[[H]]) outs(%{{.*}}) on @compute
// CHECK-NEXT: %[[OUT:.+]] = sched.exec copy_to_host ins(%[[H]]) outs(%[[HOST]]) on @d2h after(%[[F]])
// CHECK: %[[IN:.+]] = sched.exec copy_to_device ins(%[[HOST]]) outs(%[[BACK]]) on @h2d after(%[[OUT]])
// CHECK-NEXT: sched.exec neg ins(%[[BACK]]) outs(%{{.*}}) on @compute after(%[[IN]])
// A gap below min-gap is not worth two copies.
// GAP-LABEL: sched.program
// GAP-NOT: copy_to_host
sched.program attributes {batch = 1 : i64, seq = 1 : i64, grad_accum = 1 : i64, vocab = 2 : i64, compute_dtype = f32, model = "m"} {
  sched.arena @device tier device size 0
  sched.arena @host_pinned tier host_pinned size 0
  sched.stream @compute kind compute
  sched.stream @h2d kind host_to_device
  sched.stream @d2h kind device_to_host
  %h = sched.buffer "h" in @device at -1 : !sched.buffer<tensor<4xf32>>
  %a = sched.buffer "a" in @device at -1 : !sched.buffer<tensor<4xf32>>
  %l = sched.buffer "l" in @device at -1 : !sched.buffer<tensor<f32>>
  %d = sched.buffer "d" in @device at -1 : !sched.buffer<tensor<4xf32>>
  %lbl = sched.buffer "labels" in @device at -1 : !sched.buffer<tensor<1xi64>>
  %g = sched.buffer "g" in @device at -1 : !sched.buffer<tensor<4xf32>>
  sched.phase micro_batch {
    %0 = sched.exec fill outs(%h) on @compute : (!sched.buffer<tensor<4xf32>>) -> !sched.token
    %1 = sched.exec neg ins(%h) outs(%a) on @compute : (!sched.buffer<tensor<4xf32>>, !sched.buffer<tensor<4xf32>>) -> !sched.token
    %2 = sched.exec fill outs(%l) on @compute : (!sched.buffer<tensor<f32>>) -> !sched.token
    %3 = sched.exec cross_entropy_grad ins(%a, %lbl, %l) outs(%d) on @compute : (!sched.buffer<tensor<4xf32>>, !sched.buffer<tensor<1xi64>>, !sched.buffer<tensor<f32>>, !sched.buffer<tensor<4xf32>>) -> !sched.token
    %4 = sched.exec neg ins(%h) outs(%g) on @compute : (!sched.buffer<tensor<4xf32>>, !sched.buffer<tensor<4xf32>>) -> !sched.token
  }
}

// -----

// Two checkpoints: %h1 is away from the device 5 ops, %h2 3 ops. Offloading
// half of them offloads the one away longest.
// HALF-LABEL: sched.program
// HALF: sched.buffer "h1.host"
// HALF-NOT: "h2.host"
// HALF: copy_to_host ins(%{{.*}}) outs(%{{.*}}) on @d2h
// HALF-NOT: copy_to_host
sched.program attributes {batch = 1 : i64, seq = 1 : i64, grad_accum = 1 : i64, vocab = 2 : i64, compute_dtype = f32, model = "m"} {
  sched.arena @device tier device size 0
  sched.arena @host_pinned tier host_pinned size 0
  sched.stream @compute kind compute
  sched.stream @h2d kind host_to_device
  sched.stream @d2h kind device_to_host
  %h1 = sched.buffer "h1" in @device at -1 : !sched.buffer<tensor<4xf32>>
  %h2 = sched.buffer "h2" in @device at -1 : !sched.buffer<tensor<4xf32>>
  %a = sched.buffer "a" in @device at -1 : !sched.buffer<tensor<4xf32>>
  %b = sched.buffer "b" in @device at -1 : !sched.buffer<tensor<4xf32>>
  %l = sched.buffer "l" in @device at -1 : !sched.buffer<tensor<f32>>
  %d = sched.buffer "d" in @device at -1 : !sched.buffer<tensor<4xf32>>
  %lbl = sched.buffer "labels" in @device at -1 : !sched.buffer<tensor<1xi64>>
  %g = sched.buffer "g" in @device at -1 : !sched.buffer<tensor<4xf32>>
  %g2 = sched.buffer "g2" in @device at -1 : !sched.buffer<tensor<4xf32>>
  sched.phase micro_batch {
    %0 = sched.exec fill outs(%h1) on @compute : (!sched.buffer<tensor<4xf32>>) -> !sched.token
    %1 = sched.exec fill outs(%h2) on @compute : (!sched.buffer<tensor<4xf32>>) -> !sched.token
    %2 = sched.exec neg ins(%h1) outs(%a) on @compute : (!sched.buffer<tensor<4xf32>>, !sched.buffer<tensor<4xf32>>) -> !sched.token
    %3 = sched.exec neg ins(%h2) outs(%b) on @compute : (!sched.buffer<tensor<4xf32>>, !sched.buffer<tensor<4xf32>>) -> !sched.token
    %4 = sched.exec fill outs(%l) on @compute : (!sched.buffer<tensor<f32>>) -> !sched.token
    %5 = sched.exec cross_entropy_grad ins(%b, %lbl, %l) outs(%d) on @compute : (!sched.buffer<tensor<4xf32>>, !sched.buffer<tensor<1xi64>>, !sched.buffer<tensor<f32>>, !sched.buffer<tensor<4xf32>>) -> !sched.token
    %6 = sched.exec neg ins(%h2) outs(%g) on @compute : (!sched.buffer<tensor<4xf32>>, !sched.buffer<tensor<4xf32>>) -> !sched.token
    %7 = sched.exec neg ins(%h1) outs(%g2) on @compute : (!sched.buffer<tensor<4xf32>>, !sched.buffer<tensor<4xf32>>) -> !sched.token
  }
}
