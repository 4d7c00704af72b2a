// The desktop methods of LocalApi (lib/sandbox/desktop.hpp does the work) and
// fetch_screenshot, which any client uses to get a checked PNG from any Api.

#include "lib/sandbox/desktop.hpp"
#include "lib/api/local.hpp"
#include "lib/core/error.hpp"
#include "lib/core/fsutil.hpp"
#include "lib/core/sha256.hpp"

namespace sandweave::api {

namespace {

// Chunks of 48 KiB: base64 of one fits the protocol's 64 KiB data limit.
constexpr std::size_t screenshot_chunk = 48u << 10;

DesktopInput pointer(DesktopInput::Kind kind, const PointerParams& p) {
    DesktopInput in;
    in.kind = kind;
    in.x = p.x;
    in.y = p.y;
    if (p.button) {
        if (kind != DesktopInput::Kind::click)
            throw Error(ErrorCode::usage, "button: only for a click");
        in.button = *p.button;
    }
    return in;
}

}  // namespace

ScreenshotResult LocalApi::desktop_screenshot(
    const IdParams& p, const std::function<void(std::string_view)>& on_data) {
    Screenshot shot = take_screenshot(ctx_, p.id);
    std::string_view png(shot.png);
    for (std::size_t at = 0; at < png.size(); at += screenshot_chunk)
        on_data(png.substr(at, screenshot_chunk));
    return ScreenshotResult{shot.width, shot.height, shot.png.size(), sha256_hex(png)};
}

Empty LocalApi::desktop_click(const PointerParams& p) {
    send_input(ctx_, p.id, pointer(DesktopInput::Kind::click, p));
    return {};
}

Empty LocalApi::desktop_move(const PointerParams& p) {
    send_input(ctx_, p.id, pointer(DesktopInput::Kind::move, p));
    return {};
}

Empty LocalApi::desktop_type(const TypeParams& p) {
    DesktopInput in;
    in.kind = DesktopInput::Kind::type;
    in.text = p.text;
    send_input(ctx_, p.id, in);
    return {};
}

Empty LocalApi::desktop_key(const KeyParams& p) {
    DesktopInput in;
    in.kind = DesktopInput::Kind::key;
    in.keys = p.keys;
    send_input(ctx_, p.id, in);
    return {};
}

std::string fetch_screenshot(Api& api, const std::string& id, ScreenshotResult* info) {
    std::string png;
    bool overflow = false;
    ScreenshotResult r = api.desktop_screenshot(IdParams{id}, [&](std::string_view chunk) {
        if (png.size() + chunk.size() > max_screenshot_bytes)
            overflow = true;
        else
            png.append(chunk);
    });
    if (overflow)
        throw Error(ErrorCode::general, "screenshot of " + id + ": the worker sent more than " +
                                            std::to_string(max_screenshot_bytes >> 20) + " MiB");
    if (png.size() != r.bytes || sha256_hex(png) != r.sha256)
        throw Error(ErrorCode::general, "screenshot of " + id + ": received " +
                                            std::to_string(png.size()) + " bytes that do not " +
                                            "match the worker's " + std::to_string(r.bytes) +
                                            " bytes and sha256");
    with_context("screenshot of " + id, [&] { check_screenshot_png(png, r.width, r.height); });
    if (info) *info = r;
    return png;
}

ScreenshotResult save_screenshot(Api& api, const std::string& id, const std::string& path) {
    if (path.empty()) throw Error(ErrorCode::usage, "path: empty");
    ScreenshotResult r;
    std::string png = fetch_screenshot(api, id, &r);
    with_context("writing " + path, [&] { write_file_atomic(path, png, 0644); });
    return r;
}

}  // namespace sandweave::api
