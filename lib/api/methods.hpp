#pragma once
// The method table of the API (docs/protocol.md): each method's name, its
// params check, and, for methods that are a plain request/result exchange,
// how to call it on an Api. `hello`, `sandbox.run` and the `run.*` requests
// need the connection's own state and streams: lib/rpc serves them (call is
// empty), but their params are checked here like every other method's.

#include <functional>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

#include "lib/api/api.hpp"

namespace sandweave::api {

struct Method {
    const char* name;
    // The params' shape: types, required and unknown fields (answered -32602).
    void (*check)(const json& params);
    // Their values (hidepid 3, an empty argv): refused with exit status 2 when
    // the method runs. Empty when the shape says it all.
    void (*validate)(const json& params);
    std::function<json(Api&, const json& params)> call;
    // Served only by a Weave controller (a Reservations row of protocol.hpp).
    bool controller_only = false;
};

// Sorted by name.
const std::vector<Method>& methods();
const Method* find_method(const std::string& name);
const std::vector<std::string>& method_names();
// The methods only a Weave controller serves (a worker's `serve` neither
// lists nor serves them): the table's Reservations rows.
const std::vector<std::string>& controller_only_methods();
// Throws the error a worker answers a reservation's request with.
[[noreturn]] void no_reservations();

// Both checks of a method's params: throws Error(usage) naming the problem,
// Error(not_found) for an unknown method. For the fuzz target and tests.
void check_params(const std::string& method, const json& params);

// The running command a run.* request names: the id of its sandbox.run.
struct RequestRef {
    json request;
    template <class V>
    void fields(V& v) {
        v.required("request", request);
        if constexpr (std::is_same_v<V, Reader>)
            if (!request.is_string() && !request.is_number_integer())
                throw Error(ErrorCode::usage, "params.request: expected the id of a sandbox.run");
    }
};

struct StdinParams {
    json request;
    std::string data;  // base64
    bool eof = false;
    template <class V>
    void fields(V& v) {
        v.required("request", request);
        v.optional("data", data);
        v.optional("eof", eof);
    }
};

struct SignalParams {
    json request;
    json signal;
    template <class V>
    void fields(V& v) {
        v.required("request", request);
        v.required("signal", signal);
    }
};

struct ResizeParams {
    json request;
    std::int64_t rows = 0, cols = 0;
    template <class V>
    void fields(V& v) {
        v.required("request", request);
        v.required("rows", rows);
        v.required("cols", cols);
    }
};

// A terminal dimension from a client: 1..65535, else Error(usage) naming it.
std::uint16_t window_dimension(std::int64_t n, const char* name);

}  // namespace sandweave::api
