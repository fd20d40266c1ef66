#include "strategies/pipeline/split_backward.h"

#include <torch/csrc/autograd/engine.h>
#include <torch/csrc/autograd/function.h>
#include <torch/csrc/autograd/variable.h>
#include <torch/torch.h>

#include <unordered_map>
#include <unordered_set>

namespace ddpbench {

using torch::autograd::Edge;
using torch::autograd::Node;

// One node that takes parameters: the gradients that reached it in B, and
// the edges to the parameters below it (W's outputs).
struct WeightNode {
  std::shared_ptr<Node> node;
  std::vector<torch::Tensor> grads;  // one per node input (may be undefined)
  std::vector<Edge> params;
};

struct WeightGradWork {
  torch::Tensor output, grad;  // whole backward (first stage), else undefined
  std::vector<WeightNode> nodes;
  // Normalisation layers' parameter gradients, computed in B (below): each
  // parameter's accumulator and the gradient W hands it.
  std::vector<std::pair<std::shared_ptr<Node>, torch::Tensor>> norm_grads;
  size_t next = 0;  // the first node W has not run yet
};

namespace {

// Marks the nodes of the graph above `root` from which one of `targets` can
// be reached (memoised depth-first search; the graph is a DAG).
class Reach {
 public:
  explicit Reach(std::unordered_set<const Node*> targets) : targets_(std::move(targets)) {}
  bool operator()(const Node* node) {
    if (node == nullptr) return false;
    if (targets_.count(node)) return true;
    auto it = memo_.find(node);
    if (it != memo_.end()) return it->second;
    bool reaches = false;
    for (const Edge& e : node->next_edges()) reaches = (*this)(e.function.get()) || reaches;
    return memo_[node] = reaches;
  }

 private:
  std::unordered_set<const Node*> targets_;
  std::unordered_map<const Node*, bool> memo_;
};

std::shared_ptr<Node> Accumulator(const torch::Tensor& leaf) {
  return torch::autograd::impl::try_get_grad_accumulator(leaf);
}

// The parameter accumulators reachable from `node` without passing through
// a node from which the input is reachable.
void CollectParams(const Node* node, Reach& to_input, const std::unordered_set<const Node*>& params,
                   std::unordered_set<const Node*>& seen, std::vector<Edge>& out) {
  for (const Edge& e : node->next_edges()) {
    const Node* next = e.function.get();
    if (next == nullptr || to_input(next) || !seen.insert(next).second) continue;
    if (params.count(next)) out.push_back(e);
    else CollectParams(next, to_input, params, seen, out);
  }
}

// A normalisation layer's backward (batch, group, layer norm): its input
// gradient needs the per-channel sums its weight and bias gradients are made
// of, so cutting it into B and W would compute those sums twice.
bool IsNormalisation(const Node& node) { return node.name().find("Norm") != std::string::npos; }

// The nodes on the input's path with a branch down to parameters.
void FindWeightNodes(const std::shared_ptr<Node>& node, Reach& to_input,
                     const std::unordered_set<const Node*>& params, std::unordered_set<const Node*>& visited,
                     std::vector<WeightNode>& out) {
  if (!node || !visited.insert(node.get()).second || !to_input(node.get())) return;
  WeightNode w{node, {}, {}};
  std::unordered_set<const Node*> seen;
  CollectParams(node.get(), to_input, params, seen, w.params);
  if (!w.params.empty()) out.push_back(std::move(w));
  for (const Edge& e : node->next_edges()) FindWeightNodes(e.function, to_input, params, visited, out);
}

// Moves out of `nodes` the normalisation layers whose parameters no other
// node of W feeds, and returns their parameter edges: B computes those
// gradients with the input's.
std::vector<Edge> TakeNormalisationParams(std::vector<WeightNode>& nodes) {
  std::unordered_map<const Node*, int> feeders;  // accumulator -> weight nodes reaching it
  for (const WeightNode& w : nodes)
    for (const Edge& e : w.params) ++feeders[e.function.get()];
  std::vector<Edge> taken;
  std::vector<WeightNode> kept;
  for (WeightNode& w : nodes) {
    bool own = IsNormalisation(*w.node);
    for (const Edge& e : w.params) own = own && feeders[e.function.get()] == 1;
    if (own) taken.insert(taken.end(), w.params.begin(), w.params.end());
    else kept.push_back(std::move(w));
  }
  nodes = std::move(kept);
  return taken;
}

}  // namespace

BackwardInputResult BackwardInput(const torch::Tensor& output, const torch::Tensor& grad, const torch::Tensor& input,
                                  const std::vector<torch::Tensor>& params) {
  auto work = std::make_shared<WeightGradWork>();
  const torch::Tensor g = grad.defined() ? grad : torch::ones_like(output);
  if (!input.requires_grad()) {
    work->output = output;
    work->grad = g;
    return {torch::Tensor(), work};
  }
  std::unordered_set<const Node*> param_nodes;
  for (const auto& p : params)
    if (auto acc = Accumulator(p)) param_nodes.insert(acc.get());
  auto input_acc = Accumulator(input);
  TORCH_CHECK(input_acc, "BackwardInput: the stage input is not in the output's graph");
  Reach to_input({input_acc.get()});
  std::unordered_set<const Node*> visited;
  FindWeightNodes(output.grad_fn(), to_input, param_nodes, visited, work->nodes);
  const std::vector<Edge> norm_params = TakeNormalisationParams(work->nodes);

  // One pass to the input that also hands back the gradient arriving at
  // each weight node's inputs and the normalisation layers' parameter
  // gradients (kept for W, which adds every parameter gradient to .grad).
  torch::autograd::edge_list outputs{torch::autograd::impl::gradient_edge(input)};
  for (const WeightNode& w : work->nodes)
    for (uint32_t i = 0; i < w.node->num_inputs(); ++i) outputs.emplace_back(w.node, i);
  outputs.insert(outputs.end(), norm_params.begin(), norm_params.end());
  auto grads = torch::autograd::Engine::get_default_engine().execute(
      {torch::autograd::impl::gradient_edge(output)}, {g}, /*keep_graph=*/true, /*create_graph=*/false,
      /*accumulate_grad=*/false, outputs);
  size_t k = 1;
  for (WeightNode& w : work->nodes)
    for (uint32_t i = 0; i < w.node->num_inputs(); ++i) w.grads.push_back(grads[k++]);
  for (const Edge& e : norm_params) work->norm_grads.emplace_back(e.function, grads[k++]);
  return {grads[0], work};
}

// One node's parameter gradients, from the gradients B kept at its inputs.
static void RunWeightNode(WeightNode& w) {
  torch::autograd::edge_list roots;
  std::vector<torch::Tensor> grads;
  for (uint32_t i = 0; i < w.grads.size(); ++i)
    if (w.grads[i].defined()) {
      roots.emplace_back(w.node, i);
      grads.push_back(w.grads[i]);
    }
  if (!roots.empty())
    torch::autograd::Engine::get_default_engine().execute(roots, grads, /*keep_graph=*/false,
                                                          /*create_graph=*/false, /*accumulate_grad=*/true, w.params);
}

bool BackwardWeightStep(WeightGradWork& work) {
  if (work.output.defined()) {
    work.output.backward(work.grad);
  } else if (work.next < work.nodes.size()) {
    RunWeightNode(work.nodes[work.next++]);
    if (work.next < work.nodes.size()) return false;
  }
  // The parameters' own accumulators add B's normalisation gradients to
  // .grad, as the engine would have.
  for (auto& [accumulator, grad] : work.norm_grads)
    if (grad.defined()) (*accumulator)({std::move(grad)});
  work = WeightGradWork();
  return true;
}

void BackwardWeight(WeightGradWork& work) {
  while (!BackwardWeightStep(work)) {
  }
}

}  // namespace ddpbench
