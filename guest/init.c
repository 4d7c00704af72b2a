/*
 * sandweave-init: PID 1 of every sandbox.
 *
 * It keeps the sandbox alive and reaps every orphan re-parented to it, so
 * commands that leave background children behind never accumulate zombies.
 * It waits for signals synchronously (sigwaitinfo), so no handler runs
 * asynchronously; SIGTERM/SIGINT end it, which stops the sandbox.
 * Static, no allocation, no output unless something is wrong.
 */
#include <errno.h>
#include <signal.h>
#include <stdio.h>
#include <sys/wait.h>
#include <unistd.h>

static void reap_all(void) {
    for (;;) {
        pid_t pid = waitpid(-1, NULL, WNOHANG);
        if (pid > 0) continue;
        if (pid < 0 && errno == EINTR) continue;
        return; /* 0: children still running; -1 ECHILD: none left */
    }
}

int main(void) {
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
