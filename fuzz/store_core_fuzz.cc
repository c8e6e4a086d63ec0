// libFuzzer: the workers' TCPStore core takes any bytes from any number of clients without
// crashing, growing past its limits or leaving state behind when the clients go.
#include <cstddef>
#include <cstdint>
#include <string>

#include "agent/store_core.h"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  dtrun::StoreCore core;
  // Each step: [client 0-3][length 0-255][bytes]; the same client's steps join into one stream.
  size_t at = 0;
  while (at + 2 <= size) {
    const dtrun::StoreClientId client = data[at] % 4;
    const size_t n = std::min<size_t>(data[at + 1], size - at - 2);
    const std::string chunk(reinterpret_cast<const char*>(data + at + 2), n);
    at += 2 + n;
    if (!core.OnData(client, chunk)) core.OnDisconnect(client);
    for (dtrun::StoreClientId c : core.TakeClientsWithOutput()) core.TakeOutput(c);
  }
  for (dtrun::StoreClientId c = 0; c < 4; ++c) core.OnDisconnect(c);
  return 0;
}
