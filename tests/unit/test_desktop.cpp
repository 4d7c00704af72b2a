// lib/sandbox/desktop: a screenshot from the guest is accepted only as a PNG of
// the screen's size; input becomes an xdotool argv, never a shell string, and
// is refused when it is off the screen or malformed. The `desktop:` template
// section resolves into the spec with origins and survives its JSON.
#include <doctest/doctest.h>

#include <filesystem>

#include "lib/api/methods.hpp"
#include "lib/core/error.hpp"
#include "lib/options/options.hpp"
#include "lib/options/template.hpp"
#include "lib/sandbox/desktop.hpp"

using namespace sandweave;
namespace fs = std::filesystem;

namespace {

std::string be32(std::uint32_t v) {
    return {static_cast<char>(v >> 24), static_cast<char>(v >> 16), static_cast<char>(v >> 8),
            static_cast<char>(v)};
}

std::string chunk(const std::string& type, const std::string& body) {
    return be32(static_cast<std::uint32_t>(body.size())) + type + body + "CRC!";
}

// The structure check looks at chunk framing, not at CRCs or pixel data.
std::string png(std::uint32_t w, std::uint32_t h) {
    std::string ihdr = be32(w) + be32(h) + std::string("\x08\x02\x00\x00\x00", 5);
    return std::string("\x89PNG\r\n\x1a\n", 8) + chunk("IHDR", ihdr) + chunk("IDAT", "xx") +
           chunk("IEND", "");
}

std::string error_of(const std::function<void()>& fn) {
    try {
        fn();
    } catch (const Error& e) {
        return e.what();
    }
    return "";
}

ResolvedTemplate builtin_tmpl(const std::string& ref) {
    return TemplateResolver({}, {fs::path(SANDWEAVE_SOURCE_DIR) / "templates"}).resolve(ref);
}

}  // namespace

TEST_SUITE("desktop") {
    TEST_CASE("a PNG of the screen's size passes") {
        CHECK_NOTHROW(check_screenshot_png(png(1280, 800), 1280, 800));
    }

    TEST_CASE("anything else from the guest is refused, saying why") {
        CHECK(error_of([] { check_screenshot_png("not a png", 1280, 800); }).find("too short") !=
              std::string::npos);
        std::string p = png(1280, 800);
        std::string no_sig = p;
        no_sig[1] = 'X';
        CHECK(error_of([&] { check_screenshot_png(no_sig, 1280, 800); }).find("no PNG signature") !=
              std::string::npos);
        CHECK(error_of([&] {
                  check_screenshot_png(png(640, 480), 1280, 800);
              }).find("640x480 instead of the screen's 1280x800") != std::string::npos);
        CHECK(error_of([&] {
                  check_screenshot_png(p.substr(0, p.size() - 12), 1280, 800);
              }).find("does not end with IEND") != std::string::npos);
        CHECK(error_of([&] { check_screenshot_png(p + "trailing", 1280, 800); }).find("IEND") !=
              std::string::npos);
        std::string huge_len = p;
        huge_len.replace(8 + 25, 4, be32(0xffffff00u));  // IDAT claims 4 GiB
        CHECK(error_of([&] {
                  check_screenshot_png(huge_len, 1280, 800);
              }).find("runs past the end") != std::string::npos);
        std::string big(max_screenshot_bytes + 1, 'x');
        CHECK(error_of([&] { check_screenshot_png(big, 1280, 800); }).find("over 32 MiB") !=
              std::string::npos);
    }

    TEST_CASE("input becomes an xdotool argv") {
        ScreenSize s{1280, 800};
        DesktopInput click;
        click.kind = DesktopInput::Kind::click;
        click.x = 10;
        click.y = 799;
        click.button = 3;
        CHECK(input_argv(click, s) ==
              std::vector<std::string>{"xdotool", "mousemove", "10", "799", "click", "3"});
        DesktopInput type;
        type.kind = DesktopInput::Kind::type;
        type.text = "-rf; $(reboot)\n";
        auto argv = input_argv(type, s);
        CHECK(argv.back() == "-rf; $(reboot)\n");  // one argument, after "--"
        CHECK(argv[argv.size() - 2] == "--");
        DesktopInput key;
        key.kind = DesktopInput::Kind::key;
        key.keys = {"ctrl+l", "Return", "KP_Enter", "XF86AudioPlay"};
        CHECK(input_argv(key, s).size() == 5 + 4);
    }

    TEST_CASE("input off the screen or malformed is a usage error") {
        ScreenSize s{800, 600};
        DesktopInput in;
        in.kind = DesktopInput::Kind::move;
        in.x = 800;
        in.y = 0;
        CHECK(error_of([&] { input_argv(in, s); }) == "point 800,0 is off the 800x600 screen");
        in.x = -1;
        CHECK_THROWS_AS(input_argv(in, s), Error);
        in = DesktopInput{};
        in.kind = DesktopInput::Kind::click;
        in.button = 10;
        CHECK(error_of([&] { input_argv(in, s); }).find("button 10") == 0);
        in = DesktopInput{};
        in.kind = DesktopInput::Kind::type;
        CHECK(error_of([&] { input_argv(in, s); }) == "text: nothing to type");
        in.text = std::string("a\0b", 3);
        CHECK(error_of([&] { input_argv(in, s); }) == "text: contains a NUL byte");
        in.text = std::string(max_typed_bytes + 1, 'a');
        CHECK(error_of([&] { input_argv(in, s); }) == "text: over 64 KiB");
        in = DesktopInput{};
        in.kind = DesktopInput::Kind::key;
        CHECK(error_of([&] { input_argv(in, s); }) == "keys: no key given");
        for (const char* bad : {"Return;rm", "a b", "", "$(x)", "a/b"}) {
            std::string shown = bad;
            CAPTURE(shown);
            in.keys = {bad};
            CHECK_THROWS_AS(input_argv(in, s), Error);
        }
    }

    TEST_CASE("parse_screen: WIDTHxHEIGHT within 64..4096") {
        CHECK(parse_screen("1280x800")->width == 1280);
        CHECK(parse_screen("64x4096")->height == 4096);
        for (const char* bad : {"", "1280", "x800", "1280x", "63x800", "1280x4097", "12 80x800",
                                "1280X800", "-1x800"}) {
            std::string shown = bad;
            CAPTURE(shown);
            CHECK_FALSE(parse_screen(bad).has_value());
        }
    }

    TEST_CASE("the desktop template resolves a desktop with origins; a child changes the screen") {
        SandboxSpec s = resolve_spec(builtin_tmpl("desktop"), nullptr, "", FlagOverrides{});
        REQUIRE(s.desktop.has_value());
        CHECK(s.desktop->screen.str() == "1280x800");
        CHECK(s.desktop->user.uid == 1000u);
        CHECK(s.user.uid == 1001u);
        CHECK(s.env.at("DISPLAY") == ":0");
        CHECK(s.origin.at("/desktop/screen") == "template desktop");
        SandboxSpec c = resolve_spec(
            builtin_tmpl(R"({"extends": "desktop", "desktop": {"screen": "800x600"}})"), nullptr,
            "", {});
        CHECK(c.desktop->screen.str() == "800x600");
        CHECK(c.origin.at("/desktop/screen") == "template inline");
        CHECK(c.desktop->start == default_desktop_start);
        SandboxSpec back = spec_from_json(to_json(c));
        REQUIRE(back.desktop.has_value());
        CHECK(back.desktop->screen.str() == "800x600");
        CHECK(back.desktop->user.str() == "1000:1000");
        CHECK_FALSE(resolve_spec(builtin_tmpl("base"), nullptr, "", {}).desktop.has_value());
    }

    TEST_CASE("a bad desktop section names the key") {
        CHECK(error_of([] {
                  builtin_tmpl(R"({"extends": "desktop", "desktop": {"screen": "10x10"}})");
              }).find("desktop.screen: expected WIDTHxHEIGHT") != std::string::npos);
        CHECK(error_of([] {
                  builtin_tmpl(R"({"extends": "desktop", "desktop": {"user": "0"}})");
              }).find("desktop.user: the desktop must not run as root") != std::string::npos);
        CHECK(error_of([] {
                  builtin_tmpl(R"({"extends": "desktop", "desktop": {"scren": "800x600"}})");
              }).find("did you mean 'screen'") != std::string::npos);
    }

    TEST_CASE("the desktop methods check their params' shape") {
        using nlohmann::json;
        CHECK_NOTHROW(
            api::check_params("desktop.click", {{"id", "x"}, {"x", 1}, {"y", 2}, {"button", 3}}));
        CHECK_NOTHROW(api::check_params("desktop.key", {{"id", "x"}, {"keys", {"Return"}}}));
        CHECK_THROWS_AS(api::check_params("desktop.click", {{"id", "x"}, {"x", "1"}, {"y", 2}}),
                        Error);
        CHECK_THROWS_AS(api::check_params("desktop.key", {{"id", "x"}, {"keys", "Return"}}), Error);
        CHECK_THROWS_AS(api::check_params("desktop.type", {{"id", "x"}}), Error);
        CHECK_THROWS_AS(api::check_params("desktop.screenshot", {{"id", "x"}, {"path", "/tmp/x"}}),
                        Error);
    }
}
