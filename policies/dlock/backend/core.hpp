// What every backend has besides its servers, as one piece a backend keeps:
// where lock operations run (a private I/O thread, or the caller's
// executor), whether a thread is one of those, a client id, and one service
// of each type (the watchdog's renewals, the lease watch, the wait engines).
#pragma once

#include <map>
#include <memory>
#include <mutex>
#include <string>
#include <thread>
#include <typeindex>

#include <boost/asio/any_io_executor.hpp>
#include <boost/asio/io_context.hpp>

namespace dlock {

/// A backend's shared part. RedisBackend keeps one; a backend of one's own
/// (see examples/sharded_backend.hpp) keeps one and writes only where its
/// calls go.
class backend_core {
 public:
  using executor_type = boost::asio::any_io_executor;  ///< the executor type of lock operations

  /// With a private I/O thread: its context exists at once (connections
  /// can be made on it); start_thread() runs it.
  backend_core();
  /// On the caller's executor, which the caller runs.
  explicit backend_core(executor_type ex);
  /// Joins the private thread if it still runs (see stop()).
  ~backend_core();
  backend_core(const backend_core&) = delete;
  backend_core& operator=(const backend_core&) = delete;

  /// The private thread's io_context executor, or the caller's executor.
  executor_type get_executor() const noexcept { return executor_; }
  /// A random 128-bit id: the first part of owner ids.
  const std::string& client_id() const noexcept { return client_id_; }
  /// Whether it runs a thread of its own.
  bool owns_thread() const noexcept { return context_ != nullptr; }

  /// True where a blocking call would wait for itself: on the private
  /// thread, or inside a caller's io_context or thread_pool (or a strand of
  /// one) that runs this executor. (Other executor types cannot be asked.)
  bool on_io_thread() const noexcept;

  /// Starts the private thread (no-op on a caller's executor).
  void start_thread();
  /// Lets work queued on the private thread run, and the work it posts in
  /// turn (up to 64 rounds, each waited for at most 2 s), for a destructor
  /// that has just stopped its connections.
  void drain();
  /// Stops the private thread's context and joins it.
  void stop();

  /// One `Service` per backend, made on first use as `Service(owner)`.
  template <class Service, class Owner>
  Service& use_service(Owner& owner) {
    std::lock_guard guard(services_mutex_);
    auto& slot = services_[std::type_index(typeid(Service))];
    if (!slot) slot = std::make_shared<Service>(owner);
    return *static_cast<Service*>(slot.get());
  }
  /// Destroys the services (before the connections they use).
  void clear_services();

 private:
  std::unique_ptr<boost::asio::io_context> context_;
  executor_type executor_;
  std::string client_id_;
  std::thread thread_;
  std::mutex services_mutex_;
  std::map<std::type_index, std::shared_ptr<void>> services_;
};

}  // namespace dlock
