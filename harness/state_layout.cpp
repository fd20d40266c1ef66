// See state_layout.h. Parameters' slices come from the strategy; the
// optimizer's fields are found by name next to them; everything else is
// whole and replicated.
#include "harness/state_layout.h"

#include <set>

namespace ddpbench {
namespace {

bool HasPrefix(const std::string& s, const std::string& prefix) { return s.compare(0, prefix.size(), prefix) == 0; }

// Fields that hold one number per parameter rather than one per element.
bool IsScalarField(const std::string& field) { return field == "step" || field == "fused_step"; }

// "optim.<name>.<field>" -> {name, field}; {"", ""} for any other key.
std::pair<std::string, std::string> SplitOptimKey(const std::string& key) {
  if (!HasPrefix(key, "optim.")) return {"", ""};
  const size_t dot = key.rfind('.');
  if (dot <= 6) return {"", ""};
  return {key.substr(6, dot - 6), key.substr(dot + 1)};
}

std::vector<int64_t> Shape(const torch::Tensor& t) { return t.sizes().vec(); }
int64_t Numel(const std::vector<int64_t>& shape) {
  int64_t n = 1;
  for (int64_t d : shape) n *= d;
  return n;
}

// The optimizer fields stored next to the sliced parameters, by stored key.
std::set<std::string> SlicedFields(const StateLayout& layout, const TensorMap& stored) {
  std::set<std::string> names, fields;
  for (const auto& [key, name] : layout.optim_name) names.insert(name);
  for (const auto& [key, value] : stored) {
    const auto [name, field] = SplitOptimKey(key);
    if (names.count(name)) fields.insert(field);
  }
  return fields;
}

// The piece of optimizer field `field` that goes with parameter piece `p`.
ShardPiece FieldPiece(const ShardPiece& p, const std::string& optim_name, const std::string& field) {
  const std::string logical = "optim." + p.logical + "." + field, stored = "optim." + optim_name + "." + field;
  if (IsScalarField(field)) return {logical, 0, 1, p.holder, stored, 0};
  return {logical, p.begin, p.length, p.holder, stored, p.stored_offset};
}

// The dtype of optimizer field `field` on this rank (the same for every
// parameter of one optimizer), for the fields of another rank's parameters.
torch::ScalarType FieldDtype(const TensorMap& stored, const std::string& field) {
  for (const auto& [key, value] : stored)
    if (SplitOptimKey(key).second == field) return value.scalar_type();
  throw std::logic_error("state layout: no optimizer field " + field + " on the describing rank");
}

}  // namespace

bool IsLogicalKey(const std::string& key) {
  return HasPrefix(key, "model.") || HasPrefix(key, "optim.") || HasPrefix(key, "scaler.");
}

StateDescription DescribeState(const StateLayout& layout, const TensorMap& stored, int world) {
  StateDescription d;
  d.world = world;
  std::set<std::string> sliced_names, sliced_keys;
  for (const auto& [key, name] : layout.optim_name) sliced_names.insert(name);
  for (const auto& p : layout.params) sliced_keys.insert(p.stored);
  for (const auto& [key, value] : stored) {
    if (!IsLogicalKey(key) || sliced_keys.count(key) || sliced_names.count(SplitOptimKey(key).first)) continue;
    d.whole.push_back(key);
    d.logical[key] = {Shape(value), value.scalar_type()};
  }
  const auto fields = SlicedFields(layout, stored);
  for (const auto& p : layout.params) {
    const torch::ScalarType dtype =
        stored.count(p.stored) ? stored.at(p.stored).scalar_type() : layout.dtypes.at(p.logical);
    d.pieces.push_back({"model." + p.logical, p.begin, p.length, p.holder, p.stored, p.stored_offset});
    d.logical["model." + p.logical] = {layout.shapes.at(p.logical), dtype};
    const auto optim_name = layout.optim_name.find(p.stored);
    if (optim_name == layout.optim_name.end()) continue;  // a buffer
    for (const auto& field : fields) {
      const ShardPiece f = FieldPiece(p, optim_name->second, field);
      d.pieces.push_back(f);
      d.logical[f.logical] = {IsScalarField(field) ? std::vector<int64_t>{} : layout.shapes.at(p.logical),
                              stored.count(f.stored) ? stored.at(f.stored).scalar_type() : FieldDtype(stored, field)};
    }
  }
  return d;
}

std::vector<ShardPiece> AllPieces(const StateDescription& d) {
  std::vector<ShardPiece> all = d.pieces;
  for (const auto& name : d.whole)
    for (int r = 0; r < d.world; ++r) all.push_back({name, 0, Numel(d.logical.at(name).shape), r, name, 0});
  return all;
}

TensorMap AllocateTarget(const StateLayout& layout, const TensorMap& fresh,
                         const std::map<std::string, LogicalTensor>& logical, int rank, std::vector<ShardPiece>* want) {
  TensorMap out;
  auto zeros = [](const std::vector<int64_t>& shape, torch::ScalarType dtype) {
    return torch::zeros(shape, torch::TensorOptions().dtype(dtype));
  };
  auto whole = [&](const std::string& key, const LogicalTensor& t) {
    out[key] = zeros(t.shape, t.dtype);
    want->push_back({key, 0, Numel(t.shape), rank, key, 0});
  };
  std::set<std::string> sliced, sliced_keys;
  for (const auto& p : layout.params) {
    sliced.insert(p.logical);
    sliced_keys.insert(p.stored);
  }
  for (const auto& [key, value] : fresh) {
    if (!IsLogicalKey(key)) out[key] = value;  // this layout's own description
    else if (sliced_keys.count(key)) out[key] = zeros(Shape(value), value.scalar_type());
    else if (!HasPrefix(key, "optim.")) whole(key, {Shape(value), value.scalar_type()});
  }
  // The optimizer's fields the snapshot holds, laid out as this strategy keeps
  // them, for the stored tensors this rank holds.
  for (const auto& [name, t] : logical) {
    const auto [param, field] = SplitOptimKey(name);
    if (param.empty()) continue;
    if (!sliced.count(param)) {
      whole(name, t);
      continue;
    }
    for (const auto& [stored, optim_name] : layout.optim_name) {  // every stored slice has the field
      const std::string key = "optim." + optim_name + "." + field;
      if (out.count(stored) && !out.count(key))
        out[key] = IsScalarField(field) ? zeros({}, t.dtype) : zeros(Shape(out.at(stored)), t.dtype);
    }
  }
  for (const auto& p : layout.params) {
    if (p.holder != rank) continue;
    want->push_back({"model." + p.logical, p.begin, p.length, rank, p.stored, p.stored_offset});
    const auto optim_name = layout.optim_name.find(p.stored);
    if (optim_name == layout.optim_name.end()) continue;  // a buffer
    for (const auto& [name, t] : logical) {
      const auto [param, field] = SplitOptimKey(name);
      if (param == p.logical) want->push_back(FieldPiece(p, optim_name->second, field));
    }
  }
  return out;
}

void ApplyCopies(const std::vector<SliceCopy>& copies, const std::map<int, TensorMap>& from, TensorMap* to) {
  torch::NoGradGuard no_grad;
  for (const auto& c : copies) {
    const torch::Tensor src = from.at(c.holder).at(c.from).reshape(-1).narrow(0, c.from_offset, c.length);
    to->at(c.to).view(-1).narrow(0, c.to_offset, c.length).copy_(src);
  }
}

}  // namespace ddpbench
