/*
 * The programs a PHP thread starts get no blocked signal.
 *
 * A PHP thread blocks the host's signals (SIGTERM, SIGINT, SIGCHLD, SIGALRM, SIGPIPE...,
 * src/host.rs says which), so none of them interrupts PHP: Go's runtime takes them on
 * its own threads. A new process inherits its starter thread's signal mask, so a
 * program started by exec(), shell_exec(), system(), passthru(), popen(), mail() or
 * proc_open() would start with those signals blocked: proc_terminate() and `timeout`
 * could not end it, nor SIGTERM from anyone, and alarm() would never fire in it.
 *
 * PHP starts programs three ways: posix_spawn()/posix_spawnp() (proc_open() from PHP
 * 8.3), fork() then exec (proc_open() before 8.3, and extensions) and popen() (the
 * others, through VCWD_POPEN). The binary is linked with --wrap for each (the LDFLAGS of
 * go-module/internal/core/cgo.go), so PHP's calls land here; the end-to-end suite tests
 * them (test_programs_a_script_starts_get_no_blocked_signal, on PHP 8.4 and 8.2). On a thread that blocked the host's signals for PHP
 * (pw_spawn_thread_blocks_signals, from thread.c), a spawn whose caller set no signal
 * mask of its own starts its program with an empty one; popen() is made over
 * posix_spawn() for that, since glibc's popen() passes no attributes. Elsewhere (the
 * command line's script thread, which takes the signals itself) nothing changes.
 * Programs started with fork() and exec() by an extension keep the mask (PHP itself does
 * not start programs that way on Linux).
 */
#ifndef _GNU_SOURCE
#define _GNU_SOURCE
#endif
#include <errno.h>
#include <fcntl.h>
#include <pthread.h>
#include <signal.h>
#include <spawn.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/wait.h>
#include <unistd.h>

/* shim.h needs PHP's headers, which nothing here uses: pw_spawn_thread_blocks_signals is
 * declared there. */
void pw_spawn_thread_blocks_signals(void);

extern char **environ;

/* The functions --wrap stands in for. Weak: a binary linked without --wrap (the core's
 * own tests) never calls the __wrap_ functions, and need not have these. */
__attribute__((weak)) int __real_posix_spawn(pid_t *pid, const char *path, const posix_spawn_file_actions_t *actions,
	const posix_spawnattr_t *attr, char *const argv[], char *const envp[]);
__attribute__((weak)) int __real_posix_spawnp(pid_t *pid, const char *file, const posix_spawn_file_actions_t *actions,
	const posix_spawnattr_t *attr, char *const argv[], char *const envp[]);
__attribute__((weak)) pid_t __real_fork(void);
__attribute__((weak)) FILE *__real_popen(const char *command, const char *mode);
__attribute__((weak)) int __real_pclose(FILE *stream);

/* Set on a PHP thread once it blocked the host's signals. */
static __thread int blocks_host_signals;

void pw_spawn_thread_blocks_signals(void)
{
	blocks_host_signals = 1;
}

/* *own is attr (or defaults) with an empty signal mask, unless attr sets a mask. Both
 * are glibc's plain structs: a copy needs no destroy. */
static void unblocked(posix_spawnattr_t *own, const posix_spawnattr_t *attr)
{
	short flags = 0;
	if (attr) {
		*own = *attr;
	} else {
		posix_spawnattr_init(own);
	}
	posix_spawnattr_getflags(own, &flags);
	if (!(flags & POSIX_SPAWN_SETSIGMASK)) {
		sigset_t none;
		sigemptyset(&none);
		posix_spawnattr_setsigmask(own, &none);
		posix_spawnattr_setflags(own, flags | POSIX_SPAWN_SETSIGMASK);
	}
}

int __wrap_posix_spawn(pid_t *pid, const char *path, const posix_spawn_file_actions_t *actions,
	const posix_spawnattr_t *attr, char *const argv[], char *const envp[])
{
	if (!blocks_host_signals) {
		return __real_posix_spawn(pid, path, actions, attr, argv, envp);
	}
	posix_spawnattr_t own;
	unblocked(&own, attr);
	return __real_posix_spawn(pid, path, actions, &own, argv, envp);
}

int __wrap_posix_spawnp(pid_t *pid, const char *file, const posix_spawn_file_actions_t *actions,
	const posix_spawnattr_t *attr, char *const argv[], char *const envp[])
{
	if (!blocks_host_signals) {
		return __real_posix_spawnp(pid, file, actions, attr, argv, envp);
	}
	posix_spawnattr_t own;
	unblocked(&own, attr);
	return __real_posix_spawnp(pid, file, actions, &own, argv, envp);
}

/* fork(): the child of a PHP thread gets the default action of every signal Go's runtime
 * handled, then no signal blocked. It execs a program (proc_open() before PHP 8.3),
 * which then starts as any program does; or it goes on running PHP (pcntl_fork()), with
 * no Go runtime behind the handlers it inherited, and then SIGTERM ends it, as it would
 * end the child of a php-fpm worker. Only async-signal-safe calls after the fork. */
pid_t __wrap_fork(void)
{
	pid_t pid = __real_fork();
	if (pid != 0 || !blocks_host_signals) {
		return pid;
	}
	for (int sig = 1; sig < NSIG; sig++) {
		struct sigaction was;
		if (sig == SIGKILL || sig == SIGSTOP || sigaction(sig, NULL, &was) != 0) {
			continue;
		}
		if (was.sa_handler != SIG_DFL && was.sa_handler != SIG_IGN) {
			struct sigaction dfl;
			memset(&dfl, 0, sizeof dfl);
			dfl.sa_handler = SIG_DFL;
			sigemptyset(&dfl.sa_mask);
			sigaction(sig, &dfl, NULL);
		}
	}
	sigset_t none;
	sigemptyset(&none);
	sigprocmask(SIG_SETMASK, &none, NULL);
	return pid;
}

/* The streams this popen() opened, for pclose() to wait for their program. */
struct spawned {
	FILE *stream;
	pid_t pid;
	struct spawned *next;
};
static pthread_mutex_t spawned_lock = PTHREAD_MUTEX_INITIALIZER;
static struct spawned *spawned_list;

FILE *__wrap_popen(const char *command, const char *mode)
{
	if (!blocks_host_signals) {
		return __real_popen(command, mode);
	}
	if (!command || !mode || (mode[0] != 'r' && mode[0] != 'w')) {
		errno = EINVAL;
		return NULL;
	}
	int reading = mode[0] == 'r';
	struct spawned *entry = malloc(sizeof *entry);
	if (!entry) {
		return NULL;
	}
	/* Both ends close-on-exec: the program gets its end as its standard input or output
	 * only, and no other program ever inherits this pipe (as glibc's popen() makes sure
	 * of for the streams it opened before). */
	int fds[2];
	if (pipe2(fds, O_CLOEXEC) != 0) {
		free(entry);
		return NULL;
	}
	int ours = reading ? fds[0] : fds[1], theirs = reading ? fds[1] : fds[0];
	int target = reading ? STDOUT_FILENO : STDIN_FILENO;
	if (theirs == target) {
		/* The standard descriptor was closed and the pipe took it: a dup2 onto itself
		 * would leave it close-on-exec. */
		int moved = fcntl(theirs, F_DUPFD_CLOEXEC, 3);
		if (moved < 0) {
			int e = errno;
			close(fds[0]);
			close(fds[1]);
			free(entry);
			errno = e;
			return NULL;
		}
		close(theirs);
		theirs = moved;
	}
	posix_spawn_file_actions_t actions;
	posix_spawnattr_t attr;
	posix_spawn_file_actions_init(&actions);
	posix_spawn_file_actions_adddup2(&actions, theirs, target);
	unblocked(&attr, NULL);
	char *argv[] = {"sh", "-c", (char *)command, NULL};
	pid_t pid;
	int rc = __real_posix_spawn(&pid, "/bin/sh", &actions, &attr, argv, environ);
	posix_spawn_file_actions_destroy(&actions);
	posix_spawnattr_destroy(&attr);
	close(theirs);
	if (rc != 0) {
		close(ours);
		free(entry);
		errno = rc;
		return NULL;
	}
	FILE *stream = fdopen(ours, reading ? "r" : "w");
	if (!stream) {
		int e = errno;
		close(ours);
		while (waitpid(pid, NULL, 0) < 0 && errno == EINTR) {
		}
		free(entry);
		errno = e;
		return NULL;
	}
	entry->stream = stream;
	entry->pid = pid;
	pthread_mutex_lock(&spawned_lock);
	entry->next = spawned_list;
	spawned_list = entry;
	pthread_mutex_unlock(&spawned_lock);
	return stream;
}

int __wrap_pclose(FILE *stream)
{
	pthread_mutex_lock(&spawned_lock);
	struct spawned **at = &spawned_list;
	while (*at && (*at)->stream != stream) {
		at = &(*at)->next;
	}
	struct spawned *entry = *at;
	if (entry) {
		*at = entry->next;
	}
	pthread_mutex_unlock(&spawned_lock);
	if (!entry) {
		return __real_pclose(stream); /* glibc's popen() made it */
	}
	pid_t pid = entry->pid;
	free(entry);
	fclose(stream);
	int status;
	pid_t got;
	do {
		got = waitpid(pid, &status, 0);
	} while (got < 0 && errno == EINTR);
	return got < 0 ? -1 : status;
}
