// pipelining/schedule_csv.h — programs to and from PyTorch's CSV layout (`_dump_csv` / `_load_csv`): one
// row per rank, one cell per slot in the compact action form ("0F0", "1SEND_B2"), an idle slot as an empty
// cell. Rows may differ in length.
//
// Invariant: ParseCsv(DumpCsv(p)) == p for every program, idle slots included, except that a row made of a
// single idle slot reads back as an empty row (both are an empty line).
//
// Example:
//   SaveCsv(GenerateSchedule(ScheduleKind::k1F1B, 2, 2, 4), "1f1b.csv");
//   Program p = LoadCsv("1f1b.csv");   // kNotFound naming the file if it is missing
#pragma once

#include <string>
#include <string_view>

#include "pipelining/action.h"

namespace tessel::pipelining {

std::string DumpCsv(const Program& program);
// Throws kInvalidArgument naming the row (rank) and column for a cell that is not an action.
Program ParseCsv(std::string_view text);

// File versions; errors name the path.
void SaveCsv(const Program& program, const std::string& path);
Program LoadCsv(const std::string& path);

}  // namespace tessel::pipelining
