// `sandweave e2b`: the E2B-compatible HTTP API over this invocation's
// connection (lib/e2b/e2b.hpp), and `sandweave e2b key ...` for its API keys.

#include <iostream>

#include "cmd/common.hpp"
#include "lib/core/error.hpp"
#include "lib/core/fd.hpp"
#include "lib/core/units.hpp"
#include "lib/e2b/e2b.hpp"

namespace sandweave::cli {

namespace {

struct E2bFlags {
    std::string listen = "127.0.0.1:3000";
    std::string keys;
    std::size_t connections = 64;
    std::string idle_timeout = "15s";
    std::string io_timeout = "30s";
    std::string name;
};

std::chrono::milliseconds timeout_of(const std::string& flag, const std::string& text) {
    auto d = parse_duration(text);
    if (!d || d->count() < 100 || *d > std::chrono::hours(1))
        throw Error(ErrorCode::usage,
                    flag + " '" + text + "': expected a duration from 100ms to 1h (e.g. 15s)");
    return *d;
}

std::filesystem::path keys_path(const E2bFlags& f) {
    return f.keys.empty() ? e2b::default_keys_path() : std::filesystem::path(f.keys);
}

void parse_listen(const std::string& text, e2b::ServeOptions& o) {
    auto colon = text.rfind(':');
    std::string port = colon == std::string::npos ? "" : text.substr(colon + 1);
    bool digits = !port.empty() && port.size() <= 5 &&
                  port.find_first_not_of("0123456789") == std::string::npos;
    if (colon == 0 || !digits || std::stoi(port) > 65535)
        throw Error(ErrorCode::usage,
                    "--listen '" + text + "': expected HOST:PORT (PORT 0: any free port)");
    o.host = text.substr(0, colon);
    o.port = std::stoi(port);
}

}  // namespace

void register_e2b(CLI::App& app, GlobalOptions& g, Outcome& out) {
    auto f = std::make_shared<E2bFlags>();
    auto* sub = app.add_subcommand(
        "e2b", "Serve an E2B-compatible API (the e2b SDK works unchanged) over this connection");
    sub->footer(
        "Set E2B_API_URL and E2B_SANDBOX_URL to the printed URL and E2B_API_KEY to a key of "
        "`sandweave e2b key add NAME`. See docs/e2b.md and sandweave-e2b(1).");
    sub->add_option("--listen", f->listen, "Address to serve on (loopback by default; port 0: any)")
        ->capture_default_str()
        ->type_name("HOST:PORT");
    sub->add_option("--keys", f->keys, "API keys file (default ~/.config/sandweave/e2b_keys.json)")
        ->type_name("FILE");
    sub->add_option("--connections", f->connections, "Connections served at once")
        ->capture_default_str()
        ->check(CLI::Range(1, 4096));
    sub->add_option("--idle-timeout", f->idle_timeout,
                    "Close a keep-alive connection that waits this long for its next request")
        ->capture_default_str()
        ->type_name("DURATION");
    sub->add_option("--io-timeout", f->io_timeout,
                    "Give up on a client whose next bytes take this long to send or receive; "
                    "past it, a request body must average 1 KiB/s")
        ->capture_default_str()
        ->type_name("DURATION");
    sub->require_subcommand(0, 1);

    auto* key = sub->add_subcommand("key", "Manage the API keys (identities) of `sandweave e2b`");
    key->require_subcommand(1);
    auto* add =
        key->add_subcommand("add", "Add identity NAME and print its new API key (shown once)");
    add->add_option("NAME", f->name, "The identity (letters, digits, '.', '_', '-')")->required();
    add->callback([f, &g, &out] {
        std::string k = e2b::add_key(keys_path(*f), f->name);
        if (g.json)
            print_json({{"name", f->name}, {"key", k}, {"keys_file", keys_path(*f).string()}});
        else
            print_line(k);
        out.exit_code = 0;
    });
    auto* ls = key->add_subcommand("ls", "List the identities");
    ls->callback([f, &g, &out] {
        auto names = e2b::list_keys(keys_path(*f));
        if (g.json)
            print_json({{"names", names}});
        else
            for (const auto& n : names) print_line(n);
        out.exit_code = 0;
    });
    auto* rm = key->add_subcommand("rm", "Remove an identity (its key stops working at once)");
    rm->add_option("NAME", f->name, "The identity")->required();
    rm->callback([f, &out] {
        e2b::remove_key(keys_path(*f), f->name);
        out.exit_code = 0;
    });

    sub->callback([sub, f, &g, &out] {
        if (!sub->get_subcommands().empty()) return;  // `e2b key ...`
        e2b::ServeOptions o;
        parse_listen(f->listen, o);
        o.keys = keys_path(*f);
        o.threads = f->connections;
        o.idle_timeout = timeout_of("--idle-timeout", f->idle_timeout);
        o.io_timeout = timeout_of("--io-timeout", f->io_timeout);
        Fd sfd = stop_signals_fd();
        Session s(g);
        std::string host = o.host;
        // The URL on stdout (E2B_API_URL and E2B_SANDBOX_URL), once it listens.
        o.on_listening = [host](int port) {
            std::cout << "http://" << host << ":" << port << std::endl;
        };
        e2b::serve(s.api(), o, sfd.get());
        out.exit_code = 0;
    });
}

}  // namespace sandweave::cli
