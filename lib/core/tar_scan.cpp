#include "lib/core/tar_scan.hpp"

#include <algorithm>
#include <cstring>

namespace sandweave {
namespace {

constexpr std::size_t block = 512;
constexpr std::uint64_t max_meta = 1u << 20;  // a long name or pax header

std::string field(const unsigned char* h, std::size_t off, std::size_t len) {
    const char* p = reinterpret_cast<const char*>(h + off);
    return std::string(p, strnlen(p, len));
}

// Octal, or base-256 (high bit set) for big values.
bool number(const unsigned char* h, std::size_t off, std::size_t len, std::uint64_t& out) {
    out = 0;
    if (h[off] & 0x80) {
        for (std::size_t i = 1; i < len; ++i) {
            if (out >> 55) return false;
            out = (out << 8) | h[off + i];
        }
        return (h[off] & 0x7f) == 0;
    }
    std::size_t i = off, end = off + len;
    while (i < end && h[i] == ' ') ++i;
    bool any = false;
    for (; i < end && h[i] >= '0' && h[i] <= '7'; ++i) {
        if (out >> 60) return false;
        out = out * 8 + static_cast<std::uint64_t>(h[i] - '0');
        any = true;
    }
    for (; i < end; ++i)
        if (h[i] != ' ' && h[i] != 0) return false;
    return any || h[off] == 0 || h[off] == ' ';
}

bool escapes(const std::string& path) {
    std::size_t start = 0;
    while (start <= path.size()) {
        auto slash = path.find('/', start);
        if (slash == std::string::npos) slash = path.size();
        if (path.compare(start, slash - start, "..") == 0 && slash - start == 2) return true;
        start = slash + 1;
    }
    return false;
}

}  // namespace

bool TarScan::fail(std::string why) {
    if (error_.empty()) error_ = std::move(why);
    return false;
}

bool TarScan::member(const std::string& path, char type, const std::string& link) {
    ++members_;
    if (path.find('\0') != std::string::npos || path.empty())
        return fail("a member with an empty or malformed name");
    if (escapes(path)) return fail("member '" + path + "' escapes the image's root");
    if (type == '1' && escapes(link))
        return fail("hard link '" + path + "' points outside the image's root ('" + link + "')");
    return true;
}

bool TarScan::header(const unsigned char* h) {
    if (std::all_of(h, h + block, [](unsigned char c) { return c == 0; })) {
        if (++zero_blocks_ >= 2) ended_ = true;
        return true;
    }
    if (zero_blocks_) zero_blocks_ = 0;
    std::uint64_t sum = 0, want = 0;
    for (std::size_t i = 0; i < block; ++i) sum += (i >= 148 && i < 156) ? ' ' : h[i];
    if (!number(h, 148, 8, want) || sum != want)
        return fail("not a tar archive, or a corrupt one (bad header checksum at member " +
                    std::to_string(members_ + 1) + ")");
    std::uint64_t size = 0;
    if (!number(h, 124, 12, size)) return fail("a member with a malformed size");
    char type = static_cast<char>(h[156]);
    if (type == 'L' || type == 'K' || type == 'x') {
        if (size > max_meta) return fail("a tar extended header over 1 MiB");
        collecting_ = type;
        collect_ = size;
        collected_.clear();
        skip_ = (block - size % block) % block;
        return true;
    }
    if (type == 'g') {  // global pax header: nothing we rely on
        skip_ = (size + block - 1) / block * block;
        return true;
    }
    std::string name = field(h, 0, 100);
    std::string link = field(h, 157, 100);
    if (std::memcmp(h + 257, "ustar", 5) == 0) {
        std::string prefix = field(h, 345, 155);
        if (!prefix.empty()) name = prefix + "/" + name;
    }
    if (!long_name_.empty()) name = long_name_;
    if (!long_link_.empty()) link = long_link_;
    if (!pax_path_.empty()) name = pax_path_;
    if (!pax_link_.empty()) link = pax_link_;
    long_name_.clear();
    long_link_.clear();
    pax_path_.clear();
    pax_link_.clear();
    if (!member(name, type, link)) return false;
    // Links, directories, devices and fifos carry no data whatever size says.
    bool has_data = type == '0' || type == '\0' || type == '7';
    skip_ = has_data ? (size + block - 1) / block * block : 0;
    return true;
}

bool TarScan::feed(std::string_view data) {
    if (!error_.empty()) return false;
    while (!data.empty()) {
        if (ended_) return true;  // padding after the end: ignored
        if (collect_) {
            std::size_t n =
                static_cast<std::size_t>(std::min<std::uint64_t>(collect_, data.size()));
            collected_.append(data.substr(0, n));
            data.remove_prefix(n);
            collect_ -= n;
            if (collect_) continue;
            if (collecting_ == 'L') long_name_ = collected_.substr(0, collected_.find('\0'));
            if (collecting_ == 'K') long_link_ = collected_.substr(0, collected_.find('\0'));
            if (collecting_ == 'x') {
                // Records: "LEN key=value\n".
                std::size_t pos = 0;
                while (pos < collected_.size()) {
                    std::size_t sp = collected_.find(' ', pos);
                    if (sp == std::string::npos) return fail("a malformed pax header");
                    std::uint64_t len = 0;
                    for (std::size_t i = pos; i < sp; ++i) {
                        if (collected_[i] < '0' || collected_[i] > '9' || len > max_meta)
                            return fail("a malformed pax header");
                        len = len * 10 + static_cast<std::uint64_t>(collected_[i] - '0');
                    }
                    if (len <= sp - pos + 1 || pos + len > collected_.size())
                        return fail("a malformed pax header");
                    std::string rec = collected_.substr(sp + 1, pos + len - sp - 2);
                    auto eq = rec.find('=');
                    if (eq != std::string::npos) {
                        if (rec.compare(0, eq, "path") == 0) pax_path_ = rec.substr(eq + 1);
                        if (rec.compare(0, eq, "linkpath") == 0) pax_link_ = rec.substr(eq + 1);
                    }
                    pos += len;
                }
            }
            collecting_ = 0;
            continue;
        }
        if (skip_) {
            std::size_t n = static_cast<std::size_t>(std::min<std::uint64_t>(skip_, data.size()));
            data.remove_prefix(n);
            skip_ -= n;
            continue;
        }
        std::size_t need = block - buf_.size();
        std::size_t n = std::min(need, data.size());
        buf_.append(data.substr(0, n));
        data.remove_prefix(n);
        if (buf_.size() == block) {
            bool ok = header(reinterpret_cast<const unsigned char*>(buf_.data()));
            buf_.clear();
            if (!ok) return false;
        }
    }
    return true;
}

bool TarScan::finish() {
    if (!error_.empty()) return false;
    if (!buf_.empty() || skip_ || collect_)
        return fail("the archive ends in the middle of a member (truncated)");
    if (members_ == 0 && !ended_) return fail("an empty or non-tar layer");
    return true;
}

}  // namespace sandweave
