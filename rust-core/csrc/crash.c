/*
 * A trail when a PHP thread receives a fatal signal (SIGSEGV, SIGBUS, SIGILL, SIGFPE,
 * SIGABRT): one JSON line on standard error naming the signal, the thread, its request and
 * the PHP code it ran; then the process dies of that signal, at once (pw_die). On other
 * threads (Go's) the signal goes to the handler that was there before (Go's). C because
 * the handler reads the thread's PHP globals through PHP's macros, with nothing but
 * async-signal-safe calls. See shim.h.
 *
 * PHP threads get a signal stack from src/runtime/registry.rs, so a stack overflow (deep
 * recursion in C) still gets its line.
 *
 * Everything in the handler is async-signal-safe: a stack buffer, write(2), prctl(2),
 * clock_gettime(2), and reads of the thread's PHP globals, which may be damaged: the line
 * is written in parts, so a second fault while reading them leaves what was written.
 */
#include <php.h>
#include <SAPI.h>

#include <signal.h>
#include <string.h>
#include <sys/prctl.h>
#include <time.h>
#include <unistd.h>

#include "shim.h"

static const int pw_fatal_signals[] = {SIGSEGV, SIGBUS, SIGILL, SIGFPE, SIGABRT};
#define PW_FATAL_SIGNALS (sizeof(pw_fatal_signals) / sizeof(pw_fatal_signals[0]))

/* The handlers installed before ours (Go's), by position in pw_fatal_signals. */
static struct sigaction pw_previous[PW_FATAL_SIGNALS];
static bool pw_installed;

/* Set while this thread has a PHP context: only then are its PHP globals read. */
static __thread bool pw_thread_has_php;
/* The script of the request the thread runs (owned by Rust for the request's life). */
static __thread const char *pw_thread_script;
/* The thread is writing its trail: a fault inside it must not start another. */
static __thread volatile sig_atomic_t pw_in_trail;

typedef struct {
	char buf[4096];
	size_t len;
} pw_line;

static void pw_flush(pw_line *l)
{
	size_t off = 0;
	while (off < l->len) {
		ssize_t n = write(STDERR_FILENO, l->buf + off, l->len - off);
		if (n <= 0) {
			break;
		}
		off += (size_t)n;
	}
	l->len = 0;
}

static void pw_put(pw_line *l, const char *s, size_t n)
{
	for (size_t i = 0; i < n; i++) {
		if (l->len + 8 > sizeof(l->buf)) {
			pw_flush(l);
		}
		l->buf[l->len++] = s[i];
	}
}

static void pw_puts(pw_line *l, const char *s)
{
	pw_put(l, s, strlen(s));
}

static void pw_put_uint(pw_line *l, unsigned long v)
{
	char digits[24];
	size_t n = 0;
	do {
		digits[n++] = (char)('0' + v % 10);
		v /= 10;
	} while (v);
	while (n) {
		pw_put(l, &digits[--n], 1);
	}
}

/* A JSON string value: quotes, backslashes and control bytes escaped, at most max bytes. */
static void pw_put_json(pw_line *l, const char *s, size_t n, size_t max)
{
	static const char hex[] = "0123456789abcdef";
	pw_put(l, "\"", 1);
	for (size_t i = 0; s && i < n && i < max; i++) {
		unsigned char c = (unsigned char)s[i];
		if (c == '"' || c == '\\') {
			char esc[2] = {'\\', (char)c};
			pw_put(l, esc, 2);
		} else if (c < 0x20) {
			char esc[6] = {'\\', 'u', '0', '0', hex[c >> 4], hex[c & 15]};
			pw_put(l, esc, 6);
		} else {
			pw_put(l, (const char *)&c, 1);
		}
	}
	pw_put(l, "\"", 1);
}

static void pw_put_field(pw_line *l, const char *name, const char *s, size_t n)
{
	pw_puts(l, ",\"");
	pw_puts(l, name);
	pw_puts(l, "\":");
	pw_put_json(l, s, n, 1024);
}

static const char *pw_signal_name(int sig)
{
	switch (sig) {
	case SIGSEGV: return "SIGSEGV";
	case SIGBUS: return "SIGBUS";
	case SIGILL: return "SIGILL";
	case SIGFPE: return "SIGFPE";
	case SIGABRT: return "SIGABRT";
	default: return "signal";
	}
}

/* The PHP function running (internal or user), and the file and line of the innermost
 * user code. */
static void pw_put_php_position(pw_line *l)
{
	zend_execute_data *ex = EG(current_execute_data);
	if (ex && ex->func && ex->func->common.function_name) {
		zend_string *name = ex->func->common.function_name;
		pw_put_field(l, "php_function", ZSTR_VAL(name), ZSTR_LEN(name));
	}
	for (int depth = 0; ex && depth < 256; ex = ex->prev_execute_data, depth++) {
		if (ex->func && ZEND_USER_CODE(ex->func->type)) {
			zend_string *file = ex->func->op_array.filename;
			if (file) {
				pw_put_field(l, "php_file", ZSTR_VAL(file), ZSTR_LEN(file));
			}
			if (ex->opline) {
				pw_puts(l, ",\"php_line\":");
				pw_put_uint(l, ex->opline->lineno);
			}
			break;
		}
	}
}

static void pw_write_trail(int sig)
{
	pw_line l;
	l.len = 0;
	struct timespec now;
	clock_gettime(CLOCK_REALTIME, &now);
	char name[17] = {0};
	prctl(PR_GET_NAME, name, 0, 0, 0);

	pw_puts(&l, "{\"level\":\"fatal\",\"ts\":");
	pw_put_uint(&l, (unsigned long)now.tv_sec);
	pw_puts(&l, ".");
	char frac[4] = {(char)('0' + now.tv_nsec / 100000000), (char)('0' + now.tv_nsec / 10000000 % 10),
	                (char)('0' + now.tv_nsec / 1000000 % 10), 0};
	pw_puts(&l, frac);
	pw_puts(&l, ",\"logger\":\"php_worker\",\"msg\":\"PHP thread received a fatal signal; the process ends\"");
	pw_put_field(&l, "signal", pw_signal_name(sig), strlen(pw_signal_name(sig)));
	pw_put_field(&l, "thread", name, strlen(name));
	pw_flush(&l);
	const char *method = SG(request_info).request_method;
	const char *uri = SG(request_info).request_uri;
	const char *script = pw_thread_script;
	if (method) {
		pw_put_field(&l, "method", method, strlen(method));
	}
	if (uri) {
		pw_put_field(&l, "uri", uri, strlen(uri));
	}
	if (script) {
		pw_put_field(&l, "script", script, strlen(script));
	}
	pw_flush(&l);
	pw_put_php_position(&l);
	pw_puts(&l, "}\n");
	pw_flush(&l);
}

/* Ends the process by `sig`, from a PHP thread's handler. Go's handler is not the way:
 * on a thread Go did not create it re-raises the signal, and the kernel drops a signal
 * sent (not raised by a fault) to a PID namespace's init whose action is the default, so
 * a container's PID 1 lived on with the thread stuck and its probes answering 200. So:
 * the default action, the signal unblocked (a handler runs with it blocked) and raised,
 * which kills any other process as a crash does, core dump included; and if the process
 * is still alive after that, PID 1, the exit status a shell gives a process killed by
 * the signal (128 + n). Both calls are async-signal-safe. */
static void pw_die(int sig)
{
	signal(sig, SIG_DFL);
	sigset_t set;
	sigemptyset(&set);
	sigaddset(&set, sig);
	pthread_sigmask(SIG_UNBLOCK, &set, NULL);
	raise(sig);
	_exit(128 + sig);
}

static void pw_fatal_signal(int sig, siginfo_t *info, void *ucontext)
{
	size_t i = 0;
	while (i < PW_FATAL_SIGNALS && pw_fatal_signals[i] != sig) {
		i++;
	}
	if (i == PW_FATAL_SIGNALS) {
		return;
	}
	if (pw_thread_has_php) {
		if (!pw_in_trail) {
			pw_in_trail = 1;
			pw_write_trail(sig);
		}
		pw_die(sig);
	}
	const struct sigaction *prev = &pw_previous[i];
	if (prev->sa_flags & SA_SIGINFO) {
		prev->sa_sigaction(sig, info, ucontext);
	} else if (prev->sa_handler == SIG_IGN) {
		return;
	} else if (prev->sa_handler != SIG_DFL) {
		prev->sa_handler(sig);
	} else {
		/* The default action: die from this signal, with its core dump. */
		signal(sig, SIG_DFL);
		raise(sig);
	}
}

void pw_shim_crash_trail_install(void)
{
	if (pw_installed) { /* once per process: a second time would chain to ourselves */
		return;
	}
	for (size_t i = 0; i < PW_FATAL_SIGNALS; i++) {
		struct sigaction sa;
		memset(&sa, 0, sizeof(sa));
		sa.sa_sigaction = pw_fatal_signal;
		sigemptyset(&sa.sa_mask);
		/* SA_ONSTACK: on Go's threads the handler runs on Go's signal stack, as Go
		 * requires of handlers installed after its own. */
		sa.sa_flags = SA_SIGINFO | SA_ONSTACK | SA_RESTART;
		sigaction(pw_fatal_signals[i], &sa, &pw_previous[i]);
	}
	pw_installed = true;
}

void pw_crash_trail_thread_begins(void)
{
	pw_thread_has_php = true;
}

void pw_crash_trail_request(const char *script)
{
	pw_thread_script = script;
}

void pw_crash_trail_thread_ends(void)
{
	pw_thread_has_php = false;
}
