#include "policy/Selection.h"

#include <glpk.h>

#include <algorithm>
#include <cmath>
#include <memory>
#include <numeric>

namespace tt::policy {
namespace {

uint64_t quotaOf(const SelectionProblem& p, uint32_t group) {
  if (group >= p.groupQuotaBytes.size() || p.groupQuotaBytes[group] == 0) return UINT64_MAX;
  return p.groupQuotaBytes[group];
}

// Running usage of a candidate selection, for O(1) feasibility checks of exchanges.
struct Usage {
  const SelectionProblem& p;
  uint64_t total = 0;
  std::vector<uint64_t> group;
  explicit Usage(const SelectionProblem& problem) : p(problem) {
    uint32_t groups = 0;
    for (const auto& it : p.items) groups = std::max(groups, it.group + 1);
    group.assign(std::max<size_t>(groups, p.groupQuotaBytes.size()), 0);
  }
  void add(size_t i) {
    total += p.items[i].sizeBytes;
    group[p.items[i].group] += p.items[i].sizeBytes;
  }
  void remove(size_t i) {
    total -= p.items[i].sizeBytes;
    group[p.items[i].group] -= p.items[i].sizeBytes;
  }
  [[nodiscard]] bool fits(size_t i) const {
    const auto& it = p.items[i];
    return total + it.sizeBytes <= p.budgetBytes && group[it.group] + it.sizeBytes <= quotaOf(p, it.group);
  }
};

}  // namespace

bool feasible(const SelectionProblem& problem, const std::vector<uint8_t>& chosen) {
  Usage u(problem);
  for (size_t i = 0; i < chosen.size(); ++i)
    if (chosen[i]) u.add(i);
  if (u.total > problem.budgetBytes) return false;
  for (uint32_t g = 0; g < u.group.size(); ++g)
    if (u.group[g] > quotaOf(problem, g)) return false;
  return true;
}

double objectiveOf(const SelectionProblem& problem, const std::vector<uint8_t>& chosen) {
  double sum = 0;
  for (size_t i = 0; i < chosen.size(); ++i)
    if (chosen[i]) sum += problem.items[i].value;
  return sum;
}

namespace {

double densityOf(const SelectionItem& it) { return it.value / static_cast<double>(std::max<uint64_t>(1, it.sizeBytes)); }

// Adds every unchosen item that still fits, densest first.
void refill(const SelectionProblem& problem, const std::vector<size_t>& order, std::vector<uint8_t>& chosen, Usage& use) {
  for (size_t i : order)
    if (!chosen[i] && use.fits(i)) {
      chosen[i] = 1;
      use.add(i);
    }
  (void)problem;
}

// Work budget of one improve() call, in candidate examinations (see exchangeWorkLimit in the
// header). The floor leaves small instances their full passes (random ones of up to 200 items
// take under 15 thousand examinations); the per-item share keeps the bound linear in the item
// count; the per-item cap stops one chosen item whose most valuable rivals all fail to fit from
// spending the budget of the others (uncut, the scan for one item of a thousand-item instance
// can pass several thousand pairs that do not fit).
constexpr uint64_t kExchangeWorkFloor = uint64_t{1} << 22;
constexpr uint64_t kExchangeWorkPerItem = 64;
constexpr uint64_t kExchangeCandidatesPerItem = 4096;

// Exchange passes: replace one chosen item by one or two unchosen ones when that gains value and
// fits, then refill. Each accepted exchange strictly increases the objective; rounds are capped.
// The planner runs this on every block of every plan, and the daemon's watchdog keep-alives go
// out only between plans, so the work is bounded (exchangeWorkLimit): a pass stops scanning for
// a chosen item once the value order says nothing further can beat the best exchange found (an
// exact cut: the same exchanges as a full scan), after kExchangeCandidatesPerItem examinations of
// its own, and for good once the budget is spent. Every step keeps the selection feasible, and
// no unchosen item fits after any step, so stopping early only forgoes exchanges. Adds the
// examinations made to `work`.
void improve(const SelectionProblem& problem, const std::vector<size_t>& order, std::vector<uint8_t>& chosen, Usage& use,
             uint64_t& work) {
  const size_t n = problem.items.size();
  const uint64_t limit = exchangeWorkLimit(order.size());
  // A refill costs order.size() and follows an exchange found within passLimit, so the total
  // stays within limit.
  const uint64_t passLimit = limit - order.size();
  uint64_t spent = 0;
  std::vector<size_t> out;
  for (int round = 0; round < 16 && spent < passLimit; ++round) {
    bool improved = false;
    out.clear();
    for (size_t i : order)
      if (!chosen[i]) out.push_back(i);
    if (out.empty()) break;
    std::sort(out.begin(), out.end(), [&](size_t a, size_t b) { return problem.items[a].value > problem.items[b].value; });
    // The smallest unchosen item: where the budget has less room than that, no item fits, and
    // the pair search below need not look (with equal blocks and a full budget it scanned every
    // pair for every chosen item: cubic, seconds for a few thousand blocks). `out` only loses
    // members during the round, so it stays a lower bound; the refill also sees the items
    // exchanged out, hence smallestUnchosen.
    uint64_t smallestOut = UINT64_MAX;
    for (size_t i : out) smallestOut = std::min(smallestOut, problem.items[i].sizeBytes);
    uint64_t smallestUnchosen = smallestOut;
    auto noneFits = [&] { return use.total + smallestOut > problem.budgetBytes; };
    for (size_t in = 0; in < n && spent < passLimit; ++in) {
      if (!chosen[in]) continue;
      ++spent;
      use.remove(in);
      const double base = problem.items[in].value;
      double bestGain = 1e-12 * std::max(1.0, std::abs(base));
      std::pair<size_t, size_t> best{SIZE_MAX, SIZE_MAX};
      const uint64_t room = use.total < problem.budgetBytes ? problem.budgetBytes - use.total : 0;
      // Two candidates take at least twice the smallest's size; short of that only single
      // exchanges can fit, and the value bound below counts one candidate, not two.
      const bool pairsMayFit = room / 2 >= smallestOut;
      uint64_t examined = 0;
      for (size_t a = 0; a < out.size() && room >= smallestOut; ++a) {
        const size_t ia = out[a];
        // Sorted by value: no candidate from here on, alone or with a partner after it, gains
        // more than this, so the rest of the scan could not change the choice.
        const double reach = pairsMayFit && a + 1 < out.size() ? problem.items[ia].value + problem.items[out[a + 1]].value
                                                               : problem.items[ia].value;
        if (reach - base <= bestGain) break;
        if (examined >= kExchangeCandidatesPerItem || spent >= passLimit) break;
        ++examined;
        ++spent;
        if (chosen[ia] || !use.fits(ia)) continue;
        if (problem.items[ia].value - base > bestGain) {
          bestGain = problem.items[ia].value - base;
          best = {ia, SIZE_MAX};
        }
        use.add(ia);
        for (size_t b = a + 1; b < out.size() && !noneFits(); ++b) {
          const size_t ib = out[b];
          if (problem.items[ia].value + problem.items[ib].value - base <= bestGain) break;  // sorted by value
          if (examined >= kExchangeCandidatesPerItem || spent >= passLimit) break;
          ++examined;
          ++spent;
          if (!chosen[ib] && use.fits(ib)) {
            bestGain = problem.items[ia].value + problem.items[ib].value - base;
            best = {ia, ib};
            break;
          }
        }
        use.remove(ia);
      }
      if (best.first == SIZE_MAX) {
        use.add(in);
        continue;
      }
      chosen[in] = 0;
      smallestUnchosen = std::min(smallestUnchosen, problem.items[in].sizeBytes);
      chosen[best.first] = 1;
      use.add(best.first);
      if (best.second != SIZE_MAX) {
        chosen[best.second] = 1;
        use.add(best.second);
      }
      // Where not even the smallest unchosen item fits, the refill would add nothing.
      if (use.total + smallestUnchosen <= problem.budgetBytes) {
        spent += order.size();
        refill(problem, order, chosen, use);
      }
      improved = true;
    }
    if (!improved) break;
  }
  work += spent;
}

// Dynamic programming on sizes rounded up to a capacity unit (so every DP solution is feasible):
// a 0/1 knapsack per group under its quota, then the groups combined under the global budget.
// Exact when the unit is a page and the budget is small; a close approximation otherwise.
std::vector<uint8_t> roundedDp(const SelectionProblem& problem, const std::vector<size_t>& positive) {
  const size_t n = problem.items.size();
  std::vector<uint8_t> chosen(n, 0);
  if (positive.empty() || problem.budgetBytes == 0) return chosen;
  uint32_t groups = 0;
  for (size_t i : positive) groups = std::max(groups, problem.items[i].group + 1);
  const double cellBudget = 4e6, combineBudget = 16e6;
  double k = std::min(8192.0, cellBudget / static_cast<double>(positive.size()));
  if (groups > 1) k = std::min(k, std::sqrt(combineBudget / groups));
  k = std::max(k, 64.0);
  const uint64_t page = 4096;
  uint64_t unit = std::max<uint64_t>(page, static_cast<uint64_t>(std::ceil(static_cast<double>(problem.budgetBytes) / k)));
  const auto units = [&](uint64_t bytes) { return static_cast<size_t>(bytes / unit); };
  const size_t cap = units(problem.budgetBytes);
  if (cap == 0) return chosen;

  std::vector<std::vector<size_t>> members(groups);
  for (size_t i : positive) members[problem.items[i].group].push_back(i);
  std::vector<std::vector<double>> bestOf(groups);
  std::vector<std::vector<uint8_t>> keep(groups);
  std::vector<size_t> capOf(groups);
  for (uint32_t g = 0; g < groups; ++g) {
    const size_t c = std::min(cap, units(std::min(problem.budgetBytes, quotaOf(problem, g))));
    capOf[g] = c;
    std::vector<double> dp(c + 1, 0.0);
    keep[g].assign(members[g].size() * (c + 1), 0);
    for (size_t m = 0; m < members[g].size(); ++m) {
      const SelectionItem& it = problem.items[members[g][m]];
      const size_t w = static_cast<size_t>((it.sizeBytes + unit - 1) / unit);
      if (w > c) continue;
      for (size_t x = c; x + 1 > w; --x)
        if (dp[x - w] + it.value > dp[x]) {
          dp[x] = dp[x - w] + it.value;
          keep[g][m * (c + 1) + x] = 1;
        }
    }
    bestOf[g] = std::move(dp);
  }
  // Combine: total[x] = best value of groups 0..g within x units; choice[g][x] = units given to g.
  std::vector<double> total(cap + 1, 0.0);
  std::vector<std::vector<size_t>> choice(groups, std::vector<size_t>(cap + 1, 0));
  for (size_t x = 0; x <= cap; ++x) {
    choice[0][x] = std::min(x, capOf[0]);
    total[x] = bestOf[0][choice[0][x]];
  }
  for (uint32_t g = 1; g < groups; ++g) {
    std::vector<double> next(cap + 1, 0.0);
    for (size_t x = 0; x <= cap; ++x)
      for (size_t y = 0; y <= std::min(x, capOf[g]); ++y) {
        const double v = total[x - y] + bestOf[g][y];
        if (v > next[x]) {
          next[x] = v;
          choice[g][x] = y;
        }
      }
    total = std::move(next);
  }
  size_t x = cap;
  for (uint32_t g = groups; g-- > 0;) {
    size_t c = choice[g][x];
    x -= c;
    const size_t stride = capOf[g] + 1;
    for (size_t m = members[g].size(); m-- > 0;) {
      if (!keep[g][m * stride + c]) continue;
      const SelectionItem& it = problem.items[members[g][m]];
      chosen[members[g][m]] = 1;
      c -= static_cast<size_t>((it.sizeBytes + unit - 1) / unit);
    }
  }
  return chosen;
}

}  // namespace

uint64_t exchangeWorkLimit(size_t candidates) {
  return kExchangeWorkFloor + kExchangeWorkPerItem * static_cast<uint64_t>(candidates);
}

Selection selectHeuristic(const SelectionProblem& problem) {
  const size_t n = problem.items.size();
  std::vector<size_t> order;
  for (size_t i = 0; i < n; ++i)
    if (problem.items[i].value > 0) order.push_back(i);
  std::stable_sort(order.begin(), order.end(),
                   [&](size_t a, size_t b) { return densityOf(problem.items[a]) > densityOf(problem.items[b]); });

  Selection s;
  s.chosen.assign(n, 0);
  {
    Usage use(problem);
    refill(problem, order, s.chosen, use);
    improve(problem, order, s.chosen, use, s.exchangeWork);
    s.objective = objectiveOf(problem, s.chosen);
  }
  // A second candidate from rounded dynamic programming, for instances small enough to afford it.
  if (!order.empty() && order.size() <= 4096) {
    std::vector<uint8_t> dp = roundedDp(problem, order);
    Usage use(problem);
    for (size_t i = 0; i < n; ++i)
      if (dp[i]) use.add(i);
    refill(problem, order, dp, use);
    improve(problem, order, dp, use, s.exchangeWork);
    const double value = objectiveOf(problem, dp);
    if (value > s.objective && feasible(problem, dp)) {
      s.chosen = std::move(dp);
      s.objective = value;
    }
  }
  // The classic guard of density-greedy knapsack: one big valuable item may beat the whole fill.
  size_t bestSingle = SIZE_MAX;
  for (size_t i : order) {
    const auto& it = problem.items[i];
    if (it.sizeBytes <= problem.budgetBytes && it.sizeBytes <= quotaOf(problem, it.group) &&
        (bestSingle == SIZE_MAX || it.value > problem.items[bestSingle].value))
      bestSingle = i;
  }
  if (bestSingle != SIZE_MAX && problem.items[bestSingle].value > s.objective) {
    s.chosen.assign(n, 0);
    s.chosen[bestSingle] = 1;
    s.objective = problem.items[bestSingle].value;
  }
  return s;
}

Result<Selection> selectExact(const SelectionProblem& problem, int timeLimitMs) {
  const size_t n = problem.items.size();
  Selection s;
  s.chosen.assign(n, 0);
  if (n == 0) return s;
  std::unique_ptr<glp_prob, void (*)(glp_prob*)> lp(glp_create_prob(), glp_delete_prob);
  glp_set_obj_dir(lp.get(), GLP_MAX);
  // Rows: 1 = global budget, 2.. = one per group with a quota.
  uint32_t groups = 0;
  for (const auto& it : problem.items) groups = std::max(groups, it.group + 1);
  std::vector<int> rowOfGroup(groups, 0);
  int rows = 1;
  for (uint32_t g = 0; g < groups; ++g)
    if (quotaOf(problem, g) != UINT64_MAX) rowOfGroup[g] = ++rows;
  glp_add_rows(lp.get(), rows);
  glp_set_row_bnds(lp.get(), 1, GLP_UP, 0, static_cast<double>(problem.budgetBytes));
  for (uint32_t g = 0; g < groups; ++g)
    if (rowOfGroup[g] != 0) glp_set_row_bnds(lp.get(), rowOfGroup[g], GLP_UP, 0, static_cast<double>(quotaOf(problem, g)));
  glp_add_cols(lp.get(), static_cast<int>(n));
  std::vector<int> ia{0}, ja{0};
  std::vector<double> ar{0};
  for (size_t i = 0; i < n; ++i) {
    const int col = static_cast<int>(i) + 1;
    const auto& it = problem.items[i];
    glp_set_col_kind(lp.get(), col, GLP_BV);
    // Items that can only lose value are fixed out, as in the heuristic.
    if (it.value <= 0) glp_set_col_bnds(lp.get(), col, GLP_FX, 0, 0);
    glp_set_obj_coef(lp.get(), col, it.value);
    ia.push_back(1);
    ja.push_back(col);
    ar.push_back(static_cast<double>(it.sizeBytes));
    if (rowOfGroup[it.group] != 0) {
      ia.push_back(rowOfGroup[it.group]);
      ja.push_back(col);
      ar.push_back(static_cast<double>(it.sizeBytes));
    }
  }
  glp_load_matrix(lp.get(), static_cast<int>(ar.size()) - 1, ia.data(), ja.data(), ar.data());
  glp_iocp params;
  glp_init_iocp(&params);
  params.presolve = GLP_ON;
  params.msg_lev = GLP_MSG_OFF;
  params.tm_lim = timeLimitMs;
  params.mip_gap = 0;
  const int rc = glp_intopt(lp.get(), &params);
  if (rc != 0) return logicError("GLPK glp_intopt failed with code " + std::to_string(rc));
  if (glp_mip_status(lp.get()) != GLP_OPT) return logicError("GLPK found no proven optimum within the time limit");
  for (size_t i = 0; i < n; ++i) s.chosen[i] = glp_mip_col_val(lp.get(), static_cast<int>(i) + 1) > 0.5 ? 1 : 0;
  s.objective = objectiveOf(problem, s.chosen);
  return s;
}

}  // namespace tt::policy
