/* The pod sandbox's pause program for vkpy's dev cluster image registry.k8s.io/pause.
 *
 * Written for vkpy (not copied): it holds a pod's namespaces open while doing
 * nothing. It waits for signals: SIGINT and SIGTERM end it with status 0, SIGCHLD
 * reaps whatever children were re-parented to it (it may be a PID namespace's init).
 * `-v` prints its version and exits. Built with `gcc -static -Os`.
 */
#include <signal.h>
#include <stdio.h>
#include <string.h>
#include <sys/wait.h>

int main(int argc, char **argv) {
    sigset_t set;
    int signo;

    if (argc > 1 && strcmp(argv[1], "-v") == 0) {
        puts("pause (vkpy) 3.10");
        return 0;
    }
    sigemptyset(&set);
    sigaddset(&set, SIGINT);
    sigaddset(&set, SIGTERM);
    sigaddset(&set, SIGCHLD);
    sigprocmask(SIG_BLOCK, &set, NULL);
    for (;;) {
        if (sigwait(&set, &signo) != 0)
            continue;
        if (signo == SIGCHLD) {
            while (waitpid(-1, NULL, WNOHANG) > 0)
                ;
            continue;
        }
        fprintf(stderr, "pause: shutting down on signal %d\n", signo);
        return 0;
    }
}
