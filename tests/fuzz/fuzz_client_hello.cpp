// Fuzz target: the ClientHello reader that checks a tunnel's server name.
#include <cstdint>
#include <span>

#include "server/egress/client_hello.h"

using namespace cabin::egress;

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  const std::span<const uint8_t> in(data, size);
  auto h = parse_client_hello(in);
  if (h.status == ClientHello::Status::kDone) {
    // No shorter prefix of its records is whole; the records alone give the same answer.
    if (h.server_name && (h.server_name->empty() || h.server_name->size() > 255)) __builtin_trap();
    if (h.length == 0 || h.length > size) __builtin_trap();
    for (size_t n = 0; n < h.length; n += 1 + h.length / 16) {
      if (parse_client_hello(in.first(n)).status == ClientHello::Status::kDone) __builtin_trap();
    }
    auto alone = parse_client_hello(in.first(h.length));
    if (alone.status != h.status || alone.server_name != h.server_name) __builtin_trap();
  }
  return 0;
}
