//===- Driver.cpp - one model through the pipelines, cached ---------------===//
#include "compiler/Driver.h"

#include "compiler/PlanEmitter.h"
#include "compiler/Summary.h"
#include "dialects/Train/Transforms/Passes.h"
#include "runtime/cost/cost_model.h"
#include "runtime/plan/plan_io.h"

#include "mlir/IR/Diagnostics.h"
#include "mlir/Pass/PassManager.h"
#include "mlir/Support/FileUtilities.h"
#include "llvm/ADT/ScopeExit.h"
#include "llvm/ADT/SmallString.h"
#include "llvm/Support/FileSystem.h"
#include "llvm/Support/FormatVariadic.h"
#include "llvm/Support/MemoryBuffer.h"
#include "llvm/Support/Path.h"
#include "llvm/Support/Threading.h"
#include "llvm/Support/ToolOutputFile.h"
#include "llvm/Support/raw_ostream.h"

#include <sys/statvfs.h>

namespace mt::driver {
namespace {

/// The passes of `build` on `module` (timed under `timing`).
template <typename Build>
mlir::LogicalResult runPasses(mlir::ModuleOp module, mlir::TimingScope &timing,
                              const Build &build) {
  mlir::PassManager pm(module.getContext());
  if (failed(mlir::applyPassManagerCLOptions(pm)))
    return mlir::failure();
  pm.enableTiming(timing);
  build(pm);
  return pm.run(module);
}

/// Says which tensors of the user's weights the plan does not train and
/// its checkpoints copy unchanged (the importer's `train.kept`), once.
void noteKept(mlir::ModuleOp module, const std::string &weights) {
  auto kept = module->getAttrOfType<mlir::ArrayAttr>("train.kept");
  if (!kept)
    return;
  std::string list;
  size_t shown = 0;
  for (auto k : kept.getAsRange<mlir::DictionaryAttr>()) {
    if (++shown > 8) {
      list += ", ...";
      break;
    }
    list += (list.empty() ? "'" : ", '") +
            k.getAs<mlir::StringAttr>("name").str() + "' (" +
            k.getAs<mlir::StringAttr>("why").str() + ")";
  }
  llvm::errs() << "mtc: note: " << kept.size() << " tensor"
               << (kept.size() > 1 ? "s" : "") << " of " << weights
               << " not trained, copied into every checkpoint as "
               << (kept.size() > 1 ? "they are" : "it is") << ": " << list
               << "\n";
}

/// The model imported, folded and fused: the front end before the layers
/// are outlined.
mlir::OwningOpRef<mlir::ModuleOp> fuseModel(mlir::MLIRContext &context,
                                            const ImportOptions &import,
                                            const Options &o,
                                            mlir::TimingScope &timing) {
  mlir::OwningOpRef<mlir::ModuleOp> module;
  {
    mlir::TimingScope importTiming = timing.nest("Import");
    module = importOnnxModel(context, import);
  }
  if (module)
    noteKept(*module, import.weightsPath);
  if (!module || failed(runPasses(*module, timing, [&](mlir::PassManager &pm) {
        train::buildFusionPipeline(pm, o.explainFusion, o.fusePatterns);
      })))
    return nullptr;
  return module;
}

/// The rest of the front end on a copy of the fused model: its layers
/// outlined but the last `keepLast` (none with -1), and the training step
/// (the forward step, when `forward`) derived where `what` needs it.
mlir::OwningOpRef<mlir::ModuleOp> outline(mlir::ModuleOp fused, Emit what,
                                          int64_t keepLast, bool forward,
                                          mlir::TimingScope &timing) {
  mlir::OwningOpRef<mlir::ModuleOp> module = fused.clone();
  bool step = what == Emit::Step || what == Emit::Sched || what == Emit::Plan;
  if (failed(runPasses(*module, timing, [&](mlir::PassManager &pm) {
        train::buildOutlinePipeline(pm, keepLast);
        if (step && forward)
          pm.addPass(train::createDeriveForwardStepPass());
        else if (step)
          pm.addPass(train::createDeriveTrainingStepPass());
      })))
    return nullptr;
  return module;
}

using llvm::errs;
using llvm::outs;

mlir::LogicalResult fail(const llvm::Twine &message) {
  errs() << "mtc: error: " << message << "\n";
  return mlir::failure();
}

/// Where the diagnostics of the candidate this thread compiles go (its
/// first error), or null outside a candidate.
thread_local std::string *candidateError = nullptr;

/// The config.json and generation_config.json beside `beside` (the
/// weights, or the model when its initializers are the weights), for every
/// checkpoint folder (where from_pretrained looks for them); one larger
/// than a configuration can be is left out, said.
void addCheckpointFiles(mt::plan::Plan &plan, llvm::StringRef beside) {
  constexpr uint64_t kMaxConfigBytes = 1 << 20;
  llvm::SmallString<256> dir(beside);
  llvm::sys::path::remove_filename(dir);
  for (const char *name : {"config.json", "generation_config.json"}) {
    llvm::SmallString<256> path(dir);
    llvm::sys::path::append(path, name);
    uint64_t size = 0;
    if (!llvm::sys::fs::is_regular_file(path) ||
        llvm::sys::fs::file_size(path, size))
      continue;
    if (size > kMaxConfigBytes) {
      errs() << "mtc: warning: " << path << ": " << size
             << " bytes, more than a model configuration's 1 MiB; not "
                "copied into the checkpoints\n";
      continue;
    }
    auto buffer = llvm::MemoryBuffer::getFile(path);
    if (!buffer) {
      errs() << "mtc: warning: " << path << ": cannot read ("
             << buffer.getError().message()
             << "); not copied into the checkpoints\n";
      continue;
    }
    auto *file = plan.add_checkpoint_files();
    file->set_name(name);
    file->set_content((*buffer)->getBuffer().str());
  }
}

/// The budgets given, or the target's memories (pinned: a quarter of the
/// host's; disk: the free space of the disk folder).
mlir::LogicalResult readBudgets(const Request &r, const mt::plan::Target &t,
                                planner::Budgets &b) {
  b.device = r.deviceBytes.value_or(int64_t(t.gpu_memory_bytes()));
  b.host = r.hostBytes.value_or(int64_t(t.host_memory_bytes()));
  b.pinned = r.pinnedBytes.value_or(b.host / 4);
  b.disk = 0;
  if (!r.diskDir.empty()) {
    struct statvfs fs {};
    if (::statvfs(r.diskDir.c_str(), &fs) != 0)
      return fail("--disk '" + r.diskDir +
                  "' is not a directory that can be read");
    b.disk = int64_t(fs.f_bavail) * int64_t(fs.f_frsize);
  }
  b.disk = r.diskBytes.value_or(b.disk);
  return mlir::success();
}

/// The module of `s` compiled to `what` (or its summary) into `path`.
mlir::LogicalResult printModule(Driver &compiler, const ImportOptions &import,
                                Emit what, const planner::Schedule &s,
                                const std::string &path) {
  mlir::OwningOpRef<mlir::ModuleOp> module = compiler.compile(import, what, s);
  if (!module)
    return mlir::failure();
  std::string error;
  auto output = mlir::openOutputFile(path, &error);
  if (!output)
    return fail(error);
  if (what == Emit::Summary)
    mt::printSummary(*module, output->os());
  else
    module->print(output->os());
  output->keep();
  return mlir::success();
}

/// The target a plan was made for and the budgets it was planned within.
void stampTarget(mt::plan::Plan &plan, const mt::plan::Target &target,
                 const planner::Budgets &budgets) {
  *plan.mutable_target() = target;
  mt::plan::Budgets &b = *plan.mutable_budgets();
  b.set_device_bytes(uint64_t(budgets.device));
  b.set_pinned_bytes(uint64_t(budgets.pinned));
  b.set_host_bytes(uint64_t(budgets.host));
  b.set_disk_bytes(uint64_t(budgets.disk));
}

/// The forward-only plan of `r` (mtc --forward): the schedule the flags
/// describe, compiled with every check, its peaks proved within the
/// budgets and its time predicted; nothing to search, as no update or
/// optimizer state is there to place.
mlir::LogicalResult planForward(Driver &compiler, const Request &r,
                                const mt::plan::Target &target,
                                const planner::Budgets &budgets) {
  const planner::Schedule &s = r.chosen;
  mlir::OwningOpRef<mlir::ModuleOp> module =
      compiler.compile(r.import, Emit::Plan, s, /*verify=*/true);
  mt::plan::Plan plan;
  if (!module || failed(mt::emitPlan(*module, plan)))
    return mlir::failure();
  stampTarget(plan, target, budgets);
  std::string why;
  if (!planner::fits(plan, budgets, s, /*diskGiven=*/false, why))
    return fail("the forward plan does not fit: " + why);
  runtime::Prediction p = runtime::simulate(plan, target);
  plan.set_predicted_step_seconds(p.stepSeconds);
  if (r.explain) {
    planner::TierBytes need = planner::tierBytes(plan);
    outs() << llvm::formatv(
        "forward plan on {0}: {1:F6} s predicted; device {2} of {3} bytes, "
        "host {4} of {5} bytes\n",
        target.name(), p.stepSeconds, need.device, budgets.device, need.host,
        budgets.host);
  }
  if (r.outputPath == "-")
    return r.explain ? mlir::success()
                     : fail("a plan needs an output file: -o PLAN.mtp");
  if (mt::runtime::Status st = mt::runtime::savePlan(plan, r.outputPath); !st)
    return fail(st.message());
  return mlir::success();
}

} // namespace

mlir::ModuleOp Driver::step(const ImportOptions &import, int64_t keepLast) {
  std::lock_guard<std::mutex> lock(mutex_);
  auto key = std::make_pair(import.batch, keepLast);
  auto it = steps_.find(key);
  if (it == steps_.end()) {
    mlir::ModuleOp model = fused(import);
    if (!model)
      return nullptr;
    mlir::OwningOpRef<mlir::ModuleOp> step =
        outline(model, Emit::Step, keepLast, import.forward, timing_);
    if (!step)
      return nullptr; // not kept: the next try says it again
    it = steps_.emplace(key, std::move(step)).first;
  }
  return *it->second;
}

mlir::OwningOpRef<mlir::ModuleOp> Driver::compile(const ImportOptions &import,
                                                  Emit what,
                                                  const planner::Schedule &s,
                                                  bool verify) {
  if (what == Emit::Import) {
    mlir::TimingScope importTiming = timing_.nest("Import");
    return importOnnxModel(context_, import);
  }
  if (what != Emit::Step && what != Emit::Sched && what != Emit::Plan) {
    std::lock_guard<std::mutex> lock(mutex_);
    mlir::ModuleOp model = fused(import);
    if (!model)
      return nullptr;
    return outline(model, what, keptOf(s), import.forward, timing_);
  }
  mlir::ModuleOp trainStep = step(import, keptOf(s));
  if (!trainStep)
    return nullptr;
  if (what == Emit::Step)
    return trainStep.clone();
  // The back end on a copy of the step.
  mlir::OwningOpRef<mlir::ModuleOp> module = trainStep.clone();
  mlir::PassManager pm(trainStep.getContext());
  if (failed(mlir::applyPassManagerCLOptions(pm)))
    return nullptr;
  pm.enableVerifier(verify);
  pm.enableTiming(timing_);
  mt::sched::buildBackendPipeline(pm, s, verify);
  if (failed(pm.run(*module)))
    return nullptr;
  return module;
}

mlir::ModuleOp Driver::fused(const ImportOptions &import) {
  auto it = fused_.find(import.batch);
  if (it == fused_.end()) {
    mlir::OwningOpRef<mlir::ModuleOp> model =
        fuseModel(context_, import, options_, timing_);
    if (!model)
      return nullptr;
    it = fused_.emplace(import.batch, std::move(model)).first;
  }
  return *it->second;
}

mlir::LogicalResult compile(mlir::MLIRContext &context, const Request &r) {
  // While a thread compiles a candidate, its diagnostics are the
  // candidate's refusal (the first error), not printed: one handler for
  // every thread, as the context's handlers serve them all.
  mlir::ScopedDiagnosticHandler refusals(&context, [](mlir::Diagnostic &d) {
    if (!candidateError)
      return mlir::failure();
    if (candidateError->empty() &&
        d.getSeverity() == mlir::DiagnosticSeverity::Error)
      *candidateError = d.str();
    return mlir::success();
  });
  mlir::DefaultTimingManager tm;
  mlir::applyDefaultTimingManagerCLOptions(tm);
  mlir::TimingScope timing = tm.getRootScope();
  Driver compiler(context, timing, r.options);
  const ImportOptions &import = r.import;
  // --emit=sched shows the planned schedule: it is searched like a plan.
  if (r.emit != Emit::Plan && r.emit != Emit::Sched)
    return printModule(compiler, import, r.emit, r.chosen, r.outputPath);

  planner::Budgets budgets;
  mt::plan::Target target;
  if (mt::runtime::Status st = mt::runtime::loadTarget(r.target, target); !st)
    return fail("--target: " + st.message());
  if (failed(readBudgets(r, target, budgets)))
    return mlir::failure();
  if (r.chosen.ranks > 1 &&
      (target.network_bytes_per_s() <= 0 || target.network_latency_s() <= 0))
    return fail("--ranks " + llvm::Twine(r.chosen.ranks) + ": the target '" +
                target.name() +
                "' has no network_bytes_per_s and network_latency_s; measure "
                "them with mpirun -np 2 mtrun --calibrate FILE on the ranks' "
                "machines");
  if (import.forward)
    return planForward(compiler, r, target, budgets);
  planner::Constraints c = r.constraints;
  // The model itself must compile (with the user's batch): its errors are
  // reported as such, not as refused candidates.
  mlir::ModuleOp userStep = compiler.step(import, keptOf(r.chosen));
  if (!userStep)
    return mlir::failure();
  c.layers = planner::layerCount(userStep);
  // The micro-batch can be split only when the export leaves the batch
  // dynamic, and only when the user gave the batch but not the count.
  if (import.batch > 1 && !r.gradAccumGiven) {
    auto fixed = mt::fixedBatchOf(context, import.modelPath);
    if (failed(fixed))
      return mlir::failure();
    c.splitBatch = !fixed->has_value();
    if (!c.splitBatch && r.suggest)
      errs() << "mtc: note: the model fixes the batch at " << **fixed
             << ", so it is not split into micro-batches\n";
  }
  if (!r.mlpChunkGiven)
    c.mlpChunk = planner::mlpChunkFor(userStep);
  planner::ModelSize size = planner::modelSize(userStep);
  size.momentBytes = planner::momentBytesPerElement(r.chosen.optimizerStates);
  llvm::SmallString<256> diskPath(r.diskDir);
  if (!r.diskDir.empty())
    llvm::sys::fs::make_absolute(diskPath);
  // Each candidate on a copy of its micro-batch size's training step; a
  // candidate the back end refuses (a split batch the model's shapes
  // refuse) is dropped with its first error, and the search goes on.
  auto compileWith = [&](const planner::Schedule &s, bool verify,
                         mt::plan::Plan &plan, std::string &error) {
    ImportOptions o = import;
    o.batch = s.batch;
    std::string *outer = candidateError;
    candidateError = &error;
    auto restore = llvm::make_scope_exit([&] { candidateError = outer; });
    mlir::OwningOpRef<mlir::ModuleOp> module =
        compiler.compile(o, Emit::Plan, s, verify);
    if (!module || failed(mt::emitPlan(*module, plan))) {
      if (error.empty())
        error = "the back end refused it";
      return false;
    }
    stampTarget(plan, target, budgets);
    if (s.momentsOnDisk)
      plan.set_disk_dir(diskPath.str().str());
    return true;
  };
  auto compileOne = [&](const planner::Schedule &s, mt::plan::Plan &plan,
                        std::string &error) {
    return compileWith(s, /*verify=*/false, plan, error);
  };
  // The context's uniquing is thread-safe only with its threading on
  // (--mlir-disable-threading turns it off).
  unsigned threads =
      r.jobs ? r.jobs
             : unsigned(llvm::hardware_concurrency().compute_thread_count());
  if (!context.isMultithreadingEnabled())
    threads = 1;
  if (threads > 1)
    mt::sched::loadBackendDialects(context);
  planner::Result result =
      planner::search(r.chosen, c, budgets, size, target, compileOne, threads);
  if (r.suggest) {
    planner::printCandidateHeader(outs());
    for (const auto &cand : result.candidates)
      planner::printCandidate(cand, outs());
    for (const auto &d : result.failed)
      outs() << "  skipped " << d.schedule.flags() << ": " << d.why << "\n";
    outs() << "  (not compiled: " << result.overBound()
           << " over a memory bound, "
           << result.pruned.size() - result.overBound()
           << " offloaded variants of schedules that fit without offload)\n";
  }
  // A schedule the back end refuses whatever the planner varies (what
  // mt-shard-state does not build for data-parallel ranks) is said as such.
  if (!result.best && result.candidates.empty() && !result.failed.empty())
    return fail("the back end refused every schedule (" +
                llvm::Twine(result.failed.size()) + " tried); the first, " +
                result.failed.front().schedule.flags() + ": " +
                result.failed.front().why);
  if (!result.best)
    return fail("no schedule fits the budgets (" +
                llvm::Twine(result.candidates.size()) + " compiled, " +
                llvm::Twine(result.overBound()) + " over a memory bound); " +
                planner::closestRefusal(result, budgets));
  const planner::Candidate &bestCandidate = result.candidates[*result.best];
  mt::plan::Plan best = bestCandidate.plan;
  if (r.suggest)
    outs() << "fastest that fits: " << bestCandidate.schedule.flags() << "\n";
  else if (!r.explain && result.candidates.size() + result.pruned.size() > 1)
    errs() << "mtc: note: planned " << bestCandidate.schedule.flags()
           << " (the fastest of the schedules that fit; --explain says why)\n";
  if (r.explain)
    planner::explain(bestCandidate, budgets, &result, outs());
  if (r.emit == Emit::Sched) {
    ImportOptions o = import;
    o.batch = bestCandidate.schedule.batch;
    return printModule(compiler, o, Emit::Sched, bestCandidate.schedule,
                       r.outputPath);
  }
  if (r.outputPath == "-") {
    if (r.suggest || r.explain)
      return mlir::success();
    return fail("a plan needs an output file: -o PLAN.mtp");
  }
  // The plan written is the chosen schedule compiled again with every
  // check the search skipped: the IR verified after each pass and the
  // schedule proved race-free (mt-verify-schedule).
  std::string error;
  if (!compileWith(bestCandidate.schedule, /*verify=*/true, best, error))
    return fail("the chosen schedule (" + bestCandidate.schedule.flags() +
                ") failed verification, a bug in mtc: " + error);
  best.set_predicted_step_seconds(bestCandidate.plan.predicted_step_seconds());
  addCheckpointFiles(best, import.weightsPath.empty()
                               ? llvm::StringRef(import.modelPath)
                               : llvm::StringRef(import.weightsPath));
  // The model's bytes are found from the plan's folder, so that the two
  // can move together.
  if (mt::runtime::Status st = mt::runtime::savePlan(best, r.outputPath); !st)
    return fail(st.message());
  return mlir::success();
}

} // namespace mt::driver
