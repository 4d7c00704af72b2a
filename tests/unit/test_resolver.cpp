// lib/sandbox/resolver's pure part: which names a sandbox's resolver answers,
// what it asks upstream, what it opens in the policy and what the guest gets
// back, with a fake upstream and a fake policy sink (real DNS messages, made
// and read by libldns).
#include "lib/sandbox/resolver.hpp"

#include <doctest/doctest.h>

#include <cstdlib>
#include <optional>

// After the standard headers: ldns's common.h redefines bool's false for C.
#include <ldns/ldns.h>

using namespace sandweave;

namespace {

struct Msg {
    ldns_pkt* p = nullptr;
    explicit Msg(ldns_pkt* pkt) : p(pkt) {}
    explicit Msg(const std::string& wire) {
        REQUIRE(ldns_wire2pkt(&p, reinterpret_cast<const std::uint8_t*>(wire.data()),
                              wire.size()) == LDNS_STATUS_OK);
    }
    ~Msg() {
        if (p) ldns_pkt_free(p);
    }
    Msg(const Msg&) = delete;
    Msg& operator=(const Msg&) = delete;
    std::string wire() const {
        std::uint8_t* buf = nullptr;
        std::size_t n = 0;
        REQUIRE(ldns_pkt2wire(&buf, p, &n) == LDNS_STATUS_OK);
        std::string out(reinterpret_cast<char*>(buf), n);
        std::free(buf);
        return out;
    }
};

std::string query(const char* name, ldns_rr_type type, std::uint16_t id = 4242) {
    Msg q(ldns_pkt_query_new(ldns_dname_new_frm_str(name), type, LDNS_RR_CLASS_IN, LDNS_RD));
    ldns_pkt_set_id(q.p, id);
    return q.wire();
}

// An upstream that answers each question with `records` (text, as in a zone).
struct FakeUpstream {
    std::vector<std::string> records;
    int asked = 0;
    std::uint16_t last_id = 0;
    bool silent = false, wrong_id = false;

    std::optional<std::string> operator()(const std::string& q) {
        ++asked;
        if (silent) return std::nullopt;
        Msg in(q);
        last_id = ldns_pkt_id(in.p);
        Msg r(ldns_pkt_new());
        ldns_pkt_set_id(r.p, wrong_id ? static_cast<std::uint16_t>(last_id + 1) : last_id);
        ldns_pkt_set_qr(r.p, true);
        ldns_pkt_push_rr(r.p, LDNS_SECTION_QUESTION,
                         ldns_rr_clone(ldns_rr_list_rr(ldns_pkt_question(in.p), 0)));
        for (const auto& text : records) {
            ldns_rr* rr = nullptr;
            REQUIRE(ldns_rr_new_frm_str(&rr, text.c_str(), 0, nullptr, nullptr) == LDNS_STATUS_OK);
            ldns_pkt_push_rr(r.p, LDNS_SECTION_ANSWER, rr);
        }
        return r.wire();
    }
};

struct FakeSink {
    bool ok = true;
    std::vector<int> entries;
    std::vector<std::string> addresses;
    std::chrono::seconds timeout{0};
    int calls = 0;

    bool operator()(const std::vector<int>& e, const std::vector<ResolvedAddress>& a,
                    std::chrono::seconds t) {
        ++calls;
        entries = e;
        addresses.clear();
        for (const auto& x : a) addresses.push_back(x.str());
        timeout = t;
        return ok;
    }
};

EgressPolicy policy() {
    return egress_policy_from_json(nlohmann::json{
        {"allow", {"10.0.0.0/8", "*.example.com:443/tcp", "deb.debian.org", "www.example.com"}},
        {"deny", {"bad.example.com"}}});
}

struct Answer {
    std::optional<std::string> wire;
    FakeUpstream up;
    FakeSink sink;
};

void ask(Answer& a, const std::string& datagram, const EgressPolicy& p = policy()) {
    a.wire = answer_query(
        datagram, p, [&](const std::string& q) { return a.up(q); },
        [&](const std::vector<int>& e, const std::vector<ResolvedAddress>& addrs,
            std::chrono::seconds t) { return a.sink(e, addrs, t); });
}

ldns_pkt_rcode rcode(const Answer& a) {
    REQUIRE(a.wire);
    Msg m(*a.wire);
    CHECK(ldns_pkt_qr(m.p));
    CHECK(ldns_pkt_id(m.p) == 4242);
    return ldns_pkt_get_rcode(m.p);
}

}  // namespace

TEST_SUITE("resolver") {
    TEST_CASE("a name no entry allows is NXDOMAIN, and nothing is asked or opened") {
        Answer a;
        ask(a, query("debian.org.", LDNS_RR_TYPE_A));
        CHECK(rcode(a) == LDNS_RCODE_NXDOMAIN);
        CHECK(a.up.asked == 0);
        CHECK(a.sink.calls == 0);
        // A deny wins over a wildcard allow; the bare suffix is not below itself.
        for (const char* n : {"bad.example.com.", "BAD.Example.com.", "example.com."}) {
            Answer b;
            ask(b, query(n, LDNS_RR_TYPE_A));
            CHECK(rcode(b) == LDNS_RCODE_NXDOMAIN);
            CHECK(b.up.asked == 0);
        }
    }

    TEST_CASE("other types and classes are REFUSED, even for an allowed name") {
        for (ldns_rr_type t : {LDNS_RR_TYPE_TXT, LDNS_RR_TYPE_MX, LDNS_RR_TYPE_ANY}) {
            Answer a;
            ask(a, query("deb.debian.org.", t));
            CHECK(rcode(a) == LDNS_RCODE_REFUSED);
            CHECK(a.up.asked == 0);
        }
    }

    TEST_CASE("an allowed name is asked afresh, opened for its TTL, then answered") {
        Answer a;
        a.up.records = {"deb.debian.org. 30 IN CNAME debian.map.fastlydns.net.",
                        "debian.map.fastlydns.net. 30 IN A 192.0.2.5",
                        "debian.map.fastlydns.net. 40 IN A 192.0.2.6"};
        ask(a, query("Deb.Debian.Org.", LDNS_RR_TYPE_A));
        CHECK(rcode(a) == LDNS_RCODE_NOERROR);
        CHECK(a.up.asked == 1);
        CHECK(a.sink.entries == std::vector<int>{1});  // the second name entry
        CHECK(a.sink.addresses == std::vector<std::string>{"192.0.2.5", "192.0.2.6"});
        CHECK(a.sink.timeout == min_name_ttl);  // 30 s raised to the floor
        Msg m(*a.wire);
        REQUIRE(ldns_rr_list_rr_count(ldns_pkt_answer(m.p)) == 3);
        CHECK(ldns_rr_ttl(ldns_rr_list_rr(ldns_pkt_answer(m.p), 1)) == 30);

        // A name two entries allow opens both; a long TTL is capped, in the
        // sets and in the guest's answer.
        Answer b;
        b.up.records = {"www.example.com. 86400 IN AAAA 2001:db8::5"};
        ask(b, query("www.example.com.", LDNS_RR_TYPE_AAAA));
        CHECK(rcode(b) == LDNS_RCODE_NOERROR);
        CHECK(b.sink.entries == std::vector<int>{0, 2});
        CHECK(b.sink.addresses == std::vector<std::string>{"2001:db8::5"});
        CHECK(b.sink.timeout == max_name_ttl);
        Msg mb(*b.wire);
        CHECK(ldns_rr_ttl(ldns_rr_list_rr(ldns_pkt_answer(mb.p), 0)) ==
              static_cast<std::uint32_t>(max_name_ttl.count()));
    }

    TEST_CASE("SERVFAIL when the policy cannot be opened or the upstream fails") {
        Answer a;
        a.up.records = {"deb.debian.org. 300 IN A 192.0.2.5"};
        a.sink.ok = false;
        ask(a, query("deb.debian.org.", LDNS_RR_TYPE_A));
        CHECK(rcode(a) == LDNS_RCODE_SERVFAIL);

        Answer b;
        b.up.silent = true;
        ask(b, query("deb.debian.org.", LDNS_RR_TYPE_A));
        CHECK(rcode(b) == LDNS_RCODE_SERVFAIL);

        // A reply that is not to our question (a spoofed or stray one) is not used.
        Answer c;
        c.up.records = {"deb.debian.org. 300 IN A 192.0.2.5"};
        c.up.wrong_id = true;
        ask(c, query("deb.debian.org.", LDNS_RR_TYPE_A));
        CHECK(rcode(c) == LDNS_RCODE_SERVFAIL);
        CHECK(c.sink.calls == 0);
    }

    TEST_CASE("the guest's id never reaches the upstream") {
        Answer a;
        a.up.records = {"deb.debian.org. 300 IN A 192.0.2.5"};
        ask(a, query("deb.debian.org.", LDNS_RR_TYPE_A));
        ask(a, query("deb.debian.org.", LDNS_RR_TYPE_A));
        CHECK(a.up.asked == 2);
        // (random: equal to the guest's with chance 2^-16 per question)
        CHECK(a.up.last_id != 0);
    }

    TEST_CASE("what is not a query gets nothing back") {
        Answer a;
        ask(a, "");
        CHECK_FALSE(a.wire);
        ask(a, std::string("\x12\x34garbage", 9));
        CHECK_FALSE(a.wire);
        ask(a, std::string(max_query_bytes + 1, '\0'));
        CHECK_FALSE(a.wire);
        // A reply sent at the resolver.
        Msg r(query("deb.debian.org.", LDNS_RR_TYPE_A));
        ldns_pkt_set_qr(r.p, true);
        ask(a, r.wire());
        CHECK_FALSE(a.wire);
        CHECK(a.up.asked == 0);
    }

    TEST_CASE("resolv.conf: nameservers in order, at most three, never sandweave's range") {
        CHECK(nameservers_from_resolv_conf("# c\nsearch x\nnameserver 10.255.255.53\n"
                                           "nameserver ::1\nnameserver 10.213.0.1\n"
                                           "nameserver fe80::1%eth0\nnameserver 127.0.0.53\n"
                                           "nameserver 192.0.2.9\n") ==
              std::vector<std::string>{"10.255.255.53", "::1", "127.0.0.53"});
        CHECK(nameservers_from_resolv_conf("").empty());
        CHECK(nameservers_from_resolv_conf("nameserver\nnameserver x.y\n").empty());
    }

    TEST_CASE("TTLs open addresses for a bounded time") {
        CHECK(set_timeout_for(0) == min_name_ttl);
        CHECK(set_timeout_for(120) == std::chrono::seconds(120));
        CHECK(set_timeout_for(UINT32_MAX) == max_name_ttl);
        CHECK(judge_name(policy(), "").allowed == false);
        CHECK(judge_name(policy(), "a.b.example.com").entries == std::vector<int>{0});
    }
}

TEST_SUITE("resolver") {
    TEST_CASE("over TCP an answer comes whole; over UDP, too large, it is truncated") {
        std::vector<std::string> many;
        for (int i = 1; i <= 60; ++i)
            many.push_back("deb.debian.org. 300 IN A 192.0.2." + std::to_string(i));
        auto asked = [&](DnsTransport over) {
            Answer a;
            a.up.records = many;
            a.wire = answer_query(
                query("deb.debian.org.", LDNS_RR_TYPE_A), policy(),
                [&](const std::string& q) { return a.up(q); },
                [&](const std::vector<int>& e, const std::vector<ResolvedAddress>& addrs,
                    std::chrono::seconds t) { return a.sink(e, addrs, t); },
                over);
            return a;
        };
        Answer tcp = asked(DnsTransport::tcp);
        CHECK(rcode(tcp) == LDNS_RCODE_NOERROR);
        Msg whole(*tcp.wire);
        CHECK_FALSE(ldns_pkt_tc(whole.p));
        CHECK(ldns_rr_list_rr_count(ldns_pkt_answer(whole.p)) == 60);
        CHECK(tcp.sink.addresses.size() == 60);

        Answer udp = asked(DnsTransport::udp);
        CHECK(rcode(udp) == LDNS_RCODE_NOERROR);
        Msg cut(*udp.wire);
        CHECK(ldns_pkt_tc(cut.p));
        CHECK(ldns_rr_list_rr_count(ldns_pkt_answer(cut.p)) == 0);
        CHECK(udp.wire->size() <= 512);
    }

    TEST_CASE("an upstream reply that is truncated opens nothing") {
        // The upstream's own TC bit: over UDP the guest is told to ask over
        // TCP; over TCP (where the upstream was asked over TCP too) SERVFAIL.
        for (DnsTransport over : {DnsTransport::udp, DnsTransport::tcp}) {
            Answer a;
            a.up.records = {"deb.debian.org. 300 IN A 192.0.2.5"};
            a.wire = answer_query(
                query("deb.debian.org.", LDNS_RR_TYPE_A), policy(),
                [&](const std::string& q) {
                    auto r = a.up(q);
                    Msg m(*r);
                    ldns_pkt_set_tc(m.p, true);
                    return std::optional<std::string>(m.wire());
                },
                [&](const std::vector<int>& e, const std::vector<ResolvedAddress>& addrs,
                    std::chrono::seconds t) { return a.sink(e, addrs, t); },
                over);
            CHECK(a.sink.calls == 0);
            if (over == DnsTransport::udp) {
                CHECK(rcode(a) == LDNS_RCODE_NOERROR);
                Msg m(*a.wire);
                CHECK(ldns_pkt_tc(m.p));
            } else {
                CHECK(rcode(a) == LDNS_RCODE_SERVFAIL);
            }
        }
    }
}
