/*
 * The exec supervisor's `run` mode in C: the same contract as supervisor.py's `run`
 * (arguments, framing, verdict, syscall filter, process cap, whole-tree kill), for
 * images that ship it at /usr/libexec/openblox/supervise. A Python start-up inside
 * gVisor costs more than the rest of an exec; this does not. tests/unit/test_supervisor.py
 * runs one suite against both implementations.
 *
 *   supervise run TIMEOUT CAP NPROC CWD [KEY=VALUE ...] -- ARGV...
 *
 * Built static (gcc -O2 -static), so it needs nothing from the image.
 */
#define _GNU_SOURCE
#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <linux/audit.h>
#include <linux/filter.h>
#include <linux/seccomp.h>
#include <poll.h>
#include <signal.h>
#include <stddef.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/prctl.h>
#include <sys/resource.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#define CHUNK 65536
/* CLONE_NEWTIME | CLONE_NEWNS | CLONE_NEWCGROUP | CLONE_NEWUTS | CLONE_NEWIPC |
 * CLONE_NEWUSER | CLONE_NEWPID | CLONE_NEWNET */
#define NAMESPACE_FLAGS (0x00000080u | 0x00020000u | 0x7E000000u)

/* Kept identical to supervisor.py's tables. */
#if defined(__x86_64__)
#define ARCH AUDIT_ARCH_X86_64
static const unsigned refused[] = {308, 165, 166, 155, 428, 429, 430, 431, 432,
                                   433, 442, 321, 298, 323, 248, 249, 250};
static const unsigned flagged[] = {272, 56};
#elif defined(__aarch64__)
#define ARCH AUDIT_ARCH_AARCH64
static const unsigned refused[] = {268, 40,  39,  41,  428, 429, 430, 431, 432,
                                   433, 442, 280, 241, 282, 217, 218, 219};
static const unsigned flagged[] = {97, 220};
#else
#error "no syscall filter for this architecture"
#endif
#define CLONE3 435
#define COUNT(a) (sizeof(a) / sizeof((a)[0]))

static double now(void) {
    struct timespec t;
    clock_gettime(CLOCK_MONOTONIC, &t);
    return (double)t.tv_sec + (double)t.tv_nsec / 1e9;
}

/* Stalls: times this process went unscheduled past a wait it asked for. When a node is
 * frozen or starved of CPU, gVisor's systrap platform kills a process whose stub stops
 * answering (SIGKILL or SIGSEGV): that exit is then not the command's own, and the
 * verdict's "stalled" lets the client say so (docs/reliability.md). It is the longest
 * stall that ended within STALL_WINDOW seconds of the verdict, since gVisor's kill
 * follows the stall at once: an old stall says nothing of a later kill. Stalls under
 * STALL_NOTED seconds are scheduling noise and not kept. */
#define STALL_WINDOW 30.0
#define STALL_NOTED 1.0
#define STALLS_KEPT 64
static struct { double end, length; } stalls[STALLS_KEPT];
static size_t stall_count = 0;

static void note_stall(double start, double asked) {
    double end = now(), over = end - start - asked;
    if (over < STALL_NOTED) return;
    stalls[stall_count % STALLS_KEPT].end = end;
    stalls[stall_count % STALLS_KEPT].length = over;
    stall_count++;
}

static double recent_stall(void) {
    double moment = now(), longest = 0;
    size_t kept = stall_count < STALLS_KEPT ? stall_count : STALLS_KEPT;
    for (size_t i = 0; i < kept; i++)
        if (stalls[i].end >= moment - STALL_WINDOW && stalls[i].length > longest)
            longest = stalls[i].length;
    return longest < 1e6 ? longest : 1e6;
}

static int timed_poll(struct pollfd *fds, nfds_t count, int milliseconds) {
    double start = now();
    int ready = poll(fds, count, milliseconds);
    note_stall(start, milliseconds / 1000.0);
    return ready;
}

static void timed_sleep(useconds_t microseconds) {
    double start = now();
    usleep(microseconds);
    note_stall(start, microseconds / 1e6);
}

/* -1 once the caller is gone (SIGPIPE is ignored, so a closed stream is EPIPE). */
static int write_all(int fd, const char *data, size_t length) {
    while (length > 0) {
        ssize_t written = write(fd, data, length);
        if (written < 0) {
            if (errno == EINTR) continue;
            return -1;
        }
        data += written;
        length -= (size_t)written;
    }
    return 0;
}

static int frame(char tag, const char *data, size_t length) {
    char header[5] = {tag, (char)(length >> 24), (char)(length >> 16), (char)(length >> 8),
                      (char)length};
    if (write_all(1, header, 5) != 0) return -1;
    return write_all(1, data, length);
}

static int install_filter(void) {
    struct sock_filter program[64];
    unsigned n = 0;
    program[n++] = (struct sock_filter)BPF_STMT(BPF_LD | BPF_W | BPF_ABS,
                                                offsetof(struct seccomp_data, arch));
    program[n++] = (struct sock_filter)BPF_JUMP(BPF_JMP | BPF_JEQ | BPF_K, ARCH, 1, 0);
    program[n++] = (struct sock_filter)BPF_STMT(BPF_RET | BPF_K, SECCOMP_RET_KILL_PROCESS);
    program[n++] = (struct sock_filter)BPF_STMT(BPF_LD | BPF_W | BPF_ABS,
                                                offsetof(struct seccomp_data, nr));
    unsigned tests = 2 + COUNT(refused) + COUNT(flagged);
    unsigned allow = n + tests, flags = allow + 1, eperm = allow + 4, enosys = allow + 5;
    program[n] = (struct sock_filter)BPF_JUMP(BPF_JMP | BPF_JGE | BPF_K, 0x40000000u,
                                              (unsigned char)(enosys - n - 1), 0);
    n++;
    program[n] = (struct sock_filter)BPF_JUMP(BPF_JMP | BPF_JEQ | BPF_K, CLONE3,
                                              (unsigned char)(enosys - n - 1), 0);
    n++;
    for (size_t i = 0; i < COUNT(refused); i++, n++)
        program[n] = (struct sock_filter)BPF_JUMP(BPF_JMP | BPF_JEQ | BPF_K, refused[i],
                                                  (unsigned char)(eperm - n - 1), 0);
    for (size_t i = 0; i < COUNT(flagged); i++, n++)
        program[n] = (struct sock_filter)BPF_JUMP(BPF_JMP | BPF_JEQ | BPF_K, flagged[i],
                                                  (unsigned char)(flags - n - 1), 0);
    program[n++] = (struct sock_filter)BPF_STMT(BPF_RET | BPF_K, SECCOMP_RET_ALLOW);
    /* The low half of args[0]: clone's and unshare's flags. */
    program[n++] = (struct sock_filter)BPF_STMT(BPF_LD | BPF_W | BPF_ABS,
                                                offsetof(struct seccomp_data, args[0]));
    program[n++] = (struct sock_filter)BPF_JUMP(BPF_JMP | BPF_JSET | BPF_K, NAMESPACE_FLAGS, 1, 0);
    program[n++] = (struct sock_filter)BPF_STMT(BPF_RET | BPF_K, SECCOMP_RET_ALLOW);
    program[n++] = (struct sock_filter)BPF_STMT(BPF_RET | BPF_K, SECCOMP_RET_ERRNO | EPERM);
    program[n++] = (struct sock_filter)BPF_STMT(BPF_RET | BPF_K, SECCOMP_RET_ERRNO | ENOSYS);
    struct sock_fprog fprog = {.len = (unsigned short)n, .filter = program};
    if (prctl(PR_SET_NO_NEW_PRIVS, 1, 0, 0, 0) != 0) return -1;
    return prctl(PR_SET_SECCOMP, SECCOMP_MODE_FILTER, &fprog, 0, 0);
}

static void exec_confined(char **argv, const char *cwd, long nproc) {
    /* The command starts with default signal dispositions, in a process group of its
     * own: `kill 0` in it must not reach this supervisor. */
    signal(SIGPIPE, SIG_DFL);
    setpgid(0, 0);
    if (*cwd && chdir(cwd) != 0) goto refuse;
    if (nproc > 0) {
        struct rlimit limit = {(rlim_t)nproc, (rlim_t)nproc};
        if (setrlimit(RLIMIT_NPROC, &limit) != 0) goto refuse;
    }
    if (install_filter() != 0) goto refuse;
    execvp(argv[0], argv);
    int code = errno == ENOENT ? 127 : 126;
    dprintf(2, "openblox: %s: %s\n", argv[0], strerror(errno));
    _exit(code);
refuse:
    /* Fail closed: a command never runs without its limits. */
    dprintf(2, "openblox: not starting %s: %s\n", argv[0], strerror(errno));
    _exit(126);
}

/* Every descendant of root, from /proc; returns how many were written to found. */
static size_t descendants(pid_t root, pid_t *found, size_t room) {
    static pid_t pids[65536], parents[65536];
    size_t count = 0;
    DIR *proc = opendir("/proc");
    if (!proc) return 0;
    struct dirent *entry;
    while ((entry = readdir(proc)) && count < COUNT(pids)) {
        char *end;
        long pid = strtol(entry->d_name, &end, 10);
        if (*end || pid <= 0) continue;
        char path[64], stat[512];
        snprintf(path, sizeof path, "/proc/%ld/stat", pid);
        FILE *file = fopen(path, "re");
        if (!file) continue;
        size_t length = fread(stat, 1, sizeof stat - 1, file);
        fclose(file);
        stat[length] = 0;
        /* The command name may hold spaces and parentheses: parse after the last ')'. */
        char *close = strrchr(stat, ')');
        int parent;
        if (!close || sscanf(close + 2, "%*c %d", &parent) != 1) continue;
        pids[count] = (pid_t)pid;
        parents[count++] = (pid_t)parent;
    }
    closedir(proc);
    size_t total = 0, next = 0;
    pid_t current = root;
    for (;;) {
        for (size_t i = 0; i < count && total < room; i++)
            if (parents[i] == current) found[total++] = pids[i];
        if (next >= total) return total;
        current = found[next++];
    }
}

static int reap(pid_t pid, int *status) {
    int found = 0, raw;
    pid_t done;
    while ((done = waitpid(-1, &raw, WNOHANG)) > 0)
        if (done == pid) {
            *status = raw;
            found = 1;
        }
    return found;
}

static void kill_tree(pid_t root, pid_t command, int *status, int *have_status) {
    static pid_t left[65536];
    for (int round = 0; round < 200; round++) {
        size_t count = descendants(root, left, COUNT(left));
        if (count == 0) return;
        for (size_t i = 0; i < count; i++) kill(left[i], SIGKILL);
        if (reap(command, status)) *have_status = 1;
        usleep(5000);
    }
}

static void usage(void) {
    fputs("usage: supervise run TIMEOUT CAP NPROC CWD [KEY=VALUE ...] -- ARGV...\n", stderr);
    exit(2);
}

int main(int argc, char **argv) {
    /* The first act, before anything else: not dumpable. The command runs as this uid, and
     * a process of that uid may open /proc/<pid>/fd/1 or fd/2 of a dumpable process: it
     * could write forged frames or a forged verdict into this supervisor's stream, or flood
     * its stderr. Not dumpable, /proc/<pid> of this process is owned by root and closed to
     * it (ptrace too). What came before this line (the exec itself) it cannot cover; the
     * client bounds and checks whatever reaches the stream. It can still kill this process;
     * the caller's deadline and output cap hold regardless. */
    prctl(PR_SET_DUMPABLE, 0, 0, 0, 0);
    if (argc < 8 || strcmp(argv[1], "run") != 0) usage();
    double deadline = now() + strtod(argv[2], NULL);
    long cap = strtol(argv[3], NULL, 10), nproc = strtol(argv[4], NULL, 10);
    const char *cwd = argv[5];
    int i = 6;
    for (; i < argc && strcmp(argv[i], "--") != 0; i++) {
        char *equals = strchr(argv[i], '=');
        if (!equals) usage();
        *equals = 0;
        setenv(argv[i], equals + 1, 1);
    }
    if (i + 1 >= argc) usage();
    char **command = &argv[i + 1];
    /* A subreaper: whatever the command forks stays a descendant, to be ended with it. */
    prctl(PR_SET_CHILD_SUBREAPER, 1, 0, 0, 0);
    signal(SIGPIPE, SIG_IGN);
    /* "Started", before the command exists: the client then knows this binary ran and
     * never falls back to running the command again under the Python supervisor. */
    if (frame('S', "", 0) != 0) return 120;
    int out[2], err[2];
    if (pipe2(out, O_CLOEXEC) != 0 || pipe2(err, O_CLOEXEC) != 0) return 125;
    pid_t pid = fork();
    if (pid < 0) return 125;
    if (pid == 0) {
        dup2(out[1], 1);
        dup2(err[1], 2);
        exec_confined(command, cwd, nproc);
    }
    close(out[1]);
    close(err[1]);
    struct pollfd fds[2] = {{out[0], POLLIN, 0}, {err[0], POLLIN, 0}};
    const char tags[2] = {'O', 'E'};
    int open_count = 2, status = 0, have_status = 0, timed_out = 0, truncated = 0;
    int caller_gone = 0;
    long sent = 0;
    static char buffer[CHUNK];
    while (open_count > 0 && !caller_gone) {
        double remaining = deadline - now();
        if (remaining <= 0) {
            timed_out = 1;
            break;
        }
        if (!have_status) have_status = reap(pid, &status);
        /* Once the command has exited, descendants holding its pipes are not waited for. */
        double wait = have_status ? 0.05 : 0.5;
        if (remaining < wait) wait = remaining;
        int ready = timed_poll(fds, 2, (int)(wait * 1000) + 1);
        if (ready < 0 && errno == EINTR) continue;
        if (ready == 0 && have_status) break;
        for (int f = 0; f < 2; f++) {
            if (fds[f].fd < 0 || !(fds[f].revents & (POLLIN | POLLHUP | POLLERR))) continue;
            ssize_t length = read(fds[f].fd, buffer, sizeof buffer);
            if (length <= 0) {
                if (length < 0 && errno == EINTR) continue;
                close(fds[f].fd);
                fds[f].fd = -1;
                open_count--;
                continue;
            }
            long room = cap - sent;
            if (room <= 0) {
                truncated = 1; /* keep reading so the command never blocks on a full pipe */
                continue;
            }
            if (length > room) {
                length = room;
                truncated = 1;
            }
            sent += length;
            if (frame(tags[f], buffer, (size_t)length) != 0) {
                caller_gone = 1;
                break;
            }
        }
    }
    if (caller_gone) {
        /* Nobody reads the output any more: the command and its tree end now. */
        kill_tree(getpid(), pid, &status, &have_status);
        return 120;
    }
    while (!have_status && !timed_out) {
        have_status = reap(pid, &status);
        if (!have_status) {
            if (now() >= deadline) timed_out = 1;
            else timed_sleep(2000);
        }
    }
    kill_tree(getpid(), pid, &status, &have_status);
    if (!have_status) have_status = reap(pid, &status);
    int exit_code, killed_by = 0;
    if (!have_status) {
        exit_code = 128 + SIGKILL;
        killed_by = SIGKILL;
    } else if (WIFSIGNALED(status)) {
        killed_by = WTERMSIG(status);
        exit_code = 128 + killed_by;
    } else {
        exit_code = WEXITSTATUS(status);
    }
    char verdict[192], signal_text[16] = "null";
    if (killed_by) snprintf(signal_text, sizeof signal_text, "%d", killed_by);
    int length = snprintf(verdict, sizeof verdict,
                          "{\"exit_code\": %d, \"timed_out\": %s, \"truncated\": %s, "
                          "\"signal\": %s, \"stalled\": %.1f}",
                          exit_code, timed_out ? "true" : "false", truncated ? "true" : "false",
                          signal_text, recent_stall());
    return frame('R', verdict, (size_t)length) == 0 ? 0 : 120;
}
