// tiersim: the trace-driven tiered-memory simulator (see docs/benchmarks.md, "Policy simulator
// (tiersim)").
//
//   tiersim sweep [--report md|csv] [--models m,..] [--fractions f,..] [--policies p,..]
//                 [--tiers dram,optane] [--steps N] [--warmup N] [--scale S] [--jobs N] [--seed N]
//                 [--check 1] (exit 1 if any policy beats the all-DRAM bound)
//   tiersim run   (--model M | --trace FILE) --policy P [--fraction F] [same knobs]
//   tiersim gen   --model M --out FILE [--steps N] [--scale S] [--batch B] [--sequence S]
//   tiersim info  --trace FILE
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <iostream>
#include <map>
#include <sstream>
#include <string>
#include <vector>

#include "Sweep.h"
#include "traces/ModelTraces.h"

namespace {

using namespace tt::tiersim;

std::vector<std::string> split(const std::string& text) {
  std::vector<std::string> parts;
  std::stringstream in(text);
  std::string part;
  while (std::getline(in, part, ',')) {
    if (!part.empty()) parts.push_back(part);
  }
  return parts;
}

int usage(const std::string& problem) {
  if (!problem.empty()) std::cerr << "tiersim: " << problem << "\n";
  std::cerr << "usage:\n"
               "  tiersim sweep [--report md|csv] [--models m,..] [--fractions f,..] [--policies p,..]\n"
               "                [--tiers dram,optane|dram,cxl|dram,cxl,optane] [--steps N] [--warmup N]\n"
               "                [--scale S] [--jobs N] [--seed N] [--parallelism N] [--overlap X]\n"
               "                [--migration-overlap X] [--copy-gbps X] [--sample-period N] [--check 1]\n"
               "  tiersim run (--model M | --trace FILE) --policy P [--fraction F] [sweep knobs]\n"
               "  tiersim gen --model M --out FILE [--steps N] [--scale S] [--batch B] [--sequence S]\n"
               "  tiersim info --trace FILE\n"
               "policies:";
  for (const auto& entry : policyRegistry()) std::cerr << ' ' << entry.name;
  std::cerr << "\nmodels:";
  for (const auto& model : modelNames()) std::cerr << ' ' << model;
  std::cerr << "\n";
  return 2;
}

bool parseNumber(const std::string& text, double& out) {
  char* end = nullptr;
  out = std::strtod(text.c_str(), &end);
  return end != text.c_str() && *end == '\0';
}

}  // namespace

int main(int argc, char** argv) {
  if (argc < 2) return usage("");
  const std::string command = argv[1];
  std::map<std::string, std::string> args;
  for (int i = 2; i < argc; ++i) {
    std::string key = argv[i];
    if (key.rfind("--", 0) != 0 || i + 1 >= argc) return usage("expected --key value, got '" + key + "'");
    args[key.substr(2)] = argv[++i];
  }
  auto take = [&](const std::string& key, const std::string& fallback) {
    auto it = args.find(key);
    if (it == args.end()) return fallback;
    std::string value = it->second;
    args.erase(it);
    return value;
  };
  std::string bad;
  auto number = [&](const std::string& key, double fallback) {
    const std::string text = take(key, "");
    if (text.empty()) return fallback;
    double value = 0;
    if (!parseNumber(text, value) || value < 0) {
      bad = "--" + key + ": not a non-negative number: " + text;
      return fallback;
    }
    return value;
  };

  SweepOptions options;
  const std::string report = take("report", "md");
  options.models = split(take("models", ""));
  options.policies = split(take("policies", ""));
  options.tiers = split(take("tiers", "dram,optane"));
  if (auto fractions = split(take("fractions", "")); !fractions.empty()) {
    options.fastFractions.clear();
    for (const auto& f : fractions) {
      double value = 0;
      if (!parseNumber(f, value) || value <= 0 || value > 1) return usage("--fractions: bad fraction " + f);
      options.fastFractions.push_back(value);
    }
  }
  options.steps = static_cast<uint32_t>(number("steps", options.steps));
  options.warmupSteps = static_cast<uint32_t>(number("warmup", options.warmupSteps));
  const double scale = number("scale", options.scaleDivisor);
  options.jobs = static_cast<uint32_t>(number("jobs", options.jobs));
  options.seed = static_cast<uint64_t>(number("seed", static_cast<double>(options.seed)));
  options.middleFraction = number("middle-fraction", options.middleFraction);
  options.hintScanBytesPerSec = number("hint-scan-mbps", options.hintScanBytesPerSec / (1 << 20)) * (1 << 20);
  options.base.memoryParallelism = number("parallelism", options.base.memoryParallelism);
  options.base.computeOverlap = number("overlap", options.base.computeOverlap);
  options.base.migrationOverlap = number("migration-overlap", options.base.migrationOverlap);
  options.base.samplePeriod = static_cast<uint32_t>(number("sample-period", options.base.samplePeriod));
  options.base.migrationCopyBytesPerNs = number("copy-gbps", options.base.migrationCopyBytesPerNs);
  if (!bad.empty()) return usage(bad);
  if (options.steps == 0) return usage("--steps must be positive");
  // Checked as a double: a value out of uint32_t's range has no conversion (see kMaxScaleDivisor).
  if (!(scale >= 1 && scale <= kMaxScaleDivisor)) {
    return usage("--scale must be in 1.." + std::to_string(kMaxScaleDivisor));
  }
  options.scaleDivisor = static_cast<uint32_t>(scale);
  // A copy at no bandwidth never ends: the replay would wait on the first one for ever.
  if (!(options.base.migrationCopyBytesPerNs > 0) || !std::isfinite(options.base.migrationCopyBytesPerNs)) {
    return usage("--copy-gbps must be positive and finite");
  }
  // Only the commands that replay generated steps summarise after a warm-up (gen writes them all;
  // a trace file has steps of its own, and the summary takes them all when there are no more).
  auto warmupFits = [&] { return options.warmupSteps < options.steps; };
  const char* const warmupProblem = "--warmup must be smaller than --steps";

  if (command == "sweep") {
    if (!warmupFits()) return usage(warmupProblem);
    // --check 1: fail (exit 1) when any policy beats the all-DRAM bound, which the cost model
    // rules out (every slow-tier cost per line is at least DRAM's; migrations and faults only add).
    const bool check = take("check", "0") == "1";
    if (!args.empty()) return usage("unknown option --" + args.begin()->first);
    auto result = runSweep(options);
    if (!result) {
      std::cerr << "tiersim: " << result.error().message() << "\n";
      return 1;
    }
    int violations = 0;
    for (const auto& cell : result->cells) {
      if (check && cell.normalised < 1.0 - 1e-9) {
        std::cerr << "tiersim: check failed: " << cell.policy << " on " << cell.model << " at "
                  << cell.fastFraction * 100 << "% fast memory beats all-DRAM (" << cell.normalised << ")\n";
        ++violations;
      }
    }
    if (report == "md") {
      std::cout << sweepMarkdown(*result, options);
    } else if (report == "csv") {
      std::cout << sweepCsv(*result);
    } else {
      return usage("--report: md or csv");
    }
    return violations == 0 ? 0 : 1;
  }

  if (command == "gen") {
    ModelTraceOptions traceOptions;
    const std::string model = take("model", "");
    const std::string out = take("out", "");
    traceOptions.steps = options.steps;
    traceOptions.scaleDivisor = options.scaleDivisor;
    traceOptions.seed = options.seed;
    traceOptions.batch = static_cast<uint32_t>(number("batch", 0));
    traceOptions.sequence = static_cast<uint32_t>(number("sequence", 0));
    if (!bad.empty()) return usage(bad);
    if (model.empty() || out.empty()) return usage("gen needs --model and --out");
    if (!args.empty()) return usage("unknown option --" + args.begin()->first);
    auto trace = generateModelTrace(model, traceOptions);
    if (!trace) {
      std::cerr << "tiersim: " << trace.error().message() << "\n";
      return 1;
    }
    if (auto written = writeTraceFile(*trace, out); !written) {
      std::cerr << "tiersim: " << written.error().message() << "\n";
      return 1;
    }
    std::cout << out << ": " << trace->accesses.size() << " records, " << trace->marks.size() << " marks, "
              << trace->totalPages << " pages\n";
    return 0;
  }

  if (command == "info" || command == "run") {
    const std::string traceFile = take("trace", "");
    const std::string model = take("model", "");
    Trace trace;
    if (!traceFile.empty()) {
      ReadTraceStats stats;
      auto read = readTraceFile(traceFile, &stats);
      if (!read) {
        std::cerr << "tiersim: " << read.error().message() << "\n";
        return 1;
      }
      trace = std::move(*read);
      if (stats.droppedAccesses > 0) {
        std::cerr << "tiersim: " << stats.droppedAccesses << " accesses outside every region dropped\n";
      }
      if (stats.incompleteLastChunk) {
        std::cerr << "tiersim: the file ends inside a chunk (still being recorded, or cut short): read up to it\n";
      }
      if (!trace.computeOnlyTime) {
        // The recorder cannot tell compute from stall time: its timestamps are the recorded run's.
        std::cerr << "tiersim: the trace's times are the recorded run's wall time, which holds that run's own "
                     "memory stalls; the model adds its stalls on top, so step times are upper bounds and "
                     "compare between policies, not with the recorded run\n";
      }
    } else if (!model.empty() && command == "run") {
      if (!warmupFits()) return usage(warmupProblem);
      ModelTraceOptions traceOptions;
      traceOptions.steps = options.steps;
      traceOptions.scaleDivisor = options.scaleDivisor;
      traceOptions.seed = options.seed;
      auto generated = generateModelTrace(model, traceOptions);
      if (!generated) {
        std::cerr << "tiersim: " << generated.error().message() << "\n";
        return 1;
      }
      trace = std::move(*generated);
    } else {
      return usage(command + " needs --trace" + (command == "run" ? " or --model" : ""));
    }
    if (command == "info") {
      if (!args.empty()) return usage("unknown option --" + args.begin()->first);
      std::cout << "trace " << trace.name << ": " << trace.description << "\n"
                << "  " << trace.regions.size() << " regions, " << trace.totalPages << " pages, "
                << trace.accesses.size() << " records, " << trace.marks.size() << " marks, sample period "
                << trace.samplePeriod << ", scale 1/" << trace.scaleDivisor << "\n";
      return 0;
    }
    const std::string policyName = take("policy", "");
    const double fraction = number("fraction", 0.2);
    if (!bad.empty()) return usage(bad);
    if (!args.empty()) return usage("unknown option --" + args.begin()->first);
    const auto* entry = findPolicy(policyName);
    if (entry == nullptr) return usage("unknown policy '" + policyName + "'");
    auto config = makeSimConfig(options, trace, fraction, *entry);
    if (!config) {
      std::cerr << "tiersim: " << config.error().message() << "\n";
      return 1;
    }
    auto policy = entry->make(makePolicyContext(trace, *config));
    auto result = simulate(trace, *policy, *config, entry->offline);
    if (!result) {
      std::cerr << "tiersim: " << result.error().message() << "\n";
      return 1;
    }
    std::printf("policy %s, trace %s, fast %.0f%%\n", result->policy.c_str(), result->trace.c_str(), fraction * 100);
    std::printf("step  time_ms  compute_ms  stall_ms  migration_ms  hint_ms  migrated_MiB  fast_hit\n");
    for (const auto& s : result->steps) {
      std::printf("%4llu %8.3f %11.3f %9.3f %13.3f %8.3f %13.2f %9.3f\n", static_cast<unsigned long long>(s.step),
                  s.timeNs / 1e6, s.computeNs / 1e6, s.stallNs / 1e6, s.migrationNs / 1e6, s.hintFaultNs / 1e6,
                  static_cast<double>(s.migratedBytes) / (1 << 20),
                  s.totalLines ? static_cast<double>(s.fastLines) / static_cast<double>(s.totalLines) : 0.0);
    }
    std::printf("mean step %.3f ms, migrated %.2f MiB/step, promoted %llu, demoted %llu, refused %llu, "
                "cancelled %llu, still queued at the end %llu, samples %llu, hint faults %llu\n",
                result->meanStepNs / 1e6, result->meanMigratedBytesPerStep / (1 << 20),
                static_cast<unsigned long long>(result->promotedPages),
                static_cast<unsigned long long>(result->demotedPages),
                static_cast<unsigned long long>(result->refusedMoves),
                static_cast<unsigned long long>(result->cancelledMoves),
                static_cast<unsigned long long>(result->queuedPagesAtEnd),
                static_cast<unsigned long long>(result->samples), static_cast<unsigned long long>(result->hintFaults));
    return 0;
  }
  return usage("unknown command '" + command + "'");
}
