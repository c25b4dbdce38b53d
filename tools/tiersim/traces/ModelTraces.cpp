#include "ModelTraces.h"

#include <algorithm>
#include <cmath>
#include <map>
#include <random>
#include <set>

namespace tt::tiersim {
namespace {

constexpr uint32_t kLinesPerPage = 64;

struct Builder {
  ModelSpec model;
  void param(const std::string& name, uint64_t elements) {
    model.params.push_back(TensorSpec{name, RegionKind::Weight, elements});
  }
  LayerSpec& layer(const std::string& name, double flops) {
    model.layers.push_back(LayerSpec{});
    model.layers.back().name = name;
    model.layers.back().forwardFlops = flops;
    return model.layers.back();
  }
  static void act(LayerSpec& layer, const std::string& name, uint64_t elements) {
    layer.activations.push_back(TensorSpec{layer.name + "." + name, RegionKind::Activation, elements});
  }
  // The output of the last layer built so far (its last activation): what the next layer reads
  // unless it names its inputs.
  [[nodiscard]] std::string lastOutput() const { return model.layers.back().activations.back().name; }
};

// VGG-16, configuration D of Simonyan & Zisserman, "Very Deep Convolutional Networks for
// Large-Scale Image Recognition", ICLR'15, as torchvision.models.vgg16 builds it (ReLU in place,
// so a conv layer saves one tensor): 138,357,544 parameters. 224x224 RGB input.
ModelSpec vgg16(uint32_t batch) {
  Builder b;
  b.model.name = "vgg16";
  b.model.source = "Simonyan & Zisserman ICLR'15 config D; torchvision vgg16";
  b.model.batch = batch;
  const double n = batch;
  b.model.inputElements = uint64_t{batch} * 3 * 224 * 224;
  const int cfg[] = {64, 64, 0, 128, 128, 0, 256, 256, 256, 0, 512, 512, 512, 0, 512, 512, 512, 0};
  uint64_t in = 3;
  uint64_t h = 224;
  int conv = 0;
  int pool = 0;
  for (int out : cfg) {
    if (out == 0) {
      h /= 2;
      auto& l = b.layer("pool" + std::to_string(++pool), n * static_cast<double>(in * h * h * 4));
      Builder::act(l, "out", batch * in * h * h);
      continue;
    }
    const auto o = static_cast<uint64_t>(out);
    const std::string name = "features.conv" + std::to_string(++conv);
    b.param(name + ".weight", 9 * in * o);
    b.param(name + ".bias", o);
    auto& l = b.layer(name, n * 2.0 * 9.0 * static_cast<double>(in * o * h * h));
    l.params = {name + ".weight", name + ".bias"};
    Builder::act(l, "out", batch * o * h * h);
    in = o;
  }
  const uint64_t fc[][2] = {{512 * 7 * 7, 4096}, {4096, 4096}, {4096, 1000}};
  int i = 0;
  for (const auto& f : fc) {
    const std::string name = "classifier.fc" + std::to_string(++i);
    b.param(name + ".weight", f[0] * f[1]);
    b.param(name + ".bias", f[1]);
    auto& l = b.layer(name, n * 2.0 * static_cast<double>(f[0] * f[1]));
    l.params = {name + ".weight", name + ".bias"};
    Builder::act(l, "out", batch * f[1]);
  }
  return b.model;
}

// ResNet-50 (He et al., "Deep Residual Learning for Image Recognition", CVPR'16) as
// torchvision.models.resnet50 builds it (v1.5: stride on the 3x3 conv): 25,557,032 parameters.
// A conv+BN pair saves the conv output and the BN output (ReLU in place); the block's residual add
// reads the last BN's output and the identity (the block's input, or the downsample's output when
// the block has one, which reads the block's input too) and saves its output. BN running statistics
// are buffers, not parameters, and are left out.
ModelSpec resnet50(uint32_t batch) {
  Builder b;
  b.model.name = "resnet50";
  b.model.source = "He et al. CVPR'16; torchvision resnet50 (v1.5)";
  b.model.batch = batch;
  const double n = batch;
  b.model.inputElements = uint64_t{batch} * 3 * 224 * 224;
  auto convBn = [&](const std::string& name, uint64_t in, uint64_t out, uint64_t k, uint64_t hOut) {
    b.param(name + ".conv.weight", k * k * in * out);
    b.param(name + ".bn.weight", out);
    b.param(name + ".bn.bias", out);
    auto& l = b.layer(name, n * 2.0 * static_cast<double>(k * k * in * out * hOut * hOut));
    l.params = {name + ".conv.weight", name + ".bn.weight", name + ".bn.bias"};
    Builder::act(l, "conv", batch * out * hOut * hOut);
    Builder::act(l, "bn", batch * out * hOut * hOut);
  };
  convBn("conv1", 3, 64, 7, 112);
  {
    auto& l = b.layer("maxpool", n * 64.0 * 56 * 56 * 9);
    Builder::act(l, "out", batch * 64 * 56 * 56);
  }
  struct Stage {
    uint64_t width;
    int blocks;
    uint64_t hIn;
    uint64_t hOut;
  };
  const Stage stages[] = {{64, 3, 56, 56}, {128, 4, 56, 28}, {256, 6, 28, 14}, {512, 3, 14, 7}};
  uint64_t in = 64;
  int s = 0;
  for (const auto& stage : stages) {
    ++s;
    for (int blk = 0; blk < stage.blocks; ++blk) {
      const std::string name = "layer" + std::to_string(s) + "." + std::to_string(blk);
      const uint64_t hIn = blk == 0 ? stage.hIn : stage.hOut;
      const uint64_t w = stage.width;
      const std::string blockInput = b.lastOutput();  // maxpool's or the previous block's output
      convBn(name + ".1", in, w, 1, hIn);
      convBn(name + ".2", w, w, 3, stage.hOut);
      convBn(name + ".3", w, 4 * w, 1, stage.hOut);
      std::string identity = blockInput;
      if (blk == 0) {
        convBn(name + ".downsample", in, 4 * w, 1, stage.hOut);
        b.model.layers.back().inputs = {blockInput};
        identity = b.lastOutput();
      }
      auto& add = b.layer(name + ".add", n * static_cast<double>(4 * w * stage.hOut * stage.hOut));
      add.inputs = {name + ".3.bn", identity};
      Builder::act(add, "out", batch * 4 * w * stage.hOut * stage.hOut);
      in = 4 * w;
    }
  }
  {
    auto& l = b.layer("avgpool", n * 2048.0 * 49);
    Builder::act(l, "out", batch * 2048);
  }
  b.param("fc.weight", 2048 * 1000);
  b.param("fc.bias", 1000);
  auto& l = b.layer("fc", n * 2.0 * 2048 * 1000);
  l.params = {"fc.weight", "fc.bias"};
  Builder::act(l, "out", batch * 1000);
  return b.model;
}

// One transformer encoder/decoder block's sub-layers, the same shapes for BERT and GPT-2:
// qkv projection, attention (scores and softmax probabilities saved, a x s x s per sample), output
// projection, two MLP layers (4h), the two LayerNorms (post-LN for BERT, pre-LN for GPT-2) and the
// two residual adds. Post-LN (BERT, Hugging Face BertSelfOutput / BertOutput) adds the sub-layer's
// input inside the LayerNorm, LayerNorm(x + sublayer(x)): the LayerNorm reads both. Pre-LN (GPT-2,
// Hugging Face GPT2Block) adds into a residual stream of its own, x + sublayer(LayerNorm(x)): an
// add layer reads both and saves the sum, which the next LayerNorm and the next add read.
void transformerBlock(Builder& b, const std::string& prefix, uint64_t batch, uint64_t s, uint64_t h,
                      uint64_t heads, bool preLayerNorm) {
  const double n = static_cast<double>(batch);
  const uint64_t tokens = batch * s;
  const double sd = static_cast<double>(s);
  const double hd = static_cast<double>(h);
  const std::string blockInput = b.lastOutput();
  auto layerNorm = [&](const std::string& name) -> LayerSpec& {
    b.param(name + ".weight", h);
    b.param(name + ".bias", h);
    auto& l = b.layer(name, static_cast<double>(tokens) * 8 * hd);
    l.params = {name + ".weight", name + ".bias"};
    Builder::act(l, "out", tokens * h);
    return l;
  };
  auto residualAdd = [&](const std::string& name, const std::string& skip) {
    const std::string sublayer = b.lastOutput();
    auto& l = b.layer(name, static_cast<double>(tokens) * hd);
    l.inputs = {sublayer, skip};
    Builder::act(l, "out", tokens * h);
  };
  if (preLayerNorm) layerNorm(prefix + ".ln_1");
  b.param(prefix + ".attn.qkv.weight", h * 3 * h);
  b.param(prefix + ".attn.qkv.bias", 3 * h);
  {
    auto& l = b.layer(prefix + ".attn.qkv", n * 2 * sd * 3 * hd * hd);
    l.params = {prefix + ".attn.qkv.weight", prefix + ".attn.qkv.bias"};
    Builder::act(l, "qkv", tokens * 3 * h);
  }
  {
    auto& l = b.layer(prefix + ".attn.core", n * 4 * sd * sd * hd);
    Builder::act(l, "probs", batch * heads * s * s);
    Builder::act(l, "context", tokens * h);
  }
  b.param(prefix + ".attn.proj.weight", h * h);
  b.param(prefix + ".attn.proj.bias", h);
  {
    auto& l = b.layer(prefix + ".attn.proj", n * 2 * sd * hd * hd);
    l.params = {prefix + ".attn.proj.weight", prefix + ".attn.proj.bias"};
    Builder::act(l, "out", tokens * h);
  }
  if (preLayerNorm) {
    residualAdd(prefix + ".attn.add", blockInput);
    layerNorm(prefix + ".ln_2");
  } else {
    const std::string sublayer = b.lastOutput();
    layerNorm(prefix + ".attn.ln").inputs = {sublayer, blockInput};
  }
  // The MLP's residual: the attention's sum (GPT-2) or its LayerNorm's output (BERT).
  const std::string mlpSkip = preLayerNorm ? prefix + ".attn.add.out" : prefix + ".attn.ln.out";
  b.param(prefix + ".mlp.fc.weight", h * 4 * h);
  b.param(prefix + ".mlp.fc.bias", 4 * h);
  {
    auto& l = b.layer(prefix + ".mlp.fc", n * 2 * sd * 4 * hd * hd);
    l.params = {prefix + ".mlp.fc.weight", prefix + ".mlp.fc.bias"};
    Builder::act(l, "fc", tokens * 4 * h);
    Builder::act(l, "gelu", tokens * 4 * h);
  }
  b.param(prefix + ".mlp.proj.weight", 4 * h * h);
  b.param(prefix + ".mlp.proj.bias", h);
  {
    auto& l = b.layer(prefix + ".mlp.proj", n * 2 * sd * 4 * hd * hd);
    l.params = {prefix + ".mlp.proj.weight", prefix + ".mlp.proj.bias"};
    Builder::act(l, "out", tokens * h);
  }
  if (preLayerNorm) {
    residualAdd(prefix + ".mlp.add", mlpSkip);
  } else {
    layerNorm(prefix + ".out.ln").inputs = {prefix + ".mlp.proj.out", mlpSkip};
  }
}

// BERT-base (Devlin et al., NAACL'19; Hugging Face bert-base-uncased config: L=12, H=768, A=12,
// vocab 30522, 512 positions, 2 token types) with the pooler and a 2-class head, fine-tuning:
// 109,483,778 parameters (the "110M" of the paper). Default: batch 32, sequence 128.
ModelSpec bertBase(uint32_t batch, uint32_t s) {
  Builder b;
  b.model.name = "bert-base";
  b.model.source = "Devlin et al. NAACL'19; HF bert-base-uncased config";
  b.model.batch = batch;
  b.model.sequence = s;
  const uint64_t h = 768;
  const uint64_t tokens = uint64_t{batch} * s;
  b.model.inputElements = tokens * 2;
  b.param("embeddings.word", 30522 * h);
  b.param("embeddings.position", 512 * h);
  b.param("embeddings.token_type", 2 * h);
  b.param("embeddings.ln.weight", h);
  b.param("embeddings.ln.bias", h);
  {
    auto& l = b.layer("embeddings", static_cast<double>(tokens) * 12 * h);
    l.params = {"embeddings.word", "embeddings.position", "embeddings.token_type", "embeddings.ln.weight",
                "embeddings.ln.bias"};
    l.vocab = 30522;
    l.lookups = tokens;
    Builder::act(l, "sum", tokens * h);
    Builder::act(l, "ln", tokens * h);
  }
  for (int i = 0; i < 12; ++i) transformerBlock(b, "encoder." + std::to_string(i), batch, s, h, 12, false);
  b.param("pooler.weight", h * h);
  b.param("pooler.bias", h);
  {
    auto& l = b.layer("pooler", static_cast<double>(batch) * 2 * h * h);
    l.params = {"pooler.weight", "pooler.bias"};
    Builder::act(l, "out", uint64_t{batch} * h);
  }
  b.param("classifier.weight", h * 2);
  b.param("classifier.bias", 2);
  {
    auto& l = b.layer("classifier", static_cast<double>(batch) * 2 * h * 2);
    l.params = {"classifier.weight", "classifier.bias"};
    Builder::act(l, "out", uint64_t{batch} * 2);
  }
  return b.model;
}

// GPT-2 small (Radford et al. 2019; Hugging Face gpt2 config: 12 layers, 768 wide, 12 heads,
// vocab 50257, 1024 positions), language-model head tied to the token embedding: 124,439,808
// parameters. Default: batch 8, sequence 512.
ModelSpec gpt2Small(uint32_t batch, uint32_t s) {
  Builder b;
  b.model.name = "gpt2-small";
  b.model.source = "Radford et al. 2019; HF gpt2 config";
  b.model.batch = batch;
  b.model.sequence = s;
  const uint64_t h = 768;
  const uint64_t vocab = 50257;
  const uint64_t tokens = uint64_t{batch} * s;
  b.model.inputElements = tokens * 2;
  b.param("wte", vocab * h);
  b.param("wpe", 1024 * h);
  {
    auto& l = b.layer("embeddings", static_cast<double>(tokens) * h);
    l.params = {"wte", "wpe"};
    l.vocab = vocab;
    l.lookups = tokens;
    Builder::act(l, "sum", tokens * h);
  }
  for (int i = 0; i < 12; ++i) transformerBlock(b, "h." + std::to_string(i), batch, s, h, 12, true);
  b.param("ln_f.weight", h);
  b.param("ln_f.bias", h);
  {
    auto& l = b.layer("ln_f", static_cast<double>(tokens) * 8 * h);
    l.params = {"ln_f.weight", "ln_f.bias"};
    Builder::act(l, "out", tokens * h);
  }
  {
    // Tied head: reads the whole token embedding, its gradient accumulates into wte's.
    auto& l = b.layer("lm_head", static_cast<double>(tokens) * 2 * h * vocab);
    l.params = {"wte"};
    Builder::act(l, "logits", tokens * vocab);
    Builder::act(l, "log_probs", tokens * vocab);
  }
  return b.model;
}

uint64_t pagesFor(uint64_t elements, uint32_t scaleDivisor) {
  const uint64_t bytes = (elements * 4 + scaleDivisor - 1) / scaleDivisor;
  return std::max<uint64_t>(1, (bytes + kBasePageSize - 1) / kBasePageSize);
}

// Emits one op: touches in order, spread evenly over `durationNs` from `startNs`.
struct Touch {
  const TraceRegion* region;
  uint64_t pages;                // a prefix of the region (all pages when equal to its size)
  bool write;
  const std::vector<PageId>* subset = nullptr;  // explicit pages instead of a prefix
};

void emitOp(std::vector<SimAccess>& out, uint64_t startNs, uint64_t durationNs,
            const std::vector<Touch>& touches) {
  uint64_t total = 0;
  for (const auto& t : touches) total += t.subset != nullptr ? t.subset->size() : std::min(t.pages, t.region->pages);
  if (total == 0) return;
  uint64_t k = 0;
  for (const auto& t : touches) {
    const uint64_t n = t.subset != nullptr ? t.subset->size() : std::min(t.pages, t.region->pages);
    for (uint64_t i = 0; i < n; ++i, ++k) {
      SimAccess a;
      a.timeNs = startNs + (durationNs * k) / total;
      a.page = t.subset != nullptr ? (*t.subset)[i] : t.region->firstPage + i;
      a.count = kLinesPerPage;
      a.write = t.write;
      out.push_back(a);
    }
  }
}

}  // namespace

std::vector<std::string> modelNames() { return {"vgg16", "resnet50", "bert-base", "gpt2-small"}; }

Result<ModelSpec> buildModel(const std::string& name, uint32_t batch, uint32_t sequence) {
  if (name == "vgg16") return vgg16(batch != 0 ? batch : 32);
  if (name == "resnet50") return resnet50(batch != 0 ? batch : 32);
  if (name == "bert-base") {
    // 512 learned positions: a longer sequence has no position embedding to read.
    if (sequence > 512) return logicError("bert-base: sequence " + std::to_string(sequence) + " > 512 positions");
    return bertBase(batch != 0 ? batch : 32, sequence != 0 ? sequence : 128);
  }
  if (name == "gpt2-small") {
    if (sequence > 1024) return logicError("gpt2-small: sequence " + std::to_string(sequence) + " > 1024 positions");
    return gpt2Small(batch != 0 ? batch : 8, sequence != 0 ? sequence : 512);
  }
  return logicError("unknown model '" + name + "' (known: vgg16, resnet50, bert-base, gpt2-small)");
}

uint64_t parameterCount(const ModelSpec& model) {
  uint64_t total = 0;
  for (const auto& p : model.params) total += p.elements;
  return total;
}

Result<Trace> generateModelTrace(const std::string& name, const ModelTraceOptions& options) {
  auto built = buildModel(name, options.batch, options.sequence);
  if (!built) return built.error();
  const ModelSpec& model = *built;
  if (options.scaleDivisor == 0 || options.scaleDivisor > kMaxScaleDivisor || options.flopsPerNs <= 0) {
    return logicError("trace generator: scale divisor must be in 1.." + std::to_string(kMaxScaleDivisor) +
                      " and throughput positive");
  }
  const uint32_t scale = options.scaleDivisor;

  Trace trace;
  trace.name = model.name;
  trace.scaleDivisor = scale;
  trace.computeOnlyTime = true;
  trace.samplePeriod = 1;
  trace.description = model.source + "; batch " + std::to_string(model.batch) +
                      (model.sequence != 0 ? ", sequence " + std::to_string(model.sequence) : "") +
                      "; scale 1/" + std::to_string(scale);

  // ---- Layout -----------------------------------------------------------------------------------
  PageId next = 0;
  uint64_t nextId = 1;
  auto addRegion = [&](const std::string& regionName, RegionKind kind, uint64_t elements) {
    TraceRegion r;
    r.id = nextId++;
    r.firstPage = next;
    r.pages = pagesFor(elements, scale);
    r.kind = kind;
    r.name = regionName;
    next += r.pages;
    trace.regions.push_back(r);
    return trace.regions.size() - 1;
  };
  const size_t inputIndex = addRegion("input", RegionKind::Other, model.inputElements);
  std::map<std::string, size_t> weight;
  std::map<std::string, size_t> grad;
  std::map<std::string, size_t> moment1;
  std::map<std::string, size_t> moment2;
  for (const auto& p : model.params) weight[p.name] = addRegion(p.name, RegionKind::Weight, p.elements);
  for (const auto& p : model.params) grad[p.name] = addRegion(p.name + ".grad", RegionKind::Gradient, p.elements);
  for (const auto& p : model.params) {
    moment1[p.name] = addRegion(p.name + ".exp_avg", RegionKind::OptimizerState, p.elements);
  }
  for (const auto& p : model.params) {
    moment2[p.name] = addRegion(p.name + ".exp_avg_sq", RegionKind::OptimizerState, p.elements);
  }
  std::vector<std::vector<size_t>> acts(model.layers.size());
  std::map<std::string, size_t> activation;
  uint64_t maxActivation = model.inputElements;
  for (size_t l = 0; l < model.layers.size(); ++l) {
    for (const auto& a : model.layers[l].activations) {
      acts[l].push_back(addRegion(a.name, RegionKind::Activation, a.elements));
      activation[a.name] = acts[l].back();
      maxActivation = std::max(maxActivation, a.elements);
    }
  }
  const size_t gradA = addRegion("grad_workspace.0", RegionKind::Workspace, maxActivation);
  const size_t gradB = addRegion("grad_workspace.1", RegionKind::Workspace, maxActivation);
  trace.totalPages = next;
  for (const auto& l : model.layers) {
    for (const auto& p : l.params) {
      if (weight.count(p) == 0) return logicError(model.name + ": layer " + l.name + " uses unknown tensor " + p);
    }
  }
  const auto& regions = trace.regions;  // complete: pointers into it stay valid
  auto region = [&](size_t index) -> const TraceRegion* { return &regions[index]; };
  auto outputOf = [&](size_t layer) -> const TraceRegion* {
    return acts[layer].empty() ? region(inputIndex) : region(acts[layer].back());
  };
  // What each layer reads: the activations it names, else the previous layer's output.
  std::vector<std::vector<const TraceRegion*>> inputs(model.layers.size());
  for (size_t l = 0; l < model.layers.size(); ++l) {
    const auto& layer = model.layers[l];
    for (const auto& tensor : layer.inputs) {
      const auto it = activation.find(tensor);
      if (it == activation.end()) return logicError(model.name + ": layer " + layer.name + " reads unknown tensor " + tensor);
      inputs[l].push_back(region(it->second));
    }
    if (!layer.inputs.empty()) continue;
    inputs[l].push_back(region(inputIndex));
    for (size_t p = l; p-- > 0;) {
      if (!acts[p].empty()) {
        inputs[l].back() = region(acts[p].back());
        break;
      }
    }
  }
  auto computeNs = [&](double flops) {
    return std::max<uint64_t>(1, static_cast<uint64_t>(flops / scale / options.flopsPerNs));
  };

  // ---- Accesses ---------------------------------------------------------------------------------
  std::mt19937_64 rng(options.seed);
  uint64_t now = 0;
  // Model construction: parameters initialised (written) once, before training.
  {
    std::vector<Touch> touches;
    for (const auto& p : model.params) touches.push_back(Touch{region(weight[p.name]), ~uint64_t{0}, true});
    uint64_t pages = 0;
    for (const auto& p : model.params) pages += region(weight[p.name])->pages;
    const uint64_t duration = pages * 40;  // about 100 GB/s of initialisation writes
    emitOp(trace.accesses, now, duration, touches);
    now += duration;
  }
  auto mark = [&](MarkType type, uint64_t step, const std::string& phase) {
    IterationMark m;
    m.tgid = kSimTgid;
    m.type = type;
    m.step = step;
    m.phase = phase;
    m.timestampNs = now;
    trace.marks.push_back(m);
  };
  auto all = ~uint64_t{0};
  for (uint32_t step = 0; step < options.steps; ++step) {
    mark(MarkType::StepBegin, step, "");
    mark(MarkType::PhaseBegin, step, "forward");
    // The data loader fills the input batch.
    emitOp(trace.accesses, now, computeNs(static_cast<double>(model.inputElements)),
           {Touch{region(inputIndex), all, true}});
    now += computeNs(static_cast<double>(model.inputElements));
    std::vector<std::vector<PageId>> lookedUp(model.layers.size());
    for (size_t l = 0; l < model.layers.size(); ++l) {
      const auto& layer = model.layers[l];
      std::vector<Touch> touches;
      for (const TraceRegion* in : inputs[l]) touches.push_back(Touch{in, all, false});
      for (size_t p = 0; p < layer.params.size(); ++p) {
        const TraceRegion* w = region(weight[layer.params[p]]);
        if (p == 0 && layer.vocab != 0) {
          // Embedding lookup: token ids drawn log-uniformly (a Zipf-like law over the vocabulary:
          // frequent tokens have small ids in BPE/WordPiece vocabularies); the pages holding them.
          std::set<PageId> pages;
          const uint64_t lookups = std::max<uint64_t>(1, layer.lookups / scale);
          const double logVocab = std::log(static_cast<double>(layer.vocab));
          for (uint64_t i = 0; i < lookups; ++i) {
            const double u = static_cast<double>(rng() >> 11) * 0x1.0p-53;
            const auto row = std::min<uint64_t>(layer.vocab - 1, static_cast<uint64_t>(std::exp(u * logVocab)) - 1);
            pages.insert(w->firstPage + row * w->pages / layer.vocab);
          }
          lookedUp[l].assign(pages.begin(), pages.end());
          touches.push_back(Touch{w, 0, false, &lookedUp[l]});
          continue;
        }
        touches.push_back(Touch{w, all, false});
      }
      for (size_t a : acts[l]) touches.push_back(Touch{region(a), all, true});
      const uint64_t duration = computeNs(layer.forwardFlops);
      emitOp(trace.accesses, now, duration, touches);
      now += duration;
    }
    mark(MarkType::PhaseBegin, step, "backward");
    // The loss writes the gradient of the last output.
    bool flip = false;
    {
      const uint64_t pages = outputOf(model.layers.size() - 1)->pages;
      emitOp(trace.accesses, now, computeNs(static_cast<double>(pages * 1024)),
             {Touch{region(gradA), pages, true}});
      now += computeNs(static_cast<double>(pages * 1024));
    }
    for (size_t l = model.layers.size(); l-- > 0;) {
      const auto& layer = model.layers[l];
      const TraceRegion* gradOut = region(flip ? gradB : gradA);
      const TraceRegion* gradIn = region(flip ? gradA : gradB);
      std::vector<Touch> touches;
      touches.push_back(Touch{gradOut, outputOf(l)->pages, false});
      for (size_t a : acts[l]) touches.push_back(Touch{region(a), all, false});
      for (const TraceRegion* in : inputs[l]) touches.push_back(Touch{in, all, false});
      for (const auto& p : layer.params) touches.push_back(Touch{region(weight[p]), all, false});
      // Dense gradients, embeddings included (PyTorch's default, sparse=False).
      for (const auto& p : layer.params) touches.push_back(Touch{region(grad[p]), all, true});
      // A gradient per input (both operands of a residual add), none for the input batch.
      for (const TraceRegion* in : inputs[l]) {
        if (in != region(inputIndex)) touches.push_back(Touch{gradIn, in->pages, true});
      }
      const uint64_t duration = computeNs(2 * layer.forwardFlops);
      emitOp(trace.accesses, now, duration, touches);
      now += duration;
      flip = !flip;
    }
    mark(MarkType::PhaseBegin, step, "optimizer");
    for (const auto& p : model.params) {
      std::vector<Touch> touches = {
          Touch{region(weight[p.name]), all, false},  Touch{region(grad[p.name]), all, false},
          Touch{region(moment1[p.name]), all, false}, Touch{region(moment2[p.name]), all, false},
          Touch{region(moment1[p.name]), all, true},  Touch{region(moment2[p.name]), all, true},
          Touch{region(weight[p.name]), all, true}};
      // Adam: about 12 FLOPs per parameter (two moment updates, bias correction, sqrt, divide).
      const uint64_t duration = computeNs(12.0 * static_cast<double>(p.elements));
      emitOp(trace.accesses, now, duration, touches);
      now += duration;
    }
    mark(MarkType::StepEnd, step, "");
  }
  if (auto valid = validateTrace(trace); !valid) return valid.error();
  return trace;
}

}  // namespace tt::tiersim
