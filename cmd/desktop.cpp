// `sandweave desktop`: screenshots and input of a desktop sandbox
// (lib/sandbox/desktop.hpp), for computer-use agents and for looking.

#include <unistd.h>

#include <sstream>

#include "cmd/common.hpp"
#include "lib/core/error.hpp"
#include "lib/core/fd.hpp"

namespace sandweave::cli {

namespace {

// The sandbox id every desktop verb starts with.
std::shared_ptr<std::string> add_id(CLI::App* sub) {
    auto id = std::make_shared<std::string>();
    sub->add_option("id", *id, "Sandbox id or name")->required();
    return id;
}

void done(const GlobalOptions& g, Outcome& out) {
    if (g.json) print_json(nlohmann::json::object());
    out.exit_code = 0;
}

void register_pointer(CLI::App* desktop, GlobalOptions& g, Outcome& out, bool click) {
    auto* sub = desktop->add_subcommand(
        click ? "click" : "move", click ? "Move the pointer to X Y and click a button"
                                        : "Move the pointer to X Y (pixels from the top left)");
    auto id = add_id(sub);
    auto x = std::make_shared<int>(0);
    auto y = std::make_shared<int>(0);
    auto button = std::make_shared<int>(1);
    sub->add_option("x", *x, "Pixels from the left edge")->required();
    sub->add_option("y", *y, "Pixels from the top edge")->required();
    if (click)
        sub->add_option("--button", *button,
                        "1 left (default), 2 middle, 3 right, 4/5 wheel up/down");
    sub->callback([&g, &out, id, x, y, button, click] {
        Session s(g);
        api::PointerParams p{*id, *x, *y, std::nullopt};
        if (click) {
            p.button = *button;
            s.api().desktop_click(p);
        } else {
            s.api().desktop_move(p);
        }
        done(g, out);
    });
}

}  // namespace

void register_desktop(CLI::App& app, GlobalOptions& g, Outcome& out) {
    auto* desktop = app.add_subcommand(
        "desktop", "Screenshots and input of a desktop sandbox (--template desktop)");
    desktop->require_subcommand(1);

    auto* shot = desktop->add_subcommand(
        "screenshot", "Write the screen as a PNG file on this machine ('-': to stdout)");
    auto shot_id = add_id(shot);
    auto path = std::make_shared<std::string>();
    shot->add_option("file", *path, "The PNG file to write, or - for stdout")->required();
    shot->callback([&g, &out, shot_id, path] {
        Session s(g);
        if (*path == "-") {
            if (g.json) throw Error(ErrorCode::usage, "--json and a PNG cannot share stdout");
            std::string png = api::fetch_screenshot(s.api(), *shot_id);
            if (!write_all(STDOUT_FILENO, png)) throw_errno("writing the PNG to stdout");
            out.exit_code = 0;
            return;
        }
        auto r = api::save_screenshot(s.api(), *shot_id, *path);
        if (g.json) {
            auto j = api::to_json(r);
            j["path"] = *path;
            print_json(j);
        } else {
            print_line(*path);
        }
        out.exit_code = 0;
    });

    register_pointer(desktop, g, out, true);
    register_pointer(desktop, g, out, false);

    auto* type = desktop->add_subcommand(
        "type", "Type TEXT with the keyboard into the focused window (a newline is Return)");
    auto type_id = add_id(type);
    auto text = std::make_shared<std::string>();
    type->add_option("text", *text, "What to type")->required();
    type->callback([&g, &out, type_id, text] {
        Session s(g);
        s.api().desktop_type({*type_id, *text});
        done(g, out);
    });

    auto* key = desktop->add_subcommand(
        "key", "Press keys by X name, one after another: Return, ctrl+l, alt+F4, BackSpace");
    auto key_id = add_id(key);
    auto keys = std::make_shared<std::vector<std::string>>();
    key->add_option("keys", *keys, "xdotool key names (several, or space-separated)")->required();
    key->callback([&g, &out, key_id, keys] {
        std::vector<std::string> names;
        for (const auto& k : *keys) {
            std::istringstream words(k);
            for (std::string w; words >> w;) names.push_back(w);
        }
        Session s(g);
        s.api().desktop_key({*key_id, names});
        done(g, out);
    });
}

}  // namespace sandweave::cli
