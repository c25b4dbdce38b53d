#include "Sweep.h"

#include <algorithm>
#include <atomic>
#include <chrono>
#include <cstdio>
#include <sstream>
#include <thread>

#include "baselines/Baselines.h"
#include "traces/ModelTraces.h"

#ifdef TT_TIERSIM_HAVE_TENSORTIER
#include "policies/TensortierPolicy.h"
#include "tensortier/v1/policy_config.pb.h"
#endif

namespace tt::tiersim {

const std::vector<PolicyEntry>& policyRegistry() {
  static const std::vector<PolicyEntry> registry = [] {
    std::vector<PolicyEntry> r;
    r.push_back({"all-dram", false, true, false, 0, [](const PolicyContext&) { return makeAllDramPolicy(); }});
    r.push_back({"first-touch", false, false, false, 0, [](const PolicyContext&) { return makeFirstTouchPolicy(); }});
    r.push_back({"tpp", false, false, true, 0, [](const PolicyContext& c) {
                   TppParams p;
                   p.scaleDivisor = c.scaleDivisor;
                   return makeTppPolicy(p);
                 }});
    r.push_back({"hemem", false, false, false, HeMemParams{}.samplePeriod, [](const PolicyContext& c) {
                   HeMemParams p;
                   p.scaleDivisor = c.scaleDivisor;
                   return makeHeMemPolicy(p);
                 }});
    r.push_back({"memtis", false, false, false, 0, [](const PolicyContext& c) {
                   MemtisParams p;
                   p.scaleDivisor = c.scaleDivisor;
                   return makeMemtisPolicy(p);
                 }});
    r.push_back({"autotm-static", true, false, false, 0,
                 [](const PolicyContext& c) { return makeAutoTmStaticPolicy(c.memoryParallelism); }});
    r.push_back({"oracle-lookahead", true, false, false, 0,
                 [](const PolicyContext& c) { return makeLookaheadOraclePolicy(c.memoryParallelism, 1.0, 0.5); }});
    r.push_back({"oracle-prefetch", true, false, false, 0, [](const PolicyContext& c) {
                   PrefetchOracleParams p;
                   p.memoryParallelism = c.memoryParallelism;
                   p.computeOverlap = c.computeOverlap;
                   p.migrationOverlap = c.migrationOverlap;
                   p.windowNs = c.windowNs;
                   return makePrefetchOraclePolicy(p);
                 }});
#ifdef TT_TIERSIM_HAVE_TENSORTIER
    r.push_back({"tensortier", false, false, false, 0, [](const PolicyContext& c) {
                   // The daemon's defaults: a default-constructed PolicyConfig.
                   return makeTensortierPolicy(tensortier::v1::PolicyConfig{}, c.samplePeriod, c.memoryParallelism,
                                               c.scaleDivisor);
                 }});
#endif
    return r;
  }();
  return registry;
}

const PolicyEntry* findPolicy(const std::string& name) {
  for (const auto& entry : policyRegistry()) {
    if (entry.name == name) return &entry;
  }
  return nullptr;
}

Result<SimConfig> makeSimConfig(const SweepOptions& options, const Trace& trace, double fastFraction,
                                const PolicyEntry& policy) {
  if (options.tiers.size() < 2 || options.tiers.size() > 3) {
    return logicError("--tiers: give two or three tiers, e.g. dram,optane");
  }
  if (fastFraction <= 0 || fastFraction > 1) {
    return logicError("fast fraction " + std::to_string(fastFraction) + " outside (0, 1]");
  }
  SimConfig config = options.base;
  config.tiers.clear();
  const auto footprint = static_cast<double>(footprintPages(trace));
  for (size_t i = 0; i < options.tiers.size(); ++i) {
    SimTier tier;
    tier.spec = tierByName(options.tiers[i]);
    if (tier.spec.name.empty()) {
      return logicError("unknown tier '" + options.tiers[i] + "' (known: dram, optane, optane1, cxl)");
    }
    if (i == 0) {
      tier.capacityPages = static_cast<uint64_t>(fastFraction * footprint);
    } else if (i + 1 < options.tiers.size()) {
      tier.capacityPages = static_cast<uint64_t>(options.middleFraction * footprint);
    } else {
      tier.capacityPages = trace.totalPages;  // the capacity tier holds everything
    }
    config.tiers.push_back(tier);
  }
  const double s = std::max<uint32_t>(1, trace.scaleDivisor);
  config.epochNs = std::max<uint64_t>(1, static_cast<uint64_t>(static_cast<double>(options.base.epochNs) / s));
  config.hintScanBytesPerSec = policy.usesHintFaults ? options.hintScanBytesPerSec : 0;
  config.unboundedFastTier = policy.unboundedFast;
  if (policy.samplePeriod != 0) {
    config.samplePeriod = std::max<uint32_t>(1, static_cast<uint32_t>(policy.samplePeriod / s));
  }
  config.warmupSteps = options.warmupSteps;
  config.seed = options.seed;
  return config;
}

PolicyContext makePolicyContext(const Trace& trace, const SimConfig& config) {
  PolicyContext context;
  context.scaleDivisor = trace.scaleDivisor;
  context.memoryParallelism = config.memoryParallelism;
  context.samplePeriod = std::max<uint32_t>(1, config.samplePeriod);
  context.computeOverlap = config.computeOverlap;
  context.migrationOverlap = config.migrationOverlap;
  context.windowNs = config.windowNs;
  return context;
}

Result<SweepResult> runSweep(const SweepOptions& options) {
  const auto started = std::chrono::steady_clock::now();
  SweepResult sweep;
  std::vector<const PolicyEntry*> policies;
  if (options.policies.empty()) {
    for (const auto& entry : policyRegistry()) policies.push_back(&entry);
  } else {
    for (const auto& name : options.policies) {
      const auto* entry = findPolicy(name);
      if (entry == nullptr) return logicError("unknown policy '" + name + "'");
      policies.push_back(entry);
    }
  }
  const PolicyEntry* bound = findPolicy("all-dram");
  for (const auto* p : policies) sweep.policies.push_back(p->name);
  const auto models = options.models.empty() ? modelNames() : options.models;

  for (const auto& model : models) {
    ModelTraceOptions traceOptions;
    traceOptions.steps = options.steps;
    traceOptions.scaleDivisor = options.scaleDivisor;
    traceOptions.seed = options.seed;
    auto trace = generateModelTrace(model, traceOptions);
    if (!trace) return withContext(trace.error(), "generating " + model);
    {
      char note[256];
      std::snprintf(note, sizeof note, "%s: %s; footprint %.1f MiB (%llu pages) after scaling, %zu records",
                    model.c_str(), trace->description.c_str(),
                    static_cast<double>(trace->totalPages) * 4096.0 / (1 << 20),
                    static_cast<unsigned long long>(trace->totalPages), trace->accesses.size());
      sweep.traceNotes.push_back(note);
    }
    struct Job {
      double fraction;
      const PolicyEntry* policy;
    };
    std::vector<Job> jobs;
    jobs.push_back(Job{1.0, bound});
    for (double fraction : options.fastFractions) {
      for (const auto* p : policies) {
        if (p->unboundedFast) continue;
        jobs.push_back(Job{fraction, p});
      }
    }
    std::vector<Result<SimResult>> results(jobs.size(), logicError("not run"));
    std::atomic<size_t> nextJob{0};
    auto worker = [&] {
      for (size_t j = nextJob++; j < jobs.size(); j = nextJob++) {
        auto config = makeSimConfig(options, *trace, jobs[j].fraction, *jobs[j].policy);
        if (!config) {
          results[j] = config.error();
          continue;
        }
        auto policy = jobs[j].policy->make(makePolicyContext(*trace, *config));
        results[j] = simulate(*trace, *policy, *config, jobs[j].policy->offline);
      }
    };
    std::vector<std::thread> threads;
    for (uint32_t t = 1; t < std::max<uint32_t>(1, options.jobs); ++t) threads.emplace_back(worker);
    worker();
    for (auto& thread : threads) thread.join();

    for (size_t j = 0; j < jobs.size(); ++j) {
      if (!results[j]) {
        return withContext(results[j].error(), model + " / " + jobs[j].policy->name);
      }
    }
    const double boundStep = results[0]->meanStepNs;
    for (double fraction : options.fastFractions) {
      for (size_t j = 0; j < jobs.size(); ++j) {
        const bool isBound = jobs[j].policy->unboundedFast;
        if (!isBound && jobs[j].fraction != fraction) continue;
        SweepCell cell;
        cell.model = model;
        cell.fastFraction = fraction;
        cell.policy = jobs[j].policy->name;
        cell.result = *results[j];
        cell.normalised = boundStep > 0 ? cell.result.meanStepNs / boundStep : 0;
        // The bound is listed once per fraction only if it was asked for.
        if (isBound && std::find(sweep.policies.begin(), sweep.policies.end(), cell.policy) == sweep.policies.end()) {
          continue;
        }
        sweep.cells.push_back(cell);
      }
    }
  }
  sweep.seconds = std::chrono::duration<double>(std::chrono::steady_clock::now() - started).count();
  return sweep;
}

namespace {

std::string fixed(double value, int digits) {
  char buf[64];
  std::snprintf(buf, sizeof buf, "%.*f", digits, value);
  return buf;
}

const SweepCell* findCell(const SweepResult& r, const std::string& model, double fraction, const std::string& policy) {
  for (const auto& cell : r.cells) {
    if (cell.model == model && cell.fastFraction == fraction && cell.policy == policy) return &cell;
  }
  return nullptr;
}

}  // namespace

std::string sweepMarkdown(const SweepResult& result, const SweepOptions& options) {
  std::ostringstream out;
  std::vector<std::string> models;
  for (const auto& cell : result.cells) {
    if (std::find(models.begin(), models.end(), cell.model) == models.end()) models.push_back(cell.model);
  }
  out << "Simulated step time normalised to all-DRAM (lower is better; 1.000 = the bound), mean of steps "
      << options.warmupSteps << ".." << (options.steps - 1) << "; tiers " ;
  for (size_t i = 0; i < options.tiers.size(); ++i) out << (i ? "+" : "") << options.tiers[i];
  out << "; trace scale 1/" << options.scaleDivisor << ".\n\n";
  // One table per measure: a row per (model, fast fraction), a column per policy.
  const auto table = [&](const auto& valueOf) {
    out << "| model | fast | ";
    for (const auto& p : result.policies) out << p << " | ";
    out << "\n|---|---|";
    for (size_t i = 0; i < result.policies.size(); ++i) out << "---:|";
    out << "\n";
    for (const auto& model : models) {
      for (double fraction : options.fastFractions) {
        out << "| " << model << " | " << fixed(fraction * 100, 0) << "% | ";
        for (const auto& p : result.policies) {
          const auto* cell = findCell(result, model, fraction, p);
          out << (cell ? valueOf(*cell) : std::string("-")) << " | ";
        }
        out << "\n";
      }
    }
  };
  table([](const auto& cell) { return fixed(cell.normalised, 3); });
  out << "\nMigrated MiB per step (promotions + demotions, same steps; the table is at the trace's "
         "1/" << options.scaleDivisor << " scale: multiply by " << options.scaleDivisor
      << " for the full-size model):\n\n";
  table([](const auto& cell) { return fixed(cell.result.meanMigratedBytesPerStep / (1 << 20), 1); });
  out << "\nTraces:\n\n";
  for (const auto& note : result.traceNotes) out << "- " << note << "\n";
  out << "\nSweep wall time: " << fixed(result.seconds, 1) << " s.\n";
  return out.str();
}

std::string sweepCsv(const SweepResult& result) {
  std::ostringstream out;
  out << "model,fast_fraction,policy,mean_step_ns,normalised,migrated_bytes_per_step,fast_hit_fraction,"
         "promoted_pages,demoted_pages,refused_moves,samples,hint_faults\n";
  for (const auto& c : result.cells) {
    out << c.model << ',' << c.fastFraction << ',' << c.policy << ',' << fixed(c.result.meanStepNs, 0) << ','
        << fixed(c.normalised, 4) << ',' << fixed(c.result.meanMigratedBytesPerStep, 0) << ','
        << fixed(c.result.fastHitFraction, 4) << ',' << c.result.promotedPages << ',' << c.result.demotedPages
        << ',' << c.result.refusedMoves << ',' << c.result.samples << ',' << c.result.hintFaults << '\n';
  }
  return out.str();
}

}  // namespace tt::tiersim
