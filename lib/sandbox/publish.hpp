#pragma once
// Published ports (`--publish HOST:GUEST`, lib/options/options.hpp): a thread of
// the sandbox's supervisor (the shim, like the resolver) listens on
// 127.0.0.1:HOST and relays each connection to GUEST on the guest's address
// through the sandbox's veth. Living in the shim, the ports are open exactly
// while the sandbox's processes live; a port that cannot be bound fails the
// create. The egress policy is not involved: the connection goes from the
// host into the sandbox, and its replies are the chain's established traffic.
//
// One thread serves every port and connection (poll), at most
// max_published_connections at once (more are accepted and closed), with
// 64 KiB queued each way per connection.

#include <cstddef>
#include <functional>
#include <string>

namespace sandweave {

class StateStore;

inline constexpr std::size_t max_published_connections = 256;

// Binds the sandbox's published ports now (throws when one is taken: the
// create then fails) and returns the body that relays until stop_fd becomes
// readable.
std::function<void(int stop_fd)> start_publisher(const StateStore& store, const std::string& id);

}  // namespace sandweave
