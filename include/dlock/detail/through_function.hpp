// Completing an Asio operation from a plain callback: how a backend whose
// engine is compiled (ClusterBackend's) offers completion tokens.
#pragma once

#include <functional>
#include <memory>
#include <utility>

#include <boost/asio/any_io_executor.hpp>
#include <boost/asio/associated_executor.hpp>
#include <boost/asio/async_result.hpp>
#include <boost/asio/executor_work_guard.hpp>
#include <boost/asio/post.hpp>

namespace dlock::detail {

namespace asio = boost::asio;

/// Completes an Asio operation through a std::function<void(Args...)>
/// given to `start`: the handler runs on its associated executor (or
/// `fallback`), which is kept busy until then.
template <class... Args, class CompletionToken, class Start>
auto initiate_through_function(CompletionToken&& token, asio::any_io_executor fallback, Start start) {
  return asio::async_initiate<CompletionToken, void(Args...)>(
      [fallback](auto handler, Start start) {
        auto ex = asio::get_associated_executor(handler, fallback);
        struct pending {
          decltype(handler) h;
          asio::executor_work_guard<decltype(ex)> work;
        };
        auto p = std::make_shared<pending>(pending{std::move(handler), asio::make_work_guard(ex)});
        std::move(start)(std::function<void(Args...)>([p](Args... args) {
          auto wex = p->work.get_executor();
          asio::post(wex, [p, ... a = std::move(args)]() mutable {
            std::move(p->h)(std::move(a)...);
            p->work.reset();
          });
        }));
      },
      token, std::move(start));
}

}  // namespace dlock::detail
