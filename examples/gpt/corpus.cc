// examples/gpt/corpus.cc — generated corpus and batch sampling.
#include "examples/gpt/corpus.h"

#include <array>
#include <filesystem>
#include <fstream>
#include <sstream>
#include <vector>

#include "core/base/error.h"
#include "core/tensor/factory.h"
#include "core/tensor/random.h"

namespace tessel::examples {
namespace {

class Draw {
 public:
  explicit Draw(uint64_t seed) : seed_(seed) {}
  uint32_t Next(uint32_t n) {
    const auto r = Philox4x32({static_cast<uint32_t>(counter_), static_cast<uint32_t>(counter_ >> 32), 7u, 0u},
                              {static_cast<uint32_t>(seed_), static_cast<uint32_t>(seed_ >> 32)});
    ++counter_;
    return r[0] % n;
  }
  template <size_t N>
  const char* Pick(const std::array<const char*, N>& words) {
    return words[Next(N)];
  }

 private:
  uint64_t seed_;
  uint64_t counter_ = 0;
};

constexpr std::array<const char*, 12> kNouns = {"cat", "dog", "bird", "child", "farmer", "river",
                                                "teacher", "garden", "ship", "city", "wolf", "queen"};
constexpr std::array<const char*, 10> kVerbs = {"sees", "finds", "follows", "likes", "helps",
                                                "watches", "paints", "calls", "visits", "carries"};
constexpr std::array<const char*, 10> kAdjs = {"small", "quiet", "red", "old", "bright",
                                               "happy", "tired", "green", "brave", "strange"};
constexpr std::array<const char*, 6> kAdvs = {"slowly", "often", "never", "gladly", "again", "today"};
constexpr std::array<const char*, 4> kDets = {"the", "a", "every", "one"};
constexpr std::array<const char*, 5> kJoins = {"and then", "because", "while", "so", "but"};

void NounPhrase(Draw& d, std::string& out) {
  out += d.Pick(kDets);
  out += ' ';
  if (d.Next(2) == 0) {
    out += d.Pick(kAdjs);
    out += ' ';
  }
  out += d.Pick(kNouns);
}

void Clause(Draw& d, std::string& out) {
  NounPhrase(d, out);
  out += ' ';
  if (d.Next(3) == 0) {
    out += d.Pick(kAdvs);
    out += ' ';
  }
  out += d.Pick(kVerbs);
  out += ' ';
  NounPhrase(d, out);
}

}  // namespace

std::string GenerateCorpus(uint64_t seed, int64_t num_bytes) {
  Draw d(seed);
  std::string out;
  out.reserve(num_bytes + 128);
  while (static_cast<int64_t>(out.size()) < num_bytes) {
    std::string s;
    Clause(d, s);
    if (d.Next(2) == 0) {
      s += ' ';
      s += d.Pick(kJoins);
      s += ' ';
      Clause(d, s);
    }
    s[0] = static_cast<char>(s[0] - 'a' + 'A');
    s += d.Next(5) == 0 ? "!\n" : ". ";
    out += s;
  }
  out.resize(num_bytes);
  return out;
}

std::string LoadCorpus(const std::string& path, uint64_t seed) {
  if (path.empty()) return GenerateCorpus(seed, 1 << 20);
  std::error_code ec;
  TESSEL_CHECK(!std::filesystem::is_directory(path, ec), "train: --data=", path, " is a directory, not a text file");
  std::ifstream in(path, std::ios::binary);
  TESSEL_CHECK(in.good(), "train: --data=", path, " cannot be read");
  std::ostringstream bytes;
  bytes << in.rdbuf();
  std::string text = bytes.str();
  TESSEL_CHECK(!text.empty(), "train: --data=", path, " is empty");
  return text;
}

Batch SampleBatch(const std::string& text, int64_t batch, int64_t seq, int64_t step, uint64_t seed) {
  const int64_t n = static_cast<int64_t>(text.size());
  TESSEL_CHECK(n > seq + 1, "SampleBatch: corpus of ", n, " bytes is too short for seq ", seq);
  Generator gen(seed, static_cast<uint64_t>(step) * static_cast<uint64_t>(batch));
  const std::vector<double> starts =
      Randint(0, n - seq - 1, std::vector<int64_t>{batch}, gen).ToDoubleVector();
  std::vector<int64_t> idx(batch * seq), tgt(batch * seq);
  for (int64_t b = 0; b < batch; ++b) {
    const int64_t p = static_cast<int64_t>(starts[b]);
    for (int64_t t = 0; t < seq; ++t) {
      idx[b * seq + t] = static_cast<unsigned char>(text[p + t]);
      tgt[b * seq + t] = static_cast<unsigned char>(text[p + t + 1]);
    }
  }
  return {FromVector(idx, {batch, seq}), FromVector(tgt, {batch, seq})};
}

}  // namespace tessel::examples
