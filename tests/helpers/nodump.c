/* A non-dumpable process for the hidepid tests (copied into the guest, so static).
 * nodump sleep: PR_SET_DUMPABLE=0 and wait forever.
 * nodump selfcheck (or any other argument, or none): the same, then with a
 * second thread check that its own /proc entries stay accessible; prints
 * "selfcheck OK" (exit 0) or what failed and "selfcheck FAILED" (exit 1). */
#define _GNU_SOURCE
#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/prctl.h>
#include <sys/syscall.h>
#include <unistd.h>

static volatile pid_t tid2;

static void* thread(void* arg) {
    tid2 = syscall(SYS_gettid);
    for (;;) pause();
    return arg;
}

static int check(const char* path) {
    char buf[64];
    int fd = open(path, O_RDONLY);
    if (fd < 0) {
        printf("%s: %s\n", path, strerror(errno));
        return 1;
    }
    ssize_t n = read(fd, buf, sizeof(buf));
    close(fd);
    if (n <= 0) {
        printf("%s: read failed\n", path);
        return 1;
    }
    return 0;
}

int main(int argc, char** argv) {
    char path[128];
    pthread_t t;
    int bad = 0, listed = 0;
    pid_t pid = getpid();
    struct dirent* de;
    DIR* d;

    if (prctl(PR_SET_DUMPABLE, 0, 0, 0, 0) != 0 || prctl(PR_GET_DUMPABLE) != 0) {
        perror("prctl");
        return 2;
    }
    if (argc > 1 && strcmp(argv[1], "sleep") == 0)
        for (;;) pause();
    pthread_create(&t, NULL, thread, NULL);
    while (!tid2) usleep(1000);
    bad |= check("/proc/self/status");
    bad |= check("/proc/thread-self/status");
    snprintf(path, sizeof(path), "/proc/%d/status", pid);
    bad |= check(path);
    snprintf(path, sizeof(path), "/proc/%d/task/%d/status", pid, tid2);
    bad |= check(path);
    snprintf(path, sizeof(path), "/proc/%d/status", tid2);
    bad |= check(path);
    if ((d = opendir("/proc")) != NULL) {
        while ((de = readdir(d)) != NULL) listed |= atoi(de->d_name) == pid;
        closedir(d);
    }
    if (!listed) {
        printf("own pid %d not listed in /proc\n", pid);
        bad = 1;
    }
    printf("selfcheck %s\n", bad ? "FAILED" : "OK");
    return bad;
}
