/*
 * The pod sandbox's only process in tests/node: what the Kubernetes `pause` image runs.
 *
 * It holds the sandbox's namespaces open by staying alive, reaps every child re-parented to it
 * (it is PID 1 of the sandbox's PID namespace), and exits 0 on SIGINT or SIGTERM, which is how
 * containerd stops a sandbox. Built static (`gcc -static`) so the image needs no libc.
 */
#define _POSIX_C_SOURCE 200809L

#include <signal.h>
#include <stdio.h>
#include <sys/wait.h>

static volatile sig_atomic_t stop_requested;

static void on_stop(int signo) {
    (void)signo;
    stop_requested = 1;
}

/* SIGCHLD needs a handler (not SIG_IGN) so that sigsuspend returns and we reap below. */
static void on_child(int signo) { (void)signo; }

static int install(int signo, void (*handler)(int)) {
    struct sigaction action = {0};
    action.sa_handler = handler;
    action.sa_flags = SA_NOCLDSTOP;
    sigemptyset(&action.sa_mask);
    return sigaction(signo, &action, NULL);
}

static void reap_children(void) {
    while (waitpid(-1, NULL, WNOHANG) > 0) {
    }
}

int main(void) {
    sigset_t watched;
    sigset_t waiting;
    sigemptyset(&watched);
    sigaddset(&watched, SIGINT);
    sigaddset(&watched, SIGTERM);
    sigaddset(&watched, SIGCHLD);
    /* Blocked outside sigsuspend: a signal between the check and the wait is not lost. */
    if (sigprocmask(SIG_BLOCK, &watched, &waiting) != 0 || install(SIGINT, on_stop) != 0 ||
        install(SIGTERM, on_stop) != 0 || install(SIGCHLD, on_child) != 0) {
        perror("pause: signals");
        return 1;
    }
    sigdelset(&waiting, SIGINT);
    sigdelset(&waiting, SIGTERM);
    sigdelset(&waiting, SIGCHLD);
    while (!stop_requested) {
        sigsuspend(&waiting);
        reap_children();
    }
    return 0;
}
