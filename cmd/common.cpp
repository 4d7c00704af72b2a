#include "cmd/common.hpp"

#include <fcntl.h>
#include <signal.h>
#include <sys/signalfd.h>

#include <iostream>

#include "lib/api/local.hpp"
#include "lib/core/error.hpp"
#include "lib/core/fd.hpp"
#include "lib/core/host.hpp"
#include "lib/core/json_input.hpp"
#include "lib/core/units.hpp"
#include "lib/rpc/client.hpp"
#include "lib/rpc/ssh.hpp"
#include "lib/rpc/tls.hpp"
#include "lib/sandbox/context.hpp"

namespace sandweave::cli {

struct Session::Local {
    LocalRunner runner;
    LocalHost host;
    std::unique_ptr<StateStore> store;
};

struct Session::Remote {
    std::unique_ptr<rpc::SshConnection> ssh;
    std::unique_ptr<rpc::TlsConnection> tls;
};

namespace {

std::chrono::seconds connect_timeout_of(const GlobalOptions& g) {
    auto t = parse_duration(g.connect_timeout);
    if (!t || t->count() < 1000)
        throw Error(ErrorCode::usage, "--connect-timeout '" + g.connect_timeout +
                                          "': expected a duration of at least 1s");
    return std::chrono::duration_cast<std::chrono::seconds>(*t);
}

}  // namespace

Fd stop_signals_fd() {
    sigset_t stop;
    sigemptyset(&stop);
    for (int sig : {SIGINT, SIGTERM, SIGHUP}) sigaddset(&stop, sig);
    sigprocmask(SIG_BLOCK, &stop, nullptr);
    Fd sfd(::signalfd(-1, &stop, SFD_CLOEXEC));
    if (!sfd.valid()) throw_errno("signalfd");
    return sfd;
}

void Session::connect_weave(const GlobalOptions& g) {
    rpc::WeaveOptions o;
    if (!g.weave_fingerprint.empty()) o.fingerprint = g.weave_fingerprint;
    if (!g.weave_token_file.empty()) o.token_file = g.weave_token_file;
    if (!g.weave_known_hosts.empty()) o.known_hosts = g.weave_known_hosts;
    o.accept_new = g.accept_new_host_key;
    o.munge = g.weave_munge;
    if (!g.weave_munge_socket.empty()) o.munge_socket = g.weave_munge_socket;
    o.connect_timeout = connect_timeout_of(g);
    auto target = rpc::parse_weave_url(g.host);
    remote_ = std::make_unique<Remote>();
    remote_->tls = std::make_unique<rpc::TlsConnection>(target, o);
    Fd stream = remote_->tls->take_stream();
    Fd out(::fcntl(stream.get(), F_DUPFD_CLOEXEC, 3));
    if (!out.valid()) throw_errno("dup");
    remote_url_ = target.url();
    nlohmann::json extra = nlohmann::json::object();
    if (!remote_->tls->token().empty()) extra["token"] = remote_->tls->token();
    if (!remote_->tls->munge().empty()) extra["munge"] = remote_->tls->munge();
    api_ = std::make_unique<rpc::RpcClient>(std::move(stream), std::move(out), remote_url_, extra);
}

Session::Session(const GlobalOptions& g, api::Caller caller) {
    bool ssh = g.host.rfind("ssh://", 0) == 0, weave = g.host.rfind("weave://", 0) == 0;
    // --state-dir and --runsc describe this host; a worker uses its own,
    // set in its environment (the variables here are simply not used).
    if ((ssh || weave) && (!g.state_dir.empty() || !g.runsc.empty()))
        throw Error(ErrorCode::usage,
                    "--state-dir and --runsc apply to the local connection; a worker uses its "
                    "own (set SANDWEAVE_STATE_DIR or SANDWEAVE_RUNSC in its environment)");
    if (weave) {
        connect_weave(g);
        return;
    }
    if (ssh) {
        rpc::SshOptions o;
        o.remote_binary = g.remote_binary;
        if (!g.identity.empty()) o.identity = g.identity;
        if (!g.known_hosts.empty()) o.known_hosts = g.known_hosts;
        if (!g.ssh_config.empty()) o.config = g.ssh_config;
        o.accept_new_host_key = g.accept_new_host_key;
        o.connect_timeout = connect_timeout_of(g);
        auto target = rpc::parse_ssh_url(g.host);
        remote_ = std::make_unique<Remote>();
        remote_->ssh = std::make_unique<rpc::SshConnection>(target, o);
        Fd stream = remote_->ssh->take_stream();
        Fd out(::fcntl(stream.get(), F_DUPFD_CLOEXEC, 3));
        if (!out.valid()) throw_errno("dup");
        remote_url_ = target.url();
        try {
            api_ = std::make_unique<rpc::RpcClient>(std::move(stream), std::move(out), remote_url_);
        } catch (const Error& e) {
            if (remote_->ssh->remote_exit_status() == 127)
                throw Error(ErrorCode::connection,
                            remote_url_ + ": `" + g.remote_binary +
                                "` was not found on the worker (install sandweave there, or "
                                "give its path with --remote-binary)");
            throw;
        }
        return;
    }
    if (g.host != "local" && !g.host.empty())
        throw Error(ErrorCode::usage,
                    "--host '" + g.host +
                        "': expected local, ssh://[user@]host[:port] or weave://host[:port]");
    local_ = std::make_unique<Local>();
    std::filesystem::path root =
        g.state_dir.empty() ? StateStore::default_root() : std::filesystem::path(g.state_dir);
    local_->store = std::make_unique<StateStore>(root);
    api_ = std::make_unique<api::LocalApi>(
        Context{*local_->store, local_->runner, local_->host,
                g.runsc.empty() ? std::nullopt : std::optional(g.runsc)},
        caller);
}

Session::~Session() = default;

std::string Session::server_name() const {
    auto* rpc = dynamic_cast<const rpc::RpcClient*>(api_.get());
    return rpc ? rpc->server().server : "";
}

int Session::protocol() const {
    auto* rpc = dynamic_cast<const rpc::RpcClient*>(api_.get());
    return rpc ? rpc->server().protocol : 0;
}

void print_json(const nlohmann::json& j) {
    // replace: a message may quote what a user typed, bytes that are not UTF-8 included.
    std::cout << j.dump(2, ' ', false, nlohmann::json::error_handler_t::replace) << std::endl;
}
void print_line(const std::string& s) {
    std::cout << s << '\n';
}

std::string missing_on(const std::optional<std::vector<std::string>>& nodes) {
    if (!nodes || nodes->empty()) return "";
    std::string out = "  (missing on ";
    for (const auto& n : *nodes) out += (out.back() == ' ' ? "" : ", ") + n;
    return out + ")";
}

void add_global_options(CLI::App& app, GlobalOptions& g) {
    app.add_flag("--json", g.json, "Machine-readable output: one JSON document on stdout");
    app.add_option("--state-dir", g.state_dir,
                   "State directory of the local connection (default $SANDWEAVE_STATE_DIR, "
                   "else /var/lib/sandweave for root)")
        ->type_name("DIR");
    app.add_option("--host", g.host,
                   "Connection: local (default), ssh://[user@]host[:port] or weave://host[:port]")
        ->envname("SANDWEAVE_HOST");
    app.add_option("--identity", g.identity, "ssh: private key file (default: agent, ~/.ssh/id_*)")
        ->type_name("FILE")
        ->group("SSH");
    app.add_option("--known-hosts", g.known_hosts,
                   "ssh: known_hosts file (default ~/.ssh/known_hosts)")
        ->type_name("FILE")
        ->group("SSH");
    app.add_option("--ssh-config", g.ssh_config, "ssh: config file (default ~/.ssh/config)")
        ->type_name("FILE")
        ->group("SSH");
    app.add_flag("--accept-new-host-key", g.accept_new_host_key,
                 "ssh, weave: add an unknown host key or controller certificate to the known "
                 "hosts (a changed one is still refused)")
        ->group("SSH");
    app.add_option("--connect-timeout", g.connect_timeout,
                   "ssh, weave: give up connecting after this long")
        ->capture_default_str()
        ->group("SSH");
    app.add_option("--remote-binary", g.remote_binary, "ssh: sandweave on the worker")
        ->capture_default_str()
        ->group("SSH");
    app.add_option("--weave-fingerprint", g.weave_fingerprint,
                   "weave: the controller certificate's sha256 fingerprint to accept "
                   "(default: ~/.config/sandweave/weave_known_hosts)")
        ->envname("SANDWEAVE_WEAVE_FINGERPRINT")
        ->type_name("sha256:HEX")
        ->group("Weave");
    app.add_option("--weave-token-file", g.weave_token_file,
                   "weave: the token to present (0600; default ~/.config/sandweave/weave_token)")
        ->envname("SANDWEAVE_WEAVE_TOKEN_FILE")
        ->type_name("FILE")
        ->group("Weave");
    app.add_flag("--weave-munge", g.weave_munge,
                 "weave: present a munge credential (`munge -n`: who you are on this cluster "
                 "host) instead of a token (default when no token is configured and munged "
                 "runs here)")
        ->envname("SANDWEAVE_WEAVE_MUNGE")
        ->group("Weave");
    app.add_option("--weave-munge-socket", g.weave_munge_socket,
                   "weave: munged's socket [/run/munge/munge.socket.2]")
        ->envname("SANDWEAVE_WEAVE_MUNGE_SOCKET")
        ->type_name("PATH")
        ->group("Weave");
    app.add_option("--weave-known-hosts", g.weave_known_hosts,
                   "weave: pinned controller certificates (default "
                   "~/.config/sandweave/weave_known_hosts)")
        ->type_name("FILE")
        ->group("Weave");
    // No envname for these two: the library reads SANDWEAVE_STATE_DIR and
    // SANDWEAVE_RUNSC itself for the local connection, so an explicit flag
    // can be told from the environment (and refused for a remote one).
    app.add_option("--runsc", g.runsc, "The runsc binary to drive (default $SANDWEAVE_RUNSC)")
        ->type_name("FILE");
    app.add_flag("-v,--verbose", g.verbosity, "More logging on stderr");
    app.add_flag("-q,--quiet", g.quiet, "Only errors on stderr");
    app.add_flag("--progress", g.progress,
                 "Show progress on stderr even when it is not a terminal (on a terminal it is "
                 "always shown)");
}

void add_create_flags(CLI::App& sub, CreateFlags& f, bool with_user, bool with_publish) {
    // run keeps -t for --tty, as docker exec -it does; its template is --template.
    sub.add_option(with_user ? "-t,--template" : "--template", f.template_ref,
                   "Template name, file, or inline JSON/YAML")
        ->capture_default_str()
        ->type_name("TEMPLATE");
    sub.add_option("--hidepid", f.hidepid,
                   "Guest /proc policy: 0, 1 or 2 (see sandweave-create(1))")
        ->type_name("0|1|2");
    auto* audit = sub.add_flag("--audit", f.audit, "Enable the protected runtime audit");
    auto* no_audit =
        sub.add_flag("--no-audit", f.no_audit, "Disable audit, whatever the template says");
    audit->excludes(no_audit);
    sub.add_option("--name", f.name, "A unique name for the sandbox");
    if (with_user) sub.add_option("--user", f.user, "Default UID[:GID] for commands");
    sub.add_option("--label", f.labels, "Label key=value (repeatable)")->allow_extra_args(false);
    sub.add_option("--from-snapshot", f.from_snapshot,
                   "Start from a snapshot (fs or memory; see sandweave-snapshot(1))")
        ->type_name("SNAPSHOT");
    sub.add_option("--ttl", f.ttl, "Terminate the sandbox this long after it starts (e.g. 30m)");
    sub.add_option("--idle-timeout", f.idle_timeout,
                   "Terminate the sandbox after this long without a command or API call");
    sub.add_option("--cpus", f.cpus,
                   "CPUs for the sandbox, overriding the template's (e.g. 2, 0.5)")
        ->type_name("N");
    sub.add_option("--memory", f.memory,
                   "Memory limit, overriding the template's (e.g. 512MiB, 2GiB)")
        ->type_name("SIZE");
    sub.add_option("--network", f.network,
                   "none: no network, whatever the template says (see sandweave-create(1))")
        ->type_name("none");
    sub.add_option("--allow", f.allow,
                   "Let the guest reach CIDR[:PORTS[/tcp|udp]] or NAME[:PORTS[/tcp|udp]] "
                   "(example.com, *.example.com; repeatable; adds to the template's policy)")
        ->type_name("DEST")
        ->allow_extra_args(false);
    sub.add_option("--deny", f.deny,
                   "Refuse CIDR[:PORTS[/tcp|udp]] or NAME (never resolved), even when "
                   "allowed (repeatable)")
        ->type_name("DEST")
        ->allow_extra_args(false);
    if (!with_publish) return;
    sub.add_option("--publish", f.publish,
                   "Expose guest TCP port GUEST on 127.0.0.1:HOST (the same port when HOST is "
                   "left out) for the sandbox's life; without --allow the sandbox gets a "
                   "network that lets nothing out (repeatable)")
        ->type_name("[HOST:]GUEST")
        ->allow_extra_args(false);
}

void check_user_flag(const std::string& flag, const std::string& value) {
    if (!parse_user(value))
        throw Error(
            ErrorCode::usage,
            flag + " '" + value + "': expected UID[:GID] with numeric ids (e.g. 1001:1001)");
}

api::CreateParams to_create_params(const CreateFlags& f, const CLI::App& sub) {
    api::CreateParams p;
    bool template_given = sub.count("--template") > 0;
    if (template_given && !f.from_snapshot.empty())
        throw Error(ErrorCode::usage,
                    "--template and --from-snapshot cannot be combined: a snapshot carries its "
                    "settings");
    // What goes into a sandbox's record or a request must be UTF-8.
    for (const auto& l : f.labels) require_utf8(l, "--label");
    require_utf8(f.name, "--name");
    if (template_given) p.template_ref = f.template_ref;
    if (!f.from_snapshot.empty()) p.from_snapshot = f.from_snapshot;
    if (!f.hidepid.empty()) {
        if (f.hidepid != "0" && f.hidepid != "1" && f.hidepid != "2")
            throw Error(ErrorCode::usage, "--hidepid '" + f.hidepid + "': expected 0, 1 or 2");
        p.hidepid = f.hidepid[0] - '0';
    }
    if (f.audit) p.audit = true;
    if (f.no_audit) p.audit = false;
    if (!f.user.empty()) {
        check_user_flag("--user", f.user);
        p.user = f.user;
    }
    for (const auto& l : f.labels) {
        auto eq = l.find('=');
        if (eq == std::string::npos || eq == 0)
            throw Error(ErrorCode::usage, "--label '" + l + "': expected key=value");
        p.labels[l.substr(0, eq)] = l.substr(eq + 1);
    }
    if (!f.name.empty()) p.name = f.name;
    auto duration = [](const char* flag, const std::string& text) -> std::optional<std::int64_t> {
        if (text.empty()) return std::nullopt;
        auto d = parse_duration(text);
        if (!d)
            throw Error(ErrorCode::usage, std::string(flag) + " '" + text +
                                              "': expected a duration (e.g. 90s, 10m, 1h30m)");
        return d->count();
    };
    p.ttl_ms = duration("--ttl", f.ttl);
    p.idle_timeout_ms = duration("--idle-timeout", f.idle_timeout);
    if (!f.cpus.empty()) {
        char* end = nullptr;
        double c = std::strtod(f.cpus.c_str(), &end);
        if (end == f.cpus.c_str() || *end != '\0' || !(c > 0 && c <= 4096))
            throw Error(ErrorCode::usage, "--cpus '" + f.cpus + "': expected a positive number");
        p.cpus = c;
    }
    if (!f.memory.empty()) {
        p.memory = parse_size(f.memory);
        if (!p.memory)
            throw Error(ErrorCode::usage,
                        "--memory '" + f.memory + "': expected a size (e.g. 512MiB, 2GiB)");
    }
    if (!f.network.empty()) {
        if (f.network != "none")
            throw Error(ErrorCode::usage,
                        "--network '" + f.network +
                            "': expected none (a policy is given with --allow and --deny)");
        if (!f.allow.empty() || !f.deny.empty())
            throw Error(ErrorCode::usage,
                        "--network none cannot be combined with --allow or --deny");
        p.network = f.network;
    }
    // Each entry is checked by the worker (lib/options/network.hpp), which names it.
    if (!f.allow.empty()) p.allow = f.allow;
    if (!f.deny.empty()) p.deny = f.deny;
    if (!f.publish.empty()) p.publish = f.publish;
    return p;
}

}  // namespace sandweave::cli
