#pragma once
// Desktops: a sandbox whose template has `desktop:` gets an X display at
// create. The template's start program (default
// /usr/local/lib/sandweave/desktop-start in the `desktop` image) runs as the
// desktop user (never root, not the agent's uid) with DISPLAY=:0 and
// SANDWEAVE_SCREEN=WxH, starts the X server and a window manager in the
// background and exits once the display answers; they keep running, adopted
// by the guest init. With hidepid 2 an agent at another uid cannot see them in
// /proc, though it may draw on the display like any X client.
//
// Screenshots and input are commands run in the guest as the desktop user
// (maim, xdotool), argv vectors built here. Their output is hostile: a
// screenshot is accepted only as a PNG (signature, an IHDR of the configured
// size, an IEND at its end) of at most max_screenshot_bytes.

#include <cstdint>
#include <string>
#include <string_view>
#include <vector>

#include "lib/options/options.hpp"
#include "lib/sandbox/context.hpp"
#include "lib/store/state.hpp"

namespace sandweave {

inline constexpr const char* desktop_display = ":0";
inline constexpr std::size_t max_screenshot_bytes = 32u << 20;
inline constexpr std::size_t max_typed_bytes = 64u << 10;
inline constexpr std::size_t max_key_names = 256;

// Runs the desktop's start program in a freshly started sandbox (create
// calls it); throws when it fails, so the create rolls back.
void start_desktop(Context& ctx, const SandboxRecord& r);

struct Screenshot {
    std::string png;
    int width = 0;
    int height = 0;
};
Screenshot take_screenshot(Context& ctx, const std::string& id);

struct DesktopInput {
    enum class Kind { click, move, type, key };
    Kind kind = Kind::move;
    int x = 0, y = 0;
    int button = 1;                 // click: 1 left, 2 middle, 3 right, 4/5 wheel
    std::string text;               // type
    std::vector<std::string> keys;  // key: xdotool key names ("ctrl+l", "Return")
};
void send_input(Context& ctx, const std::string& id, const DesktopInput& in);

// ---- pure parts, for tests ------------------------------------------------------

// Throws Error(general) naming what is wrong with `png` as a screenshot of a
// width x height screen.
void check_screenshot_png(std::string_view png, int width, int height);
// The xdotool argv for `in` on `screen`; throws Error(usage) for coordinates
// off the screen, a bad button, too much text or a malformed key name.
std::vector<std::string> input_argv(const DesktopInput& in, const ScreenSize& screen);

}  // namespace sandweave
