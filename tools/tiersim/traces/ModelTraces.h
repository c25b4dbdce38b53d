// Synthetic page-access traces of DNN training steps, built from real model shapes.
//
// Per step: forward, layer by layer, reads the layer's inputs (the previous layer's output, or the
// tensors LayerSpec::inputs names: a residual add reads both operands) and weights and writes its
// saved activations; backward, in reverse layer order, reads the output gradient, the saved
// activations, the inputs and the weights, writes the weight gradients and a gradient per input
// (two ping-pong workspace buffers); the optimizer (Adam, two moments) reads weight, gradient and both moments of
// every parameter tensor and writes weight and moments. Each touch of a tensor streams it once: one
// record of 64 cache lines per 4 KiB page, spread evenly over the op's compute time (FLOPs /
// throughput). Before step 0 the model's construction writes the weights once (first touch).
//
// Memory layout, as PyTorch's caching allocator would leave it after the first step: one
// contiguous, page-aligned region per tensor: input batch, weights, gradients, Adam moments,
// activations, gradient workspaces; activations and workspaces are reused every step.
//
// Scale: `scaleDivisor` S divides every tensor's bytes, every op's FLOPs and the number of
// embedding lookups, so a step is S times smaller and faster while every tensor keeps its share of
// footprint and traffic; per-page access counts per step are unchanged. The sweep uses S = 16; S is
// at most kMaxScaleDivisor (Trace.h).
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "Trace.h"
#include "core/Result.h"

namespace tt::tiersim {

struct ModelTraceOptions {
  uint32_t batch = 0;          // 0: the model's default (see modelDefaults)
  uint32_t sequence = 0;       // transformers: tokens per sample; 0: the model's default
  uint32_t steps = 10;
  uint32_t scaleDivisor = 16;
  double flopsPerNs = 1500;    // achieved training throughput: 1.5 TFLOP/s (one CPU socket, fp32)
  uint64_t seed = 1;           // embedding lookups
};

struct TensorSpec {
  std::string name;
  RegionKind kind = RegionKind::Other;
  uint64_t elements = 0;       // fp32 elements, unscaled, whole batch
};

struct LayerSpec {
  std::string name;
  std::vector<std::string> params;       // parameter tensor names (shared tensors appear once in
                                         // ModelSpec::params, possibly in several layers)
  std::vector<TensorSpec> activations;   // saved for backward, whole batch
  // The activations (TensorSpec::name) the layer reads, in order; empty: the previous layer's
  // output (the input batch for the first layer). A residual add names both operands, a block's
  // downsample the block's input.
  std::vector<std::string> inputs;
  double forwardFlops = 0;               // whole batch
  // Embedding lookup: the first param is a table of `vocab` rows; forward reads `lookups` rows.
  uint64_t vocab = 0;
  uint64_t lookups = 0;
};

struct ModelSpec {
  std::string name;
  std::string source;                    // where the shapes come from
  uint32_t batch = 0;
  uint32_t sequence = 0;
  uint64_t inputElements = 0;            // the input batch (images, or token ids as 2 x int32)
  std::vector<TensorSpec> params;        // in construction order
  std::vector<LayerSpec> layers;         // in forward order
};

[[nodiscard]] std::vector<std::string> modelNames();  // vgg16, resnet50, bert-base, gpt2-small
// The model's tensors and layers (unscaled). Error for an unknown name.
[[nodiscard]] Result<ModelSpec> buildModel(const std::string& name, uint32_t batch = 0, uint32_t sequence = 0);
[[nodiscard]] uint64_t parameterCount(const ModelSpec& model);

// The trace of `options.steps` training steps of `name`.
[[nodiscard]] Result<Trace> generateModelTrace(const std::string& name, const ModelTraceOptions& options);

}  // namespace tt::tiersim
