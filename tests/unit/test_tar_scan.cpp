// TarScan: member names of hostile tar layers (lib/core/tar_scan.hpp).

#include <doctest/doctest.h>

#include <cstdio>
#include <string>

#include "lib/core/tar_scan.hpp"

using sandweave::TarScan;

namespace {

// One ustar header (+ data padded to 512) for NAME of TYPE.
std::string member(const std::string& name, char type = '0', const std::string& data = "",
                   const std::string& link = "") {
    std::string h(512, '\0');
    h.replace(0, name.size(), name);
    h.replace(100, 7, "0000644");
    h.replace(108, 7, "0000000");
    h.replace(116, 7, "0000000");
    char size[13];
    std::snprintf(size, sizeof size, "%011o", static_cast<unsigned>(data.size()));
    h.replace(124, 11, size);
    h.replace(136, 11, "00000000000");
    h[156] = type;
    h.replace(157, link.size(), link);
    h.replace(257, 6, std::string("ustar\0", 6));
    h.replace(263, 2, "00");
    h.replace(148, 8, "        ");
    unsigned sum = 0;
    for (unsigned char c : h) sum += c;
    char chk[8];
    std::snprintf(chk, sizeof chk, "%06o", sum);
    h.replace(148, 7, std::string(chk, 6) + '\0');
    std::string body = data;
    body.resize((data.size() + 511) / 512 * 512, '\0');
    return h + body;
}

std::string end() {
    return std::string(1024, '\0');
}

bool scan_all(const std::string& tar, std::string* why = nullptr, std::size_t chunk = 7) {
    TarScan s;
    for (std::size_t i = 0; i < tar.size(); i += chunk)
        if (!s.feed(std::string_view(tar).substr(i, chunk))) break;
    bool ok = s.error().empty() && s.finish();
    if (why) *why = s.error();
    return ok;
}

}  // namespace

TEST_CASE("tar scan: an ordinary layer passes, in any chunking") {
    std::string tar = member("etc/", '5') + member("etc/passwd", '0', "root:x:0:0\n") +
                      member("bin/sh", '2', "", "/bin/busybox") + member(".wh.gone", '0') + end();
    CHECK(scan_all(tar, nullptr, 1));
    CHECK(scan_all(tar, nullptr, 512));
    CHECK(scan_all(tar, nullptr, 100000));
}

TEST_CASE("tar scan: a member leaving the root is refused") {
    std::string why;
    CHECK_FALSE(scan_all(member("../escape.txt") + end(), &why));
    CHECK(why.find("'../escape.txt' escapes") != std::string::npos);
    CHECK_FALSE(scan_all(member("a/../../b") + end()));
    CHECK(scan_all(member("a/..b/c..") + end()));  // only a whole ".." component escapes
}

TEST_CASE("tar scan: a hard link out of the root is refused, a symlink anywhere is not") {
    CHECK_FALSE(scan_all(member("x", '1', "", "../../etc/passwd") + end()));
    CHECK(scan_all(member("x", '2', "", "../../etc/passwd") + end()));
}

TEST_CASE("tar scan: a pax path that escapes is refused") {
    std::string rec = "25 path=../../pax-escape\n";
    std::string why;
    CHECK_FALSE(scan_all(member("PaxHeader", 'x', rec) + member("innocent") + end(), &why));
    CHECK(why.find("'../../pax-escape' escapes") != std::string::npos);
    CHECK_FALSE(scan_all(member("PaxHeader", 'x', "99 path=x\n") + member("a") + end()));
}

TEST_CASE("tar scan: corrupt and truncated archives are refused") {
    std::string tar = member("a", '0', std::string(1000, 'x')) + end();
    std::string bad = tar;
    bad[10] = 'Z';  // the checksum no longer matches
    std::string why;
    CHECK_FALSE(scan_all(bad, &why));
    CHECK(why.find("checksum") != std::string::npos);
    CHECK_FALSE(scan_all(tar.substr(0, 700), &why));
    CHECK(why.find("truncated") != std::string::npos);
    CHECK_FALSE(scan_all(""));
}
