// The DNN trace generator: model shapes, tensor sizes, phase order, marks.
#include <gtest/gtest.h>

#include <map>

#include "traces/ModelTraces.h"

namespace tt::tiersim {
namespace {

uint64_t params(const std::string& name) {
  auto model = buildModel(name);
  EXPECT_TRUE(model.ok()) << name;
  return model.ok() ? parameterCount(*model) : 0;
}

TEST(TiersimTraceGen, ParameterCountsMatchThePublishedModels) {
  // torchvision / Hugging Face parameter counts of the same architectures.
  EXPECT_EQ(params("vgg16"), 138'357'544U);
  EXPECT_EQ(params("resnet50"), 25'557'032U);
  EXPECT_EQ(params("gpt2-small"), 124'439'808U);
  // bert-base-uncased (109,482,240) plus a 2-class classification head (1,538).
  EXPECT_EQ(params("bert-base"), 109'482'240U + 1'538U);
}

// One op of a generated step: it reads (its inputs, its weights; backward: the output gradient,
// the saved tensors) and then writes, so a read after a write starts the next op. Named by the
// region it writes first.
struct Op {
  std::string name;
  std::map<std::string, uint64_t> reads;  // region -> pages read
};

std::vector<Op> opsOf(const Trace& trace, uint64_t step, const std::string& phase) {
  std::vector<const TraceRegion*> regionOf(trace.totalPages, nullptr);
  for (const auto& r : trace.regions) {
    for (uint64_t i = 0; i < r.pages; ++i) regionOf[r.firstPage + i] = &r;
  }
  uint64_t begin = UINT64_MAX;
  uint64_t end = UINT64_MAX;
  for (const auto& m : trace.marks) {
    if (m.step != step) continue;
    if (begin != UINT64_MAX && end == UINT64_MAX && m.type != MarkType::StepBegin) end = m.timestampNs;
    if (m.type == MarkType::PhaseBegin && m.phase == phase) begin = m.timestampNs;
  }
  std::vector<Op> ops;
  bool wrote = true;
  for (const auto& a : trace.accesses) {
    if (a.timeNs < begin || a.timeNs >= end) continue;
    if (!a.write && wrote) ops.emplace_back();
    if (ops.empty()) ops.emplace_back();
    if (a.write && ops.back().name.empty()) ops.back().name = regionOf[a.page]->name;
    if (!a.write) ops.back().reads[regionOf[a.page]->name] += 1;
    wrote = a.write;
  }
  return ops;
}

const Op* findOp(const std::vector<Op>& ops, const std::string& name) {
  for (const auto& op : ops) {
    if (op.name == name) return &op;
  }
  return nullptr;
}

uint64_t pagesOf(const Trace& trace, const std::string& name) {
  for (const auto& r : trace.regions) {
    if (r.name == name) return r.pages;
  }
  return 0;
}

// Pages of `region` read in one phase of one step, all ops together.
uint64_t readsIn(const std::vector<Op>& ops, const std::string& region) {
  uint64_t pages = 0;
  for (const auto& op : ops) {
    const auto it = op.reads.find(region);
    if (it != op.reads.end()) pages += it->second;
  }
  return pages;
}

Trace oneStep(const std::string& model) {
  ModelTraceOptions options;
  options.steps = 1;
  options.scaleDivisor = 64;
  auto trace = generateModelTrace(model, options);
  EXPECT_TRUE(trace.ok()) << model;
  return trace.ok() ? *trace : Trace{};
}

// `op` reads every page of each of `tensors` once.
void expectReads(const Trace& trace, const std::vector<Op>& ops, const std::string& op,
                 const std::vector<std::string>& tensors) {
  const Op* found = findOp(ops, op);
  ASSERT_NE(found, nullptr) << op;
  for (const auto& tensor : tensors) {
    ASSERT_GT(pagesOf(trace, tensor), 0U) << tensor;
    const auto it = found->reads.find(tensor);
    EXPECT_TRUE(it != found->reads.end() && it->second == pagesOf(trace, tensor)) << op << " reads " << tensor;
  }
}

// A bottleneck block's input feeds its first conv and the skip connection: the residual add reads
// both operands, and the first block's downsample reads the block's input (not a sibling's output).
TEST(TiersimTraceGen, ResNetResidualsReadTheBlockInput) {
  const Trace trace = oneStep("resnet50");
  const auto forward = opsOf(trace, 0, "forward");
  // maxpool.out: layer1.0's first conv and its downsample; layer1.2.add.out: layer2.0's.
  for (const std::string tensor : {"maxpool.out", "layer1.2.add.out", "layer1.0.add.out", "layer3.5.add.out"}) {
    EXPECT_EQ(readsIn(forward, tensor), 2 * pagesOf(trace, tensor)) << tensor << " is read in two passes";
  }
  expectReads(trace, forward, "layer2.0.downsample.conv", {"layer1.2.add.out"});
  const Op* downsample = findOp(forward, "layer2.0.downsample.conv");
  ASSERT_NE(downsample, nullptr);
  EXPECT_EQ(downsample->reads.count("layer2.0.3.bn"), 0U) << "a sibling's output is not the block's input";
  expectReads(trace, forward, "layer2.0.add.out", {"layer2.0.3.bn", "layer2.0.downsample.bn"});
  expectReads(trace, forward, "layer2.1.add.out", {"layer2.1.3.bn", "layer2.0.add.out"});
  // Backward reads what forward read: the downsample's weight gradient needs the block's input.
  const auto backward = opsOf(trace, 0, "backward");
  expectReads(trace, backward, "layer2.0.downsample.conv.weight.grad", {"layer1.2.add.out"});
  const Op* downsampleBackward = findOp(backward, "layer2.0.downsample.conv.weight.grad");
  ASSERT_NE(downsampleBackward, nullptr);
  EXPECT_EQ(downsampleBackward->reads.count("layer2.0.3.bn"), 0U);
}

// A transformer block's residuals: BERT's post-LN LayerNorms read the sub-layer's output and its
// input; GPT-2's adds read the sub-layer's output and the residual stream.
TEST(TiersimTraceGen, TransformerResidualsReadTheSublayerInput) {
  const Trace bert = oneStep("bert-base");
  const auto bertForward = opsOf(bert, 0, "forward");
  expectReads(bert, bertForward, "encoder.0.attn.ln.out", {"encoder.0.attn.proj.out", "embeddings.ln"});
  expectReads(bert, bertForward, "encoder.0.out.ln.out", {"encoder.0.mlp.proj.out", "encoder.0.attn.ln.out"});
  expectReads(bert, bertForward, "encoder.1.attn.ln.out", {"encoder.1.attn.proj.out", "encoder.0.out.ln.out"});
  for (const std::string tensor : {"embeddings.ln", "encoder.0.attn.ln.out", "encoder.5.out.ln.out"}) {
    EXPECT_EQ(readsIn(bertForward, tensor), 2 * pagesOf(bert, tensor)) << tensor << " is read in two passes";
  }

  const Trace gpt2 = oneStep("gpt2-small");
  const auto gptForward = opsOf(gpt2, 0, "forward");
  expectReads(gpt2, gptForward, "h.0.attn.add.out", {"h.0.attn.proj.out", "embeddings.sum"});
  expectReads(gpt2, gptForward, "h.0.ln_2.out", {"h.0.attn.add.out"});
  expectReads(gpt2, gptForward, "h.0.mlp.add.out", {"h.0.mlp.proj.out", "h.0.attn.add.out"});
  expectReads(gpt2, gptForward, "h.1.ln_1.out", {"h.0.mlp.add.out"});
  expectReads(gpt2, gptForward, "ln_f.out", {"h.11.mlp.add.out"});
  for (const std::string tensor : {"embeddings.sum", "h.0.attn.add.out", "h.5.mlp.add.out"}) {
    EXPECT_EQ(readsIn(gptForward, tensor), 2 * pagesOf(gpt2, tensor)) << tensor << " is read in two passes";
  }
}

TEST(TiersimTraceGen, BertHasFiveHundredTwelvePositions) {
  EXPECT_TRUE(buildModel("bert-base", 0, 512).ok());
  auto longer = buildModel("bert-base", 0, 1024);
  ASSERT_FALSE(longer.ok());
  EXPECT_NE(longer.error().message().find("512 positions"), std::string::npos) << longer.error().message();
  EXPECT_FALSE(generateModelTrace("bert-base", ModelTraceOptions{0, 513, 1, 64}).ok());
}

TEST(TiersimTraceGen, UnknownModelIsAnError) {
  auto model = buildModel("alexnet");
  ASSERT_FALSE(model.ok());
  EXPECT_NE(model.error().message().find("unknown model"), std::string::npos);
}

// At scale 1 every weight, gradient and Adam moment region holds its tensor, page-rounded.
TEST(TiersimTraceGen, TensorBytesMatchParameterCounts) {
  for (const std::string name : {"resnet50", "bert-base"}) {
    auto model = buildModel(name);
    ASSERT_TRUE(model.ok());
    ModelTraceOptions options;
    options.steps = 1;
    options.scaleDivisor = 1;
    auto trace = generateModelTrace(name, options);
    ASSERT_TRUE(trace.ok()) << trace.error().message();
    std::map<RegionKind, uint64_t> pages;
    std::map<std::string, uint64_t> regionPages;
    for (const auto& r : trace->regions) {
      pages[r.kind] += r.pages;
      regionPages[r.name] = r.pages;
    }
    uint64_t expected = 0;
    for (const auto& p : model->params) {
      const uint64_t tensorPages = (p.elements * 4 + 4095) / 4096;
      EXPECT_EQ(regionPages[p.name], tensorPages) << p.name;
      EXPECT_EQ(regionPages[p.name + ".grad"], tensorPages) << p.name;
      EXPECT_EQ(regionPages[p.name + ".exp_avg"], tensorPages) << p.name;
      EXPECT_EQ(regionPages[p.name + ".exp_avg_sq"], tensorPages) << p.name;
      expected += tensorPages;
    }
    EXPECT_EQ(pages[RegionKind::Weight], expected);
    EXPECT_EQ(pages[RegionKind::Gradient], expected);
    EXPECT_EQ(pages[RegionKind::OptimizerState], 2 * expected);
    const uint64_t bytes = pages[RegionKind::Weight] * 4096;
    EXPECT_GE(bytes, parameterCount(*model) * 4);
    EXPECT_LT(bytes, parameterCount(*model) * 4 + model->params.size() * 4096);
  }
}

TEST(TiersimTraceGen, MarksAndPhasesAreOrdered) {
  ModelTraceOptions options;
  options.steps = 3;
  options.scaleDivisor = 64;
  auto trace = generateModelTrace("gpt2-small", options);
  ASSERT_TRUE(trace.ok());
  ASSERT_EQ(trace->marks.size(), 3U * 5);
  for (uint64_t step = 0; step < 3; ++step) {
    const auto* m = &trace->marks[step * 5];
    EXPECT_EQ(m[0].type, MarkType::StepBegin);
    EXPECT_EQ(m[1].type, MarkType::PhaseBegin);
    EXPECT_EQ(m[1].phase, "forward");
    EXPECT_EQ(m[2].phase, "backward");
    EXPECT_EQ(m[3].phase, "optimizer");
    EXPECT_EQ(m[4].type, MarkType::StepEnd);
    for (int i = 0; i < 5; ++i) EXPECT_EQ(m[i].step, step);
    EXPECT_EQ(m[0].timestampNs, m[1].timestampNs) << "forward begins with the step";
    for (int i = 2; i < 5; ++i) EXPECT_LT(m[i - 1].timestampNs, m[i].timestampNs);
  }
  ASSERT_TRUE(validateTrace(*trace).ok());
}

// Forward writes activations only, backward writes gradients (in reverse layer order), the
// optimizer writes weights and moments; every step touches the same pages (reuse across steps).
TEST(TiersimTraceGen, EachPhaseTouchesWhatTrainingTouches) {
  ModelTraceOptions options;
  options.steps = 2;
  options.scaleDivisor = 64;
  auto trace = generateModelTrace("resnet50", options);
  ASSERT_TRUE(trace.ok());
  std::vector<const TraceRegion*> regionOf(trace->totalPages, nullptr);
  for (const auto& r : trace->regions) {
    for (uint64_t i = 0; i < r.pages; ++i) regionOf[r.firstPage + i] = &r;
  }
  std::map<std::string, std::map<RegionKind, uint64_t>> writes;
  std::map<std::string, std::map<RegionKind, uint64_t>> reads;
  std::vector<std::string> firstGradientWrites;
  std::vector<std::vector<uint64_t>> pagesPerStep(2);
  size_t mark = 0;
  std::string phase = "init";
  uint64_t step = 0;
  for (const auto& a : trace->accesses) {
    while (mark < trace->marks.size() && trace->marks[mark].timestampNs <= a.timeNs) {
      const auto& m = trace->marks[mark++];
      if (m.type == MarkType::PhaseBegin) phase = m.phase;
      if (m.type == MarkType::StepBegin) step = m.step;
    }
    const TraceRegion* r = regionOf[a.page];
    ASSERT_NE(r, nullptr);
    (a.write ? writes : reads)[phase][r->kind] += 1;
    if (phase == "backward" && a.write && r->kind == RegionKind::Gradient && firstGradientWrites.size() < 1) {
      firstGradientWrites.push_back(r->name);
    }
    if (phase != "init") pagesPerStep[step].push_back(a.page);
  }
  EXPECT_GT(writes["forward"][RegionKind::Activation], 0U);
  EXPECT_EQ(writes["forward"][RegionKind::Gradient] + writes["forward"][RegionKind::OptimizerState] +
                writes["forward"][RegionKind::Weight],
            0U);
  EXPECT_GT(reads["forward"][RegionKind::Weight], 0U);
  EXPECT_GT(writes["backward"][RegionKind::Gradient], 0U);
  EXPECT_GT(reads["backward"][RegionKind::Activation], 0U);
  EXPECT_EQ(writes["backward"][RegionKind::Activation] + writes["backward"][RegionKind::OptimizerState], 0U);
  EXPECT_GT(writes["optimizer"][RegionKind::OptimizerState], 0U);
  EXPECT_GT(writes["optimizer"][RegionKind::Weight], 0U);
  EXPECT_EQ(writes["optimizer"][RegionKind::Activation] + writes["optimizer"][RegionKind::Gradient], 0U);
  EXPECT_GT(writes["init"][RegionKind::Weight], 0U) << "model construction first-touches the weights";
  ASSERT_EQ(firstGradientWrites.size(), 1U);
  EXPECT_EQ(firstGradientWrites[0], "fc.weight.grad") << "backward starts at the last layer";
  EXPECT_EQ(pagesPerStep[0], pagesPerStep[1]) << "a CNN step touches the same pages every step";
}

TEST(TiersimTraceGen, ScaleDividesFootprintAndTime) {
  ModelTraceOptions big;
  big.steps = 1;
  big.scaleDivisor = 8;
  ModelTraceOptions small = big;
  small.scaleDivisor = 32;
  auto a = generateModelTrace("vgg16", big);
  auto b = generateModelTrace("vgg16", small);
  ASSERT_TRUE(a.ok() && b.ok());
  const double pages = static_cast<double>(a->totalPages) / static_cast<double>(b->totalPages);
  EXPECT_NEAR(pages, 4.0, 0.1);  // page rounding of small tensors
  const double time = static_cast<double>(a->marks.back().timestampNs - a->marks.front().timestampNs) /
                      static_cast<double>(b->marks.back().timestampNs - b->marks.front().timestampNs);
  EXPECT_NEAR(time, 4.0, 0.05);
}

}  // namespace
}  // namespace tt::tiersim
