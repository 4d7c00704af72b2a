#include "lib/sandbox/desktop.hpp"

#include <algorithm>
#include <cstring>

#include "lib/core/error.hpp"
#include "lib/core/log.hpp"
#include "lib/sandbox/sandbox.hpp"

namespace sandweave {

namespace {

constexpr std::size_t max_guest_stderr = 4096;
constexpr std::chrono::seconds guest_timeout{30};
constexpr int xdotool_type_delay_ms = 12;  // xdotool's own default

struct GuestOutput {
    RunOutcome outcome;
    std::string out;
    std::string err;
    bool out_overflow = false;
};

// The first line of what the guest said, bounded and printable.
std::string first_line(const std::string& s) {
    std::string line = s.substr(0, s.find('\n')).substr(0, 200);
    for (char& c : line)
        if (static_cast<unsigned char>(c) < 0x20 || static_cast<unsigned char>(c) == 0x7f) c = '?';
    return line;
}

const DesktopSpec& desktop_of(const SandboxRecord& r) {
    if (!r.spec.desktop)
        throw Error(ErrorCode::usage, "sandbox " + r.id +
                                          " has no desktop (its template has no `desktop:` "
                                          "section; try --template desktop)");
    return *r.spec.desktop;
}

// Runs argv in the sandbox as the desktop user, keeping at most `max_out`
// bytes of stdout (the rest is counted as overflow, never buffered).
GuestOutput run_as_desktop(Context& ctx, const SandboxRecord& r, std::vector<std::string> argv,
                           std::size_t max_out, std::chrono::milliseconds timeout) {
    const DesktopSpec& d = desktop_of(r);
    RunRequest req;
    req.id = r.id;
    req.argv = std::move(argv);
    req.entrypoint = std::vector<std::string>{};  // never the image's entrypoint
    req.user = d.user;
    req.cwd = "/";
    req.env = {std::string("DISPLAY=") + desktop_display, "SANDWEAVE_SCREEN=" + d.screen.str()};
    req.timeout = timeout;
    GuestOutput g;
    AttachOptions io;
    io.stdin_fd = -1;
    io.forward_own_signals = false;
    io.out = OutputSink{-1, [&](std::string_view chunk) {
                            if (g.out.size() + chunk.size() > max_out)
                                g.out_overflow = true;
                            else
                                g.out.append(chunk);
                        }};
    io.err = OutputSink{-1, [&](std::string_view chunk) {
                            if (g.err.size() < max_guest_stderr)
                                g.err.append(chunk.substr(0, max_guest_stderr - g.err.size()));
                        }};
    g.outcome = run_in_sandbox(ctx, req, io);
    return g;
}

SandboxRecord load_record(Context& ctx, const std::string& ref) {
    return ctx.store.load(ctx.store.resolve_id(ref));
}

// What went wrong with a guest command, in one line.
std::string failure(const std::string& what, const GuestOutput& g) {
    std::string why =
        g.outcome.message ? *g.outcome.message : "exit status " + std::to_string(g.outcome.status);
    std::string said = first_line(g.err);
    return what + " failed: " + why + (said.empty() ? "" : ": " + said);
}

std::uint32_t be32(std::string_view s, std::size_t at) {
    auto b = [&](std::size_t i) {
        return static_cast<std::uint32_t>(static_cast<unsigned char>(s[at + i]));
    };
    return b(0) << 24 | b(1) << 16 | b(2) << 8 | b(3);
}

bool key_name_ok(const std::string& k) {
    return !k.empty() && k.size() <= 64 && std::all_of(k.begin(), k.end(), [](char c) {
        return (c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') || (c >= '0' && c <= '9') ||
               c == '_' || c == '+' || c == '-';
    });
}

}  // namespace

void start_desktop(Context& ctx, const SandboxRecord& r) {
    const DesktopSpec& d = desktop_of(r);
    with_context("starting the desktop (" + d.start + " as " + d.user.str() + ")", [&] {
        auto g = run_as_desktop(ctx, r, {d.start}, 64u << 10, guest_timeout);
        if (g.outcome.status != 0) throw Error(ErrorCode::general, failure(d.start, g));
    });
    log().debug("desktop of " + r.id + " is up (" + d.screen.str() + ")");
}

Screenshot take_screenshot(Context& ctx, const std::string& ref) {
    SandboxRecord r = load_record(ctx, ref);
    const DesktopSpec& d = desktop_of(r);
    auto g = run_as_desktop(ctx, r, {"maim", "--format=png", "--hidecursor"}, max_screenshot_bytes,
                            guest_timeout);
    if (g.outcome.status != 0) throw Error(ErrorCode::general, failure("screenshot (maim)", g));
    if (g.out_overflow)
        throw Error(ErrorCode::general, "screenshot of " + r.id + ": the guest sent more than " +
                                            std::to_string(max_screenshot_bytes >> 20) + " MiB");
    with_context("screenshot of " + r.id,
                 [&] { check_screenshot_png(g.out, d.screen.width, d.screen.height); });
    return Screenshot{std::move(g.out), d.screen.width, d.screen.height};
}

void send_input(Context& ctx, const std::string& ref, const DesktopInput& in) {
    SandboxRecord r = load_record(ctx, ref);
    const DesktopSpec& d = desktop_of(r);
    auto argv = input_argv(in, d.screen);
    // Typing takes its time per character.
    auto timeout = guest_timeout + std::chrono::milliseconds(
                                       (xdotool_type_delay_ms + 5) *
                                       static_cast<std::int64_t>(in.text.size() + in.keys.size()));
    auto g = run_as_desktop(ctx, r, std::move(argv), 64u << 10, timeout);
    if (g.outcome.status != 0) throw Error(ErrorCode::general, failure("xdotool", g));
}

void check_screenshot_png(std::string_view png, int width, int height) {
    static const char signature[] = "\x89PNG\r\n\x1a\n";
    auto bad = [](const std::string& why) {
        throw Error(ErrorCode::general, "the guest's screenshot is not a usable PNG: " + why);
    };
    if (png.size() > max_screenshot_bytes)
        bad("over " + std::to_string(max_screenshot_bytes >> 20) + " MiB");
    if (png.size() < 8 + 25 + 12) bad(std::to_string(png.size()) + " bytes is too short");
    if (png.compare(0, 8, std::string_view(signature, 8)) != 0) bad("no PNG signature");
    if (be32(png, 8) != 13 || png.compare(12, 4, "IHDR") != 0) bad("the first chunk is not IHDR");
    std::uint32_t w = be32(png, 16), h = be32(png, 20);
    if (w != static_cast<std::uint32_t>(width) || h != static_cast<std::uint32_t>(height))
        bad(std::to_string(w) + "x" + std::to_string(h) + " instead of the screen's " +
            std::to_string(width) + "x" + std::to_string(height));
    // Every chunk within the bytes, IEND the last one.
    std::size_t at = 8;
    std::string_view last;
    while (at < png.size()) {
        if (png.size() - at < 12) bad("a truncated chunk at byte " + std::to_string(at));
        std::uint64_t len = be32(png, at);
        if (len > png.size() - at - 12)
            bad("a chunk runs past the end at byte " + std::to_string(at));
        last = png.substr(at + 4, 4);
        at += 12 + len;
        if (last == "IEND") break;
    }
    if (last != "IEND" || at != png.size()) bad("it does not end with IEND");
}

std::vector<std::string> input_argv(const DesktopInput& in, const ScreenSize& screen) {
    auto check_point = [&] {
        if (in.x < 0 || in.y < 0 || in.x >= screen.width || in.y >= screen.height)
            throw Error(ErrorCode::usage, "point " + std::to_string(in.x) + "," +
                                              std::to_string(in.y) + " is off the " + screen.str() +
                                              " screen");
    };
    switch (in.kind) {
        case DesktopInput::Kind::move:
            check_point();
            return {"xdotool", "mousemove", std::to_string(in.x), std::to_string(in.y)};
        case DesktopInput::Kind::click:
            check_point();
            if (in.button < 1 || in.button > 9)
                throw Error(ErrorCode::usage,
                            "button " + std::to_string(in.button) +
                                ": expected 1 to 9 (1 left, 2 middle, 3 right, 4/5 wheel)");
            return {"xdotool",
                    "mousemove",
                    std::to_string(in.x),
                    std::to_string(in.y),
                    "click",
                    std::to_string(in.button)};
        case DesktopInput::Kind::type:
            if (in.text.empty()) throw Error(ErrorCode::usage, "text: nothing to type");
            if (in.text.size() > max_typed_bytes)
                throw Error(ErrorCode::usage,
                            "text: over " + std::to_string(max_typed_bytes >> 10) + " KiB");
            if (in.text.find('\0') != std::string::npos)
                throw Error(ErrorCode::usage, "text: contains a NUL byte");
            return {"xdotool", "type", "--delay", std::to_string(xdotool_type_delay_ms),
                    "--",      in.text};
        case DesktopInput::Kind::key: {
            if (in.keys.empty()) throw Error(ErrorCode::usage, "keys: no key given");
            if (in.keys.size() > max_key_names)
                throw Error(ErrorCode::usage,
                            "keys: more than " + std::to_string(max_key_names) + " keys");
            std::vector<std::string> argv = {"xdotool", "key", "--delay",
                                             std::to_string(xdotool_type_delay_ms), "--"};
            for (const auto& k : in.keys) {
                if (!key_name_ok(k))
                    throw Error(ErrorCode::usage,
                                "key '" + first_line(k) +
                                    "': expected an X key name such as Return, ctrl+l or F5 "
                                    "(letters, digits, _ + -)");
                argv.push_back(k);
            }
            return argv;
        }
    }
    throw Error(ErrorCode::usage, "unknown input");
}

}  // namespace sandweave
