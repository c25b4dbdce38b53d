// The selection problem at the heart of the planner: which items (blocks of pages) to keep in the
// fast tier, under a global byte budget and per-group (per-process) byte quotas, maximising the
// sum of the chosen items' net values. A 0/1 multi-constraint knapsack.
//
// selectHeuristic() is what the daemon runs: the best of three candidates, each polished by 1-for-1
// and 1-for-2 exchange passes and a refill: (a) density-greedy; (b) dynamic programming on sizes
// rounded up to a capacity unit (a knapsack per process under its quota, combined under the global
// budget; the unit is chosen so the tables stay within a few million cells, exact when the budget
// is a few thousand pages; skipped above 4096 candidate items, where items are small against the
// budget and greedy is close to optimal anyway); (c) the single most valuable item.
// The exchange passes run on every plan over every block, so their work is bounded: at most
// exchangeWorkLimit(candidates) examinations per polished candidate, linear in the item count,
// plus a sort of the unchosen items in each of at most 16 rounds. Small instances (hundreds of
// items) stay far within the bound and get the full passes; on larger ones the passes may stop
// early, which leaves a feasible selection no unchosen item fits into, only fewer exchanges.
// selectExact() solves the same problem as an integer program with GLPK; tests use it to bound
// the heuristic's gap on small instances.
#pragma once

#include <cstdint>
#include <vector>

#include "core/Result.h"

namespace tt::policy {

struct SelectionItem {
  double value = 0;        // net gain if the item is fast; items with value <= 0 are never chosen
  uint64_t sizeBytes = 0;  // fast-tier bytes the item occupies
  uint32_t group = 0;      // index into groupQuotaBytes
};

struct SelectionProblem {
  std::vector<SelectionItem> items;
  uint64_t budgetBytes = 0;
  std::vector<uint64_t> groupQuotaBytes;  // 0 = no quota for that group; missing = no quota
};

struct Selection {
  std::vector<uint8_t> chosen;  // per item
  double objective = 0;
  // Candidate examinations the exchange passes made, summed over the candidates they polished
  // (two when the dynamic program runs, one otherwise); each pass within exchangeWorkLimit.
  uint64_t exchangeWork = 0;
};

// True when `chosen` respects the budget and every quota.
[[nodiscard]] bool feasible(const SelectionProblem& problem, const std::vector<uint8_t>& chosen);
[[nodiscard]] double objectiveOf(const SelectionProblem& problem, const std::vector<uint8_t>& chosen);

[[nodiscard]] Selection selectHeuristic(const SelectionProblem& problem);

// The most examinations one exchange pass of selectHeuristic makes over `candidates` items with
// positive value: a floor of about 4 million plus 64 per item (a refill, which scans every item
// once, counts as that many). Deterministic: the same problem stops at the same point.
[[nodiscard]] uint64_t exchangeWorkLimit(size_t candidates);

// Exact optimum by branch and cut (GLPK glp_intopt). Fails if GLPK reports no optimal solution
// within `timeLimitMs`.
[[nodiscard]] Result<Selection> selectExact(const SelectionProblem& problem, int timeLimitMs = 10000);

}  // namespace tt::policy
