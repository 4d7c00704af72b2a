// udp_send ADDR PORT COUNT [GAP_US]: sends COUNT one-byte UDP datagrams to
// ADDR (IPv4 or IPv6) port PORT, GAP_US microseconds apart (default 0), and
// prints how many the kernel took. The network test's guest-side sender:
// busybox's nc has no UDP mode.

#include <arpa/inet.h>
#include <netinet/in.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <unistd.h>

int main(int argc, char** argv) {
    if (argc < 4) {
        fprintf(stderr, "usage: udp_send ADDR PORT COUNT [GAP_US]\n");
        return 2;
    }
    struct sockaddr_storage ss;
    memset(&ss, 0, sizeof ss);
    socklen_t len;
    int port = atoi(argv[2]);
    struct sockaddr_in* v4 = (struct sockaddr_in*)&ss;
    struct sockaddr_in6* v6 = (struct sockaddr_in6*)&ss;
    if (inet_pton(AF_INET, argv[1], &v4->sin_addr) == 1) {
        v4->sin_family = AF_INET;
        v4->sin_port = htons((unsigned short)port);
        len = sizeof *v4;
    } else if (inet_pton(AF_INET6, argv[1], &v6->sin6_addr) == 1) {
        v6->sin6_family = AF_INET6;
        v6->sin6_port = htons((unsigned short)port);
        len = sizeof *v6;
    } else {
        fprintf(stderr, "udp_send: not an address: %s\n", argv[1]);
        return 2;
    }
    int fd = socket(ss.ss_family, SOCK_DGRAM, 0);
    if (fd < 0) {
        perror("udp_send: socket");
        return 1;
    }
    long count = atol(argv[3]);
    long gap = argc > 4 ? atol(argv[4]) : 0;
    long sent = 0;
    for (long i = 0; i < count; ++i) {
        if (sendto(fd, "x", 1, 0, (struct sockaddr*)&ss, len) == 1) ++sent;
        if (gap > 0) usleep((useconds_t)gap);
    }
    printf("%ld\n", sent);
    return 0;
}
