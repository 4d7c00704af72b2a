#include "cmd/common.hpp"

#include <iostream>

#include "lib/core/error.hpp"
#include "lib/core/units.hpp"

namespace sandweave::cli {

Session::Session(const GlobalOptions& g) {
    if (g.host != "local" && !g.host.empty())
        throw Error(
            ErrorCode::usage,
            "--host " + g.host + ": only the local connection is available in this version");
    std::filesystem::path root =
        g.state_dir.empty() ? StateStore::default_root() : std::filesystem::path(g.state_dir);
    store_ = std::make_unique<StateStore>(root);
    ctx_ = std::make_unique<Context>(
        Context{*store_, runner_, host_, g.runsc.empty() ? std::nullopt : std::optional(g.runsc)});
}

void print_json(const nlohmann::json& j) {
    std::cout << j.dump(2) << std::endl;
}
void print_line(const std::string& s) {
    std::cout << s << '\n';
}

void add_global_options(CLI::App& app, GlobalOptions& g) {
    app.add_flag("--json", g.json, "Machine-readable output: one JSON document on stdout");
    app.add_option("--state-dir", g.state_dir,
                   "State directory (default /var/lib/sandweave for root)")
        ->envname("SANDWEAVE_STATE_DIR");
    app.add_option("--host", g.host, "Connection: local (default)")->envname("SANDWEAVE_HOST");
    app.add_option("--runsc", g.runsc, "The runsc binary to drive")->envname("SANDWEAVE_RUNSC");
    app.add_flag("-v,--verbose", g.verbosity, "More logging on stderr");
    app.add_flag("-q,--quiet", g.quiet, "Only errors on stderr");
}

void add_create_flags(CLI::App& sub, CreateFlags& f, bool with_user) {
    sub.add_option("-t,--template", f.template_ref, "Template name, file, or inline JSON/YAML")
        ->capture_default_str();
    sub.add_option("--hidepid", f.hidepid,
                   "Guest /proc policy: 0, 1 or 2 (see sandweave-create(1))");
    auto* audit = sub.add_flag("--audit", f.audit, "Enable the protected runtime audit");
    auto* no_audit =
        sub.add_flag("--no-audit", f.no_audit, "Disable audit, whatever the template says");
    audit->excludes(no_audit);
    sub.add_option("--name", f.name, "A unique name for the sandbox");
    if (with_user) sub.add_option("--user", f.user, "Default UID[:GID] for commands");
    sub.add_option("--label", f.labels, "Label key=value (repeatable)")->allow_extra_args(false);
    sub.add_option("--from-snapshot", f.from_snapshot,
                   "Start from a snapshot (fs or memory; see sandweave-snapshot(1))");
}

CreateRequest to_create_request(const CreateFlags& f) {
    CreateRequest req;
    req.template_ref = f.template_ref;
    req.name = f.name;
    if (!f.hidepid.empty()) {
        if (f.hidepid != "0" && f.hidepid != "1" && f.hidepid != "2")
            throw Error(ErrorCode::usage, "--hidepid '" + f.hidepid + "': expected 0, 1 or 2");
        req.flags.hidepid = f.hidepid[0] - '0';
    }
    if (f.audit) req.flags.audit = true;
    if (f.no_audit) req.flags.audit = false;
    if (!f.user.empty()) {
        auto u = parse_user(f.user);
        if (!u)
            throw Error(
                ErrorCode::usage,
                "--user '" + f.user + "': expected UID[:GID] with numeric ids (e.g. 1001:1001)");
        req.flags.user = *u;
    }
    for (const auto& l : f.labels) {
        auto eq = l.find('=');
        if (eq == std::string::npos || eq == 0)
            throw Error(ErrorCode::usage, "--label '" + l + "': expected key=value");
        req.flags.labels[l.substr(0, eq)] = l.substr(eq + 1);
    }
    req.from_snapshot = f.from_snapshot;
    return req;
}

}  // namespace sandweave::cli
