/*
 * A heavy delegate stand-in (REL-BURST): it holds HEAVY_MIB of resident memory for the length of
 * a real plugin's run, as a cilium-cni-sized plugin does, then gives that plugin's answer.
 *
 * Installed as `heavy-<type>` beside the real `<type>` (a NAD names `"type": "heavy-bridge"`),
 * it runs `<its directory>/<type>` with the runtime's stdin, stdout, stderr and CNI_* variables,
 * and exits with its status. NETATTACH_HEAVY_REAL names another plugin to run instead, and
 * NETATTACH_HEAVY_MIB another size (default 60). Built static (`gcc -static`), as a Go plugin
 * is, so it runs inside the daemon's container whatever libc that has.
 */
#define _POSIX_C_SOURCE 200809L

#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/types.h>
#include <sys/wait.h>
#include <unistd.h>

#define DEFAULT_MIB 60L
#define PAGE 4096L
#define PREFIX "heavy-"

/* The real plugin: NETATTACH_HEAVY_REAL, else argv[0] with its "heavy-" prefix taken off. */
static int real_plugin(const char *self, char *out, size_t size) {
    const char *given = getenv("NETATTACH_HEAVY_REAL");
    if (given != NULL && given[0] != '\0') {
        return snprintf(out, size, "%s", given) < (int)size ? 0 : -1;
    }
    const char *slash = strrchr(self, '/');
    const char *base = slash == NULL ? self : slash + 1;
    size_t dir = (size_t)(base - self);
    if (strncmp(base, PREFIX, strlen(PREFIX)) != 0) {
        return -1;
    }
    int wrote = snprintf(out, size, "%.*s%s", (int)dir, self, base + strlen(PREFIX));
    return wrote > 0 && wrote < (int)size ? 0 : -1;
}

static long held_mib(void) {
    const char *given = getenv("NETATTACH_HEAVY_MIB");
    if (given == NULL || given[0] == '\0') {
        return DEFAULT_MIB;
    }
    char *end = NULL;
    long mib = strtol(given, &end, 10);
    return (*end == '\0' && mib >= 0 && mib <= 4096) ? mib : -1;
}

int main(int argc, char **argv) {
    char real[4096];
    if (argc < 1 || real_plugin(argv[0], real, sizeof real) != 0) {
        fprintf(stderr, "heavy stand-in: no real plugin for %s\n", argc ? argv[0] : "?");
        return 1;
    }
    long mib = held_mib();
    if (mib < 0) {
        fprintf(stderr, "heavy stand-in: NETATTACH_HEAVY_MIB \"%s\" is no size in MiB\n",
                getenv("NETATTACH_HEAVY_MIB"));
        return 1;
    }
    size_t size = (size_t)mib * 1024 * 1024;
    volatile char *held = size ? malloc(size) : NULL;
    if (size && held == NULL) {
        fprintf(stderr, "heavy stand-in: cannot hold %ld MiB\n", mib);
        return 1;
    }
    for (size_t at = 0; at < size; at += PAGE) { /* resident, page by page */
        held[at] = 1;
    }
    pid_t child = fork();
    if (child < 0) {
        perror("heavy stand-in: fork");
        return 1;
    }
    if (child == 0) {
        execv(real, argv);
        fprintf(stderr, "heavy stand-in: exec %s: %s\n", real, strerror(errno));
        _exit(127);
    }
    int status = 0;
    while (waitpid(child, &status, 0) < 0) {
        if (errno != EINTR) {
            perror("heavy stand-in: waitpid");
            return 1;
        }
    }
    free((void *)held);
    return WIFEXITED(status) ? WEXITSTATUS(status) : 128 + WTERMSIG(status);
}
