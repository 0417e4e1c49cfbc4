// backend_core's compiled part: the private I/O thread and the question
// "is this one of the executor's threads?".
#include <dlock/backend/core.hpp>

#include <chrono>
#include <future>
#include <memory>

#include <boost/asio/executor_work_guard.hpp>
#include <boost/asio/post.hpp>
#include <boost/asio/strand.hpp>
#include <boost/asio/thread_pool.hpp>

#include <dlock/detail/random.hpp>

namespace dlock {

namespace asio = boost::asio;

backend_core::backend_core()
    : context_(std::make_unique<asio::io_context>(1)),
      executor_(context_->get_executor()),
      client_id_(detail::random_hex(16)) {}

backend_core::backend_core(executor_type ex) : executor_(std::move(ex)), client_id_(detail::random_hex(16)) {}

backend_core::~backend_core() {
  clear_services();
  stop();
}

void backend_core::start_thread() {
  if (!context_ || thread_.joinable()) return;
  thread_ = std::thread([ctx = context_.get()] {
    auto work = asio::make_work_guard(*ctx);
    ctx->run();
  });
}

void backend_core::drain() {
  if (!context_ || !thread_.joinable()) return;
  // What stopped connections fail completes a few posted steps later, each
  // step posting the next: a round of posted work per marker, for up to 64
  // rounds (an idle round takes microseconds). A thread that does not reach
  // a marker within 2 s is left to stop(); the marker's promise outlives
  // the wait, since the thread may still run it.
  for (int round = 0; round < 64; ++round) {
    auto drained = std::make_shared<std::promise<void>>();
    auto done = drained->get_future();
    asio::post(*context_, [drained] { drained->set_value(); });
    if (done.wait_for(std::chrono::seconds(2)) != std::future_status::ready) return;
  }
}

void backend_core::stop() {
  if (!context_) return;
  context_->stop();
  if (thread_.joinable()) thread_.join();
}

void backend_core::clear_services() {
  std::map<std::type_index, std::shared_ptr<void>> services;
  {
    std::lock_guard guard(services_mutex_);
    services.swap(services_);
  }
}

bool backend_core::on_io_thread() const noexcept {
  if (context_) return std::this_thread::get_id() == thread_.get_id();
  if (auto* io = executor_.target<asio::io_context::executor_type>()) return io->running_in_this_thread();
  if (auto* pool = executor_.target<asio::thread_pool::executor_type>()) return pool->running_in_this_thread();
  if (auto* s = executor_.target<asio::strand<asio::io_context::executor_type>>()) return s->running_in_this_thread();
  if (auto* s = executor_.target<asio::strand<asio::thread_pool::executor_type>>()) return s->running_in_this_thread();
  return false;
}

}  // namespace dlock
