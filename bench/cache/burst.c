/*
 * burst: rounds of simultaneous GETs on pre-opened keep-alive connections, with
 * the latency of every request.
 *
 * usage: burst HOST:PORT CONNS ROUNDS PREFIX [PAUSE_MS] [TIMEOUT_MS] [HOST_HEADER]
 *
 * Opens CONNS TCP connections to HOST:PORT (IPv4) and waits until all are
 * established. Then, ROUNDS times: writes "GET PREFIX<round> HTTP/1.1" on every
 * connection in one loop of write()s, and reads each response with epoll (status
 * line, Content-Length, body). A request's latency runs from just before its own
 * write() to the read() that brought its last byte (CLOCK_MONOTONIC); its time
 * to first byte, from the same write() to the read() that brought the first
 * byte of its response. PAUSE_MS
 * (default 50) separates the rounds, and comes once before the first; a round
 * that is not complete after TIMEOUT_MS (default 5000) is an error. HOST_HEADER
 * is the Host field sent (default HOST:PORT).
 *
 * Output (stdout), one line per request, then one summary line:
 *   req round=R conn=C status=S latency_us=N ttfb_us=N cache=collapsed|hit|other|none
 *   done requests=N errors=N
 * cache= classifies the Cache-Status header (RFC 9211): "collapsed" if it says
 * so, else "hit" if it says that, "other" if present, "none" if absent.
 * Errors (connect failure, non-200 status, connection closed or reset, bad or
 * oversized head, chunked body (not supported), extra bytes, timeout) are
 * printed to stderr as "error round=R conn=C: what"; the run stops after the
 * round in which one happened and the exit status is 1. Usage errors exit 2.
 *
 * build: gcc -O2 -Wall -Wextra -o burst burst.c
 */
#define _GNU_SOURCE
#include <arpa/inet.h>
#include <errno.h>
#include <fcntl.h>
#include <netinet/in.h>
#include <netinet/tcp.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>
#include <sys/epoll.h>
#include <sys/socket.h>
#include <time.h>
#include <unistd.h>

#define HEAD_MAX 8192
#define MAX_CONNS 10000

enum { S_IDLE, S_HEAD, S_BODY, S_DONE, S_FAILED };

struct conn {
    int fd;
    int idx;
    int state;
    int status;
    const char *cache;
    size_t head_len;
    unsigned long long body_left;
    long long t_write_ns;
    long long t_first_ns;
    long long t_done_ns;
    char head[HEAD_MAX];
};

static long long now_ns(void) {
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (long long)ts.tv_sec * 1000000000LL + ts.tv_nsec;
}

static void sleep_ms(long ms) {
    struct timespec ts = {.tv_sec = ms / 1000, .tv_nsec = (ms % 1000) * 1000000L};
    while (nanosleep(&ts, &ts) < 0 && errno == EINTR)
        ;
}

static int n_errors, ep;

static void fail(struct conn *c, int round, const char *what) {
    fprintf(stderr, "error round=%d conn=%d: %s\n", round, c->idx, what);
    c->state = S_FAILED;
    epoll_ctl(ep, EPOLL_CTL_DEL, c->fd, NULL); /* no more events from a broken connection */
    n_errors++;
}

/* the value of header NAME (with its colon) in the head [h, end), or NULL;
 * *len is its length without surrounding blanks */
static const char *header(const char *h, const char *end, const char *name, size_t *len) {
    size_t nl = strlen(name);
    for (const char *p = h; p < end; p++) {
        if ((p == h || p[-1] == '\n') && (size_t)(end - p) > nl && strncasecmp(p, name, nl) == 0) {
            const char *v = p + nl, *e = memchr(v, '\r', (size_t)(end - v));
            if (!e)
                e = end;
            while (v < e && (*v == ' ' || *v == '\t'))
                v++;
            while (e > v && (e[-1] == ' ' || e[-1] == '\t'))
                e--;
            *len = (size_t)(e - v);
            return v;
        }
    }
    return NULL;
}

/* returns 1 when the head is complete (state moves to S_BODY or S_DONE), 0 when
 * more is needed, -1 on error (already reported) */
static int parse_head(struct conn *c, int round) {
    char *end = memmem(c->head, c->head_len, "\r\n\r\n", 4);
    if (!end) {
        if (c->head_len == HEAD_MAX) {
            fail(c, round, "response head larger than 8 KiB");
            return -1;
        }
        return 0;
    }
    size_t hl = (size_t)(end - c->head) + 4;
    if (hl < 16 || memcmp(c->head, "HTTP/1.", 7) != 0 || c->head[8] != ' ') {
        fail(c, round, "malformed status line");
        return -1;
    }
    c->status = atoi(c->head + 9);
    size_t vl;
    const char *v = header(c->head, end + 2, "transfer-encoding:", &vl);
    if (v) {
        fail(c, round, "Transfer-Encoding in the response (chunked bodies are not supported)");
        return -1;
    }
    v = header(c->head, end + 2, "content-length:", &vl);
    if (!v || vl == 0 || vl > 18 || strspn(v, "0123456789") < vl) {
        fail(c, round, "no valid Content-Length in the response");
        return -1;
    }
    unsigned long long cl = strtoull(v, NULL, 10);
    v = header(c->head, end + 2, "cache-status:", &vl);
    if (!v)
        c->cache = "none";
    else if (memmem(v, vl, "collapsed", 9))
        c->cache = "collapsed";
    else if (memmem(v, vl, "hit", 3))
        c->cache = "hit";
    else
        c->cache = "other";
    size_t extra = c->head_len - hl;
    if (extra > cl) {
        fail(c, round, "bytes after the end of the response");
        return -1;
    }
    c->body_left = cl - extra;
    c->state = c->body_left ? S_BODY : S_DONE;
    return 1;
}

static void on_readable(struct conn *c, int round) {
    char scratch[65536];
    for (;;) {
        ssize_t r;
        if (c->state == S_HEAD)
            r = read(c->fd, c->head + c->head_len, HEAD_MAX - c->head_len);
        else
            r = read(c->fd, scratch, sizeof scratch);
        long long t = now_ns();
        if (r < 0 && errno == EINTR)
            continue;
        if (r < 0 && errno == EAGAIN)
            return;
        if (r < 0) {
            char msg[128];
            snprintf(msg, sizeof msg, "read: %s", strerror(errno));
            fail(c, round, msg);
            return;
        }
        if (r == 0) {
            fail(c, round, c->state == S_DONE || c->state == S_IDLE ? "connection closed by the server (keep-alive expected)"
                           : c->state == S_HEAD && c->head_len == 0 ? "connection closed before a response"
                                                                    : "connection closed mid-response (short read)");
            return;
        }
        if (c->state == S_HEAD) {
            if (c->head_len == 0)
                c->t_first_ns = t;
            c->head_len += (size_t)r;
            if (parse_head(c, round) < 0)
                return;
        } else if (c->state == S_BODY) {
            if ((unsigned long long)r > c->body_left) {
                fail(c, round, "bytes after the end of the response");
                return;
            }
            c->body_left -= (unsigned long long)r;
            if (c->body_left == 0)
                c->state = S_DONE;
        } else { /* S_DONE or S_IDLE: nothing was asked for */
            fail(c, round, "unexpected bytes on an idle connection");
            return;
        }
        if (c->state == S_DONE) {
            c->t_done_ns = t;
            return;
        }
    }
}

int main(int argc, char **argv) {
    if (argc < 5 || argc > 8) {
        fprintf(stderr, "usage: burst HOST:PORT CONNS ROUNDS PREFIX [PAUSE_MS] [TIMEOUT_MS] [HOST_HEADER]\n");
        return 2;
    }
    char host[64];
    const char *colon = strrchr(argv[1], ':');
    if (!colon || (size_t)(colon - argv[1]) >= sizeof host) {
        fprintf(stderr, "burst: HOST:PORT expected\n");
        return 2;
    }
    memcpy(host, argv[1], (size_t)(colon - argv[1]));
    host[colon - argv[1]] = 0;
    struct sockaddr_in addr = {.sin_family = AF_INET, .sin_port = htons((unsigned short)atoi(colon + 1))};
    if (inet_pton(AF_INET, host, &addr.sin_addr) != 1) {
        fprintf(stderr, "burst: bad IPv4 address %s\n", host);
        return 2;
    }
    int nconn = atoi(argv[2]), rounds = atoi(argv[3]);
    const char *prefix = argv[4];
    long pause_ms = argc > 5 ? atol(argv[5]) : 50, timeout_ms = argc > 6 ? atol(argv[6]) : 5000;
    /* the Host field sent: HOST:PORT unless given (several servers answering for one site) */
    const char *host_field = argc > 7 ? argv[7] : argv[1];
    if (nconn < 1 || nconn > MAX_CONNS || rounds < 1 || pause_ms < 0 || timeout_ms < 1 || prefix[0] != '/' ||
        strlen(prefix) > 900 || strpbrk(prefix, " \r\n")) {
        fprintf(stderr, "burst: bad arguments (CONNS 1..%d, ROUNDS >= 1, PREFIX starts with /, no blanks)\n",
                MAX_CONNS);
        return 2;
    }

    ep = epoll_create1(0);
    struct conn *cs = calloc((size_t)nconn, sizeof *cs);
    struct epoll_event *evs = calloc((size_t)nconn, sizeof *evs);
    if (ep < 0 || !cs || !evs) {
        perror("burst: setup");
        return 1;
    }

    /* connect all (non-blocking), wait for every one to be established */
    long long deadline = now_ns() + timeout_ms * 1000000LL;
    int pending = 0;
    for (int i = 0; i < nconn; i++) {
        struct conn *c = &cs[i];
        c->idx = i;
        c->fd = socket(AF_INET, SOCK_STREAM | SOCK_NONBLOCK | SOCK_CLOEXEC, 0);
        if (c->fd < 0) {
            perror("burst: socket");
            return 1;
        }
        int one = 1;
        setsockopt(c->fd, IPPROTO_TCP, TCP_NODELAY, &one, sizeof one);
        if (connect(c->fd, (struct sockaddr *)&addr, sizeof addr) < 0 && errno != EINPROGRESS) {
            fprintf(stderr, "error round=-1 conn=%d: connect: %s\n", i, strerror(errno));
            return 1;
        }
        struct epoll_event ev = {.events = EPOLLOUT, .data.ptr = c};
        epoll_ctl(ep, EPOLL_CTL_ADD, c->fd, &ev);
        pending++;
    }
    while (pending > 0) {
        long long left = (deadline - now_ns()) / 1000000LL;
        if (left <= 0) {
            fprintf(stderr, "error round=-1: %d of %d connections not established after %ld ms\n", pending, nconn,
                    timeout_ms);
            return 1;
        }
        int n = epoll_wait(ep, evs, nconn, (int)left);
        if (n < 0 && errno == EINTR)
            continue;
        for (int k = 0; k < n; k++) {
            struct conn *c = evs[k].data.ptr;
            int err = 0;
            socklen_t el = sizeof err;
            getsockopt(c->fd, SOL_SOCKET, SO_ERROR, &err, &el);
            if (err) {
                fprintf(stderr, "error round=-1 conn=%d: connect: %s\n", c->idx, strerror(err));
                return 1;
            }
            struct epoll_event ev = {.events = EPOLLIN, .data.ptr = c};
            epoll_ctl(ep, EPOLL_CTL_MOD, c->fd, &ev);
            pending--;
        }
    }

    char req[1024];
    long long requests = 0;
    for (int r = 0; r < rounds && n_errors == 0; r++) {
        sleep_ms(pause_ms); /* before the first round too: lets the server accept them all */
        int len = snprintf(req, sizeof req, "GET %s%d HTTP/1.1\r\nHost: %s\r\n\r\n", prefix, r, host_field);
        int waiting = 0;
        for (int i = 0; i < nconn; i++) {
            struct conn *c = &cs[i];
            c->state = S_HEAD;
            c->head_len = 0;
            c->status = 0;
            c->t_write_ns = now_ns();
            ssize_t w = write(c->fd, req, (size_t)len);
            if (w != len) {
                char msg[128];
                snprintf(msg, sizeof msg, "write: %s", w < 0 ? strerror(errno) : "short");
                fail(c, r, msg);
                continue;
            }
            waiting++;
        }
        deadline = now_ns() + timeout_ms * 1000000LL;
        while (waiting > 0) {
            long long left = (deadline - now_ns()) / 1000000LL;
            if (left <= 0)
                break;
            int n = epoll_wait(ep, evs, nconn, (int)left);
            if (n < 0 && errno == EINTR)
                continue;
            for (int k = 0; k < n; k++) {
                struct conn *c = evs[k].data.ptr;
                int before = c->state;
                on_readable(c, r);
                if ((before == S_HEAD || before == S_BODY) && (c->state == S_DONE || c->state == S_FAILED))
                    waiting--;
            }
        }
        for (int i = 0; i < nconn; i++) {
            struct conn *c = &cs[i];
            if (c->state == S_HEAD || c->state == S_BODY) {
                char msg[96];
                snprintf(msg, sizeof msg, "no complete response after %ld ms (timeout)", timeout_ms);
                fail(c, r, msg);
            } else if (c->state == S_DONE) {
                printf("req round=%d conn=%d status=%d latency_us=%lld ttfb_us=%lld cache=%s\n", r, i, c->status,
                       (c->t_done_ns - c->t_write_ns) / 1000, (c->t_first_ns - c->t_write_ns) / 1000, c->cache);
                requests++;
                if (c->status != 200) {
                    char msg[64];
                    snprintf(msg, sizeof msg, "status %d", c->status);
                    fail(c, r, msg);
                }
                c->state = S_IDLE;
            }
        }
    }
    printf("done requests=%lld errors=%d\n", requests, n_errors);
    return n_errors ? 1 : 0;
}
