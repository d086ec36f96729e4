/*
 * slurm-yolo-hook: the PrologSlurmctld / EpilogSlurmctld program of slurm-yolo.
 *
 * It forwards the hook's Slurm environment (SLURM_* and SPANK_* variables) to the resident
 * server `slurm-yolo hookd` over a Unix socket and waits for its answer, so a job start or end
 * costs about a millisecond of CPU here instead of a Python start. When the server does not
 * answer "ok" (not running, refused, timed out), it runs the Python hook of the same event
 * instead, which does the whole work itself: the server is an accelerator, never a dependency.
 * Repeating a hook is harmless (holds and settlements happen once per job run).
 *
 * It always exits 0: a failing PrologSlurmctld makes Slurm requeue the job forever.
 *
 * `slurm-yolo-hook admit ...` is job_submit.lua's question on a ledger several clusters share (see
 * admit() below and slurm_yolo/controller/shared_admission.py).
 *
 * The event comes from SLURM_SCRIPT_CONTEXT (prolog_slurmctld / epilog_slurmctld), or from the
 * first argument ("prolog" / "epilog") when run by hand. SLURM_YOLO_HOOKD_SOCKET overrides the
 * socket path baked in at build time (slurmctld passes no such variable; tests and benchmarks do).
 */
#define _GNU_SOURCE
#include <errno.h>
#include <poll.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <sys/un.h>
#include <unistd.h>

#ifndef HOOKD_SOCKET
#define HOOKD_SOCKET "/run/slurm-yolo/hookd.sock"
#endif
#ifndef PYTHON_HOOKS
#define PYTHON_HOOKS "/opt/slurm-yolo/venv/bin"
#endif
#define REPLY_TIMEOUT_MS 30000
#define ADMIT_TIMEOUT_MS 8000 /* slurmctld waits on it, its job lock held; hookd answers within 5 s */
#define MAX_REQUEST      (1 << 20)

extern char **environ;

static const char *event_of(int argc, char **argv)
{
	const char *ctx = getenv("SLURM_SCRIPT_CONTEXT");
	const char *ev = argc > 1 ? argv[1] : NULL;

	if (!ev && ctx && !strcmp(ctx, "prolog_slurmctld"))
		ev = "prolog";
	else if (!ev && ctx && !strcmp(ctx, "epilog_slurmctld"))
		ev = "epilog";
	if (ev && (!strcmp(ev, "prolog") || !strcmp(ev, "epilog")))
		return ev;
	return NULL;
}

/* EVENT NUL, then KEY=VALUE NUL for each forwarded variable; its length, or 0 when too large. */
static size_t build_request(const char *ev, char *buf, size_t cap)
{
	size_t len = strlen(ev) + 1;

	memcpy(buf, ev, len);
	for (char **e = environ; *e; e++) {
		size_t n;

		if (strncmp(*e, "SLURM_", 6) && strncmp(*e, "SPANK_", 6))
			continue;
		n = strlen(*e) + 1;
		if (len + n > cap)
			return 0;
		memcpy(buf + len, *e, n);
		len += n;
	}
	return len;
}

static int send_all(int fd, const char *buf, size_t len)
{
	while (len) {
		ssize_t n = send(fd, buf, len, MSG_NOSIGNAL);

		if (n < 0 && errno == EINTR)
			continue;
		if (n <= 0)
			return -1;
		buf += n;
		len -= (size_t)n;
	}
	return 0;
}

/* Send a request, read the answer (NUL-terminated) into reply: its length, or -1 when there is none. */
static ssize_t ask(const char *req, size_t len, char *reply, size_t cap, int timeout_ms)
{
	const char *path = getenv("SLURM_YOLO_HOOKD_SOCKET");
	struct sockaddr_un addr = { .sun_family = AF_UNIX };
	struct pollfd pfd;
	size_t got = 0;
	ssize_t rc = -1;
	int fd;

	if (!path || !*path)
		path = HOOKD_SOCKET;
	if (strlen(path) >= sizeof(addr.sun_path))
		return -1;
	strcpy(addr.sun_path, path);
	fd = socket(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC, 0);
	if (fd < 0)
		return -1;
	if (connect(fd, (struct sockaddr *)&addr, sizeof(addr)) || send_all(fd, req, len) ||
	    shutdown(fd, SHUT_WR))
		goto out;
	pfd.fd = fd;
	pfd.events = POLLIN;
	while (got < cap - 1) {
		ssize_t n;
		int ready = poll(&pfd, 1, timeout_ms);

		if (ready < 0 && errno == EINTR)
			continue;
		if (ready <= 0)
			goto out;
		n = read(fd, reply + got, cap - 1 - got);
		if (n < 0 && errno == EINTR)
			continue;
		if (n <= 0)
			break;
		got += (size_t)n;
	}
	reply[got] = '\0';
	rc = (ssize_t)got;
out:
	close(fd);
	return rc;
}

/* 0 when the server answered "ok". */
static int forward(const char *ev)
{
	static char req[MAX_REQUEST];
	char reply[512];
	size_t len = build_request(ev, req, sizeof(req));
	ssize_t got;

	if (!len)
		return -1;
	got = ask(req, len, reply, sizeof(reply), REPLY_TIMEOUT_MS);
	if (got > 0 && !strcmp(reply, "ok\n"))
		return 0;
	if (got > 0)
		fprintf(stderr, "slurm-yolo-hook: hookd: %s", reply);
	return -1;
}

/*
 * `slurm-yolo-hook admit CLUSTER ACCOUNT NEED [ACCOUNT=TOKENS ...]`: job_submit.lua's question on a
 * ledger several clusters share. Prints hookd's answer line ("ok", "wait SECONDS", "refused ...",
 * "error: ...") and exits 0 only on "ok" or "wait" (admitted, or admitted to wait for credits); no
 * answer is a refusal (there is no Python fallback: slurmctld waits).
 */
static int admit(int argc, char **argv)
{
	static char req[MAX_REQUEST];
	char reply[512];
	size_t len = 0;
	ssize_t got;

	for (int i = 1; i < argc; i++) {
		size_t n = strlen(argv[i]) + 1;

		if (len + n > sizeof(req)) {
			puts("error: the question is too large");
			return 2;
		}
		memcpy(req + len, argv[i], n);
		len += n;
	}
	got = ask(req, len, reply, sizeof(reply), ADMIT_TIMEOUT_MS);
	if (got <= 0) {
		puts("error: hookd did not answer");
		return 2;
	}
	fputs(reply, stdout);
	return strcmp(reply, "ok\n") && strncmp(reply, "wait ", 5) ? 1 : 0;
}

int main(int argc, char **argv)
{
	const char *ev;
	char path[4096];

	if (argc > 1 && !strcmp(argv[1], "admit"))
		return admit(argc, argv);
	ev = event_of(argc, argv);

	if (!ev) {
		fprintf(stderr, "slurm-yolo-hook: cannot tell prolog from epilog (no SLURM_SCRIPT_CONTEXT, "
				"no argument)\n");
		return 0;
	}
	if (!forward(ev))
		return 0;
	snprintf(path, sizeof(path), "%s/slurm-yolo-%s", PYTHON_HOOKS, ev);
	execv(path, (char *[]){ path, NULL });
	fprintf(stderr, "slurm-yolo-hook: %s: %s\n", path, strerror(errno));
	return 0;
}
