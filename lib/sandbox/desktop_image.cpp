// The `desktop` image: the coding recipe's minimal Debian plus an X display for
// computer-use agents. Xvfb and twm run as the desktop user (uid 1000, started
// by /usr/local/lib/sandweave/desktop-start, see lib/sandbox/desktop.hpp); the
// agent is uid 1001; st (stterm, a small terminal), dillo (a small web
// browser), xdotool (input), maim (PNG screenshots), the X core fonts and
// DejaVu. Not xterm: under gVisor it loops on "open ttydev: Input/output
// error" (its pty setup seems to expect opening the slave by path to make it
// the controlling terminal); st uses openpty and TIOCSCTTY, which work.
//
// Small on purpose: Xvfb's GLX pulls Mesa's DRI drivers and LLVM (about 140
// MB) that a framebuffer X server without GLX never loads, so they are purged
// (the start script runs Xvfb with `-extension GLX`), and so are apt's lists,
// documentation and translations.

#include <sys/stat.h>
#include <unistd.h>

#include <fstream>

#include "lib/core/error.hpp"
#include "lib/core/fsutil.hpp"
#include "lib/core/log.hpp"
#include "lib/sandbox/image.hpp"

namespace sandweave {

namespace fs = std::filesystem;

namespace {

constexpr const char* desktop_packages =
    "xvfb,twm,stterm,xdotool,maim,dillo,fonts-dejavu-core,xfonts-base,procps";

// Only loaded for GLX, which the start script turns off.
constexpr const char* unused_packages[] = {"libgl1-mesa-dri", "libllvm15", "libz3-4", "libxml2",
                                           "libicu72"};

// Runs as the desktop user with DISPLAY and SANDWEAVE_SCREEN set; exits
// once the display answers, leaving Xvfb and twm running in sessions of their
// own (reparented to the sandbox's init). Their output goes to a log in the
// desktop user's home (0700), never to the pipe sandweave reads.
constexpr const char* start_script = R"SH(#!/bin/sh
# sandweave desktop: the X server and the window manager of a `desktop`
# sandbox, started by sandweave at create as the desktop user.
set -eu
screen="${SANDWEAVE_SCREEN:-1280x800}"
export DISPLAY="${DISPLAY:-:0}"
HOME=$(getent passwd "$(id -u)" | cut -d: -f6)
export HOME="${HOME:-/tmp}"
log="$HOME/desktop.log"
# A filesystem snapshot keeps the last server's lock and socket.
n="${DISPLAY#:}"
n="${n%%.*}"
rm -f "/tmp/.X$n-lock" "/tmp/.X11-unix/X$n"
setsid Xvfb "$DISPLAY" -screen 0 "${screen}x24" -nolisten tcp -br -extension GLX \
    </dev/null >>"$log" 2>&1 &
i=0
until xdotool getdisplaygeometry >/dev/null 2>&1; do
    i=$((i + 1))
    if [ "$i" -ge 150 ]; then
        echo "desktop-start: the X server did not answer within 15 s ($(tail -n 1 "$log"))" >&2
        exit 1
    fi
    sleep 0.1
done
# twm's fontsets need fonts for every charset of a UTF-8 locale; the C locale
# needs only the core fonts.
LC_ALL=C setsid twm -f /etc/sandweave/twmrc </dev/null >>"$log" 2>&1 &
)SH";

// twm places windows where the program asks (stterm -g 80x24+0+0) or at
// random, never waiting for a click; focus follows the pointer.
constexpr const char* twmrc = R"(# sandweave desktop: twm's configuration
RandomPlacement
UsePPosition "on"
NoGrabServer
RestartPreviousState
DecorateTransients
BorderWidth 2
TitleFont "fixed"
MenuFont "fixed"
IconFont "fixed"
IconManagerFont "fixed"
ResizeFont "fixed"
Color
{
    BorderColor "slategrey"
    TitleBackground "steelblue"
    TitleForeground "white"
    MenuBackground "white"
    MenuForeground "black"
}
Button1 = : root : f.menu "apps"
menu "apps"
{
    "terminal" f.exec "stterm &"
    "dillo" f.exec "dillo &"
}
)";

void append_line(const fs::path& file, const std::string& line) {
    std::ofstream out(file, std::ios::app);
    out << line << "\n";
    if (!out) throw Error(ErrorCode::general, "writing " + file.string());
}

void make_home(const fs::path& dir, unsigned uid, mode_t mode) {
    make_dirs(dir, mode);
    if (::chown(dir.c_str(), uid, uid) != 0) throw_errno("chown " + dir.string());
    ::chmod(dir.c_str(), mode);
}

}  // namespace

void ImageStore::build_desktop(const fs::path& rootfs) {
    debootstrap(rootfs, "desktop", desktop_packages);

    log().info("desktop: removing what a display without GLX never loads");
    Command purge;
    purge.argv = {"/usr/sbin/chroot", rootfs.string(), "dpkg", "--purge", "--force-depends"};
    for (const char* p : unused_packages) purge.argv.push_back(p);
    purge.timeout = std::chrono::minutes(5);
    auto r = runner_.run(purge);
    if (!r.ok())
        throw Error(ErrorCode::general, "dpkg --purge in the desktop image: " + r.describe());
    for (const char* d :
         {"var/lib/apt/lists", "usr/share/man", "usr/share/locale", "usr/share/info"})
        remove_tree(rootfs / d);
    make_dirs(rootfs / "var/lib/apt/lists/partial", 0755);
    std::error_code ec;
    for (auto it = fs::recursive_directory_iterator(rootfs / "usr/share/doc", ec);
         it != fs::recursive_directory_iterator(); it.increment(ec)) {
        if (it->is_regular_file(ec) && it->path().filename() != "copyright")
            fs::remove(it->path(), ec);
    }

    // The desktop user owns the display; the agent is another uid.
    append_line(rootfs / "etc/passwd",
                "desktop:x:1000:1000:sandweave desktop:/home/desktop:/bin/sh");
    append_line(rootfs / "etc/passwd", "agent:x:1001:1001:agent:/home/agent:/bin/sh");
    append_line(rootfs / "etc/group", "desktop:x:1000:");
    append_line(rootfs / "etc/group", "agent:x:1001:");
    make_home(rootfs / "home/desktop", 1000, 0700);
    make_home(rootfs / "home/agent", 1001, 0755);

    make_dirs(rootfs / "usr/local/lib/sandweave", 0755);
    write_file_atomic(rootfs / "usr/local/lib/sandweave/desktop-start", start_script, 0755);
    make_dirs(rootfs / "etc/sandweave", 0755);
    write_file_atomic(rootfs / "etc/sandweave/twmrc", twmrc, 0644);
    // X's socket directory, root's and sticky as X expects, so that a non-root
    // server can create its socket and nobody can remove another's.
    make_dirs(rootfs / "tmp/.X11-unix", 01777);
    ::chmod((rootfs / "tmp/.X11-unix").c_str(), 01777);
}

}  // namespace sandweave
