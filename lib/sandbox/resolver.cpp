#include "lib/sandbox/resolver.hpp"

#include <arpa/inet.h>
#include <ldns/ldns.h>
#include <netinet/in.h>
#include <poll.h>
#include <sys/random.h>
#include <sys/socket.h>
#include <unistd.h>

#include <algorithm>
#include <cctype>
#include <cerrno>
#include <cstdlib>
#include <cstring>
#include <memory>
#include <sstream>
#include <string_view>

#include "lib/core/error.hpp"
#include "lib/core/fd.hpp"
#include "lib/core/fsutil.hpp"
#include "lib/core/nftables.hpp"
#include "lib/sandbox/network.hpp"
#include "lib/store/state.hpp"

namespace sandweave {

using nlohmann::json;

namespace {

constexpr int upstream_timeout_ms = 2000;
constexpr std::size_t max_reply_bytes = 65535;

struct PktFree {
    void operator()(ldns_pkt* p) const { ldns_pkt_free(p); }
};
using Pkt = std::unique_ptr<ldns_pkt, PktFree>;

Pkt parse(const std::string& wire) {
    ldns_pkt* p = nullptr;
    if (ldns_wire2pkt(&p, reinterpret_cast<const std::uint8_t*>(wire.data()), wire.size()) !=
        LDNS_STATUS_OK)
        return nullptr;
    return Pkt(p);
}

std::optional<std::string> to_wire(const ldns_pkt* p) {
    std::uint8_t* buf = nullptr;
    std::size_t size = 0;
    if (ldns_pkt2wire(&buf, p, &size) != LDNS_STATUS_OK) return std::nullopt;
    std::string out(reinterpret_cast<const char*>(buf), size);
    std::free(buf);
    return out;
}

// "Example.COM." -> "example.com"; "" when the name holds anything a policy
// entry cannot (an escaped byte), so it matches none.
std::string name_text(const ldns_rdf* name) {
    char* s = ldns_rdf2str(name);
    if (!s) return "";
    std::string t = s;
    std::free(s);
    if (t.find('\\') != std::string::npos) return "";
    if (!t.empty() && t.back() == '.') t.pop_back();
    for (auto& c : t) c = static_cast<char>(std::tolower(static_cast<unsigned char>(c)));
    return t;
}

// A reply to `query` with its question and `rcode`, nothing else.
Pkt reply_to(const ldns_pkt* query, const ldns_rr* question, std::uint8_t rcode) {
    Pkt r(ldns_pkt_new());
    if (!r) return nullptr;
    ldns_pkt_set_id(r.get(), ldns_pkt_id(query));
    ldns_pkt_set_qr(r.get(), true);
    ldns_pkt_set_opcode(r.get(), LDNS_PACKET_QUERY);
    ldns_pkt_set_rd(r.get(), ldns_pkt_rd(query));
    ldns_pkt_set_ra(r.get(), true);
    ldns_pkt_set_rcode(r.get(), rcode);
    if (question) ldns_pkt_push_rr(r.get(), LDNS_SECTION_QUESTION, ldns_rr_clone(question));
    return r;
}

std::optional<std::string> reply_wire(const ldns_pkt* query, const ldns_rr* question,
                                      std::uint8_t rcode) {
    Pkt r = reply_to(query, question, rcode);
    if (!r) return std::nullopt;
    return to_wire(r.get());
}

std::uint16_t random_id() {
    std::uint16_t id = 0;
    if (::getrandom(&id, sizeof id, 0) != sizeof id)
        throw Error(ErrorCode::runtime, "getrandom failed");
    return id;
}

bool same_question(const ldns_rr* a, const ldns_rr* b) {
    return ldns_rr_get_type(a) == ldns_rr_get_type(b) &&
           ldns_rr_get_class(a) == ldns_rr_get_class(b) &&
           name_text(ldns_rr_owner(a)) == name_text(ldns_rr_owner(b));
}

// The A and AAAA records of an answer section, and the smallest TTL among them.
std::vector<ResolvedAddress> addresses_of(const ldns_rr_list* answer, std::uint32_t& min_ttl) {
    std::vector<ResolvedAddress> out;
    min_ttl = UINT32_MAX;
    for (std::size_t i = 0; answer && i < ldns_rr_list_rr_count(answer); ++i) {
        const ldns_rr* rr = ldns_rr_list_rr(answer, i);
        if (ldns_rr_get_class(rr) != LDNS_RR_CLASS_IN || ldns_rr_rd_count(rr) != 1) continue;
        const ldns_rr_type t = ldns_rr_get_type(rr);
        const std::size_t len = t == LDNS_RR_TYPE_A ? 4 : t == LDNS_RR_TYPE_AAAA ? 16 : 0;
        const ldns_rdf* rd = ldns_rr_rdf(rr, 0);
        if (!len || !rd || ldns_rdf_size(rd) != len) continue;
        ResolvedAddress a;
        a.family = len == 4 ? 4 : 6;
        std::memcpy(a.addr.data(), ldns_rdf_data(rd), len);
        if (std::find(out.begin(), out.end(), a) == out.end()) out.push_back(a);
        min_ttl = std::min(min_ttl, ldns_rr_ttl(rr));
    }
    return out;
}

// The guest's answer from the upstream's: the guest's id and question, the
// upstream's rcode and answer records with TTLs capped at `cap`.
Pkt answer_from(const ldns_pkt* query, const ldns_rr* question, const ldns_pkt* upstream,
                std::uint32_t cap) {
    Pkt r = reply_to(query, question, static_cast<std::uint8_t>(ldns_pkt_get_rcode(upstream)));
    if (!r) return nullptr;
    const ldns_rr_list* answer = ldns_pkt_answer(upstream);
    for (std::size_t i = 0; answer && i < ldns_rr_list_rr_count(answer); ++i) {
        ldns_rr* rr = ldns_rr_clone(ldns_rr_list_rr(answer, i));
        if (!rr) return nullptr;
        ldns_rr_set_ttl(rr, std::min(ldns_rr_ttl(rr), cap));
        ldns_pkt_push_rr(r.get(), LDNS_SECTION_ANSWER, rr);
    }
    return r;
}

}  // namespace

std::string ResolvedAddress::str() const {
    char buf[INET6_ADDRSTRLEN] = {};
    ::inet_ntop(family == 4 ? AF_INET : AF_INET6, addr.data(), buf, sizeof buf);
    return buf;
}

std::vector<std::string> nameservers_from_resolv_conf(const std::string& text) {
    std::vector<std::string> out;
    std::istringstream in(text);
    std::string line;
    while (std::getline(in, line) && out.size() < 3) {
        std::istringstream words(line);
        std::string key, addr;
        if (!(words >> key >> addr) || key != "nameserver") continue;
        std::array<std::uint8_t, 16> bin{};
        if (::inet_pton(AF_INET, addr.c_str(), bin.data()) == 1) {
            if (bin[0] == 10 && bin[1] == 213) continue;  // sandweave's range
        } else if (::inet_pton(AF_INET6, addr.c_str(), bin.data()) != 1) {
            continue;  // a scoped fe80::1%eth0 and the like: not for us
        }
        out.push_back(addr);
    }
    return out;
}

NameVerdict judge_name(const EgressPolicy& policy, const std::string& qname) {
    NameVerdict v;
    if (qname.empty()) return v;
    for (const auto& d : policy.deny)
        if (d.is_name() && name_matches(d.name, qname)) return v;
    int k = 0;
    for (const auto& d : policy.allow) {
        if (!d.is_name()) continue;
        if (name_matches(d.name, qname)) v.entries.push_back(k);
        ++k;
    }
    v.allowed = !v.entries.empty();
    return v;
}

namespace {

// The empty answer with TC set: the guest asks again over TCP.
std::optional<std::string> truncated(const ldns_pkt* q, const ldns_rr* question,
                                     const ldns_pkt* a) {
    Pkt tc = reply_to(q, question, static_cast<std::uint8_t>(ldns_pkt_get_rcode(a)));
    if (!tc) return std::nullopt;
    ldns_pkt_set_tc(tc.get(), true);
    return to_wire(tc.get());
}

}  // namespace

std::chrono::seconds set_timeout_for(std::uint32_t ttl) {
    return std::clamp(std::chrono::seconds(ttl), min_name_ttl, max_name_ttl);
}

std::optional<std::string> answer_query(const std::string& message, const EgressPolicy& policy,
                                        const AskUpstream& ask, const OpenAddresses& open,
                                        DnsTransport over) {
    if (message.size() > max_query_bytes) return std::nullopt;
    Pkt q = parse(message);
    if (!q || ldns_pkt_qr(q.get())) return std::nullopt;  // garbage, or a reply sent at us
    const ldns_rr_list* questions = ldns_pkt_question(q.get());
    if (ldns_pkt_get_opcode(q.get()) != LDNS_PACKET_QUERY || ldns_pkt_qdcount(q.get()) != 1 ||
        !questions || ldns_rr_list_rr_count(questions) != 1)
        return reply_wire(q.get(), nullptr, LDNS_RCODE_REFUSED);
    const ldns_rr* question = ldns_rr_list_rr(questions, 0);
    const ldns_rr_type type = ldns_rr_get_type(question);
    if (ldns_rr_get_class(question) != LDNS_RR_CLASS_IN ||
        (type != LDNS_RR_TYPE_A && type != LDNS_RR_TYPE_AAAA))
        return reply_wire(q.get(), question, LDNS_RCODE_REFUSED);
    NameVerdict verdict = judge_name(policy, name_text(ldns_rr_owner(question)));
    if (!verdict.allowed) return reply_wire(q.get(), question, LDNS_RCODE_NXDOMAIN);

    // Asked afresh: the guest's id, flags and extra sections never reach the upstream.
    Pkt up(ldns_pkt_query_new(ldns_rdf_clone(ldns_rr_owner(question)), type, LDNS_RR_CLASS_IN,
                              LDNS_RD));
    if (!up) return reply_wire(q.get(), question, LDNS_RCODE_SERVFAIL);
    const std::uint16_t id = random_id();
    ldns_pkt_set_id(up.get(), id);
    ldns_pkt_set_edns_udp_size(up.get(), static_cast<std::uint16_t>(max_query_bytes));
    auto up_wire = to_wire(up.get());
    std::optional<std::string> got = up_wire ? ask(*up_wire) : std::nullopt;
    Pkt a = got ? parse(*got) : nullptr;
    const ldns_rr_list* aq = a ? ldns_pkt_question(a.get()) : nullptr;
    if (!a || !ldns_pkt_qr(a.get()) || ldns_pkt_id(a.get()) != id || !aq ||
        ldns_rr_list_rr_count(aq) != 1 || !same_question(ldns_rr_list_rr(aq, 0), question))
        return reply_wire(q.get(), question, LDNS_RCODE_SERVFAIL);
    if (ldns_pkt_tc(a.get())) {
        // Too large for the upstream's datagram: nothing of it is opened.
        if (over == DnsTransport::tcp) return reply_wire(q.get(), question, LDNS_RCODE_SERVFAIL);
        return truncated(q.get(), question, a.get());
    }

    std::uint32_t ttl = 0;
    std::vector<ResolvedAddress> addrs = addresses_of(ldns_pkt_answer(a.get()), ttl);
    const std::chrono::seconds timeout = set_timeout_for(ttl);
    if (!addrs.empty() && !open(verdict.entries, addrs, timeout))
        return reply_wire(q.get(), question, LDNS_RCODE_SERVFAIL);
    Pkt r = answer_from(q.get(), question, a.get(), static_cast<std::uint32_t>(timeout.count()));
    if (!r) return reply_wire(q.get(), question, LDNS_RCODE_SERVFAIL);
    // A datagram the guest takes: 512 bytes, or what its EDNS offered (up to
    // ours); over TCP, any message.
    std::size_t limit = over == DnsTransport::tcp ? max_reply_bytes : 512;
    if (ldns_pkt_edns(q.get())) {
        if (over == DnsTransport::udp)
            limit = std::clamp<std::size_t>(ldns_pkt_edns_udp_size(q.get()), 512, max_query_bytes);
        ldns_pkt_set_edns_udp_size(r.get(), static_cast<std::uint16_t>(max_query_bytes));
    }
    auto wire = to_wire(r.get());
    if (wire && wire->size() <= limit) return wire;
    if (over == DnsTransport::tcp) return reply_wire(q.get(), question, LDNS_RCODE_SERVFAIL);
    return truncated(q.get(), question, a.get());
}

std::vector<std::string> host_nameservers() {
    const char* env = std::getenv("SANDWEAVE_RESOLV_CONF");
    const std::string path = env && *env ? env : "/etc/resolv.conf";
    std::string text;
    try {
        text = read_file(path, 1 << 16);
    } catch (const Error&) {
        // none: said below
    }
    auto out = nameservers_from_resolv_conf(text);
    if (out.empty())
        throw Error(ErrorCode::runtime,
                    "no nameserver in " + path + ": a policy with domain names needs one to ask");
    return out;
}

namespace {

bool sockaddr_of(const std::string& addr, std::uint16_t port, sockaddr_storage& ss,
                 socklen_t& len) {
    ss = {};
    auto* in4 = reinterpret_cast<sockaddr_in*>(&ss);
    if (::inet_pton(AF_INET, addr.c_str(), &in4->sin_addr) == 1) {
        in4->sin_family = AF_INET;
        in4->sin_port = htons(port);
        len = sizeof(sockaddr_in);
        return true;
    }
    auto* in6 = reinterpret_cast<sockaddr_in6*>(&ss);
    if (::inet_pton(AF_INET6, addr.c_str(), &in6->sin6_addr) == 1) {
        in6->sin6_family = AF_INET6;
        in6->sin6_port = htons(port);
        len = sizeof(sockaddr_in6);
        return true;
    }
    return false;
}

// One question to each nameserver in turn, from a fresh connected socket
// (a random source port; only that server's datagrams arrive on it).
std::optional<std::string> ask_nameservers(const std::vector<std::string>& servers,
                                           const std::string& query) {
    for (const auto& s : servers) {
        sockaddr_storage ss;
        socklen_t len = 0;
        if (!sockaddr_of(s, 53, ss, len)) continue;
        Fd fd(::socket(ss.ss_family, SOCK_DGRAM | SOCK_CLOEXEC, 0));
        if (!fd || ::connect(fd.get(), reinterpret_cast<sockaddr*>(&ss), len) != 0) continue;
        if (::send(fd.get(), query.data(), query.size(), 0) != static_cast<ssize_t>(query.size()))
            continue;
        pollfd p{fd.get(), POLLIN, 0};
        if (::poll(&p, 1, upstream_timeout_ms) != 1) continue;
        std::string buf(max_reply_bytes, '\0');
        ssize_t n = ::recv(fd.get(), buf.data(), buf.size(), 0);
        if (n <= 0) continue;
        buf.resize(static_cast<std::size_t>(n));
        return buf;
    }
    return std::nullopt;
}

using Clock = std::chrono::steady_clock;

int ms_until(Clock::time_point deadline) {
    auto left = std::chrono::duration_cast<std::chrono::milliseconds>(deadline - Clock::now());
    return left.count() > 0 ? static_cast<int>(left.count()) : 0;
}

// Exactly n bytes from a non-blocking socket before `deadline`; false on
// its end, an error or the deadline.
bool read_exact(int fd, char* buf, std::size_t n, Clock::time_point deadline) {
    while (n > 0) {
        ssize_t got = ::recv(fd, buf, n, 0);
        if (got > 0) {
            buf += got;
            n -= static_cast<std::size_t>(got);
            continue;
        }
        if (got == 0 || (errno != EAGAIN && errno != EINTR)) return false;
        pollfd p{fd, POLLIN, 0};
        int left = ms_until(deadline);
        if (left == 0 || ::poll(&p, 1, left) <= 0) return false;
    }
    return true;
}

bool write_all(int fd, std::string_view data, Clock::time_point deadline) {
    while (!data.empty()) {
        ssize_t put = ::send(fd, data.data(), data.size(), MSG_NOSIGNAL);
        if (put > 0) {
            data.remove_prefix(static_cast<std::size_t>(put));
            continue;
        }
        if (put == 0 || (errno != EAGAIN && errno != EINTR)) return false;
        pollfd p{fd, POLLOUT, 0};
        int left = ms_until(deadline);
        if (left == 0 || ::poll(&p, 1, left) <= 0) return false;
    }
    return true;
}

// One DNS message over TCP: its two-byte length, then it.
std::string framed(const std::string& message) {
    std::string out(2, '\0');
    out[0] = static_cast<char>(message.size() >> 8);
    out[1] = static_cast<char>(message.size() & 0xff);
    return out + message;
}

// The next message of a TCP connection, at most `max` bytes; nullopt at its
// end, past the deadline, or when it is longer.
std::optional<std::string> read_framed(int fd, std::size_t max, Clock::time_point deadline) {
    unsigned char len[2];
    if (!read_exact(fd, reinterpret_cast<char*>(len), 2, deadline)) return std::nullopt;
    std::size_t n = (std::size_t{len[0]} << 8) | len[1];
    if (n == 0 || n > max) return std::nullopt;
    std::string msg(n, '\0');
    if (!read_exact(fd, msg.data(), n, deadline)) return std::nullopt;
    return msg;
}

// The same question over TCP, to each nameserver in turn.
std::optional<std::string> ask_nameservers_tcp(const std::vector<std::string>& servers,
                                               const std::string& query) {
    for (const auto& s : servers) {
        sockaddr_storage ss;
        socklen_t len = 0;
        if (!sockaddr_of(s, 53, ss, len)) continue;
        Fd fd(::socket(ss.ss_family, SOCK_STREAM | SOCK_CLOEXEC | SOCK_NONBLOCK, 0));
        if (!fd) continue;
        auto deadline = Clock::now() + std::chrono::milliseconds(upstream_timeout_ms);
        if (::connect(fd.get(), reinterpret_cast<sockaddr*>(&ss), len) != 0) {
            if (errno != EINPROGRESS) continue;
            pollfd p{fd.get(), POLLOUT, 0};
            int err = 0;
            socklen_t el = sizeof err;
            if (::poll(&p, 1, ms_until(deadline)) != 1 ||
                ::getsockopt(fd.get(), SOL_SOCKET, SO_ERROR, &err, &el) != 0 || err != 0)
                continue;
        }
        if (!write_all(fd.get(), framed(query), deadline)) continue;
        if (auto reply = read_framed(fd.get(), max_reply_bytes, deadline)) return reply;
    }
    return std::nullopt;
}

// Adds each address to the sets of each entry, refreshing its timeout when it
// is there already (a delete and an add in one transaction; a plain add when
// it is not).
bool open_in_nftables(const std::string& id, const std::vector<int>& entries,
                      const std::vector<ResolvedAddress>& addrs, std::chrono::seconds timeout) {
    try {
        for (int k : entries)
            for (const auto& a : addrs) {
                const std::string set = name_set_name(id, k, a.family);
                if (!nft_try(nft_refresh_element_commands(set, a.str(), timeout)))
                    nft_run(nft_add_element_commands(set, a.str(), timeout));
            }
        return true;
    } catch (const Error&) {
        return false;
    }
}

// The resolver's UDP socket (type SOCK_DGRAM) or TCP listener (SOCK_STREAM).
Fd bind_resolver_socket(const std::string& address, int type) {
    sockaddr_storage ss;
    socklen_t len = 0;
    if (!sockaddr_of(address, 53, ss, len))
        throw Error(ErrorCode::runtime, "the resolver's address is not one: " + address);
    Fd fd(::socket(ss.ss_family, type | SOCK_CLOEXEC, 0));
    if (!fd) throw_errno("socket");
    int one = 1;
    if (type == SOCK_STREAM) ::setsockopt(fd.get(), SOL_SOCKET, SO_REUSEADDR, &one, sizeof one);
    if (::bind(fd.get(), reinterpret_cast<sockaddr*>(&ss), len) != 0)
        throw_errno("binding the resolver to " + address + ":53" +
                    (type == SOCK_STREAM ? " (TCP)" : ""));
    if (type == SOCK_STREAM && ::listen(fd.get(), 16) != 0) throw_errno("listen");
    return fd;
}

// One TCP connection from the guest: its questions in turn (at most 16),
// each to arrive and be answered within tcp_deadline.
void serve_tcp(int listener, const EgressPolicy& policy, const AskUpstream& ask,
               const OpenAddresses& open) {
    Fd conn(::accept4(listener, nullptr, nullptr, SOCK_CLOEXEC | SOCK_NONBLOCK));
    if (!conn) return;
    for (int i = 0; i < 16; ++i) {
        auto deadline = Clock::now() + tcp_deadline;
        auto msg = read_framed(conn.get(), max_query_bytes, deadline);
        if (!msg) return;
        std::optional<std::string> reply;
        try {
            reply = answer_query(*msg, policy, ask, open, DnsTransport::tcp);
        } catch (const std::exception&) {
            return;
        }
        if (!reply || !write_all(conn.get(), framed(*reply), Clock::now() + tcp_deadline)) return;
    }
}

void serve(int sock, int listener, int stop_fd, const EgressPolicy& policy, const AskUpstream& ask,
           const AskUpstream& ask_tcp, const OpenAddresses& open) {
    std::string buf(max_query_bytes + 1, '\0');
    for (;;) {
        pollfd p[3] = {{sock, POLLIN, 0}, {stop_fd, POLLIN, 0}, {listener, POLLIN, 0}};
        if (::poll(p, 3, -1) < 0) {
            if (errno == EINTR) continue;
            return;
        }
        if (p[1].revents & POLLIN) return;
        if (p[2].revents & POLLIN) serve_tcp(listener, policy, ask_tcp, open);
        if (!(p[0].revents & POLLIN)) continue;
        sockaddr_storage from{};
        socklen_t from_len = sizeof from;
        ssize_t n = ::recvfrom(sock, buf.data(), buf.size(), MSG_TRUNC,
                               reinterpret_cast<sockaddr*>(&from), &from_len);
        if (n <= 0 || static_cast<std::size_t>(n) > max_query_bytes) continue;
        std::optional<std::string> reply;
        try {
            reply = answer_query(buf.substr(0, static_cast<std::size_t>(n)), policy, ask, open);
        } catch (const std::exception&) {
            continue;  // no reply: the guest asks again
        }
        if (reply)
            ::sendto(sock, reply->data(), reply->size(), MSG_DONTWAIT,
                     reinterpret_cast<sockaddr*>(&from), from_len);
    }
}

}  // namespace

std::function<void(int)> start_resolver(const StateStore& store, const std::string& id) {
    return with_context("starting the resolver of " + id, [&] {
        auto r = store.try_load(id);
        if (!r || !r->spec.runtime.egress || !r->network || !r->network->contains("resolver"))
            throw Error(ErrorCode::runtime, "the sandbox's record names no resolver");
        const json& res = (*r->network)["resolver"];
        std::string address = res.value("address", std::string());
        std::vector<std::string> upstreams;
        for (const auto& u : res.value("upstreams", json::array()))
            if (u.is_string()) upstreams.push_back(u.get<std::string>());
        auto sock = std::make_shared<Fd>(bind_resolver_socket(address, SOCK_DGRAM));
        auto listener = std::make_shared<Fd>(bind_resolver_socket(address, SOCK_STREAM));
        auto policy = std::make_shared<EgressPolicy>(*r->spec.runtime.egress);
        return std::function<void(int)>([sock, listener, policy, upstreams, id](int stop_fd) {
            serve(
                sock->get(), listener->get(), stop_fd, *policy,
                [&](const std::string& q) { return ask_nameservers(upstreams, q); },
                [&](const std::string& q) { return ask_nameservers_tcp(upstreams, q); },
                [&](const std::vector<int>& entries, const std::vector<ResolvedAddress>& addrs,
                    std::chrono::seconds timeout) {
                    return open_in_nftables(id, entries, addrs, timeout);
                });
        });
    });
}

}  // namespace sandweave
