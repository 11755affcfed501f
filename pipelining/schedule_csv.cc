// pipelining/schedule_csv.cc — PyTorch's CSV layout for programs (see schedule_csv.h).
#include "pipelining/schedule_csv.h"

#include <fstream>
#include <sstream>

#include "core/base/error.h"

namespace tessel::pipelining {

std::string DumpCsv(const Program& program) {
  std::string out;
  for (const RankProgram& r : program) out += ToString(r) + "\n";
  return out;
}

Program ParseCsv(std::string_view text) {
  Program program;
  size_t begin = 0;
  while (begin < text.size()) {
    size_t end = text.find('\n', begin);
    if (end == std::string_view::npos) end = text.size();
    std::string_view line = text.substr(begin, end - begin);
    if (!line.empty() && line.back() == '\r') line.remove_suffix(1);  // csv.writer's default "\r\n"
    RankProgram row;
    size_t cell_begin = 0;
    for (int column = 0; !line.empty(); ++column) {
      const size_t comma = line.find(',', cell_begin);
      const std::string_view cell = line.substr(cell_begin, comma == std::string_view::npos ? line.npos : comma - cell_begin);
      try {
        AppendSlots(cell, row);
      } catch (const Error& e) {
        TESSEL_FAIL(ErrorCode::kInvalidArgument, "schedule CSV: row ", program.size(), " (rank ", program.size(),
                    "), column ", column, ": ", e.what());
      }
      if (comma == std::string_view::npos) break;
      cell_begin = comma + 1;
    }
    program.push_back(std::move(row));
    begin = end + 1;
  }
  return program;
}

void SaveCsv(const Program& program, const std::string& path) {
  std::ofstream f(path, std::ios::binary | std::ios::trunc);
  TESSEL_CHECK_CODE(ErrorCode::kNotFound, f.good(), "schedule CSV: cannot open '", path, "' for writing");
  f << DumpCsv(program);
  f.close();
  TESSEL_CHECK_CODE(ErrorCode::kDataLoss, f.good(), "schedule CSV: writing '", path, "' failed");
}

Program LoadCsv(const std::string& path) {
  std::ifstream f(path, std::ios::binary);
  TESSEL_CHECK_CODE(ErrorCode::kNotFound, f.good(), "schedule CSV: cannot open '", path, "'");
  std::ostringstream os;
  os << f.rdbuf();
  try {
    return ParseCsv(os.str());
  } catch (const Error& e) {
    TESSEL_FAIL(e.code(), "'", path, "': ", e.what());
  }
}

}  // namespace tessel::pipelining
