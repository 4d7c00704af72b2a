// The method table: one row per method of docs/protocol.md, from which the
// server's dispatch, the handshake's method list and the fuzzed params check
// all come, so they cannot drift apart.

#include "lib/api/methods.hpp"

#include <algorithm>

#include "lib/api/local.hpp"
#include "lib/core/error.hpp"
#include "lib/core/units.hpp"
#include "lib/sandbox/filter.hpp"

namespace sandweave::api {

namespace {

template <class P>
void check_as(const json& params) {
    (void)from_json<P>(params);
}

// A row for a method taking P and returning what `fn` returns.
template <class P, class Fn>
Method row(const char* name, Fn fn, void (*validate)(const json&) = nullptr) {
    return Method{name, &check_as<P>, validate, [fn](Api& api, const json& params) {
                      return encode_value(fn(api, from_json<P>(params)));
                  }};
}

template <class Fn>
Method row0(const char* name, Fn fn) {
    return Method{name, &check_as<Empty>, nullptr, [fn](Api& api, const json& params) {
                      (void)from_json<Empty>(params);
                      return encode_value(fn(api));
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
    std::vector<Method> t = {
        row0("version", [](Api& a) { return a.version(); }),
        row<CreateParams>(
            "sandbox.create", [](Api& a, const CreateParams& p) { return a.create(p); },
            &validate_create),
        row<LsParams>(
            "sandbox.ls", [](Api& a, const LsParams& p) { return a.ls(p); }, &validate_ls),
        row<IdParams>("sandbox.inspect", [](Api& a, const IdParams& p) { return a.inspect(p); }),
        row<IdParams>("sandbox.ps", [](Api& a, const IdParams& p) { return a.ps(p); }),
        row<KillParams>(
            "sandbox.kill", [](Api& a, const KillParams& p) { return a.kill(p); }, &validate_kill),
        row<HandleParams>("sandbox.wait", [](Api& a, const HandleParams& p) { return a.wait(p); }),
        row<IdParams>("sandbox.terminate",
                      [](Api& a, const IdParams& p) { return a.terminate(p); }),
        row<IdParams>("sandbox.rm", [](Api& a, const IdParams& p) { return a.rm(p); }),
        row<FinishParams>("sandbox.finish",
                          [](Api& a, const FinishParams& p) { return a.finish(p); }),
        row0("sandbox.prune", [](Api& a) { return a.prune(); }),
        row<AuditExportParams>(
            "audit.export", [](Api& a, const AuditExportParams& p) { return a.audit_export(p); }),
        row<IdParams>("audit.status", [](Api& a, const IdParams& p) { return a.audit_status(p); }),
        row<SnapshotCreateParams>(
            "snapshot.create",
            [](Api& a, const SnapshotCreateParams& p) { return a.snapshot_create(p); }),
        row0("snapshot.ls", [](Api& a) { return a.snapshot_ls(); }),
        row<IdParams>("snapshot.rm", [](Api& a, const IdParams& p) { return a.snapshot_rm(p); }),
        row<PoolCreateParams>(
            "pool.create", [](Api& a, const PoolCreateParams& p) { return a.pool_create(p); },
            &validate_pool_create),
        row<PoolAcquireParams>(
            "pool.acquire", [](Api& a, const PoolAcquireParams& p) { return a.pool_acquire(p); }),
        row0("pool.ls", [](Api& a) { return a.pool_ls(); }),
        row<PoolResizeParams>("pool.resize",
                              [](Api& a, const PoolResizeParams& p) { return a.pool_resize(p); }),
        row<NameParams>("pool.rm", [](Api& a, const NameParams& p) { return a.pool_rm(p); }),
        row<ReserveParams>("batch.reserve",
                           [](Api& a, const ReserveParams& p) { return a.batch_reserve(p); }),
        row<IdParams>("batch.release",
                      [](Api& a, const IdParams& p) { return a.batch_release(p); }),
        row0("template.ls", [](Api& a) { return a.template_ls(); }),
        row<TemplateShowParams>(
            "template.show",
            [](Api& a, const TemplateShowParams& p) { return a.template_show(p); }),
        row<TemplateValidateParams>(
            "template.validate",
            [](Api& a, const TemplateValidateParams& p) { return a.template_validate(p); }),
        row<ImageBuildParams>("image.build",
                              [](Api& a, const ImageBuildParams& p) { return a.image_build(p); }),
        row0("image.ls", [](Api& a) { return a.image_ls(); }),
        row0("image.recipes", [](Api& a) { return a.image_recipes(); }),
        row<NameParams>("image.rm", [](Api& a, const NameParams& p) { return a.image_rm(p); }),
        row<ImageImportParams>(
            "image.import", [](Api& a, const ImageImportParams& p) { return a.image_import(p); }),
        row<NameParams>("image.inspect",
                        [](Api& a, const NameParams& p) { return a.image_inspect(p); }),
        row0("doctor", [](Api& a) { return a.doctor(); }),
        // desktops
        row<PointerParams>("desktop.click",
                           [](Api& a, const PointerParams& p) { return a.desktop_click(p); }),
        row<PointerParams>("desktop.move",
                           [](Api& a, const PointerParams& p) { return a.desktop_move(p); }),
        row<TypeParams>("desktop.type",
                        [](Api& a, const TypeParams& p) { return a.desktop_type(p); }),
        row<KeyParams>("desktop.key", [](Api& a, const KeyParams& p) { return a.desktop_key(p); }),
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
    static const std::vector<std::string> names = {"batch.release", "batch.reserve"};
    return names;
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
    if (sig.is_number_integer()) {
        auto n = sig.get<std::int64_t>();
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
