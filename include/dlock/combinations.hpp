// Every valid lock, as a compile-time list: the cartesian product of one
// type list per policy axis, filtered by the rule table. Opt-in: it brings in
// Boost.Hana, which dlock.hpp does not.
#pragma once

#include <string>
#include <tuple>
#include <type_traits>

#include <boost/hana/at.hpp>
#include <boost/hana/cartesian_product.hpp>
#include <boost/hana/for_each.hpp>
#include <boost/hana/size.hpp>
#include <boost/hana/filter.hpp>
#include <boost/hana/integral_constant.hpp>
#include <boost/hana/transform.hpp>
#include <boost/hana/tuple.hpp>
#include <boost/hana/type.hpp>
#include <boost/hana/unpack.hpp>

#include <dlock/dlock.hpp>
// Policies that only the list brings in (dlock.hpp has the others).
#include <dlock/ownership/naive_expiry.hpp>

namespace dlock::combinations {

namespace hana = boost::hana;

/// One list per axis; adding a policy here adds every valid lock with it.
inline constexpr auto ownerships = hana::tuple_t<ownership::SetNx, ownership::Token, ownership::ReentrantHash,
                                                 ownership::GetSetExpiry, ownership::NaiveExpiry, ownership::Queue,
                                                 ownership::Semaphore, ownership::ReadWrite>;
inline constexpr auto renewals = hana::tuple_t<renewal::None, renewal::FixedLease, renewal::Watchdog>;
inline constexpr auto waits = hana::tuple_t<wait::TryOnce, wait::Spin, wait::Backoff, wait::PubSub, wait::HandOff>;

namespace detail {

template <class Backend, class OwnershipFilter>
constexpr auto locks(OwnershipFilter) {
  auto product = hana::cartesian_product(hana::make_tuple(ownerships, renewals, waits));
  auto valid = hana::filter(product, [](auto combo) {
    using O = typename decltype(+hana::at_c<0>(combo))::type;
    using R = typename decltype(+hana::at_c<1>(combo))::type;
    using W = typename decltype(+hana::at_c<2>(combo))::type;
    return hana::bool_c<valid_on<Backend, O, R, W> && decltype(OwnershipFilter{}(hana::type_c<O>))::value>;
  });
  return hana::transform(valid, [](auto combo) {
    using O = typename decltype(+hana::at_c<0>(combo))::type;
    using R = typename decltype(+hana::at_c<1>(combo))::type;
    using W = typename decltype(+hana::at_c<2>(combo))::type;
    return hana::type_c<Lock<Backend, O, R, W>>;
  });
}

struct any_ownership {
  template <class T>
  constexpr auto operator()(T) const { return hana::true_c; }
};

template <class Wanted>
struct only_ownership {
  template <class T>
  constexpr auto operator()(T) const {
    return hana::bool_c<std::is_same_v<typename T::type, Wanted>>;
  }
};

template <class List>
using as_tuple_type = typename decltype(hana::unpack(List{}, [](auto... t) {
  return hana::type_c<std::tuple<typename decltype(t)::type...>>;
}))::type;

}  // namespace detail

/// Every valid `Lock<Backend, O, R, W>` (by the rule table, and by the
/// quorum rules on a quorum backend), as a hana tuple of types.
template <class Backend = RedisBackend>
constexpr auto all() {
  return detail::locks<Backend>(detail::any_ownership{});
}

/// The valid locks with ownership `O`: lets tests and benchmarks split the
/// list over several translation units, which build in parallel.
template <class O, class Backend = RedisBackend>
constexpr auto with_ownership() {
  return detail::locks<Backend>(detail::only_ownership<O>{});
}

namespace detail {

// The renewal a representative lock of ownership O and wait W takes: the
// watchdog where the rules allow it, else a fixed lease, else none.
template <class O, class W>
using representative_renewal = std::conditional_t<
    valid_combination<O, renewal::Watchdog, W>, renewal::Watchdog,
    std::conditional_t<valid_combination<O, renewal::FixedLease, W>, renewal::FixedLease, renewal::None>>;

}  // namespace detail

/// One lock per valid pair of ownership and wait (with the renewal
/// detail::representative_renewal picks): the subset a backend that is slow
/// to set up (Sentinel) runs.
template <class Backend = RedisBackend>
constexpr auto representative() {
  auto pairs = hana::filter(hana::cartesian_product(hana::make_tuple(ownerships, waits)), [](auto pair) {
    using O = typename decltype(+hana::at_c<0>(pair))::type;
    using W = typename decltype(+hana::at_c<1>(pair))::type;
    return hana::bool_c<valid_on<Backend, O, detail::representative_renewal<O, W>, W>>;
  });
  return hana::transform(pairs, [](auto pair) {
    using O = typename decltype(+hana::at_c<0>(pair))::type;
    using W = typename decltype(+hana::at_c<1>(pair))::type;
    return hana::type_c<Lock<Backend, O, detail::representative_renewal<O, W>, W>>;
  });
}

/// The representative locks whose ownership is owner-checked: those that
/// can run on a backend with replica acknowledgement on (a write too few
/// replicas acknowledged is given back, which needs an owner check).
template <class Backend = RedisBackend>
constexpr auto acknowledgeable() {
  return hana::filter(representative<Backend>(), [](auto t) {
    using L = typename decltype(t)::type;
    return hana::bool_c<L::ownership_type::owner_checked>;
  });
}

/// The same lists as `std::tuple<Lock...>` types, for Catch2's
/// TEMPLATE_LIST_TEST_CASE (the tuple is never instantiated).
template <class Backend = RedisBackend>
using all_t = detail::as_tuple_type<decltype(all<Backend>())>;
template <class O, class Backend = RedisBackend>
using with_ownership_t = detail::as_tuple_type<decltype(with_ownership<O, Backend>())>;
template <class Backend = RedisBackend>
using representative_t = detail::as_tuple_type<decltype(representative<Backend>())>;
template <class Backend = RedisBackend>
using acknowledgeable_t = detail::as_tuple_type<decltype(acknowledgeable<Backend>())>;

/// Calls `f(hana::type_c<Lock>)` for every valid lock, in list order.
template <class Backend = RedisBackend, class F>
void for_each(F&& f) {
  hana::for_each(all<Backend>(), f);
}

}  // namespace dlock::combinations
