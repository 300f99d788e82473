#include "common/spawn.h"

#include "common/log.h"

namespace cabin {

void log_escaped(const std::string& what, std::exception_ptr e) {
  if (!e) return;
  static const auto log = logger("spawn");
  try {
    std::rethrow_exception(e);
  } catch (const std::exception& x) {
    log->error("{}: ended by an exception: {}", what, x.what());
  } catch (...) {
    log->error("{}: ended by an exception of unknown type", what);
  }
}

}  // namespace cabin
