// comm/collective.cc — descriptors, validation and the mismatch verdict shared by all backends.
#include "comm/collective.h"

// Header-only XXH3 (the labels' hashes: a few dozen bytes per collective).
#define XXH_INLINE_ALL
#include <xxhash.h>

#include "core/base/error.h"
#include "core/tensor/tensor_impl.h"

namespace tessel::comm {
namespace {

bool SameCall(const CollectiveDesc& a, const CollectiveDesc& b) {
  const bool both_all_to_all = a.kind == CollectiveKind::kAllToAll && b.kind == CollectiveKind::kAllToAll;
  return a.kind == b.kind && a.seq == b.seq && a.dtype == b.dtype && a.root == b.root && a.op == b.op &&
         a.label_hash == b.label_hash &&
         (both_all_to_all ? a.row_bytes == b.row_bytes : a.bytes == b.bytes && a.shape == b.shape);
}

// The shape a descriptor carries: the tensor's, its dims past kMaxDescDims folded into the last one.
std::vector<int64_t> DescShape(const Tensor& t) {
  std::vector<int64_t> shape(t.sizes().begin(), t.sizes().end());
  if (shape.size() > static_cast<size_t>(kMaxDescDims)) {
    for (size_t i = kMaxDescDims; i < shape.size(); ++i) shape[kMaxDescDims - 1] *= shape[i];
    shape.resize(kMaxDescDims);
  }
  return shape;
}

// The issuing thread's CollectiveLabel.
void SetLabel(CollectiveDesc& d) {
  d.label = CollectiveLabel::Current();
  d.label_hash = CollectiveLabel::CurrentHash();
}

// A descriptor's dtype, byte count and shape: those of the tensor each rank sends (and its label).
void SetPayload(CollectiveDesc& d, const Tensor& t) {
  SetLabel(d);
  d.dtype = t.dtype();
  d.bytes = t.numel() * ElementSize(t.dtype());
  d.shape = DescShape(t);
}

// Checks that what rank r expects from rank j is what rank j sends to rank r.
std::optional<std::string> FindSplitMismatch(std::span<const CollectiveDesc* const> descs,
                                             const std::string& group_label) {
  const int world = static_cast<int>(descs.size());
  for (int r = 0; r < world; ++r) {
    for (int j = 0; j < world; ++j) {
      const int64_t expected = descs[r]->output_splits[j];
      const int64_t sent = descs[j]->input_splits[r];
      if (expected != sent) {
        return Str("collective mismatch on ", group_label, ": all_to_all #", descs[r]->seq, " rank ", r,
                   " expects ", expected, " rows from rank ", j, " but rank ", j, " sends ", sent,
                   " rows to rank ", r);
      }
    }
  }
  return std::nullopt;
}

void CheckSameDType(const char* op, const Tensor& output, const Tensor& input) {
  TESSEL_CHECK(output.dtype() == input.dtype(), op, ": output dtype ", output.dtype(), " differs from input dtype ",
               input.dtype());
}

void CheckReduceOp(const char* op, ReduceOp reduce, DType dtype) {
  TESSEL_CHECK(reduce != ReduceOp::kAvg || IsFloating(dtype), op, ": avg needs a floating dtype, got ", dtype);
}

// Checks that `big` is `small` stacked `world` times along dim 0 (a 0-d `small` stacks into [world]).
void CheckStacked(const char* op, const char* big_name, const Tensor& big, const Tensor& small, int world) {
  Shape want = small.sizes();
  if (want.empty()) {
    want = {world};
  } else {
    want[0] *= world;
  }
  TESSEL_CHECK(big.sizes() == want, op, ": ", big_name, " shape ", ShapeStr(big.sizes()), " must be ", ShapeStr(want),
               " (", world, " ranks x ", ShapeStr(small.sizes()), ")");
}

}  // namespace

thread_local std::string t_collective_label;
thread_local uint64_t t_collective_label_hash = 0;

CollectiveLabel::CollectiveLabel(std::string label)
    : previous_(std::move(t_collective_label)), previous_hash_(t_collective_label_hash) {
  for (char& c : label) {
    if (static_cast<unsigned char>(c) < 0x20 || c == 0x7f) c = ' ';
  }
  t_collective_label_hash = label.empty() ? 0 : XXH3_64bits(label.data(), label.size());
  t_collective_label = std::move(label);
}

CollectiveLabel::~CollectiveLabel() {
  t_collective_label = std::move(previous_);
  t_collective_label_hash = previous_hash_;
}

const std::string& CollectiveLabel::Current() { return t_collective_label; }
uint64_t CollectiveLabel::CurrentHash() { return t_collective_label_hash; }

std::string LabelTail(const std::string& label, size_t max_bytes) {
  if (label.size() <= max_bytes) return label;
  constexpr size_t kDots = 3;
  size_t start = label.size() - (max_bytes > kDots ? max_bytes - kDots : 0);
  while (start < label.size() && (static_cast<unsigned char>(label[start]) & 0xC0) == 0x80) ++start;  // continuation
  return "..." + label.substr(start);
}

std::string DescribeCall(const CollectiveDesc& d, bool with_details, bool with_shape) {
  if (d.kind == CollectiveKind::kBarrier) return Str("barrier #", d.seq);  // (no data: bytes and dtype say nothing)
  std::string s = Str(CollectiveKindName(d.kind), " #", d.seq, " (", d.bytes, " B");
  if (with_shape) s += Str(" of shape ", ShapeStr(d.shape));
  if (with_details) {
    s += Str(", ", d.dtype);
    if (d.op) s += Str(", ", ReduceOpName(*d.op));
    if (d.root >= 0) s += Str(", root ", d.root);
    if (d.kind == CollectiveKind::kAllToAll) s += Str(", rows of ", d.row_bytes, " B");
  }
  return d.label.empty() ? s + ")" : Str(s, ") for ", d.label);
}

std::optional<std::string> FindMismatch(std::span<const CollectiveDesc* const> descs, const std::string& group_label) {
  const CollectiveDesc& first = *descs[0];
  for (size_t j = 1; j < descs.size(); ++j) {
    const CollectiveDesc& other = *descs[j];
    if (SameCall(first, other)) continue;
    // Details only when they tell the calls apart: different kinds already do. Calls of one kind show their
    // shapes when those differ (the user's tensors, which byte counts alone do not name).
    const bool details = first.dtype != other.dtype || (first.kind == other.kind && first.bytes == other.bytes);
    const bool shapes = first.kind == other.kind && first.shape != other.shape && !first.shape.empty() &&
                        !other.shape.empty();
    return Str("collective mismatch on ", group_label, ": rank ", j, " called ", DescribeCall(other, details, shapes),
               " while rank 0 called ", DescribeCall(first, details, shapes));
  }
  if (first.kind == CollectiveKind::kAllToAll) return FindSplitMismatch(descs, group_label);
  return std::nullopt;
}

std::string GroupLabel(const std::string& name, std::span<const int> global_ranks) {
  std::string ranks;
  for (int r : global_ranks) ranks += Str(ranks.empty() ? "" : ", ", r);
  return Str("group '", name, "' (global ranks [", ranks, "])");
}

void CheckCommTensor(const char* op, const Tensor& t, DeviceType device_type) {
  TESSEL_CHECK(t.defined(), op, ": undefined tensor");
  TESSEL_CHECK(!t.is_distributed(), op, ": expected a local dense tensor, got a ", t.impl()->KindName(),
               " (pass its local shard)");
  TESSEL_CHECK(t.is_contiguous(), op, ": expected a contiguous tensor, got shape ", ShapeStr(t.sizes()), " strides ",
               ShapeStr(t.strides()));
  TESSEL_CHECK(t.device().type == device_type, op, ": expected a ", device_type == DeviceType::kCpu ? "cpu" : "cuda",
               " tensor, got one on ", t.device());
}

CollectiveDesc DescribeAllReduce(const Tensor& t, ReduceOp op, DeviceType device_type) {
  CheckCommTensor("all_reduce", t, device_type);
  CheckReduceOp("all_reduce", op, t.dtype());
  CollectiveDesc d;
  d.kind = CollectiveKind::kAllReduce;
  SetPayload(d, t);
  d.op = op;
  return d;
}

CollectiveDesc DescribeAllGather(const Tensor& output, const Tensor& input, int world, int rank,
                                 DeviceType device_type) {
  CheckCommTensor("all_gather", output, device_type);
  CheckCommTensor("all_gather", input, device_type);
  CheckSameDType("all_gather", output, input);
  CheckStacked("all_gather", "output", output, input, world);
  const int64_t in_bytes = input.numel() * ElementSize(input.dtype());
  const char* in = static_cast<const char*>(input.raw_data());
  const char* out = static_cast<const char*>(output.raw_data());
  const bool overlap = in_bytes > 0 && in < out + in_bytes * world && out < in + in_bytes;
  TESSEL_CHECK(!overlap || in == out + in_bytes * rank, "all_gather: the input overlaps the output but is not rank ",
               rank, "'s block of it (an in-place all_gather takes input = output block ", rank, ", bytes [",
               in_bytes * rank, ", ", in_bytes * (rank + 1), "); the input starts at byte ", in - out, ")");
  CollectiveDesc d;
  d.kind = CollectiveKind::kAllGather;
  SetPayload(d, input);
  return d;
}

CollectiveDesc DescribeReduceScatter(const Tensor& output, const Tensor& input, ReduceOp op, int world, int rank,
                                     DeviceType device_type) {
  CheckCommTensor("reduce_scatter", output, device_type);
  CheckCommTensor("reduce_scatter", input, device_type);
  CheckSameDType("reduce_scatter", output, input);
  CheckReduceOp("reduce_scatter", op, input.dtype());
  CheckStacked("reduce_scatter", "input", input, output, world);
  // As all_gather's: an output inside the input must be this rank's own block (the in-place form NCCL
  // defines). Elsewhere, peers read that block as their input while this rank writes its result there (the
  // threads backend's direct path gave 4 where the sum was 3, with no error).
  const int64_t out_bytes = output.numel() * ElementSize(output.dtype());
  const char* in = static_cast<const char*>(input.raw_data());
  const char* out = static_cast<const char*>(output.raw_data());
  const bool overlap = out_bytes > 0 && out < in + out_bytes * world && in < out + out_bytes;
  TESSEL_CHECK(!overlap || out == in + out_bytes * rank, "reduce_scatter: the output overlaps the input but is not rank ",
               rank, "'s block of it (an in-place reduce_scatter takes output = input block ", rank, ", bytes [",
               out_bytes * rank, ", ", out_bytes * (rank + 1), "); the output starts at byte ", out - in, ")");
  CollectiveDesc d;
  d.kind = CollectiveKind::kReduceScatter;
  SetPayload(d, input);
  d.op = op;
  return d;
}

CollectiveDesc DescribeAllToAll(const Tensor& output, const Tensor& input, std::vector<int64_t> output_splits,
                                std::vector<int64_t> input_splits, int world, DeviceType device_type) {
  CheckCommTensor("all_to_all", output, device_type);
  CheckCommTensor("all_to_all", input, device_type);
  CheckSameDType("all_to_all", output, input);
  TESSEL_CHECK(input.dim() >= 1 && output.dim() == input.dim(), "all_to_all: expected input and output of the same ",
               "rank >= 1, got ", ShapeStr(input.sizes()), " and ", ShapeStr(output.sizes()));
  TESSEL_CHECK(Shape(input.sizes().begin() + 1, input.sizes().end()) ==
                   Shape(output.sizes().begin() + 1, output.sizes().end()),
               "all_to_all: input ", ShapeStr(input.sizes()), " and output ", ShapeStr(output.sizes()),
               " differ beyond dim 0");
  auto resolve = [&](std::vector<int64_t>& splits, const Tensor& t, const char* which) {
    if (splits.empty()) {
      TESSEL_CHECK(t.size(0) % world == 0, "all_to_all: ", which, " dim 0 (", t.size(0),
                   ") must divide by the group size ", world, " when no split sizes are given");
      splits.assign(world, t.size(0) / world);
    }
    TESSEL_CHECK(static_cast<int>(splits.size()) == world, "all_to_all: ", which, " split sizes have ", splits.size(),
                 " entries for a group of size ", world);
    int64_t total = 0;
    for (int64_t s : splits) {
      TESSEL_CHECK(s >= 0, "all_to_all: negative ", which, " split size ", s);
      total += s;
    }
    TESSEL_CHECK(total == t.size(0), "all_to_all: ", which, " split sizes sum to ", total, " but ", which,
                 " dim 0 is ", t.size(0));
  };
  resolve(input_splits, input, "input");
  resolve(output_splits, output, "output");
  CollectiveDesc d;
  d.kind = CollectiveKind::kAllToAll;
  SetLabel(d);
  d.dtype = input.dtype();
  d.bytes = input.numel() * ElementSize(input.dtype());
  d.row_bytes = NumElements(std::span<const int64_t>(input.sizes()).subspan(1)) * ElementSize(input.dtype());
  d.input_splits = std::move(input_splits);
  d.output_splits = std::move(output_splits);
  return d;
}

CollectiveDesc DescribeBroadcast(const Tensor& t, int root, int world, DeviceType device_type) {
  CheckCommTensor("broadcast", t, device_type);
  TESSEL_CHECK(root >= 0 && root < world, "broadcast: root ", root, " is not a rank of a group of size ", world);
  CollectiveDesc d;
  d.kind = CollectiveKind::kBroadcast;
  SetPayload(d, t);
  d.root = root;
  return d;
}

void TraceP2POps(const std::vector<P2POp>& ops, const std::string& group) {
  for (const P2POp& op : ops) {
    const bool is_send = op.kind == P2POp::Kind::kSend;
    CommTracer::Record({is_send ? CollectiveKind::kSend : CollectiveKind::kRecv, group, op.tensor.dtype(),
                        op.tensor.numel() * ElementSize(op.tensor.dtype())});
    if (!is_send) MarkWritten(op.tensor);
  }
}

void CheckP2POps(const std::vector<P2POp>& ops, int rank, int world, DeviceType device_type) {
  for (const P2POp& op : ops) {
    const char* name = op.kind == P2POp::Kind::kSend ? "send" : "recv";
    CheckCommTensor(name, op.tensor, device_type);
    TESSEL_CHECK(op.peer >= 0 && op.peer < world && op.peer != rank, name, ": peer ", op.peer,
                 " is not another rank of a group of size ", world, " (this is rank ", rank, ")");
  }
}

void TraceCall(const CollectiveDesc& d, const std::string& group) {
  CommTracer::Record(CollectiveRecord{d.kind, group, d.dtype, d.bytes, d.op});
}

namespace {

class SourceRankWork final : public Work {
 public:
  SourceRankWork(WorkPtr work, std::shared_ptr<const int> source)
      : work_(std::move(work)), source_(std::move(source)) {}
  void Wait() override { work_->Wait(); }
  bool IsCompleted() override { return work_->IsCompleted(); }
  void BlockStream(void* stream) override { work_->BlockStream(stream); }
  int SourceRank() override {
    work_->Wait();
    return *source_;
  }

 private:
  WorkPtr work_;
  std::shared_ptr<const int> source_;
};

}  // namespace

WorkPtr IssueRecvAnySource(const ProcessGroup& group, const Tensor& tensor,
                           const std::function<WorkPtr(std::shared_ptr<int> source)>& issue) {
  CheckCommTensor("recv", tensor, DeviceType::kCpu);
  TESSEL_CHECK(group.size() > 1, "recv from any rank on ", GroupLabel(group.name(), group.global_ranks()),
               ": the group has no other rank");
  CommTracer::Record(
      {CollectiveKind::kRecv, group.name(), tensor.dtype(), tensor.numel() * ElementSize(tensor.dtype())});
  MarkWritten(tensor);
  auto source = std::make_shared<int>(kAnySource);
  WorkPtr work = issue(source);
  return std::make_shared<SourceRankWork>(std::move(work), std::move(source));
}

void MarkWritten(const Tensor& t) {
  const Storage& storage = t.impl()->storage();
  if (storage.defined()) storage.BumpVersion();
}

std::vector<int64_t> SplitOffsets(std::span<const int64_t> splits, int64_t row_bytes) {
  std::vector<int64_t> offsets(splits.size() + 1, 0);
  for (size_t j = 0; j < splits.size(); ++j) offsets[j + 1] = offsets[j] + splits[j] * row_bytes;
  return offsets;
}

}  // namespace tessel::comm
