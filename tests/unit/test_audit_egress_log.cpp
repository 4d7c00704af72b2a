// The egress log's packet parser reads guest-made bytes: every header field
// it reports, and nothing past the copy for short, cut or odd packets.

#include <doctest/doctest.h>

#include <string>

#include <nlohmann/json.hpp>

#include "lib/audit/egress_log.hpp"
#include "lib/audit/state.hpp"

using namespace sandweave::audit;

namespace {

std::string bytes(std::initializer_list<int> b) {
    std::string s;
    for (int v : b) s.push_back(static_cast<char>(v));
    return s;
}

// An IPv4 header (20 bytes) from 10.213.0.6 to 10.213.0.5, protocol `proto`.
std::string ipv4(int proto, int frag_hi = 0, int frag_lo = 0) {
    return bytes(
        {0x45, 0, 0, 48, 0, 1, frag_hi, frag_lo, 64, proto, 0, 0, 10, 213, 0, 6, 10, 213, 0, 5});
}

// An IPv6 header (40 bytes) from fd77:7776:6176::6 to ::5, next header `next`.
std::string ipv6(int next) {
    std::string h = bytes({0x60, 0, 0, 0, 0, 16, next, 64});
    std::string a = bytes({0xfd, 0x77, 0x77, 0x76, 0x61, 0x76, 0, 0, 0, 0, 0, 0, 0, 0, 0, 6});
    std::string b = a;
    b[15] = 5;
    return h + a + b;
}

}  // namespace

TEST_CASE("egress log: an IPv4 UDP datagram gives its addresses and destination port") {
    auto r = parse_refused_packet(ipv4(17) + bytes({0x30, 0x39, 0x46, 0xab, 0, 8, 0, 0}));
    REQUIRE(r);
    CHECK(r->protocol == "udp");
    CHECK(r->source == "10.213.0.6");
    CHECK(r->destination == "10.213.0.5");
    REQUIRE(r->port);
    CHECK(*r->port == 18091);
    CHECK_FALSE(r->icmp_type);
    auto j = nlohmann::json::parse(refusal_fields_json(r, 1234));
    CHECK(j == nlohmann::json{{"time_ns", 1234},
                              {"protocol", "udp"},
                              {"source", "10.213.0.6"},
                              {"destination", "10.213.0.5"},
                              {"port", 18091}});
}

TEST_CASE("egress log: TCP, ICMP and other protocols") {
    auto tcp = parse_refused_packet(ipv4(6) + bytes({0x30, 0x39, 0, 80}));
    REQUIRE(tcp);
    CHECK(tcp->protocol == "tcp");
    CHECK(*tcp->port == 80);
    auto icmp = parse_refused_packet(ipv4(1) + bytes({8, 0, 0, 0}));
    REQUIRE(icmp);
    CHECK(icmp->protocol == "icmp");
    CHECK(*icmp->icmp_type == 8);
    CHECK_FALSE(icmp->port);
    auto gre = parse_refused_packet(ipv4(47) + bytes({0, 0, 0, 0}));
    REQUIRE(gre);
    CHECK(gre->protocol == "47");
    CHECK_FALSE(gre->port);
}

TEST_CASE("egress log: a later fragment and a transport header cut short have no port") {
    // Fragment offset 185 (x 8 bytes): its bytes are data, not a UDP header.
    auto later = parse_refused_packet(ipv4(17, 0, 185) + bytes({0x30, 0x39, 0x46, 0xab}));
    REQUIRE(later);
    CHECK(later->protocol == "udp");
    CHECK_FALSE(later->port);
    auto cut = parse_refused_packet(ipv4(17) + bytes({0x30, 0x39}));
    REQUIRE(cut);
    CHECK_FALSE(cut->port);
}

TEST_CASE("egress log: IPv6, through extension headers") {
    auto udp = parse_refused_packet(ipv6(17) + bytes({0, 1, 0, 53, 0, 8, 0, 0}));
    REQUIRE(udp);
    CHECK(udp->source == "fd77:7776:6176::6");
    CHECK(udp->destination == "fd77:7776:6176::5");
    CHECK(udp->protocol == "udp");
    CHECK(*udp->port == 53);
    // Hop-by-hop options (8 bytes), then TCP.
    auto hop =
        parse_refused_packet(ipv6(0) + bytes({6, 0, 1, 4, 0, 0, 0, 0}) + bytes({0, 1, 1, 187}));
    REQUIRE(hop);
    CHECK(hop->protocol == "tcp");
    CHECK(*hop->port == 443);
    // A first fragment carries the header; a later one does not.
    auto first =
        parse_refused_packet(ipv6(44) + bytes({17, 0, 0, 1, 0, 0, 0, 9}) + bytes({0, 1, 0, 53}));
    REQUIRE(first);
    CHECK(*first->port == 53);
    auto later =
        parse_refused_packet(ipv6(44) + bytes({17, 0, 0, 0x21, 0, 0, 0, 9}) + bytes({0, 1, 0, 53}));
    REQUIRE(later);
    CHECK(later->protocol == "udp");
    CHECK_FALSE(later->port);
    // An extension header cut off by the copy: only its kind.
    auto cut = parse_refused_packet(ipv6(60) + bytes({17, 0}));
    REQUIRE(cut);
    CHECK(cut->protocol == "60");
    // An extension header claiming more than the copy holds: no port read past it.
    auto longer = parse_refused_packet(ipv6(60) + bytes({17, 200, 0, 0, 0, 0, 0, 0}));
    REQUIRE(longer);
    CHECK(longer->protocol == "udp");
    CHECK_FALSE(longer->port);
    auto icmp6 = parse_refused_packet(ipv6(58) + bytes({128, 0}));
    REQUIRE(icmp6);
    CHECK(icmp6->protocol == "icmpv6");
    CHECK(*icmp6->icmp_type == 128);
}

TEST_CASE("egress log: what is not an IP packet is reported unparsed") {
    CHECK_FALSE(parse_refused_packet(""));
    CHECK_FALSE(parse_refused_packet(bytes({0x45, 0, 0})));
    CHECK_FALSE(parse_refused_packet(ipv4(17).substr(0, 19)));
    CHECK_FALSE(parse_refused_packet(bytes({0x4f}) + ipv4(17).substr(1)));  // IHL past the copy
    CHECK_FALSE(parse_refused_packet(bytes({0x43}) + ipv4(17).substr(1)));  // IHL under 20
    CHECK_FALSE(parse_refused_packet(ipv6(17).substr(0, 39)));
    CHECK_FALSE(parse_refused_packet(bytes({0x20}) + std::string(40, '\0')));
    CHECK(nlohmann::json::parse(refusal_fields_json(std::nullopt, 5)) ==
          nlohmann::json{{"time_ns", 5}, {"protocol", "unparsed"}});
}

TEST_CASE("egress log: a loss makes the export incomplete, with its own reason") {
    WriterState s;
    s.streams = 1;
    s.container_start_seen = true;
    s.runtime_reported = 0;
    s.egress_refused = 4;
    CHECK(state_reasons(s).empty());
    s.egress_lost = 2;
    CHECK(s.dropped() == 2);
    auto reasons = state_reasons(s);
    REQUIRE(reasons.size() == 1);
    CHECK(reasons[0] == "egress_log_lost");
    WriterState back = state_from_json(state_to_json(s));
    CHECK(back.egress_lost == 2);
    CHECK(back.egress_refused == 4);
}
