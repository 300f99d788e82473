// spawn(): starts a coroutine nobody awaits. Asio's `detached` rethrows what escapes such a
// coroutine out of io_context::run(), which ends the process; spawn logs it with what the
// coroutine was for (and the session, where there is one) and lets the rest of the server go on.
#pragma once

// clang-format off
#include "common/asio.h"  // first: see there
// clang-format on

#include <boost/asio/co_spawn.hpp>
#include <exception>
#include <string>

namespace cabin {

// Logs an exception that escaped the coroutine `what` (no-op for a null one).
void log_escaped(const std::string& what, std::exception_ptr e);

// `work`: an awaitable<void>, or a callable that returns one (co_spawn keeps the callable, and
// so a lambda's captures, alive while it runs). `what` names it in the log: "session ses_…:
// watch its sandbox".
// `where`: an executor or an io_context.
template <typename Where, typename Work>
void spawn(Where&& where, Work&& work, std::string what) {
  net::co_spawn(std::forward<Where>(where), std::forward<Work>(work),
                [what = std::move(what)](std::exception_ptr e) { log_escaped(what, e); });
}

}  // namespace cabin
