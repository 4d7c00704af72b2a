/* Hostile content for the runtime audit (tests/integration/audit_hostile_content.sh):
 * bytes that are not UTF-8 in argv, the environment, paths, the process name
 * and the working directory, paths and arguments near their limits, and
 * fchdir on directories that were deleted or renamed. Copied into the guest,
 * so static. Every string here is also in the test script, which checks that
 * the exact bytes come back from the exported log.
 *
 * audit_hostile dirs BASE   the path and fd cases under BASE (exit 0 or 1)
 * audit_hostile exec        execve(/bin/true) with hostile argv and env
 * audit_hostile empties     execve(/bin/true) with the largest point gVisor can
 *                           make: argv and env each fill its 2 MiB limit with
 *                           empty strings (each costs 1 byte there, 2 encoded);
 *                           (tests/integration/audit_big_points.sh)
 */
#define _GNU_SOURCE
#include <errno.h>
#include <fcntl.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/prctl.h>
#include <sys/stat.h>
#include <sys/syscall.h>
#include <unistd.h>

/* Invalid UTF-8: a lone byte, an overlong '/', a surrogate, past U+10FFFF. */
#define ODD "\xff\xfe\xc0\xaf\xed\xa0\x80\xf4\x90\x80\x80"

static int failed;

static void check(int ok, const char* what) {
    if (!ok) {
        fprintf(stderr, "audit_hostile: %s: %s\n", what, strerror(errno));
        failed = 1;
    }
}

/* A 200-byte path component: "L" ODD, then 'x' up to 200 bytes. */
static void long_component(char* out) {
    size_t n = strlen("L" ODD);
    memcpy(out, "L" ODD, n);
    memset(out + n, 'x', 200 - n);
    out[200] = 0;
}

static int dirs(const char* base) {
    check(chdir(base) == 0, "chdir base");
    /* chdir with a path that is not UTF-8; then it is the cwd of every record. */
    check(mkdir("cd" ODD, 0755) == 0, "mkdir cd" ODD);
    check(chdir("cd" ODD) == 0, "chdir cd" ODD);
    /* The process name (context process_name) too. */
    check(prctl(PR_SET_NAME, "n" ODD, 0, 0, 0) == 0, "prctl");
    /* fchdir has one argument. The second argument register holds a pointer
     * to bytes that are not UTF-8, as it held whatever find(1) left there: a
     * runtime that reads it as a path records garbage or loses the point. */
    int here = open(".", O_RDONLY | O_DIRECTORY);
    check(here >= 0, "open .");
    static const char garbage[] = "garbage" ODD;
    check(syscall(SYS_fchdir, here, (long)garbage, (long)garbage) == 0, "fchdir .");
    /* An fd on a directory deleted since it was opened. */
    check(mkdir("gone", 0755) == 0, "mkdir gone");
    int gone = open("gone", O_RDONLY | O_DIRECTORY);
    check(gone >= 0, "open gone");
    check(rmdir("gone") == 0, "rmdir gone");
    check(syscall(SYS_fchdir, gone, (long)garbage) == 0, "fchdir gone");
    check(fchdir(here) == 0, "fchdir back");
    /* An fd on a directory renamed (to a name that is not UTF-8) since. */
    check(mkdir("old", 0755) == 0, "mkdir old");
    int old = open("old", O_RDONLY | O_DIRECTORY);
    check(old >= 0, "open old");
    check(rename("old", "new" ODD) == 0, "rename old");
    check(syscall(SYS_fchdir, old, (long)garbage) == 0, "fchdir renamed");
    check(fchdir(here) == 0, "fchdir back");
    /* A file name that is not UTF-8, and a path near PATH_MAX (4096). */
    int f = open("f" ODD, O_CREAT | O_WRONLY, 0644);
    check(f >= 0, "open f" ODD);
    check(write(f, "x", 1) == 1, "write f" ODD);
    check(close(f) == 0, "close f" ODD);
    char comp[201];
    long_component(comp);
    for (int i = 0; i < 18; i++) {
        check(mkdir(comp, 0755) == 0 || errno == EEXIST, "mkdir long");
        check(chdir(comp) == 0, "chdir long");
    }
    /* cwd is now base/cd.../ + 18 * 201 bytes; the absolute path of a file in it. */
    char path[4096];
    check(getcwd(path, sizeof path) != NULL, "getcwd");
    size_t n = strlen(path);
    size_t room = sizeof path - 1 - n - 1; /* '/', NUL */
    if (room > 255) room = 255;            /* NAME_MAX */
    path[n] = '/';
    memset(path + n + 1, 'y', room);
    memcpy(path + n + 1, "F" ODD, strlen("F" ODD));
    path[n + 1 + room] = 0;
    f = open(path, O_CREAT | O_WRONLY, 0644);
    check(f >= 0, "open long path");
    check(close(f) == 0, "close long");
    printf("%s\n", path);
    return failed;
}

static int exec_hostile(void) {
    /* One argument at Linux's limit for one string (MAX_ARG_STRLEN, 128 KiB
     * with its NUL), starting with odd bytes. */
    static char big[128 * 1024];
    memset(big, 'A', sizeof big - 1);
    memcpy(big, "B" ODD, strlen("B" ODD));
    char* argv[] = {"/bin/true", "a" ODD "b", big, "", "\\udcff", NULL};
    char* envp[] = {"ODD=" ODD, "PATH=/bin", NULL};
    execve("/bin/true", argv, envp);
    perror("execve");
    return 1;
}

/* gVisor's ExecMaxTotalSize, counting each string's NUL. */
#define EXEC_MAX_TOTAL (2 * 1024 * 1024)

static int exec_empties(void) {
    size_t nargs = EXEC_MAX_TOTAL - sizeof "/bin/true", nenv = EXEC_MAX_TOTAL;
    char** argv = calloc(nargs + 2, sizeof *argv);
    char** envp = calloc(nenv + 1, sizeof *envp);
    if (!argv || !envp) {
        perror("calloc");
        return 1;
    }
    argv[0] = "/bin/true";
    for (size_t i = 1; i <= nargs; i++) argv[i] = "";
    for (size_t i = 0; i < nenv; i++) envp[i] = "";
    execve("/bin/true", argv, envp);
    /* The loader may refuse that many pointers on the stack; the syscall's
     * audit point has them all anyway. */
    perror("execve");
    return 0;
}

int main(int argc, char** argv) {
    if (argc == 3 && strcmp(argv[1], "dirs") == 0) return dirs(argv[2]);
    if (argc == 2 && strcmp(argv[1], "exec") == 0) return exec_hostile();
    if (argc == 2 && strcmp(argv[1], "empties") == 0) return exec_empties();
    fprintf(stderr, "usage: audit_hostile dirs BASE | exec | empties\n");
    return 2;
}
