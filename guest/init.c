/*
 * sandweave-init: PID 1 of every sandbox.
 *
 * It keeps the sandbox alive and reaps every orphan re-parented to it, so
 * commands that leave background children behind never accumulate zombies.
 * When its fd 0 is a socket (the channel the supervisor donated at create),
 * it is also the guest agent that starts the host's commands (agent.c), each
 * in a cgroup of its own (command_group.c).
 * It takes signals synchronously (signalfd or sigwaitinfo), so no handler runs
 * asynchronously; SIGTERM/SIGINT end it, which stops the sandbox.
 * Static, no output unless something is wrong.
 */
#define _GNU_SOURCE
#include <dirent.h>
#include <errno.h>
#include <grp.h>
#include <signal.h>
#include <stdio.h>
#include <string.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>

#include "agent.h"
#include "command_group.h"
#include "watch.h"

/*
 * `init --probe-hidepid`: sandweave's check that a runtime really enforces
 * hidepid=2 (run once per runtime binary, in a throwaway sandbox whose /proc is
 * mounted with hidepid=2). A child drops to uid/gid 1001 (which also drops every
 * capability) and must neither list nor stat root's PID 1. Exit 0 means enforced.
 */
static int probe_hidepid(void) {
    pid_t child = fork();
    if (child < 0) return 3;
    if (child == 0) {
        if (setgroups(0, NULL) != 0 || setresgid(1001, 1001, 1001) != 0 ||
            setresuid(1001, 1001, 1001) != 0) {
            printf("probe: cannot drop privileges: %s\n", strerror(errno));
            fflush(stdout);
            _exit(3);
        }
        int listed = 0;
        DIR* d = opendir("/proc");
        if (d == NULL) {
            printf("probe: opendir /proc: %s\n", strerror(errno));
            fflush(stdout);
            _exit(3);
        }
        struct dirent* e;
        while ((e = readdir(d)) != NULL)
            if (strcmp(e->d_name, "1") == 0) listed = 1;
        closedir(d);
        struct stat st;
        int visible = stat("/proc/1", &st) == 0;
        int self_ok = stat("/proc/self/status", &st) == 0;
        printf("probe: as uid 1001 under hidepid=2, root's PID 1 %s\n",
               listed || visible ? "is still visible"
               : self_ok         ? "is hidden"
                                 : "is hidden but so is /proc/self");
        fflush(stdout);
        _exit(!listed && !visible && self_ok ? 0 : 1);
    }
    int status = 0;
    while (waitpid(child, &status, 0) < 0 && errno == EINTR) {
    }
    return WIFEXITED(status) ? WEXITSTATUS(status) : 3;
}

static void reap_all(void) {
    for (;;) {
        pid_t pid = waitpid(-1, NULL, WNOHANG);
        if (pid > 0) continue;
        if (pid < 0 && errno == EINTR) continue;
        return; /* 0: children still running; -1 ECHILD: none left */
    }
}

int main(int argc, char** argv) {
    if (argc > 1 && strcmp(argv[1], "--probe-hidepid") == 0) return probe_hidepid();
    if (argc > 1 && strcmp(argv[1], "--watch") == 0) return watch_main(argc, argv);
    sigset_t set;
    sigemptyset(&set);
    sigaddset(&set, SIGCHLD);
    sigaddset(&set, SIGTERM);
    sigaddset(&set, SIGINT);
    sigaddset(&set, SIGHUP);
    if (sigprocmask(SIG_BLOCK, &set, NULL) != 0) {
        perror("sandweave-init: sigprocmask");
        return 1;
    }
    /* Before anything else: it also gives up the capability it needs. */
    if (getpid() == 1) command_group_setup();
    struct stat channel;
    if (fstat(0, &channel) == 0 && S_ISSOCK(channel.st_mode)) {
        int rc = agent_serve(&set);
        if (rc == 0) return 0;
        perror("sandweave-init: agent");
    }
    for (;;) {
        reap_all();
        siginfo_t info;
        int sig = sigwaitinfo(&set, &info);
        if (sig < 0) {
            if (errno == EINTR) continue;
            perror("sandweave-init: sigwaitinfo");
            return 1;
        }
        if (sig == SIGTERM || sig == SIGINT) {
            reap_all();
            return 0;
        }
    }
}
