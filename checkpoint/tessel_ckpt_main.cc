// checkpoint/tessel_ckpt_main.cc — the `tessel-ckpt` binary (see cli.h). The command line goes through
// absl's parser like every tessel binary (--help prints the usage; an unknown --flag is an error); what is
// left, the subcommand and its paths, goes to RunTesselCkpt.
#include <iostream>
#include <string>
#include <vector>

#include "absl/flags/parse.h"
#include "absl/flags/usage.h"
#include "checkpoint/cli.h"

int main(int argc, char** argv) {
  absl::SetProgramUsageMessage(
      "tessel-ckpt inspect DIR | verify DIR | export DIR OUT.safetensors (checkpoint/cli.h)");
  const std::vector<char*> rest = absl::ParseCommandLine(argc, argv);
  return tessel::checkpoint::RunTesselCkpt(std::vector<std::string>(rest.begin() + 1, rest.end()), std::cout,
                                           std::cerr);
}
