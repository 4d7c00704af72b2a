// cp: copies files between this host and a sandbox, as docker cp does
// (lib/api/copy.cpp does the work; README "sandweave cp").
#include "cmd/common.hpp"

namespace sandweave::cli {

void register_cp(CLI::App& app, GlobalOptions& g, Outcome& out) {
    auto* cp = app.add_subcommand(
        "cp", "Copy files between a sandbox and this host (ID:/path; - for a tar stream)");
    auto src = std::make_shared<std::string>();
    auto dst = std::make_shared<std::string>();
    auto user = std::make_shared<std::string>();
    cp->add_option("src", *src, "What to copy: ID:/path, a local path, or - (a tar on stdin)")
        ->type_name("FILE")
        ->required();
    cp->add_option("dst", *dst, "Where to: ID:/path, a local path, or - (a tar on stdout)")
        ->type_name("FILE")
        ->required();
    cp->add_option("--user", *user,
                   "UID[:GID] that reads or writes the files in the sandbox (default: root)")
        ->type_name("U:G");
    cp->footer(
        "A directory is copied with its contents, modes, times and symlinks; SRC/. copies the\n"
        "contents only. Into an existing directory the copy goes inside it; otherwise DST's\n"
        "parent must exist. A relative guest path (ID:dir/file) is relative to the sandbox's\n"
        "working directory. Nothing is left half-written: a failed copy removes what it wrote.");
    cp->callback([&g, &out, src, dst, user] {
        Session s(g);
        api::CopyParams p;
        p.src = api::parse_copy_endpoint(*src);
        p.dst = api::parse_copy_endpoint(*dst);
        if (!user->empty()) p.user = *user;
        api::copy(s.api(), p);
        // With a tar on stdout, stdout is the tar alone.
        if (g.json && *dst != "-") print_json({{"copied", true}, {"src", *src}, {"dst", *dst}});
        out.exit_code = 0;
    });
}

}  // namespace sandweave::cli
