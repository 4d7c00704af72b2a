#include "lib/options/network.hpp"

#include <arpa/inet.h>

#include <algorithm>
#include <cctype>

#include "lib/core/error.hpp"

namespace sandweave {

using nlohmann::json;

namespace {

constexpr std::size_t max_entry_length = 128;

bool all_digits(const std::string& s) {
    return !s.empty() && s.size() <= 5 && std::all_of(s.begin(), s.end(), ::isdigit);
}

// "443" -> 443; 0 when not a port number.
int port_number(const std::string& s) {
    if (!all_digits(s)) return 0;
    int n = std::stoi(s);
    return n >= 1 && n <= 65535 ? n : 0;
}

// A name has a letter or a * before its one optional colon; an IPv4 address
// has neither, an IPv6 one has two colons or more (or brackets).
bool looks_like_name(const std::string& s) {
    if (s[0] == '[' || std::count(s.begin(), s.end(), ':') > 1) return false;
    std::string host = s.substr(0, s.find(':'));
    return std::any_of(host.begin(), host.end(), [](char c) {
        return std::isalpha(static_cast<unsigned char>(c)) || c == '*';
    });
}

// "Example.COM." -> d.name = "example.com"; "" or why not.
std::string parse_name(std::string text, Destination& d) {
    if (!text.empty() && text.back() == '.') text.pop_back();
    for (auto& c : text) c = static_cast<char>(std::tolower(static_cast<unsigned char>(c)));
    std::string base = text;
    if (text == "*") return "a wildcard needs a suffix: *.example.com";
    if (text.rfind("*.", 0) == 0) base = text.substr(2);
    if (base.empty()) return "empty name";
    if (base.size() > 253) return "a domain name is at most 253 characters";
    std::size_t start = 0;
    while (start <= base.size()) {
        auto dot = base.find('.', start);
        std::string label =
            base.substr(start, dot == std::string::npos ? std::string::npos : dot - start);
        if (label.empty()) return "empty label in " + text;
        if (label == "*") return "* goes only as the whole first label: *.example.com";
        if (label.size() > 63) return "a label is at most 63 characters: " + label;
        for (char c : label)
            if (!std::isalnum(static_cast<unsigned char>(c)) && c != '-' && c != '_')
                return "not a domain name: " + text + " (letters, digits, - and _ only)";
        if (label.front() == '-' || label.back() == '-')
            return "a label neither starts nor ends with -: " + label;
        if (dot == std::string::npos) break;
        start = dot + 1;
    }
    d.name = text;
    return "";
}

std::string format_address(int family, const std::array<std::uint8_t, 16>& a) {
    char buf[INET6_ADDRSTRLEN] = {};
    ::inet_ntop(family == 4 ? AF_INET : AF_INET6, a.data(), buf, sizeof buf);
    return buf;
}

// "A" or "A/LEN" into d; "" or why not.
std::string parse_cidr(const std::string& text, bool bracketed, Destination& d) {
    auto slash = text.find('/');
    std::string addr = text.substr(0, slash);
    d.family = addr.find(':') != std::string::npos ? 6 : 4;
    if (d.family == 4 && bracketed) return "only an IPv6 address goes in brackets";
    if (::inet_pton(d.family == 4 ? AF_INET : AF_INET6, addr.c_str(), d.addr.data()) != 1)
        return "not an IPv" + std::to_string(d.family) + " address: " + addr;
    const int bits = d.family == 4 ? 32 : 128;
    d.prefix = bits;
    if (slash != std::string::npos) {
        std::string len = text.substr(slash + 1);
        if (len.empty() || len.size() > 3 || !std::all_of(len.begin(), len.end(), ::isdigit) ||
            std::stoi(len) > bits)
            return "prefix length must be 0 to " + std::to_string(bits) + ", got /" + len;
        d.prefix = std::stoi(len);
    }
    std::array<std::uint8_t, 16> net = d.addr;
    for (int i = d.prefix; i < bits; ++i)
        net[i / 8] &= static_cast<std::uint8_t>(~(0x80u >> (i % 8)));
    if (net != d.addr) {
        d.addr = net;
        return "host bits set (did you mean " + d.address_text() + "?)";
    }
    return "";
}

// "443", "8000-8100", "*", each optionally followed by "/tcp" or "/udp".
std::string parse_ports(const std::string& text, Destination& d) {
    auto slash = text.find('/');
    std::string ports = text.substr(0, slash);
    if (slash != std::string::npos) {
        d.proto = text.substr(slash + 1);
        if (d.proto != "tcp" && d.proto != "udp")
            return "protocol must be tcp or udp, got " + (d.proto.empty() ? "nothing" : d.proto);
    }
    if (ports == "*") {
        if (d.proto.empty()) return "a port of * needs a protocol (*/tcp or */udp)";
        return "";
    }
    auto dash = ports.find('-');
    int lo = port_number(ports.substr(0, dash));
    int hi = dash == std::string::npos ? lo : port_number(ports.substr(dash + 1));
    if (!lo || !hi) return "ports must be N, N-M or * with N and M from 1 to 65535, got " + ports;
    if (hi < lo) return "port range " + ports + " ends before it starts";
    d.port_lo = static_cast<std::uint16_t>(lo);
    d.port_hi = static_cast<std::uint16_t>(hi);
    return "";
}

}  // namespace

std::string Destination::address_text() const {
    return format_address(family, addr) + "/" + std::to_string(prefix);
}

std::string Destination::str() const {
    std::string a = is_name() ? name : address_text();
    if (any_port() && proto.empty()) return a;
    std::string out = !is_name() && family == 6 ? "[" + a + "]" : a;
    out += ":";
    if (any_port())
        out += "*";
    else
        out += std::to_string(port_lo) + (port_hi != port_lo ? "-" + std::to_string(port_hi) : "");
    if (!proto.empty()) out += "/" + proto;
    return out;
}

ParsedDestination parse_destination(const std::string& text, bool deny) {
    ParsedDestination out;
    auto fail = [&](std::string why) {
        out.error = std::move(why);
        return out;
    };
    if (text.empty()) return fail("empty entry");
    if (text.size() > max_entry_length)
        return fail("longer than " + std::to_string(max_entry_length) + " characters");
    Destination d;
    if (looks_like_name(text)) {
        auto colon = text.find(':');
        if (auto e = parse_name(text.substr(0, colon), d); !e.empty()) return fail(e);
        if (colon != std::string::npos) {
            if (deny) return fail("a denied name is never resolved, so it takes no ports");
            std::string ports = text.substr(colon + 1);
            if (ports.empty()) return fail("nothing after the :");
            if (auto e = parse_ports(ports, d); !e.empty()) return fail(e);
        }
        out.dest = d;
        return out;
    }
    std::string cidr, ports;
    bool bracketed = false;
    if (text[0] == '[') {
        auto close = text.find(']');
        if (close == std::string::npos) return fail("no ] after [");
        cidr = text.substr(1, close - 1);
        bracketed = true;
        std::string rest = text.substr(close + 1);
        if (!rest.empty()) {
            if (rest[0] != ':') return fail("expected :PORTS after ], got " + rest);
            ports = rest.substr(1);
            if (ports.empty()) return fail("nothing after the :");
        }
    } else if (std::count(text.begin(), text.end(), ':') >= 2) {
        cidr = text;  // a bare IPv6 CIDR: no ports without brackets
    } else {
        auto colon = text.find(':');
        cidr = text.substr(0, colon);
        if (colon != std::string::npos) {
            ports = text.substr(colon + 1);
            if (ports.empty()) return fail("nothing after the :");
        }
    }
    if (auto e = parse_cidr(cidr, bracketed, d); !e.empty()) return fail(e);
    if (!ports.empty())
        if (auto e = parse_ports(ports, d); !e.empty()) return fail(e);
    out.dest = d;
    return out;
}

json to_json(const EgressPolicy& p) {
    json allow = json::array(), deny = json::array();
    for (const auto& d : p.allow) allow.push_back(d.str());
    for (const auto& d : p.deny) deny.push_back(d.str());
    return json{{"allow", allow}, {"deny", deny}};
}

EgressPolicy egress_policy_from_json(const json& j) {
    if (!j.is_object())
        throw Error(ErrorCode::usage, "network policy: expected {allow: [...], deny: [...]}");
    EgressPolicy p;
    for (const char* key : {"allow", "deny"}) {
        if (!j.contains(key)) continue;
        const json& list = j.at(key);
        if (!list.is_array())
            throw Error(ErrorCode::usage, std::string("network policy: ") + key +
                                              ": expected a list of destinations");
        for (const auto& e : list) {
            if (!e.is_string())
                throw Error(ErrorCode::usage, std::string("network policy: ") + key +
                                                  ": expected a destination string, got " +
                                                  e.dump());
            auto parsed = parse_destination(e.get<std::string>(), std::string(key) == "deny");
            if (!parsed.dest)
                throw Error(ErrorCode::usage, std::string("network policy: ") + key + ": " +
                                                  e.get<std::string>() + ": " + parsed.error);
            (std::string(key) == "allow" ? p.allow : p.deny).push_back(*parsed.dest);
        }
    }
    return p;
}

bool name_matches(const std::string& pattern, const std::string& query) {
    if (pattern.rfind("*.", 0) != 0) return pattern == query;
    const std::size_t suffix = pattern.size() - 1;  // ".example.com"
    return query.size() > suffix &&
           query.compare(query.size() - suffix, suffix, pattern, 1, suffix) == 0;
}

bool EgressPolicy::has_names() const {
    auto named = [](const Destination& d) { return d.is_name(); };
    return std::any_of(allow.begin(), allow.end(), named) ||
           std::any_of(deny.begin(), deny.end(), named);
}

std::string summary(const EgressPolicy& p) {
    return "allow " + std::to_string(p.allow.size()) + ", deny " + std::to_string(p.deny.size());
}

}  // namespace sandweave
