// Runs a libFuzzer-style target without libFuzzer: the seed files, then seeded random mutations
// of them. Used under GCC and in ctest; build with clang and -DCABIN_LIBFUZZER=ON for real fuzzing.
#include <cstdint>
#include <cstdlib>
#include <fstream>
#include <iostream>
#include <iterator>
#include <random>
#include <string>
#include <vector>

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size);

int main(int argc, char** argv) {
  size_t runs = 20000;
  std::vector<std::string> seeds;
  for (int i = 1; i < argc; ++i) {
    std::string arg = argv[i];
    if (arg.rfind("-runs=", 0) == 0) {
      runs = std::strtoul(arg.c_str() + 6, nullptr, 10);
      continue;
    }
    std::ifstream in(arg, std::ios::binary);
    if (!in) {
      std::cerr << "cannot read seed " << arg << "\n";
      return 2;
    }
    seeds.emplace_back(std::istreambuf_iterator<char>(in), std::istreambuf_iterator<char>());
  }
  if (seeds.empty()) seeds.emplace_back("{}");
  for (const auto& s : seeds) {
    LLVMFuzzerTestOneInput(reinterpret_cast<const uint8_t*>(s.data()), s.size());
  }
  std::mt19937_64 rng(12345);
  for (size_t i = 0; i < runs; ++i) {
    std::string s = seeds[rng() % seeds.size()];
    int edits = 1 + static_cast<int>(rng() % 8);
    for (int e = 0; e < edits; ++e) {
      size_t pos = s.empty() ? 0 : rng() % (s.size() + 1);
      switch (rng() % 4) {
        case 0: if (pos < s.size()) s[pos] = static_cast<char>(rng()); break;
        case 1: s.insert(pos, 1, static_cast<char>(rng())); break;
        case 2: if (pos < s.size()) s.erase(pos, 1 + rng() % 8); break;
        case 3: s.insert(pos, s.substr(rng() % (s.size() + 1), rng() % 16)); break;
      }
    }
    LLVMFuzzerTestOneInput(reinterpret_cast<const uint8_t*>(s.data()), s.size());
  }
  std::cout << "ran " << seeds.size() + runs << " inputs\n";
  return 0;
}
