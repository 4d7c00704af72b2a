// libldns, opened on first use (lib/core/lazy_library.hpp): only a sandbox's
// resolver (lib/sandbox/resolver.hpp), in the shim of a sandbox whose policy
// names domains, parses DNS messages. A function the resolver (or its unit
// test) starts to use needs its line here.

#include "lib/core/lazy_library.hpp"

// After the standard headers (through lazy_library.hpp): ldns's common.h
// breaks them under clang when it comes first.
#include <ldns/ldns.h>

namespace {
constexpr sandweave::LazyLibrary libldns{"libldns.so.3", "domain names in a network policy",
                                         "libldns3", sandweave::ErrorCode::runtime};
}  // namespace

#define SANDWEAVE_LIBLDNS(ret, name, params, args) \
    SANDWEAVE_LAZY_FORWARD(libldns, ret, name, params, args)

extern "C" {
SANDWEAVE_LIBLDNS(ldns_status, ldns_wire2pkt, (ldns_pkt * *packet, const uint8_t* data, size_t len),
                  (packet, data, len))
SANDWEAVE_LIBLDNS(ldns_status, ldns_pkt2wire, (uint8_t * *dest, const ldns_pkt* p, size_t* size),
                  (dest, p, size))
SANDWEAVE_LIBLDNS(void, ldns_pkt_free, (ldns_pkt * packet), (packet))
SANDWEAVE_LIBLDNS(char*, ldns_rdf2str, (const ldns_rdf* rdf), (rdf))
SANDWEAVE_LIBLDNS(ldns_pkt*, ldns_pkt_new, (void), ())
SANDWEAVE_LIBLDNS(void, ldns_pkt_set_id, (ldns_pkt * p, uint16_t id), (p, id))
SANDWEAVE_LIBLDNS(uint16_t, ldns_pkt_id, (const ldns_pkt* p), (p))
SANDWEAVE_LIBLDNS(void, ldns_pkt_set_qr, (ldns_pkt * p, bool b), (p, b))
SANDWEAVE_LIBLDNS(bool, ldns_pkt_qr, (const ldns_pkt* p), (p))
SANDWEAVE_LIBLDNS(void, ldns_pkt_set_opcode, (ldns_pkt * p, ldns_pkt_opcode c), (p, c))
SANDWEAVE_LIBLDNS(ldns_pkt_opcode, ldns_pkt_get_opcode, (const ldns_pkt* p), (p))
SANDWEAVE_LIBLDNS(void, ldns_pkt_set_rd, (ldns_pkt * p, bool b), (p, b))
SANDWEAVE_LIBLDNS(bool, ldns_pkt_rd, (const ldns_pkt* p), (p))
SANDWEAVE_LIBLDNS(void, ldns_pkt_set_ra, (ldns_pkt * p, bool b), (p, b))
SANDWEAVE_LIBLDNS(void, ldns_pkt_set_tc, (ldns_pkt * p, bool b), (p, b))
SANDWEAVE_LIBLDNS(bool, ldns_pkt_tc, (const ldns_pkt* p), (p))
SANDWEAVE_LIBLDNS(void, ldns_pkt_set_rcode, (ldns_pkt * p, uint8_t c), (p, c))
SANDWEAVE_LIBLDNS(ldns_pkt_rcode, ldns_pkt_get_rcode, (const ldns_pkt* p), (p))
SANDWEAVE_LIBLDNS(uint16_t, ldns_pkt_qdcount, (const ldns_pkt* p), (p))
SANDWEAVE_LIBLDNS(uint16_t, ldns_pkt_ancount, (const ldns_pkt* p), (p))
SANDWEAVE_LIBLDNS(ldns_rr_list*, ldns_pkt_question, (const ldns_pkt* p), (p))
SANDWEAVE_LIBLDNS(ldns_rr_list*, ldns_pkt_answer, (const ldns_pkt* p), (p))
SANDWEAVE_LIBLDNS(bool, ldns_pkt_push_rr,
                  (ldns_pkt * packet, ldns_pkt_section section, ldns_rr* rr), (packet, section, rr))
SANDWEAVE_LIBLDNS(ldns_pkt*, ldns_pkt_query_new,
                  (ldns_rdf * rr_name, ldns_rr_type rr_type, ldns_rr_class rr_class,
                   uint16_t flags),
                  (rr_name, rr_type, rr_class, flags))
SANDWEAVE_LIBLDNS(bool, ldns_pkt_edns, (const ldns_pkt* packet), (packet))
SANDWEAVE_LIBLDNS(uint16_t, ldns_pkt_edns_udp_size, (const ldns_pkt* packet), (packet))
SANDWEAVE_LIBLDNS(void, ldns_pkt_set_edns_udp_size, (ldns_pkt * packet, uint16_t s), (packet, s))
SANDWEAVE_LIBLDNS(ldns_rr*, ldns_rr_clone, (const ldns_rr* rr), (rr))
SANDWEAVE_LIBLDNS(void, ldns_rr_free, (ldns_rr * rr), (rr))
SANDWEAVE_LIBLDNS(ldns_status, ldns_rr_new_frm_str,
                  (ldns_rr * *n, const char* str, uint32_t default_ttl, const ldns_rdf* origin,
                   ldns_rdf** prev),
                  (n, str, default_ttl, origin, prev))
SANDWEAVE_LIBLDNS(ldns_rr_type, ldns_rr_get_type, (const ldns_rr* rr), (rr))
SANDWEAVE_LIBLDNS(ldns_rr_class, ldns_rr_get_class, (const ldns_rr* rr), (rr))
SANDWEAVE_LIBLDNS(ldns_rdf*, ldns_rr_owner, (const ldns_rr* rr), (rr))
SANDWEAVE_LIBLDNS(uint32_t, ldns_rr_ttl, (const ldns_rr* rr), (rr))
SANDWEAVE_LIBLDNS(void, ldns_rr_set_ttl, (ldns_rr * rr, uint32_t ttl), (rr, ttl))
SANDWEAVE_LIBLDNS(size_t, ldns_rr_rd_count, (const ldns_rr* rr), (rr))
SANDWEAVE_LIBLDNS(ldns_rdf*, ldns_rr_rdf, (const ldns_rr* rr, size_t nr), (rr, nr))
SANDWEAVE_LIBLDNS(size_t, ldns_rr_list_rr_count, (const ldns_rr_list* rr_list), (rr_list))
SANDWEAVE_LIBLDNS(ldns_rr*, ldns_rr_list_rr, (const ldns_rr_list* rr_list, size_t nr),
                  (rr_list, nr))
SANDWEAVE_LIBLDNS(size_t, ldns_rdf_size, (const ldns_rdf* rd), (rd))
SANDWEAVE_LIBLDNS(uint8_t*, ldns_rdf_data, (const ldns_rdf* rd), (rd))
SANDWEAVE_LIBLDNS(ldns_rdf*, ldns_rdf_clone, (const ldns_rdf* rd), (rd))
SANDWEAVE_LIBLDNS(ldns_rdf*, ldns_dname_new_frm_str, (const char* str), (str))
}
