/*
 * Little-endian integers in a byte buffer, as every format in wire/ writes
 * them (the agent's frames, the copy stream). Written once for the guest (C,
 * built against musl) and the host (C++): plain static inline functions over
 * unsigned bytes, with no alignment or host byte order assumed.
 */
#ifndef SANDWEAVE_BYTE_ORDER_H
#define SANDWEAVE_BYTE_ORDER_H

#include <stdint.h>

/* A conversion spelled as each language wants it (C++ warns on C casts). */
#ifdef __cplusplus
#define SW_AS(type, v) static_cast<type>(v)
#else
#define SW_AS(type, v) ((type)(v))
#endif

static inline void sw_put16(unsigned char* p, uint16_t v) {
    p[0] = SW_AS(unsigned char, v);
    p[1] = SW_AS(unsigned char, v >> 8);
}
static inline void sw_put32(unsigned char* p, uint32_t v) {
    p[0] = SW_AS(unsigned char, v);
    p[1] = SW_AS(unsigned char, v >> 8);
    p[2] = SW_AS(unsigned char, v >> 16);
    p[3] = SW_AS(unsigned char, v >> 24);
}
static inline void sw_put64(unsigned char* p, uint64_t v) {
    sw_put32(p, SW_AS(uint32_t, v));
    sw_put32(p + 4, SW_AS(uint32_t, v >> 32));
}
static inline uint16_t sw_get16(const unsigned char* p) {
    return SW_AS(uint16_t, p[0] | p[1] << 8);
}
static inline uint32_t sw_get32(const unsigned char* p) {
    return SW_AS(uint32_t, p[0]) | SW_AS(uint32_t, p[1]) << 8 | SW_AS(uint32_t, p[2]) << 16 |
           SW_AS(uint32_t, p[3]) << 24;
}
static inline uint64_t sw_get64(const unsigned char* p) {
    return SW_AS(uint64_t, sw_get32(p)) | SW_AS(uint64_t, sw_get32(p + 4)) << 32;
}

#endif
