// The method table: one row per method of docs/protocol.md, from which the
// server's dispatch, the handshake's method list and the fuzzed params check
// all come, so they cannot drift apart.

#include "lib/api/methods.hpp"

#include <algorithm>

#include "lib/api/local.hpp"
#include "lib/api/protocol.hpp"
#include "lib/core/error.hpp"
#include "lib/core/units.hpp"
#include "lib/sandbox/filter.hpp"

namespace sandweave::api {

namespace {

template <class P>
void check_as(const json& params) {
    (void)from_json<P>(params);
}

// The dispatch of a protocol row (protocol.hpp): its params decoded, its
// Api member called, its result encoded.
template <class P, class R>
Method row(const Row<P, R>& r, void (*validate)(const json&) = nullptr) {
    return Method{r.name, &check_as<P>, validate, [serve = r.serve](Api& api, const json& params) {
                      return encode_value((api.*serve)(from_json<P>(params)));
                  }};
}

// A controller's row: served by the Api's reservations, refused by an Api
// that has none (a worker), as the worker's own create refuses a slot.
template <class P, class R>
Method row(const Row<P, R, Reservations>& r) {
    return Method{r.name, &check_as<P>, nullptr,
                  [serve = r.serve](Api& api, const json& params) {
                      Reservations* on = api.reservations();
                      if (!on) no_reservations();
                      return encode_value((on->*serve)(from_json<P>(params)));
                  },
                  true};
}

template <class R>
Method row(const Row0<R>& r) {
    return Method{r.name, &check_as<Empty>, nullptr,
                  [serve = r.serve](Api& api, const json& params) {
                      (void)from_json<Empty>(params);
                      return encode_value((api.*serve)());
                  }};
}

void validate_create(const json& params) {
    (void)to_create_request(from_json<CreateParams>(params));
}
void validate_pool_create(const json& params) {
    (void)to_create_request(from_json<PoolCreateParams>(params).options);
}
void validate_ls(const json& params) {
    (void)parse_filter(from_json<LsParams>(params).filter);
}
// argv is required, except to attach to a detached command.
// argv may be absent: the sandbox's own command (entrypoint and cmd) runs.
void check_run(const json& params) {
    check_as<RunParams>(params);
}
void validate_run(const json& params) {
    (void)to_run_request(from_json<RunParams>(params));
}
void validate_signal(const json& params) {
    (void)parse_signal(from_json<SignalParams>(params).signal);
}
// Checked whole before the reader applies it (it has no validate step).
void check_resize(const json& params) {
    check_as<ResizeParams>(params);
    auto p = from_json<ResizeParams>(params);
    (void)window_dimension(p.rows, "rows");
    (void)window_dimension(p.cols, "cols");
}
void validate_kill(const json& params) {
    (void)parse_signal(from_json<KillParams>(params).signal);
}

std::vector<Method> build_table() {
    namespace m = protocol;
    std::vector<Method> t = {
        row(m::version),
        row(m::sandbox_create, &validate_create),
        row(m::sandbox_ls, &validate_ls),
        row(m::sandbox_inspect),
        row(m::sandbox_ps),
        row(m::sandbox_kill, &validate_kill),
        row(m::sandbox_wait),
        row(m::sandbox_terminate),
        row(m::sandbox_rm),
        row(m::sandbox_finish),
        row(m::sandbox_prune),
        row(m::audit_export),
        row(m::audit_status),
        row(m::snapshot_create),
        row(m::snapshot_ls),
        row(m::snapshot_rm),
        row(m::pool_create, &validate_pool_create),
        row(m::pool_acquire),
        row(m::pool_ls),
        row(m::pool_resize),
        row(m::pool_rm),
        row(m::batch_reserve),
        row(m::batch_release),
        row(m::template_ls),
        row(m::template_show),
        row(m::template_validate),
        row(m::image_build),
        row(m::image_ls),
        row(m::image_recipes),
        row(m::image_rm),
        row(m::image_import),
        row(m::image_inspect),
        row(m::doctor),
        row(m::desktop_click),
        row(m::desktop_move),
        row(m::desktop_type),
        row(m::desktop_key),
    };
    // Served by the connection itself (they need its streams or its state),
    // checked here like the others.
    t.push_back(Method{"hello", &check_as<HelloParams>, nullptr, nullptr});
    t.push_back(Method{"sandbox.run", &check_run, &validate_run, nullptr});
    t.push_back(Method{"run.stdin", &check_as<StdinParams>, nullptr, nullptr});
    t.push_back(Method{"run.signal", &check_as<SignalParams>, &validate_signal, nullptr});
    t.push_back(Method{"run.cancel", &check_as<RequestRef>, nullptr, nullptr});
    t.push_back(Method{"run.resize", &check_resize, nullptr, nullptr});
    t.push_back(Method{"audit.fetch", &check_as<IdParams>, nullptr, nullptr});
    t.push_back(Method{"desktop.screenshot", &check_as<IdParams>, nullptr, nullptr});
    // sandweave cp: streams, served by the connection like sandbox.run.
    t.push_back(Method{"sandbox.cp_in", &check_as<CpInParams>, nullptr, nullptr});
    t.push_back(Method{"sandbox.cp_out", &check_as<CpOutParams>, nullptr, nullptr});
    std::sort(t.begin(), t.end(),
              [](const Method& a, const Method& b) { return std::string(a.name) < b.name; });
    return t;
}

}  // namespace

const std::vector<Method>& methods() {
    static const std::vector<Method> table = build_table();
    return table;
}

const Method* find_method(const std::string& name) {
    const auto& t = methods();
    auto it = std::lower_bound(t.begin(), t.end(), name,
                               [](const Method& m, const std::string& n) { return m.name < n; });
    return it != t.end() && it->name == name ? &*it : nullptr;
}

const std::vector<std::string>& method_names() {
    static const std::vector<std::string> names = [] {
        std::vector<std::string> n;
        for (const auto& m : methods()) n.push_back(m.name);
        return n;
    }();
    return names;
}

const std::vector<std::string>& controller_only_methods() {
    static const std::vector<std::string> names = [] {
        std::vector<std::string> n;
        for (const Method& m : methods())
            if (m.controller_only) n.push_back(m.name);
        return n;
    }();
    return names;
}

void no_reservations() {
    throw Error(ErrorCode::usage,
                "reservations are a Weave controller's (Slurm job arrays); this worker creates "
                "each sandbox by itself");
}

void check_params(const std::string& method, const json& params) {
    const Method* m = find_method(method);
    if (!m) throw Error(ErrorCode::not_found, "unknown method '" + method + "'");
    m->check(params);
    if (m->validate) m->validate(params);
}

std::uint16_t window_dimension(std::int64_t n, const char* name) {
    if (n < 1 || n > 65535)
        throw Error(ErrorCode::usage, std::string(name) + ": " + std::to_string(n) +
                                          " is not a terminal size (1 to 65535)");
    return static_cast<std::uint16_t>(n);
}

int parse_signal(const json& sig) {
    static const std::pair<const char*, int> names[] = {
        {"HUP", 1},   {"INT", 2},   {"QUIT", 3},  {"KILL", 9},  {"USR1", 10},
        {"USR2", 12}, {"TERM", 15}, {"CONT", 18}, {"STOP", 19}, {"WINCH", 28}};
    // "9", as a command line gives it, is the number 9.
    const std::string text = sig.is_string() ? sig.get<std::string>() : "";
    bool digits =
        !text.empty() && text.size() <= 2 &&
        std::all_of(text.begin(), text.end(), [](char c) { return c >= '0' && c <= '9'; });
    if (sig.is_number_integer() || digits) {
        std::int64_t n = digits ? std::stoi(text) : sig.get<std::int64_t>();
        if (n < 1 || n > 64)
            throw Error(ErrorCode::usage, "signal " + std::to_string(n) + ": expected 1 to 64");
        return static_cast<int>(n);
    }
    if (sig.is_string()) {
        std::string s = sig.get<std::string>();
        if (s.rfind("SIG", 0) == 0) s = s.substr(3);
        for (const auto& [name, n] : names)
            if (s == name) return n;
        throw Error(ErrorCode::usage, "signal '" + sig.get<std::string>() +
                                          "': expected a name such as TERM, INT or KILL, or a "
                                          "number");
    }
    throw Error(ErrorCode::usage,
                "params.signal: expected a string or an integer, got " + detail::type_name(sig));
}

}  // namespace sandweave::api
