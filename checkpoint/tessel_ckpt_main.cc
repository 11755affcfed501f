// checkpoint/tessel_ckpt_main.cc — the `tessel-ckpt` binary (see cli.h).
#include <iostream>
#include <string>
#include <vector>

#include "checkpoint/cli.h"

int main(int argc, char** argv) {
  return tessel::checkpoint::RunTesselCkpt(std::vector<std::string>(argv + 1, argv + argc), std::cout, std::cerr);
}
