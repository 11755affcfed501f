// checkpoint/cli.cc — tessel-ckpt subcommands.
#include "checkpoint/cli.h"

#include <algorithm>
#include <cstdio>
#include <sstream>

#include "checkpoint/export.h"
#include "checkpoint/metadata.h"
#include "checkpoint/verify.h"
#include "core/base/error.h"

namespace tessel::checkpoint {
namespace {

constexpr const char* kUsage =
    "usage: tessel-ckpt inspect DIR\n"
    "       tessel-ckpt verify DIR\n"
    "       tessel-ckpt export DIR OUT.safetensors\n";

std::string HumanBytes(int64_t n) {
  char buf[32];
  if (n < 1024) return std::to_string(n) + " B";
  const char* units[] = {"KiB", "MiB", "GiB", "TiB"};
  double v = static_cast<double>(n);
  int u = -1;
  while (v >= 1024 && u < 3) {
    v /= 1024;
    ++u;
  }
  std::snprintf(buf, sizeof(buf), "%.1f %s", v, units[u]);
  return buf;
}

// Left-aligned columns sized to their widest cell.
std::string Table(const std::vector<std::vector<std::string>>& rows) {
  std::vector<size_t> width;
  for (const auto& row : rows) {
    width.resize(std::max(width.size(), row.size()), 0);
    for (size_t i = 0; i < row.size(); ++i) width[i] = std::max(width[i], row[i].size());
  }
  std::string out;
  for (const auto& row : rows) {
    std::string line;
    for (size_t i = 0; i < row.size(); ++i) {
      line += row[i];
      if (i + 1 < row.size()) line += std::string(width[i] - row[i].size() + 2, ' ');
    }
    out += line + "\n";
  }
  return out;
}

int Verify(const std::string& dir, std::ostream& out) {
  const VerifyReport r = VerifyCheckpoint(dir);
  if (r.ok()) {
    out << "OK: " << r.chunks_checked << " chunks, " << HumanBytes(r.bytes_checked) << " in " << r.files_checked
        << " files verified (" << dir << ")\n";
    return 0;
  }
  out << "FAILED: " << r.problems.size() << " problem(s) in " << dir << "\n";
  for (const std::string& p : r.problems) out << "  - " << p << "\n";
  return 1;
}

}  // namespace

std::string InspectCheckpoint(const std::string& dir) {
  const Metadata m = ReadMetadata(dir);
  int64_t total = 0;
  std::vector<std::vector<std::string>> rows = {{"FQN", "DTYPE", "SHAPE", "CHUNKS", "BYTES", "SAVED LAYOUT"}};
  for (const auto& [fqn, t] : m.tensors) {
    const int64_t bytes = NumElements(t.shape) * ElementSize(t.dtype);
    total += bytes;
    rows.push_back({fqn, std::string(DTypeName(t.dtype)), ShapeStr(t.shape), std::to_string(t.chunks.size()),
                    std::to_string(bytes), t.layout});
  }
  std::ostringstream os;
  os << "checkpoint " << dir << ": format v" << m.version << ", save " << m.save_id << ", saved by " << m.world_size
     << " rank(s) into " << m.files.size() << " data file(s); " << m.tensors.size() << " tensors (" << HumanBytes(total)
     << "), " << m.bytes.size() << " bytes entries, " << m.values.size() << " values; xxh3-64 checksums per "
     << HumanBytes(m.checksum_block_bytes) << " block\n";
  os << Table(rows);
  for (const auto& [fqn, r] : m.bytes) os << "bytes  " << fqn << "  " << r.byte_length << " bytes\n";
  for (const auto& [fqn, v] : m.values) os << "value  " << fqn << " = " << ScalarValueToString(v) << "\n";
  for (const FileMeta& f : m.files) os << "file   " << f.name << "  rank " << f.rank << "  " << f.size << " bytes\n";
  return os.str();
}

int RunTesselCkpt(const std::vector<std::string>& args, std::ostream& out, std::ostream& err) {
  const std::string cmd = args.empty() ? "" : args[0];
  const bool ok_usage =
      (args.size() == 2 && (cmd == "inspect" || cmd == "verify")) || (args.size() == 3 && cmd == "export");
  if (!ok_usage) {
    err << kUsage;
    return 2;
  }
  try {
    if (cmd == "inspect") {
      out << InspectCheckpoint(args[1]);
      return 0;
    }
    if (cmd == "verify") return Verify(args[1], out);
    const ExportResult r = ExportToSafetensors(args[1], args[2]);
    out << "exported " << r.num_tensors << " tensors (" << HumanBytes(r.tensor_bytes) << ") to " << args[2];
    if (r.num_skipped_bytes_entries > 0) out << " (" << r.num_skipped_bytes_entries << " bytes entries not exported)";
    out << "\n";
    return 0;
  } catch (const std::exception& e) {
    err << "error: " << e.what() << "\n";
    return 1;
  }
}

}  // namespace tessel::checkpoint
